"""Error feedback: remember what compression dropped and send it later."""
import numpy as np

from .. import kernels
from .base import Compressor, kernel_dtype
from .powersgd import PowerSGDCompressor

__all__ = ["ErrorFeedback"]


class ErrorFeedback(Compressor):
    """Wrap a compressor with one residual per name (EF-SGD).

    ``compress(g, name)`` compresses ``c = g + e`` and keeps
    ``e <- c - decompress(compress(c))``, so what a biased compressor
    (top-k, sign, random-k) drops is sent in later steps. The payload, meta,
    ``decompress`` and ``collective`` are those of the wrapped compressor.

    Parameters
    ----------
    compressor : compressor
        Any compressor except :class:`PowerSGDCompressor` (which has its own
        error feedback).
    """

    def __init__(self, compressor):
        super().__init__()
        if isinstance(compressor, (PowerSGDCompressor, ErrorFeedback)):
            raise TypeError(f"ErrorFeedback({type(compressor).__name__}): this compressor "
                            f"already keeps its own error feedback; use it unwrapped")
        if not hasattr(compressor, "compress") or not hasattr(compressor, "decompress"):
            raise TypeError(f"ErrorFeedback: {compressor!r} is not a compressor (needs "
                            f"compress and decompress)")
        self.compressor = compressor
        self._residuals = {}

    @property
    def collective(self):
        """The wrapped compressor's collective."""
        return self.compressor.collective

    def __repr__(self):
        return f"ErrorFeedback({self.compressor!r})"

    def residual(self, name):
        """The residual ``e`` of ``name`` (1-D, kernel dtype), or None before its first call."""
        return self._residuals.get(name)

    def reset(self, name=None):
        """Forget the residual of ``name`` (of every name when None)."""
        if name is None:
            self._residuals.clear()
        else:
            self._residuals.pop(name, None)

    def compress(self, x, name):
        """Compress ``x + residual`` and update the residual; ``(payload, meta)``.

        For sparsifiers (:meth:`~Compressor.sent_indices`) of float32/float64
        input the sum is formed in the residual's own buffer and the sent
        entries are zeroed afterwards: no copy of ``x`` and no dense
        decompression.
        """
        flat, meta = self._prepare(x, name)
        dtype = kernel_dtype(flat.dtype)
        residual = self._residuals.get(name)
        if residual is None:
            residual = self._residuals[name] = np.zeros(flat.size, dtype=dtype)
        # (a half-precision x is sent rounded: its residual keeps the rounding)
        sparse = (type(self.compressor).sent_indices is not Compressor.sent_indices
                  and flat.dtype == dtype)
        corrected = residual if sparse else flat.astype(dtype)  # else: always a copy
        kernels.scale_add(corrected, flat if sparse else residual, 1.0)
        payload, inner_meta = self.compressor.compress(corrected.reshape(meta["shape"]), name)
        inner_meta["dtype"] = meta["dtype"]  # decompress to the caller's dtype
        if sparse:  # e = c - decompress(payload): c with the sent entries set to zero
            residual[self.compressor.sent_indices(payload, inner_meta)] = 0
            return payload, inner_meta
        decompressed = np.ascontiguousarray(
            self.compressor.decompress(payload, inner_meta), dtype=dtype).reshape(-1)
        kernels.error_feedback_update(residual, corrected, decompressed)
        return payload, inner_meta

    def decompress(self, payload, meta):
        """The wrapped compressor's decompression."""
        return self.compressor.decompress(payload, meta)

    def decompress_add(self, out, payload, meta):
        """Add the decompressed payload into ``out`` in place (the wrapped
        compressor's ``decompress_add`` when it has one)."""
        add = getattr(self.compressor, "decompress_add", None)
        if add is not None:
            return add(out, payload, meta)
        out += np.asarray(self.compressor.decompress(payload, meta)).reshape(-1)
        return out
