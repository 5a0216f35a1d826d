"""Error feedback: remember what compression dropped and send it later."""
import numpy as np

from .. import kernels
from ..exceptions import InvalidArgumentTypeError
from .base import Compressor, kernel_dtype, settings_text
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
            raise InvalidArgumentTypeError(
                f"ErrorFeedback({type(compressor).__name__}): this compressor "
                f"already keeps its own error feedback; use it unwrapped")
        if not hasattr(compressor, "compress") or not hasattr(compressor, "decompress"):
            raise InvalidArgumentTypeError(
                f"ErrorFeedback: {compressor!r} is not a compressor (needs "
                f"compress and decompress)")
        self.compressor = compressor
        self._residuals = {}

    @property
    def collective(self):
        """The wrapped compressor's collective."""
        return self.compressor.collective

    def __repr__(self):
        return f"ErrorFeedback({self.compressor!r})"

    def _agreed_text(self):
        """The settings every rank must share: those of the wrapped compressor."""
        return f"ErrorFeedback({settings_text(self.compressor)})"

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

        When the wrapped compressor has
        :meth:`~Compressor.compress_with_feedback` (sign) and ``x`` is
        float32/float64, the whole step is one fused pass. Otherwise, when it
        has :meth:`~Compressor.subtract_sent`
        (top-k, random-k) and ``x`` is float32/float64, the sum is formed
        in the residual's own buffer and what was sent is subtracted from it
        in place: no copy of ``x`` and no dense decompression. Otherwise the
        sum is a copy and the residual is updated from the decompressed
        payload (a half-precision ``x`` is sent rounded, and the residual
        keeps the rounding).
        """
        flat, meta = self._prepare(x, name)
        dtype = kernel_dtype(flat.dtype)
        residual = self._residuals.get(name)
        if residual is None:
            residual = self._residuals[name] = np.zeros(flat.size, dtype=dtype)
        # (any object with compress/decompress may be wrapped: it need not have these)
        if flat.dtype == dtype and _has_own(self.compressor, "compress_with_feedback"):
            payload, inner_meta = self.compressor.compress_with_feedback(
                residual, flat.reshape(meta["shape"]), name)
            inner_meta["dtype"] = meta["dtype"]
            return payload, inner_meta
        in_place = flat.dtype == dtype and _has_own(self.compressor, "subtract_sent")
        corrected = residual if in_place else flat.astype(dtype)  # else: always a copy
        kernels.scale_add(corrected, flat if in_place else residual, 1.0)
        payload, inner_meta = self.compressor.compress(corrected.reshape(meta["shape"]), name)
        inner_meta["dtype"] = meta["dtype"]  # decompress to the caller's dtype
        if in_place:  # e = c - decompress(payload), c being the residual buffer
            self.compressor.subtract_sent(residual, payload, inner_meta)
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


def _has_own(compressor, method):
    """Whether ``compressor`` implements the optional ``method`` of :class:`Compressor`."""
    return getattr(type(compressor), method, None) not in (None, getattr(Compressor, method))
