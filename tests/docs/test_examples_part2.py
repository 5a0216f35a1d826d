"""Every code example of the documentation and README.rst runs (part 2 of 2).

See test_examples.py; the examples are split so that two pytest-xdist workers
share them.
"""

import pytest

from tests.docs.run_examples import params, run_example


@pytest.mark.parametrize("example", params(1))
def test_example_runs(example, tmp_path):
    run_example(example, tmp_path)
