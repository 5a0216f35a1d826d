"""Pipeline parallelism: a model's layers split into stages, one stage per rank.

Rank ``r`` holds stage ``r % len(stages)`` of replica ``r // len(stages)``.
:meth:`Pipeline.train_step` splits each replica's share of the global batch
into micro-batches and runs them through the stages by a schedule
(:mod:`hpcdist.parallel.pipeline_schedules`): activations go forward and
gradients backward as point-to-point messages into recycled buffers of
shapes exchanged once (:mod:`hpcdist.parallel.pipeline_shapes`). With
several replicas, each stage's gradients are averaged over its replicas by
:class:`~hpcdist.parallel.DistributedDataParallel` on the stage's
sub-context, overlapped with the last micro-batch's backward.

Examples
--------
>>> stages = [nn.Sequential(nn.Linear(784, 256), nn.ReLU()),
...           nn.Sequential(nn.Linear(256, 10))]                    # doctest: +SKIP
>>> pipe = hpcdist.parallel.Pipeline(stages, micro_batches=8)        # doctest: +SKIP
>>> optimizer = nn.optim.SGD(pipe.parameters(), lr=0.1)              # doctest: +SKIP
>>> loss = pipe.train_step(x if pipe.is_first_stage else None,
...                        y if pipe.is_last_stage else None,
...                        nn.CrossEntropyLoss())                    # doctest: +SKIP
>>> optimizer.step()                                                 # doctest: +SKIP
"""

import time

import numpy as np

from .._arrays import array_module
from .._checks import check_int
from .._partition import balanced_counts
from ..comm import allreduce, irecv, isend, resolve_context
from ..comm.agreement import agree_config
from ..comm.checks import mark_raised_on_every_rank
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError, InvalidStateError
from ..nn.module import Module
from .ddp import DistributedDataParallel
from .pipeline_schedules import SCHEDULES, schedule_actions
from .pipeline_shapes import agree_batch, probe_shapes
from .pipeline_stash import BufferPool, capture, restore, stashed_bytes

__all__ = ["Pipeline"]

_FORWARD_TAG, _BACKWARD_TAG = 1, 2


class Pipeline:
    """Pipeline parallelism (GPipe or 1F1B) with optional data-parallel replicas.

    Parameters
    ----------
    stages : sequence of hpcdist.nn.Module
        The model split into consecutive stages, the same on every rank;
        every stage must have trainable parameters.
    micro_batches : int, default=4
        Micro-batches each replica's share of a batch is split into
        (balanced: sizes differ by at most one).
    schedule : {"1f1b", "gpipe"}, default="1f1b"
    data_parallel_size : int, optional
        Replicas of the pipeline; default ``size // len(stages)``. ``size``
        must equal ``len(stages) * data_parallel_size``.
    ctx : Context, optional

    Attributes
    ----------
    stage_index : int
    replica_index : int
    is_first_stage, is_last_stage : bool
    module : Module
        This rank's stage.

    Raises
    ------
    InvalidArgumentError
        On every rank: the stage count does not divide the ranks, a stage has
        no trainable parameters, a bad option. :meth:`train_step` raises on
        every rank, naming the stage, when a stage cannot take its
        predecessor's output (or the loss the last stage's) and when
        ``micro_batches`` exceeds a replica's share of the batch.

    Notes
    -----
    Every collective (option agreement, sub-contexts, replica set-up) runs
    in the first :meth:`train_step`, not here. Buffers such as BatchNorm's
    running statistics are not synchronised between replicas.

    Mixed precision: build :class:`~hpcdist.nn.amp.MixedPrecision` on
    ``pipe.module`` with ``ctx=pipe.stage_ctx`` (the stage's replicas start
    from the same weights) before the first step, let every rank skip the
    same steps with ``amp.scaler.ctx = pipe.ctx``, and pass
    ``loss_scale=amp.scale`` to :meth:`train_step`. Checkpoints: one
    :class:`~hpcdist.checkpoint.CheckpointManager` per stage on
    ``pipe.stage_ctx`` saving ``pipe.module.state_dict()``.
    """

    def __init__(self, stages, *, micro_batches=4, schedule="1f1b", data_parallel_size=None,
                 ctx=None):
        self.stages = _checked_stages(stages)
        self.micro_batches = check_int(micro_batches, "Pipeline: micro_batches", 1)
        if schedule not in SCHEDULES:
            raise InvalidArgumentError(f"Pipeline: schedule={schedule!r} should be one of "
                                       f"{', '.join(map(repr, SCHEDULES))}")
        self.schedule = schedule
        self.ctx = resolve_context(ctx)
        count, size = len(self.stages), self.ctx.size
        if size % count:
            raise InvalidArgumentError(
                f"Pipeline: {count} stages do not divide the {size} ranks; run on a multiple "
                f"of {count} ranks or split the model into a number of stages dividing {size}")
        if data_parallel_size is None:
            data_parallel_size = size // count
        self.data_parallel_size = check_int(data_parallel_size,
                                            "Pipeline: data_parallel_size", 1)
        if count * self.data_parallel_size != size:
            raise InvalidArgumentError(
                f"Pipeline: {count} stages x data_parallel_size={self.data_parallel_size} "
                f"need {count * self.data_parallel_size} ranks, not {size}; pass "
                f"data_parallel_size={size // count} or None")
        self.stage_index = self.ctx.rank % count
        self.replica_index = self.ctx.rank // count
        self.is_first_stage = self.stage_index == 0
        self.is_last_stage = self.stage_index == count - 1
        self.module = self.stages[self.stage_index]
        self._line = self._stage_ctx = self._ddp = None
        self._signature = None
        self.reset_stats()

    # -- public ------------------------------------------------------------------------
    def parameters(self):
        """This rank's stage's parameters (a list), for its optimizer."""
        return list(self.module.parameters())

    @property
    def stage_ctx(self):
        """The context of this stage's replicas (collective on first use): for checkpoints
        and for :class:`~hpcdist.nn.amp.MixedPrecision`."""
        self._setup()
        return self._stage_ctx

    def train_step(self, x, y, loss_fn, *, loss_scale=1.0):
        """One step over a global batch; returns its mean loss on every rank (collective).

        Parameters
        ----------
        x : ndarray of shape (n_samples, ...) or None
            The global batch on every first stage; None elsewhere.
        y : ndarray of shape (n_samples, ...) or None
            Its targets on every last stage; None elsewhere.
        loss_fn : hpcdist.nn loss with ``reduction="mean"``
        loss_scale : float, default=1.0
            Multiplies the gradients (not the returned loss): pass
            ``amp.scale`` of a :class:`~hpcdist.nn.amp.MixedPrecision`.

        Returns
        -------
        float
            The mean loss over the global batch.

        Notes
        -----
        The stage's gradients are zeroed first; on return they hold the
        gradient of the mean loss over the global batch.
        """
        if getattr(loss_fn, "reduction", "mean") != "mean":
            raise InvalidArgumentError(
                f"Pipeline.train_step: loss_fn has reduction={loss_fn.reduction!r}; use "
                "reduction='mean' (the pipeline weights the micro-batches itself)")
        if not (isinstance(loss_scale, (int, float, np.floating)) and 0 < loss_scale < np.inf):
            raise InvalidArgumentError(f"Pipeline.train_step: loss_scale={loss_scale!r} should "
                                       "be a positive finite number")
        self._setup()
        start = time.perf_counter()
        signature = agree_batch(self.ctx, x, y, self.is_first_stage, self.is_last_stage)
        if signature != self._signature:
            self._prepare(signature, x, y, loss_fn)
        first = self._offset
        x = x[first:first + self._share] if self.is_first_stage else None
        y = y[first:first + self._share] if self.is_last_stage else None
        self.module.zero_grad()
        partial = self._run(x, y, loss_fn, float(loss_scale))
        waited = time.perf_counter()
        loss = allreduce(partial, op="sum", ctx=self.ctx) if self.ctx.size > 1 else partial
        self._count("idle_seconds", time.perf_counter() - waited)
        self._count("steps", 1)
        self._count("step_seconds", time.perf_counter() - start)
        return float(loss)

    def stats(self):
        """This rank's measurements since :meth:`reset_stats` (local, no communication).

        Returns
        -------
        dict
            ``steps``; ``busy_seconds`` (forward, loss and backward computation)
            and ``idle_seconds`` (waiting for messages, for the replicas'
            gradient average and for the loss); ``bubble``: ``idle / (busy +
            idle)``; ``forward_seconds`` and ``backward_seconds`` per
            micro-batch (means, wall clock) and their ``*_cpu_seconds`` (this
            thread's CPU time, free of other ranks sharing the core);
            ``stashed_peak`` and ``stashed_peak_bytes``: the most micro-batches
            (and bytes of their saved activations) held at once.
        """
        s = dict(self._stats)
        busy, idle = s["busy_seconds"], s["idle_seconds"]
        s["bubble"] = idle / (busy + idle) if busy + idle > 0 else 0.0
        for kind in ("forward", "backward"):
            runs = max(s.pop(f"{kind}_runs"), 1)
            s[f"{kind}_seconds"] /= runs
            s[f"{kind}_cpu_seconds"] /= runs
        s.update(stage=self.stage_index, stages=len(self.stages),
                 micro_batches=self.micro_batches, schedule=self.schedule)
        return s

    def reset_stats(self):
        """Set the measurements of :meth:`stats` back to zero."""
        self._stats = dict.fromkeys(
            ("steps", "step_seconds", "busy_seconds", "idle_seconds", "forward_seconds",
             "backward_seconds", "forward_cpu_seconds", "backward_cpu_seconds", "forward_runs",
             "backward_runs", "stashed_peak", "stashed_peak_bytes"), 0)

    def __repr__(self):
        return (f"Pipeline(stages={len(self.stages)}, micro_batches={self.micro_batches}, "
                f"schedule={self.schedule!r}, data_parallel_size={self.data_parallel_size}, "
                f"stage_index={self.stage_index})")

    # -- set-up --------------------------------------------------------------------------
    def _setup(self):
        if self._line is not None:
            return
        agree_config(self.ctx, "Pipeline", {
            "stages": len(self.stages), "micro_batches": self.micro_batches,
            "schedule": self.schedule, "data_parallel_size": self.data_parallel_size},
            fix="every rank must build the pipeline with the same options")
        self._line = self.ctx.split(self.replica_index, self.stage_index)
        self._stage_ctx = self.ctx.split(self.stage_index, self.replica_index)
        if self.data_parallel_size > 1:
            self._ddp = DistributedDataParallel(self.module, ctx=self._stage_ctx)

    def _prepare(self, signature, x, y, loss_fn):
        """Shares, micro-batch sizes and message shapes for a new batch shape (collective)."""
        rows, replicas, m = signature[1], self.data_parallel_size, self.micro_batches
        shares = balanced_counts(rows, replicas)
        if m > shares[-1]:
            spread = (f" split over {replicas} replicas (the smallest share has {shares[-1]})"
                      if replicas > 1 else "")
            raise mark_raised_on_every_rank(InvalidArgumentError(
                f"Pipeline.train_step: micro_batches={m} is larger than the batch of {rows} "
                f"rows{spread}; pass a batch of at least {m * replicas} rows or fewer "
                "micro_batches"))
        self._share = shares[self.replica_index]
        self._offset = sum(shares[:self.replica_index])
        self._sizes = balanced_counts(self._share, m)
        self._weights = [n * replicas / rows for n in self._sizes]  # DDP then averages
        self._loss_weights = [n / rows for n in self._sizes]
        xp = array_module(x) if self.is_first_stage else array_module(self.parameters()[0].data)
        loss = None
        if self.is_last_stage:
            share = y[self._offset:self._offset + self._share]
            loss = lambda out, n: loss_fn.forward(out, share[:n])  # noqa: E731
        self._inputs, self._outputs = probe_shapes(
            self.ctx, self._line, self.module, self.stage_index, len(self.stages),
            sorted(set(self._sizes), reverse=True), x, xp, loss)
        self._activations = BufferPool(xp)
        self._gradients = BufferPool(xp)
        self._signature = signature

    # -- the schedule --------------------------------------------------------------------
    def _count(self, key, value):
        self._stats[key] += value

    def _run(self, x, y, loss_fn, loss_scale):
        """Run this stage's actions; returns its part of the global mean loss."""
        sizes, line, stage = self._sizes, self._line, self.stage_index
        starts = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        actions = schedule_actions(self.schedule, stage, len(self.stages), len(sizes))
        incoming, outgoing, stash, loss_grads = {}, [], {}, {}
        held = {"count": 0, "bytes": 0}
        partial = 0.0

        def post(pool, specs, source, tag, i):
            if 0 <= source < len(self.stages) and i < len(sizes):
                buffer = pool.take(*specs[sizes[i]])
                incoming[tag, i] = (irecv(source, tag, buffer, shape_known=True, ctx=line),
                                    buffer)

        def take(tag, i):
            request, buffer = incoming.pop((tag, i))
            waited = time.perf_counter()
            request.wait()
            self._count("idle_seconds", time.perf_counter() - waited)
            return buffer

        post(self._activations, self._inputs, stage - 1, _FORWARD_TAG, 0)
        post(self._gradients, self._outputs, stage + 1, _BACKWARD_TAG, 0)
        received = {}
        for position, (op, i) in enumerate(actions):
            if op == "F":
                if self.is_first_stage:
                    inputs = x[starts[i]:starts[i + 1]]
                else:
                    inputs = received[i] = take(_FORWARD_TAG, i)
                    post(self._activations, self._inputs, stage - 1, _FORWARD_TAG, i + 1)
                began, cpu = time.perf_counter(), time.thread_time()
                out = self.module.forward(inputs)
                if self.is_last_stage:
                    partial += self._loss_weights[i] * float(
                        loss_fn.forward(out, y[starts[i]:starts[i + 1]]))
                    loss_grads[i] = loss_fn.backward(self._weights[i] * loss_scale)
                self._timed("forward", began, cpu)
                stash[i] = capture(self.module)
                held["count"] += 1
                held["bytes"] += stashed_bytes(stash[i])
                self._peak(held)
                if not self.is_last_stage:
                    outgoing.append(isend(self._conformed(out, self._outputs[sizes[i]], i),
                                          stage + 1, _FORWARD_TAG, shape_known=True, ctx=line))
            else:
                if self.is_last_stage:
                    grad = loss_grads.pop(i)
                else:
                    grad = take(_BACKWARD_TAG, i)
                    post(self._gradients, self._outputs, stage + 1, _BACKWARD_TAG, i + 1)
                snapshot = stash.pop(i)
                held["count"] -= 1
                held["bytes"] -= stashed_bytes(snapshot)
                restore(snapshot)
                grad_input = self._backward(grad, last=position == len(actions) - 1)
                if not self.is_last_stage:
                    self._gradients.give(grad)
                if not self.is_first_stage:
                    self._activations.give(received.pop(i))
                    outgoing.append(isend(self._conformed(grad_input, self._inputs[sizes[i]], i),
                                          stage - 1, _BACKWARD_TAG, shape_known=True, ctx=line))
        waited = time.perf_counter()
        for request in outgoing:
            request.wait()
        self._count("idle_seconds", time.perf_counter() - waited)
        return partial

    def _backward(self, grad, last):
        """The stage's backward; with replicas, the last one averages the gradients."""
        began, cpu = time.perf_counter(), time.thread_time()
        ddp = self._ddp
        if ddp is None:
            grad_input = self.module.backward(grad)
        elif not last:
            with ddp.no_sync():
                grad_input = self.module.backward(grad)
        else:
            grad_input = ddp.backward(grad)
            self._count("idle_seconds", ddp.exposed_communication_seconds)
            began += ddp.exposed_communication_seconds
        self._timed("backward", began, cpu)
        return grad_input

    def _timed(self, kind, began, cpu):
        seconds = time.perf_counter() - began
        self._count("busy_seconds", seconds)
        self._count(f"{kind}_seconds", seconds)
        self._count(f"{kind}_cpu_seconds", time.thread_time() - cpu)
        self._count(f"{kind}_runs", 1)

    def _peak(self, held):
        stats = self._stats
        stats["stashed_peak"] = max(stats["stashed_peak"], held["count"])
        stats["stashed_peak_bytes"] = max(stats["stashed_peak_bytes"], held["bytes"])

    def _conformed(self, array, spec, i):
        """``array`` as the contiguous (shape, dtype) of ``spec`` the receiver expects."""
        shape, dtype = spec
        if array is None or tuple(array.shape) != shape:
            raise InvalidStateError(
                f"Pipeline: stage {self.stage_index} produced "
                f"{None if array is None else tuple(array.shape)} for micro-batch {i}, but "
                f"the shapes exchanged say {shape}; a stage's shapes must depend only on "
                "its input's shape")
        xp = array_module(array)
        return xp.ascontiguousarray(array, dtype=dtype)


def _checked_stages(stages):
    if isinstance(stages, Module):
        raise InvalidArgumentTypeError("Pipeline: stages is one Module; pass a list of stages, "
                                       "e.g. [first_layers, last_layers]")
    stages = list(stages)
    if not stages:
        raise InvalidArgumentError("Pipeline: stages is empty; pass at least one stage")
    for index, stage in enumerate(stages):
        if not isinstance(stage, Module):
            raise InvalidArgumentTypeError(f"Pipeline: stage {index} is a "
                                           f"{type(stage).__name__}, not an hpcdist.nn.Module")
        if not any(p.requires_grad for p in stage.parameters()):
            raise InvalidArgumentError(
                f"Pipeline: stage {index} ({type(stage).__name__}) has no trainable "
                "parameters; merge it into a neighbouring stage")
    return stages
