"""Dask phases in real ``mpiexec -n 4`` jobs: a quiet close, and a lost rank ends the job.

Serial tests (not marked ``mpi``): each starts its own job in a subprocess,
so they run once per environment.
"""
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("distributed", reason="the dask extra (distributed) is not installed")

from hpcdist.comm.threads import THREAD_VARIABLES  # noqa: E402
from tests.helpers import mpiexec_path, run_mpi_script, subprocess_env  # noqa: E402

RANKS = 4
JOB_LIMIT_S = 40  # a job that lost a rank must end well before this

_TWO_PHASES = """
import time
import numpy as np
import hpcdist
import hpcdist.dask

ctx = hpcdist.init()

def threads_in_a_task(_):
    import numba, threadpoolctl
    return numba.get_num_threads(), max(pool["num_threads"]
                                        for pool in threadpoolctl.threadpool_info())

def prepare(client, n):
    import dask.array as da
    squares = client.gather(client.map(lambda x: x * x, range(n)))
    threads = set(client.gather(client.map(threads_in_a_task, range(8), pure=False)))
    return sum(squares), float(da.ones((n, 10), chunks=(4, 10)).sum().compute()), threads

timings = []
for n, threads_per_worker in ((10, 1), (20, 2)):
    start = time.perf_counter()
    result = hpcdist.dask.run(prepare, n, threads_per_worker=threads_per_worker)
    timings.append(time.perf_counter() - start)
    total = hpcdist.allreduce(np.ones(1))[0]
    print(f"rank {ctx.rank} phase {result} allreduce {total}", flush=True)
if ctx.rank == 0:
    print("seconds per phase: " + " ".join(f"{t:.2f}" for t in timings), flush=True)
"""


def test_a_normal_close_prints_nothing_on_stderr_and_leaves_no_files(tmp_path):
    """Also: without thread variables in the environment, a task runs Numba and BLAS on one
    thread (the machine has more cores), with one and with two threads per worker."""
    work, scratch = tmp_path / "work", tmp_path / "tmp"
    work.mkdir()
    scratch.mkdir()
    script = work / "job.py"
    script.write_text(textwrap.dedent(_TWO_PHASES))
    env = {name: value for name, value in subprocess_env(TMPDIR=scratch).items()
           if name not in THREAD_VARIABLES}
    completed = subprocess.run([mpiexec_path(), "-n", str(RANKS), sys.executable, str(script)],
                               env=env, cwd=str(work), capture_output=True, text=True,
                               timeout=180, stdin=subprocess.DEVNULL)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    for rank in range(RANKS):
        for result in ("(285, 100.0, {(1, 1)})", "(2470, 200.0, {(1, 1)})"):
            assert f"rank {rank} phase {result} allreduce {float(RANKS)}" in output, output
    assert completed.stderr == "", completed.stderr
    assert sorted(path.name for path in work.iterdir()) == ["job.py"]
    assert list(scratch.iterdir()) == []


_KILLED_WORKER = """
import os, signal, time
import hpcdist
import hpcdist.dask

ctx = hpcdist.init()

def lose_a_worker(client):
    def die():
        {how}
    worker = sorted(client.scheduler_info(n_workers=-1)["workers"])[0]
    print("losing a worker", flush=True)
    client.submit(die, workers=[worker], pure=False){wait}
    time.sleep(120)

hpcdist.dask.run(lose_a_worker)
print(f"rank {{ctx.rank}} went on", flush=True)
"""


@pytest.mark.parametrize("how, wait", [
    ("os.kill(os.getpid(), signal.SIGKILL)", ".result()"),  # the rank dies
    ("pass", "\n    client.retire_workers([worker], close_workers=True)"),  # the rank stays
], ids=["killed", "retired"])
def test_a_lost_worker_rank_ends_the_job(tmp_path, how, wait):
    code = _KILLED_WORKER.format(how=how, wait=wait)
    # TMPDIR: the aborted ranks cannot remove their workers' temporary directories
    rc, elapsed, output = run_mpi_script(code, tmp_path, n=RANKS, timeout=120, TMPDIR=tmp_path)
    assert "losing a worker" in output, output
    assert rc != 0, output
    assert elapsed < JOB_LIMIT_S, f"the job took {elapsed:.1f} s to end\n{output}"
    assert "went on" not in output, output
    if how == "pass":  # no launcher ends it here: the scheduler's rank aborts the job
        assert "left the scheduler before the Dask phase ended" in output, output
