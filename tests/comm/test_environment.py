"""environment_mistakes: every hpcdist environment variable read at once, each mistake
named with its value (the command line reports them as usage errors)."""
import pytest

from hpcdist._environment import environment_mistakes
from tests.cli.test_environment_errors import ENVIRONMENT_MISTAKES

_VARIABLES = [variable for variable, _, _ in ENVIRONMENT_MISTAKES]


@pytest.fixture
def clean_environment(monkeypatch):
    for variable in _VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


def test_unset_and_good_values_are_no_mistake(clean_environment):
    assert environment_mistakes() == []
    for variable, value in [("HPCDIST_STALL_TIMEOUT", "0"), ("HPCDIST_CHECK", "yes"),
                            ("HPCDIST_CUDA_AWARE", "auto"), ("HPCDIST_RANKS_PER_NODE", "2"),
                            ("HPCDIST_FAULT_TOLERANCE", "off"),
                            ("HPCDIST_TERM_STALL_TIMEOUT", "1.5")]:
        clean_environment.setenv(variable, value)
    assert environment_mistakes() == []


@pytest.mark.parametrize("variable, value, message", ENVIRONMENT_MISTAKES, ids=_VARIABLES)
def test_each_mistake_is_named(clean_environment, variable, value, message):
    clean_environment.setenv(variable, value)
    mistakes = environment_mistakes()
    assert len(mistakes) == 1 and message in mistakes[0], mistakes


def test_every_mistake_is_listed(clean_environment):
    for variable, value, _ in ENVIRONMENT_MISTAKES:
        clean_environment.setenv(variable, value)
    assert len(environment_mistakes()) == len(ENVIRONMENT_MISTAKES)
