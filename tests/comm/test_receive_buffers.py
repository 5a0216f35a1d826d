"""The message channel's receive buffers: large ones reused only once nothing refers to them."""
import pickle

import numpy as np

from hpcdist.comm.messages import ReceiveBuffers, pack

MIB = 1 << 20


def test_a_buffer_is_reused_only_when_no_array_refers_to_it():
    buffers = ReceiveBuffers(smallest=MIB, limit=8 * MIB)
    first = buffers.take(2 * MIB)
    address = first.ctypes.data
    view = first[16:].view(np.float64)  # as an array unpickled over the buffer would be
    del first
    second = buffers.take(2 * MIB)
    assert second.ctypes.data != address  # the view still holds the first one
    del view
    third = buffers.take(2 * MIB)
    assert third.ctypes.data == address
    assert buffers.kept_bytes == 4 * MIB


def test_an_unpickled_array_keeps_its_buffer_from_reuse():
    x = np.arange(MIB // 8, dtype=np.float64)
    data, out_of_band = pack(x)
    buffers = ReceiveBuffers(smallest=MIB, limit=8 * MIB)
    part = buffers.take(out_of_band[0].raw().nbytes)
    part[...] = np.frombuffer(out_of_band[0].raw(), dtype=np.uint8)
    received = pickle.loads(data, buffers=[part])
    address = part.ctypes.data
    del part
    assert buffers.take(MIB).ctypes.data != address
    np.testing.assert_array_equal(received, x)
    del received
    assert buffers.take(MIB).ctypes.data == address


def test_small_buffers_are_new_and_the_limit_holds():
    buffers = ReceiveBuffers(smallest=MIB, limit=3 * MIB)
    small = buffers.take(1000)
    assert small.nbytes == 1000 and buffers.kept_bytes == 0
    held = [buffers.take(2 * MIB), buffers.take(2 * MIB)]  # the second is past the limit
    assert buffers.kept_bytes == 2 * MIB
    assert held[0].ctypes.data != held[1].ctypes.data


def test_a_buffer_that_does_not_fit_lets_go_of_unreferenced_ones():
    buffers = ReceiveBuffers(smallest=MIB, limit=3 * MIB)
    held = buffers.take(MIB)
    buffers.take(2 * MIB)  # kept, and then nothing refers to it
    assert buffers.kept_bytes == 3 * MIB
    other = buffers.take(2 * MIB - 8)  # a new size: the unreferenced 2 MiB makes room
    assert buffers.kept_bytes == MIB + 2 * MIB - 8  # the held one stays
    assert buffers.take(MIB).ctypes.data != held.ctypes.data
    del other
    too_big = buffers.take(3 * MIB)  # past the limit even with the room freed: not kept
    assert buffers.kept_bytes == MIB and too_big.nbytes == 3 * MIB
