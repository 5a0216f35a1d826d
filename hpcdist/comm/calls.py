"""One call, resolved once: what the caller passed, described for MPI and for the way back.

Every collective and point-to-point call starts with :func:`resolve` (what
this rank sends) or :func:`resolve_receiver` (where this rank's data lands).
The :class:`Call` they return holds everything the rest of the call reads:
the contiguous data MPI sees, its MPI datatype, the kind of object the
caller passed (array, scalar, device array sent directly or staged through
the host) and how to hand the result back. Check mode, the statistics and
the stall watchdog read the same description; nothing is looked up twice.
"""

import numbers

import numpy as np

from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from .devices import backend_of
from .dtypes import PREDEFINED_DATATYPES, check_dtype, mpi_datatype
from .headers import SCALAR_TYPES

__all__ = ["Call", "resolve", "resolve_receiver", "refuse_read_only",
           "describe", "describe_shape", "spec_of", "HOST", "PY_SCALAR", "NP_SCALAR",
           "DEVICE_DIRECT", "DEVICE_STAGED"]

#: kinds of object a caller passes
HOST, PY_SCALAR, NP_SCALAR, DEVICE_DIRECT, DEVICE_STAGED = range(5)
#: dtype -> MPI datatype for the dtypes Python's buffer protocol describes (filled when
#: MPI loads); the 16-bit floats travel as raw 2-byte words with a private datatype
_PLAIN = PREDEFINED_DATATYPES


class Call:
    """One call of a collective, resolved once.

    Attributes
    ----------
    data : array
        C-contiguous data MPI reads or writes: a NumPy array, or a device
        array when the MPI library is CUDA-aware.
    spec : tuple
        ``data`` as mpi4py takes it: ``(buffer, MPI datatype)``.
    kind : int
        Host array, Python scalar, NumPy scalar, device array sent directly
        or device array staged through the host (the module's constants).
    target : array or None
        A receiver's own array, when MPI cannot write into it directly (not
        contiguous, or device memory staged through the host): the result
        is copied into it on the way back.
    """

    __slots__ = ("data", "spec")
    # a plain host array (C-contiguous, of a dtype with a predefined MPI type) needs no
    # more; _FullCall makes these per-call fields for everything else
    kind = HOST
    scalar_type = backend = ctx = target = None
    output_slot = "recv"
    #: index of the Python scalar type in :data:`~.headers.SCALAR_TYPES`, or -1
    scalar_code = -1

    @property
    def on_host(self):
        """Whether MPI sees host memory (everything but a direct device array)."""
        return self.kind != DEVICE_DIRECT

    @property
    def on_device(self):
        """Whether the caller passed a device array."""
        return self.kind >= DEVICE_DIRECT

    def describe(self):
        """``float32[1024]``: the data's dtype and shape, for messages and checks."""
        return describe(self.data)

    def spec_of(self, array):
        """``array`` (of this call's dtype) as mpi4py takes it."""
        buffer, datatype = self.spec
        return (array, datatype) if buffer is self.data else (array.view(np.uint16), datatype)

    def new_output(self, shape, dtype=None, slot=...):
        """An uninitialised result buffer of the call's kind (``dtype``: the data's).

        ``slot`` names the staging buffer a staged result lands in (default
        :attr:`output_slot`; None for a fresh buffer).
        """
        dtype = self.data.dtype if dtype is None else dtype
        kind = self.kind
        if kind == DEVICE_DIRECT:
            return self.backend.empty(shape, dtype)
        if kind == DEVICE_STAGED:
            return self.ctx.staging.view(self.output_slot if slot is ... else slot, shape, dtype,
                                         self.backend)
        return np.empty(shape, dtype=dtype)

    def output_for(self, x, out, name):
        """The buffer MPI writes an elementwise result into, and whether that is in place.

        Parameters
        ----------
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
        data = self.data
        kind = self.kind
        plain = kind == HOST
        if out is None:
            if plain:
                return np.empty(data.shape, data.dtype), False
            # a staged device array: MPI reduces in place in hpcdist's own host copy
            return (data, True) if kind == DEVICE_STAGED else (self.new_output(data.shape), False)
        if plain and out is x and x.flags.writeable:
            return x, True
        if plain and type(out) is np.ndarray and out.dtype is data.dtype \
                and out.shape == data.shape and (flags := out.flags).c_contiguous \
                and flags.writeable:
            return out, False
        if self.kind == PY_SCALAR or self.kind == NP_SCALAR:
            raise InvalidArgumentTypeError(
                f"{name}: out= cannot be used with a scalar input; pass an array")
        if not (hasattr(out, "shape") and hasattr(out, "dtype")):
            raise InvalidArgumentTypeError(f"{name}: out must be an array like the input, got "
                                           f"{type(out).__name__}")
        if tuple(out.shape) != data.shape or np.dtype(out.dtype) != data.dtype:
            raise InvalidArgumentError(f"{name}: out is {describe(out)} but the result is "
                                       f"{describe(data)}; pass an out of the same shape and dtype")
        if plain:
            if not isinstance(out, np.ndarray):
                raise InvalidArgumentTypeError(
                    f"{name}: out must be a NumPy array like the input, got "
                    f"{type(out).__name__}")
            if not out.flags.writeable:
                raise InvalidArgumentError(f"{name}: out is a read-only {describe(out)}; pass a "
                                           f"writable array of the result's shape and dtype")
            if not out.flags.c_contiguous:
                return np.empty_like(data), False  # deliver copies the result into out
            return out, out is x
        if kind == DEVICE_STAGED:
            return data, True
        if kind == DEVICE_DIRECT and self.backend.ascontiguous(out) is out:
            return out, out is x
        return self.new_output(data.shape), False

    def copy_into(self, result, data):
        """Copy ``data`` into ``result``, both buffers of this call's kind."""
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
            The caller's array the result belongs in (copied there when
            MPI could not write into it).
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

    def hand_back(self):
        """A receiver's result: its own array filled, or the data as the sender's kind."""
        target, data = self.target, self.data
        if target is not None:
            if isinstance(target, np.ndarray):
                target[...] = data
                return target
            return self.backend.from_host(data, out=target)
        kind = self.kind
        if kind == PY_SCALAR:
            return self.scalar_type(data[()].item())
        if kind == NP_SCALAR:
            return data[()]
        if kind >= DEVICE_DIRECT and self.ctx.xp is not np and isinstance(data, np.ndarray):
            return self.ctx.xp.asarray(data)  # the sender passed a device array: so do we
        return data


class _FullCall(Call):
    """A :class:`Call` of anything but a plain host array: a scalar, a device array, or
    a copy made for MPI (the class defaults of :class:`Call` become per-call fields)."""

    __slots__ = ("kind", "scalar_type", "backend", "ctx", "target", "output_slot")

    @property
    def scalar_code(self):
        """Index of the Python scalar type in :data:`~.headers.SCALAR_TYPES`, or -1."""
        return SCALAR_TYPES.index(self.scalar_type) if self.kind == PY_SCALAR else -1


def _host_call(data, kind, ctx, scalar_type=None):
    """A :class:`_FullCall` of data ``data`` (C-contiguous, of a supported dtype)."""
    call = _FullCall()
    call.data, call.kind, call.ctx = data, kind, ctx
    call.scalar_type, call.backend, call.target, call.output_slot = scalar_type, None, None, "recv"
    call.spec = spec_of(data)
    return call


def resolve(x, ctx, name, slot="send", incoming=False, array_fix=None):
    """Describe ``x``, the array or scalar a call sends (or, ``incoming``, receives into).

    Parameters
    ----------
    x : scalar, numpy.ndarray or device array
    ctx : Context
    name : str
        The operation, for error messages and the statistics.
    slot : str or None
        The staging slot a device array is copied into when the MPI library
        is not CUDA-aware (None: a fresh buffer, for nonblocking calls).
    incoming : bool, default=False
        MPI writes into ``x``: where it cannot write there directly (not
        contiguous, or device memory staged through the host), it writes
        into a buffer that :meth:`Call.hand_back` copies into ``x``.
    array_fix : str, optional
        ``x`` must be an array (a ``shape_known=True`` call promised one):
        None, scalars and other objects raise ``TypeError`` ending with
        this advice.

    Raises
    ------
    TypeError
        For objects that are neither numbers nor arrays, and unsupported dtypes.
    """
    if type(x) is np.ndarray and (datatype := _PLAIN.get(x.dtype)) is not None:
        flags = x.flags
        if flags.c_contiguous and (not incoming or flags.writeable):
            # the common case, kept short: a plain host array
            call = Call()  # no __init__: the class call is the cheapest way to a new one
            call.data = x
            call.spec = (x, datatype)
            return call
    if incoming:
        refuse_read_only(x, ctx, name)
    if array_fix is not None and not (hasattr(x, "shape") and hasattr(x, "dtype")
                                      and not isinstance(x, np.generic)):
        passed = "None" if x is None else "a scalar" if isinstance(x, (
            np.generic, bool, numbers.Number)) else type(x).__name__
        raise InvalidArgumentTypeError(
            f"{name}(shape_known=True): rank {ctx.rank} passed {passed}; "
            f"{array_fix}")
    if isinstance(x, np.ndarray):
        check_dtype(x.dtype)
        if isinstance(x, np.ma.MaskedArray):
            raise InvalidArgumentTypeError(
                f"{name}: got a numpy.ma.MaskedArray; collectives move the data without its "
                "mask: pass x.filled(value) (or x.data to send the masked values too)")
        if x.flags.c_contiguous:
            return _host_call(x, HOST, ctx)
        call = _host_call(np.ascontiguousarray(x), HOST, ctx)
        call.target = x if incoming else None
        return call
    if isinstance(x, np.generic):
        array = np.asarray(x)
        check_dtype(array.dtype)
        return _host_call(array, NP_SCALAR, ctx)
    if isinstance(x, (bool, numbers.Number)):
        array = np.asarray(x)
        if array.dtype.kind not in "biufc":
            raise InvalidArgumentTypeError(
                f"{name}: cannot communicate {type(x).__name__} {x!r} as an array; "
                f"use {name}_object for arbitrary Python objects")
        check_dtype(array.dtype)
        return _host_call(array, PY_SCALAR, ctx, scalar_type=type(x))
    backend = backend_of(x)
    if backend is None:
        raise InvalidArgumentTypeError(
            f"{name}: expected a NumPy array, a device array or a number, got "
            f"{type(x).__name__}; the *_object collectives take Python objects")
    return _device_call(x, backend, ctx, name, slot, incoming)


def _device_call(x, backend, ctx, name, slot, incoming):
    """A :class:`Call` of device array ``x``: direct when the MPI library is
    CUDA-aware, else staged through a pinned host buffer."""
    dtype = np.dtype(x.dtype)
    check_dtype(dtype)
    data = backend.ascontiguous(x)
    if ctx.cuda_aware and not (incoming and data is not x):
        backend.synchronize()  # MPI reads device memory outside the stream's order
        call = _host_call(data, DEVICE_DIRECT, ctx)
    elif incoming:
        host = ctx.staging.view("recv", tuple(x.shape), dtype, backend)
        call = _host_call(host, DEVICE_STAGED, ctx)
        call.target = x
    else:
        host = ctx.staging.view(slot, data.shape, dtype, backend)
        backend.to_host(data, host)
        call = _host_call(host, DEVICE_STAGED, ctx)
        if slot is None:  # nonblocking: the result needs a buffer of its own too
            call.output_slot = None
    call.backend = backend
    return call


def refuse_read_only(x, ctx, name):
    """Raise ``ValueError`` naming ``x`` when it is a read-only NumPy array to receive into."""
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        raise InvalidArgumentError(f"{name}: rank {ctx.rank} passed a read-only {describe(x)} to "
                                   f"receive into; pass a writable array")


def resolve_receiver(x, shape, dtype, ctx, name, peer, kind=HOST, scalar_type=None):
    """Describe where this rank receives ``shape`` and ``dtype`` sent by ``peer``.

    Parameters
    ----------
    x : array or None
        The receiver's array (filled in place), or None for a new array.
    shape : tuple of int
    dtype : numpy.dtype
    ctx : Context
    name : str
    peer : int
        The sending rank (the root of a broadcast), for error messages.
    kind : int
        The kind of object the sender passed, rebuilt by :meth:`Call.hand_back`
        when ``x`` is None.
    scalar_type : type, optional
        The sender's Python scalar type (``kind == PY_SCALAR``).

    Raises
    ------
    ValueError
        When ``x`` is not of ``shape`` and ``dtype``.
    TypeError
        When ``x`` is neither None nor an array.
    """
    if x is None:
        return _host_call(np.empty(shape, dtype=dtype), kind, ctx, scalar_type)
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        raise InvalidArgumentTypeError(
            f"{name}: receivers pass a NumPy array, a device array or None, "
            f"got {type(x).__name__}")
    if tuple(x.shape) != shape or np.dtype(x.dtype) != dtype:
        raise InvalidArgumentError(
            f"{name}: rank {ctx.rank} passed {describe(x)} but rank {peer} sends "
            f"{describe_shape(shape, dtype)}; pass an array of the sender's shape and dtype, "
            f"or None")
    return resolve(x, ctx, name, incoming=True)


def spec_of(array):
    """``array`` (host or device, of a supported dtype) as mpi4py takes it."""
    datatype = _PLAIN.get(array.dtype)
    if datatype is not None:
        return (array, datatype)
    return (array.view(np.uint16), mpi_datatype(array.dtype))  # a 16-bit float


def describe(array):
    """A short text such as ``float32[1024]`` or ``int64[3,4]`` for messages."""
    if array is None:
        return "None"
    return describe_shape(array.shape, array.dtype)


def describe_shape(shape, dtype):
    """:func:`describe` of an array of ``shape`` and ``dtype`` (e.g. from a header)."""
    return f"{np.dtype(dtype)}[{','.join(str(n) for n in shape)}]"
