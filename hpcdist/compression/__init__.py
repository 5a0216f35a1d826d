"""Gradient compression: stateful compressors and the compressed allreduce.

Every compressor has ``compress(x, name) -> (payload, meta)``,
``decompress(payload, meta) -> ndarray`` (x's shape and dtype) and
``collective`` (``"allreduce"``: payloads are summed; ``"allgather"``:
payloads are gathered and decompressed one by one).
:func:`compressed_allreduce` runs the matching protocol.
"""

from .base import Compressor
from .casts import BF16Compressor, FP16Compressor, NoCompression
from .collective import compressed_allreduce
from .error_feedback import ErrorFeedback
from .powersgd import PowerSGDCompressor
from .quantization import QSGDCompressor, SignCompressor
from .sparsification import RandomKCompressor, TopKCompressor

__all__ = [
    "Compressor", "NoCompression", "FP16Compressor", "BF16Compressor", "TopKCompressor",
    "RandomKCompressor", "QSGDCompressor", "SignCompressor", "PowerSGDCompressor",
    "ErrorFeedback", "compressed_allreduce",
]
