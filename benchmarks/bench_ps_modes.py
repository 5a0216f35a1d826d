"""The parameter server's modes with stragglers: sync, async and bounded staleness.

Run from a checkout; it starts its own mpiexec jobs at 2 and 4 ranks::

    OMP_NUM_THREADS=1 python benchmarks/bench_ps_modes.py [--quick] [--ranks 2,4]

Runs ``python -m hpcdist.bench.ps_modes`` from this checkout; writes
``benchmarks/results/ps-modes.json``. The docstring of
:mod:`hpcdist.bench.ps_modes` describes what is timed and how.
"""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hpcdist

if __name__ == "__main__":
    runpy.run_module("hpcdist.bench.ps_modes", run_name="__main__", alter_sys=True)
