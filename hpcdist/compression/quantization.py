"""Quantizing compressors: stochastic QSGD levels and 1-bit signs with scales."""
import numpy as np

from .. import kernels
from ..comm.mpi import world_rank
from ..exceptions import InvalidArgumentError
from .base import Compressor, finish, kernel_dtype, kernel_input, validate_positive_int

__all__ = ["QSGDCompressor", "SignCompressor"]


class QSGDCompressor(Compressor):
    """QSGD: ``x ~ norm * sign(x) * l / levels`` with ``l`` rounded stochastically.

    Unbiased (``E[decompress(compress(x))] = x``). Payload
    ``(norm float64 of shape (1,), q of shape (n,))`` with ``q`` int8 for
    ``levels <= 127`` and int16 above; payloads are gathered
    (``collective = "allgather"``) because each rank has its own norm.

    Parameters
    ----------
    levels : int >= 1, default=256
        Number of quantization levels ``s``.
    seed : int, optional
        Call number ``t`` for tensor ``name`` rounds with
        ``call_seed(seed, name, t)``. Every rank needs its own seed so that
        the ranks' rounding noise is independent and averages out; the
        default is this process's rank in ``MPI.COMM_WORLD`` (0 when MPI is
        not running).
    """

    collective = "allgather"

    def __init__(self, levels=256, *, seed=None):
        super().__init__()
        self.levels = validate_positive_int(levels, "levels", "QSGDCompressor")
        if self.levels > 32767:
            raise InvalidArgumentError(f"QSGDCompressor: levels={levels!r} should be <= 32767 "
                                       f"(levels are sent as int16)")
        self.seed = world_rank() if seed is None else int(seed)

    def __repr__(self):
        return f"QSGDCompressor(levels={self.levels!r}, seed={self.seed!r})"

    def _agreed_text(self):
        """The settings every rank must share: the seed is each rank's own."""
        return f"QSGDCompressor(levels={self.levels!r})"

    def compress(self, x, name):
        """Return ``((norm, q), meta)``."""
        flat, meta = self._prepare(x, name)
        work = kernel_input(flat)
        seed = self._next_call_seed(name)
        norm, q = kernels.qsgd_quantize(work, self.levels, seed)
        meta.update(levels=self.levels, seed=seed)
        return (np.array([norm], dtype=np.float64), q), meta

    def decompress(self, payload, meta):
        """``norm * q / levels`` in the original shape and dtype."""
        norm, q = payload
        dense = kernels.qsgd_dequantize(float(norm[0]), np.ascontiguousarray(q), meta["levels"],
                                        kernel_dtype(meta["dtype"]))
        return finish(dense, meta)


class SignCompressor(Compressor):
    """1-bit compression: the signs (8 per byte) and one scale per chunk.

    Element ``i`` decompresses to ``sign(x[i]) * scale[i // chunk_size]``, the
    scale being the kernel's per-chunk magnitude (mean ``|x|`` of the chunk).
    Payload ``(packed uint8 of shape (ceil(n / 8),), scales float32 of shape
    (ceil(n / chunk_size),))``: about 32x smaller than float32 for the
    default chunk. Payloads are gathered (``collective = "allgather"``).
    Biased: combine with :class:`~hpcdist.compression.ErrorFeedback`.

    Parameters
    ----------
    chunk_size : int >= 1, default=1024
        Elements sharing one float32 scale. 1024 keeps the scales at 1/256 of
        the float32 input (0.4% over the 1/32 of the signs) while following
        the local magnitude of a gradient.
    """

    collective = "allgather"

    def __init__(self, chunk_size=1024):
        super().__init__()
        self.chunk_size = validate_positive_int(chunk_size, "chunk_size", "SignCompressor")

    def __repr__(self):
        return f"SignCompressor(chunk_size={self.chunk_size!r})"

    def compress(self, x, name):
        """Return ``((packed, scales), meta)``."""
        flat, meta = self._prepare(x, name)
        work = kernel_input(flat)
        packed, scales = kernels.sign_pack(work, self.chunk_size)
        meta.update(n=work.size, chunk_size=self.chunk_size)
        return (packed, scales), meta

    def subtract_sent(self, residual, payload, meta):
        """``residual -= decompress(payload)`` in one pass."""
        packed, scales = payload
        kernels.sign_subtract(residual, packed, scales, meta["chunk_size"])

    def compress_with_feedback(self, residual, x, name):
        """Add ``x`` into ``residual``, compress it and subtract what is sent, in
        one pass (:func:`hpcdist.kernels.sign_pack_feedback`)."""
        flat, meta = self._prepare(x, name)
        packed, scales = kernels.sign_pack_feedback(residual, flat, self.chunk_size)
        meta.update(n=flat.size, chunk_size=self.chunk_size)
        return (packed, scales), meta

    def decompress(self, payload, meta):
        """``sign * scale`` per element, in the original shape and dtype."""
        packed, scales = payload
        dense = kernels.sign_unpack(np.ascontiguousarray(packed), np.ascontiguousarray(scales),
                                    meta["n"], meta["chunk_size"], kernel_dtype(meta["dtype"]))
        return finish(dense, meta)
