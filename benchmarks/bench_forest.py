"""Random forest benchmark: hpcdist vs scikit-learn (and scikit-learn-intelex), fit seconds.

Run from the repository root, outside mpiexec: it starts one ``mpiexec -n N``
job per rank count (default 1 and 2) and merges them::

    python benchmarks/bench_forest.py [--quick] [--ranks 1,2] [--trees 100] [--max-depth 16]

Same as ``python -m hpcdist.bench.forest`` and ``hpcdist bench forest [-n N]``;
writes ``benchmarks/results/forest.json``. ``--help`` lists the options; the
docstring of :mod:`hpcdist.bench.forest` describes what is timed and how.
"""

import sys
from pathlib import Path

try:
    from hpcdist.bench.forest import main
except ImportError:  # run from a source checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from hpcdist.bench.forest import main

if __name__ == "__main__":
    sys.exit(main())
