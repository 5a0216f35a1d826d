"""Random number generators and initial values for layers.

Initial values are drawn on the host with a NumPy ``Generator`` (so a seed
gives the same model on CPU and GPU) and then moved to the array module the
layer lives on with ``xp.asarray``.
"""
import math
import numbers

import numpy as np

from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["as_generator", "uniform", "linear_bound"]


def as_generator(random_state):
    """A ``numpy.random.Generator`` for ``random_state``.

    Parameters
    ----------
    random_state : None, int, numpy.random.Generator, numpy.random.SeedSequence, \
numpy.random.BitGenerator or numpy.random.RandomState
        ``None`` draws fresh entropy; an int (or seed sequence) gives a
        reproducible stream; a ``Generator`` is used as is (shared, not
        copied); a legacy ``RandomState`` seeds a new ``Generator`` from
        its stream (so scikit-learn style seeds work too).

    Returns
    -------
    numpy.random.Generator
    """
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(int(random_state.randint(0, 2**31 - 1)))
    if random_state is None or isinstance(random_state, (np.random.SeedSequence,
                                                         np.random.BitGenerator)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, numbers.Integral) and not isinstance(random_state, bool):
        if random_state < 0:
            raise InvalidArgumentError(
                f"random_state={random_state} should be a non-negative integer, "
                "None, or a numpy.random.Generator")
        return np.random.default_rng(int(random_state))
    raise InvalidArgumentTypeError(
        f"random_state={random_state!r} should be None, a non-negative integer, "
        "or a numpy.random.Generator")


def linear_bound(fan_in):
    """``1 / sqrt(fan_in)``, the bound of PyTorch's default Linear init
    (``kaiming_uniform_(a=sqrt(5))`` for weights, and the bias rule); 0 for
    ``fan_in == 0``."""
    return 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0


def uniform(shape, bound, *, rng, dtype=np.float32, xp=np):
    """Values from U(-bound, bound) drawn with ``rng`` on the host, as ``xp`` array.

    Parameters
    ----------
    shape : tuple of int
    bound : float
    rng : numpy.random.Generator
    dtype : dtype, default=numpy.float32
    xp : module, default=numpy
        ``numpy`` or ``cupy``; the result is ``xp.asarray`` of the host values.

    Returns
    -------
    ndarray of shape ``shape`` and dtype ``dtype``
    """
    values = rng.uniform(-bound, bound, size=shape).astype(dtype)
    return values if xp is np else xp.asarray(values)
