"""hpcdist._checks: the one integer check of data, checkpoint and kernels."""

import numpy as np
import pytest

from hpcdist._checks import check_int, is_integer


@pytest.mark.parametrize("value", [3, np.int64(3), np.uint8(3)])
def test_integers_come_back_as_int(value):
    out = check_int(value, "n", 0, 5)
    assert out == 3 and type(out) is int


@pytest.mark.parametrize("value", [2.5, 3.0, "3", None, True, np.bool_(False)])
def test_non_integers_and_bools_are_refused(value):
    with pytest.raises(TypeError, match=rf"^n={value!r} should be an integer \(a count\)$"):
        check_int(value, "n", hint=" (a count)")


@pytest.mark.parametrize("minimum,maximum,value,span", [
    (1, None, 0, ">= 1"), (None, 4, 5, "<= 4"), (0, 4, 5, r"in \[0, 4\]"),
    (0, 4, -1, r"in \[0, 4\]"),
])
def test_bounds_name_the_value_and_the_range(minimum, maximum, value, span):
    with pytest.raises(ValueError, match=rf"^k={value} should be {span} \(hint\)$"):
        check_int(value, "k", minimum, maximum, hint=" (hint)")
    for bound in (minimum, maximum):
        if bound is not None:
            assert check_int(bound, "k", minimum, maximum) == bound


@pytest.mark.parametrize("value, expected", [
    (0, True), (7, True), (np.int32(3), True), (np.uint64(2), True),
    (True, False), (False, False), (np.bool_(True), False),
    (1.0, False), (np.float64(2.0), False), ("1", False), (None, False)])
def test_is_integer_takes_integers_and_never_a_bool(value, expected):
    assert is_integer(value) is expected
