"""Numba compilation flags for every kernel in :mod:`hpcdist.kernels` (one place).

``fastmath`` deliberately leaves out ``nnan`` and ``ninf`` so that NaN and
infinity propagate through the kernels instead of being optimised away.
``cache=True`` is only used on leaf kernels that take no function arguments.
"""
import numba

__all__ = ["JIT", "JIT_PARALLEL", "njit", "prange", "num_threads"]

_FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}

#: Serial leaf kernels.
JIT = dict(nogil=True, fastmath=_FASTMATH, cache=True)
#: Memory-bound kernels over whole arrays, where threads pay.
JIT_PARALLEL = dict(JIT, parallel=True)

njit = numba.njit
prange = numba.prange


def num_threads():
    """Number of threads Numba's parallel kernels use right now."""
    return numba.get_num_threads()
