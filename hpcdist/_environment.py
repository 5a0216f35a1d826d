"""The environment variables hpcdist reads for its own settings, and their readers.

Each reader returns the variable's value in the form its user needs, or raises
:class:`~hpcdist.exceptions.InvalidArgumentError` naming the variable, its
value and what it should be. The readers live here, below every layer, so that
:func:`environment_mistakes` can check them all before any work starts (the
``hpcdist`` command reports a bad value as a usage error) without importing
MPI, Numba or the collectives. Reading them starts no MPI.
"""

import os

from .exceptions import InvalidArgumentError

__all__ = ["FAULT_TOLERANCE_MODES", "TERMINATION_STALL_SECONDS", "check_from_env",
           "cuda_aware_from_env", "fault_tolerance_from_env", "ranks_per_node_override",
           "stall_timeout_from_env", "termination_stall_timeout_from_env",
           "environment_mistakes"]

#: the recovery modes of ``init(fault_tolerance=...)``
FAULT_TOLERANCE_MODES = ("shrink", "respawn")
#: seconds a collective may stall after a termination signal (default)
TERMINATION_STALL_SECONDS = 3.0
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def check_from_env():
    """``HPCDIST_CHECK`` as a bool (off when unset)."""
    value = os.environ.get("HPCDIST_CHECK", "0").strip().lower()
    if value in ("",) + _FALSE:
        return False
    if value in _TRUE:
        return True
    raise InvalidArgumentError(f"HPCDIST_CHECK={value!r} is not understood; use 0 or 1")


def cuda_aware_from_env():
    """``HPCDIST_CUDA_AWARE`` as True or False, or None for ``auto`` (or unset): detect."""
    setting = os.environ.get("HPCDIST_CUDA_AWARE", "auto").strip().lower()
    if setting in _FALSE:
        return False
    if setting in _TRUE:
        return True
    if setting != "auto":
        raise InvalidArgumentError(
            f"HPCDIST_CUDA_AWARE={setting!r} is not understood; use 0, 1 or auto")
    return None


def fault_tolerance_from_env():
    """``HPCDIST_FAULT_TOLERANCE`` as a mode, or None when unset, empty or ``0``/``off``."""
    value = os.environ.get("HPCDIST_FAULT_TOLERANCE", "").strip().lower()
    if value in ("", "none") + _FALSE:
        return None
    if value not in FAULT_TOLERANCE_MODES:
        raise InvalidArgumentError(f"HPCDIST_FAULT_TOLERANCE={value!r} is not understood; use "
                                   "'shrink', 'respawn' or leave it unset")
    return value


def ranks_per_node_override():
    """``HPCDIST_RANKS_PER_NODE`` as an int >= 1, or None when unset."""
    value = os.environ.get("HPCDIST_RANKS_PER_NODE", "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise InvalidArgumentError(f"HPCDIST_RANKS_PER_NODE={value!r} should be a positive integer "
                                   f"(it groups consecutive ranks into simulated nodes)")
    return int(value)


def _seconds_from_env(name, default, off=""):
    value = os.environ.get(name, str(default)).strip()
    try:
        seconds = float(value)
    except ValueError:
        seconds = None
    if seconds is None or not seconds >= 0:
        raise InvalidArgumentError(f"{name}={value!r} should be a number of seconds >= 0 {off}"
                                   .rstrip())
    return seconds


def stall_timeout_from_env():
    """``HPCDIST_STALL_TIMEOUT`` in seconds (default 300; 0 turns the watchdog off)."""
    return _seconds_from_env("HPCDIST_STALL_TIMEOUT", 300, "(0 turns the stall watchdog off)")


def termination_stall_timeout_from_env():
    """``HPCDIST_TERM_STALL_TIMEOUT`` in seconds (default :data:`TERMINATION_STALL_SECONDS`)."""
    return _seconds_from_env("HPCDIST_TERM_STALL_TIMEOUT", TERMINATION_STALL_SECONDS)


#: the reader of every environment variable hpcdist reads for its own settings
_READERS = (stall_timeout_from_env, termination_stall_timeout_from_env, check_from_env,
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
