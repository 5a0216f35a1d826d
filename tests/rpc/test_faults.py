"""hpcdist.rpc with real processes: a rank killed mid-call, MPI without THREAD_MULTIPLE."""

from tests.helpers import run_mpi_script

JOB_LIMIT_S = 30  # the job must end well before this

_KILLED = """
import os, signal, time
import hpcdist
from hpcdist import rpc

def die():
    print(f"rank {hpcdist.get_rank()} dies in its handler", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

ctx = hpcdist.init()
rpc.init_rpc()
ctx.barrier()
if ctx.rank == 0:
    print("rank 0 calls", flush=True)
    rpc.rpc_sync(1, die)
    print("rank 0 finished the call", flush=True)
time.sleep(120 if ctx.rank else 0)
rpc.shutdown()
print(f"rank {ctx.rank} finished", flush=True)
"""


def test_a_rank_killed_mid_call_ends_the_job(tmp_path):
    rc, elapsed, output = run_mpi_script(_KILLED, tmp_path, n=2, timeout=90)
    assert "dies in its handler" in output, output
    assert rc != 0, f"the job should fail (rc={rc})\n{output}"
    assert elapsed < JOB_LIMIT_S, f"the job took {elapsed:.1f} s to end\n{output}"
    assert "finished" not in output, output


_SERIALIZED = """
import mpi4py
mpi4py.rc.thread_level = "serialized"
import hpcdist
from hpcdist import rpc
hpcdist.init()
try:
    rpc.init_rpc()
except rpc.RpcError as error:
    print("refused:", error, flush=True)
"""


def test_init_rpc_names_the_thread_level_when_it_is_not_multiple(tmp_path):
    rc, _, output = run_mpi_script(_SERIALIZED, tmp_path, n=1, timeout=60)
    assert rc == 0, output
    assert "refused: hpcdist.rpc needs MPI_THREAD_MULTIPLE" in output, output
    assert "THREAD_SERIALIZED" in output, output
