"""compressed_allreduce compares the compressor's settings, the name, op and the array's
dtype and shape across ranks at a name's first call (before, a difference gave a silent
wrong result or an MPI 'Message truncated' abort), and costs nothing at later calls."""
import numpy as np
import pytest

import hpcdist
from hpcdist.compression import (
    ErrorFeedback,
    FP16Compressor,
    PowerSGDCompressor,
    QSGDCompressor,
    RandomKCompressor,
    SignCompressor,
    TopKCompressor,
    collective,
    compressed_allreduce,
)
from tests.helpers import expect_error


def _last_rank():
    return hpcdist.get_rank() == hpcdist.get_world_size() - 1


def _mismatch(compressor, x, match, **options):
    error = expect_error(ValueError, compressed_allreduce, x, compressor,
                         name=options.pop("name", "w"), **options,
                         match=[r"compressed_allreduce: ", *match])
    assert isinstance(error, hpcdist.ConfigMismatchError)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("usual, other, setting", [
    (lambda: FP16Compressor(), lambda: TopKCompressor(0.5), "TopKCompressor"),
    (lambda: RandomKCompressor(0.25, seed=0), lambda: RandomKCompressor(0.25, seed=1),
     r"seed=1"),
    (lambda: PowerSGDCompressor(rank=1), lambda: PowerSGDCompressor(rank=2), r"rank=2"),
    (lambda: ErrorFeedback(SignCompressor()), lambda: SignCompressor(), r"SignCompressor"),
])
def test_compressor_settings_differ_on_one_rank(usual, other, setting):
    compressor = other() if _last_rank() else usual()
    _mismatch(compressor, np.ones((8, 6), dtype=np.float32),
              [r"compressor differs across ranks", setting])


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("make", [FP16Compressor, lambda: PowerSGDCompressor(rank=1)])
def test_shape_differs_on_one_rank(make):
    x = np.ones((8, 5) if _last_rank() else (8, 6), dtype=np.float32)
    _mismatch(make(), x, [r"array differs across ranks", r"float32\[8, 5\]"])


@pytest.mark.mpi(min_size=2)
def test_name_and_op_differ_on_one_rank():
    x = np.ones(16, dtype=np.float32)
    _mismatch(FP16Compressor(), x, [r"name differs"], name="b" if _last_rank() else "a")
    _mismatch(FP16Compressor(), x, [r"op differs"], op="sum" if _last_rank() else "mean")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("make", [lambda: QSGDCompressor(8), lambda: ErrorFeedback(
    QSGDCompressor(8))])
def test_a_seed_meant_to_differ_by_rank_is_not_compared(make):
    x = np.ones(12, dtype=np.float32)
    result = compressed_allreduce(x, make(), name="q")  # each rank's own default seed
    assert result.shape == x.shape


@pytest.mark.mpi(min_size=2)
def test_agreed_once_per_name(monkeypatch):
    calls = []
    original = collective.agree_config
    monkeypatch.setattr(collective, "agree_config",
                        lambda *args, **kwargs: calls.append(args[1]) or original(*args, **kwargs))
    compressor = TopKCompressor(0.5)
    x = np.arange(16, dtype=np.float64)
    for _ in range(3):
        for name in ("a", "b"):
            result = compressed_allreduce(x, compressor, name=name, op="sum")
    assert len(calls) == 2
    np.testing.assert_allclose(result[8:], x[8:] * hpcdist.get_world_size())


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("make", [lambda: TopKCompressor(0.5), lambda: SignCompressor(),
                                  lambda: ErrorFeedback(TopKCompressor(0.5))])
def test_a_later_shape_change_on_one_rank_raises_on_every_rank(make):
    compressor = make()
    compressed_allreduce(np.ones(16, dtype=np.float32), compressor, name="g")
    x = np.ones(12 if _last_rank() else 16, dtype=np.float32)
    expect_error(ValueError, compressed_allreduce, x, compressor, name="g",
                 match=r"'g'.*(first used with shape \(16,\) and dtype float32, now with shape "
                       r"\(12,\)|another dtype or shape than at its first call)")
    result = compressed_allreduce(np.ones(16, dtype=np.float32), compressor, name="g")
    assert result.shape == (16,)  # the name goes on with its agreed shape
