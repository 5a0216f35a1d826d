"""Tensor parallelism: a Linear layer's weight split over the ranks of a context.

Megatron-LM style (Shoeybi et al., 2019). :class:`ColumnParallelLinear`
splits the weight by output features: every rank takes the whole input and
computes its block of output columns; the backward pass sums the ranks'
input gradients in one allreduce. :class:`RowParallelLinear` splits it by
input features: every rank takes its block of input columns, and the forward
pass sums the ranks' partial outputs in one allreduce. A column-parallel
layer followed by a row-parallel one (an element-wise activation between
them) needs no communication in between: one allreduce forward, one
backward::

    mlp = nn.Sequential(ColumnParallelLinear(1024, 4096, ctx=ctx), nn.GELU(),
                        RowParallelLinear(4096, 1024, ctx=ctx))

Both draw their initial values as :class:`~hpcdist.nn.Linear` does with the
same ``random_state`` and keep their block, so they compute exactly what the
unsplit layer computes. Blocks are balanced (sizes differ by at most one);
``layer.block`` is this rank's slice of the split features, ``layer.weight``
its block of rows (column-parallel: shape (out_block, in_features), with the
bias's block) or of columns (row-parallel: shape (out_features, in_block),
with the whole bias).
"""

import numpy as np

from .._partition import balanced_counts
from ..comm import allgather, allreduce, resolve_context
from ..exceptions import InvalidArgumentError
from .init import as_generator, linear_bound, uniform
from .layers import (
    _as_dtype,
    cached,
    check_float_dtype,
    check_grad_output,
    check_positive_int,
    float_input,
)
from .module import Module, Parameter, array_module

__all__ = ["ColumnParallelLinear", "RowParallelLinear"]


class _SplitLinear(Module):
    """What both layers share: the context, the split and the initial values."""

    _split_axis = 0  # of the weight: 0 splits output features, 1 input features

    def __init__(self, in_features, out_features, bias, dtype, random_state, xp, ctx):
        super().__init__()
        name = type(self).__name__
        self.in_features = check_positive_int(name, "in_features", in_features)
        self.out_features = check_positive_int(name, "out_features", out_features)
        dtype = check_float_dtype(name, dtype)
        self.ctx = resolve_context(ctx)
        split = (self.out_features, self.in_features)[self._split_axis]
        self.counts = balanced_counts(split, self.ctx.size)
        start = sum(self.counts[:self.ctx.rank])
        self.block = slice(start, start + self.counts[self.ctx.rank])
        rng = as_generator(random_state)
        bound = linear_bound(self.in_features)
        weight = uniform((self.out_features, self.in_features), bound, rng=rng, dtype=dtype,
                         xp=xp)
        self.weight = Parameter(xp.ascontiguousarray(
            weight[self.block] if self._split_axis == 0 else weight[:, self.block]))
        self.bias = None
        if bias:
            values = uniform((self.out_features,), bound, rng=rng, dtype=dtype, xp=xp)
            self.bias = Parameter(xp.ascontiguousarray(
                values[self.block] if self._split_axis == 0 else values))

    def _reduce(self, partial):
        if self.ctx.size == 1:
            return partial
        return allreduce(partial, op="sum", out=partial, ctx=self.ctx)

    def _gather_columns(self, local):
        if self.ctx.size == 1:
            return local
        return allgather(local, axis=local.ndim - 1, counts=self.counts, ctx=self.ctx)

    def _checked_input(self, x, width):
        """``x`` as a float array whose last dimension is ``width``."""
        name = type(self).__name__
        x = float_input(name, x)
        if x.ndim == 0 or x.shape[-1] != width:
            raise InvalidArgumentError(
                f"{name}(in_features={self.in_features}) on rank {self.ctx.rank} got input of "
                f"shape {tuple(x.shape)}: its last dimension must be {width}")
        return x

    def _affine(self, x, reduce):
        """``x @ weight.T`` (summed over the ranks with ``reduce``) plus the bias."""
        out = x @ _as_dtype(self.weight.data, x.dtype).T
        if reduce:
            out = self._reduce(array_module(out).ascontiguousarray(out))
        if self.bias is not None:
            out += _as_dtype(self.bias.data, x.dtype)
        self._input = x
        return out

    def _backward_local(self, grad_output, width, columns=None):
        """Accumulate the parameter gradients; return this rank's input gradient.

        ``grad_output`` has ``width`` output columns, of which ``columns`` are
        this rank's (all when None).
        """
        x = cached(self, "_input")
        xp = array_module(x)
        g = check_grad_output(type(self).__name__, grad_output, x.shape[:-1] + (width,), xp)
        if columns is not None:
            g = g[..., columns]
        g = g.astype(x.dtype, copy=False)
        g2 = g.reshape(-1, g.shape[-1])
        if self.weight.requires_grad:
            self.weight.accumulate_grad_product(g2.T, x.reshape(-1, x.shape[-1]))
        if self.bias is not None and self.bias.requires_grad:
            self.bias.accumulate_grad(g2.sum(axis=0))
        return xp.ascontiguousarray(g @ _as_dtype(self.weight.data, x.dtype))

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, ranks={self.ctx.size}")


class ColumnParallelLinear(_SplitLinear):
    """``y = x @ weight.T + bias`` with the output features split over ``ctx``.

    ``forward`` takes ``x`` of shape (..., in_features), the same on every
    rank, and returns this rank's block of output columns, shape
    (..., out_block), or the whole output with ``gather_output``.
    ``backward`` takes the gradient of that output and returns the whole
    input gradient (..., in_features), summed over the ranks.

    Parameters
    ----------
    in_features, out_features : int
    bias : bool, default=True
    gather_output : bool, default=False
        False: the output is this rank's block of columns, for a following
        :class:`RowParallelLinear`. True: the whole output on every rank (one
        allgather).
    dtype : dtype, default=numpy.float32
    random_state : None, int or numpy.random.Generator
        The same on every rank: the values of ``Linear(..., random_state=...)``.
    xp : module, default=numpy
    ctx : Context, optional
    """

    _split_axis = 0

    def __init__(self, in_features, out_features, bias=True, *, gather_output=False,
                 dtype=np.float32, random_state=None, xp=np, ctx=None):
        super().__init__(in_features, out_features, bias, dtype, random_state, xp, ctx)
        self.gather_output = bool(gather_output)

    def forward(self, x):
        """This rank's output columns for ``x`` (all of them with ``gather_output``)."""
        out = self._affine(self._checked_input(x, self.in_features), reduce=False)
        return self._gather_columns(out) if self.gather_output else out

    def backward(self, grad_output):
        """The whole input gradient, summed over the ranks (one allreduce)."""
        if self.gather_output:
            grad = self._backward_local(grad_output, self.out_features, self.block)
        else:
            grad = self._backward_local(grad_output, self.weight.shape[0])
        return self._reduce(grad)


class RowParallelLinear(_SplitLinear):
    """``y = x @ weight.T + bias`` with the input features split over ``ctx``.

    ``forward`` takes this rank's block of input columns, shape
    (..., in_block) (the whole input with ``input_is_parallel=False``), and
    returns the whole output (..., out_features), the same on every rank.
    ``backward`` takes its gradient and returns the gradient of the input it
    was given.

    Parameters
    ----------
    in_features, out_features : int
    bias : bool, default=True
        The bias is whole on every rank, added once after the sum.
    input_is_parallel : bool, default=True
        True: the input is this rank's block of columns (a
        :class:`ColumnParallelLinear`'s output) and so is the input gradient.
        False: the whole input on every rank; this rank uses its block and the
        input gradient is gathered whole (one allgather).
    dtype, random_state, xp, ctx
        As for :class:`ColumnParallelLinear`.
    """

    _split_axis = 1

    def __init__(self, in_features, out_features, bias=True, *, input_is_parallel=True,
                 dtype=np.float32, random_state=None, xp=np, ctx=None):
        super().__init__(in_features, out_features, bias, dtype, random_state, xp, ctx)
        self.input_is_parallel = bool(input_is_parallel)

    def forward(self, x):
        """The whole output, summed over the ranks (one allreduce)."""
        if self.input_is_parallel:
            x = self._checked_input(x, self.weight.shape[1])
        else:
            x = self._checked_input(x, self.in_features)[..., self.block]
        return self._affine(x, reduce=True)

    def backward(self, grad_output):
        """The gradient of this rank's input block (gathered whole without
        ``input_is_parallel``)."""
        grad = self._backward_local(grad_output, self.out_features)
        return grad if self.input_is_parallel else self._gather_columns(grad)
