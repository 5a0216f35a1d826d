"""Fault handling with real processes: stall watchdog and abort_on_error.

These are serial tests (not marked ``mpi``): each starts its own
``mpiexec -n 2`` job in a subprocess and checks how that job ends.
"""
import pytest

from tests.helpers import run_mpi_script

JOB_LIMIT_S = 30  # a broken job must end well before this

_CLEAN = """
import numpy as np
import hpcdist
ctx = hpcdist.init()
out = hpcdist.allreduce(np.full(3, ctx.rank + 1.0), "sum")
hpcdist.barrier()
print(f"rank {ctx.rank} result {out.tolist()}", flush=True)
hpcdist.finalize()
"""


def test_clean_job_exits_zero(tmp_path):
    rc, elapsed, output = run_mpi_script(_CLEAN, tmp_path, n=2, timeout=120)
    assert rc == 0, output
    assert "rank 0 result [3.0, 3.0, 3.0]" in output, output
    assert "rank 1 result [3.0, 3.0, 3.0]" in output, output


_STALL = """
import time
import numpy as np
import hpcdist
ctx = hpcdist.init()
hpcdist.barrier()
if ctx.rank == 1:
    print("rank 1 going to sleep", flush=True)
    time.sleep({sleep})
print(f"rank {{ctx.rank}} entering allreduce", flush=True)
out = hpcdist.allreduce(np.ones(4), "sum")
print(f"rank {{ctx.rank}} finished {{out.tolist()}}", flush=True)
hpcdist.finalize()
"""


def test_stall_watchdog_aborts_and_names_missing_rank(tmp_path):
    rc, elapsed, output = run_mpi_script(_STALL.format(sleep=60), tmp_path, n=2,
                                         timeout=90, HPCDIST_STALL_TIMEOUT=3)
    assert rc != 0, f"job should have been aborted (rc={rc})\n{output}"
    assert elapsed < JOB_LIMIT_S, f"job took {elapsed:.1f} s to end\n{output}"
    assert "finished" not in output, output
    lines = [line for line in output.splitlines() if "have not arrived" in line]
    assert lines, f"no 'have not arrived' report in output:\n{output}"
    assert any("1" in line for line in lines), f"rank 1 not named:\n{output}"


_STALL_OUTSIDE_COLLECTIVES = """
import time
import numpy as np
import hpcdist
from hpcdist.comm.checks import validated_on_every_rank
ctx = hpcdist.init()
hpcdist.barrier()
if ctx.rank == 1:
    time.sleep(60)
{statement}
print(f"rank {{ctx.rank}} finished", flush=True)
"""

# collective steps that are no collective of the statistics: a rank that never arrives
# there must end the job as well (the name is what the stall report shows)
_OUTSIDE_COLLECTIVES = {
    "raise_on_every_rank": "with validated_on_every_rank(ctx):  # its outcome is shared\n"
                           "    pass",
    "ibroadcast": "hpcdist.ibroadcast(None if ctx.rank else np.ones(3))  # the shape first",
    "split": "ctx.split(0)",  # its arguments' agreement comes first
    "group": "ctx.group([0, 1])",
    "channel": "ctx.channel()",
}


@pytest.mark.parametrize("name", list(_OUTSIDE_COLLECTIVES))
def test_stall_watchdog_sees_a_rank_waiting_outside_any_collective(tmp_path, name):
    code = _STALL_OUTSIDE_COLLECTIVES.format(statement=_OUTSIDE_COLLECTIVES[name])
    rc, elapsed, output = run_mpi_script(code, tmp_path, n=2, timeout=90,
                                         HPCDIST_STALL_TIMEOUT=3)
    assert rc != 0, f"job should have been aborted (rc={rc})\n{output}"
    assert elapsed < JOB_LIMIT_S, f"job took {elapsed:.1f} s to end\n{output}"
    assert "finished" not in output, output
    shown = "raise_on_every_rank" if name == "split" else name
    assert f"inside {shown}" in output and "have not arrived" in output, output


_STALL_SIGNATURES = """
import time
import numpy as np
import hpcdist
ctx = hpcdist.init()
hpcdist.barrier()
if ctx.rank == 1:
    time.sleep(60)
elif ctx.rank == 2:
    hpcdist.broadcast(np.zeros((2, 3), dtype=np.float32), root=1)
hpcdist.allreduce(np.ones(4), "sum")
"""


def test_stall_reported_early_with_each_ranks_signature(tmp_path):
    """At a fifth of the timeout one rank prints every rank's pending call with its
    signature; at the timeout the abort repeats it."""
    rc, elapsed, output = run_mpi_script(_STALL_SIGNATURES, tmp_path, n=3, timeout=90,
                                         HPCDIST_STALL_TIMEOUT=8)
    assert rc != 0 and elapsed < JOB_LIMIT_S + 8, output
    assert output.count("possible stall") == 1, output  # once, from rank 0
    assert "possible stall: allreduce float64[4]" in output, output
    early = output[output.index("possible stall"):output.index("stall on rank")]
    assert "has waited" in early and "HPCDIST_STALL_TIMEOUT=8" in early, output
    assert "rank 0: inside allreduce float64[4]" in early, output
    assert "rank 1: not in any collective" in early, output
    assert "rank 2: inside broadcast float32[2,3] root=1" in early, output
    # ranks 0 and 2 both wait: whichever watchdog reaches the timeout first aborts, and
    # either way the abort names who is missing and repeats every rank's pending call
    abort = output[output.index("stall on rank"):]
    assert ("stall on rank 0" in abort
            and "Ranks that have not arrived in allreduce: ranks 1-2" in abort) or (
        "stall on rank 2" in abort
        and "Ranks that have not arrived in broadcast: ranks 0-1" in abort), output
    assert "rank 0: inside allreduce float64[4]" in abort, output
    assert "rank 1: not in any collective" in abort, output
    assert "rank 2: inside broadcast float32[2,3] root=1" in abort, output


@pytest.mark.parametrize("timeout_env,sleep", [("0", 4), ("20", 2)])
def test_stall_watchdog_does_not_fire_early_or_when_off(tmp_path, timeout_env, sleep):
    rc, elapsed, output = run_mpi_script(_STALL.format(sleep=sleep), tmp_path, n=2,
                                         timeout=120, HPCDIST_STALL_TIMEOUT=timeout_env)
    assert rc == 0, output
    assert "have not arrived" not in output, output
    for r in (0, 1):
        assert f"rank {r} finished [2.0, 2.0, 2.0, 2.0]" in output, output


_BOOM = """
import numpy as np
import hpcdist
ctx = hpcdist.init()
hpcdist.barrier()
if ctx.rank == 1:
    raise RuntimeError("boom")
print("rank 0 waiting", flush=True)
{wait}
print("rank 0 was not aborted", flush=True)
"""


@pytest.mark.parametrize("wait", ["hpcdist.barrier()",
                                  "hpcdist.allreduce(np.ones(8), 'sum')"],
                         ids=["barrier", "allreduce"])
def test_abort_on_error_ends_job(tmp_path, wait):
    # the stall watchdog must not be what ends this job
    rc, elapsed, output = run_mpi_script(_BOOM.format(wait=wait), tmp_path, n=2,
                                         timeout=90, HPCDIST_STALL_TIMEOUT=600)
    assert rc != 0, f"job should have failed (rc={rc})\n{output}"
    assert elapsed < JOB_LIMIT_S, f"job took {elapsed:.1f} s to end\n{output}"
    info = f"rc={rc} elapsed={elapsed:.1f}s output:\n{output}"
    assert "rank 1" in output, info
    assert "boom" in output, info
    assert "RuntimeError" in output, info
    assert "was not aborted" not in output, info
