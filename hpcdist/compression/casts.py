"""Compressors that send every element: unchanged, or cast to 16 bits."""
import numpy as np

from .. import kernels
from .base import _BFLOAT16, Compressor, finish, kernel_dtype

__all__ = ["NoCompression", "FP16Compressor", "BF16Compressor"]


class NoCompression(Compressor):
    """Send the array as it is (the dense baseline).

    Accepts any numeric dtype. The payload is ``(x.ravel(),)`` and payloads
    are summed (``collective = "allreduce"``).
    """

    collective = "allreduce"
    requires_float = False

    def compress(self, x, name):
        """Return ``((flat,), meta)`` with ``flat`` of shape (x.size,)."""
        flat, meta = self._prepare(x, name)
        return (flat,), meta

    def decompress(self, payload, meta):
        """The payload reshaped to the original shape and dtype."""
        return finish(np.asarray(payload[0]), meta)


class _HalfCompressor(Compressor):
    """Cast to a 16-bit float; the 16-bit arrays are summed by the allreduce."""

    collective = "allreduce"
    kind = None

    def compress(self, x, name):
        """Return ``((half,), meta)``, ``half`` of shape (x.size,) and 16-bit dtype."""
        flat, meta = self._prepare(x, name)
        work = flat if flat.dtype in (np.float32, np.float64) else flat.astype(
            kernel_dtype(flat.dtype))
        half = kernels.to_half(work, self.kind)
        if self.kind == "bfloat16" and half.dtype == np.uint16:  # raw bits: reduce as bfloat16
            half = half.view(_BFLOAT16)
        return (half,), meta

    def decompress(self, payload, meta):
        """The 16-bit payload widened back to the original dtype and shape."""
        half = np.ascontiguousarray(payload[0]).reshape(-1)
        dtype = meta["dtype"]
        work = kernel_dtype(dtype)
        return finish(kernels.from_half(half, work), meta)


class FP16Compressor(_HalfCompressor):
    """IEEE half precision: 2 bytes per element, ~3 significant digits, range 6e4.

    Sums of many ranks' values are formed in float16 by the allreduce, so keep
    values well below 65504 / size.
    """

    kind = "float16"


class BF16Compressor(_HalfCompressor):
    """bfloat16: 2 bytes per element, the range of float32, ~2-3 significant digits."""

    kind = "bfloat16"
