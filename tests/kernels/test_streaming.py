"""stream_copy: an exact copy at every size and alignment, with non-temporal stores."""
import platform

import numba
import numpy as np
import pytest

from hpcdist.exceptions import InvalidArgumentError, InvalidArgumentTypeError
from hpcdist.kernels import streaming
from hpcdist.kernels.streaming import STREAM_MIN_BYTES, stream_copy


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.float16])
@pytest.mark.parametrize("n_bytes", [0, 1, 31, STREAM_MIN_BYTES + 7, 3 * (1 << 22) + 5])
@pytest.mark.parametrize("source_offset, target_offset", [(0, 0), (1, 0), (0, 3), (5, 2)])
def test_copies_exactly_at_any_size_and_alignment(dtype, n_bytes, source_offset,
                                                  target_offset):
    itemsize = np.dtype(dtype).itemsize
    n = n_bytes // itemsize
    rng = np.random.default_rng(n_bytes)
    source = rng.integers(-100, 100, n + source_offset + 1).astype(dtype)[source_offset:][:n]
    target = np.zeros(n + target_offset + 1, dtype)[target_offset:][:n]
    after = target.base[target_offset + n:].copy() if target.base is not None else None
    assert stream_copy(target, source) is target
    np.testing.assert_array_equal(target, source)
    if after is not None:  # nothing written past the end
        np.testing.assert_array_equal(target.base[target_offset + n:], after)


def test_keeps_the_shape_and_splits_over_threads(monkeypatch):
    source = np.arange(3 << 21, dtype=np.float64).reshape(3, -1)
    target = np.empty_like(source)
    calls = []
    monkeypatch.setattr(streaming, "in_threads", lambda *args: calls.append(args) or
                        streaming._stream_copy_kernel(*args[2:], 0, args[1]))
    stream_copy(target, source)
    np.testing.assert_array_equal(target, source)
    assert len(calls) == 1 and calls[0][1] == source.nbytes


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 instruction names")
def test_the_kernel_uses_non_temporal_stores():
    kernel = numba.njit(streaming._stream_copy_kernel.py_func)  # not cached: inspectable
    source = np.ones(STREAM_MIN_BYTES, np.uint8)
    kernel(np.empty_like(source), source, 0, source.size)
    assert "movnt" in kernel.inspect_asm(kernel.signatures[0])


@pytest.mark.parametrize("out, x, error, message", [
    (np.zeros(4, np.float32), np.zeros(4, np.float64), InvalidArgumentError, "same"),
    (np.zeros(4), np.zeros(5), InvalidArgumentError, "same"),
    (np.zeros((4, 4))[:, :2], np.zeros((4, 2)), InvalidArgumentError, "C-contiguous"),
    (np.zeros(4), [0.0] * 4, InvalidArgumentTypeError, "x should be an array"),
])
def test_bad_arguments_are_refused_by_name(out, x, error, message):
    with pytest.raises(error, match=message):
        stream_copy(out, x)


def test_a_read_only_target_is_refused():
    out = np.zeros(STREAM_MIN_BYTES)
    out.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="read-only"):
        stream_copy(out, np.ones_like(out))
