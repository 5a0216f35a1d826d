"""Device (GPU) arrays: recognising them, moving them, choosing the device.

hpcdist never imports CuPy unless it is installed and a device array or
``device="cuda"`` asks for it. Each device-array type is described by a
:class:`DeviceBackend`; CuPy's is registered on first use, and tests register
a fake one that keeps its data in host memory.
"""

import ctypes
import importlib.util
import os

import numpy as np

from .._environment import cuda_aware_from_env
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["DeviceBackend", "CupyBackend", "register_backend", "unregister_backend",
           "backend_of", "detect_cuda_aware", "select_device"]

_BACKENDS = []
_CUPY_CHECKED = False


class DeviceBackend:
    """How hpcdist moves one device-array type to and from host memory.

    Subclasses implement the abstract methods for their array type.
    """

    name = "device"

    def is_array(self, x):
        """Whether ``x`` is an array of this backend."""
        raise NotImplementedError

    def to_host(self, x, out):
        """Copy device array ``x`` into the contiguous NumPy array ``out``."""
        raise NotImplementedError

    def from_host(self, host, out=None):
        """Copy NumPy array ``host`` to a new device array, or into ``out``.

        The copy may still be running when this returns (from page-locked
        memory); :meth:`wait_for_uploads` waits for it.
        """
        raise NotImplementedError

    def wait_for_uploads(self):
        """Wait until the host memory given to :meth:`from_host` may be overwritten."""

    def empty(self, shape, dtype):
        """A new uninitialised device array."""
        raise NotImplementedError

    def pinned_empty(self, nbytes):
        """``nbytes`` of page-locked host memory as a NumPy uint8 array."""
        return np.empty(nbytes, dtype=np.uint8)

    def synchronize(self):
        """Wait until the device has finished the work queued so far."""

    def ascontiguous(self, x):
        """``x`` itself when C-contiguous, else a contiguous device copy."""
        return x

    def copy(self, source, destination):
        """Copy device array ``source`` into ``destination`` (through the host by default)."""
        host = np.empty(source.shape, dtype=source.dtype)
        self.to_host(source, host)
        self.from_host(host, out=destination)
        return destination

    def divide_(self, x, divisor):
        """Divide device array ``x`` by ``divisor`` in place (through the host by default)."""
        host = np.empty(x.shape, dtype=x.dtype)
        self.to_host(x, host)
        np.true_divide(host, divisor, out=host)
        self.from_host(host, out=x)
        return x


class CupyBackend(DeviceBackend):
    """CuPy arrays on NVIDIA GPUs."""

    name = "cupy"

    def __init__(self):
        import cupy
        import cupyx
        self._cupy = cupy
        self._cupyx = cupyx
        self._upload = None  # event after the last host-to-device copy

    def is_array(self, x):
        return isinstance(x, self._cupy.ndarray)

    def to_host(self, x, out):
        x.get(out=out)

    def from_host(self, host, out=None):
        # one copy, asynchronous from page-locked memory (cupy.asarray would first copy
        # the host array into a page-locked buffer of its own)
        if out is None:
            out = self._cupy.empty(host.shape, dtype=host.dtype)
        out.set(host)
        self._upload = self._cupy.cuda.get_current_stream().record()
        return out

    def wait_for_uploads(self):
        if self._upload is not None:
            self._upload.synchronize()
            self._upload = None

    def empty(self, shape, dtype):
        return self._cupy.empty(shape, dtype=dtype)

    def pinned_empty(self, nbytes):
        return self._cupyx.empty_pinned((nbytes,), dtype=np.uint8)

    def synchronize(self):
        self._cupy.cuda.get_current_stream().synchronize()

    def ascontiguous(self, x):
        return self._cupy.ascontiguousarray(x)

    def copy(self, source, destination):
        destination[...] = source
        return destination

    def divide_(self, x, divisor):
        x /= divisor
        return x


def register_backend(backend):
    """Make hpcdist recognise the arrays of ``backend`` (a :class:`DeviceBackend`)."""
    if not isinstance(backend, DeviceBackend):
        raise InvalidArgumentTypeError(
            f"backend must be a DeviceBackend instance, got {type(backend).__name__}")
    _BACKENDS.insert(0, backend)


def unregister_backend(backend):
    """Forget a backend added by :func:`register_backend`."""
    if backend in _BACKENDS:
        _BACKENDS.remove(backend)


def _register_cupy_once():
    global _CUPY_CHECKED
    if not _CUPY_CHECKED:
        _CUPY_CHECKED = True
        if importlib.util.find_spec("cupy") is not None:
            try:
                _BACKENDS.append(CupyBackend())
            except Exception:  # a broken CuPy install: treat as absent
                pass


def backend_of(x):
    """The :class:`DeviceBackend` of ``x``, or None for host data.

    Anything exposing ``__cuda_array_interface__`` or ``__dlpack_device__``
    without a registered backend is rejected with a clear error.
    """
    if not (hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack_device__")):
        return None
    for backend in _BACKENDS:
        if backend.is_array(x):
            return backend
    _register_cupy_once()
    for backend in _BACKENDS:
        if backend.is_array(x):
            return backend
    if hasattr(x, "__cuda_array_interface__"):
        raise InvalidArgumentTypeError(
            f"{type(x).__name__} is a device array hpcdist has no backend for; "
            f"convert it to a CuPy array (cupy.asarray) or register a "
            f"hpcdist.comm.devices.DeviceBackend")
    return None  # e.g. a host array that also speaks DLPack


def _mpi_library_handle():
    """The loaded MPI shared library, found through this process's memory map."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libmpi" in line}
    except OSError:
        return None
    for path in sorted(paths, key=len):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def detect_cuda_aware():
    """Whether the MPI library accepts device pointers.

    ``HPCDIST_CUDA_AWARE=0|1`` overrides detection (``auto`` or unset
    detects). Open MPI answers ``MPIX_Query_cuda_support``; MPICH answers
    ``MPIX_GPU_query_support`` for CUDA; anything else is taken as not
    CUDA-aware, which is always safe (data is staged through host memory).
    """
    setting = cuda_aware_from_env()
    if setting is not None:
        return setting
    library = _mpi_library_handle()
    if library is None:
        return False
    if hasattr(library, "MPIX_Query_cuda_support"):
        return bool(library.MPIX_Query_cuda_support())
    if hasattr(library, "MPIX_GPU_query_support"):
        supported = ctypes.c_int(0)
        library.MPIX_GPU_query_support(0, ctypes.byref(supported))  # 0: MPIX_GPU_SUPPORT_CUDA
        return bool(supported.value) and os.environ.get("MPIR_CVAR_ENABLE_GPU", "1") != "0"
    return False


def _gpu_count():
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


def select_device(device, local_rank):
    """Resolve the ``device`` argument of :func:`hpcdist.init`.

    Parameters
    ----------
    device : str
        ``"auto"`` (a GPU when CuPy sees one, else the CPU), ``"cpu"``,
        ``"cuda"`` (GPU ``local_rank % n_gpus``) or ``"cuda:N"``.
    local_rank : int
        This rank's index on its node.

    Returns
    -------
    (str, module)
        The device name and the array module (numpy or cupy).
    """
    if not isinstance(device, str):
        raise InvalidArgumentTypeError(
            f"device must be a string such as 'auto', 'cpu' or 'cuda:0', "
            f"got {device!r}")
    name = device.strip().lower()
    if name == "cpu":
        return "cpu", np
    if name not in ("auto", "cuda") and not name.startswith("cuda:"):
        raise InvalidArgumentError(
            f"device={device!r} is not understood; use 'auto', 'cpu', 'cuda' "
            f"or 'cuda:N'")
    n_gpus = _gpu_count()
    if n_gpus == 0:
        if name == "auto":
            return "cpu", np
        raise InvalidArgumentError(f"device={device!r} asks for a GPU but CuPy sees none; "
                                   f"install hpcdist[gpu] on a GPU node or use device='cpu'")
    index = local_rank % n_gpus if name in ("auto", "cuda") else int(name.split(":", 1)[1])
    if not 0 <= index < n_gpus:
        raise InvalidArgumentError(f"device={device!r}: only {n_gpus} GPU(s) visible "
                                   f"(cuda:0..cuda:{n_gpus - 1})")
    import cupy
    cupy.cuda.Device(index).use()
    _register_cupy_once()
    return f"cuda:{index}", cupy
