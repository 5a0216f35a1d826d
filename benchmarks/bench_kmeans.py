"""K-means benchmark: hpcdist KMeans vs scikit-learn (and sklearnex), seconds per iteration.

Run from the repository root, outside mpiexec: it starts one ``mpiexec -n N``
job per rank count (default 1 and 2) and merges them::

    python benchmarks/bench_kmeans.py [--quick] [--ranks 1,2] [--samples 1000000]

Same as ``python -m hpcdist.bench.kmeans`` and ``hpcdist bench kmeans [-n N]``;
writes ``benchmarks/results/kmeans.json`` and ``kmeans.png``. ``--help`` lists
the options; the docstring of :mod:`hpcdist.bench.kmeans` describes what is
timed and how.
"""

import sys
from pathlib import Path

try:
    from hpcdist.bench.kmeans import main
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from hpcdist.bench.kmeans import main

if __name__ == "__main__":
    sys.exit(main())
