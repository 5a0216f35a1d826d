"""The environment variables hpcdist reads, checked together.

Each variable is read where it is used (``HPCDIST_STALL_TIMEOUT`` and
``HPCDIST_TERM_STALL_TIMEOUT`` by the stall watchdog, ``HPCDIST_CHECK`` and
``HPCDIST_FAULT_TOLERANCE`` by :func:`hpcdist.init`, ``HPCDIST_CUDA_AWARE`` by
the device layer, ``HPCDIST_RANKS_PER_NODE`` by the topology); this module
runs the same readers at once, so that a program can report a value it does
not understand before any work starts (the ``hpcdist`` command does, as a
usage error). Reading them starts no MPI.
"""

from ..exceptions import InvalidArgumentError
from .default import _check_from_env
from .devices import cuda_aware_from_env
from .faults import fault_tolerance_from_env
from .topology import ranks_per_node_override
from .watchdog import TERMINATION_STALL_SECONDS, _seconds_from_env, stall_timeout_from_env

__all__ = ["environment_mistakes"]


def _term_stall_timeout_from_env():
    return _seconds_from_env("HPCDIST_TERM_STALL_TIMEOUT", TERMINATION_STALL_SECONDS)


#: the reader of every environment variable hpcdist reads for its own settings
_READERS = (stall_timeout_from_env, _term_stall_timeout_from_env, _check_from_env,
            fault_tolerance_from_env, cuda_aware_from_env, ranks_per_node_override)


def environment_mistakes():
    """What is wrong with hpcdist's environment variables, one message each.

    Returns
    -------
    list of str
        Empty when every variable that is set holds a value hpcdist understands;
        else each reader's message, naming the variable, its value and what it
        should be (e.g. ``HPCDIST_STALL_TIMEOUT='abc' should be a number of
        seconds >= 0 (0 turns the stall watchdog off)``).
    """
    mistakes = []
    for read in _READERS:
        try:
            read()
        except InvalidArgumentError as error:
            mistakes.append(str(error))
    return mistakes
