"""Mistakes in hpcdist's environment variables, and the last tracebacks of the command
line: one line, exit status 2, printed once, at 1 and 2 ranks."""
import re
import subprocess
import sys

import pytest

from tests.helpers import mpiexec_path, subprocess_env

#: run by every rank: the command, then a line with the rank and the command's exit status
_REPORT_STATUS = ('status=0; "$@" || status=$?; '
                  'echo "rank ${PMI_RANK:-$OMPI_COMM_WORLD_RANK} exit $status"; exit $status')

ENVIRONMENT_MISTAKES = [
    ("HPCDIST_STALL_TIMEOUT", "abc", "HPCDIST_STALL_TIMEOUT='abc' should be a number of seconds"),
    ("HPCDIST_TERM_STALL_TIMEOUT", "-1",
     "HPCDIST_TERM_STALL_TIMEOUT='-1' should be a number of seconds >= 0"),
    ("HPCDIST_CHECK", "maybe", "HPCDIST_CHECK='maybe' is not understood; use 0 or 1"),
    ("HPCDIST_CUDA_AWARE", "sometimes",
     "HPCDIST_CUDA_AWARE='sometimes' is not understood; use 0, 1 or auto"),
    ("HPCDIST_RANKS_PER_NODE", "0", "HPCDIST_RANKS_PER_NODE='0' should be a positive integer"),
    ("HPCDIST_FAULT_TOLERANCE", "always", "HPCDIST_FAULT_TOLERANCE='always' is not understood"),
]


def _hpcdist(argv, tmp_path, ranks=1, **env):
    command = [sys.executable, "-m", "hpcdist.cli.main", *argv]
    if ranks > 1:
        command = [mpiexec_path(), "-n", str(ranks), "sh", "-c", _REPORT_STATUS, "sh", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env=subprocess_env(**env), stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout + done.stderr


def _one_line_exit_2(returncode, output, message):
    assert returncode == 2, output
    assert output.count(message) == 1, output
    assert "Traceback" not in output and "Abort" not in output, output
    statuses = re.findall(r"rank \d exit \d+", output)
    assert all(status.endswith(" exit 2") for status in statuses), output


@pytest.mark.parametrize("variable, value, message", ENVIRONMENT_MISTAKES,
                         ids=[variable for variable, _, _ in ENVIRONMENT_MISTAKES])
@pytest.mark.parametrize("argv", [["info"], ["train", "kmeans", "--max-iter", "1"],
                                  ["run", "-n", "1", "--", "true"]],
                         ids=["info", "train", "run"])
def test_environment_mistake_is_a_usage_error(tmp_path, argv, variable, value, message):
    _one_line_exit_2(*_hpcdist(argv, tmp_path, **{variable: value}), message)


def test_environment_mistake_at_two_ranks(tmp_path):
    _one_line_exit_2(*_hpcdist(["train", "kmeans"], tmp_path, ranks=2,
                               HPCDIST_STALL_TIMEOUT="abc"),
                     "HPCDIST_STALL_TIMEOUT='abc' should be a number of seconds")


@pytest.mark.parametrize("ranks", [1, 2])
def test_checkpoint_directory_that_cannot_be_created(tmp_path, ranks):
    # /proc refuses new entries even to root, whom os.access lets write anywhere
    _one_line_exit_2(*_hpcdist(["train", "kmeans", "--checkpoint-dir", "/proc/none/ckpt"],
                               tmp_path, ranks=ranks),
                     "cannot create or clean checkpoint directory /proc/none/ckpt")


@pytest.mark.parametrize("argv, message", [
    (["bench", "collectives", "-n", "abc"], "bench: -n 'abc' is not a number of ranks"),
    (["bench", "collectives", "--np", "2.5"], "bench: --np '2.5' is not a number of ranks"),
    (["bench", "collectives", "-n"], "bench: -n needs a number of ranks"),
])
def test_bench_ranks_name_the_bad_value(tmp_path, argv, message):
    _one_line_exit_2(*_hpcdist(argv, tmp_path), message)
