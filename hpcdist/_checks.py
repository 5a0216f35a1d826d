"""Argument checks shared by several layers (private)."""

import operator
import os

import numpy as np

from .exceptions import (
    DataFileError,
    DataFileNotFoundError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
)

__all__ = ["check_bool", "check_int", "is_integer", "path_of", "check_writable_file"]


def path_of(path, what):
    """``path`` as a str or bytes (``os.fspath``), or an error from ``what`` naming it."""
    try:
        return os.fspath(path)
    except TypeError:
        raise InvalidArgumentTypeError(f"{what}: path={path!r} should be a str or "
                                       "path-like naming a file") from None


def check_writable_file(path, what):
    """Raise, before anything is written, when no file can be written at ``path``: its
    directory is missing (DataFileNotFoundError), or ``path`` is a directory or not
    writable (DataFileError); ``what`` (e.g. ``"save_hdf5"``) begins the message."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise DataFileNotFoundError(f"{what}: no directory {folder!r} to write {path!r} in; "
                                    "create it first")
    if (os.path.isdir(path) or not os.access(folder, os.W_OK)
            or (os.path.exists(path) and not os.access(path, os.W_OK))):
        raise DataFileError(f"{what}: {path!r} cannot be written (a directory, or permission "
                            "denied); choose a writable path")


def check_bool(value, name):
    """``value`` as a bool: True, False (NumPy's too) or the integers 1 and 0.

    A string or None is refused rather than taken for its truth value
    (``"no"`` is truthy). ``name`` names the argument in the message.
    """
    if isinstance(value, (bool, np.bool_)) or (is_integer(value) and value in (0, 1)):
        return bool(value)
    raise InvalidArgumentTypeError(f"{name}={value!r} should be True or False")


def is_integer(value):
    """Whether ``value`` is a Python or NumPy integer and not a bool (a rank, a tag, a
    count given as ``True`` is a bug upstream, never 1)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_int(value, name, minimum=None, maximum=None, *, hint=""):
    """``value`` as a Python int within ``[minimum, maximum]``, or an error naming it.

    Booleans and non-integral numbers (``10.0``, ``"3"``) are refused: a
    size or an index given as a float is almost always a bug upstream.

    Parameters
    ----------
    value : object
        The value to check: an int, a NumPy integer, anything with
        ``__index__``.
    name : str
        The argument's name, for the messages.
    minimum, maximum : int, optional
        Inclusive bounds; None leaves that side open.
    hint : str, default=""
        Appended to the messages, e.g. ``" (or None to keep every step)"``.

    Returns
    -------
    int

    Raises
    ------
    TypeError
        ``value`` is a bool or not an integer.
    ValueError
        ``value`` is out of bounds.
    """
    try:
        integer = operator.index(value)
    except TypeError:
        integer = None
    if integer is None or isinstance(value, (bool, np.bool_)):
        raise InvalidArgumentTypeError(f"{name}={value!r} should be an integer{hint}")
    value = integer
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        if maximum is None:
            span = f">= {minimum}"
        elif minimum is None:
            span = f"<= {maximum}"
        else:
            span = f"in [{minimum}, {maximum}]"
        raise InvalidArgumentError(f"{name}={value} should be {span}{hint}")
    return value
