"""Rank 0's model parameters and optimizer state on every rank."""

import torch

from ..comm import broadcast_object, resolve_context
from ..comm.agreement import agree_config, described_layouts
from ..comm.checks import validated_on_every_rank
from .collectives import broadcast

__all__ = ["broadcast_parameters", "broadcast_optimizer_state"]


def broadcast_parameters(model_or_state_dict, root=0, *, ctx=None):
    """Overwrite every rank's parameters and buffers with ``root``'s, in place.

    Call it once after building the model (and after loading a checkpoint on
    the root only), so that every replica starts from the same weights.

    Parameters
    ----------
    model_or_state_dict : torch.nn.Module, dict of tensors, or iterable of (name, tensor)
        A module (its ``state_dict()``: parameters and buffers), a state dict,
        or ``model.named_parameters()``.
    root : int, default=0
    ctx : Context, optional

    Raises
    ------
    ConfigMismatchError
        On every rank, naming the first entry whose name, shape or dtype
        differs between ranks (every rank must build the same model).
    """
    ctx = resolve_context(ctx)
    params = model_or_state_dict
    if isinstance(params, torch.nn.Module):
        params = params.state_dict(keep_vars=True)
    entries = list(params.items()) if isinstance(params, dict) else list(params)

    def broadcast_parameters():
        agree_config(ctx, "broadcast_parameters", described_layouts(entries),
                     fix="every rank must build the same model (same layers, shapes and dtypes)")
        for _, value in entries:
            if isinstance(value, torch.Tensor):
                broadcast(value.data if isinstance(value, torch.nn.Parameter) else value,
                          root, ctx=ctx)

    # a process that replaces a lost rank does this with the others, in hpcdist.resilient.run
    ctx.run_setup(broadcast_parameters)


def broadcast_optimizer_state(optimizer, root=0, *, ctx=None):
    """Give every rank ``root``'s optimizer state (moments, step counts) and
    hyper-parameters (``param_groups``), through ``load_state_dict``.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        The same kind of optimizer over the same parameters on every rank.
    root : int, default=0
    ctx : Context, optional
    """
    ctx = resolve_context(ctx)

    def broadcast_optimizer_state():
        state = broadcast_object(optimizer.state_dict() if ctx.rank == root else None, root,
                                 ctx=ctx)
        with validated_on_every_rank(ctx):
            if ctx.rank != root:
                optimizer.load_state_dict(state)

    # a process that replaces a lost rank does this with the others, in hpcdist.resilient.run
    ctx.run_setup(broadcast_optimizer_state)
