"""Check mode: cross-rank agreement before each collective.

Every disagreement must raise CollectiveMismatchError on EVERY rank (never
hang), naming every rank's values; legal differences (sizes along the gather
axis, None on non-root ranks, per-rank alltoall counts) must not raise.
"""
import os

import numpy as np
import pytest

import hpcdist
from tests.helpers import all_ranks, check_array, expect_error, run_mpi_script
from tests.reference import balanced_counts, split_blocks


def _mismatch(fn, *args, match=(), **kwargs):
    exc = expect_error(hpcdist.CollectiveMismatchError, fn, *args, match=list(match), **kwargs)
    with all_ranks("exception type"):
        assert isinstance(exc, hpcdist.HpcdistError)
    return exc


def _still_in_step(ctx):
    """A correct collective right after an error: no stale messages, no hang."""
    out = hpcdist.allreduce(np.full(3, ctx.rank + 1.0), "sum")
    with all_ranks("collective after mismatch"):
        check_array(out, np.full(3, ctx.size * (ctx.size + 1) / 2))


# --------------------------------------------------------------------- off
def test_check_off_by_default(ctx):
    if os.environ.get("HPCDIST_CHECK", "0") in ("", "0"):
        assert not ctx.check


# ------------------------------------------------------------ kinds of mismatch
@pytest.mark.mpi(min_size=2)
def test_mismatch_shape(ctx, check_mode):
    n = 1024 if ctx.rank == 0 else 1000
    _mismatch(hpcdist.allreduce, np.zeros(n, np.float32), "sum",
              match=["allreduce", r"float32\[1024\]", r"float32\[1000\]",
                     r"rank 0\D", r"rank 1\D|ranks? .*\b1\b"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_shape_2d(ctx, check_mode):
    shape = (4, 3) if ctx.rank == ctx.size - 1 else (3, 4)
    _mismatch(hpcdist.allreduce, np.zeros(shape), "sum", match=["allreduce", "4", "3"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_broadcast_shape_known(ctx, check_mode):
    n = 8 if ctx.rank == 0 else 9
    _mismatch(hpcdist.broadcast, np.zeros(n), root=0, shape_known=True,
              match=["broadcast", r"float64\[8\]", r"float64\[9\]"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_dtype(ctx, check_mode):
    dtype = np.float32 if ctx.rank == 0 else np.float64
    _mismatch(hpcdist.allreduce, np.zeros(16, dtype), "sum",
              match=["allreduce", "float32", "float64", r"\brank"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_dtype_int_width(ctx, check_mode):
    dtype = np.int64 if ctx.rank == ctx.size - 1 else np.int32
    _mismatch(hpcdist.allreduce, np.zeros(16, dtype), "max", match=["int32", "int64"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_op(ctx, check_mode):
    op = "sum" if ctx.rank == 0 else "max"
    _mismatch(hpcdist.allreduce, np.zeros(8), op, match=["allreduce", "sum", "max"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_op_enum_vs_string_is_not_a_mismatch(ctx, check_mode):
    op = "max" if ctx.rank == 0 else hpcdist.ReduceOp.MAX
    out = hpcdist.allreduce(np.full(3, float(ctx.rank)), op)
    with all_ranks():
        check_array(out, np.full(3, float(ctx.size - 1)))


@pytest.mark.mpi(min_size=2)
def test_mismatch_root_broadcast(ctx, check_mode):
    root = 0 if ctx.rank == 0 else ctx.size - 1
    _mismatch(hpcdist.broadcast, np.zeros(5), root=root,
              match=["broadcast", "root", r"\b0\b", rf"\b{ctx.size - 1}\b"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_root_reduce(ctx, check_mode):
    root = 1 if ctx.rank == 1 else 0
    _mismatch(hpcdist.reduce, np.zeros(5), "sum", root=root, match=["reduce", "root"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_root_gather(ctx, check_mode):
    root = 0 if ctx.rank == 0 else 1
    _mismatch(hpcdist.gather, np.zeros((2, 3)), root=root, match=["gather", "root"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_operation(ctx, check_mode):
    x = np.zeros(10)
    if ctx.rank == 0:
        fn = lambda: hpcdist.allreduce(x, "sum")  # noqa: E731
    else:
        fn = lambda: hpcdist.broadcast(x, root=0)  # noqa: E731
    _mismatch(fn, match=["allreduce", "broadcast", r"\brank"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_operation_allgather_vs_allreduce(ctx, check_mode):
    x = np.zeros(4, np.int32)
    if ctx.rank == ctx.size - 1:
        fn = lambda: hpcdist.allgather(x)  # noqa: E731
    else:
        fn = lambda: hpcdist.allreduce(x, "sum")  # noqa: E731
    _mismatch(fn, match=["allreduce", "allgather"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_broadcast_buffer_dtype(ctx, check_mode):
    x = np.zeros(6, np.float64 if ctx.rank == 0 else np.float32)
    _mismatch(hpcdist.broadcast, x, root=0, match=["broadcast", "float64", "float32"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_allgather_trailing_dims(ctx, check_mode):
    x = np.zeros((2, 3 if ctx.rank == 0 else 4))
    _mismatch(hpcdist.allgather, x, match=["allgather"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_allgather_axis1_leading_dims(ctx, check_mode):
    x = np.zeros((2 if ctx.rank == 0 else 5, ctx.rank + 1))
    _mismatch(hpcdist.allgather, x, axis=1, match=["allgather"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_allgather_dtype(ctx, check_mode):
    x = np.zeros((ctx.rank + 1, 2), np.int32 if ctx.rank == 0 else np.int64)
    _mismatch(hpcdist.allgather, x, match=["allgather", "int32", "int64"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_reduce_scatter_shape(ctx, check_mode):
    n = 2 * ctx.size + (1 if ctx.rank == 0 else 0)
    _mismatch(hpcdist.reduce_scatter, np.zeros(n), "sum", match=["reduce_scatter"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=2)
def test_mismatch_alltoall_trailing_dims(ctx, check_mode):
    x = np.zeros((ctx.size, 2 if ctx.rank == 0 else 3))
    _mismatch(hpcdist.alltoall, x, match=["alltoall"])
    _still_in_step(ctx)


@pytest.mark.mpi(min_size=3)
def test_mismatch_message_names_every_rank(ctx, check_mode):
    # every rank passes its own length: all values must be in the message
    n = 100 + ctx.rank
    exc = _mismatch(hpcdist.allreduce, np.zeros(n, np.float32), "sum")
    with all_ranks("every rank's value"):
        text = str(exc)
        for r in range(ctx.size):
            assert f"float32[{100 + r}]" in text, (r, text)
    _still_in_step(ctx)


# ------------------------------------------------------ legal differences pass
@pytest.mark.mpi
def test_check_mode_legal_calls_work(ctx, check_mode):
    size, rank = ctx.size, ctx.rank
    # allgather/gather: sizes along the axis differ
    pieces = [np.full((r + 1, 2), r, np.int64) for r in range(size)]
    ag = hpcdist.allgather(pieces[rank])
    ag1 = hpcdist.allgather(pieces[rank].T.copy(), axis=1)
    g = hpcdist.gather(pieces[rank], root=size - 1)
    # broadcast / scatter: None on non-root ranks
    b = hpcdist.broadcast(np.arange(4.0) if rank == 0 else None, root=0)
    full = np.arange(3 * size + 1, dtype=np.float32)
    sc = hpcdist.scatter(full if rank == 0 else None, root=0)
    # alltoall: per-rank counts and lengths differ
    counts = [(rank + d) % 3 for d in range(size)]
    x = np.full(sum(counts), rank, dtype=np.int32)
    a2a = hpcdist.alltoall(x, counts=counts)
    # the ordinary ones
    ar = hpcdist.allreduce(np.full(3, 1.0), "sum")
    rd = hpcdist.reduce(np.full(3, 1), "max", root=0)
    rs = hpcdist.reduce_scatter(np.ones(2 * size), "sum")
    obj = hpcdist.allgather_object(rank)
    with all_ranks("legal calls in check mode"):
        check_array(ag, np.concatenate(pieces))
        check_array(ag1, np.concatenate([p.T for p in pieces], axis=1))
        if rank == size - 1:
            check_array(g, np.concatenate(pieces))
        else:
            assert g is None
        check_array(b, np.arange(4.0))
        check_array(sc, split_blocks(full, balanced_counts(full.size, size))[rank])
        expected = np.concatenate([np.full((s + rank) % 3, s, np.int32) for s in range(size)])
        check_array(a2a, expected)
        check_array(ar, np.full(3, float(size)))
        if rank == 0:
            check_array(rd, np.full(3, 1))
        check_array(rs, np.full(2, float(size)))
        assert obj == list(range(size))


@pytest.mark.mpi
def test_check_mode_nonblocking_legal_calls_work(ctx, check_mode):
    size, rank = ctx.size, ctx.rank
    pieces = [np.full((r + 1, 2), r, np.int64) for r in range(size)]
    ag = hpcdist.iallgather(pieces[rank]).wait()
    ag1 = hpcdist.iallgather(pieces[rank].T.copy(), axis=1).wait()
    b = hpcdist.ibroadcast(np.arange(3.0) if rank == 0 else None, root=0).wait()
    ar = hpcdist.iallreduce(np.ones(4), "sum").wait()
    with all_ranks("non-blocking calls in check mode"):
        check_array(ag, np.concatenate(pieces))
        check_array(ag1, np.concatenate([p.T for p in pieces], axis=1))
        check_array(b, np.arange(3.0))
        check_array(ar, np.full(4, float(size)))


@pytest.mark.mpi(min_size=2)
def test_mismatch_nonblocking(ctx, check_mode):
    n = 8 if ctx.rank == 0 else 9
    _mismatch(lambda: hpcdist.iallreduce(np.zeros(n), "sum").wait(),
              match=["iallreduce|allreduce", r"\[8\]", r"\[9\]"])
    _still_in_step(ctx)


# ----------------------------------------------- turning it on at init / env
_CHECK_SCRIPT = """
import numpy as np
import hpcdist
{init}
assert ctx.check, "check mode should be on"
x = np.zeros(1024 if ctx.rank == 0 else 1000, np.float32)
try:
    hpcdist.allreduce(x, "sum")
except hpcdist.CollectiveMismatchError as exc:
    print(f"rank {{ctx.rank}} caught: {{exc}}", flush=True)
else:
    print(f"rank {{ctx.rank}} NOT RAISED", flush=True)
out = hpcdist.allreduce(np.ones(2), "sum")
print(f"rank {{ctx.rank}} after: {{out.tolist()}}", flush=True)
hpcdist.finalize()
"""


@pytest.mark.parametrize("how", ["init_argument", "environment"])
def test_check_mode_from_init_and_env(tmp_path, how):
    if how == "init_argument":
        code = _CHECK_SCRIPT.format(init="ctx = hpcdist.init(check=True)")
        env = {}
    else:
        code = _CHECK_SCRIPT.format(init="ctx = hpcdist.init()")
        env = {"HPCDIST_CHECK": "1"}
    rc, elapsed, output = run_mpi_script(code, tmp_path, n=2, timeout=120, **env)
    assert rc == 0, output
    for r in (0, 1):
        assert f"rank {r} caught:" in output, output
        assert f"rank {r} after: [2.0, 2.0]" in output, output
    assert "NOT RAISED" not in output
    assert "float32[1024]" in output and "float32[1000]" in output, output


# ---------------- errors found on the root only, with check mode on or off (no hang)
_ROOT_ERROR_SCRIPT = """
import numpy as np
import hpcdist
ctx = hpcdist.init(check={check})
root = ctx.size - 1
is_root = ctx.rank == root
cases = {{
    "scatter_bad_counts": lambda: hpcdist.scatter(
        np.zeros((5, 2)) if is_root else None, root=root,
        counts=[1] * (ctx.size + 1) if is_root else None),
    "scatter_none_on_root": lambda: hpcdist.scatter(None, root=root),
    "broadcast_none_on_root": lambda: hpcdist.broadcast(None, root=root),
    "broadcast_object_dtype": lambda: hpcdist.broadcast(
        np.array([1, "a"], dtype=object) if is_root else None, root=root),
    "ibroadcast_none_on_root": lambda: hpcdist.ibroadcast(None, root=root).wait(),
    "ibroadcast_none_on_root_receivers_ready": lambda: hpcdist.ibroadcast(
        None if is_root else np.zeros(3), root=root).wait(),
    "ibroadcast_object_dtype": lambda: hpcdist.ibroadcast(
        np.array([1, "a"], dtype=object) if is_root else np.zeros(2), root=root).wait(),
}}
for name in {names!r}:
    try:
        cases[name]()
    except (TypeError, ValueError, hpcdist.HpcdistError) as exc:
        print(f"rank {{ctx.rank}} {{name}} raised {{type(exc).__name__}}", flush=True)
    else:
        print(f"rank {{ctx.rank}} {{name}} NOT RAISED", flush=True)
    out = hpcdist.allreduce(np.ones(2), "sum")
    print(f"rank {{ctx.rank}} {{name}} after {{out.tolist()}}", flush=True)
hpcdist.finalize()
"""


ROOT_ERROR_CASES = ["scatter_bad_counts", "scatter_none_on_root",
                    "broadcast_none_on_root", "broadcast_object_dtype",
                    "ibroadcast_none_on_root", "ibroadcast_none_on_root_receivers_ready",
                    "ibroadcast_object_dtype"]


@pytest.mark.parametrize("check", [True, False])
def test_root_only_errors_raise_everywhere(tmp_path, check):
    # a separate job: a hang here fails this test instead of stalling the suite
    code = _ROOT_ERROR_SCRIPT.format(names=ROOT_ERROR_CASES, check=check)
    rc, elapsed, output = run_mpi_script(code, tmp_path, n=2, timeout=45,
                                         HPCDIST_STALL_TIMEOUT=20)
    assert rc == 0, f"rc={rc} after {elapsed:.1f} s\n{output}"
    for case in ROOT_ERROR_CASES:
        for r in range(2):
            assert f"rank {r} {case} raised" in output, output
            assert f"rank {r} {case} after [2.0, 2.0]" in output, output


# -- validation that one rank fails must fail on every rank -----------------------------

def _validate_positive(value):
    from hpcdist.comm.checks import validated_on_every_rank
    with validated_on_every_rank(hpcdist.get_context()):
        if value <= 0:
            raise ValueError(f"value={value} should be > 0")
    return value


@pytest.mark.mpi(min_size=2)
def test_validation_error_on_one_rank_raises_on_every_rank(ctx):
    bad = 1  # only rank 1 has a bad value
    value = -5 if ctx.rank == bad else 3
    expect_error(ValueError, _validate_positive, value, match=r"value=-5 should be > 0")
    # and the job goes on: the next collective still matches
    assert hpcdist.allreduce(1, ctx=ctx) == ctx.size


@pytest.mark.mpi(min_size=2)
def test_validation_error_names_the_failing_rank_elsewhere(ctx):
    value = -5 if ctx.rank == 1 else 3
    expect_error(ValueError, _validate_positive, value,
                 match=r"value=-5" if ctx.rank == 1 else r"rank 1: value=-5")


def test_validation_passes_and_returns(ctx):
    assert _validate_positive(4) == 4


def test_raise_on_every_rank_keeps_hpcdist_error_types(ctx):
    from hpcdist.checkpoint import CheckpointCorruptError
    from hpcdist.comm.checks import shared_error_type
    assert shared_error_type("CollectiveMismatchError") is hpcdist.CollectiveMismatchError
    assert shared_error_type("CheckpointCorruptError") is CheckpointCorruptError
    assert shared_error_type("ValueError") is ValueError
    assert shared_error_type("SomethingElse") is hpcdist.HpcdistError
