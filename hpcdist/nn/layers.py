"""Linear and Dropout layers, and the input checks the layers share.

Every layer computes with the array module of its input (NumPy or CuPy, see
:func:`~hpcdist.nn.module.array_module`), remembers in ``forward`` what
``backward`` needs, and in ``backward`` accumulates parameter gradients with
:meth:`~hpcdist.nn.module.Parameter.accumulate_grad` before returning the
gradient with respect to its input.
"""
import numbers

import numpy as np

from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError, InvalidStateError
from .init import as_generator, linear_bound, uniform
from .module import Module, Parameter, array_module

__all__ = ["Linear", "Dropout"]


# -- checks shared by the layers ----------------------------------------------------
def check_positive_int(owner, name, value):
    """``value`` as int, or ValueError naming ``owner(name=value)``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InvalidArgumentError(f"{owner}: {name}={value!r} should be a positive integer")
    return int(value)


def check_float_dtype(owner, dtype):
    """``dtype`` as a NumPy floating dtype (float16, float32, float64)."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise InvalidArgumentTypeError(
            f"{owner}: dtype={dtype!r} is not a dtype; use numpy.float32 "
            "or numpy.float64") from None
    if dtype.kind != "f":
        raise InvalidArgumentTypeError(f"{owner}: dtype={dtype} should be a floating-point dtype "
                                       "such as numpy.float32 or numpy.float64")
    return dtype


def float_input(owner, x, what="input"):
    """``x`` as an array (NumPy or CuPy) with a floating-point dtype."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        x = np.asarray(x)
    if x.dtype.kind != "f":
        raise InvalidArgumentTypeError(
            f"{owner} expects a floating-point {what}, got dtype {x.dtype}; "
            f"convert it with {what}.astype(numpy.float32)")
    return x


def compute_dtype(dtype):
    """The dtype layers with reductions compute in: float16 computes in
    float32, float32 and float64 stay."""
    return np.result_type(dtype, np.float32)


def check_grad_output(owner, grad_output, shape, xp):
    """``grad_output`` as an ``xp`` array of the forward output's ``shape``."""
    if not (hasattr(grad_output, "shape") and hasattr(grad_output, "dtype")):
        grad_output = xp.asarray(grad_output)
    if tuple(grad_output.shape) != tuple(shape):
        raise InvalidArgumentError(
            f"{owner}.backward: grad_output has shape {tuple(grad_output.shape)} "
            f"but the forward output had shape {tuple(shape)}")
    return grad_output


def cached(module, name):
    """What ``forward`` stored under ``name``, or InvalidStateError when it never ran."""
    value = module.__dict__.get(name)
    if value is None:
        raise InvalidStateError(f"{type(module).__name__}.backward called before forward; run "
                                "forward on a batch first")
    return value


# -- layers -------------------------------------------------------------------------
class Linear(Module):
    """Affine map ``y = x @ weight.T + bias``.

    Parameters
    ----------
    in_features : int
        Size of the last dimension of the input.
    out_features : int
        Size of the last dimension of the output.
    bias : bool, default=True
        Whether to add a learned bias.
    dtype : dtype, default=numpy.float32
        Dtype of the parameters.
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the initial values (see :func:`hpcdist.nn.init.as_generator`).
        Weight and bias are drawn from U(-1/sqrt(in_features),
        1/sqrt(in_features)), the distribution of PyTorch's default
        initialisation, on the host, then moved with ``xp.asarray``.
    xp : module, default=numpy
        ``numpy`` or ``cupy``: where the parameters live.

    Attributes
    ----------
    weight : Parameter of shape (out_features, in_features)
    bias : Parameter of shape (out_features,) or None
    needs_input_grad : bool, default=True
        Set it to False on a first layer whose input is data: ``backward``
        then skips the input gradient (one of the three matrix products) and
        returns None.

    Notes
    -----
    ``forward`` computes in the input's dtype (a float16 input with float32
    parameters computes in float16, as mixed precision wants); parameter
    gradients are accumulated in the parameters' dtype.

    Examples
    --------
    >>> layer = Linear(784, 10, random_state=0)
    >>> layer(np.zeros((32, 784), np.float32)).shape
    (32, 10)
    """

    def __init__(self, in_features, out_features, bias=True, *, dtype=np.float32,
                 random_state=None, xp=np):
        super().__init__()
        self.in_features = check_positive_int("Linear", "in_features", in_features)
        self.out_features = check_positive_int("Linear", "out_features", out_features)
        dtype = check_float_dtype("Linear", dtype)
        rng = as_generator(random_state)
        bound = linear_bound(self.in_features)
        self.weight = Parameter(uniform((self.out_features, self.in_features), bound,
                                        rng=rng, dtype=dtype, xp=xp))
        self.bias = (Parameter(uniform((self.out_features,), bound, rng=rng, dtype=dtype, xp=xp))
                     if bias else None)
        self.needs_input_grad = True

    def forward(self, x):
        """
        Parameters
        ----------
        x : ndarray of shape (..., in_features)
            Usually (n_samples, in_features); any float dtype.

        Returns
        -------
        ndarray of shape (..., out_features), dtype of ``x``
        """
        x = float_input("Linear", x)
        if x.ndim == 0 or x.shape[-1] != self.in_features:
            width = x.shape[-1] if x.ndim else "no last dimension"
            raise InvalidArgumentError(
                f"Linear(in_features={self.in_features}) got input of shape "
                f"{tuple(x.shape)}: its last dimension ({width}) must be "
                f"{self.in_features}; reshape the input or build the layer with "
                "the input's width")
        out = x @ _as_dtype(self.weight.data, x.dtype).T
        if self.bias is not None:
            out += _as_dtype(self.bias.data, x.dtype)
        self._input = x
        return out

    def backward(self, grad_output):
        """
        Parameters
        ----------
        grad_output : ndarray of shape (..., out_features)

        Returns
        -------
        ndarray of shape (..., in_features)
            The gradient with respect to the input, in the input's dtype.
            ``weight.grad`` (``grad_output.T @ x``) and ``bias.grad``
            (``grad_output.sum(0)``) accumulate, in that order.
        """
        x = cached(self, "_input")
        xp = array_module(x)
        g = check_grad_output("Linear", grad_output, x.shape[:-1] + (self.out_features,), xp)
        g = g.astype(x.dtype, copy=False)
        g2 = g.reshape(-1, self.out_features)
        if self.weight.requires_grad:
            self.weight.accumulate_grad_product(g2.T, x.reshape(-1, self.in_features))
        if self.bias is not None and self.bias.requires_grad:
            self.bias.accumulate_grad(g2.sum(axis=0))
        if not self.needs_input_grad:
            return None
        return g @ _as_dtype(self.weight.data, x.dtype)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Dropout(Module):
    """Zero each element with probability ``p`` in training mode.

    Kept elements are scaled by ``1 / (1 - p)`` ("inverted dropout"), so
    evaluation mode is the identity.

    Parameters
    ----------
    p : float, default=0.5
        Probability of dropping an element, in [0, 1).
    random_state : None, int or numpy.random.Generator, default=None
        Seed of the masks. NumPy inputs draw from this generator; CuPy inputs
        draw from a ``cupy.random.RandomState`` seeded once from it.

    Notes
    -----
    ``backward`` multiplies by the mask of the last ``forward``.
    """

    def __init__(self, p=0.5, *, random_state=None):
        super().__init__()
        if (isinstance(p, bool) or not isinstance(p, numbers.Real)
                or not 0 <= p < 1):
            raise InvalidArgumentError(f"Dropout: p={p!r} should be a probability in [0, 1) "
                                       "(p=0 keeps everything; use eval() to switch dropout off)")
        self.p = float(p)
        self._rng = as_generator(random_state)
        self._device_rng = None
        self._mask = None

    def _uniform(self, xp, shape):
        if xp is np:
            return self._rng.random(shape, dtype=np.float32)
        if self._device_rng is None:
            self._device_rng = xp.random.RandomState(int(self._rng.integers(0, 2**63 - 1)))
        return self._device_rng.random_sample(shape, dtype=xp.float32)

    def forward(self, x):
        """
        Parameters
        ----------
        x : ndarray of any shape, float dtype

        Returns
        -------
        ndarray of the shape and dtype of ``x``
            ``x`` itself in evaluation mode or with ``p == 0``.
        """
        x = float_input("Dropout", x)
        if not self.training or self.p == 0:
            self._mask = _IDENTITY
            return x
        xp = array_module(x)
        keep = self._uniform(xp, x.shape) >= self.p
        self._mask = keep.astype(x.dtype) * x.dtype.type(1.0 / (1.0 - self.p))
        return x * self._mask

    def backward(self, grad_output):
        """
        Parameters
        ----------
        grad_output : ndarray of the forward output's shape

        Returns
        -------
        ndarray
            ``grad_output`` times the mask (and scale) of the last forward.
        """
        mask = cached(self, "_mask")
        if mask is _IDENTITY:
            return grad_output
        g = check_grad_output("Dropout", grad_output, mask.shape, array_module(mask))
        return g * mask.astype(g.dtype, copy=False)

    def extra_repr(self):
        return f"p={self.p}"


_IDENTITY = object()  # Dropout's "mask" when forward passed its input through


def _as_dtype(array, dtype):
    return array if array.dtype == dtype else array.astype(dtype)
