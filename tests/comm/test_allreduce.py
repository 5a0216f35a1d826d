"""allreduce and reduce: ops, dtypes, scalars, out=, algorithms, layout."""
import os

import numpy as np
import pytest

import hpcdist
from tests.helpers import (
    all_ranks,
    assert_on_all_ranks,
    check_array,
    check_scalar,
    expect_error,
    same_on_all_ranks,
)
from tests.reference import (
    ALL_DTYPES,
    BFLOAT16,
    COMPLEX_DTYPES,
    INT_DTYPES,
    dtype_name,
    is_bool,
    is_complex,
    is_int,
    make_input,
    reference_reduce,
)

pytestmark = pytest.mark.mpi

OPS = ["sum", "mean", "min", "max", "prod"]


def _supported(dtype, op):
    if op == "mean" and (is_bool(dtype) or is_int(dtype)):
        return False
    if op in ("min", "max") and is_complex(dtype):
        return False
    return True


def _inputs(size, shape, dtype, seed, op):
    return [make_input(r, shape, dtype, seed=seed, op=op) for r in range(size)]


# --------------------------------------------------------- dtype x op grid
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_name)
def test_allreduce_dtype_op(ctx, dtype, op):
    if not _supported(dtype, op):
        pytest.skip("unsupported combination, see test_allreduce_rejects_*")
    shape = (13,)
    inputs = _inputs(ctx.size, shape, dtype, seed=11, op=op)
    x = inputs[ctx.rank].copy()
    out = hpcdist.allreduce(x, op)
    expected = reference_reduce(inputs, op)
    with all_ranks(f"allreduce {dtype_name(dtype)} {op}"):
        check_array(out, expected, dtype=dtype)
        assert out is not x
        np.testing.assert_array_equal(x, inputs[ctx.rank])  # input untouched


@pytest.mark.parametrize("op", ["SUM", "MEAN", "MIN", "MAX", "PROD"])
def test_allreduce_reduceop_enum(ctx, op):
    inputs = _inputs(ctx.size, (7,), np.float64, seed=3, op=op.lower())
    out = hpcdist.allreduce(inputs[ctx.rank], getattr(hpcdist.ReduceOp, op))
    with all_ranks():
        check_array(out, reference_reduce(inputs, op.lower()))


def test_allreduce_default_op_is_sum(ctx):
    out = hpcdist.allreduce(np.full(3, ctx.rank, dtype=np.int64))
    with all_ranks():
        check_array(out, np.full(3, ctx.size * (ctx.size - 1) // 2, dtype=np.int64))


@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
def test_allreduce_bool_semantics(ctx, op):
    # rank 0 contributes [T, F, T, F], others [F, F, T, T]: every truth table row
    a = np.array([True, False, True, False])
    b = np.array([False, False, True, True])
    x = a if ctx.rank == 0 else b
    out = hpcdist.allreduce(x.copy(), op)
    logical_or = a | b
    logical_and = a & b
    expected = logical_or if op in ("sum", "max") else logical_and
    with all_ranks():
        check_array(out, expected, dtype=np.bool_)


# ------------------------------------------------------ 16-bit floats as floats
@pytest.mark.parametrize("dtype", [np.float16, BFLOAT16], ids=dtype_name)
def test_allreduce_16bit_floats_are_reduced_as_floats(ctx, dtype):
    n = ctx.size
    x = np.full(5, 1.5, dtype=dtype)
    s = hpcdist.allreduce(x, "sum")
    m = hpcdist.allreduce(x, "mean")
    # negative values reduced as unsigned integers would pick the wrong one
    y = np.array([-(ctx.rank + 1.0), ctx.rank * 0.5, -0.5], dtype=dtype)
    mx = hpcdist.allreduce(y, "max")
    mn = hpcdist.allreduce(y, "min")
    p = hpcdist.allreduce(np.full(2, -2.0 if ctx.rank == 0 else 1.5, dtype=dtype), "prod")
    with all_ranks(dtype_name(dtype)):
        check_array(s, np.full(5, 1.5 * n), dtype=dtype)
        check_array(m, np.full(5, 1.5), dtype=dtype)
        check_array(mx, np.array([-1.0, (n - 1) * 0.5, -0.5]), dtype=dtype)
        check_array(mn, np.array([-float(n), 0.0, -0.5]), dtype=dtype)
        check_array(p, np.full(2, -2.0 * 1.5 ** (n - 1)), dtype=dtype)


# ------------------------------------------------------------- rejected input
@pytest.mark.parametrize("dtype", [np.bool_] + INT_DTYPES, ids=dtype_name)
def test_allreduce_rejects_mean_on_bool_and_int(ctx, dtype):
    x = np.zeros(4, dtype=dtype)
    exc = expect_error(TypeError, hpcdist.allreduce, x, "mean")
    with all_ranks("message names the op and suggests a fix"):
        text = str(exc)
        assert "mean" in text, text
        assert "sum" in text or "float" in text, text


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("dtype", COMPLEX_DTYPES, ids=dtype_name)
def test_allreduce_rejects_min_max_on_complex(ctx, dtype, op):
    expect_error(TypeError, hpcdist.allreduce, np.zeros(3, dtype=dtype), op)


def test_allreduce_rejects_object_dtype(ctx):
    x = np.array([1, "a", None], dtype=object)
    expect_error(TypeError, hpcdist.allreduce, x, "sum")


@pytest.mark.parametrize("x,match", [
    (np.array([1.0, 2.0], dtype=">f8"), r"dtype >f8 is float64 in the byte order opposite to "
                                         r"this machine's; convert with x.astype\('float64'\)"),
    (np.ma.masked_array([1.0, 2.0], mask=[0, 1]),
     r"allreduce: got a numpy.ma.MaskedArray; collectives move the data without its mask"),
], ids=["big_endian", "masked"])
def test_allreduce_names_what_is_wrong_with_an_array(ctx, x, match):
    expect_error(hpcdist.InvalidArgumentTypeError, hpcdist.allreduce, x, "sum", match=match)


@pytest.mark.parametrize("bad", ["avg", "summ", "bitwise_xor"])
def test_allreduce_rejects_unknown_op(ctx, bad):
    expect_error(ValueError, hpcdist.allreduce, np.ones(3), bad, match=bad)


def test_allreduce_rejects_non_string_op(ctx):
    expect_error((ValueError, TypeError), hpcdist.allreduce, np.ones(3), 42)


def test_allreduce_rejects_unknown_algorithm(ctx):
    expect_error(ValueError, hpcdist.allreduce, np.ones(3), "sum", algorithm="butterfly",
                 match="butterfly")


# ------------------------------------------------------------------- scalars
@pytest.mark.parametrize("kind", ["int", "float", "complex", "bool"])
def test_allreduce_python_scalars(ctx, kind):
    n, r = ctx.size, ctx.rank
    if kind == "int":
        value, expected, tp = r + 1, n * (n + 1) // 2, int
    elif kind == "float":
        value, expected, tp = r + 0.5, n * (n + 1) / 2 - n / 2, float
    elif kind == "complex":
        value, expected, tp = complex(r, 1), complex(n * (n - 1) / 2, n), complex
    else:
        value, expected, tp = (r == n - 1), True, bool
    out = hpcdist.allreduce(value, "sum")
    with all_ranks(kind):
        check_scalar(out, expected, tp)


def test_allreduce_python_scalar_ops(ctx):
    n, r = ctx.size, ctx.rank
    mx = hpcdist.allreduce(r, "max")
    mn = hpcdist.allreduce(float(r), "min")
    mean = hpcdist.allreduce(float(r), "mean")
    band = hpcdist.allreduce(r != 0, "prod")
    with all_ranks():
        check_scalar(mx, n - 1, int)
        check_scalar(mn, 0.0, float)
        check_scalar(mean, (n - 1) / 2, float)
        check_scalar(band, False, bool)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64,
                                   np.uint8, np.complex64, np.bool_],
                         ids=dtype_name)
def test_allreduce_numpy_scalars(ctx, dtype):
    value = dtype(1)
    out = hpcdist.allreduce(value, "sum")
    expected = True if dtype is np.bool_ else ctx.size
    with all_ranks(dtype_name(dtype)):
        check_scalar(out, dtype(expected), dtype)


def test_allreduce_zero_dim_array_stays_array(ctx):
    out = hpcdist.allreduce(np.array(2.0), "sum")
    with all_ranks():
        check_array(out, np.array(2.0 * ctx.size))


# ------------------------------------------------------------ out= and layout
def test_allreduce_out(ctx):
    inputs = _inputs(ctx.size, (4, 5), np.float32, seed=5, op="sum")
    x = inputs[ctx.rank].copy()
    out = np.empty_like(x)
    r = hpcdist.allreduce(x, "sum", out=out)
    with all_ranks():
        assert r is out
        check_array(out, reference_reduce(inputs, "sum"))
        np.testing.assert_array_equal(x, inputs[ctx.rank])


def test_allreduce_out_checks_hold_after_the_fast_path_is_warm(ctx):
    """Once a (op, dtype) pair has taken the fast path, a wrong ``out`` or op
    still gets the general path's errors, and odd layouts its handling."""
    inputs = _inputs(ctx.size, (4, 6), np.float64, seed=12, op="sum")
    x = inputs[ctx.rank].copy()
    expected = reference_reduce(inputs, "sum")
    first, second = (hpcdist.allreduce(x, "sum") for _ in range(2))  # validate, then cached
    with all_ranks():
        check_array(first, expected)
        check_array(second, expected)
    expect_error(ValueError, hpcdist.allreduce, x, "sum", out=np.empty((6, 4)),
                 match=r"out is float64\[6,4\]")
    expect_error(ValueError, hpcdist.allreduce, x, "sum", out=np.empty((4, 6), np.int64),
                 match="same shape and dtype")
    expect_error(ValueError, hpcdist.allreduce, x, ["sum"], match="is not a reduction")
    fortran = np.asfortranarray(np.empty_like(x))
    with all_ranks():
        assert hpcdist.allreduce(x, "sum", out=fortran) is fortran
        check_array(fortran, expected)


@pytest.mark.parametrize("form", ["blocking", "nonblocking"])
def test_allreduce_out_must_be_a_writable_array(ctx, form):
    """A bad ``out`` raises on the calling rank before any communication, naming out."""
    def reduce(x, out):
        if form == "blocking":
            return hpcdist.allreduce(x, "sum", out=out)
        return hpcdist.iallreduce(x, "sum", out=out).wait()

    x = np.ones(4)
    read_only = np.empty(4)
    read_only.flags.writeable = False
    expect_error(ValueError, reduce, x, read_only, match=r"out is a read-only float64\[4\]")
    expect_error(TypeError, reduce, x, [0.0] * 4, match=r"out must be an array.*list")
    x.flags.writeable = False  # in place into a read-only array
    expect_error(ValueError, reduce, x, x, match="read-only")
    with all_ranks():  # and the ranks are still in step
        check_array(hpcdist.allreduce(np.ones(2), "sum"), np.full(2, float(ctx.size)))


@pytest.mark.parametrize("shape_known", [False, True])
def test_receiving_into_a_read_only_array_raises(ctx, shape_known):
    """A receiver's read-only array is refused before the receive; the message waits."""
    if ctx.size < 2:
        pytest.skip("needs a sender and a receiver")
    read_only = np.zeros(3)
    read_only.flags.writeable = False
    raised = None
    if ctx.rank == 0:
        hpcdist.send(np.arange(3.0), 1, tag=7, shape_known=shape_known)
    elif ctx.rank == 1:
        with pytest.raises(ValueError, match="read-only float64\\[3\\] to receive into") as info:
            hpcdist.recv(0, 7, out=read_only, shape_known=shape_known)
        raised = str(info.value)
        received = hpcdist.recv(0, 7, out=np.zeros(3), shape_known=shape_known)
        np.testing.assert_array_equal(received, np.arange(3.0))
    hpcdist.barrier()
    assert ctx.rank != 1 or "rank 1 passed" in raised


@pytest.mark.parametrize("op", ["sum", "max"])
def test_allreduce_in_place(ctx, op):
    inputs = _inputs(ctx.size, (9,), np.int64, seed=6, op=op)
    x = inputs[ctx.rank].copy()
    r = hpcdist.allreduce(x, op, out=x)
    with all_ranks():
        assert r is x
        check_array(x, reference_reduce(inputs, op))


@pytest.mark.parametrize("layout", ["strided", "transposed", "fortran", "reversed"])
def test_allreduce_non_contiguous(ctx, layout):
    inputs = _inputs(ctx.size, (6, 10), np.float64, seed=8, op="sum")
    base = inputs[ctx.rank].copy()
    views = {
        "strided": lambda a: a[:, ::2],
        "transposed": lambda a: a.T,
        "fortran": np.asfortranarray,
        "reversed": lambda a: a[::-1, ::-3],
    }
    x = views[layout](base)
    assert layout == "fortran" or not x.flags.c_contiguous
    out = hpcdist.allreduce(x, "sum")
    expected = views[layout](reference_reduce(inputs, "sum"))
    with all_ranks(layout):
        check_array(out, np.ascontiguousarray(expected))
        np.testing.assert_array_equal(base, inputs[ctx.rank])


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_], ids=dtype_name)
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4)])
def test_allreduce_zero_size(ctx, dtype, shape):
    x = np.zeros(shape, dtype=dtype)
    out = hpcdist.allreduce(x, "sum")
    with all_ranks():
        check_array(out, np.zeros(shape, dtype=dtype))


# ---------------------------------------------------------------- algorithms
ALGORITHMS = ["auto", "ring", "tree", "hierarchical"]
LENGTHS = ["0", "1", "size-1", "size", "size+1", "3*size+2", "3001"]


def _length(spec, size):
    return int(eval(spec, {"size": size}))  # noqa: S307 - fixed test strings


@pytest.mark.parametrize("dtype,op", [(np.float64, "sum"), (np.int64, "sum"),
                                      (np.float32, "max"), (np.int32, "min"),
                                      (np.float64, "mean"), (np.int16, "prod")],
                         ids=lambda v: v if isinstance(v, str) else dtype_name(v))
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce_algorithms(ctx, algorithm, length, dtype, op):
    n = _length(length, ctx.size)
    inputs = _inputs(ctx.size, (n,), dtype, seed=100 + n, op=op)
    out = hpcdist.allreduce(inputs[ctx.rank].copy(), op, algorithm=algorithm)
    with all_ranks(f"{algorithm} n={n}"):
        check_array(out, reference_reduce(inputs, op), dtype=dtype)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce_algorithms_2d_noncontiguous_out(ctx, algorithm):
    inputs = _inputs(ctx.size, (7, 2 * ctx.size + 1), np.float32, seed=21, op="sum")
    x = inputs[ctx.rank].T  # non-contiguous
    out = np.empty(x.shape, dtype=np.float32)
    r = hpcdist.allreduce(x, "sum", out=out, algorithm=algorithm)
    with all_ranks(algorithm):
        assert r is out
        check_array(out, reference_reduce(inputs, "sum").T.copy())


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", [BFLOAT16, np.float16, np.bool_, np.complex128,
                                   np.uint64, np.longdouble], ids=dtype_name)
def test_allreduce_algorithms_dtypes(ctx, algorithm, dtype):
    op = "sum"
    inputs = _inputs(ctx.size, (2 * ctx.size + 3,), dtype, seed=31, op=op)
    out = hpcdist.allreduce(inputs[ctx.rank].copy(), op, algorithm=algorithm)
    with all_ranks(f"{algorithm} {dtype_name(dtype)}"):
        check_array(out, reference_reduce(inputs, op), dtype=dtype)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("dtype", [BFLOAT16, np.float16], ids=dtype_name)
def test_allreduce_algorithms_16bit_ops(ctx, algorithm, dtype, op):
    inputs = _inputs(ctx.size, (3 * ctx.size + 2,), dtype, seed=33, op=op)
    out = hpcdist.allreduce(inputs[ctx.rank].copy(), op, algorithm=algorithm)
    with all_ranks(f"{algorithm} {dtype_name(dtype)} {op}"):
        check_array(out, reference_reduce(inputs, op), dtype=dtype)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce_algorithms_scalar_and_in_place(ctx, algorithm):
    s = hpcdist.allreduce(ctx.rank + 1, "sum", algorithm=algorithm)
    x = np.full(5, float(ctx.rank))
    r = hpcdist.allreduce(x, "max", out=x, algorithm=algorithm)
    with all_ranks(algorithm):
        check_scalar(s, ctx.size * (ctx.size + 1) // 2, int)
        assert r is x
        check_array(x, np.full(5, float(ctx.size - 1)))


@pytest.mark.parametrize("op", ["sum", "mean", "prod"])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce_bitwise_identical_on_every_rank(ctx, algorithm, op):
    # replicas that get different roundings of "the" result drift apart
    inputs = _inputs(ctx.size, (4 * ctx.size + 5,), np.float32, seed=23, op=op)
    out = hpcdist.allreduce(inputs[ctx.rank].copy(), op, algorithm=algorithm)
    assert_on_all_ranks(same_on_all_ranks(out.tobytes()),
                        f"{algorithm}/{op}: ranks hold different bits of the result")


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda k: f"rpn{k}")
def multinode_ctx(request, ctx):
    """A context whose ranks are grouped into nodes of k consecutive ranks."""
    k = request.param
    os.environ["HPCDIST_RANKS_PER_NODE"] = str(k)
    try:
        sub = ctx.split(0)
    finally:
        del os.environ["HPCDIST_RANKS_PER_NODE"]
    return k, sub


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("op", ["sum", "max", "mean", "prod"])
@pytest.mark.parametrize("length", ["1", "size-1", "size+1", "1001"])
def test_hierarchical_multinode(multinode_ctx, length, op):
    k, sub = multinode_ctx
    assert sub.num_nodes == -(-sub.size // k)
    n = _length(length, sub.size)
    dtype = np.float64 if op == "mean" else np.int64
    inputs = _inputs(sub.size, (n,), dtype, seed=200 + n, op=op)
    results = {alg: hpcdist.allreduce(inputs[sub.rank].copy(), op, algorithm=alg, ctx=sub)
               for alg in ALGORITHMS}
    expected = reference_reduce(inputs, op)
    with all_ranks(f"k={k} n={n} {op}"):
        for alg, out in results.items():
            check_array(out, expected, dtype=dtype, what=alg)


# -------------------------------------------------------------------- reduce
def _root(spec, size):
    return 0 if spec == "first" else size - 1


@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("dtype,op", [(np.float64, "sum"), (np.int32, "max"),
                                      (np.float32, "mean"), (np.bool_, "prod"),
                                      (BFLOAT16, "sum"), (np.complex128, "prod")],
                         ids=lambda v: v if isinstance(v, str) else dtype_name(v))
def test_reduce(ctx, root, dtype, op):
    root = _root(root, ctx.size)
    inputs = _inputs(ctx.size, (3, 4), dtype, seed=41, op=op)
    out = hpcdist.reduce(inputs[ctx.rank].copy(), op, root=root)
    with all_ranks(f"reduce root={root}"):
        if ctx.rank == root:
            check_array(out, reference_reduce(inputs, op), dtype=dtype)
        else:
            assert out is None, f"non-root got {type(out)}"


def test_reduce_defaults(ctx):
    out = hpcdist.reduce(np.full(2, ctx.rank + 1, dtype=np.int64))
    with all_ranks():
        if ctx.rank == 0:
            check_array(out, np.full(2, ctx.size * (ctx.size + 1) // 2, dtype=np.int64))
        else:
            assert out is None


def test_reduce_zero_size(ctx):
    out = hpcdist.reduce(np.zeros((0, 3), np.float32), "sum", root=0)
    with all_ranks():
        if ctx.rank == 0:
            check_array(out, np.zeros((0, 3), np.float32))
        else:
            assert out is None


@pytest.mark.parametrize("bad", ["size", "size+3"])
def test_reduce_root_out_of_range(ctx, bad):
    root = _length(bad, ctx.size)
    expect_error(ValueError, hpcdist.reduce, np.ones(3), "sum", root=root, match=str(root))
    # the context is still usable afterwards
    out = hpcdist.allreduce(np.ones(2), "sum")
    with all_ranks():
        check_array(out, np.full(2, float(ctx.size)))


def test_reduce_rejects_bad_op(ctx):
    expect_error(ValueError, hpcdist.reduce, np.ones(3), "median", match="median")
    expect_error(TypeError, hpcdist.reduce, np.ones(3, np.int32), "mean")
