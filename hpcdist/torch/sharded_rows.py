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
           "reduce_rows", "gather_rows"]


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
    reduced = reduce_scatter(tensor_view(grad), op="mean", counts=shard.counts, ctx=ctx)
    return torch.from_numpy(reduced) if not grad.is_cuda else torch.from_dlpack(reduced)


def gather_rows(shard, rows, ctx):
    """The whole parameter from every rank's ``rows`` (a new tensor of its shape)."""
    gathered = allgather(tensor_view(rows.detach().contiguous()), counts=shard.counts, ctx=ctx)
    tensor = torch.from_numpy(gathered) if not rows.is_cuda else torch.from_dlpack(gathered)
    return shard.whole(tensor)


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
