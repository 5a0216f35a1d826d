"""DistributedDataParallel: replicas that train like one model on a larger batch.

Every rank holds the whole model and runs forward and backward on its own
batch. During the backward pass, gradients land in buckets (see
:mod:`hpcdist.parallel.buckets`); as soon as a bucket is complete, and all
buckets before it have started, a nonblocking allreduce averages it over the
ranks while the backward pass goes on through the earlier layers. When
:meth:`DistributedDataParallel.backward` returns, every parameter's ``grad``
holds the average over ranks.

Examples
--------
>>> model = hpcdist.DDP(nn.Sequential(nn.Linear(784, 256), nn.ReLU(),
...                                   nn.Linear(256, 10)))          # doctest: +SKIP
>>> loss = criterion(model(x_local), y_local)                         # doctest: +SKIP
>>> model.backward(criterion.backward())                              # doctest: +SKIP
>>> optimizer.step()                                                  # doctest: +SKIP
"""

import copy
import time
from contextlib import contextmanager

import numpy as np

from .._checks import check_bool
from ..comm import allreduce, broadcast, broadcast_object, iallreduce, resolve_context
from ..comm.agreement import agree_config, described_layouts
from ..comm.background import CommunicationThread
from ..compression import compressed_allreduce
from ..compression.collective import checked_compression
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ..nn.module import Module, array_module
from ._checks import checked_bucket_size
from .buckets import assign_buckets

__all__ = ["DistributedDataParallel", "DDP", "sync_buffers"]

_MEBIBYTE = 1024 * 1024


class DistributedDataParallel(Module):
    """Data parallelism with gradient bucketing and communication overlap.

    Parameters
    ----------
    module : hpcdist.nn.Module
        The model; every rank must build the same one (checked).
    bucket_size_mb : float, default=25.0
        Capacity of a gradient bucket in MiB. ``0`` gives one bucket per
        parameter; ``math.inf`` one bucket per dtype (no overlap).
    broadcast_buffers : bool, default=True
        Broadcast buffers (e.g. BatchNorm running statistics) from rank 0 at
        every forward pass in training mode.
    compression : hpcdist.compression.Compressor, optional
        Compress each bucket with this compressor (its state is kept per
        bucket). Compressed buckets are reduced with
        :func:`hpcdist.compression.compressed_allreduce`, which blocks.
    progress_thread : bool, optional
        Reduce the buckets on the context's communication thread (a blocking
        allreduce each, which the MPI library progresses at full speed while
        the backward pass computes). Default: on when the MPI library runs
        with ``MPI_THREAD_MULTIPLE``. Off, each bucket is a nonblocking
        allreduce that the backward pass tests between layers (MPI libraries
        often progress only inside MPI calls).
    ctx : Context, optional
        Defaults to the default context.

    Attributes
    ----------
    module : Module
        The wrapped model.
    buckets : list of Bucket
        In the order they are communicated.
    exposed_communication_seconds : float
        Time the last :meth:`backward` spent waiting for communication after
        the backward computation had finished (the part not overlapped).

    Raises
    ------
    ConfigMismatchError
        On every rank, naming the first parameter or buffer whose name, shape
        or dtype differs between ranks (or a setting that does).
    ValueError
        For a negative or NaN ``bucket_size_mb``.
    TypeError
        For a ``bucket_size_mb`` that is not a number, a ``broadcast_buffers``
        that is not a bool, a ``compression`` that is not a compressor.
    """

    def __init__(self, module, *, bucket_size_mb=25.0, broadcast_buffers=True,
                 compression=None, progress_thread=None, ctx=None):
        super().__init__()
        if not isinstance(module, Module):
            raise InvalidArgumentTypeError(
                f"DistributedDataParallel: module is a {type(module).__name__}, "
                "not an hpcdist.nn.Module")
        owner = "DistributedDataParallel"
        bucket_size_mb = checked_bucket_size(owner, bucket_size_mb)
        broadcast_buffers = check_bool(broadcast_buffers, f"{owner}: broadcast_buffers")
        self.module = module
        self.ctx = resolve_context(ctx)
        self.bucket_size_mb = bucket_size_mb
        self.broadcast_buffers = broadcast_buffers
        self.compression = checked_compression(owner, compression)
        self.exposed_communication_seconds = 0.0
        named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        if progress_thread is None:
            progress_thread = CommunicationThread.available()
        self._named = named
        self._progress_thread = bool(progress_thread)
        self._settings = {"bucket_size_mb": bucket_size_mb, "broadcast_buffers": broadcast_buffers,
                          "compression": compression, "progress_thread": bool(progress_thread)}
        self.buckets = assign_buckets(named, bucket_size_mb * _MEBIBYTE)
        self._where = {}
        for bucket in self.buckets:
            for position, parameter in enumerate(bucket.parameters):
                if id(parameter) in self._where:
                    raise InvalidArgumentError(f"DistributedDataParallel: parameter "
                                               f"{bucket.names[position]!r} is registered twice; "
                                               "share layers by reference only once")
                self._where[id(parameter)] = (bucket, position)
                parameter.register_grad_hook(self._on_grad_ready)
        self._compressors = ([_fresh_copy(compression) for _ in self.buckets]
                             if compression is not None else None)
        self._sync_enabled = True
        self._next_launch = 0
        self._in_flight = []
        self._thread = None
        self.ctx.on_recovery(self._after_recovery)
        self.ctx.run_setup(self._set_up)

    def _after_recovery(self):
        """The context recovered from a lost rank: drop the reductions in flight then
        (they failed) and follow the new size."""
        for bucket in self.buckets:
            bucket.reset()
        self._in_flight = []
        self._next_launch = 0
        if self.ctx.size == 1:
            self._thread = None

    # -- set-up --------------------------------------------------------------------------
    def _set_up(self):
        """The collective part of the construction: every rank has the same layout and
        settings, rank 0's parameters and buffers, and the communication thread
        (deferred in a process that replaces a lost rank, see
        :meth:`~hpcdist.comm.context.Context.run_setup`)."""
        _verify_layout(self.ctx, self._named, self.module, self._settings)
        self._broadcast_state(self._named)
        self._thread = (self.ctx.communication_thread()
                        if self._progress_thread and self.ctx.size > 1 else None)

    def _broadcast_state(self, named):
        if self.ctx.size == 1:
            return
        for _, parameter in named:
            broadcast(parameter.data, root=0, ctx=self.ctx, shape_known=True)
        self._sync_buffers()

    def _sync_buffers(self):
        sync_buffers(self.module, self.ctx)

    # -- computation ---------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        """Run the wrapped module (after syncing buffers from rank 0 if asked)."""
        self._drain()  # a backward that never finished must not leave requests behind
        if self.broadcast_buffers and self.module.training and self.ctx.size > 1:
            self._sync_buffers()
        return self.module.forward(*args, **kwargs)

    def backward(self, grad_output):
        """Backward through the module; on return every ``grad`` is the global average.

        Inside :meth:`no_sync`, gradients only accumulate locally.
        """
        grad_input = self.module.backward(grad_output)
        if self._sync_enabled:
            self.finish_gradient_sync()
        return grad_input

    @contextmanager
    def no_sync(self):
        """Accumulate gradients locally; the first backward after the block
        averages everything accumulated (like one large batch)."""
        previous, self._sync_enabled = self._sync_enabled, False
        try:
            yield self
        finally:
            self._sync_enabled = previous

    # -- gradient synchronisation ----------------------------------------------------------
    def _on_grad_ready(self, parameter):
        bucket, position = self._where[id(parameter)]
        bucket.rebind(parameter, position)
        bucket.touched.add(id(parameter))
        if not self._sync_enabled or self.ctx.size == 1:
            return
        bucket.ready.add(id(parameter))
        self._launch_completed()
        if self._thread is None:
            for pending in self._in_flight:  # give the MPI library a chance to progress
                if not pending.request.test():
                    break

    def _launch_completed(self):
        """Start buckets in index order, as far as they are complete."""
        buckets = self.buckets
        while self._next_launch < len(buckets) and buckets[self._next_launch].complete:
            self._launch(buckets[self._next_launch])
            self._next_launch += 1

    def _launch(self, bucket):
        bucket.zero_untouched()
        if self._compressors is None:
            if self._thread is None:
                bucket.request = iallreduce(bucket.flat, op="mean", out=bucket.flat, ctx=self.ctx)
            else:
                bucket.request = self._thread.submit(allreduce, bucket.flat, op="mean",
                                                     out=bucket.flat, ctx=self._thread.ctx)
            self._in_flight.append(bucket)
            return
        reduced = compressed_allreduce(bucket.flat, self._compressors[bucket.index],
                                       name=f"bucket{bucket.index}", op="mean", ctx=self.ctx)
        bucket.flat[...] = reduced

    def finish_gradient_sync(self):
        """Start the buckets still waiting (parameters without a gradient count
        as zero) and wait for all of them. :meth:`backward` calls this."""
        if self.ctx.size == 1:
            for bucket in self.buckets:
                bucket.reset()
            return
        start = time.perf_counter()
        while self._next_launch < len(self.buckets):
            self._launch(self.buckets[self._next_launch])
            self._next_launch += 1
        self._drain()
        self.exposed_communication_seconds = time.perf_counter() - start

    def _drain(self):
        for bucket in self._in_flight:
            if self._thread is None:
                bucket.request.wait()
            else:
                bucket.request.result()
        if self._in_flight or self._next_launch:
            for bucket in self.buckets:
                bucket.reset()
        self._in_flight = []
        self._next_launch = 0

    def extra_repr(self):
        return (f"buckets={len(self.buckets)}, bucket_size_mb={self.bucket_size_mb}, "
                f"ranks={self.ctx.size}")


DDP = DistributedDataParallel


def sync_buffers(module, ctx):
    """Rank 0's buffers of ``module`` on every rank, coalesced: one broadcast per kind of
    array (array type and dtype; 0-d arrays included), filled back in place,
    and one object broadcast for buffers that are not arrays."""
    groups, others = {}, []
    for sub in module.modules():
        for name, value in sub._buffers.items():
            if hasattr(value, "shape") and hasattr(value, "dtype"):
                groups.setdefault((type(value), np.dtype(value.dtype)), []).append(value)
            elif value is not None:
                others.append((sub, name))
    is_root = ctx.rank == 0
    for (_, dtype), arrays in groups.items():
        xp = array_module(arrays[0])
        if is_root:
            flat = xp.concatenate([a.reshape(-1) for a in arrays])
        else:
            flat = xp.empty(sum(a.size for a in arrays), dtype=dtype)
        broadcast(flat, root=0, ctx=ctx, shape_known=True)
        if not is_root:
            offset = 0
            for a in arrays:
                a[...] = flat[offset:offset + a.size].reshape(a.shape)
                offset += a.size
    if others:
        values = broadcast_object([m._buffers[n] for m, n in others], root=0, ctx=ctx)
        for (sub, name), value in zip(others, values):
            sub._buffers[name] = value


def _fresh_copy(compressor):
    """An independent compressor per bucket (compressors keep per-name state)."""
    return copy.deepcopy(compressor)


def _verify_layout(ctx, named, module, settings):
    """Raise ``ConfigMismatchError`` on every rank unless all ranks have the same
    parameters and buffers (names, shapes, dtypes, in order) and ``settings``."""
    values = described_layouts([(f"parameter {name}", p.data) for name, p in named]
                               + [(f"buffer {name}", b) for name, b in module.named_buffers()])
    values.update(settings)
    agree_config(ctx, "DistributedDataParallel", values,
                 fix="every rank must build the same model (same layers, shapes and dtypes) "
                     "and wrap it with the same settings")

