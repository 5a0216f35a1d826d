"""Numba compilation flags for every kernel of hpcdist (one place: hpcdist.kernels and
the 16-bit float kernels of hpcdist.comm.sixteen_bit_floats).

``fastmath`` deliberately leaves out ``nnan`` and ``ninf`` so that NaN and
infinity propagate through the kernels instead of being optimised away.
Cached kernels take no compiled functions as arguments: Numba would key their
cache by the function object, new in every process (see
:func:`hpcdist.comm.sixteen_bit_floats.half_format`).
"""
import os

# GNU OpenMP workers (Numba's "omp" threading layer) spin after a parallel
# region by default. Next to NumPy's OpenBLAS, whose idle threads spin too,
# each side then waits for the other's threads to be descheduled: a short
# parallel kernel took 2-7 ms instead of 0.1 ms on 2 cores (16 ms of a 31 ms
# MLP step). Passive waiting avoids it. Set before Numba loads libgomp (at the
# first parallel launch); a value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402

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
