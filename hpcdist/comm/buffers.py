"""Turning what users pass (scalars, NumPy or device arrays) into MPI buffers and back.

A collective wraps its input in a :class:`Payload`, hands ``payload.data`` and
buffers from :meth:`Payload.new_output` to MPI, and returns
``payload.deliver(result)``: the same kind of object the user passed.
"""

import numbers

import numpy as np

from .devices import backend_of
from .dtypes import PREDEFINED_DATATYPES, check_dtype, mpi_datatype
from .headers import SCALAR_TYPES

__all__ = ["Payload", "wrap", "output_for", "mpi_buffer", "describe"]

HOST, PY_SCALAR, NP_SCALAR, DEVICE_DIRECT, DEVICE_STAGED = range(5)
# dtype -> MPI datatype for the dtypes Python's buffer protocol describes
_DIRECT_TYPES = PREDEFINED_DATATYPES  # the same dict, filled when MPI loads


class Payload:
    """A collective's input ready for MPI, and the way back to the caller's type.

    Attributes
    ----------
    data : array
        C-contiguous data MPI can read: a NumPy array, or a device array when
        the MPI library is CUDA-aware.
    kind : int
        One of the module's kinds (host array, Python scalar, NumPy scalar,
        device array sent directly, device array staged through the host).
    """

    __slots__ = ("data", "kind", "scalar_type", "backend", "ctx", "output_slot")

    def __init__(self, data, kind, scalar_type=None, backend=None, ctx=None):
        self.data = data
        self.kind = kind
        self.scalar_type = scalar_type
        self.backend = backend
        self.ctx = ctx
        self.output_slot = "recv"  # None: staged results get their own, unpooled buffer

    @property
    def scalar_code(self):
        """Index of the Python scalar type in :data:`~.headers.SCALAR_TYPES`, or -1."""
        return SCALAR_TYPES.index(self.scalar_type) if self.kind == PY_SCALAR else -1

    @property
    def on_host(self):
        """Whether MPI sees host memory (everything but a direct device array)."""
        return self.kind != DEVICE_DIRECT

    def new_output(self, shape, dtype, slot=...):
        """An uninitialised result buffer of the payload's kind.

        ``slot`` names the staging buffer a staged result lands in (default
        :attr:`output_slot`; None for a fresh buffer).
        """
        if self.kind == DEVICE_DIRECT:
            return self.backend.empty(shape, dtype)
        if self.kind == DEVICE_STAGED:
            slot = self.output_slot if slot is ... else slot
            return self.ctx.staging.view(slot, shape, dtype, self.backend)
        return np.empty(shape, dtype=dtype)

    def copy_into(self, result, data):
        """Copy ``data`` into ``result``, both buffers of this payload's kind."""
        if self.kind == DEVICE_DIRECT:
            self.backend.copy(data, result)
        else:
            result[...] = data

    def deliver(self, result, out=None):
        """Return ``result`` as the kind of object the caller passed.

        Parameters
        ----------
        result : array or None
            The result buffer (None passes through).
        out : array, optional
            The caller's device array to copy a staged result into.
        """
        if result is None:
            return None
        kind = self.kind
        if kind == HOST or kind == DEVICE_DIRECT:
            if out is not None and result is not out:
                out[...] = result  # the caller's out was not contiguous
                return out
            return result
        if kind == DEVICE_STAGED:
            return self.backend.from_host(result, out=out)
        if kind == NP_SCALAR:
            return result[()]
        return self.scalar_type(result[()].item())


def wrap(x, ctx, name, slot="send"):
    """Wrap a collective's input ``x``.

    Parameters
    ----------
    x : scalar, numpy.ndarray or device array
    ctx : Context
    name : str
        The operation, for error messages.
    slot : str
        The staging slot to copy a device array into.

    Raises
    ------
    TypeError
        For objects that are neither numbers nor arrays, and unsupported dtypes.
    """
    if isinstance(x, np.ndarray):
        check_dtype(x.dtype)
        return Payload(x if x.flags.c_contiguous else np.ascontiguousarray(x), HOST)
    if isinstance(x, np.generic):
        array = np.asarray(x)
        check_dtype(array.dtype)
        return Payload(array, NP_SCALAR)
    if isinstance(x, (bool, numbers.Number)) and not isinstance(x, np.ndarray):
        array = np.asarray(x)
        if array.dtype.kind not in "biufc":
            raise TypeError(f"{name}: cannot communicate {type(x).__name__} {x!r} as an array; "
                            f"use {name}_object for arbitrary Python objects")
        check_dtype(array.dtype)
        return Payload(array, PY_SCALAR, scalar_type=type(x))
    backend = backend_of(x)
    if backend is not None:
        check_dtype(np.dtype(x.dtype))
        data = backend.ascontiguous(x)
        if ctx.cuda_aware:
            backend.synchronize()  # MPI reads device memory outside the stream's order
            return Payload(data, DEVICE_DIRECT, backend=backend, ctx=ctx)
        host = ctx.staging.view(slot, data.shape, data.dtype, backend)
        backend.to_host(data, host)
        return Payload(host, DEVICE_STAGED, backend=backend, ctx=ctx)
    raise TypeError(f"{name}: expected a NumPy array, a device array or a number, got "
                    f"{type(x).__name__}; the *_object collectives take Python objects")


def output_for(payload, x, out, name):
    """The buffer MPI writes the result into, and whether the operation is in place.

    Parameters
    ----------
    payload : Payload
        The wrapped input.
    x : object
        The caller's input (``out is x`` means in place).
    out : array or None
        The caller's output array.
    name : str
        The operation, for error messages.

    Returns
    -------
    (array, bool)
    """
    data = payload.data
    if out is None:
        return payload.new_output(data.shape, data.dtype), False
    if payload.kind in (PY_SCALAR, NP_SCALAR):
        raise TypeError(f"{name}: out= cannot be used with a scalar input; pass an array")
    if tuple(out.shape) != data.shape or np.dtype(out.dtype) != data.dtype:
        raise ValueError(f"{name}: out is {describe(out)} but the result is {describe(data)}; "
                         f"pass an out of the same shape and dtype")
    if payload.kind == HOST:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"{name}: out must be a NumPy array like the input, got "
                            f"{type(out).__name__}")
        if not out.flags.c_contiguous:
            return np.empty_like(data), False
        return out, out is x
    if payload.kind == DEVICE_DIRECT and payload.backend.ascontiguous(out) is out:
        return out, out is x
    return payload.new_output(data.shape, data.dtype), False


def mpi_buffer(array):
    """The buffer specification mpi4py needs for ``array`` (host or device).

    16-bit floats are handed over as raw 2-byte words with their private
    MPI datatype, since Python's buffer protocol has no bfloat16.
    """
    dtype = array.dtype
    datatype = _DIRECT_TYPES.get(dtype)
    if datatype is not None:
        return (array, datatype)
    return (array.view("uint16"), mpi_datatype(dtype))  # check_dtype has passed: a 16-bit float


def describe(array):
    """A short text such as ``float32[1024]`` or ``int64[3,4]`` for messages."""
    if array is None:
        return "None"
    return f"{np.dtype(array.dtype)}[{','.join(str(n) for n in array.shape)}]"
