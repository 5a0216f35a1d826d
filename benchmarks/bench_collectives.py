"""Collective benchmark: hpcdist vs raw mpi4py vs torch.distributed (gloo).

Run under MPI with one thread per rank, e.g.::

    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1
    mpiexec -n 2 python benchmarks/bench_collectives.py [--quick] [--sizes 8,64K,16M]

Same as ``mpiexec -n 2 python -m hpcdist.bench.collectives`` and
``hpcdist bench collectives``; writes ``benchmarks/results/collectives.json``
and ``collectives.png``. ``--help`` lists the options; the docstring of
:mod:`hpcdist.bench.collectives` describes what is timed and how.
"""

import sys
from pathlib import Path

try:
    from hpcdist.bench.collectives import main
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from hpcdist.bench.collectives import main

if __name__ == "__main__":
    sys.exit(main())
