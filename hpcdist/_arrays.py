"""Array helpers every layer uses: which array library an array belongs to, host copies.

CuPy is an optional extra: it is imported only when an array of its own is
seen, so that NumPy-only installations never need it.
"""

import numpy as np

__all__ = ["is_cupy", "array_module", "to_host"]


def is_cupy(x):
    """Whether ``x`` is a CuPy array (checked without importing CuPy)."""
    return type(x).__module__.split(".")[0] == "cupy"


def array_module(x):
    """``cupy`` for a CuPy array, else ``numpy``.

    Parameters
    ----------
    x : object
        An array (anything else counts as NumPy).

    Returns
    -------
    module
        The module whose functions compute on ``x``'s kind of array.
    """
    if is_cupy(x):
        import cupy
        return cupy
    return np


def to_host(array):
    """A NumPy array of ``array``; device arrays are copied to the host.

    Parameters
    ----------
    array : array_like
        A NumPy array (returned as it is), a device array exposing
        ``__cuda_array_interface__`` and ``get`` (CuPy), or anything
        :func:`numpy.asarray` takes.

    Returns
    -------
    ndarray
    """
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "__cuda_array_interface__") and hasattr(array, "get"):
        return array.get()
    return np.asarray(array)
