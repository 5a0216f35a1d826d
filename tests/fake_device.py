"""A fake device-array type for testing GPU code paths on CPU.

``FakeDeviceArray`` keeps its data in a host NumPy array but looks like a
device array from the outside: it exposes ``__cuda_array_interface__``,
``get``/``set`` like CuPy, and deliberately has no ``__array__`` so that
nothing can silently treat it as a NumPy array. Because the interface points
at host memory, a non-CUDA-aware MPI can still read and write it directly,
which lets the tests exercise both the direct (CUDA-aware) and the staged
paths.
"""
import numpy as np

from hpcdist.comm.devices import DeviceBackend

__all__ = ["FakeDeviceArray", "FakeBackend"]


class FakeDeviceArray:
    """Host memory dressed up as a device array."""

    def __init__(self, host):
        self._host = np.ascontiguousarray(np.array(host, copy=True))

    # ---- array-like metadata
    @property
    def shape(self):
        return self._host.shape

    @property
    def dtype(self):
        return self._host.dtype

    @property
    def ndim(self):
        return self._host.ndim

    @property
    def size(self):
        return self._host.size

    @property
    def nbytes(self):
        return self._host.nbytes

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self._host.shape,
            "typestr": self._host.dtype.str,
            "data": (self._host.ctypes.data, False),
            "version": 3,
            "strides": None,
        }

    # ---- CuPy-like transfers
    def get(self, out=None):
        """Device -> host: a copy, or into the NumPy array ``out``.

        Strict like ``cupy.ndarray.get``: ``out`` must have this array's shape
        and dtype.
        """
        if out is None:
            return self._host.copy()
        if not isinstance(out, np.ndarray):
            raise TypeError(f"get: out must be a numpy.ndarray, got {type(out).__name__}")
        if out.shape != self.shape or out.dtype != self.dtype:
            raise ValueError(f"get: out is {out.dtype}{list(out.shape)}, "
                             f"array is {self.dtype}{list(self.shape)}")
        out[...] = self._host
        return out

    def set(self, host):
        """Host -> device. Strict like ``cupy.ndarray.set``: same shape and dtype."""
        if not isinstance(host, np.ndarray):
            raise TypeError(f"set: expected a numpy.ndarray, got {type(host).__name__}")
        if host.shape != self.shape or host.dtype != self.dtype:
            raise ValueError(f"set: got {host.dtype}{list(host.shape)}, "
                             f"array is {self.dtype}{list(self.shape)}")
        self._host[...] = host

    def __repr__(self):
        return f"FakeDeviceArray({self._host!r})"

    def __len__(self):
        return len(self._host)


class FakeBackend(DeviceBackend):
    """DeviceBackend for :class:`FakeDeviceArray`; counts its transfers."""

    name = "fake"

    def __init__(self):
        self.to_host_calls = 0
        self.from_host_calls = 0
        self.pinned_allocations = 0

    def is_array(self, x):
        return isinstance(x, FakeDeviceArray)

    def to_host(self, x, out):
        self.to_host_calls += 1
        x.get(out=out)
        return out

    def from_host(self, host, out=None):
        self.from_host_calls += 1
        if out is None:
            return FakeDeviceArray(host)
        out.set(host)
        return out

    def empty(self, shape, dtype):
        return FakeDeviceArray(np.empty(shape, dtype=dtype))

    def pinned_empty(self, nbytes):
        self.pinned_allocations += 1
        return np.empty(int(nbytes), dtype=np.uint8)

    def synchronize(self):
        pass
