"""Compression benchmark: hpcdist's kernels vs NumPy and memcpy; compressed vs dense allreduce.

Run under MPI with one thread per rank, e.g.::

    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1
    mpiexec -n 2 python benchmarks/bench_compression.py [--quick] [--elements 16777216]

Same as ``hpcdist bench compression``; writes ``benchmarks/results/compression.json``.
The docstring of :mod:`hpcdist.bench.compression` describes what is timed and the
alpha-beta model.
"""

import sys
from pathlib import Path

try:
    from hpcdist.bench.compression import main
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from hpcdist.bench.compression import main

if __name__ == "__main__":
    sys.exit(main())
