"""Numba flags of the forest's kernels: :data:`hpcdist._numba.JIT` with fastmath off.

No validation happens in the kernels: the estimators validate, the drivers
of :mod:`hpcdist.ml.forest` allocate and loop, the kernels compute.

Determinism
    A forest must come out bit-identical at any number of ranks and whichever
    code path (level-wise over ranks, or a whole subtree on one rank) grew a
    node. Every quantity a split decision depends on is therefore an exact
    integer (counts, fixed-point sums), and the floating-point formulas that
    rank candidate splits live in one function
    (:func:`~hpcdist.ml.forest._split_kernels.best_threshold`) that both paths
    call. The kernels are compiled *without* fastmath: with reassociation or
    contraction allowed, the compiler could round the same formula differently
    in different callers. Random numbers come from counter-based hashes
    (:mod:`~hpcdist.ml.forest._hash_kernels`), never from a generator whose
    state depends on how much was drawn before.

Compile time
    Numba compiles every ``@njit`` function as a module of its own, optimises
    it and generates its machine code; a caller links the modules of its
    callees into its own and optimises and generates the whole again, so
    each level of a call chain compiles everything below it once more.
    Helpers that only kernels call therefore take :data:`HELPER` (no entry
    points for Python or C callers, which would be compiled and optimised
    with them), and the steps of the tree grower that have one call site
    take :data:`INLINED` (Numba puts their code into the caller's before
    typing it, so they are compiled once, inside the caller). Kernels that
    run over rows in parallel are serial kernels over a range of rows that
    :func:`hpcdist._numba.in_threads` runs on several threads: a ``prange``
    loop's body would be compiled a second time as the parallel region.

Numba's cache checks only the source file of the cached function: after
editing a kernel that other modules' kernels call (:mod:`._hash_kernels`,
:mod:`._split_kernels`), delete the forest's ``*.nbi`` index files from the
cache folder (:func:`hpcdist._numba.cache_dir`).
"""
from ..._numba import JIT

__all__ = ["EXACT", "EXACT_PARALLEL", "HELPER", "INLINED"]

#: Flags of the serial tree kernels (cached, no fastmath).
EXACT = dict(JIT, fastmath=False)
#: Flags of the tree kernels that run in parallel over rows, nodes or subtrees.
EXACT_PARALLEL = dict(EXACT, parallel=True)
#: Flags of the helpers that only other kernels call. They have no entry point for
#: Python: calling one from Python crashes the interpreter (tests call them from a
#: small ``@njit`` function).
HELPER = dict(EXACT, no_cpython_wrapper=True, no_cfunc_wrapper=True)
#: Flags of a helper whose code goes into its caller's (one call site each).
INLINED = dict(HELPER, inline="always")
