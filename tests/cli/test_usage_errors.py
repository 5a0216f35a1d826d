"""Usage errors of ``hpcdist bench`` and ``hpcdist train`` started under mpiexec: the
message is printed once (by rank 0) and every rank exits with argparse's status 2."""
import re
import subprocess
import sys

import pytest

from tests.helpers import mpiexec_path, subprocess_env

#: run by every rank: the command, then a line with the rank and the command's exit status
_REPORT_STATUS = ('status=0; "$@" || status=$?; '
                  'echo "rank ${PMI_RANK:-$OMPI_COMM_WORLD_RANK} exit $status"; exit $status')


def _at_two_ranks(argv, tmp_path):
    command = [mpiexec_path(), "-n", "2", "sh", "-c", _REPORT_STATUS, "sh", sys.executable,
               "-m", "hpcdist.cli.main", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env=subprocess_env(), stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("argv, message", [
    (["bench", "compression", "--bogus"], "unrecognized arguments: --bogus"),
    (["bench", "compression", "--elements", "10"], "--elements=10 should be >= 1024"),
    (["bench", "kmeans", "--ranks", "x"], "argument --ranks: 'x' should be a comma list"),
    (["bench", "collectives", "-n"], "-n needs a number of ranks"),
    (["train", "mlp", "--hidden-layer-sizes", "64,x"], "'64,x' should be comma-separated"),
    (["train", "forest", "--data", "data.h5", "--x", "X"], "needs targets: pass --y NAME"),
], ids=["bench-unknown", "bench-value", "bench-type", "bench-ranks", "train-type",
        "train-missing"])
def test_printed_once_and_every_rank_exits_2(tmp_path, argv, message):
    returncode, output = _at_two_ranks(argv, tmp_path)
    assert returncode == 2, output
    assert output.count(message) == 1 and output.count("usage: hpcdist") == 1, output
    assert sorted(re.findall(r"rank \d exit \d+", output)) == ["rank 0 exit 2",
                                                               "rank 1 exit 2"], output
