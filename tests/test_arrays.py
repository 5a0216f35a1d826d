"""hpcdist._arrays: the array library of an array, host copies."""

import numpy as np

from hpcdist._arrays import array_module, is_cupy, to_host
from tests.fake_device import FakeDeviceArray


def test_numpy_and_other_objects_belong_to_numpy():
    for x in (np.zeros(3), [1, 2], 3.0, FakeDeviceArray(np.zeros(2))):
        assert not is_cupy(x) and array_module(x) is np


def test_to_host_returns_numpy_arrays_as_they_are():
    x = np.arange(4)
    assert to_host(x) is x


def test_to_host_copies_device_arrays_and_converts_sequences():
    host = to_host(FakeDeviceArray(np.arange(3.0)))
    assert isinstance(host, np.ndarray) and host.tolist() == [0.0, 1.0, 2.0]
    assert to_host([1, 2]).tolist() == [1, 2]
