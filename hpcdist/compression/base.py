"""Common machinery of the compressors: validation, per-name bookkeeping, seeds.

A compressor turns one rank's array into a *payload* (a tuple of arrays that
travels over the network) and a *meta* dict (what stays on this rank and is
needed to decompress). Its ``collective`` attribute says how the payloads of
all ranks are combined by :func:`~hpcdist.compression.compressed_allreduce`:

``"allreduce"``
    payloads of all ranks can be summed elementwise; the sum is decompressed
    once.
``"allgather"``
    payloads are gathered (their sizes may differ), each rank's payload is
    decompressed and the results are summed. For these compressors ``meta``
    depends only on the input's shape, dtype and the settings, never on the
    values, so one rank's meta decompresses every rank's payload.
"""
import numbers
import zlib

import ml_dtypes
import numpy as np

from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["Compressor", "validate_ratio", "validate_positive_int", "call_seed", "kernel_input",
           "is_float_dtype", "kernel_dtype", "finish", "settings_text"]

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)  # a float too


def is_float_dtype(dtype):
    """True for real floating dtypes (float16, bfloat16, float32, float64, ...)."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype == _BFLOAT16


def kernel_dtype(dtype):
    """The dtype the kernels compute in for an input of ``dtype``: float64 stays,
    every other float (float16, bfloat16, float32) computes in float32."""
    return np.dtype(np.float64) if np.dtype(dtype) == np.float64 else np.dtype(np.float32)


def validate_ratio(ratio, what):
    """Return ``ratio`` as a float in (0, 1] or raise ValueError naming it."""
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real):
        raise InvalidArgumentTypeError(f"{what}: ratio={ratio!r} should be a real number in (0, 1]")
    if not 0.0 < float(ratio) <= 1.0:
        raise InvalidArgumentError(f"{what}: ratio={ratio!r} should be in (0, 1], e.g. 0.01 for 1%")
    return float(ratio)


def validate_positive_int(value, label, what):
    """Return ``value`` as an int >= 1 or raise (TypeError / ValueError naming it)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InvalidArgumentTypeError(f"{what}: {label}={value!r} should be an integer >= 1")
    if int(value) < 1:
        raise InvalidArgumentError(f"{what}: {label}={value!r} should be >= 1")
    return int(value)


def call_seed(seed, name, step):
    """The seed of call number ``step`` for tensor ``name``.

    Deterministic and process independent (CRC-32 of the name, not Python's
    salted ``hash``), so every rank derives the same seed for the same
    ``(seed, name, step)``.
    """
    mixed = (int(seed) * 0x9E3779B1 + zlib.crc32(str(name).encode()) * 0x85EBCA77
             + int(step) * 0xC2B2AE3D)
    return mixed % (2 ** 63)


def settings_text(compressor):
    """The settings of ``compressor`` that every rank must share, as text: its repr
    (type and parameters) without what is meant to differ by rank (QSGD's seed)."""
    own = getattr(compressor, "_agreed_text", None)
    if callable(own):
        return own()
    kind = type(compressor)
    if kind.__repr__ is object.__repr__:  # a repr holding a memory address differs by rank
        return f"{kind.__module__}.{kind.__qualname__}"
    return repr(compressor)


class Compressor:
    """Base class: name registry and input validation.

    Subclasses set ``collective`` and implement :meth:`compress` and
    :meth:`decompress`.
    """

    collective = "allreduce"
    #: whether inputs must have a floating dtype
    requires_float = True

    def __init__(self):
        self._specs = {}
        self._steps = {}  # calls so far per name, for compressors with a ``seed``

    def _next_call_seed(self, name):
        """:func:`call_seed` of this call for tensor ``name`` (counts the call)."""
        step = self._steps.get(name, 0)
        self._steps[name] = step + 1
        return call_seed(self.seed, name, step)

    def __repr__(self):
        return f"{type(self).__name__}()"

    def _prepare(self, x, name):
        """Validate ``x`` and ``name``; return ``(flat, meta)``.

        ``flat`` is ``x`` as a 1-D contiguous array of its own dtype; ``meta``
        holds ``shape`` and ``dtype``. A name seen before must come with the
        same shape and dtype.
        """
        what = f"{type(self).__name__}.compress"
        if not isinstance(x, np.ndarray):
            x = np.asarray(x)
        if self.requires_float and not is_float_dtype(x.dtype):
            raise InvalidArgumentTypeError(f"{what}: dtype {x.dtype} of {name!r} is not a floating "
                                           f"dtype; pass float16/bfloat16/float32/float64 (e.g. "
                                           f"x.astype(np.float32))")
        if x.dtype.kind not in "biufc" and not is_float_dtype(x.dtype):
            raise InvalidArgumentTypeError(f"{what}: dtype {x.dtype} of {name!r} is not numeric")
        spec = (tuple(x.shape), x.dtype)
        old = self._specs.setdefault(name, spec)
        if old != spec:
            raise InvalidArgumentError(
                f"{what}: name {name!r} was first used with shape {old[0]} and dtype "
                f"{old[1]}, now with shape {spec[0]} and dtype {spec[1]}; give each "
                f"tensor its own name")
        flat = np.ascontiguousarray(x).reshape(-1)
        return flat, {"shape": spec[0], "dtype": spec[1], "name": name}

    def compress(self, x, name):
        """Compress ``x``; return ``(payload, meta)``."""
        raise NotImplementedError

    def decompress(self, payload, meta):
        """A dense array of the original shape and dtype from ``payload``."""
        raise NotImplementedError

    def subtract_sent(self, residual, payload, meta):
        """``residual -= decompress(payload)`` in place (flat, kernel dtype),
        without a dense decompressed array. Optional: compressors that have it
        let :class:`~hpcdist.compression.ErrorFeedback` skip a copy and a
        decompression per call."""
        raise NotImplementedError

    def compress_with_feedback(self, residual, x, name):
        """Error feedback's whole step: ``residual += x``, compress the residual,
        subtract what the payload sends; ``(payload, meta)`` as :meth:`compress`
        of ``x + residual``. Optional, for compressors with a fused kernel
        (sign); ``residual`` is flat, of ``x``'s dtype (float32/float64)."""
        raise NotImplementedError


def kernel_input(flat):
    """``flat`` in the dtype the kernels compute in (float32 or float64)."""
    return flat if flat.dtype in (np.float32, np.float64) else flat.astype(kernel_dtype(flat.dtype))


def finish(flat, meta):
    """``flat`` cast to meta's dtype and reshaped to meta's shape."""
    out = flat if flat.dtype == meta["dtype"] else flat.astype(meta["dtype"])
    return out.reshape(meta["shape"])
