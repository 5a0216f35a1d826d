"""broadcast, allgather, gather, scatter, reduce_scatter, alltoall."""
import numpy as np
import pytest

import hpcdist
from hpcdist.comm.movement import _INLINE_BYTES
from tests.helpers import all_ranks, check_array, check_scalar, expect_error
from tests.reference import (
    BFLOAT16,
    balanced_counts,
    dtype_name,
    make_input,
    reference_reduce,
    split_blocks,
)

pytestmark = pytest.mark.mpi

DTYPES = [np.float64, np.float32, np.int64, np.uint8, np.bool_, BFLOAT16,
          np.float16, np.complex128, np.longdouble]


def _root(spec, size):
    return {"first": 0, "last": size - 1, "middle": size // 2}[spec]


# ------------------------------------------------------------------ broadcast
@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("shape", [(17,), (3, 4), (0,), (2, 0, 3)])
def test_broadcast_into_buffer(ctx, root, dtype, shape):
    root = _root(root, ctx.size)
    data = make_input(root, shape, dtype, seed=51)
    if ctx.rank == root:
        x = data.copy()
    else:
        x = np.zeros(shape, dtype=dtype)
    out = hpcdist.broadcast(x, root=root)
    with all_ranks(f"broadcast root={root}"):
        assert out is x, "broadcast must fill and return the caller's array"
        check_array(out, data, dtype=dtype, rtol=0, atol=0)


@pytest.mark.parametrize("receiver", ["array", "None"])
@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_broadcast_at_the_inline_limit(ctx, receiver, extra):
    """Data up to _INLINE_BYTES rides in the header's message, more follows it."""
    nbytes = _INLINE_BYTES + extra
    data = make_input(0, (nbytes,), np.uint8, seed=58)
    if ctx.rank == 0:
        x = data.copy()
    else:
        x = np.zeros(nbytes, dtype=np.uint8) if receiver == "array" else None
    out = hpcdist.broadcast(x, root=0)
    with all_ranks(f"{nbytes} bytes"):
        check_array(out, data, rtol=0, atol=0)


@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("shape", [(17,), (300, 5), (0,)])
def test_broadcast_shape_known_is_one_broadcast(ctx, root, dtype, shape):
    root = _root(root, ctx.size)
    data = make_input(root, shape, dtype, seed=57)
    x = data.copy() if ctx.rank == root else np.zeros(shape, dtype=dtype)
    out = hpcdist.broadcast(x, root=root, shape_known=True)
    with all_ranks(f"broadcast(shape_known) root={root}"):
        assert out is x
        check_array(out, data, dtype=dtype, rtol=0, atol=0)


def test_broadcast_shape_known_non_contiguous_receiver(ctx):
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    host = np.zeros((4, 3), dtype=np.int64)
    x = data.copy() if ctx.rank == 0 else host.T
    out = hpcdist.broadcast(x, root=0, shape_known=True)
    with all_ranks():
        assert out is x
        check_array(out, data)


def test_broadcast_shape_known_rejects_none(ctx):
    x = np.zeros(3)  # every rank passes None: a clear error everywhere, no hang
    expect_error(TypeError, hpcdist.broadcast, None, root=0, shape_known=True,
                 match="shape_known=True")
    hpcdist.broadcast(x, root=0, shape_known=True)


@pytest.mark.parametrize("root", ["first", "last", "middle"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_broadcast_none_on_non_root(ctx, root, dtype):
    root = _root(root, ctx.size)
    data = make_input(root, (4, 5), dtype, seed=52)
    x = data.copy() if ctx.rank == root else None
    out = hpcdist.broadcast(x, root=root)
    with all_ranks(f"broadcast(None) root={root}"):
        check_array(out, data, dtype=dtype, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(0,), (0, 7), ()])
def test_broadcast_none_odd_shapes(ctx, shape):
    data = np.full(shape, 3.5, dtype=np.float32)
    out = hpcdist.broadcast(data if ctx.rank == 0 else None, root=0)
    with all_ranks(str(shape)):
        check_array(out, data)


def test_broadcast_default_root_and_method(ctx):
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    a = hpcdist.broadcast(data.copy() if ctx.rank == 0 else None)
    b = ctx.broadcast(data.copy() if ctx.rank == 0 else np.empty_like(data))
    with all_ranks():
        check_array(a, data)
        check_array(b, data)


@pytest.mark.parametrize("layout", ["strided", "transposed"])
def test_broadcast_non_contiguous_root(ctx, layout):
    base = np.arange(40, dtype=np.float64).reshape(5, 8)
    view = base[:, ::3] if layout == "strided" else base.T
    x = view if ctx.rank == 0 else None
    out = hpcdist.broadcast(x, root=0)
    with all_ranks(layout):
        check_array(out, np.ascontiguousarray(view))
        np.testing.assert_array_equal(base, np.arange(40.0).reshape(5, 8))


def test_broadcast_non_contiguous_buffer_on_non_root(ctx):
    data = np.arange(12, dtype=np.int64).reshape(3, 4)
    if ctx.rank == 0:
        x = data.copy()
        host = None
    else:
        host = np.zeros((4, 3), dtype=np.int64)
        x = host.T  # a non-contiguous view of shape (3, 4)
    out = hpcdist.broadcast(x, root=0)
    with all_ranks():
        check_array(np.asarray(out), data)
        if ctx.rank != 0:
            assert out is x
            np.testing.assert_array_equal(host, data.T)


@pytest.mark.parametrize("kind", ["int", "float", "complex", "bool", "np.float32", "np.int16"])
def test_broadcast_scalars(ctx, kind):
    root = ctx.size - 1
    values = {"int": (7, int), "float": (2.25, float), "complex": (1 - 2j, complex),
              "bool": (True, bool), "np.float32": (np.float32(1.5), np.float32),
              "np.int16": (np.int16(-3), np.int16)}
    value, tp = values[kind]
    out = hpcdist.broadcast(value if ctx.rank == root else None, root=root)
    with all_ranks(kind):
        check_scalar(out, value, tp)


@pytest.mark.parametrize("bad", ["size", "size+2"])
def test_broadcast_root_out_of_range(ctx, bad):
    root = eval(bad, {"size": ctx.size})  # noqa: S307
    expect_error(ValueError, hpcdist.broadcast, np.ones(3), root=root, match=str(root))


BAD_ROOT_ERRORS = (TypeError, ValueError, hpcdist.HpcdistError)


@pytest.mark.parametrize("bad", ["none", "object_dtype"])
def test_broadcast_bad_root_input_raises_everywhere(ctx, bad):
    # non-roots pass None and cannot see the problem: the root must tell them
    root = ctx.size - 1
    x = None if bad == "none" else np.array([1, "a"], dtype=object)
    expect_error(BAD_ROOT_ERRORS, hpcdist.broadcast, x if ctx.rank == root else None, root=root)
    out = hpcdist.broadcast(np.arange(3.0) if ctx.rank == root else None, root=root)
    with all_ranks("broadcast after error"):
        check_array(out, np.arange(3.0))


# ------------------------------------------------------------------ allgather
def _rows(rank, pattern):
    """Number of rows rank contributes."""
    return {"grow": rank + 1, "zero_first": rank, "zero_odd": 0 if rank % 2 else 2,
            "equal": 3}[pattern]


def _piece(rank, n, dtype, trailing=(3,), axis=0, seed=61):
    shape = list(trailing)
    shape.insert(axis, n)
    return make_input(rank, tuple(shape), dtype, seed=seed)


@pytest.mark.parametrize("pattern", ["equal", "grow", "zero_first", "zero_odd"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_allgather_axis0(ctx, pattern, dtype):
    pieces = [_piece(r, _rows(r, pattern), dtype) for r in range(ctx.size)]
    out = hpcdist.allgather(pieces[ctx.rank].copy())
    with all_ranks(pattern):
        check_array(out, np.concatenate(pieces, axis=0), dtype=dtype, rtol=0, atol=0)


@pytest.mark.parametrize("pattern", ["equal", "grow", "zero_first"])
def test_allgather_axis1(ctx, pattern):
    pieces = [_piece(r, _rows(r, pattern), np.float32, trailing=(4,), axis=1)
              for r in range(ctx.size)]
    out = hpcdist.allgather(pieces[ctx.rank].copy(), axis=1)
    with all_ranks(pattern):
        check_array(out, np.concatenate(pieces, axis=1))


def test_allgather_1d_and_3d(ctx):
    a = [np.arange(r + 2, dtype=np.int32) + 100 * r for r in range(ctx.size)]
    b = [_piece(r, r % 2 + 1, np.float64, trailing=(2, 3), axis=2) for r in range(ctx.size)]
    out_a = hpcdist.allgather(a[ctx.rank])
    out_b = hpcdist.allgather(b[ctx.rank], axis=2)
    with all_ranks():
        check_array(out_a, np.concatenate(a))
        check_array(out_b, np.concatenate(b, axis=2))


@pytest.mark.parametrize("axis", [0, 1])
def test_allgather_with_counts(ctx, axis):
    counts = [_rows(r, "zero_first") for r in range(ctx.size)]
    pieces = [_piece(r, counts[r], np.int64, trailing=(2,), axis=axis) for r in range(ctx.size)]
    out = hpcdist.allgather(pieces[ctx.rank], axis=axis, counts=counts)
    with all_ranks():
        check_array(out, np.concatenate(pieces, axis=axis))


@pytest.mark.parametrize("form", ["blocking", "nonblocking"])
def test_allgather_bad_counts(ctx, form):
    def gather(x, counts):
        if form == "blocking":
            return hpcdist.allgather(x, counts=counts)
        return hpcdist.iallgather(x, counts=counts).wait()

    x = np.zeros(2)
    expect_error(ValueError, gather, x, counts=[2.5] * ctx.size,
                 match=r"holds 2\.5, not an integer")
    expect_error(ValueError, gather, x, counts=[3] * ctx.size, match=r"counts\[\d\]=3")


def test_allgather_non_contiguous(ctx):
    bases = [make_input(r, (6, 4 + r), np.float64, seed=62) for r in range(ctx.size)]
    views = [b[::2].T for b in bases]  # (4 + r, 3), non-contiguous
    out = hpcdist.allgather(views[ctx.rank])
    with all_ranks():
        check_array(out, np.concatenate(views, axis=0))


@pytest.mark.parametrize("kind", ["float", "int"])
def test_allgather_one_element(ctx, kind):
    value = float(ctx.rank) if kind == "float" else np.int64(ctx.rank)
    out = hpcdist.allgather(np.asarray(value).reshape(1))
    with all_ranks():
        check_array(out, np.arange(ctx.size).astype(np.asarray(value).dtype))


# --------------------------------------------------------------------- gather
@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", [np.float64, np.int16, np.bool_, BFLOAT16, np.complex64],
                         ids=dtype_name)
def test_gather(ctx, root, axis, dtype):
    root = _root(root, ctx.size)
    pieces = [_piece(r, _rows(r, "zero_first"), dtype, trailing=(3,), axis=axis, seed=63)
              for r in range(ctx.size)]
    out = hpcdist.gather(pieces[ctx.rank].copy(), root=root, axis=axis)
    with all_ranks(f"gather root={root} axis={axis}"):
        if ctx.rank == root:
            check_array(out, np.concatenate(pieces, axis=axis), dtype=dtype, rtol=0, atol=0)
        else:
            assert out is None, f"non-root got {type(out).__name__}"


def test_gather_defaults(ctx):
    pieces = [np.full((r + 1, 2), r, dtype=np.int32) for r in range(ctx.size)]
    out = hpcdist.gather(pieces[ctx.rank])
    with all_ranks():
        if ctx.rank == 0:
            check_array(out, np.concatenate(pieces))
        else:
            assert out is None


def test_gather_root_out_of_range(ctx):
    expect_error(ValueError, hpcdist.gather, np.ones(2), root=ctx.size, match=str(ctx.size))


# -------------------------------------------------------------------- scatter
@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("total", ["size-1", "size", "2*size+1", "5*size+3"])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_, BFLOAT16, np.complex128],
                         ids=dtype_name)
def test_scatter_balanced_default(ctx, root, total, dtype):
    root = _root(root, ctx.size)
    n = eval(total, {"size": ctx.size})  # noqa: S307
    full = make_input(root, (n, 3), dtype, seed=71)
    out = hpcdist.scatter(full.copy() if ctx.rank == root else None, root=root)
    counts = balanced_counts(n, ctx.size)
    expected = split_blocks(full, counts)[ctx.rank]
    with all_ranks(f"scatter n={n} root={root}"):
        check_array(out, expected, dtype=dtype, rtol=0, atol=0)


@pytest.mark.parametrize("pattern", ["grow", "zero_first", "all_on_last"])
@pytest.mark.parametrize("counts_everywhere", [False, True])
def test_scatter_explicit_counts(ctx, pattern, counts_everywhere):
    size = ctx.size
    if pattern == "grow":
        counts = [r + 1 for r in range(size)]
    elif pattern == "zero_first":
        counts = [r for r in range(size)]
    else:
        counts = [0] * (size - 1) + [5]
    full = np.arange(sum(counts) * 2, dtype=np.int64).reshape(-1, 2)
    is_root = ctx.rank == 0
    out = hpcdist.scatter(full if is_root else None, root=0,
                          counts=counts if (is_root or counts_everywhere) else None)
    with all_ranks(str(counts)):
        check_array(out, split_blocks(full, counts)[ctx.rank])


@pytest.mark.parametrize("counts_kind", ["balanced", "explicit"])
def test_scatter_axis1(ctx, counts_kind):
    size = ctx.size
    counts = (balanced_counts(2 * size + 1, size) if counts_kind == "balanced"
              else [(r * 2) % 3 for r in range(size)])
    width = sum(counts)
    full = make_input(0, (4, width), np.float32, seed=72)
    out = hpcdist.scatter(full if ctx.rank == 0 else None, root=0, axis=1,
                          counts=None if counts_kind == "balanced" else counts)
    with all_ranks():
        check_array(out, split_blocks(full, counts, axis=1)[ctx.rank])


def test_scatter_non_contiguous_root(ctx):
    base = np.arange(60, dtype=np.float64).reshape(10, 6)
    view = base[::-1, ::2]  # (10, 3)
    out = hpcdist.scatter(view if ctx.rank == 0 else None, root=0)
    with all_ranks():
        check_array(out, split_blocks(view, balanced_counts(10, ctx.size))[ctx.rank])


@pytest.mark.parametrize("problem", ["sum_too_small", "sum_too_large", "too_short",
                                     "too_long", "negative", "fractional", "not_a_number"])
@pytest.mark.parametrize("root", ["first", "last"])
def test_scatter_bad_counts_raise_everywhere(ctx, problem, root):
    size = ctx.size
    root = _root(root, size)
    n = 2 * size + 1
    good = balanced_counts(n, size)
    counts = {
        "sum_too_small": good[:-1] + [good[-1] - 1],
        "sum_too_large": good[:-1] + [good[-1] + 1],
        "too_short": good[:-1],
        "too_long": good + [0],
        "negative": [n + 1, -1] + [0] * (size - 2),
        # the same sum as good, one count fractional: never truncated
        "fractional": [good[0] + 0.5] + good[1:-1] + [good[-1] - 0.5] if size > 1
        else [n - 0.5],
        "not_a_number": ["three"] + good[1:],
    }[problem]
    full = np.zeros((n, 2))
    is_root = ctx.rank == root
    expect_error(ValueError, hpcdist.scatter, full if is_root else None, root=root,
                 counts=counts if is_root else None)
    # everyone is still in step afterwards
    out = hpcdist.scatter(np.arange(size, dtype=np.float64) if is_root else None, root=root)
    with all_ranks("scatter after error"):
        check_array(out, np.array([float(ctx.rank)]))


@pytest.mark.parametrize("bad", ["none", "object_dtype", "zero_dim"])
def test_scatter_bad_root_input_raises_everywhere(ctx, bad):
    x = {"none": None, "object_dtype": np.array([1, "a", None, 2.0], dtype=object),
         "zero_dim": np.array(5.0)}[bad]
    expect_error(BAD_ROOT_ERRORS, hpcdist.scatter, x if ctx.rank == 0 else None, root=0)
    out = hpcdist.scatter(np.arange(float(ctx.size)) if ctx.rank == 0 else None, root=0)
    with all_ranks("scatter after error"):
        check_array(out, np.array([float(ctx.rank)]))


# ------------------------------------------------------------- reduce_scatter
@pytest.mark.parametrize("op", ["sum", "max", "mean", "prod"])
@pytest.mark.parametrize("total", ["size", "2*size+1", "size-1", "0"])
@pytest.mark.parametrize("dtype", [np.float64, np.int32, BFLOAT16], ids=dtype_name)
def test_reduce_scatter_balanced(ctx, op, total, dtype):
    if op == "mean" and dtype is np.int32:
        pytest.skip("mean on integers is a TypeError")
    n = eval(total, {"size": ctx.size})  # noqa: S307
    inputs = [make_input(r, (n, 2), dtype, seed=81, op=op) for r in range(ctx.size)]
    out = hpcdist.reduce_scatter(inputs[ctx.rank].copy(), op)
    full = reference_reduce(inputs, op)
    expected = split_blocks(full, balanced_counts(n, ctx.size))[ctx.rank]
    with all_ranks(f"reduce_scatter {op} n={n}"):
        check_array(out, expected, dtype=dtype)


@pytest.mark.parametrize("pattern", ["grow", "zero_first"])
def test_reduce_scatter_counts(ctx, pattern):
    counts = [r + 1 if pattern == "grow" else r for r in range(ctx.size)]
    n = sum(counts)
    inputs = [make_input(r, (n,), np.int64, seed=82) for r in range(ctx.size)]
    out = hpcdist.reduce_scatter(inputs[ctx.rank], "sum", counts=counts)
    expected = split_blocks(reference_reduce(inputs, "sum"), counts)[ctx.rank]
    with all_ranks():
        check_array(out, expected)


def test_reduce_scatter_default_op_and_bool(ctx):
    n = 2 * ctx.size
    ints = [np.full(n, r + 1, dtype=np.int64) for r in range(ctx.size)]
    bools = [make_input(r, (n,), np.bool_, seed=83) for r in range(ctx.size)]
    a = hpcdist.reduce_scatter(ints[ctx.rank])
    b = hpcdist.reduce_scatter(bools[ctx.rank], "sum")
    counts = balanced_counts(n, ctx.size)
    with all_ranks():
        check_array(a, split_blocks(reference_reduce(ints, "sum"), counts)[ctx.rank])
        check_array(b, split_blocks(reference_reduce(bools, "sum"), counts)[ctx.rank])


def test_reduce_scatter_non_contiguous(ctx):
    n = 2 * ctx.size + 1
    bases = [make_input(r, (3, n), np.float64, seed=84) for r in range(ctx.size)]
    views = [b.T for b in bases]
    out = hpcdist.reduce_scatter(views[ctx.rank], "sum")
    full = reference_reduce([np.ascontiguousarray(v) for v in views], "sum")
    with all_ranks():
        check_array(out, split_blocks(full, balanced_counts(n, ctx.size))[ctx.rank])


def test_reduce_scatter_bad_counts(ctx):
    n = 2 * ctx.size
    expect_error(ValueError, hpcdist.reduce_scatter, np.ones(n), "sum",
                 counts=[1] * ctx.size)
    fractional = [2.5] + [2] * (ctx.size - 2) + [1.5] if ctx.size > 1 else [1.5]
    expect_error(ValueError, hpcdist.reduce_scatter, np.ones(n), "sum", counts=fractional,
                 match=r"holds (2\.5|1\.5), not an integer")


def test_whole_number_counts_of_any_type_are_accepted(ctx):
    size = ctx.size
    counts = [np.int32(2)] * (size - 1) + [2.0]  # NumPy integers and integral floats
    out = hpcdist.reduce_scatter(np.ones(2 * size), "sum", counts=counts)
    with all_ranks():
        check_array(out, np.full(2, float(size)))


# ------------------------------------------------------------------- alltoall
def _a2a_counts(src, size, pattern):
    if pattern == "balanced":
        return balanced_counts(size + src, size)
    if pattern == "uneven":
        return [(src + dst) % 3 for dst in range(size)]
    if pattern == "zeros_to_self":
        return [0 if dst == src else dst + 1 for dst in range(size)]
    raise ValueError(pattern)


def _a2a_input(src, counts, trailing=(2,), dtype=np.int64):
    """Row i of block dst from src holds 10000*src + 100*dst + i."""
    rows = []
    for dst, c in enumerate(counts):
        for i in range(c):
            rows.append(np.full(trailing, 10000 * src + 100 * dst + i))
    return np.array(rows, dtype=dtype).reshape((sum(counts),) + tuple(trailing))


@pytest.mark.parametrize("pattern", ["balanced", "uneven", "zeros_to_self"])
@pytest.mark.parametrize("trailing", [(), (2,), (2, 3)], ids=["1d", "2d", "3d"])
def test_alltoall(ctx, pattern, trailing):
    size = ctx.size
    all_counts = [_a2a_counts(s, size, pattern) for s in range(size)]
    inputs = [_a2a_input(s, all_counts[s], trailing) for s in range(size)]
    counts = None if pattern == "balanced" else all_counts[ctx.rank]
    out = hpcdist.alltoall(inputs[ctx.rank].copy(), counts=counts)
    expected = np.concatenate(
        [split_blocks(inputs[s], all_counts[s])[ctx.rank] for s in range(size)], axis=0)
    with all_ranks(pattern):
        check_array(out, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.bool_, BFLOAT16, np.complex128, np.uint16],
                         ids=dtype_name)
def test_alltoall_dtypes(ctx, dtype):
    size = ctx.size
    n = 2 * size + 1
    inputs = [make_input(s, (n, 2), dtype, seed=91) for s in range(size)]
    out = hpcdist.alltoall(inputs[ctx.rank].copy())
    counts = balanced_counts(n, size)
    expected = np.concatenate([split_blocks(inputs[s], counts)[ctx.rank] for s in range(size)])
    with all_ranks(dtype_name(dtype)):
        check_array(out, expected, dtype=dtype, rtol=0, atol=0)


def test_alltoall_non_contiguous(ctx):
    size = ctx.size
    n = 3 * size
    bases = [make_input(s, (2, n), np.float64, seed=92) for s in range(size)]
    views = [b.T for b in bases]
    out = hpcdist.alltoall(views[ctx.rank])
    counts = balanced_counts(n, size)
    expected = np.concatenate([split_blocks(views[s], counts)[ctx.rank] for s in range(size)])
    with all_ranks():
        check_array(out, expected)


def test_alltoall_bad_counts(ctx):
    x = np.zeros(2 * ctx.size)
    expect_error(ValueError, hpcdist.alltoall, x, counts=[1] * (ctx.size + 1))
    fractional = [1.5, 2.5] + [2] * (ctx.size - 2) if ctx.size > 1 else [1.5]
    expect_error(ValueError, hpcdist.alltoall, x, counts=fractional,
                 match=r"holds 1\.5, not an integer")
