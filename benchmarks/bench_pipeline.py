"""Pipeline schedules benchmark: GPipe and 1F1B against one rank and data parallelism.

Run from the repository root, outside mpiexec: it starts one ``mpiexec -n N``
job per rank count (default 1, 2 and 4) and merges them::

    python benchmarks/bench_pipeline.py [--quick] [--ranks 1,2,4]

Same as ``python -m hpcdist.bench.pipeline``; writes
``benchmarks/results/pipeline.json``. ``--help`` lists the options; the
docstring of :mod:`hpcdist.bench.pipeline` describes what is measured.
"""

import sys
from pathlib import Path

try:
    from hpcdist.bench.pipeline import main
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from hpcdist.bench.pipeline import main

if __name__ == "__main__":
    sys.exit(main())
