"""Checks of the options that DDP and the estimators built on it share (private).

Each raises on the calling rank, before any communication, with a message
naming the owner (``"DistributedDataParallel"``, ``"MLPClassifier"``), the
value and the fix.
"""

import numbers

import numpy as np

from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["checked_bucket_size"]


def checked_bucket_size(owner, value):
    """A bucket capacity in MiB: a number >= 0 (``0``: one bucket per parameter,
    ``math.inf``: one bucket per dtype), as a float."""
    fix = "(0: one bucket per parameter, inf: one bucket)"
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidArgumentTypeError(f"{owner}: bucket_size_mb={value!r} should be a number "
                                       f">= 0 {fix}")
    value = float(value)
    if not value >= 0:  # NaN too
        raise InvalidArgumentError(f"{owner}: bucket_size_mb={value} should be >= 0 {fix}")
    return value
