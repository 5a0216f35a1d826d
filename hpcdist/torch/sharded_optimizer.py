"""``ShardedOptimizer``: any torch optimizer, its state (and the gradients) sharded over ranks.

Each rank steps only its block of rows of every parameter (the user's
optimizer is re-pointed at tensors that share the rows' memory), so it holds
the optimizer state of those rows only; the updated rows are then
allgathered into every rank's parameters. As soon as the backward pass has
produced a bucket of gradients, hooks start its reduction on the
communication thread, overlapped with the rest of the backward pass: stage 1
averages the whole gradients (allreduce), stage 2 reduce-scatters them to the
rows' owners and keeps only this rank's rows. Each bucket is one collective,
and so is each bucket's allgather of the updated rows.
"""

import contextlib

import torch

from ..comm import allreduce, broadcast, resolve_context
from ..comm.background import CommunicationThread
from ..comm.tensors import tensor_view
from .sharded_rows import (
    TorchRowShard,
    add_to_piece_grad,
    check_stage,
    check_torch_optimizer,
    gather_rows_coalesced,
    reduce_rows_coalesced,
    verify_same_everywhere,
)

__all__ = ["ShardedOptimizer"]

_OWNER = "ShardedOptimizer"
_MEBIBYTE = 1024 * 1024


class ShardedOptimizer:
    """Shard a torch optimizer's state (stage 1) and the gradients (stage 2) over the ranks.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
        Built on the model's parameters; it is re-pointed at this rank's rows
        and keeps its class, hyperparameters and groups (learning-rate
        schedulers built on it work unchanged).
    named_parameters : iterable of (str, torch.nn.Parameter)
        ``model.named_parameters()``; every rank passes the same (checked).
        Rank 0's values are copied to every rank.
    stage : {1, 2}, default=2
    bucket_size_mb : float, default=25.0
        Stage 2: gradients are reduced in buckets of about this size.
    ctx : Context, optional

    Examples
    --------
    >>> opt = hpcdist.torch.ShardedOptimizer(torch.optim.Adam(model.parameters()),
    ...                                      model.named_parameters())   # doctest: +SKIP
    >>> loss_fn(model(x), y).backward(); opt.step(); opt.zero_grad()      # doctest: +SKIP
    """

    def __init__(self, optimizer, named_parameters, *, stage=2, bucket_size_mb=25.0, ctx=None):
        stage = check_stage(_OWNER, stage, (1, 2))
        named = [(name, p) for name, p in named_parameters if p.requires_grad]
        check_torch_optimizer(_OWNER, optimizer, named)
        self.optimizer = optimizer
        self.stage = stage
        self.ctx = ctx = resolve_context(ctx)
        verify_same_everywhere(_OWNER, ctx, named, {"stage": stage,
                                                    "bucket_size_mb": float(bucket_size_mb)},
                               optimizer)
        if ctx.size > 1:
            with torch.no_grad():
                for _, p in named:
                    broadcast(tensor_view(p.data), root=0, ctx=ctx, shape_known=True)
        self.shards = [TorchRowShard(name, p, ctx.size, ctx.rank) for name, p in named]
        self._pieces = {}
        for shard in self.shards:  # a leaf tensor sharing the rows' memory
            shard.piece = torch.nn.Parameter(shard.rows_of(shard.parameter.data))
            self._pieces[id(shard.parameter)] = shard
        _repoint(optimizer, self._pieces)
        self._sync = True
        self._pending = []
        self._thread = (ctx.communication_thread()
                        if CommunicationThread.available() and ctx.size > 1 else None)
        self._buckets = _buckets(self.shards, bucket_size_mb * _MEBIBYTE)
        self._bucket_of = {id(s.parameter): i for i, b in enumerate(self._buckets) for s in b}
        self._ready = [set() for _ in self._buckets]
        self._next = 0
        for shard in self.shards:
            shard.parameter.register_post_accumulate_grad_hook(self._on_grad_ready)

    # -- torch.optim.Optimizer's surface ----------------------------------------------------
    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def zero_grad(self, set_to_none=True):
        """Zero (or drop) the whole gradients and this rank's rows of them."""
        for shard in self.shards:
            shard.parameter.grad = None if set_to_none or self.stage == 2 else \
                (shard.parameter.grad.zero_() if shard.parameter.grad is not None else None)
            shard.piece.grad = None if set_to_none or shard.piece.grad is None \
                else shard.piece.grad.zero_()

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes in the block only accumulate local gradients; the first
        synchronised one after it averages everything accumulated."""
        previous, self._sync = self._sync, False
        try:
            yield self
        finally:
            self._sync = previous

    def step(self, closure=None):
        """Average the gradients into this rank's rows, step them, allgather the rows."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.synchronize()
        self.optimizer.step()
        if self.ctx.size > 1:  # else the pieces are the whole parameters
            for bucket in self._buckets:  # a bucket's size at most is held twice for a moment
                gather_rows_coalesced(bucket, self.ctx, pieces_are_views=True)
        return loss

    def synchronize(self):
        """Finish the gradient averaging (step() calls it)."""
        if self._next or any(self._ready):  # a backward pass left buckets incomplete
            while self._next < len(self._buckets):
                self._launch(self._buckets[self._next])
                self._next += 1
            self._end_backward()
        whole = {}
        for shards, results in self._pending:
            if not isinstance(results, list):
                results = results.result()
            for shard, reduced in zip(shards, results):
                if self.stage == 1:  # the average of the whole gradient
                    key = id(shard)
                    whole[key] = reduced if key not in whole else whole[key] + reduced
                    continue
                add_to_piece_grad(shard, reduced)
        self._pending = []
        if self.stage == 1:
            for shard in self.shards:
                if id(shard) in whole:
                    shard.parameter.grad = whole[id(shard)]
                if shard.parameter.grad is not None:
                    shard.piece.grad = shard.rows_of(shard.parameter.grad)

    # -- reductions during the backward pass ------------------------------------------------
    def _on_grad_ready(self, parameter):
        if not self._sync:
            return
        index = self._bucket_of[id(parameter)]
        self._ready[index].add(id(parameter))
        while self._next < len(self._buckets) and \
                len(self._ready[self._next]) == len(self._buckets[self._next]):
            self._launch(self._buckets[self._next])
            self._next += 1
        if self._next == len(self._buckets):
            self._end_backward()

    def _end_backward(self):
        self._next = 0
        for ready in self._ready:
            ready.clear()

    def _launch(self, shards):
        grads = [s.parameter.grad if s.parameter.grad is not None
                 else torch.zeros_like(s.parameter) for s in shards]
        for shard in shards:  # the next backward pass starts a new gradient
            shard.parameter.grad = None
        reduce = _allreduce_all if self.stage == 1 else _reduce_all
        if self._thread is None:
            self._pending.append((shards, reduce(shards, grads, self.ctx)))
        else:
            self._pending.append((shards, self._thread.submit(reduce, shards, grads,
                                                              self._thread.ctx)))

    def memory_stats(self):
        """Bytes this rank holds: ``"parameters"``, ``"gradients"``, ``"optimizer_state"``."""
        def nbytes(t):
            return 0 if t is None else t.numel() * t.element_size()
        parameters = sum(nbytes(s.parameter.data) for s in self.shards)
        gradients = sum(nbytes(s.parameter.grad) for s in self.shards)
        if self.stage == 2:
            gradients += sum(nbytes(s.piece.grad) for s in self.shards)
        state = sum(nbytes(v) for entry in self.optimizer.state.values()
                    for v in entry.values() if torch.is_tensor(v) and v.dim() > 0)
        return {"parameters": parameters, "gradients": gradients, "optimizer_state": state}

    def __repr__(self):
        return f"ShardedOptimizer(stage={self.stage}, {self.optimizer!r})"


def _reduce_all(shards, grads, ctx):
    """Stage 2: this rank's rows of each average (one reduce-scatter per bucket)."""
    return reduce_rows_coalesced(shards, grads, ctx)


def _allreduce_all(shards, grads, ctx):
    """Stage 1: the whole gradients averaged, in one flat allreduce per bucket."""
    if ctx.size == 1:
        return grads
    flat = torch.cat([grad.reshape(-1) for grad in grads])
    view = tensor_view(flat)
    allreduce(view, op="mean", out=view, ctx=ctx)
    averaged, offset = [], 0
    for grad in grads:
        averaged.append(flat[offset:offset + grad.numel()].view(grad.shape))
        offset += grad.numel()
    return averaged


def _buckets(shards, bucket_bytes):
    """Reverse registration order, about backward order; one dtype per bucket."""
    groups, current, size = [], [], 0
    for shard in reversed(shards):
        p = shard.parameter
        nbytes = p.numel() * p.element_size()
        if current and (p.dtype != current[0].parameter.dtype or size + nbytes > bucket_bytes):
            groups.append(current)
            current, size = [], 0
        current.append(shard)
        size += nbytes
    if current:
        groups.append(current)
    return groups


def _repoint(optimizer, pieces):
    """The optimizer steps the pieces in place of the whole parameters (state cut to rows)."""
    state = {}
    for group in optimizer.param_groups:
        new = []
        for p in group["params"]:
            shard = pieces[id(p)]
            new.append(shard.piece)
            if p in optimizer.state:
                state[shard.piece] = {
                    key: (shard.rows_of(value).clone() if torch.is_tensor(value)
                          and tuple(value.shape) == shard.shape and value.dim() > 0 else value)
                    for key, value in optimizer.state[p].items()}
        group["params"] = new
    optimizer.state.clear()
    optimizer.state.update(state)
