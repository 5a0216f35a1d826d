"""Round trips: every dtype bit for bit, scalars with their types, nested containers,
empty and uneven blocks, any world size, either backend; the index read with plain h5py."""
import pickle

import h5py
import ml_dtypes
import numpy as np
import pytest

from hpcdist.checkpoint import CheckpointManager, Sharded
from hpcdist.checkpoint.plan import STRIPE_MIN_BYTES
from tests.checkpoint.conftest import (
    BACKENDS,
    PARALLEL_H5PY,
    balanced_block,
    local_block,
    same_bits,
    uneven_counts,
)
from tests.fake_device import FakeDeviceArray
from tests.helpers import all_ranks, mpi_twin

DTYPES = {str(np.dtype(d)): np.dtype(d) for d in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64, np.longdouble, np.complex64, np.complex128,
    np.clongdouble, ml_dtypes.bfloat16, ">f8", "<U3", "S4", "M8[ns]", "m8[us]", "V5",
    [("a", "<i4"), ("b", "<f8", (2,))])}


def _global_array(dtype, shape, seed):
    """Random bits of ``dtype`` (NaN payloads, subnormals, ...); proper 0/1 for bool."""
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    count = int(np.prod(shape))
    return np.frombuffer(rng.bytes(count * dtype.itemsize), dtype=dtype).reshape(shape).copy()


SCALARS = {"int": 7, "big_int": -(2**100) + 3, "float": -0.1, "nan": float("nan"),
           "bool": True, "false": False, "complex": 1.5 - 2j, "str": "héllo\x00wörld\x00",
           "empty_str": "", "bytes": b"\x00\xff\x00", "none": None,
           "np_int8": np.int8(-3), "np_uint64": np.uint64(2**64 - 1), "np_f16": np.float16(0.5),
           "np_bool": np.bool_(True), "np_c64": np.complex64(1 + 1j),
           "np_ld": np.longdouble("1.1"), "np_str": np.str_("zz"), "np_dt": np.datetime64(5, "s")}


def _state(ctx):
    counts = uneven_counts(ctx.size)
    sharded, replicated, expected = {}, {}, {}
    for index, (name, dtype) in enumerate(DTYPES.items()):
        full = _global_array(dtype, (sum(counts), 2), seed=index)
        sharded[name] = Sharded(local_block(full, counts, ctx.rank))
        replicated[name] = _global_array(dtype, (3,), seed=100 + index)
        expected[name] = full
    columns = _global_array(np.dtype(np.float32), (2, sum(counts) + 1), seed=999)
    counts_axis1 = list(counts)
    counts_axis1[-1] += 1
    state = {
        "sharded": sharded, "replicated": replicated, "scalars": dict(SCALARS),
        "by_columns": Sharded(local_block(columns, counts_axis1, ctx.rank, axis=1), axis=1),
        "empty": Sharded(np.zeros((0, 3), np.int16)),
        "zero_d": np.array(2.5), "nested": {"list": [1, [2.0, {"deep": np.arange(3)}]],
                                            "tuple": ("a", np.ones(2, np.uint8)), "empty": {},
                                            "empty_list": []},
        "big": np.arange(STRIPE_MIN_BYTES // 8 * 3 + 7, dtype=np.float64),  # striped
    }
    return state, expected, columns


def _check_restored(restored, ctx, state, expected, columns):
    rank, size = ctx.rank, ctx.size
    for name in DTYPES:
        same_bits(restored["sharded"][name], balanced_block(expected[name], rank, size), name)
        same_bits(restored["replicated"][name], state["replicated"][name], "replicated " + name)
    same_bits(restored["by_columns"], balanced_block(columns, rank, size, axis=1), "by_columns")
    same_bits(restored["empty"], np.zeros((0, 3), np.int16), "empty")
    same_bits(restored["zero_d"], np.array(2.5), "zero_d")
    same_bits(restored["big"], state["big"], "big")
    for key, value in SCALARS.items():
        got = restored["scalars"][key]
        assert type(got) is type(value), f"{key}: {type(got)} is not {type(value)}"
        if isinstance(value, (np.generic, float)):  # bits (NaN); scalars' padding aside
            assert np.asarray(got).tobytes() == np.asarray(value).tobytes(), f"{key}: {got!r}"
        else:
            assert got == value, f"{key}: {got!r} != {value!r}"
    nested = restored["nested"]
    assert nested["list"][:1] == [1] and nested["list"][1][0] == 2.0
    same_bits(nested["list"][1][1]["deep"], np.arange(3), "deep")
    assert isinstance(nested["tuple"], tuple) and nested["tuple"][0] == "a"
    same_bits(nested["tuple"][1], np.ones(2, np.uint8), "tuple item")
    assert nested["empty"] == {} and nested["empty_list"] == []
    assert list(restored) == list(state)


@pytest.mark.parametrize("backend", BACKENDS)
def test_round_trip_every_dtype_scalar_and_container(ctx, shared_dir, backend):
    state, expected, columns = _state(ctx)
    mgr = CheckpointManager(shared_dir, backend=backend, ctx=ctx)
    mgr.save(7, state, metadata={"epoch": 2, "note": "round trip"})
    restored = mgr.restore()
    with all_ranks("restored state"):
        assert mgr.restored_step == 7 and mgr.restored_metadata["note"] == "round trip"
        assert mgr.steps() == [7] and mgr.metadata(7)["epoch"] == 2
        _check_restored(restored, ctx, state, expected, columns)
    with all_ranks("plain h5py reads index.h5"):
        if ctx.rank == 0:
            with h5py.File(shared_dir / "step_000000007" / "index.h5", "r") as index:
                for name, dtype in DTYPES.items():
                    stored = index["sharded"][name][...]
                    if index["sharded"][name].attrs.get("hpcdist_dtype") is not None:
                        stored = stored.view(index["sharded"][name].attrs["hpcdist_dtype"])
                    same_bits(stored.view(dtype), expected[name], "index " + name)
                same_bits(index["by_columns"][...], columns, "index by_columns")
                same_bits(index["big"][...], state["big"], "index big")
                assert index["scalars/int"][()] == 7
                assert index.attrs["hpcdist_step"] == 7


test_round_trip_every_dtype_scalar_and_container_mpi = mpi_twin(
    test_round_trip_every_dtype_scalar_and_container)


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_is_global_arrays_for_plain_h5py(ctx, shared_dir, backend):
    counts = uneven_counts(ctx.size)
    full = np.arange(sum(counts) * 4, dtype=np.float64).reshape(-1, 4)
    wide = np.arange(3 * (ctx.size + 2), dtype=np.int32).reshape(3, -1)
    wide_counts = [1] * ctx.size
    wide_counts[0] += 2
    mgr = CheckpointManager(shared_dir, backend=backend, ctx=ctx)
    mgr.save(1, {"X": Sharded(local_block(full, counts, ctx.rank)),
                 "W": Sharded(local_block(wide, wide_counts, ctx.rank, axis=1), axis=1),
                 "g": {"b": np.arange(5)}})
    with all_ranks("index.h5"):
        if ctx.rank == 0:
            with h5py.File(shared_dir / "step_000000001" / "index.h5", "r") as index:
                np.testing.assert_array_equal(index["X"][...], full)
                np.testing.assert_array_equal(index["W"][...], wide)
                np.testing.assert_array_equal(index["g/b"][...], np.arange(5))
                np.testing.assert_array_equal(index["X"][2:4, 1], full[2:4, 1])


test_index_is_global_arrays_for_plain_h5py_mpi = mpi_twin(
    test_index_is_global_arrays_for_plain_h5py)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("backend", BACKENDS)
def test_reshard_to_fewer_and_more_ranks_in_this_world(ctx, shared_dir, backend):
    """Save at this world size, restore at every smaller one (sub-contexts); save at one
    rank, restore at all."""
    full = np.arange(23 * 2, dtype=np.int64).reshape(23, 2)
    counts = uneven_counts(ctx.size)
    counts[-1] += 23 - sum(counts)
    mgr = CheckpointManager(shared_dir, backend=backend, ctx=ctx)
    mgr.save(3, {"X": Sharded(local_block(full, counts, ctx.rank)), "w": np.ones(4)})
    for k in range(1, ctx.size):
        sub = ctx.group(range(k))
        with all_ranks(f"restore at {k} of {ctx.size} ranks"):
            if sub is not None:
                state = CheckpointManager(shared_dir, backend=backend, ctx=sub).restore()
                same_bits(state["X"], balanced_block(full, sub.rank, k), f"X at {k} ranks")
                same_bits(state["w"], np.ones(4), "w")
    solo = ctx.group([0])
    with all_ranks("save at 1 rank"):
        if solo is not None:
            CheckpointManager(shared_dir, backend="sharded", ctx=solo).save(
                4, {"X": Sharded(full), "w": np.zeros(4)})
    state = CheckpointManager(shared_dir, backend=backend, ctx=ctx).restore()
    with all_ranks("restore at every rank"):
        same_bits(state["X"], balanced_block(full, ctx.rank, ctx.size), "X")
        same_bits(state["w"], np.zeros(4), "w")


def test_restore_never_unpickles(ctx, shared_dir, monkeypatch):
    mgr = CheckpointManager(shared_dir, ctx=ctx)
    mgr.save(1, {"a": np.arange(3), "s": "x", "n": {"k": 2**70}})

    def refuse(*args, **kwargs):
        raise AssertionError("restore unpickled something")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    state = mgr.restore()
    assert state["n"]["k"] == 2**70 and state["s"] == "x"


@pytest.mark.parametrize("backend", BACKENDS)
def test_either_backend_restores_either_backends_checkpoint(ctx, shared_dir, backend):
    """Save with ``backend``, restore with the other one, and the reverse."""
    other = {"sharded": "mpio", "mpio": "sharded"}[backend]
    if not PARALLEL_H5PY:
        pytest.skip("needs the mpio backend, i.e. a parallel h5py (system environment)")
    counts = uneven_counts(ctx.size)
    full = _global_array(np.dtype(np.complex64), (sum(counts), 3), seed=5)
    state = {"X": Sharded(local_block(full, counts, ctx.rank)),
             "bf": np.ones(3, ml_dtypes.bfloat16)}
    CheckpointManager(shared_dir, backend=backend, ctx=ctx).save(1, state)
    restored = CheckpointManager(shared_dir, backend=other, ctx=ctx).restore()
    CheckpointManager(shared_dir, backend=other, ctx=ctx).save(2, state)
    again = CheckpointManager(shared_dir, backend=backend, ctx=ctx).restore()
    with all_ranks("cross-backend restore"):
        for result in (restored, again):
            same_bits(result["X"], balanced_block(full, ctx.rank, ctx.size), "X")
            same_bits(result["bf"], state["bf"], "bf")


test_either_backend_restores_either_backends_checkpoint_mpi = mpi_twin(
    test_either_backend_restores_either_backends_checkpoint)


def test_device_arrays_are_saved_from_the_host_and_restored_as_numpy(ctx, shared_dir):
    full = np.arange(6 * ctx.size, dtype=np.float32).reshape(-1, 2)
    local = FakeDeviceArray(balanced_block(full, ctx.rank, ctx.size))
    mgr = CheckpointManager(shared_dir, async_save=True, ctx=ctx)
    mgr.save(1, {"X": Sharded(local), "w": FakeDeviceArray(np.ones(3))})
    state = mgr.restore()
    with all_ranks("device arrays"):
        same_bits(state["X"], balanced_block(full, ctx.rank, ctx.size), "X")
        same_bits(state["w"], np.ones(3), "w")


test_device_arrays_are_saved_from_the_host_and_restored_as_numpy_mpi = mpi_twin(
    test_device_arrays_are_saved_from_the_host_and_restored_as_numpy)
