"""MLP training benchmark: hpcdist.DDP vs torch DDP (gloo), samples per second.

Run from the repository root, outside mpiexec: it starts one ``mpiexec -n N``
job per rank count (default 1 and 2) and merges them::

    python benchmarks/bench_mlp.py [--quick] [--ranks 1,2] [--batch 256] [--steps 20]

Same as ``python -m hpcdist.bench.mlp`` and ``hpcdist bench mlp [-n N]``;
writes ``benchmarks/results/mlp.json`` and ``mlp.png``. ``--help`` lists the
options; the docstring of :mod:`hpcdist.bench.mlp` describes what is timed
and how.
"""

import sys
from pathlib import Path

try:
    from hpcdist.bench.mlp import main
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from hpcdist.bench.mlp import main

if __name__ == "__main__":
    sys.exit(main())
