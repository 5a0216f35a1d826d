"""Checkpoint benchmark: hpcdist.checkpoint save/restore vs one raw h5py writer, GiB/s.

Run from the repository root, outside mpiexec: it starts one ``mpiexec -n N``
job per rank count (default 1 and 2) and merges them::

    python benchmarks/bench_checkpoint.py [--quick] [--ranks 1,2] [--size 1G] [--dir PATH]

Same as ``python -m hpcdist.bench.checkpoint`` and ``hpcdist bench checkpoint
[-n N]``; writes ``benchmarks/results/checkpoint.json`` and ``checkpoint.png``.
``--help`` lists the options; the docstring of :mod:`hpcdist.bench.checkpoint`
describes what is timed and how.
"""

import sys
from pathlib import Path

try:
    from hpcdist.bench.checkpoint import main
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from hpcdist.bench.checkpoint import main

if __name__ == "__main__":
    sys.exit(main())
