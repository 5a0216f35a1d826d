"""``FullyShardedModule``: a torch module whose parameters are sharded over the ranks (stage 3).

Each rank keeps its block of rows of every parameter as a leaf tensor of its
own (what :meth:`FullyShardedModule.parameters` lists, and what the optimizer
is built on). Hooks on every sub-module that owns parameters (a *unit*)
allgather its whole parameters, all of them in one collective, straight into
their memory, just before its forward pass and release them right after; a
hook on the sub-module's outputs gathers them again when the backward pass
reaches it. Once a parameter's gradient is complete the whole parameter is
released, and once all of a unit's gradients are, they are reduce-scattered
(averaged) in one collective into the gradients of this rank's rows, on the
communication thread while the backward pass goes on; the backward pass
returns when all of them are done. ``torch.utils.checkpoint`` works inside: its
recomputation runs the same forward hooks.
"""

import torch

from ..comm import broadcast, resolve_context
from ..comm.background import CommunicationThread
from ..comm.tensors import tensor_view
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError, StateDictKeyError
from .sharded_rows import (
    TorchRowShard,
    add_to_piece_grad,
    gather_rows,
    gather_rows_coalesced,
    reduce_rows_coalesced,
    verify_same_everywhere,
)

__all__ = ["FullyShardedModule"]

_OWNER = "FullyShardedModule"


class FullyShardedModule(torch.nn.Module):
    """Shard ``module``'s parameters, gradients and (through its optimizer) optimizer state.

    Parameters
    ----------
    module : torch.nn.Module
        Every rank builds the same one (checked); rank 0's values are copied.
    ctx : Context, optional

    Notes
    -----
    Build the optimizer on ``fsm.parameters()`` (this rank's rows): it then
    holds the state of those rows only. ``fsm.state_dict()`` is the whole
    module's, on every rank; ``fsm.load_state_dict`` takes one.

    Examples
    --------
    >>> fsm = hpcdist.torch.FullyShardedModule(model)                     # doctest: +SKIP
    >>> opt = torch.optim.Adam(fsm.parameters(), lr=1e-3)                 # doctest: +SKIP
    >>> loss_fn(fsm(x), y).backward(); opt.step(); opt.zero_grad()        # doctest: +SKIP
    """

    def __init__(self, module, *, ctx=None):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise InvalidArgumentTypeError(f"{_OWNER}: module is a {type(module).__name__}, not "
                                           "a torch.nn.Module")
        ctx = resolve_context(ctx)
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        verify_same_everywhere(_OWNER, ctx, named + [(f"buffer {name}", b)
                                                     for name, b in module.named_buffers()], {})
        with torch.no_grad():
            if ctx.size > 1:
                for tensor in [p for _, p in named] + list(module.buffers()):
                    broadcast(tensor_view(tensor.data), root=0, ctx=ctx, shape_known=True)
        object.__setattr__(self, "_ctx", ctx)
        self.module = module
        shards = [TorchRowShard(name, p, ctx.size, ctx.rank) for name, p in named]
        self._shards = shards
        self.shards = torch.nn.ParameterList()
        for shard in shards:
            data = shard.parameter.data
            shard.piece = torch.nn.Parameter(shard.rows_of(data).clone())
            shard.nbytes = data.numel() * data.element_size()
            # a storage of its own, resizable (a NumPy view of the old one pins its size)
            shard.parameter.data = data.clone(memory_format=torch.contiguous_format)
            self.shards.append(shard.piece)
            _release(shard)
        by_id = {id(s.parameter): s for s in shards}
        self._reductions = _GradientReductions(ctx)
        for sub in module.modules():
            unit = [by_id[id(p)] for p in sub.parameters(recurse=False) if id(p) in by_id]
            if unit:
                sub.register_forward_pre_hook(_Gather(unit, ctx))
                sub.register_forward_hook(_AfterForward(unit, ctx))
                self._reductions.add_unit(unit)
        for shard in shards:
            shard.parameter.register_post_accumulate_grad_hook(self._reductions.hook(shard))

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """This rank's rows of each trainable parameter (build the optimizer on them)."""
        for index, shard in enumerate(self._shards):
            yield f"{prefix}{'.' if prefix else ''}shards.{index}", shard.piece

    def state_dict(self, *args, **kwargs):
        """The whole module's state dict (unsharded names and shapes), on every rank."""
        with torch.no_grad():
            wholes = {id(s.parameter): gather_rows(s, s.piece.data, self._ctx)
                      for s in self._shards}
        state = self.module.state_dict()
        for name, p in self.module.named_parameters():
            if id(p) in wholes:
                state[name] = wholes[id(p)]
        return state

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Load a whole module's state dict (as :meth:`state_dict` or the plain module give)."""
        targets = {name: p for name, p in self.module.named_parameters()}
        by_id = {id(s.parameter): s for s in self._shards}
        rest = {}
        with torch.no_grad():
            for name, value in state_dict.items():
                shard = by_id.get(id(targets.get(name)))
                if shard is None:
                    rest[name] = value
                    continue
                if tuple(value.shape) != shard.shape:
                    raise InvalidArgumentError(f"{_OWNER}.load_state_dict: {name!r} has shape "
                                               f"{tuple(value.shape)}, the module {shard.shape}")
                shard.piece.data.copy_(shard.rows_of(value))
        missing = [n for n in targets if n not in state_dict and id(targets[n]) in by_id]
        result = self.module.load_state_dict(rest, strict=False)
        if strict and (missing or result.unexpected_keys):
            raise StateDictKeyError(f"{_OWNER}.load_state_dict: missing keys {missing}, "
                                    f"unexpected keys {result.unexpected_keys}")
        return result

    def memory_stats(self):
        """Bytes this rank holds: ``"parameters"``, ``"gradients"``, ``"optimizer_state"`` (the
        last is 0 here: the optimizer is the caller's)."""
        def nbytes(t):
            return 0 if t is None else t.numel() * t.element_size()
        parameters = sum(nbytes(s.piece.data) for s in self._shards)
        parameters += sum(s.nbytes for s in self._shards if s.gathered)
        gradients = sum(nbytes(s.piece.grad) + nbytes(s.parameter.grad) for s in self._shards)
        return {"parameters": parameters, "gradients": gradients, "optimizer_state": 0}


def _release(shard):
    """Free the whole parameter's memory. The tensor keeps its shape and its storage object
    (whose size drops to 0), so what autograd saved of it in the forward pass sees the values
    again once :func:`_gather` refills the storage."""
    shard.parameter.data.untyped_storage().resize_(0)
    shard.gathered = False


def _gather(unit, ctx):
    """Refill the released parameters of ``unit`` with every rank's rows, in one allgather
    per dtype (autograd's version counter stays as it was)."""
    for shards in _by_dtype([shard for shard in unit if not shard.gathered]):
        for shard in shards:
            shard.parameter.data.untyped_storage().resize_(shard.nbytes)
        gather_rows_coalesced(shards, ctx, pieces_are_views=False)
        for shard in shards:
            shard.gathered = True


def _by_dtype(shards):
    """``shards`` in groups of one dtype (in their order), as one collective needs."""
    groups = {}
    for shard in shards:
        groups.setdefault(shard.parameter.dtype, []).append(shard)
    return list(groups.values())


def _in_backward():
    """Whether the autograd engine is running (a checkpointed forward being recomputed)."""
    return torch._C._current_graph_task_id() != -1


class _Gather:
    """Forward pre-hook: the unit's whole parameters."""

    def __init__(self, unit, ctx):
        self.unit, self.ctx = unit, ctx

    def __call__(self, module, args):
        _gather(self.unit, self.ctx)


class _AfterForward:
    """Forward hook: release the parameters; gather them again when the gradient of the
    output arrives (the backward pass reaching this module)."""

    def __init__(self, unit, ctx):
        self.unit, self.ctx = unit, ctx

    def __call__(self, module, args, output):
        if torch.is_grad_enabled():
            for tensor in _tensors(output):
                if tensor.requires_grad:
                    tensor.register_hook(self._before_backward)
        if not _in_backward():  # a recomputation inside backward still needs them
            for shard in self.unit:
                _release(shard)

    def _before_backward(self, grad):
        _gather(self.unit, self.ctx)
        return grad


class _GradientReductions:
    """Gradients being averaged into the pieces' gradients: a unit's started once all its
    parameters' gradients are complete (on the communication thread when there is one),
    finished when the backward pass ends (a callback of the autograd engine)."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.thread = (ctx.communication_thread()
                       if CommunicationThread.available() and ctx.size > 1 else None)
        self.unit_of = {}     # id(shard) -> the unit whose collective reduces it
        self.ready = {}       # id(unit) -> {id(shard): gradient} of the backward pass
        self.pending = []     # (shards, reduced rows or their future)
        self.callback_queued = False

    def add_unit(self, unit):
        for shard in unit:
            self.unit_of.setdefault(id(shard), unit)  # a shared parameter: its first unit

    def hook(self, shard):
        return lambda parameter: self.start(shard, parameter)

    def start(self, shard, parameter):
        grad = parameter.grad
        parameter.grad = None
        _release(shard)
        unit = self.unit_of[id(shard)]
        ready = self.ready.setdefault(id(unit), {})
        ready[id(shard)] = grad
        if len(ready) == sum(self.unit_of[id(s)] is unit for s in unit):
            self._launch(unit)
        if not self.callback_queued:
            self.callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self.finish)

    def _launch(self, unit):
        """Reduce the unit's complete gradients (one collective per dtype)."""
        ready = self.ready.pop(id(unit))
        for shards in _by_dtype([s for s in unit if id(s) in ready]):
            grads = [ready[id(s)] for s in shards]
            if self.thread is None:
                self.pending.append((shards, reduce_rows_coalesced(shards, grads, self.ctx)))
            else:
                self.pending.append((shards, self.thread.submit(
                    reduce_rows_coalesced, shards, grads, self.thread.ctx)))

    def finish(self):
        for unit in [self.unit_of[next(iter(ready))] for ready in self.ready.values()]:
            self._launch(unit)  # units some of whose parameters had no gradient
        for shards, results in self.pending:
            if not isinstance(results, list):
                results = results.result()
            for shard, reduced in zip(shards, results):
                add_to_piece_grad(shard, reduced)
        self.pending = []
        self.callback_queued = False


def _tensors(output):
    if torch.is_tensor(output):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in _tensors(item)]
    if isinstance(output, dict):
        return [t for item in output.values() for t in _tensors(item)]
    return []
