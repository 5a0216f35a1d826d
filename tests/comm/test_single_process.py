"""size == 1: every collective is correct and makes no MPI call.

Serial tests (plain ``pytest``, one process). ``ctx.comm`` is swapped for an
object that fails on any use, so a collective that touches MPI fails loudly.
"""
import numpy as np
import pytest
from mpi4py import MPI

import hpcdist
from tests.helpers import check_array, check_scalar
from tests.reference import (
    ALL_DTYPES,
    BFLOAT16,
    dtype_name,
    is_bool,
    is_complex,
    is_int,
    make_input,
)


class _NoMPI:
    """Stands in for ctx.comm: any attribute access is an MPI call."""

    def __getattr__(self, name):
        raise AssertionError(f"size-1 fast path used the communicator: comm.{name}")

    def __bool__(self):
        raise AssertionError("size-1 fast path used the communicator (bool)")


def _communicator_slots(ctx):
    """(owner, attribute) of every communicator the context holds: ``ctx.comm``
    and any other MPI.Comm attribute of the context or of its direct members."""
    slots = [(ctx, "comm")]
    owners = [ctx] + [v for v in vars(ctx).values()
                      if hasattr(v, "__dict__") and not isinstance(v, type)
                      and type(v).__module__.startswith("hpcdist")]
    for owner in owners:
        for name, value in list(vars(owner).items()):
            if isinstance(value, MPI.Comm) and (owner, name) not in slots:
                slots.append((owner, name))
    return slots


@pytest.fixture
def solo(ctx):
    if ctx.size != 1:
        pytest.skip("single-process tests run without mpiexec")
    slots = _communicator_slots(ctx)
    saved = [getattr(owner, name) for owner, name in slots]
    for owner, name in slots:
        setattr(owner, name, _NoMPI())
    try:
        yield ctx
    finally:
        for (owner, name), value in zip(slots, saved):
            setattr(owner, name, value)


OPS = ["sum", "mean", "min", "max", "prod"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_name)
def test_allreduce_identity(solo, dtype, op):
    x = make_input(0, (3, 5), dtype, seed=501, op=op)
    if op == "mean" and (is_bool(dtype) or is_int(dtype)):
        with pytest.raises(TypeError):
            hpcdist.allreduce(x, op)
        return
    if op in ("min", "max") and is_complex(dtype):
        with pytest.raises(TypeError):
            hpcdist.allreduce(x, op)
        return
    out = hpcdist.allreduce(x, op)
    check_array(out, x, dtype=dtype)
    assert out is not x
    assert not np.shares_memory(out, x)


@pytest.mark.parametrize("algorithm", ["auto", "ring", "tree", "hierarchical"])
def test_allreduce_algorithms(solo, algorithm):
    x = make_input(0, (17,), np.float64, seed=502)
    check_array(hpcdist.allreduce(x, "sum", algorithm=algorithm), x)
    check_array(hpcdist.allreduce(np.zeros(0), "sum", algorithm=algorithm), np.zeros(0))


def test_allreduce_out_and_in_place(solo):
    x = np.arange(6.0).reshape(2, 3)
    out = np.empty_like(x)
    assert hpcdist.allreduce(x, "sum", out=out) is out
    check_array(out, x)
    y = x.copy()
    assert hpcdist.allreduce(y, "max", out=y) is y
    check_array(y, x)


def test_allreduce_non_contiguous(solo):
    x = np.arange(24.0).reshape(4, 6)
    check_array(hpcdist.allreduce(x.T, "sum"), x.T.copy())
    check_array(hpcdist.allreduce(x[:, ::2], "mean"), x[:, ::2].copy())


def test_allreduce_scalars(solo):
    check_scalar(hpcdist.allreduce(3, "sum"), 3, int)
    check_scalar(hpcdist.allreduce(2.5, "mean"), 2.5, float)
    check_scalar(hpcdist.allreduce(1 + 2j, "prod"), 1 + 2j, complex)
    check_scalar(hpcdist.allreduce(True, "sum"), True, bool)
    check_scalar(hpcdist.allreduce(np.float32(1.5), "sum"), np.float32(1.5), np.float32)
    check_scalar(hpcdist.allreduce(np.int16(-4), "min"), np.int16(-4), np.int16)


def test_allreduce_16bit(solo):
    for dt in (np.float16, BFLOAT16):
        x = np.full(4, 1.5, dtype=dt)
        check_array(hpcdist.allreduce(x, "sum"), x, dtype=dt)
        check_array(hpcdist.allreduce(x, "mean"), x, dtype=dt)


def test_validation_still_happens(solo):
    with pytest.raises(ValueError, match="avg"):
        hpcdist.allreduce(np.ones(2), "avg")
    with pytest.raises(ValueError, match="butterfly"):
        hpcdist.allreduce(np.ones(2), "sum", algorithm="butterfly")
    with pytest.raises(TypeError):
        hpcdist.allreduce(np.array([1, None], dtype=object), "sum")
    with pytest.raises(ValueError):
        hpcdist.reduce(np.ones(2), "sum", root=1)
    with pytest.raises(ValueError):
        hpcdist.scatter(np.ones(4), counts=[3])
    with pytest.raises(ValueError):
        hpcdist.scatter(np.ones(4), counts=[4, 0])


def test_reduce_and_broadcast(solo):
    x = make_input(0, (4, 2), np.int32, seed=503)
    check_array(hpcdist.reduce(x, "sum", root=0), x)
    check_array(hpcdist.broadcast(x.copy(), root=0), x)
    check_scalar(hpcdist.broadcast(7, root=0), 7, int)
    check_array(hpcdist.broadcast(np.zeros((0, 3)), root=0), np.zeros((0, 3)))


def test_gather_family(solo):
    x = make_input(0, (3, 4), np.float32, seed=504)
    check_array(hpcdist.allgather(x), x)
    check_array(hpcdist.allgather(x, axis=1), x)
    check_array(hpcdist.allgather(x, counts=[3]), x)
    check_array(hpcdist.gather(x, root=0), x)
    check_array(hpcdist.gather(x, root=0, axis=1), x)
    check_array(hpcdist.allgather(np.zeros((0, 4))), np.zeros((0, 4)))


def test_scatter_family(solo):
    x = make_input(0, (5, 2), np.int64, seed=505)
    check_array(hpcdist.scatter(x, root=0), x)
    check_array(hpcdist.scatter(x, root=0, counts=[5]), x)
    check_array(hpcdist.scatter(x, root=0, axis=1), x)
    check_array(hpcdist.reduce_scatter(x, "sum"), x)
    check_array(hpcdist.reduce_scatter(x, "max", counts=[5]), x)
    check_array(hpcdist.alltoall(x), x)
    check_array(hpcdist.alltoall(x, counts=[5]), x)


def test_nonblocking(solo):
    x = np.arange(5.0)
    req = hpcdist.iallreduce(x, "sum")
    while not req.test():
        pass
    check_array(req.wait(), x)
    check_array(hpcdist.ibroadcast(x.copy(), root=0).wait(), x)
    check_array(hpcdist.iallgather(x).wait(), x)


def test_objects(solo):
    assert hpcdist.allreduce_object(5, "sum") == 5
    assert hpcdist.allreduce_object(4, "mean") == 4
    assert hpcdist.allreduce_object(2.5, "max") == 2.5
    assert hpcdist.broadcast_object({"a": 1}, root=0) == {"a": 1}
    assert hpcdist.allgather_object("x") == ["x"]
    assert hpcdist.gather_object(("t", 1), root=0) == [("t", 1)]


def test_barrier(solo):
    assert hpcdist.barrier() is None
    assert solo.barrier() is None


def test_check_mode_makes_no_mpi_call(solo):
    # with one rank there is nobody to disagree with
    old = solo.check
    solo.check = True
    try:
        check_array(hpcdist.allreduce(np.ones(3), "sum"), np.ones(3))
        check_array(hpcdist.broadcast(np.ones(2), root=0), np.ones(2))
    finally:
        solo.check = old
