"""Elementwise activations: ReLU, Tanh, GELU.

They have no parameters; output and input gradient keep the input's shape
and dtype.
"""
import math

import numpy as np
from scipy.special import erf

from ..exceptions import InvalidArgumentError
from .layers import cached, check_grad_output, compute_dtype, float_input
from .module import Module, array_module

__all__ = ["ReLU", "Tanh", "GELU"]


class ReLU(Module):
    """``max(x, 0)`` elementwise; the gradient at 0 is taken as 0.

    Shapes: input ndarray of any shape and float dtype; output the same.
    """

    def forward(self, x):
        x = float_input("ReLU", x)
        xp = array_module(x)
        mask = x > 0
        self._cache = (x.dtype, mask)
        return xp.maximum(x, x.dtype.type(0))  # NaN stays NaN

    def backward(self, grad_output):
        dtype, mask = cached(self, "_cache")
        xp = array_module(mask)
        g = check_grad_output("ReLU", grad_output, mask.shape, xp)
        return (g * mask).astype(dtype, copy=False)  # a multiply: cheaper than where()


class Tanh(Module):
    """``tanh(x)`` elementwise; the gradient is ``1 - tanh(x)**2``.

    Shapes: input ndarray of any shape and float dtype; output the same.
    """

    def forward(self, x):
        x = float_input("Tanh", x)
        self._output = array_module(x).tanh(x)
        return self._output

    def backward(self, grad_output):
        y = cached(self, "_output")
        g = check_grad_output("Tanh", grad_output, y.shape, array_module(y))
        return (g * (1 - y * y)).astype(y.dtype, copy=False)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_CUBIC = 0.044715


def _erf(xp):
    """The error function of ``xp`` (SciPy comes with scikit-learn; CuPy has its own)."""
    if xp is np:
        return erf
    from cupyx.scipy.special import erf as cupy_erf
    return cupy_erf


class GELU(Module):
    """Gaussian error linear unit ``x * Phi(x)``, Phi the standard normal CDF.

    Parameters
    ----------
    approximate : {"none", "tanh"}, default="none"
        ``"none"`` is exact, ``0.5 * x * (1 + erf(x / sqrt(2)))`` (erf from
        ``scipy.special``, or ``cupyx.scipy.special`` for CuPy arrays);
        ``"tanh"`` is the approximation
        ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))``.
        The names and the default are PyTorch's.

    Notes
    -----
    Shapes: input ndarray of any shape and float dtype; output the same.
    float16 inputs compute in float32 and are rounded back.
    """

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise InvalidArgumentError(
                f"GELU: approximate={approximate!r} should be 'none' (exact, "
                "with erf) or 'tanh' (the tanh approximation)")
        self.approximate = approximate

    def forward(self, x):
        x = float_input("GELU", x)
        xp = array_module(x)
        xc = x.astype(compute_dtype(x.dtype), copy=False)
        if self.approximate == "tanh":
            t = xp.tanh(_SQRT_2_OVER_PI * (xc + _GELU_CUBIC * xc * xc * xc))
            cdf = 0.5 * (1 + t)
        else:
            t = None
            cdf = 0.5 * (1 + _erf(xp)(xc * _INV_SQRT_2))
        self._cache = (x.dtype, xc, cdf, t)
        return (xc * cdf).astype(x.dtype, copy=False)

    def backward(self, grad_output):
        dtype, xc, cdf, t = cached(self, "_cache")
        xp = array_module(xc)
        g = check_grad_output("GELU", grad_output, xc.shape, xp)
        if self.approximate == "tanh":
            dinner = _SQRT_2_OVER_PI * (1 + 3 * _GELU_CUBIC * xc * xc)
            slope = cdf + 0.5 * xc * (1 - t * t) * dinner
        else:
            slope = cdf + xc * _INV_SQRT_2PI * xp.exp(-0.5 * xc * xc)
        return (g * slope).astype(dtype, copy=False)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"
