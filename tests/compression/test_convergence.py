"""Data-parallel least squares with plain SGD: compressed training with error
feedback reaches the loss of uncompressed training (within 5%)."""
import numpy as np
import pytest

from hpcdist.compression import (
    ErrorFeedback,
    NoCompression,
    SignCompressor,
    TopKCompressor,
    compressed_allreduce,
)
from tests.helpers import assert_on_all_ranks

N_LOCAL, N_FEATURES, STEPS, LR = 200, 200, 600, 0.5


def _data(rank):
    """This rank's rows: well conditioned features, a fixed model, noise."""
    rng = np.random.default_rng([42, rank])
    a = rng.standard_normal((N_LOCAL, N_FEATURES)) / np.sqrt(N_FEATURES)
    w_true = np.random.default_rng(42).standard_normal(N_FEATURES)
    b = a @ w_true + 0.1 * rng.standard_normal(N_LOCAL)
    return a, b


def _global_loss(w, size):
    """Mean squared error over the rows of all ranks (regenerated, no communication)."""
    losses = []
    for r in range(size):
        a, b = _data(r)
        losses.append(np.mean((a @ w - b) ** 2))
    return 0.5 * float(np.mean(losses))


def _train(ctx, compressor, name):
    a, b = _data(ctx.rank)
    w = np.zeros(N_FEATURES)
    for _ in range(STEPS):
        grad = a.T @ (a @ w - b) / N_LOCAL
        w -= LR * compressed_allreduce(grad, compressor, name=name, ctx=ctx)
    return _global_loss(w, ctx.size)


def _check(ctx):
    dense = _train(ctx, NoCompression(), "dense")
    start = _global_loss(np.zeros(N_FEATURES), ctx.size)
    results = {
        "topk 1% + EF": _train(ctx, ErrorFeedback(TopKCompressor(0.01)), "topk"),
        "sign + EF": _train(ctx, ErrorFeedback(SignCompressor()), "sign"),
    }
    for label, loss in results.items():
        assert_on_all_ranks(loss <= 1.05 * dense,
                            f"{label}: final loss {loss:.5g} > 1.05 x uncompressed {dense:.5g} "
                            f"(initial {start:.5g})")
    assert_on_all_ranks(dense < 0.05 * start, f"uncompressed did not train: {dense} vs {start}")
    # the problem discriminates: top-k 1% without error feedback stays far behind
    plain = _train(ctx, TopKCompressor(0.01), "topk-plain")
    assert_on_all_ranks(plain > 2 * dense, f"top-k without EF: {plain:.5g} vs {dense:.5g}")


@pytest.mark.mpi(min_size=2)
def test_convergence_data_parallel(ctx):
    _check(ctx)


def test_convergence_serial(ctx):
    if ctx.size != 1:
        pytest.skip("serial test")
    _check(ctx)
