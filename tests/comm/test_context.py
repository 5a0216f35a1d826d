"""Context creation, attributes, layout (nodes), group and split."""
import os
import warnings

import numpy as np
import pytest
from mpi4py import MPI

import hpcdist
from tests.helpers import all_ranks, assert_on_all_ranks, expect_error, mpi_twin, same_on_all_ranks
from tests.reference import ceil_div


# ---------------------------------------------------------------- serial + mpi
def _check_basic_attributes(ctx):
    world = MPI.COMM_WORLD
    assert ctx.rank == world.Get_rank()
    assert ctx.size == world.Get_size()
    assert ctx.is_main == (ctx.rank == 0)
    assert ctx.device == "cpu"
    assert ctx.xp is np
    # one machine, no layout override: a single node holding every rank
    assert ctx.num_nodes == 1
    assert ctx.node_rank == 0
    assert ctx.local_size == ctx.size
    assert ctx.local_rank == ctx.rank


def _check_module_functions(ctx):
    assert hpcdist.get_context() is ctx
    assert hpcdist.get_rank() == ctx.rank
    assert hpcdist.get_world_size() == ctx.size
    assert hpcdist.get_local_rank() == ctx.local_rank
    assert hpcdist.is_main_process() == (ctx.rank == 0)
    assert isinstance(hpcdist.is_main_process(), bool)


def test_init_is_idempotent(ctx):
    assert hpcdist.init() is ctx
    assert hpcdist.init() is hpcdist.init()
    assert hpcdist.get_context() is ctx


def test_a_later_init_names_the_arguments_it_ignores(ctx):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none for the same arguments
        assert hpcdist.init(MPI.COMM_WORLD, device=ctx.device, check=ctx.check) is ctx
    with pytest.warns(UserWarning, match=rf"already initialised; device='cuda:7' \(the context "
                                         rf"has '{ctx.device}'\), check={not ctx.check} \(the "
                                         r"context has .*\) ignored; call hpcdist.finalize\(\)"):
        assert hpcdist.init(device="cuda:7", check=not ctx.check) is ctx


@pytest.mark.parametrize("arguments,match", [
    ({"check": "no"}, r"init: check='no' should be True or False"),
    ({"abort_on_error": None}, r"init: abort_on_error=None should be True or False"),
])
def test_init_refuses_flags_that_are_not_bools(ctx, arguments, match):
    with pytest.raises(hpcdist.InvalidArgumentTypeError, match=match):
        hpcdist.init(**arguments)


def test_comm_is_a_dup_of_comm_world(ctx):
    assert isinstance(ctx.comm, MPI.Comm)
    assert ctx.comm is not MPI.COMM_WORLD
    assert ctx.comm != MPI.COMM_WORLD
    assert MPI.Comm.Compare(ctx.comm, MPI.COMM_WORLD) == MPI.CONGRUENT


def test_attributes_serial(ctx):
    _check_basic_attributes(ctx)
    _check_module_functions(ctx)


def test_public_names():
    for name in ("init", "get_context", "finalize", "get_rank", "get_world_size",
                 "get_local_rank", "is_main_process", "barrier", "ReduceOp",
                 "allreduce", "reduce", "broadcast", "allgather", "gather",
                 "scatter", "reduce_scatter", "alltoall", "send", "recv",
                 "isend", "irecv", "iallreduce", "ibroadcast", "iallgather",
                 "allreduce_object", "broadcast_object", "allgather_object",
                 "gather_object", "HpcdistError", "CollectiveMismatchError",
                 "ANY_SOURCE", "ANY_TAG", "timeline"):
        assert hasattr(hpcdist, name), name
    assert issubclass(hpcdist.CollectiveMismatchError, hpcdist.HpcdistError)
    assert issubclass(hpcdist.HpcdistError, Exception)
    for op in ("SUM", "MEAN", "MIN", "MAX", "PROD"):
        assert hasattr(hpcdist.ReduceOp, op)


def test_context_has_every_collective_as_method(ctx):
    for name in ("allreduce", "reduce", "broadcast", "allgather", "gather",
                 "scatter", "reduce_scatter", "alltoall", "send", "recv",
                 "isend", "irecv", "iallreduce", "ibroadcast", "iallgather",
                 "allreduce_object", "broadcast_object", "allgather_object",
                 "gather_object", "barrier", "group", "split", "stats",
                 "reset_stats"):
        assert callable(getattr(ctx, name, None)), name


# ------------------------------------------------------------------------ mpi
@pytest.mark.mpi
def test_attributes(ctx):
    with all_ranks("attributes"):
        _check_basic_attributes(ctx)
        _check_module_functions(ctx)
    assert_on_all_ranks(same_on_all_ranks(ctx.size))


@pytest.mark.mpi
def test_init_is_idempotent_mpi(ctx):
    with all_ranks():
        assert hpcdist.init() is ctx
        assert MPI.Comm.Compare(ctx.comm, MPI.COMM_WORLD) == MPI.CONGRUENT
        assert ctx.comm is not MPI.COMM_WORLD


@pytest.mark.mpi
def test_barrier(ctx):
    assert hpcdist.barrier() is None
    assert ctx.barrier() is None


@pytest.mark.mpi
def test_context_method_equals_module_function(ctx):
    x = np.full(4, ctx.rank + 1.0)
    a = ctx.allreduce(x, "sum")
    b = hpcdist.allreduce(x, "sum")
    c = hpcdist.allreduce(x, "sum", ctx=ctx)
    expected = np.full(4, ctx.size * (ctx.size + 1) / 2)
    with all_ranks():
        for r in (a, b, c):
            np.testing.assert_array_equal(r, expected)


def _check_owned_contexts(ctx):
    """A raw communicator gets one Dup'd context, cached on it and freed with it."""
    owned = hpcdist.comm.resolve_context(MPI.COMM_WORLD)
    assert owned is not ctx and owned is hpcdist.comm.resolve_context(MPI.COMM_WORLD)
    assert MPI.Comm.Compare(owned.comm, MPI.COMM_WORLD) == MPI.CONGRUENT
    assert hpcdist.comm.resolve_context(ctx) is ctx
    assert hpcdist.comm.resolve_context(None) is ctx
    user_comm = MPI.COMM_WORLD.Dup()
    first = hpcdist.comm.resolve_context(user_comm)
    total = 0.0
    for _ in range(3000):  # leaked communicators ran out at a few hundred per rank
        total += hpcdist.allreduce(1.0, ctx=hpcdist.comm.resolve_context(user_comm))
    assert total == 3000.0 * ctx.size
    assert hpcdist.comm.resolve_context(user_comm) is first
    own_comm = first.comm
    user_comm.Free()  # frees the owned context's duplicate too
    assert own_comm == MPI.COMM_NULL
    with pytest.raises(TypeError, match="mpi4py communicator"):
        hpcdist.comm.resolve_context(MPI.COMM_NULL)
    with pytest.raises(TypeError, match="should be None, an hpcdist Context"):
        hpcdist.comm.resolve_context("world")


def test_copies_of_a_context_are_the_context(ctx):
    import copy
    assert copy.copy(ctx) is ctx and copy.deepcopy({"c": ctx})["c"] is ctx


def test_owned_contexts_serial(ctx):
    _check_owned_contexts(ctx)


@pytest.mark.mpi
def test_owned_contexts(ctx):
    with all_ranks("owned contexts"):
        _check_owned_contexts(ctx)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("key_kind", ["zero", "reverse"])
def test_split_by_parity(ctx, key_kind):
    color = ctx.rank % 2
    members = [r for r in range(ctx.size) if r % 2 == color]
    if key_kind == "zero":
        sub = ctx.split(color)
        order = members
    else:
        sub = ctx.split(color, key=-ctx.rank)
        order = members[::-1]
    total = sub.allreduce(np.array([ctx.rank], dtype=np.int64), "sum")
    with all_ranks():
        assert isinstance(sub, type(ctx))
        assert sub.size == len(members)
        assert sub.rank == order.index(ctx.rank)
        assert sub.is_main == (sub.rank == 0)
        assert MPI.Comm.Compare(sub.comm, ctx.comm) != MPI.IDENT
        assert int(total[0]) == sum(members)
    # the parent context is still usable afterwards
    s = ctx.allreduce(np.ones(3), "sum")
    with all_ranks():
        np.testing.assert_array_equal(s, np.full(3, float(ctx.size)))


@pytest.mark.parametrize("call,error,match", [
    (lambda c: c.split("a"), TypeError, r"split: color='a' should be an integer \(or None"),
    (lambda c: c.split(1.5), TypeError, r"split: color=1.5 should be an integer"),
    (lambda c: c.split(-2), ValueError, r"split: color=-2 should be >= 0 \(or None"),
    (lambda c: c.split(0, key="k"), TypeError, r"split: key='k' should be an integer"),
    (lambda c: c.group("0"), TypeError, r"group\(ranks='0'\): ranks should be a sequence of int"),
    (lambda c: c.group([0.7]), TypeError, r"group\(ranks=\[0.7\]\): ranks should be a sequence"),
], ids=["color_str", "color_float", "color_negative", "key_str", "ranks_str", "ranks_float"])
def test_split_and_group_name_a_bad_argument(ctx, call, error, match):
    expect_error(error, call, ctx, match=match)


test_split_and_group_name_a_bad_argument_mpi = mpi_twin(test_split_and_group_name_a_bad_argument)


@pytest.mark.mpi(min_size=2)
def test_split_same_color_is_whole_world(ctx):
    sub = ctx.split(0)
    with all_ranks():
        assert sub is not ctx
        assert sub.size == ctx.size
        assert sub.rank == ctx.rank
        assert MPI.Comm.Compare(sub.comm, ctx.comm) == MPI.CONGRUENT
    out = sub.broadcast(np.arange(5.0) if sub.rank == 0 else None, root=0)
    with all_ranks():
        np.testing.assert_array_equal(out, np.arange(5.0))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("which", ["even", "first_and_last", "all"])
def test_group(ctx, which):
    if which == "even":
        ranks = list(range(0, ctx.size, 2))
    elif which == "first_and_last":
        ranks = [0, ctx.size - 1]
    else:
        ranks = list(range(ctx.size))
    g = ctx.group(ranks)
    member = ctx.rank in ranks
    with all_ranks("group membership"):
        if member:
            assert g is not None
            assert g.size == len(ranks)
            assert g.rank == ranks.index(ctx.rank)
        else:
            assert g is None
    if member:
        s = g.allreduce(np.array([ctx.rank + 1], dtype=np.int32), "sum")
        got = int(s[0])
    else:
        got = None
    with all_ranks("group allreduce"):
        if member:
            assert got == sum(r + 1 for r in ranks)


# ------------------------------------------------- HPCDIST_RANKS_PER_NODE layout
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_ranks_per_node_layout(ctx, k):
    os.environ["HPCDIST_RANKS_PER_NODE"] = str(k)
    try:
        sub = ctx.split(0)
    finally:
        del os.environ["HPCDIST_RANKS_PER_NODE"]
    n = ctx.size
    node = ctx.rank // k
    with all_ranks(f"layout k={k}"):
        assert sub.size == n and sub.rank == ctx.rank
        assert sub.num_nodes == ceil_div(n, k)
        assert sub.node_rank == node
        assert sub.local_rank == ctx.rank % k
        assert sub.local_size == min(k, n - node * k)
    # the default context is not affected by the override
    with all_ranks("default layout unchanged"):
        assert ctx.num_nodes == 1 and ctx.local_size == ctx.size


def test_pending_call_signature_for_the_watchdog(ctx):
    """What the stall watchdog prints of a pending call: operation, dtype, shape, root
    (or the peer of a send or receive), derived only when asked."""
    from hpcdist.comm.calls import resolve
    assert ctx._inflight_signature() is None
    start = ctx._begin("allreduce", resolve(np.zeros((2, 3), np.float32), ctx, "allreduce"))
    assert ctx._inflight_signature() == "allreduce float32[2,3]"
    ctx._end("allreduce", start, 0, 0)
    assert ctx._inflight_signature() is None
    start = ctx._begin("broadcast", np.zeros(4, np.int64), 0)  # a receiver's array
    assert ctx._inflight_signature() == "broadcast int64[4] root=0"
    ctx._end("broadcast", start, 0, 0)
    start = ctx._begin("recv", None, MPI.ANY_SOURCE)
    assert ctx._inflight_signature() == "recv source=any"
    ctx._end("recv", start, 0, 0)
    start = ctx._begin("send", resolve(1.5, ctx, "send"), 0)
    assert ctx._inflight_signature() == "send float64[] dest=0"
    ctx._end("send", start, 0, 0)
