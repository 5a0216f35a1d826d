"""``DistributedOptimizer``: any torch optimizer, with gradients averaged over the ranks.

As the backward pass produces gradients, hooks put them into buckets (in
backward order) and start a nonblocking allreduce of each bucket as soon as
it is full, so communication overlaps the rest of the backward pass;
``step()`` waits for the buckets and then steps. A gradient of at least
``DIRECT_BYTES`` is a bucket of its own and is reduced in its own memory
(copying a large gradient costs a noticeable part of the backward pass);
smaller ones are copied into flat buckets
and each such parameter's ``grad`` becomes a view into its bucket. After
``synchronize()`` every ``grad`` holds the average.
"""

import contextlib

import torch

from ..comm import allreduce, iallreduce, resolve_context
from ..comm.agreement import agree_config, described_layouts
from ..comm.background import CommunicationThread
from ..comm.tensors import tensor_view
from ..compression import compressed_allreduce
from ..compression.collective import checked_compression
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError, InvalidStateError

__all__ = ["DistributedOptimizer"]

_MEBIBYTE = 1024 * 1024
DIRECT_BYTES = _MEBIBYTE  # gradients this large are reduced where autograd left them
_OPS = ("mean", "sum")


class _BucketBase:
    """What every bucket tracks: its parameters, those whose gradient is ready, and the
    allreduce in flight."""

    def __init__(self, index, parameters):
        self.index = index
        self.parameters = parameters
        self.ready = set()
        self.request = None


class _Bucket(_BucketBase):
    """Parameters of one dtype and device whose gradients travel in one flat tensor."""

    def __init__(self, index, parameters):
        super().__init__(index, parameters)
        first = parameters[0]
        self.flat = torch.zeros(sum(p.numel() for p in parameters), dtype=first.dtype,
                                device=first.device)
        self.array = tensor_view(self.flat)  # what MPI reads and writes
        self.views, offset = [], 0
        for parameter in parameters:
            self.views.append(self.flat[offset:offset + parameter.numel()].view_as(parameter))
            offset += parameter.numel()

    def take(self, position):
        """Make the parameter's ``grad`` its view of the bucket (copying the values in)."""
        parameter, view = self.parameters[position], self.views[position]
        grad = parameter.grad
        if grad is view:
            return
        if grad is None:
            view.zero_()
        else:
            view.copy_(grad)
        parameter.grad = view


class _DirectBucket(_BucketBase):
    """One large parameter whose gradient is reduced in its own memory."""

    def __init__(self, index, parameter):
        super().__init__(index, [parameter])
        self.array = None  # the gradient's memory, set by take

    def take(self, position):
        """Reduce the parameter's ``grad`` where it is (a zero one if it has none; a
        contiguous copy if autograd left it strided)."""
        parameter = self.parameters[position]
        if parameter.grad is None:
            parameter.grad = torch.zeros_like(parameter, memory_format=torch.contiguous_format)
        elif not parameter.grad.is_contiguous():
            parameter.grad = parameter.grad.contiguous()
        self.array = tensor_view(parameter.grad)


def _buckets(parameters, bucket_bytes):
    """Reverse registration order (about backward order); one dtype and device per bucket;
    a parameter of ``DIRECT_BYTES`` or more alone, in its own memory."""
    groups, current, size, kind = [], [], 0, None
    for parameter in reversed(parameters):
        nbytes = parameter.numel() * parameter.element_size()
        this_kind = (parameter.dtype, parameter.device)
        if current and (this_kind != kind or size + nbytes > bucket_bytes
                        or nbytes >= DIRECT_BYTES):
            groups.append(current)
            current, size = [], 0
        if nbytes >= DIRECT_BYTES:
            groups.append(parameter)
            continue
        current.append(parameter)
        size += nbytes
        kind = this_kind
    if current:
        groups.append(current)
    return [_DirectBucket(index, group) if isinstance(group, torch.Tensor) else
            _Bucket(index, group) for index, group in enumerate(groups)]


class _DistributedOptimizer:
    """The methods mixed into the user's optimizer class (see :func:`DistributedOptimizer`)."""

    def _setup(self, named, backward_passes_per_step, compression, op, bucket_size_mb,
               progress_thread, ctx, settings):
        self._ctx = ctx
        self._progress_thread = progress_thread
        self._settings = settings
        self._thread = None
        self.backward_passes_per_step = backward_passes_per_step
        self._op = op
        self._compression = compression
        parameters = [parameter for _, parameter in named]
        self._buckets = _buckets(parameters, bucket_size_mb * _MEBIBYTE)
        self._where = {id(p): (bucket, position) for bucket in self._buckets
                       for position, p in enumerate(bucket.parameters)}
        self._passes = dict.fromkeys(self._where, 0)
        self._names = {id(p): name for name, p in named}
        self._next_launch = 0
        self._in_flight = []
        self._synchronize_on_step = True
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in parameters]
        ctx.on_recovery(self._after_recovery)
        ctx.run_setup(self._set_up_communication)

    def _set_up_communication(self):
        """The collective part of the construction: the ranks agree on the layout and
        settings, and the communication thread starts (deferred in a process that
        replaces a lost rank, see :meth:`~hpcdist.comm.context.Context.run_setup`)."""
        ctx = self._ctx
        agree_config(ctx, "DistributedOptimizer", self._settings,
                     fix="every rank must build the same model and wrap its optimizer the same "
                         "way")
        self._thread = (ctx.communication_thread() if self._progress_thread and ctx.size > 1
                        else None)

    def _after_recovery(self):
        """The context recovered from a lost rank: drop the reductions in flight then
        (they failed) and the passes counted, and follow the new size."""
        for bucket in self._buckets:
            bucket.ready.clear()
            bucket.request = None
        self._in_flight = []
        self._next_launch = 0
        self._passes = dict.fromkeys(self._passes, 0)
        if self._ctx.size == 1:
            self._thread = None

    # -- during the backward pass -------------------------------------------------------
    def _on_grad(self, parameter):
        passes = self._passes[id(parameter)] + 1
        self._passes[id(parameter)] = passes
        if passes > self.backward_passes_per_step:
            raise InvalidStateError(
                f"DistributedOptimizer: the gradient of {self._names[id(parameter)]!r} was "
                f"computed {passes} times before step(), more than backward_passes_per_step="
                f"{self.backward_passes_per_step}; call step() (or synchronize()) in between, "
                "or raise backward_passes_per_step")
        if passes < self.backward_passes_per_step or self._ctx.size == 1:
            return
        bucket, position = self._where[id(parameter)]
        bucket.take(position)
        bucket.ready.add(id(parameter))
        while (self._next_launch < len(self._buckets)
               and len(self._buckets[self._next_launch].ready)
               == len(self._buckets[self._next_launch].parameters)):
            self._launch(self._buckets[self._next_launch])
        if self._thread is None:
            for pending in self._in_flight:  # give the MPI library a chance to progress
                if not pending.request.test():
                    break

    def _launch(self, bucket):
        self._next_launch += 1
        if self._compression is None:
            if self._thread is None:
                bucket.request = iallreduce(bucket.array, self._op, out=bucket.array,
                                            ctx=self._ctx)
            else:
                bucket.request = self._thread.submit(allreduce, bucket.array, self._op,
                                                     out=bucket.array, ctx=self._thread.ctx)
            self._in_flight.append(bucket)
            return
        reduced = compressed_allreduce(bucket.array, self._compression,
                                       name=f"torch-bucket{bucket.index}", op=self._op,
                                       ctx=self._ctx)
        bucket.array[...] = reduced

    # -- Horovod's interface ----------------------------------------------------------------
    def synchronize(self):
        """Finish averaging the gradients: start the buckets still waiting (a parameter
        without a gradient counts as zero) and wait for all of them."""
        if self._ctx.size > 1:
            for bucket in self._buckets[self._next_launch:]:
                for position in range(len(bucket.parameters)):
                    bucket.take(position)
                self._launch(bucket)
            for bucket in self._in_flight:
                if self._thread is None:
                    bucket.request.wait()
                else:
                    bucket.request.result()
                bucket.request = None
        for bucket in self._buckets:
            bucket.ready.clear()
        self._in_flight = []
        self._next_launch = 0
        self._passes = dict.fromkeys(self._passes, 0)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Inside the block, ``step()`` does not synchronize (call :meth:`synchronize`
        yourself first, e.g. to clip the averaged gradients)."""
        self._synchronize_on_step = False
        try:
            yield
        finally:
            self._synchronize_on_step = True

    def step(self, closure=None):
        """Average the gradients over the ranks (unless inside :meth:`skip_synchronize`),
        then take the wrapped optimizer's step."""
        if self._synchronize_on_step:
            self.synchronize()
        return super().step(closure)


def DistributedOptimizer(optimizer, named_parameters, *, backward_passes_per_step=1,
                         compression=None, op="mean", bucket_size_mb=25.0,
                         progress_thread=None, ctx=None):
    """Wrap a torch optimizer so that ``step()`` uses gradients averaged over the ranks.

    The result is an instance of a subclass of ``optimizer``'s class sharing
    its state (``param_groups``, ``state``), so learning-rate schedulers,
    ``state_dict`` and ``zero_grad`` work as before.

    Parameters
    ----------
    optimizer : torch.optim.Optimizer
    named_parameters : iterable of (str, torch.nn.Parameter)
        ``model.named_parameters()``: the gradients to average (those that
        require one); every parameter the optimizer updates must be among them.
    backward_passes_per_step : int, default=1
        Backward passes accumulated locally (summed) before the gradients are
        averaged; more passes than this before ``step()`` raise.
    compression : hpcdist.compression.Compressor, optional
        Compress each bucket (then reduced by ``compressed_allreduce``, blocking).
    op : {"mean", "sum"}, default="mean"
    bucket_size_mb : float, default=25.0
        Capacity of a gradient bucket in MiB.
    progress_thread : bool, optional
        Reduce the buckets on the context's communication thread (a blocking
        allreduce each, which the MPI library progresses while the backward
        pass computes), as :class:`hpcdist.parallel.DistributedDataParallel`
        does. Default: on when the MPI library runs with
        ``MPI_THREAD_MULTIPLE``. Off, each bucket is a nonblocking allreduce
        that the gradient hooks test.
    ctx : Context, optional

    Returns
    -------
    torch.optim.Optimizer

    Raises
    ------
    ConfigMismatchError
        On every rank, naming the first parameter whose name, shape or dtype
        differs between ranks, or a setting that does.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise InvalidArgumentTypeError(
            f"DistributedOptimizer: optimizer is a {type(optimizer).__name__}, not "
            "a torch.optim.Optimizer")
    if (isinstance(backward_passes_per_step, bool) or not isinstance(backward_passes_per_step, int)
            or backward_passes_per_step < 1):
        raise InvalidArgumentError(f"DistributedOptimizer: backward_passes_per_step="
                                   f"{backward_passes_per_step!r} should be an int >= 1")
    if op not in _OPS:
        raise InvalidArgumentError(f"DistributedOptimizer: op={op!r} should be one of {_OPS}")
    if not bucket_size_mb > 0:
        raise InvalidArgumentError(
            f"DistributedOptimizer: bucket_size_mb={bucket_size_mb!r} should be > 0")
    compression = checked_compression("DistributedOptimizer", compression)
    named = [(name, p) for name, p in named_parameters if p.requires_grad]
    named_ids = {id(p) for _, p in named}
    missing = [p for group in optimizer.param_groups for p in group["params"]
               if p.requires_grad and id(p) not in named_ids]
    if missing:
        raise InvalidArgumentError(
            f"DistributedOptimizer: {len(missing)} parameter(s) of the optimizer "
            "are not in named_parameters; pass model.named_parameters() of the "
            "model the optimizer trains")
    if len(named_ids) != len(named):
        raise InvalidArgumentError(
            "DistributedOptimizer: a parameter appears twice in named_parameters")
    ctx = resolve_context(ctx)
    if progress_thread is None:
        progress_thread = CommunicationThread.available()
    settings = {
        **described_layouts(named), "backward_passes_per_step": backward_passes_per_step, "op": op,
        "compression": compression, "bucket_size_mb": float(bucket_size_mb),
        "progress_thread": bool(progress_thread)}
    cls = type(f"Distributed{type(optimizer).__name__}",
               (_DistributedOptimizer, type(optimizer)), {})
    distributed = cls.__new__(cls)
    distributed.__dict__.update(optimizer.__dict__)
    distributed._setup(named, backward_passes_per_step, compression, op,
                       float(bucket_size_mb), bool(progress_thread), ctx, settings)
    return distributed
