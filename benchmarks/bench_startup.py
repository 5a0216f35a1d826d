"""Start-up benchmark: a first run (empty Numba cache) against a second, hpcdist compile, imports.

Run from the repository root, outside mpiexec: it starts each ``hpcdist train``
command itself (under ``mpiexec -n N`` for N > 1 ranks), with empty and filled caches::

    python benchmarks/bench_startup.py [--quick] [--ranks 1,2] [--commands forest,kmeans,mlp]

Same as ``python -m hpcdist.bench.startup`` and ``hpcdist bench startup [-n N]``;
writes ``benchmarks/results/startup.json``. ``--help`` lists the options; the
docstring of :mod:`hpcdist.bench.startup` describes what is timed and how.
"""

import sys
from pathlib import Path

try:
    from hpcdist.bench.startup import main
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from hpcdist.bench.startup import main

if __name__ == "__main__":
    sys.exit(main())
