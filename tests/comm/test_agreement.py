"""agree_config: settings that differ across ranks raise ConfigMismatchError on every rank.

Every disagreement must raise on EVERY rank (never hang), naming the setting and
each rank's value; equal settings (in any form that describes them equally) pass.
"""
import enum

import numpy as np
import pytest

import hpcdist
from hpcdist.comm.agreement import agree_config, describe_value
from tests.helpers import all_ranks, check_array, expect_error

pytestmark = pytest.mark.timeout(60)


class _Colour(enum.Enum):
    RED = "red"


class _Plain:
    def __init__(self, period):
        self.period = period


def _disagree(ctx, values, match):
    error = expect_error(hpcdist.ConfigMismatchError, agree_config, ctx, "Demo.fit", values,
                         match=match)
    with all_ranks("exception bases"):
        assert isinstance(error, hpcdist.HpcdistError) and isinstance(error, ValueError)
    return error


def _still_in_step(ctx):
    """A correct collective right after an error: no stale messages, no hang."""
    out = hpcdist.allreduce(np.full(3, ctx.rank + 1.0), "sum")
    with all_ranks("collective after mismatch"):
        check_array(out, np.full(3, ctx.size * (ctx.size + 1) / 2))


# --------------------------------------------------------------- describe_value (local)
def test_numbers_compare_exactly_and_numpy_scalars_read_as_python_numbers():
    assert describe_value(np.float64(0.1)) == describe_value(0.1) == "0.1"
    assert describe_value(np.int32(8)) == describe_value(8)
    assert describe_value(0.1) != describe_value(np.nextafter(0.1, 1.0))
    assert describe_value(1e-3) != describe_value(1.0000000000000002e-3)


def test_containers_arrays_and_objects_describe_without_addresses():
    assert describe_value((100,)) == "(100,)" and describe_value([1, 2]) == "[1, 2]"
    assert describe_value({"b": 1, "a": 2}) == describe_value({"a": 2, "b": 1})
    a = np.arange(6.0).reshape(2, 3)
    assert describe_value(a) == describe_value(a.copy())
    assert "float64[2, 3]" in describe_value(a)
    assert describe_value(a) != describe_value(a + 1)
    assert describe_value(np.dtype("float32")) == "dtype float32"
    assert describe_value(_Colour.RED) == "_Colour.RED"
    assert "0x" not in describe_value(_Plain(4))
    assert describe_value(_Plain(4)) != describe_value(_Plain(5))
    assert describe_value(np.random.default_rng(1)) == describe_value(np.random.default_rng(1))
    assert describe_value(np.random.RandomState(1)) != describe_value(np.random.RandomState(2))


def test_one_rank_returns_at_once(ctx):
    if ctx.size == 1:
        assert agree_config(ctx, "Demo.fit", {"n_clusters": 8}) is None


# --------------------------------------------------------------------- agreement
@pytest.mark.mpi(min_size=2)
def test_equal_settings_pass(ctx):
    values = {"n_clusters": 8, "tol": 1e-4, "init": "k-means++", "hidden": (100, 50),
              "dtype": np.dtype("float64"), "centres": np.ones((3, 2)), "seed": None,
              "scalar": np.float64(0.5) if ctx.rank == 0 else 0.5}
    agree_config(ctx, "Demo.fit", values)
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_an_integer_differing_names_it_and_each_ranks_value(ctx):
    n_clusters = 8 if ctx.rank == 0 else 4
    error = _disagree(ctx, {"tol": 1e-4, "n_clusters": n_clusters, "max_iter": ctx.rank},
                      match=[r"^Demo\.fit: n_clusters differs across ranks: rank 0 has 8, "])
    with all_ranks("later ranks grouped"):
        expected = "rank 1 has 4" if ctx.size == 2 else f"ranks 1-{ctx.size - 1} have 4"
        assert str(error).endswith(expected), str(error)
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_a_float_differing_in_the_last_digit_is_named(ctx):
    rate = 1e-3 if ctx.rank == 0 else 1.0000000000000002e-3
    _disagree(ctx, {"learning_rate_init": rate},
              match=[r"learning_rate_init differs", r"rank 0 has 0\.001\b",
                     r"ha(s|ve) 0\.0010000000000000002"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_a_dtype_differing_is_named(ctx):
    dtype = np.float32 if ctx.rank == ctx.size - 1 else np.float64
    _disagree(ctx, {"dtype": np.dtype(dtype), "n_features": 4},
              match=[r"dtype differs", "float32", "float64"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_an_array_differing_is_named_by_its_shape(ctx):
    centres = np.zeros((3, 2)) if ctx.rank == 0 else np.zeros((4, 2))
    _disagree(ctx, {"init": centres}, match=[r"init differs", r"float64\[3, 2\]",
                                             r"float64\[4, 2\]"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_a_setting_only_some_ranks_pass_is_named(ctx):
    values = {"shuffle": True}
    if ctx.rank == 0:
        values["seed"] = 3
    _disagree(ctx, values, match=[r"seed differs", r"rank 0 has 3", "nothing"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=3)
def test_three_values_each_named_with_its_ranks(ctx):
    seed = {0: 1, 1: 2}.get(ctx.rank, 3)
    _disagree(ctx, {"seed": seed}, match=[r"rank 0 has 1", r"rank 1 has 2",
                                          r"ranks? 2(-\d+)? ha(s|ve) 3"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=3)
def test_ranks_sharing_a_value_are_grouped(ctx):
    # rank 1 differs; ranks 0 and 2.. share the value and are listed together
    batch_size = 32 if ctx.rank == 1 else 64
    _disagree(ctx, {"batch_size": batch_size},
              match=[r"batch_size differs across ranks: ranks 0,2(-\d+)? have 64, rank 1 has 32$"])
    _still_in_step(ctx)
