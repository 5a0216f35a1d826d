"""Sharded data parallelism and activation recomputation: memory saved, time paid.

Run from the repository root under mpiexec at 4 ranks::

    OMP_NUM_THREADS=1 mpiexec -n 4 python benchmarks/bench_sharded.py [--quick]

Same as ``python -m hpcdist.bench.sharded`` and ``mpiexec -n 4 hpcdist bench
sharded``; writes ``benchmarks/results/sharded.json``. The docstring of
:mod:`hpcdist.bench.sharded` says what is measured and how.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hpcdist
from hpcdist.bench.sharded import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
