"""Compute kernels for gradient compression: Numba on NumPy arrays, CuPy on GPU arrays.

Every public function accepts arrays of any shape, works on their flat
C-order view, validates its arguments and dispatches on the array type
(CuPy is imported only when a CuPy array is passed).

Sparsification
    topk(x, k) -> (indices, values)
        Exact top-k by magnitude in O(n); indices int64 sorted ascending.
    topk_threshold(x, k, *, sample_size=None, seed=0) -> (indices, values)
        Sampled-threshold approximate top-k (Deep Gradient Compression).
    randomk_indices(n, k, seed) -> indices
        k distinct sorted indices, identical on every rank for the same seed.
Quantization
    qsgd_quantize(x, levels, seed) -> (norm, q); qsgd_dequantize(norm, q, levels, dtype)
    int8_quantize(x, chunk_size) -> (q, scales); int8_dequantize(q, scales, chunk_size, dtype)
    sign_pack(x, chunk_size) -> (packed, scales); sign_unpack(packed, scales, n, chunk_size, dtype)
    sign_subtract(out, packed, scales, chunk_size): out -= the unpacked signs, in place
    sign_pack_feedback(residual, x, chunk_size) -> (packed, scales): error feedback around
        sign_pack in one pass (residual += x, pack, subtract what is sent)
    to_half(x, kind) with kind "float16" or "bfloat16"; from_half(h, dtype)
Fused in-place updates
    scatter_add(dense, indices, values, scale=1.0) -> dense
    scale_add(out, x, alpha) -> out
    error_feedback_update(residual, corrected, decompressed) -> residual
"""
from .casts import from_half, to_half
from .fused import error_feedback_update, scale_add, scatter_add
from .quantization import int8_dequantize, int8_quantize, qsgd_dequantize, qsgd_quantize
from .selection import randomk_indices, topk, topk_threshold
from .signs import sign_pack, sign_pack_feedback, sign_subtract, sign_unpack

__all__ = [
    "topk", "topk_threshold", "randomk_indices",
    "qsgd_quantize", "qsgd_dequantize", "int8_quantize", "int8_dequantize",
    "sign_pack", "sign_unpack", "sign_subtract", "sign_pack_feedback", "to_half", "from_half",
    "scatter_add", "scale_add", "error_feedback_update",
]
