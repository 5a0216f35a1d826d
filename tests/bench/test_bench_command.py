"""Every benchmark report records the command that runs it again (``"command"``), taken
from the options its parser read and the launcher that started it."""
import json

from hpcdist.bench import common


def test_outside_a_launcher_the_command_is_the_benchmark_and_its_options():
    assert common.invoked_command("hpcdist bench kmeans", ["--quick", "--ranks", "1,2"],
                                  environ={}) == "hpcdist bench kmeans --quick --ranks 1,2"


def test_under_mpiexec_the_launcher_and_rank_count_come_first():
    hydra = {"PMI_RANK": "0", "PMI_SIZE": "4"}
    assert common.invoked_command("hpcdist bench collectives", ["--quick"], environ=hydra) == \
        "mpiexec -n 4 hpcdist bench collectives --quick"
    open_mpi = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert common.invoked_command("hpcdist bench ps", [], environ=open_mpi) == \
        "mpiexec -n 2 hpcdist bench ps"


def test_in_a_slurm_step_the_launcher_is_srun():
    step = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "8"}
    assert common.invoked_command("hpcdist bench mlp", ["--no-torch"], environ=step) == \
        "srun -n 8 hpcdist bench mlp --no-torch"


def test_arguments_are_quoted_for_a_shell():
    assert common.invoked_command("hpcdist bench checkpoint", ["--dir", "/tmp/my dir"],
                                  environ={}) == "hpcdist bench checkpoint --dir '/tmp/my dir'"


def test_the_parser_records_the_command_and_the_report_gets_it_after_the_name(tmp_path):
    parser = common.benchmark_parser("demo", "a test benchmark", quick="short")
    args = parser.parse_args(["--quick", "--output-dir", str(tmp_path)])
    common.write_report({"benchmark": "demo", "machine": {}, "summary": {}}, args.output_dir,
                        args.name)
    report = json.loads((tmp_path / "demo.json").read_text())
    assert list(report)[:2] == ["benchmark", "command"]
    assert report["command"].endswith(f"hpcdist bench demo --quick --output-dir {tmp_path}")
    kept = {"benchmark": "demo", "command": "mpiexec -n 3 hpcdist bench demo"}
    common.write_report(kept, tmp_path, "kept")
    assert json.loads((tmp_path / "kept.json").read_text())["command"] == kept["command"]


def test_reports_record_the_versions_of_the_baselines_installed():
    versions = common.installed_versions()
    assert "scikit-learn" in versions and "h5py" in versions
    assert common.installed_versions(("scikit-learn", "no-such-distribution")) == {
        "scikit-learn": versions["scikit-learn"]}
