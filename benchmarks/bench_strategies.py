"""Training strategies benchmark: time and bytes to a held-out accuracy per strategy.

Run from the repository root, outside mpiexec: it starts one ``mpiexec -n N``
job per rank count (default 1, 2 and 4) and merges them::

    python benchmarks/bench_strategies.py [--quick] [--ranks 1,2,4] [--target 0.92]

Same as ``python -m hpcdist.bench.strategies`` and ``hpcdist bench strategies
[-n N]``; writes ``benchmarks/results/strategies.json`` (and ``strategies.png``
with matplotlib). The docstring of :mod:`hpcdist.bench.strategies` says what is
measured and how.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's hpcdist
from hpcdist.bench.strategies import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
