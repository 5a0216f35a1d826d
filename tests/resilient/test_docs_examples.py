"""The documentation's fault-tolerance examples, run in the openmpi tier.

``.ci/run``'s openmpi tier runs the serial tests of ``tests/resilient`` only, and the
other tiers run before ``.venv-openmpi`` exists on a fresh machine: this file puts
the ``.. test: ft N`` examples where Open MPI with ULFM is sure to be present.
"""

import pytest

from tests.docs.run_examples import EXAMPLES, run_example

FAULT_TOLERANCE_EXAMPLES = [pytest.param(e, id=e.id) for e in EXAMPLES if e.kind == "ft"]


def test_the_documentation_has_fault_tolerance_examples():
    assert FAULT_TOLERANCE_EXAMPLES


@pytest.mark.parametrize("example", FAULT_TOLERANCE_EXAMPLES)
def test_fault_tolerance_example_runs(example, tmp_path):
    run_example(example, tmp_path)
