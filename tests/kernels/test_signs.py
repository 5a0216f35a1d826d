"""1-bit sign packing: exact round trip of the signs, payload size, scales."""
import numpy as np
import pytest

from hpcdist.kernels import sign_pack, sign_subtract, sign_unpack

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
