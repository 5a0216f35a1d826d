"""Rows of torch parameters owned by this rank, and their reductions (private).

The layout and the coalesced collectives are hpcdist.nn's
(:mod:`hpcdist.parallel.sharded_rows`): each trainable parameter is split along
its first axis into one balanced block of rows per rank. They run on comm's
zero-copy views of the tensors, so MPI reads and writes the tensors' memory.
"""

import torch

from ..comm import allgather, reduce_scatter
from ..comm.agreement import agree_config, described_layouts
from ..comm.tensors import tensor_from_array, tensor_view
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ..parallel import sharded_rows

__all__ = ["TorchRowShard", "check_stage", "check_torch_optimizer", "verify_same_everywhere",
           "gather_rows", "reduce_rows_coalesced", "gather_rows_coalesced",
           "add_to_piece_grad"]


class TorchRowShard(sharded_rows.RowLayout):
    """This rank's rows of one torch parameter (``piece``, the tensor the optimizer steps,
    is set by the owner)."""


def gather_rows(shard, rows, ctx):
    """The whole parameter from every rank's ``rows`` (a new tensor of its shape)."""
    rows = rows.detach().contiguous()
    return shard.whole(tensor_from_array(allgather(tensor_view(rows), counts=shard.counts,
                                                   ctx=ctx)))


def check_stage(owner, stage, allowed):
    if isinstance(stage, bool) or not isinstance(stage, int):
        raise InvalidArgumentTypeError(f"{owner}: stage={stage!r} should be the integer "
                                       f"{' or '.join(map(str, allowed))}")
    if stage not in allowed:
        more = (" (stage 3, the parameters too, is hpcdist.torch.FullyShardedModule)"
                if 3 not in allowed else "")
        raise InvalidArgumentError(f"{owner}: stage={stage} should be "
                                   f"{' or '.join(map(str, allowed))}{more}")
    return stage


def check_torch_optimizer(owner, optimizer, named):
    """Raise unless ``optimizer`` is a torch optimizer stepping exactly the trainable
    parameters in ``named``."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise InvalidArgumentTypeError(f"{owner}: optimizer is a {type(optimizer).__name__}, "
                                       "not a torch.optim.Optimizer")
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    wanted = {id(p) for _, p in named}
    if held != wanted:
        foreign, missing = len(held - wanted), [n for n, p in named if id(p) not in held]
        raise InvalidArgumentError(
            f"{owner}: the optimizer holds {foreign} parameter(s) that are not among "
            f"named_parameters and lacks {len(missing)} of them"
            + (f" (the first: {missing[0]!r})" if missing else "")
            + "; build the optimizer on model.parameters() and pass model.named_parameters()")


def verify_same_everywhere(owner, ctx, named, settings, optimizer=None):
    """ConfigMismatchError on every rank unless the parameters, settings and optimizer
    agree."""
    values = described_layouts([(f"parameter {name}", p) for name, p in named])
    values.update(settings)
    if optimizer is not None:
        values["optimizer"] = type(optimizer).__name__
        for index, group in enumerate(optimizer.param_groups):
            values[f"optimizer group {index}"] = repr(sorted(
                (key, repr(value)) for key, value in group.items() if key != "params"))
    agree_config(ctx, owner, values,
                 fix="every rank must build the same model (and optimizer) and wrap them with "
                     "the same settings")


def reduce_rows_coalesced(shards, grads, ctx):
    """This rank's rows of the average of each of ``grads``, in one reduce-scatter."""
    if ctx.size == 1:
        return [shard.as_rows(grad).clone() for shard, grad in zip(shards, grads)]
    views = [tensor_view(grad.contiguous()) for grad in grads]
    return [tensor_from_array(rows) for rows in
            sharded_rows.reduce_rows_coalesced(shards, views, ctx, reduce_scatter)]


def gather_rows_coalesced(shards, ctx, *, pieces_are_views):
    """Every rank's rows of each shard's piece (one dtype), written into the whole
    parameters' ``.data`` (autograd's version counter stays as it was), in one allgather.
    ``pieces_are_views``: the pieces are views of this rank's rows, which are then skipped."""
    gathered = tensor_from_array(sharded_rows.allgather_rows(
        shards, [tensor_view(shard.piece) for shard in shards], ctx, allgather))
    with torch.no_grad():
        for rank, index, start, stop, offset in sharded_rows.rank_major_rows(shards):
            if pieces_are_views and rank == ctx.rank:
                continue
            shard = shards[index]
            rows = shard.as_rows(shard.parameter.data)[start:stop]
            rows.copy_(gathered[offset:offset + rows.numel()].view_as(rows))


def add_to_piece_grad(shard, reduced):
    """Add ``reduced``, this rank's rows of a parameter's averaged gradient, to the
    ``.grad`` of the shard's local piece (set it when there is none yet)."""
    reduced = reduced.reshape(shard.piece.shape)
    if shard.piece.grad is None:
        shard.piece.grad = reduced
    else:
        shard.piece.grad += reduced
