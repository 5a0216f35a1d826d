"""Errors of :mod:`hpcdist.parallel`'s training strategies."""

from ..exceptions import HpcdistError

__all__ = ["DivergenceError"]


class DivergenceError(HpcdistError, FloatingPointError):
    """Training diverged: the parameters hold NaN or infinity after an average.

    Raised on every rank by the model-averaging strategies, naming the
    strategy and the step (or round) whose average went bad.
    """
