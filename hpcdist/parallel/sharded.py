"""ShardedDataParallel: data parallelism whose model state is split over the ranks.

Plain data parallelism keeps everything on every rank: with Adam in float32,
16 bytes per parameter (values, gradient, two moments). Sharding (the ZeRO
stages) splits that state over the ``N`` ranks, each rank owning a balanced
block of rows of every parameter (see :mod:`hpcdist.parallel.sharded_rows`):

stage 1
    The optimizer state: each rank steps only its rows, with the user's
    optimizer re-pointed at them, and the updated rows are allgathered into
    the whole parameters. Gradients are averaged as
    :class:`DistributedDataParallel` averages them (it does that part).
stage 2
    Also the gradients: during the backward pass each bucket of gradients is
    reduce-scattered to the rows' owners as soon as it is complete (on the
    communication thread, overlapped with the rest of the backward pass) and
    the whole-parameter gradients are freed.
stage 3
    Also the parameters: a layer's parameters are allgathered just before its
    forward and again before its backward pass (the next layer's are fetched
    while the current one computes) and released right after.

Every stage trains as DDP does with the same optimizer (the same averaged
gradient, the same elementwise update, on each row once).
"""

import numbers
import time
from contextlib import contextmanager

from ..comm import allgather, broadcast, reduce_scatter, resolve_context
from ..comm.agreement import agree_config, described_layouts
from ..comm.background import CommunicationThread
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ..nn.amp import MixedPrecision
from ..nn.module import Module, array_module
from ..nn.optim import Optimizer
from ._checks import checked_bucket_size
from .buckets import bucket_groups
from .ddp import DistributedDataParallel, sync_buffers
from .replica import _check_optimizer_owns
from .sharded_amp import check_mixed_precision, mixed_precision_settings, shard_mixed_precision
from .sharded_layers import LayerGathering
from .sharded_rows import (
    RowShard,
    bytes_held,
    gather_rows_coalesced,
    reduce_rows_coalesced,
    released,
)
from .sharded_state import full_module_state, load_sharded_state, sharded_state

__all__ = ["ShardedDataParallel"]

_MEBIBYTE = 1024 * 1024
_OWNER = "ShardedDataParallel"


class ShardedDataParallel(Module):
    """Data parallelism with the optimizer state, gradients and parameters sharded.

    Parameters
    ----------
    module : hpcdist.nn.Module
        The model; every rank must build the same one (checked). Rank 0's
        parameters and buffers are copied to every rank.
    optimizer : hpcdist.nn.optim.Optimizer or hpcdist.nn.amp.MixedPrecision
        Built on ``module.parameters()`` (SGD, Adam, AdamW, ...; checked).
        It is re-pointed at this rank's rows of each parameter and keeps its
        class, hyperparameters and parameter groups, so learning-rate
        schedules built on it work unchanged; step it through :meth:`step`.
        A :class:`~hpcdist.nn.amp.MixedPrecision` built on ``module`` trains
        it in 16 bits: each rank keeps float32 masters (and optimizer state)
        of its own rows only, the 16-bit weights are what is gathered and
        their 16-bit gradients what is averaged, and every rank skips the
        steps whose gradients overflowed on any rank.
    stage : {1, 2, 3}, default=2
        What is sharded besides the optimizer state: nothing (1), the
        gradients (2), the gradients and the parameters (3).
    bucket_size_mb : float, default=25.0
        Gradients travel in buckets of about this many MiB, started as soon as
        a bucket's gradients are all computed (stages 1 and 2; stage 3
        reduces each layer's gradients as the layer's backward finishes).
    ctx : Context, optional
        Defaults to the default context.

    Attributes
    ----------
    module : Module
    optimizer : Optimizer
        The optimizer (with mixed precision, the one stepping the masters).
    mixed_precision : MixedPrecision or None
    stage : int
    shards : list of RowShard
        This rank's rows of each trainable parameter, in registration order.
    exposed_communication_seconds : float
        Time the last :meth:`backward` waited for gradients after its
        computation had finished.

    Raises
    ------
    ConfigMismatchError
        On every rank, when the model (parameter and buffer names, shapes,
        dtypes), the stage, the bucket size or the optimizer differ between
        ranks.
    ValueError
        For a stage other than 1, 2, 3, an optimizer that does not hold
        exactly the module's trainable parameters, a negative bucket size.
    TypeError
        For a module or optimizer of the wrong type.

    Examples
    --------
    >>> model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))  # doctest: +SKIP
    >>> sdp = hpcdist.parallel.ShardedDataParallel(model, nn.optim.Adam(model.parameters()),
    ...                                            stage=3)                        # doctest: +SKIP
    >>> loss = criterion(sdp(x_local), y_local)                                    # doctest: +SKIP
    >>> sdp.backward(criterion.backward()); sdp.step(); sdp.zero_grad()            # doctest: +SKIP
    """

    def __init__(self, module, optimizer, *, stage=2, bucket_size_mb=25.0, ctx=None):
        super().__init__()
        if not isinstance(module, Module) or isinstance(module, (DistributedDataParallel,
                                                                 ShardedDataParallel)):
            raise InvalidArgumentTypeError(
                f"{_OWNER}: module is a {type(module).__name__}, not an hpcdist.nn.Module; pass "
                "the model itself (not wrapped in a data-parallel wrapper)")
        amp = optimizer if isinstance(optimizer, MixedPrecision) else None
        if amp is not None:
            optimizer = amp.optimizer
        if not isinstance(optimizer, Optimizer):
            raise InvalidArgumentTypeError(
                f"{_OWNER}: optimizer is a {type(optimizer).__name__}, not an hpcdist.nn.optim "
                "optimizer or MixedPrecision; build one on module.parameters() (for torch "
                "models use hpcdist.torch.ShardedOptimizer or FullyShardedModule)")
        if isinstance(stage, bool) or not isinstance(stage, numbers.Integral):
            raise InvalidArgumentTypeError(
                f"{_OWNER}: stage={stage!r} should be the integer 1 (shard the optimizer state), "
                "2 (and the gradients) or 3 (and the parameters)")
        if stage not in (1, 2, 3):
            raise InvalidArgumentError(
                f"{_OWNER}: stage={stage!r} should be 1 (shard the optimizer state), 2 (and the "
                "gradients) or 3 (and the parameters)")
        bucket_size_mb = checked_bucket_size(_OWNER, bucket_size_mb)
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise InvalidArgumentError(f"{_OWNER}: the module has no trainable parameters")
        self.ctx = resolve_context(ctx)
        if amp is None:
            _check_optimizer_owns(_OWNER, optimizer, module, named)
        else:
            check_mixed_precision(amp, module, named, self.ctx)
        self.module = module
        self.optimizer = optimizer
        self.mixed_precision = amp
        self.stage = int(stage)
        self.bucket_size_mb = bucket_size_mb
        self.exposed_communication_seconds = 0.0
        settings = {"stage": self.stage, "bucket_size_mb": bucket_size_mb}
        settings.update({} if amp is None else mixed_precision_settings(amp))
        _verify(self.ctx, named, module, optimizer, settings)
        self._ddp = None
        if self.stage == 1:  # DDP averages the gradients; it also copies rank 0's state
            self._ddp = DistributedDataParallel(module, bucket_size_mb=bucket_size_mb,
                                                ctx=self.ctx)
        elif self.ctx.size > 1:
            for _, parameter in named:
                broadcast(parameter.data, root=0, ctx=self.ctx, shape_known=True)
            sync_buffers(module, self.ctx)
        size, rank = self.ctx.size, self.ctx.rank
        self.shards = [RowShard(name, p, size, rank) for name, p in named]
        self._shard_of = {id(s.parameter): s for s in self.shards}
        # the updated rows travel bucket by bucket too: a bucket's whole size at most is
        # held twice for a moment (one collective for all would hold a copy of the model)
        self._gather_groups = [[self._shard_of[id(p)] for _, p in entries] for entries
                               in bucket_groups(named, bucket_size_mb * _MEBIBYTE)]
        if amp is None:
            _repoint_optimizer(optimizer, self._shard_of)
        else:
            shard_mixed_precision(amp, self.shards, self.ctx, _repoint_optimizer, self)
        progress = CommunicationThread.available() and size > 1
        self._thread = self.ctx.communication_thread() if progress else None
        self._sync_enabled = True
        self._pending = []       # (shards, future or results) of reductions in flight
        self._layers = None
        if self.stage == 1:
            return
        if self.stage == 2:
            buckets = bucket_groups(named, bucket_size_mb * _MEBIBYTE)
            self._buckets = [[self._shard_of[id(p)] for _, p in entries] for entries in buckets]
            self._bucket_of = {id(shard.parameter): index
                               for index, bucket in enumerate(self._buckets) for shard in bucket}
            self._ready = [set() for _ in self._buckets]
            self._next_launch = 0
            for shard in self.shards:
                shard.parameter.register_grad_hook(self._on_grad_ready)
        else:
            for shard in self.shards:  # the piece becomes this rank's own copy of its rows
                shard.piece.data = shard.piece.data.copy()
                shard.parameter.data = released(shard.shape, shard.dtype,
                                                array_module(shard.piece.data))
            self._layers = LayerGathering(module, self._shard_of, self)

    # -- computation ---------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        """Run the wrapped module (after syncing buffers from rank 0 in training mode)."""
        self._check_shapes()
        if self._ddp is not None:
            return self._ddp.forward(*args, **kwargs)
        self._finish_reductions()
        if self.module.training and self.ctx.size > 1:
            sync_buffers(self.module, self.ctx)
        if self._layers is None:
            return self.module.forward(*args, **kwargs)
        self._layers.start_forward()
        try:
            return self.module.forward(*args, **kwargs)
        finally:
            self._layers.end_forward()

    def backward(self, grad_output):
        """Backward through the module; on return this rank's rows of every gradient hold
        the average over ranks (stage 1: the whole gradients do, as under DDP).

        Inside :meth:`no_sync`, gradients only accumulate locally.
        """
        if self._ddp is not None:
            grad_input = self._ddp.backward(grad_output)
            if self._ddp._sync_enabled:
                self._bind_whole_gradients()
            return grad_input
        grad_input = self.module.backward(grad_output)
        if self._sync_enabled:
            start = time.perf_counter()
            self._launch_remaining()
            self._finish_reductions()
            self.exposed_communication_seconds = time.perf_counter() - start
        return grad_input

    @contextmanager
    def no_sync(self):
        """Accumulate gradients locally (whole, on every rank); the first backward after
        the block reduces everything accumulated (like one large batch)."""
        if self._ddp is not None:
            with self._ddp.no_sync():
                yield self
            return
        previous, self._sync_enabled = self._sync_enabled, False
        try:
            yield self
        finally:
            self._sync_enabled = previous

    def step(self):
        """Step this rank's rows with the optimizer, then (stages 1 and 2) allgather the
        updated rows into every rank's whole parameters.

        With mixed precision, this rank's float32 masters are stepped from its
        unscaled rows of the gradient and rounded into its 16-bit rows, unless
        a gradient overflowed on some rank: then no rank steps and the loss
        scale backs off (``mixed_precision.step()`` does the same).

        Returns
        -------
        bool
            False when mixed precision skipped the step, else True.
        """
        self._finish_reductions()
        if self.stage == 1:
            self._bind_whole_gradients()
        if self._layers is not None:
            self._layers.discard_prefetched()
        if self.mixed_precision is None:
            self.optimizer.step()
            stepped = True
        else:
            stepped = self.mixed_precision._step_masters()
        if self.stage < 3 and stepped:
            self._allgather_parameters()
        return stepped

    @property
    def param_groups(self):
        """The optimizer's parameter groups (this rank's rows, with their gradients after
        backward), so that ``nn.amp.DynamicLossScaler.step(sdp)`` unscales and checks the
        float32 gradient shards and steps through :meth:`step`."""
        return self.optimizer.param_groups

    def _bind_whole_gradients(self):
        """Stage 1: each piece's gradient is its rows of the averaged whole gradient."""
        for shard in self.shards:
            grad = shard.parameter.grad
            shard.piece.grad = None if grad is None else shard.rows_of(grad)

    def zero_grad(self, set_to_none=False):
        """Zero (or drop) the gradients: the whole ones and this rank's rows."""
        for shard in self.shards:
            shard.parameter.zero_grad(set_to_none or self.stage > 1)
            shard.piece.zero_grad(set_to_none)
        if self.mixed_precision is not None:
            self.mixed_precision._found_inf = None

    # -- gradient reduction (stages 2 and 3) -----------------------------------------------
    def _on_grad_ready(self, parameter):
        if not self._sync_enabled:
            return
        index = self._bucket_of[id(parameter)]
        self._ready[index].add(id(parameter))
        buckets = self._buckets
        while (self._next_launch < len(buckets)
               and len(self._ready[self._next_launch]) == len(buckets[self._next_launch])):
            self.reduce_gradients(buckets[self._next_launch])
            self._next_launch += 1

    def _launch_remaining(self):
        if self.stage == 3:
            self._layers.reduce_remaining()
            return
        while self._next_launch < len(self._buckets):
            self.reduce_gradients(self._buckets[self._next_launch])
            self._next_launch += 1
        self._next_launch = 0
        for ready in self._ready:
            ready.clear()

    def reduce_gradients(self, shards):
        """Start averaging the whole gradients of ``shards`` into their owners' rows
        (parameters without a gradient count as zeros). The parameters let go of their
        whole gradients now; the memory is freed once the reduction is done."""
        grads = []
        for shard in shards:
            grad = shard.parameter.grad
            if grad is None:
                grad = array_module(shard.piece.data).zeros(shard.shape, shard.dtype)
            grads.append(shard.as_rows(grad))
            shard.parameter.grad = None  # the next backward starts anew; freed once reduced
        if self._thread is None:
            self._pending.append((shards, _reduce_all(grads, shards, self.ctx)))
        else:
            self._pending.append((shards, self._thread.submit(_reduce_all, grads, shards,
                                                              self._thread.ctx)))

    def _finish_reductions(self):
        for shards, results in self._pending:
            if not isinstance(results, list):
                results = results.result()
            for shard, reduced in zip(shards, results):
                shard.accumulate_piece_grad(reduced)
        self._pending = []

    def _allgather_parameters(self):
        """Every rank's updated rows into the whole parameters: one allgather per bucket."""
        if self.ctx.size == 1:
            return
        for group in self._gather_groups:
            gather_rows_coalesced(group, self.ctx, allgather)

    def _check_shapes(self):
        for shard in self.shards:
            if tuple(shard.parameter.shape) != shard.shape:
                raise InvalidArgumentError(
                    f"{_OWNER}: parameter {shard.name!r} has shape "
                    f"{tuple(shard.parameter.shape)}, but {shard.shape} when it was wrapped; "
                    "change a model's shapes before wrapping it (then wrap it again)")

    # -- state ---------------------------------------------------------------------------
    def state_dict(self):
        """The model and optimizer state, each rank's rows as ``Sharded`` entries.

        Returns
        -------
        dict
            ``{"module": {name: Sharded or array}, "optimizer": {"state": ...,
            "param_groups": ...}}``: save it with
            :class:`hpcdist.checkpoint.CheckpointManager`; what its ``restore``
            returns at any number of ranks loads with :meth:`load_state_dict`, and
            at one rank ``state["module"]`` and ``state["optimizer"]`` load into
            the plain module and optimizer.
        """
        self._finish_reductions()
        return sharded_state(self)

    def load_state_dict(self, state, strict=True):
        """Load what :meth:`state_dict` saved (restored at any number of ranks), or a
        plain module's ``{"module": module.state_dict(), "optimizer": ...}``."""
        self._finish_reductions()
        load_sharded_state(self, state, strict)
        if self.stage < 3:
            self._allgather_parameters()
        return self

    def full_state_dict(self):
        """The plain module's ``state_dict`` (whole parameters and buffers), on every rank."""
        self._finish_reductions()
        return full_module_state(self)

    def memory_stats(self):
        """Bytes this rank holds for the model's training state.

        Returns
        -------
        dict
            ``"parameters"`` (parameter values, frozen ones and buffers included),
            ``"gradients"`` and ``"optimizer_state"`` (the optimizer's arrays).
            With mixed precision, the parameters and gradients are the 16-bit
            ones, the float32 master rows count as optimizer state (as the
            ZeRO paper counts them) and the float32 rows of the unscaled
            gradient as gradients.
        """
        gathered = set() if self._layers is None else self._layers.gathered_ids()
        parameters = sum(bytes_held(p.data) for p in self.module.parameters()
                         if id(p) not in self._shard_of or self.stage < 3 or id(p) in gathered)
        if self.stage == 3:
            parameters += sum(bytes_held(s.piece.data) for s in self.shards)
        parameters += sum(bytes_held(b) for b in self.module.buffers() if hasattr(b, "nbytes"))
        gradients = sum(bytes_held(p._grad) for p in self.module.parameters())
        if self.stage > 1:
            gradients += sum(bytes_held(s.piece._grad) for s in self.shards)
        state = sum(bytes_held(value) for entry in self.optimizer.state.values()
                    for value in entry.values() if hasattr(value, "nbytes"))
        amp = self.mixed_precision
        if amp is not None:
            gradients += sum(bytes_held(buffer) for buffer in amp._grad_buffers)
            state += sum(bytes_held(master.data) for master in amp.master_params)
        return {"parameters": parameters, "gradients": gradients, "optimizer_state": state}

    def extra_repr(self):
        return f"stage={self.stage}, ranks={self.ctx.size}"


def _reduce_all(grads, shards, ctx):
    """Reduce-scatter a bucket's gradients (one dtype) to their rows' owners, averaged, in
    one collective."""
    return reduce_rows_coalesced(shards, grads, ctx, reduce_scatter)


def _repoint_optimizer(optimizer, shard_of, piece_of=lambda shard: shard.piece):
    """Make ``optimizer`` step this rank's pieces in place of the whole parameters (in the
    same groups; existing state cut to the piece's rows). ``shard_of`` maps the id of each
    parameter the optimizer holds to its shard, ``piece_of`` gives the shard's piece."""
    state = {}
    for group in optimizer.param_groups:
        params = []
        for p in group["params"]:
            shard = shard_of.get(id(p))
            if shard is None:  # a frozen parameter stays as it is
                params.append(p)
                if p in optimizer.state:
                    state[p] = optimizer.state[p]
                continue
            piece = piece_of(shard)
            params.append(piece)
            if p in optimizer.state:
                state[piece] = {
                    key: (shard.rows_of(value).copy()
                          if hasattr(value, "shape") and tuple(value.shape) == shard.shape
                          else value)
                    for key, value in optimizer.state[p].items()}
        group["params"] = params
    optimizer.state = state


def _verify(ctx, named, module, optimizer, settings):
    """Raise ``ConfigMismatchError`` on every rank unless all ranks have the same model,
    settings and optimizer (class, hyperparameters, group sizes)."""
    values = described_layouts([(f"parameter {name}", p.data) for name, p in named]
                               + [(f"buffer {name}", b) for name, b in module.named_buffers()])
    values.update(settings)
    values["optimizer"] = type(optimizer).__name__
    for index, group in enumerate(optimizer.param_groups):
        values[f"optimizer group {index}"] = repr(sorted(
            (key, value) for key, value in group.items() if key != "params"))
        values[f"optimizer group {index} parameters"] = len(group["params"])
    agree_config(ctx, _OWNER, values,
                 fix="every rank must build the same model and optimizer and wrap them with "
                     "the same stage and bucket_size_mb")
