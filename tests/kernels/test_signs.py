"""1-bit sign packing: exact round trip of the signs, payload size, scales."""
import numpy as np
import pytest

from hpcdist.kernels import sign_pack, sign_pack_feedback, sign_subtract, sign_unpack

DTYPES = [np.float32, np.float64]


def _check(x, chunk_size):
    n = x.size
    packed, scales = sign_pack(x, chunk_size)
    nc = -(-n // chunk_size)
    assert packed.dtype == np.uint8 and packed.shape == (-(-n // 8),)
    assert scales.dtype == np.float32 and scales.shape == (nc,)
    assert packed.nbytes + scales.nbytes == -(-n // 8) + 4 * nc
    np.testing.assert_array_equal(packed, np.packbits(x.ravel() >= 0, bitorder="little"))
    d = sign_unpack(packed, scales, n, chunk_size, x.dtype)
    assert d.dtype == x.dtype and d.shape == (n,)
    np.testing.assert_array_equal(d >= 0, x.ravel() >= 0)
    return packed, scales, d


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1001, 100_003])
@pytest.mark.parametrize("chunk_size", [1, 3, 8, 1000, 1 << 20])
def test_round_trip(n, dtype, chunk_size):
    x = np.random.default_rng(n).standard_normal(n).astype(dtype)
    _, scales, d = _check(x, chunk_size)
    nc = scales.size
    padded = np.zeros(nc * chunk_size)
    padded[:n] = np.abs(x)
    counts = np.full(nc, chunk_size)
    if nc:
        counts[-1] = n - chunk_size * (nc - 1)
    np.testing.assert_allclose(scales, padded.reshape(nc, chunk_size).sum(axis=1) / counts,
                               rtol=1e-6)
    np.testing.assert_array_equal(np.abs(d), np.repeat(scales, chunk_size)[:n].astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,chunk_size", [(0, 4), (1, 1), (1001, 3), (100_003, 1000)])
def test_sign_subtract_is_minus_the_unpacked_signs(n, chunk_size, dtype):
    rng = np.random.default_rng(n)
    packed, scales = sign_pack(rng.standard_normal(n).astype(dtype), chunk_size)
    out = rng.standard_normal(n).astype(dtype)
    expected = out - sign_unpack(packed, scales, n, chunk_size, dtype)
    assert sign_subtract(out, packed, scales, chunk_size) is out
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,chunk_size", [(0, 4), (1, 1), (7, 3), (1001, 3), (100_003, 1000),
                                          (100_003, 1 << 20), (70_001, 12)])
def test_sign_pack_feedback_equals_add_pack_subtract(n, chunk_size, dtype):
    """The fused pass gives the payload and residual of the three separate calls, bit for bit."""
    rng = np.random.default_rng(n + chunk_size)
    residual = rng.standard_normal(n).astype(dtype)
    x = rng.standard_normal(n).astype(dtype)
    expected = residual + x
    packed, scales = sign_pack(expected, chunk_size)
    sign_subtract(expected, packed, scales, chunk_size)
    fused_packed, fused_scales = sign_pack_feedback(residual, x.reshape(-1, 1), chunk_size)
    np.testing.assert_array_equal(fused_packed, packed)
    np.testing.assert_array_equal(fused_scales, scales)
    np.testing.assert_array_equal(residual, expected)


def test_sign_pack_feedback_rejects_bad_input():
    residual = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="x has 9 elements but residual has 10"):
        sign_pack_feedback(residual, np.zeros(9, np.float32), 4)
    with pytest.raises(ValueError, match="read-only"):
        frozen = np.zeros(10, np.float32)
        frozen.flags.writeable = False
        sign_pack_feedback(frozen, np.zeros(10, np.float32), 4)
    with pytest.raises(TypeError, match="residual should be a float32 or float64 array"):
        sign_pack_feedback(np.zeros(10, np.int32), np.zeros(10, np.float32), 4)
    with pytest.raises(ValueError, match="chunk_size=0 should be >= 1"):
        sign_pack_feedback(residual, np.zeros(10, np.float32), 0)


def test_sign_of_zero_and_shape():
    x = np.array([[0.0, -0.0, -1.0, 2.0]], np.float32)
    packed, scales = sign_pack(x, 4)
    assert packed[0] == 0b1011
    np.testing.assert_array_equal(sign_unpack(packed, scales, 4, 4), [0.75, 0.75, -0.75, 0.75])


@pytest.mark.slow
def test_ten_million():
    x = np.random.default_rng(0).standard_normal(10_000_001).astype(np.float32)
    packed, scales, _ = _check(x, 4096)
    assert packed.nbytes == 1_250_001                  # n/8 bytes: a real 32x on float32


@pytest.mark.parametrize("call,exc,match", [
    (lambda: sign_pack(np.ones(3), 0), ValueError, r"chunk_size=0 should be >= 1"),
    (lambda: sign_pack(np.ones(3, np.int64), 2), TypeError, r"float32 or float64"),
    (lambda: sign_unpack(np.zeros(1, np.uint8), np.ones(1, np.float32), 9, 9), ValueError,
     r"n=9 needs 2"),
    (lambda: sign_unpack(np.zeros(1, np.uint8), np.ones(2, np.float32), 8, 8), ValueError,
     r"scales has 2 entries"),
    (lambda: sign_unpack(np.zeros(1, np.int8), np.ones(1, np.float32), 8, 8), TypeError,
     r"uint8"),
    (lambda: sign_subtract(np.zeros(9), np.zeros(1, np.uint8), np.ones(1, np.float32), 9),
     ValueError, r"n=9 needs 2"),
])
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
