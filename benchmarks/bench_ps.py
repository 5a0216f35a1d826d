"""RPC round-trip benchmark (the RPC part of ``hpcdist bench ps``): hpcdist.rpc's
``rpc_sync`` against a raw mpi4py ping-pong and mpi4py.futures.

Run under MPI at 2 ranks with one thread per rank::

    OMP_NUM_THREADS=1 mpiexec -n 2 python benchmarks/bench_ps.py [--quick] [--sizes 8,1M,64M]

Runs ``python -m hpcdist.bench.ps`` from this checkout; writes
``benchmarks/results/ps.json``. ``--help`` lists the options; the docstring of
:mod:`hpcdist.bench.ps` describes what is timed and how.
"""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hpcdist

if __name__ == "__main__":
    runpy.run_module("hpcdist.bench.ps", run_name="__main__", alter_sys=True)
