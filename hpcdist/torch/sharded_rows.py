"""Rows of torch parameters owned by this rank, and their reductions (private).

As for hpcdist.nn models (:mod:`hpcdist.parallel.sharded_rows`), each trainable
parameter is split along its first axis into one balanced block of rows per
rank. MPI reads and writes the tensors' memory through comm's zero-copy views.
"""

import torch

from .._partition import balanced_counts
from ..comm import allgather, reduce_scatter
from ..comm.agreement import agree_config, described_layouts
from ..comm.tensors import tensor_view
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["TorchRowShard", "check_stage", "check_torch_optimizer", "verify_same_everywhere",
           "reduce_rows", "gather_rows", "reduce_rows_coalesced", "gather_rows_coalesced",
           "add_to_piece_grad"]


class TorchRowShard:
    """This rank's rows of one torch parameter.

    Attributes
    ----------
    counts : list of int
        Rows of each rank's block.
    start, stop : int
        This rank's rows.
    """

    def __init__(self, name, parameter, size, rank):
        self.name = name
        self.parameter = parameter
        self.shape = tuple(parameter.shape)
        self.counts = balanced_counts(self.shape[0] if self.shape else 1, size)
        self.start = sum(self.counts[:rank])
        self.stop = self.start + self.counts[rank]

    def as_rows(self, tensor):
        """``tensor`` (of the parameter's shape) with rows first (0-d: one row)."""
        return tensor.reshape(1) if not self.shape else tensor

    def rows_of(self, tensor):
        return self.as_rows(tensor)[self.start:self.stop]

    def whole(self, rows):
        return rows.reshape(self.shape)


def reduce_rows(shard, grad, ctx):
    """This rank's rows of the average of ``grad`` over ranks (a new tensor)."""
    grad = shard.as_rows(grad).contiguous()
    return _as_tensor(reduce_scatter(tensor_view(grad), op="mean", counts=shard.counts, ctx=ctx),
                      grad)


def gather_rows(shard, rows, ctx):
    """The whole parameter from every rank's ``rows`` (a new tensor of its shape)."""
    rows = rows.detach().contiguous()
    return shard.whole(_as_tensor(allgather(tensor_view(rows), counts=shard.counts, ctx=ctx),
                                  rows))


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


def _as_tensor(array, like):
    """A collective's result (NumPy or CuPy) as a tensor on ``like``'s device, no copy."""
    return torch.from_dlpack(array) if like.is_cuda else torch.from_numpy(array)


def _row_elements(shard):
    return int(torch.Size(shard.shape[1:]).numel()) if shard.shape else 1


def _rank_major(shards, tensors, size):
    """One flat tensor of every rank's rows of ``tensors``, rank by rank (the order a
    reduce-scatter hands out and an allgather collects), and each rank's element count."""
    if len(shards) == 1:  # one parameter's rows are in rank order already: no copy
        shard = shards[0]
        return (shard.as_rows(tensors[0]).contiguous().reshape(-1),
                [count * _row_elements(shard) for count in shard.counts])
    parts, counts = [], []
    for rank in range(size):
        count = 0
        for shard, tensor in zip(shards, tensors):
            start = sum(shard.counts[:rank])
            rows = shard.as_rows(tensor)[start:start + shard.counts[rank]]
            parts.append(rows.reshape(-1))
            count += rows.numel()
        counts.append(count)
    return torch.cat(parts), counts


def reduce_rows_coalesced(shards, grads, ctx):
    """This rank's rows of the average of each of ``grads``, in one reduce-scatter."""
    if ctx.size == 1:
        return [shard.as_rows(grad).clone() for shard, grad in zip(shards, grads)]
    flat, counts = _rank_major(shards, grads, ctx.size)
    reduced = _as_tensor(reduce_scatter(tensor_view(flat), op="mean", counts=counts, ctx=ctx),
                         flat)
    results, offset = [], 0
    for shard in shards:
        n = (shard.stop - shard.start) * _row_elements(shard)
        results.append(reduced[offset:offset + n])
        offset += n
    return results


def gather_rows_coalesced(shards, ctx):
    """Every rank's rows of each shard's piece, written into the whole parameters, in one
    allgather."""
    if ctx.size == 1:
        return
    local = (shards[0].piece.detach().reshape(-1) if len(shards) == 1 else
             torch.cat([shard.piece.detach().reshape(-1) for shard in shards]))
    counts = [sum(shard.counts[rank] * _row_elements(shard) for shard in shards)
              for rank in range(ctx.size)]
    gathered = _as_tensor(allgather(tensor_view(local), counts=counts, ctx=ctx), local)
    offset = 0
    with torch.no_grad():
        for rank in range(ctx.size):
            for shard in shards:
                start = sum(shard.counts[:rank])
                rows = shard.as_rows(shard.parameter.data)[start:start + shard.counts[rank]]
                n = rows.numel()
                rows.copy_(gathered[offset:offset + n].view_as(rows))
                offset += n


def add_to_piece_grad(shard, reduced):
    """Add ``reduced``, this rank's rows of a parameter's averaged gradient, to the
    ``.grad`` of the shard's local piece (set it when there is none yet)."""
    reduced = reduced.reshape(shard.piece.shape)
    if shard.piece.grad is None:
        shard.piece.grad = reduced
    else:
        shard.piece.grad += reduced
