"""Property-based tests of the collectives' argument checks (one process).

Random counts, shapes, dtypes, roots and ``out`` arrays: whatever a caller
passes, a collective either returns the right result or raises a
``ValueError``/``TypeError`` that names the offending argument; it never
truncates a count or writes into an array it should not.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hpcdist
from hpcdist import InvalidArgumentError, InvalidArgumentTypeError
from hpcdist._partition import validate_counts

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, database=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture])

#: anything a caller might put in a counts list
count_values = st.one_of(
    st.integers(-3, 12),
    st.integers(0, 12).map(np.int32),
    st.integers(0, 12).map(float),
    st.floats(-2, 12),
    st.sampled_from([float("nan"), float("inf")]),
    st.sampled_from(["2", None, True, [1]]),
)


def _whole(value):
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, np.integer)):
        return True
    return isinstance(value, float) and value == value and float(value).is_integer()


@PROPERTY_SETTINGS
@given(counts=st.lists(count_values, max_size=5), parts=st.integers(1, 4),
       total=st.one_of(st.none(), st.integers(0, 30)))
def test_counts_are_accepted_exactly_when_whole_non_negative_and_summing(counts, parts, total):
    valid = (len(counts) == parts and all(_whole(c) for c in counts)
             and all(c >= 0 for c in counts)
             and (total is None or sum(int(c) for c in counts) == total))
    if valid:
        assert validate_counts(counts, parts, total, "scatter") == [int(c) for c in counts]
        return
    with pytest.raises(ValueError, match=r"^scatter: counts=") as info:
        validate_counts(counts, parts, total, "scatter")
    wrong = [c for c in counts if not _whole(c)]
    if wrong:  # the first value that is not a whole number is named
        assert f"holds {wrong[0]!r}, not an integer" in str(info.value)


@pytest.fixture
def solo(ctx):
    if ctx.size != 1:
        pytest.skip("single-process property tests run without mpiexec")
    return ctx


DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.complex64]
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@PROPERTY_SETTINGS
@given(shape=shapes, dtype=st.sampled_from(DTYPES), out_shape=shapes,
       out_dtype=st.sampled_from(DTYPES), writable=st.booleans(), fortran=st.booleans())
def test_allreduce_out_is_used_or_refused_by_name(solo, shape, dtype, out_shape, out_dtype,
                                                  writable, fortran):
    x = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    out = np.full(out_shape, 3, dtype=out_dtype, order="F" if fortran else "C")
    out.flags.writeable = writable
    before = out.copy()
    if out_shape != shape or np.dtype(out_dtype) != np.dtype(dtype):
        with pytest.raises(ValueError, match=r"allreduce: out is "):
            hpcdist.allreduce(x, "sum", out=out)
    elif not writable:
        with pytest.raises(ValueError, match=r"allreduce: out is a read-only"):
            hpcdist.allreduce(x, "sum", out=out)
    else:
        assert hpcdist.allreduce(x, "sum", out=out) is out
        np.testing.assert_array_equal(out, x)
        return
    np.testing.assert_array_equal(out, before)  # a refused out is left untouched


@pytest.mark.parametrize("rows, counts", [(1, [True]), (0, [False])])
def test_allgather_refuses_booleans_equal_to_its_rows(solo, rows, counts):
    # True == 1 and False == 0: the equal-split shortcut must not take them as counts
    with pytest.raises(ValueError, match=r"^allgather: counts"):
        hpcdist.allgather(np.ones((rows, 2)), counts=counts)


@PROPERTY_SETTINGS
@given(rows=st.integers(0, 6), counts=st.lists(count_values, max_size=2),
       collective=st.sampled_from(["scatter", "alltoall", "reduce_scatter", "allgather"]))
def test_counts_of_every_collective(solo, rows, counts, collective):
    x = np.arange(rows * 2, dtype=np.float64).reshape(rows, 2)
    call = {
        "scatter": lambda: hpcdist.scatter(x, root=0, counts=counts),
        "alltoall": lambda: hpcdist.alltoall(x, counts=counts),
        "reduce_scatter": lambda: hpcdist.reduce_scatter(x, "sum", counts=counts),
        "allgather": lambda: hpcdist.allgather(x, counts=counts),
    }[collective]
    valid = (len(counts) == 1 and _whole(counts[0]) and counts[0] == rows)
    if valid:
        np.testing.assert_array_equal(call(), x)
    else:
        with pytest.raises(ValueError, match=rf"^{collective}: counts"):
            call()


@PROPERTY_SETTINGS
@given(root=st.one_of(st.integers(-3, 3), st.floats(-1, 1), st.sampled_from(["0", None])))
def test_root_must_be_a_rank(solo, root):
    x = np.arange(3.0)
    if isinstance(root, (int, np.integer)) and not isinstance(root, bool) and root == 0:
        np.testing.assert_array_equal(hpcdist.broadcast(x, root=root), x)
        return
    with pytest.raises(ValueError, match=r"broadcast: root=.* is not a rank"):
        hpcdist.broadcast(x, root=root)


def test_argument_errors_are_public_hpcdist_errors(solo):
    """Bad arguments raise the public classes (still ValueError / TypeError)."""
    x = np.arange(4.0)
    read_only = np.zeros(4)
    read_only.flags.writeable = False
    cases = [
        (InvalidArgumentError, lambda: hpcdist.scatter(x, counts=[3.5])),
        (InvalidArgumentError, lambda: hpcdist.allgather(x, counts=[2])),
        (InvalidArgumentError, lambda: hpcdist.broadcast(x, root=3)),
        (InvalidArgumentError, lambda: hpcdist.allreduce(x, out=read_only)),
        (InvalidArgumentError, lambda: hpcdist.allreduce(x, out=np.zeros(3))),
        (InvalidArgumentError, lambda: hpcdist.send(x, 5)),
        (InvalidArgumentTypeError, lambda: hpcdist.allreduce(x, out=[0.0] * 4)),
        (InvalidArgumentTypeError, lambda: hpcdist.allreduce(["a"])),
        (InvalidArgumentTypeError, lambda: hpcdist.allreduce(np.array(["a"]))),
        (InvalidArgumentTypeError, lambda: hpcdist.broadcast(None, shape_known=True)),
    ]
    for error_type, call in cases:
        with pytest.raises(error_type):
            call()


@pytest.mark.parametrize("call", [
    lambda x: hpcdist.broadcast(x, root=False),
    lambda x: hpcdist.reduce(x, root=False),
    lambda x: hpcdist.isend(x, dest=False),
    lambda x: hpcdist.isend(x, 0, tag=False),
    lambda x: hpcdist.irecv(source=False),
    lambda x: hpcdist.irecv(0, tag=True),
], ids=["broadcast root", "reduce root", "isend dest", "isend tag", "irecv source",
        "irecv tag"])
def test_booleans_are_not_ranks_or_tags(solo, call):
    # False == 0 and True == 1, but a bool where a rank or tag belongs is a bug upstream
    with pytest.raises(InvalidArgumentError, match=r"(root|dest|source|tag)=(False|True)"):
        call(np.ones(3))
