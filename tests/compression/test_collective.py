"""compressed_allreduce at 1-4 ranks against NumPy references of each scheme.

Expected values are computed on every rank from all ranks' deterministic
inputs (``rank_input(r, ...)`` for r in range(size)).
"""
import numpy as np
import pytest

from hpcdist import kernels
from hpcdist.compression import (
    BF16Compressor,
    ErrorFeedback,
    FP16Compressor,
    NoCompression,
    PowerSGDCompressor,
    QSGDCompressor,
    RandomKCompressor,
    SignCompressor,
    TopKCompressor,
    compressed_allreduce,
)
from hpcdist.compression.base import call_seed
from hpcdist.compression.powersgd import initial_q
from tests.compression.reference import PowerSGDReference, integer_input, rank_input, topk_dense
from tests.helpers import all_ranks, check_array, expect_error, same_on_all_ranks

mpi = pytest.mark.mpi(min_size=2)
FLOATS = [np.float32, np.float64]


def _bytes_sent(ctx):
    return ctx.stats().get("compressed_allreduce", {}).get("bytes_sent", 0)


def _run(ctx, x, compressor, name, op="mean"):
    """compressed_allreduce plus the bytes it recorded."""
    before = _bytes_sent(ctx)
    out = compressed_allreduce(x, compressor, name=name, op=op, ctx=ctx)
    return out, _bytes_sent(ctx) - before


def _gathered(size, shape, dtype, fn=rank_input, seed=0):
    return [fn(r, shape, dtype, seed=seed) for r in range(size)]


@mpi
@pytest.mark.parametrize("op", ["mean", "sum"])
@pytest.mark.parametrize("dtype", FLOATS + [np.int64])
def test_no_compression_exact(ctx, op, dtype):
    xs = _gathered(ctx.size, (6, 7), dtype, integer_input)
    if op == "mean" and dtype == np.int64:  # no integer mean, as in hpcdist.allreduce
        expect_error(TypeError, _run, ctx, xs[ctx.rank], NoCompression(), "w", op,
                     match="mean")
        return
    out, sent = _run(ctx, xs[ctx.rank], NoCompression(), "w", op)
    total = sum(xs)
    expected = total if op == "sum" else total / ctx.size
    with all_ranks("NoCompression"):
        check_array(out, expected.astype(dtype), rtol=0, atol=0)
        assert sent == xs[0].nbytes


@mpi
@pytest.mark.parametrize("cls,half", [(FP16Compressor, np.float16), (BF16Compressor, None)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_half_casts(ctx, cls, half, dtype):
    xs = _gathered(ctx.size, (40,), dtype)
    out, sent = _run(ctx, xs[ctx.rank], cls(), "h")
    tol = 2e-3 if half is np.float16 else 2e-2
    with all_ranks(cls.__name__):
        check_array(out, sum(xs) / ctx.size, rtol=tol, atol=tol)
        assert sent == 40 * 2


@mpi
@pytest.mark.parametrize("dtype", FLOATS)
def test_topk(ctx, dtype):
    xs = _gathered(ctx.size, (10, 50), dtype)
    k = 25  # ratio 0.05 of 500
    out, sent = _run(ctx, xs[ctx.rank], TopKCompressor(0.05), "t")
    expected = sum(topk_dense(x, k) for x in xs) / ctx.size
    with all_ranks("TopK"):
        check_array(out, expected)
        assert sent == k * (8 + np.dtype(dtype).itemsize)


@mpi
@pytest.mark.parametrize("dtype", FLOATS)
def test_randomk_shared_indices(ctx, dtype):
    c = RandomKCompressor(0.1, seed=11)
    for step in range(2):
        xs = _gathered(ctx.size, (200,), dtype, seed=step)
        out, sent = _run(ctx, xs[ctx.rank], c, "r")
        idx = kernels.randomk_indices(200, 20, call_seed(11, "r", step))
        expected = np.zeros(200, dtype)
        expected[idx] = sum(x[idx] for x in xs) / ctx.size
        with all_ranks("RandomK"):
            check_array(out, expected)
            assert sent == 20 * np.dtype(dtype).itemsize
        assert same_on_all_ranks(out.tobytes())


@mpi
@pytest.mark.parametrize("levels", [8, 256])
def test_qsgd(ctx, levels):
    xs = _gathered(ctx.size, (3, 33), np.float32)
    c = QSGDCompressor(levels)  # the default seed is the rank: independent rounding per rank
    out, sent = _run(ctx, xs[ctx.rank], c, "q")
    expected = np.zeros((3, 33), np.float64)
    for r, x in enumerate(xs):
        norm, q = kernels.qsgd_quantize(x.reshape(-1), levels, call_seed(r, "q", 0))
        expected += (norm * q.astype(np.float64) / levels).reshape(3, 33)
    with all_ranks("QSGD"):
        check_array(out, (expected / ctx.size).astype(np.float32), rtol=1e-5, atol=1e-6)
        assert sent == 8 + 99 * (1 if levels <= 127 else 2)


@mpi
@pytest.mark.parametrize("n,chunk", [(100, 16), (4100, 1024)])
def test_sign(ctx, n, chunk):
    xs = _gathered(ctx.size, (n,), np.float32)
    out, sent = _run(ctx, xs[ctx.rank], SignCompressor(chunk), "s")
    expected = np.zeros(n, np.float32)
    for x in xs:  # scaled sign of every rank, one magnitude per chunk
        local = SignCompressor(chunk)
        dense = local.decompress(*local.compress(x, "s"))
        with all_ranks("sign round trip"):
            np.testing.assert_array_equal(np.sign(dense), np.sign(x))
            for i in range(0, n, chunk):
                assert np.ptp(np.abs(dense[i:i + chunk])) == 0
        expected += dense
    with all_ranks("Sign"):
        check_array(out, expected / ctx.size)
        assert sent == -(-n // 8) + 4 * -(-n // chunk)


@mpi
@pytest.mark.parametrize("op", ["mean", "sum"])
def test_powersgd_two_rounds(ctx, op):
    c = PowerSGDCompressor(2, seed=9)
    ref = PowerSGDReference(initial_q(9, "m", 24, 2, np.float64), ctx.size)
    for step in range(3):
        xs = _gathered(ctx.size, (16, 4, 6), np.float64, seed=step)
        out, sent = _run(ctx, xs[ctx.rank], c, "m", op)
        expected = ref.step([x.reshape(16, 24) for x in xs]).reshape(16, 4, 6)
        if op == "mean":
            expected /= ctx.size
        with all_ranks(f"PowerSGD step {step}"):
            check_array(out, expected, rtol=1e-9, atol=1e-10)
            np.testing.assert_allclose(c.residual("m"), ref.errors[ctx.rank], rtol=1e-9,
                                       atol=1e-10)
            assert sent == (16 + 24) * 2 * 8
    # 1-D tensors travel dense and are summed exactly
    xs = _gathered(ctx.size, (9,), np.float64, integer_input)
    out, sent = _run(ctx, xs[ctx.rank], c, "bias", op)
    with all_ranks("PowerSGD dense"):
        check_array(out, sum(xs) / (ctx.size if op == "mean" else 1), rtol=0, atol=0)
        assert sent == 9 * 8


@mpi
def test_error_feedback_collective(ctx):
    c = ErrorFeedback(TopKCompressor(0.1))
    refs = [np.zeros(50, np.float32) for _ in range(ctx.size)]
    for step in range(3):
        xs = _gathered(ctx.size, (50,), np.float32, seed=step)
        out, sent = _run(ctx, xs[ctx.rank], c, "e")
        expected = np.zeros(50, np.float32)
        for r in range(ctx.size):
            corrected = xs[r] + refs[r]
            sent_r = topk_dense(corrected, 5)
            refs[r] = corrected - sent_r
            expected += sent_r
        with all_ranks("ErrorFeedback"):
            check_array(out, expected / ctx.size)
            np.testing.assert_allclose(c.residual("e"), refs[ctx.rank], rtol=1e-6, atol=1e-6)
            assert sent == 5 * 12


@mpi
def test_stats_calls_and_received(ctx):
    before = ctx.stats().get("compressed_allreduce", {"calls": 0, "bytes_received": 0})
    x = rank_input(ctx.rank, (64,), np.float32)
    compressed_allreduce(x, SignCompressor(16), name="stats", ctx=ctx)
    after = ctx.stats()["compressed_allreduce"]
    with all_ranks("stats"):
        assert after["calls"] == before["calls"] + 1
        assert after["bytes_received"] - before["bytes_received"] == ctx.size * (8 + 16)


@mpi
def test_bad_op_and_name(ctx):
    expect_error(ValueError, compressed_allreduce, np.ones(3), NoCompression(), name="o",
                 op="max", ctx=ctx, match="op='max'")
    c = TopKCompressor(0.5)
    compressed_allreduce(np.ones((2, 3)), c, name="n", ctx=ctx)
    expect_error(ValueError, compressed_allreduce, np.ones((3, 2)), c, name="n", ctx=ctx,
                 match=["'n'", r"\(2, 3\)", r"\(3, 2\)"])
    expect_error(TypeError, compressed_allreduce, np.ones(4, dtype=np.int32),
                 SignCompressor(), name="i", ctx=ctx, match="int32")
    expect_error(TypeError, compressed_allreduce, np.ones(3), "fp16", name="s", ctx=ctx,
                 match=r"compressed_allreduce: compression='fp16' is not a compressor .*"
                       r"collective=None.*e\.g\. hpcdist\.compression\.FP16Compressor\(\)")


# -- a context of one rank: no communication, the local round trip --------------------------

@pytest.mark.parametrize("make", [NoCompression, FP16Compressor, lambda: TopKCompressor(0.2),
                                  lambda: RandomKCompressor(0.2), lambda: QSGDCompressor(4),
                                  SignCompressor, lambda: PowerSGDCompressor(1)])
def test_single_rank_context(ctx, make):
    if ctx.size != 1:
        pytest.skip("serial test")
    x = rank_input(0, (20, 10), np.float32)
    local, c = make(), make()
    expected = local.decompress(*local.compress(x, "x"))
    out, sent = _run(ctx, x, c, "x")
    check_array(out, expected, rtol=1e-6, atol=1e-7)
    if isinstance(c, PowerSGDCompressor):  # two rounds: P (20, 1) then Q (10, 1)
        assert sent == (20 + 10) * 4
    else:
        assert sent == sum(a.nbytes for a in make().compress(x, "x")[0])


@mpi
def test_empty_and_single_element(ctx):
    makers = [NoCompression, FP16Compressor, BF16Compressor, lambda: TopKCompressor(0.5),
              lambda: RandomKCompressor(0.5), lambda: QSGDCompressor(4), SignCompressor,
              lambda: PowerSGDCompressor(1), lambda: ErrorFeedback(TopKCompressor(0.5))]
    for make in makers:
        out, _ = _run(ctx, np.zeros(0, np.float32), make(), "empty")
        with all_ranks(f"{make()!r} empty"):
            check_array(out, np.zeros(0, np.float32))
    xs = _gathered(ctx.size, (1,), np.float64, integer_input)
    for make in [NoCompression, lambda: TopKCompressor(0.5), lambda: RandomKCompressor(0.5),
                 lambda: PowerSGDCompressor(1)]:
        out, _ = _run(ctx, xs[ctx.rank], make(), "one", "sum")
        with all_ranks(f"{make()!r} one element"):
            check_array(out, sum(xs), rtol=0, atol=0)
