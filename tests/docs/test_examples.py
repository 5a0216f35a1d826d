"""Every code example of the documentation and README.rst runs (part 1 of 2).

The examples are found and their markers read by :mod:`tests.docs.examples`
(the convention is written down in docs/contributing.rst) and run by
:mod:`tests.docs.run_examples`; test_examples_part2.py runs the other half.
"""

from collections import Counter

import pytest

from tests.docs.run_examples import EXAMPLES, MARKER_ERRORS, params, run_example


def test_every_python_example_is_marked():
    assert not MARKER_ERRORS, "\n".join(MARKER_ERRORS)


def test_examples_are_counted(capsys):
    """The examples found, by kind (printed for the CI log; there must be some)."""
    counts = Counter(e.kind for e in EXAMPLES)
    with capsys.disabled():
        print("\ndocumentation examples: " + ", ".join(
            f"{counts[k]} {k}" for k in ("serial", "mpi", "ft", "gpu")) +
            f" ({len(EXAMPLES)} in all)")
    assert counts["serial"] and counts["mpi"]


@pytest.mark.parametrize("example", params(0))
def test_example_runs(example, tmp_path):
    run_example(example, tmp_path)
