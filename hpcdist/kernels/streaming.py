"""A copy that bypasses the caches: non-temporal stores, for snapshots nothing reads soon.

An ordinary copy first reads every destination cache line into the cache
(to write part of it) and leaves the copy there, evicting the data the
program goes on using: a snapshot of a model taken every training step
makes the next step fetch its weights again. Non-temporal (streaming)
stores write whole lines straight to memory, so the copy moves half the
bytes and the caches keep what they held.
"""
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .._numba import JIT, in_threads, njit
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ._arrays import is_cupy

__all__ = ["stream_copy", "STREAM_MIN_BYTES"]

#: bytes per non-temporal store: one 256-bit vector (AVX2 and AVX-512 machines alike; two
#: 128-bit stores on machines without AVX)
_VECTOR_BYTES = 32

#: below this many bytes an ordinary copy is as fast and its result stays cached
STREAM_MIN_BYTES = 1 << 18

#: bytes per thread below which one thread copies alone
_BYTES_PER_THREAD = 1 << 22


@intrinsic
def _stream_vector(typingctx, dst, src, offset):
    """Copy ``_VECTOR_BYTES`` bytes at byte ``offset`` of two uint8 arrays; ``dst`` at
    ``offset`` is aligned to ``_VECTOR_BYTES`` (``src`` need not be)."""
    def codegen(context, builder, signature, args):
        dst_array = context.make_array(signature.args[0])(context, builder, args[0])
        src_array = context.make_array(signature.args[1])(context, builder, args[1])
        vector = ir.VectorType(ir.IntType(64), _VECTOR_BYTES // 8).as_pointer()
        source = builder.bitcast(builder.gep(src_array.data, [args[2]]), vector)
        target = builder.bitcast(builder.gep(dst_array.data, [args[2]]), vector)
        store = builder.store(builder.load(source, align=1), target, align=_VECTOR_BYTES)
        store.set_metadata("nontemporal",
                           builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()
    return types.void(dst, src, offset), codegen


@intrinsic
def _store_fence(typingctx):
    """Order the streaming stores before any later store (they are weakly ordered)."""
    def codegen(context, builder, signature, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()
    return types.void(), codegen


@njit(**JIT)
def _stream_copy_kernel(dst, src, first, stop):
    """``dst[first:stop] = src[first:stop]`` for uint8 arrays, streaming the aligned middle."""
    aligned = first + (-(dst.ctypes.data + first)) % _VECTOR_BYTES
    aligned = min(aligned, stop)
    for i in range(first, aligned):
        dst[i] = src[i]
    i = aligned
    while i + _VECTOR_BYTES <= stop:
        _stream_vector(dst, src, i)
        i += _VECTOR_BYTES
    for j in range(i, stop):
        dst[j] = src[j]
    _store_fence()


def stream_copy(out, x):
    """``out[...] = x`` with non-temporal stores, for a copy nothing reads soon.

    Parameters
    ----------
    out : ndarray, C-contiguous and writable
    x : ndarray of the same dtype and shape, C-contiguous

    Returns
    -------
    out : the same array, holding a copy of ``x``.

    Notes
    -----
    Arrays under :data:`STREAM_MIN_BYTES` and CuPy arrays get an ordinary
    copy. Large copies are split over Numba's threads (:func:`hpcdist.kernels`
    kernels' thread count).
    """
    for name, array in (("out", out), ("x", x)):
        if not all(hasattr(array, attribute) for attribute in ("dtype", "shape", "flags")):
            raise InvalidArgumentTypeError(f"stream_copy: {name} should be an array, got "
                                           f"{type(array).__name__}")
    if out.dtype != x.dtype or out.shape != x.shape:
        raise InvalidArgumentError(f"stream_copy: out is {out.dtype}{list(out.shape)} and x is "
                                   f"{x.dtype}{list(x.shape)}; they should be the same")
    if is_cupy(out) or is_cupy(x):
        out[...] = x
        return out
    if not (out.flags.c_contiguous and x.flags.c_contiguous):
        raise InvalidArgumentError("stream_copy: out and x should be C-contiguous; pass "
                                   "numpy.ascontiguousarray(...) of them")
    if not out.flags.writeable:
        raise InvalidArgumentError("stream_copy: out is read-only; pass a writable array")
    if out.nbytes < STREAM_MIN_BYTES:
        np.copyto(out, x)
        return out
    target, source = out.reshape(-1).view(np.uint8), x.reshape(-1).view(np.uint8)
    if out.nbytes < 2 * _BYTES_PER_THREAD:
        _stream_copy_kernel(target, source, 0, out.nbytes)
    else:
        in_threads(_stream_copy_kernel, out.nbytes, target, source)
    return out
