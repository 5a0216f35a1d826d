"""Mixed precision: float16 compute, float32 master weights, dynamic loss scaling.

Small gradients underflow in float16 (below about 6e-8 they are zero), so the
gradient of the loss is multiplied by a *loss scale* before the backward pass
and the parameter gradients are divided by it again, in float32, before the
optimizer step. The scale is dynamic (:class:`DynamicLossScaler`): when a
gradient overflows to inf or NaN the step is skipped and the scale halved;
after ``growth_interval`` clean steps in a row it doubles.

Two ways to train, both with float32 weights updated by the optimizer:

1. :class:`MixedPrecision` (float16 parameters): the module's parameters
   become float16 *compute* weights, with float32 *master* copies that the
   optimizer steps and copies back. Forward, backward, the gradients and
   their allreduce under data parallelism are all float16 (half the memory
   traffic and half the bytes on the wire)::

       model = build_model()                                 # float32 parameters
       amp = MixedPrecision(model, functools.partial(Adam, lr=1e-3), ctx=ctx)
       ddp = hpcdist.DDP(model, ctx=ctx)                     # optional: AFTER MixedPrecision
       sched = WarmupCosineLR(amp.optimizer, 100, 10_000)    # schedules see amp.optimizer
       for x, y in batches:
           out = ddp(x.astype(np.float16))
           loss = loss_fn(out, y)                            # losses reduce in float32
           ddp.backward(loss_fn.backward(amp.scale))         # the scaled loss gradient
           amp.step()     # unscale, skip on inf/NaN, step masters, copy back, adapt scale
           amp.zero_grad()
           sched.step()

   (``amp.scale_loss_grad(dloss)`` scales and casts a loss gradient computed
   some other way.)

2. :class:`DynamicLossScaler` alone (float32 parameters, float16
   activations): layers that cast their weights to the input's dtype, such
   as :class:`hpcdist.nn.Linear`, compute in float16 when fed float16 and
   accumulate float32 gradients; the scaler unscales those in place::

       scaler = DynamicLossScaler(ctx=ctx)
       for x, y in batches:
           out = model(x.astype(np.float16))
           loss = loss_fn(out, y)
           model.backward(loss_fn.backward(scaler.scale))
           scaler.step(opt)          # unscale, step unless inf/NaN, adapt scale
           opt.zero_grad()

3. :class:`MixedPrecision` under sharded data parallelism: hand it to
   :class:`hpcdist.parallel.ShardedDataParallel` in place of the optimizer
   (``ShardedDataParallel(model, amp, stage=3)``); then each rank keeps the
   float32 masters of its own rows only, and ``amp.step()`` and
   ``amp.zero_grad()`` are the wrapper's.

Notes
-----
- Build :class:`MixedPrecision` before anything keeps references to the
  parameters' arrays (data parallelism, other optimizers): casting gives
  every parameter a new float16 ``data`` array, once. After that, weights
  are only ever updated in place.
- Gradient clipping goes between ``unscale()`` and ``step()``, on the
  float32 gradients (``amp.master_params`` or the optimizer's parameters).
- With ``ctx`` of more than one rank, every rank skips the same steps (an
  overflow on any rank counts; one small allreduce per step), and
  :class:`MixedPrecision` starts every rank from rank 0's weights. Data
  parallelism averages gradients, so ranks agree anyway; for strategies that
  change the weights themselves (model averaging, EASGD, gossip) under
  :class:`MixedPrecision`, operate on ``amp.master_params``: the compute
  weights are overwritten from the masters at every step.
- ``skipped_steps`` counts skipped steps and ``scale`` is the current loss
  scale; a few skips at the start (while the scale comes down from
  ``2**16``) are normal, skips all the time mean the loss diverged.
"""

import math
import numbers

import numpy as np

from ..comm import allreduce, broadcast
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from .module import Module, Parameter, array_module
from .optim.optimizer import Optimizer

__all__ = ["cast_module", "DynamicLossScaler", "MixedPrecision"]


def cast_module(module, dtype, *, buffers=False):
    """Cast the floating-point parameters (and optionally buffers) of ``module`` to ``dtype``.

    Each parameter gets a new ``data`` array (and its gradient is dropped),
    so do this before anything holds references to the old arrays.

    Parameters
    ----------
    module : Module
    dtype : dtype
        A floating-point dtype, e.g. ``numpy.float16``.
    buffers : bool, default=False
        Also cast floating-point buffers (running statistics are usually
        better kept in float32).

    Returns
    -------
    Module
        ``module`` itself.
    """
    dtype = _float_dtype("cast_module", dtype)
    for p in module.parameters():
        if p.data.dtype.kind == "f" and p.data.dtype != dtype:
            p.data = p.data.astype(dtype)
            p.grad = None
    if buffers:
        for sub in module.modules():
            for name, buffer in list(sub._buffers.items()):
                if hasattr(buffer, "dtype") and buffer.dtype.kind == "f":
                    setattr(sub, name, buffer.astype(dtype))
    return module


def _float_dtype(owner, dtype):
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise InvalidArgumentTypeError(
            f"{owner}: dtype={dtype!r} is not a dtype; use numpy.float16") from None
    if dtype.kind != "f" and dtype.name != "bfloat16":
        raise InvalidArgumentTypeError(
            f"{owner}: dtype={dtype} should be a floating-point dtype such as "
            "numpy.float16")
    return dtype


class DynamicLossScaler:
    """The loss scale and its rule: back off on overflow, grow after clean steps.

    Parameters
    ----------
    init_scale : float, default=2**16
        The first scale, > 0.
    growth_factor : float, default=2.0
        Multiplies the scale after ``growth_interval`` clean steps in a row, > 1.
    backoff_factor : float, default=0.5
        Multiplies the scale after an overflow, in (0, 1).
    growth_interval : int, default=2000
        Clean steps in a row before the scale grows, >= 1.
    ctx : Context, optional
        Ranks that must agree on overflows: with more than one rank,
        :meth:`found_overflow` reports an overflow on any of them. None (the
        default) decides locally, without communication.

    Attributes
    ----------
    scale : float
        The current loss scale.
    skipped_steps : int
        Steps reported as overflowed to :meth:`update` so far.
    growth_tracker : int
        Clean steps since the scale last changed.
    """

    def __init__(self, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, *, ctx=None):
        self.scale = _check_real("init_scale", init_scale, lambda v: v > 0, "> 0")
        self.growth_factor = _check_real("growth_factor", growth_factor, lambda v: v > 1,
                                         "> 1")
        self.backoff_factor = _check_real("backoff_factor", backoff_factor,
                                          lambda v: 0 < v < 1, "in (0, 1)")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval,
                                                               numbers.Integral) \
                or growth_interval < 1:
            raise InvalidArgumentError(
                f"DynamicLossScaler: growth_interval={growth_interval!r} should "
                "be an integer >= 1")
        self.growth_interval = int(growth_interval)
        self.ctx = ctx
        self.skipped_steps = 0
        self.growth_tracker = 0
        self._unscaled = None  # (optimizer, found_inf) of the step in progress

    def scale_grad(self, grad):
        """``grad * scale``, of ``grad``'s array type and dtype."""
        return grad * self.scale

    def found_overflow(self, grads):
        """Whether any array of ``grads`` holds an inf or NaN (on any rank of ``ctx``).

        Parameters
        ----------
        grads : iterable of array
            Float32 (or wider) arrays; None entries are ignored.

        Returns
        -------
        bool
            The same on every rank of ``ctx``.
        """
        total = 0.0
        with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN are the answer
            for grad in grads:
                if grad is not None:
                    # a float64 sum is inf/NaN exactly when an element is (float32
                    # values cannot add up to float64 overflow); one sync at the end
                    total = total + array_module(grad).sum(grad, dtype=np.float64)
            found = not math.isfinite(float(total))
        return self.agree(found)

    def agree(self, found):
        """``found`` on any rank of ``ctx`` (local when ``ctx`` is None or has one rank)."""
        found = bool(found)
        if self.ctx is None or self.ctx.size == 1:
            return found
        return allreduce(1 if found else 0, op="max", ctx=self.ctx) > 0

    def unscale(self, optimizer):
        """Divide the gradients of ``optimizer``'s parameters by the scale, in place.

        For float32 parameters whose forward computes in float16 (layers such
        as :class:`hpcdist.nn.Linear` cast the weights to the input's dtype):
        their gradients arrive scaled, in float32. Call it before :meth:`step`
        only to look at or clip the gradients; :meth:`step` calls it otherwise.

        Returns
        -------
        bool
            Whether a gradient overflowed (on any rank of ``ctx``).

        Raises
        ------
        TypeError
            For 16-bit gradients, which would underflow when divided: train
            float16 parameters with :class:`MixedPrecision`.
        """
        if self._unscaled is not None and self._unscaled[0] is optimizer:
            return self._unscaled[1]
        inverse = 1.0 / self.scale
        grads = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not p.requires_grad or p.grad is None:
                    continue
                if p.grad.dtype.itemsize < 4:
                    raise InvalidArgumentTypeError(
                        f"DynamicLossScaler.unscale: a gradient has dtype "
                        f"{p.grad.dtype}, where dividing by the scale would "
                        "underflow; train 16-bit parameters with MixedPrecision "
                        "(float32 master weights)")
                p.grad *= inverse
                grads.append(p.grad)
        found = self.found_overflow(grads)
        self._unscaled = (optimizer, found)
        return found

    def step(self, optimizer):
        """Unscale the gradients, step ``optimizer`` unless they overflowed, update the scale.

        Parameters
        ----------
        optimizer : Optimizer
            Over float32 (or wider) parameters (see :meth:`unscale`).

        Returns
        -------
        bool
            True when the optimizer stepped, False when the step was skipped
            (weights unchanged, scale backed off).
        """
        found_inf = self.unscale(optimizer)
        if not found_inf:
            optimizer.step()
        self.update(found_inf)
        return not found_inf

    def update(self, found_inf):
        """Adapt the scale after a step: back off when it overflowed, grow after clean ones.

        :meth:`step` and :meth:`MixedPrecision.step` call it; call it yourself
        only when you detect overflows yourself.

        Parameters
        ----------
        found_inf : bool
            Whether this step's gradients overflowed (the step was skipped).
        """
        self._unscaled = None
        if found_inf:
            self.scale *= self.backoff_factor
            self.skipped_steps += 1
            self.growth_tracker = 0
        else:
            self.growth_tracker += 1
            if self.growth_tracker >= self.growth_interval:
                self.scale *= self.growth_factor
                self.growth_tracker = 0

    def state_dict(self):
        """``{"scale", "growth_tracker", "skipped_steps"}`` as Python scalars."""
        return {"scale": self.scale, "growth_tracker": self.growth_tracker,
                "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state):
        self.scale = float(state["scale"])
        self.growth_tracker = int(state["growth_tracker"])
        self.skipped_steps = int(state["skipped_steps"])

    def __repr__(self):
        return (f"DynamicLossScaler(scale={self.scale}, growth_tracker={self.growth_tracker}, "
                f"skipped_steps={self.skipped_steps})")


def _check_real(name, value, ok, text):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not ok(value):
        raise InvalidArgumentError(f"DynamicLossScaler: {name}={value!r} should be a number {text}")
    return float(value)


class MixedPrecision:
    """Train ``module`` in float16 with float32 master weights and dynamic loss scaling.

    See the module docstring for the training loop.

    Parameters
    ----------
    module : Module
        Its floating-point parameters are cast to ``dtype`` (new arrays, once).
    optimizer : callable or Optimizer
        Either a function that builds the optimizer from a list of
        parameters (``functools.partial(SGD, lr=0.1)``, or ``Adam``), called
        with the master parameters; or an optimizer already built on
        ``module.parameters()`` (with their float32 values), whose groups and
        state are moved to the master parameters.
    dtype : dtype, default=numpy.float16
        The compute dtype.
    master_dtype : dtype, default=numpy.float32
        The dtype of the master weights and of the gradients the optimizer sees.
    init_scale, growth_factor, backoff_factor, growth_interval
        See :class:`DynamicLossScaler`.
    ctx : Context, optional
        Ranks that skip steps together and start from rank 0's weights (one
        broadcast per parameter here). None: this process alone.

    Attributes
    ----------
    module : Module
    params : list of Parameter
        The module's parameters (compute weights, ``dtype``).
    master_params : list of Parameter
        Their master copies (``master_dtype``), in the same order.
    optimizer : Optimizer
        Steps ``master_params``; attach learning-rate schedules to it.
    scaler : DynamicLossScaler
    """

    def __init__(self, module, optimizer, *, dtype=np.float16, master_dtype=np.float32,
                 init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, ctx=None):
        if not isinstance(module, Module):
            raise InvalidArgumentTypeError(
                f"MixedPrecision: module is a {type(module).__name__}, not an "
                "hpcdist.nn.Module")
        self.dtype = _float_dtype("MixedPrecision", dtype)
        self.master_dtype = _float_dtype("MixedPrecision", master_dtype)
        self.scaler = DynamicLossScaler(init_scale, growth_factor, backoff_factor,
                                        growth_interval, ctx=ctx)
        self.module = module
        # each parameter once, even when layers share it
        self.params = list({id(p): p for p in module.parameters()}.values())
        for name, p in module.named_parameters():
            if p.data.dtype.kind != "f":
                raise InvalidArgumentTypeError(
                    f"MixedPrecision: parameter {name!r} has dtype {p.data.dtype}; "
                    "only floating-point parameters can be trained in mixed "
                    "precision")
        # masters from the original values, before they are rounded to float16
        self.master_params = [Parameter(p.data.astype(self.master_dtype, copy=True),
                                        requires_grad=p.requires_grad) for p in self.params]
        if ctx is not None and ctx.size > 1:
            for master in self.master_params:
                broadcast(master.data, root=0, shape_known=True, ctx=ctx)
        self.optimizer = self._bind_optimizer(optimizer)
        cast_module(module, self.dtype)
        for p, master in zip(self.params, self.master_params):
            p.data[...] = master.data
        self._grad_buffers = [None] * len(self.params)
        self._found_inf = None  # the result of unscale() for the step in progress
        self._sharding = None  # the sharding wrapper holding the masters' rows, if any

    def _bind_optimizer(self, optimizer):
        if not isinstance(optimizer, Optimizer):
            if not callable(optimizer):
                raise InvalidArgumentTypeError(
                    f"MixedPrecision: optimizer is a {type(optimizer).__name__}; "
                    "pass an Optimizer or a function building one from a list "
                    "of parameters")
            built = optimizer(list(self.master_params))
            if not isinstance(built, Optimizer):
                raise InvalidArgumentTypeError(f"MixedPrecision: the optimizer factory returned a "
                                               f"{type(built).__name__}, not an hpcdist Optimizer")
            return built
        master_of = {id(p): master for p, master in zip(self.params, self.master_params)}
        for index, group in enumerate(optimizer.param_groups):
            for p in group["params"]:
                if id(p) not in master_of:
                    raise InvalidArgumentError(
                        f"MixedPrecision: the optimizer's param group {index} "
                        f"holds a {p!r} that is not a parameter of the module")
        optimizer.state = {master_of[id(p)]: state for p, state in optimizer.state.items()}
        for group in optimizer.param_groups:
            group["params"] = [master_of[id(p)] for p in group["params"]]
        return optimizer

    # -- the current scale -----------------------------------------------------------
    @property
    def scale(self):
        """The current loss scale (float)."""
        return self.scaler.scale

    @property
    def skipped_steps(self):
        """How many steps were skipped because a gradient overflowed."""
        return self.scaler.skipped_steps

    # -- one training step -----------------------------------------------------------
    def scale_loss_grad(self, grad):
        """The gradient of the loss times the loss scale, cast to the compute dtype.

        Pass the result to the module's backward. (A product too large for
        float16 becomes inf: that step is skipped and the scale backs off.)
        """
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is handled by step()
            return self.scaler.scale_grad(grad).astype(self.dtype, copy=False)

    def unscale(self):
        """Put the compute gradients, divided by the scale, into the master gradients.

        Call it before :meth:`step` only to look at or clip the master
        gradients; :meth:`step` calls it otherwise. Parameters without a
        gradient (or frozen) get ``grad = None`` on their master.

        Returns
        -------
        bool
            Whether a gradient overflowed (on any rank of ``ctx``).
        """
        if self._found_inf is not None:
            return self._found_inf
        inverse = 1.0 / self.scaler.scale
        grads = []
        for index, (p, master) in enumerate(zip(self.params, self.master_params)):
            if not p.requires_grad or p.grad is None:
                master.grad = None
                continue
            buffer = self._grad_buffers[index]
            if buffer is None:
                buffer = self._grad_buffers[index] = array_module(master.data).empty_like(
                    master.data)
            buffer[...] = p.grad  # widen first: float16 would underflow below
            buffer *= inverse
            master.grad = buffer
            grads.append(buffer)
        self._found_inf = self.scaler.found_overflow(grads)
        return self._found_inf

    def step(self):
        """Unscale, then step the masters and copy them to the module, or skip on overflow.

        Under :class:`hpcdist.parallel.ShardedDataParallel` this is the wrapper's
        ``step()``: the masters of this rank's rows are stepped, then the
        updated 16-bit rows gathered.

        Returns
        -------
        bool
            True when the optimizer stepped, False when the step was skipped
            (weights unchanged, scale backed off).
        """
        if self._sharding is not None:
            return self._sharding.step()
        return self._step_masters()

    def _step_masters(self):
        """:meth:`step` on the masters this object holds (all, or a sharding's rows)."""
        found_inf = self.unscale()
        self._found_inf = None
        if not found_inf:
            self.optimizer.step()
            for p, master in zip(self.params, self.master_params):
                if master.grad is not None:
                    p.data[...] = master.data  # in place: the array object stays
        self.scaler.update(found_inf)
        return not found_inf

    def zero_grad(self, set_to_none=False):
        """Zero the module's (compute) gradients; master gradients are rewritten each step.

        Under :class:`hpcdist.parallel.ShardedDataParallel` this is the wrapper's
        ``zero_grad()``.
        """
        self._found_inf = None
        if self._sharding is not None:
            self._sharding.zero_grad(set_to_none)
            return
        for p in self.params:
            p.zero_grad(set_to_none)

    # -- checkpoints -----------------------------------------------------------------
    def state_dict(self):
        """``{"master_params": [array copies], "optimizer": ..., "scaler": ...}``.

        The compute weights are the masters rounded, so they are not saved.

        Raises
        ------
        ValueError
            Under :class:`hpcdist.parallel.ShardedDataParallel`, which holds the
            masters' rows: save the wrapper's ``state_dict()`` (the loss scale
            included).
        """
        self._check_not_sharded("state_dict")
        return {"master_params": [master.data.copy() for master in self.master_params],
                "optimizer": self.optimizer.state_dict(),
                "scaler": self.scaler.state_dict()}

    def load_state_dict(self, state):
        """Restore a :meth:`state_dict`: masters, compute weights, optimizer and scale."""
        self._check_not_sharded("load_state_dict")
        masters = state["master_params"]
        if len(masters) != len(self.master_params):
            raise InvalidArgumentError(
                f"MixedPrecision.load_state_dict: the state has {len(masters)} "
                f"master parameters, the module {len(self.master_params)}")
        for index, (value, master) in enumerate(zip(masters, self.master_params)):
            if tuple(value.shape) != tuple(master.shape):
                raise InvalidArgumentError(
                    f"MixedPrecision.load_state_dict: master parameter {index} "
                    f"has shape {tuple(value.shape)} in the state but "
                    f"{tuple(master.shape)} in the module")
        for value, p, master in zip(masters, self.params, self.master_params):
            xp = array_module(master.data)
            if xp is np and type(value).__module__.startswith("cupy"):
                value = value.get()
            master.data[...] = xp.asarray(value, dtype=master.dtype)
            p.data[...] = master.data
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])
        self._found_inf = None

    def _check_not_sharded(self, method):
        if self._sharding is not None:
            raise InvalidArgumentError(
                f"MixedPrecision.{method}: a ShardedDataParallel holds this rank's rows of the "
                f"master weights; use the wrapper's {method}(), which includes the loss scale")

    def __repr__(self):
        return (f"MixedPrecision(dtype={self.dtype}, master_dtype={self.master_dtype}, "
                f"{len(self.params)} parameters, scale={self.scale}, "
                f"skipped_steps={self.skipped_steps})")
