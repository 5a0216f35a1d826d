"""Collectives on torch tensors: hpcdist's collectives on zero-copy views."""

import torch

from ..comm import allgather as _allgather
from ..comm import allreduce as _allreduce
from ..comm import alltoall as _alltoall
from ..comm import broadcast as _broadcast
from ..comm import reduce_scatter as _reduce_scatter
from ..comm.tensors import tensor_from_array, tensor_view
from ..exceptions import InvalidArgumentTypeError

__all__ = ["allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall"]


def _checked(tensor, name):
    if not isinstance(tensor, torch.Tensor):
        raise InvalidArgumentTypeError(
            f"hpcdist.torch.{name}: expected a torch.Tensor, got "
            f"{type(tensor).__name__}; hpcdist.{name} takes NumPy arrays")
    return tensor.detach().contiguous()


def allreduce(tensor, op="mean", *, ctx=None):
    """Combine ``tensor`` over the ranks; a new tensor on every rank.

    Parameters
    ----------
    tensor : torch.Tensor
        CPU or CUDA, any dtype hpcdist reduces (float16 and bfloat16 included).
    op : {"mean", "sum", "min", "max", "prod"}, default="mean"
        ``"mean"`` as Horovod's default.
    ctx : Context, optional

    Returns
    -------
    torch.Tensor
        Same device, dtype and shape as ``tensor``; no autograd history.
    """
    view = tensor_view(_checked(tensor, "allreduce"))
    return tensor_from_array(_allreduce(view, op, ctx=ctx))


def broadcast(tensor, root=0, *, ctx=None):
    """Root's ``tensor`` on every rank, written into each rank's ``tensor`` in place.

    Every rank passes a tensor of the root's shape and dtype (one MPI
    broadcast, no header). Returns ``tensor``.
    """
    contiguous = _checked(tensor, "broadcast")
    _broadcast(tensor_view(contiguous), root, shape_known=True, ctx=ctx)
    if contiguous.data_ptr() != tensor.data_ptr():  # tensor was not contiguous: copy back
        with torch.no_grad():
            tensor.copy_(contiguous)
    return tensor


def allgather(tensor, *, ctx=None):
    """Every rank's ``tensor`` concatenated along dimension 0 (lengths may differ).

    Returns
    -------
    torch.Tensor
        A new tensor on ``tensor``'s device, in rank order.
    """
    view = tensor_view(_checked(tensor, "allgather"))
    return tensor_from_array(_allgather(view, ctx=ctx))


def reduce_scatter(tensor, op="mean", counts=None, *, ctx=None):
    """Reduce ``tensor`` (the same shape on every rank) and give rank ``r`` block ``r``
    of dimension 0 (balanced, or ``counts`` rows each); a new tensor."""
    view = tensor_view(_checked(tensor, "reduce_scatter"))
    return tensor_from_array(_reduce_scatter(view, op, counts, ctx=ctx))


def alltoall(tensor, counts=None, *, ctx=None):
    """Block ``r`` of dimension 0 of every rank's ``tensor`` goes to rank ``r``
    (balanced blocks, or ``counts`` rows each); the blocks received, in rank order."""
    view = tensor_view(_checked(tensor, "alltoall"))
    return tensor_from_array(_alltoall(view, counts, ctx=ctx))
