"""Learning-rate schedules and the linear scaling rule.

A schedule sets ``group["lr"]`` of its optimizer's parameter groups from a
closed formula of the step count and each group's base learning rate (the
``lr`` the group had when the first schedule was attached, saved as
``group["initial_lr"]``). Attaching a schedule already applies step 0;
call :meth:`LRScheduler.step` once after every ``optimizer.step()``::

    opt = SGD(model.parameters(), lr=scale_lr(0.1, ctx.size))
    sched = WarmupCosineLR(opt, warmup_steps=500, total_steps=10_000)
    for batch in batches:
        ...                                  # forward, backward
        opt.step(); opt.zero_grad(); sched.step()

Because every value is a closed formula, restoring ``state_dict()`` (the
step count and base rates) restores the schedule exactly.
"""

import math

from ..._checks import check_int
from ...exceptions import InvalidArgumentError, InvalidArgumentTypeError
from .optimizer import check_nonnegative

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LinearWarmup", "SequentialLR",
           "WarmupCosineLR", "scale_lr"]


def _check_int(owner, name, value, minimum):
    return check_int(value, f"{owner}: {name}", minimum)


def _check_fraction(owner, name, value):
    value = check_nonnegative(owner, name, value)
    if value > 1:
        raise InvalidArgumentError(f"{owner}: {name}={value!r} should be in [0, 1]")
    return value


def scale_lr(base_lr, world_size, *, base_world_size=1):
    """The linear scaling rule: ``base_lr * world_size / base_world_size``.

    When data parallelism multiplies the global batch by ``k =
    world_size / base_world_size`` (each rank keeping its local batch
    size), multiply the learning rate tuned for ``base_world_size`` ranks by
    ``k`` (Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in
    1 Hour", 2017).

    Parameters
    ----------
    base_lr : float
        The learning rate tuned with ``base_world_size`` ranks, >= 0.
    world_size : int
        The number of ranks now (``ctx.size``), >= 1.
    base_world_size : int, default=1
        The number of ranks ``base_lr`` was tuned with, >= 1.

    Returns
    -------
    float

    Notes
    -----
    The rule breaks down early in training, when the weights change fast:
    pair it with a warm-up that starts near ``base_lr`` and reaches the
    scaled rate after a few epochs (Goyal et al. use 5), e.g.
    ``LinearWarmup(opt, warmup_steps, start_factor=base_world_size / world_size)``.
    It is a rule for SGD with momentum; adaptive optimizers such as Adam
    usually scale better with the square root of ``k``.

    Examples
    --------
    >>> scale_lr(0.1, 8)
    0.8
    >>> scale_lr(0.1, 32, base_world_size=8)
    0.4
    """
    base_lr = check_nonnegative("scale_lr", "base_lr", base_lr)
    world_size = _check_int("scale_lr", "world_size", world_size, 1)
    base_world_size = _check_int("scale_lr", "base_world_size", base_world_size, 1)
    return base_lr * world_size / base_world_size


class LRScheduler:
    """Base class of learning-rate schedules.

    Subclasses implement :meth:`lr_at`, the learning rate of a group with
    base rate ``base_lr`` at step ``step``.

    Parameters
    ----------
    optimizer : Optimizer
        Anything with ``param_groups`` (a list of dicts with ``"lr"``).

    Attributes
    ----------
    optimizer : Optimizer
    base_lrs : list of float
        Each group's ``initial_lr``.
    last_step : int
        The number of :meth:`step` calls (0 right after construction).
    """

    def __init__(self, optimizer):
        if not hasattr(optimizer, "param_groups"):
            raise InvalidArgumentTypeError(
                f"{type(self).__name__}: expected an optimizer with param_groups, "
                f"got {type(optimizer).__name__}")
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_step = 0
        self._apply()

    def lr_at(self, base_lr, step):
        """The learning rate at ``step`` of a group whose base rate is ``base_lr``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement lr_at")

    def _apply(self):
        self._last_lr = [self.lr_at(base_lr, self.last_step) for base_lr in self.base_lrs]
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr

    def step(self):
        """Advance one step and set every group's learning rate."""
        self.last_step += 1
        self._apply()

    def get_last_lr(self):
        """The learning rates this schedule set last, one per parameter group."""
        return list(self._last_lr)

    def state_dict(self):
        """``{"last_step": int, "base_lrs": list of float}``."""
        return {"last_step": self.last_step, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state):
        """Restore a :meth:`state_dict` and set the learning rates of that step."""
        if len(state["base_lrs"]) != len(self.optimizer.param_groups):
            raise InvalidArgumentError(f"{type(self).__name__}.load_state_dict: the state has "
                                       f"{len(state['base_lrs'])} base rates, the optimizer "
                                       f"{len(self.optimizer.param_groups)} parameter groups")
        self.last_step = int(state["last_step"])
        self.base_lrs = [float(lr) for lr in state["base_lrs"]]
        self._apply()

    def __repr__(self):
        return f"{type(self).__name__}(last_step={self.last_step}, last_lr={self._last_lr})"


class StepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every ``step_size`` steps.

    ``lr = base_lr * gamma ** (step // step_size)``, as ``torch.optim.lr_scheduler.StepLR``.

    Parameters
    ----------
    optimizer : Optimizer
    step_size : int
        Steps between decays, >= 1.
    gamma : float, default=0.1
        Decay factor, >= 0.
    """

    def __init__(self, optimizer, step_size, gamma=0.1):
        self.step_size = _check_int("StepLR", "step_size", step_size, 1)
        self.gamma = check_nonnegative("StepLR", "gamma", gamma)
        super().__init__(optimizer)

    def lr_at(self, base_lr, step):
        return base_lr * self.gamma ** (step // self.step_size)


class CosineAnnealingLR(LRScheduler):
    r"""Cosine decay from the base rate to ``eta_min`` over ``T_max`` steps.

    .. math:: \eta_t = \eta_{min} + (\eta_{base} - \eta_{min})
              \frac{1 + \cos(\pi t / T_{max})}{2}

    as ``torch.optim.lr_scheduler.CosineAnnealingLR`` (without restarts):
    like it, stepping past ``T_max`` continues the cosine, which climbs back
    towards the base rate, so stop at ``T_max``.

    Parameters
    ----------
    optimizer : Optimizer
    T_max : int
        Steps from the base rate down to ``eta_min``, >= 1.
    eta_min : float, default=0
        The final learning rate, >= 0.
    """

    def __init__(self, optimizer, T_max, eta_min=0.0):
        self.T_max = _check_int("CosineAnnealingLR", "T_max", T_max, 1)
        self.eta_min = check_nonnegative("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer)

    def lr_at(self, base_lr, step):
        cosine = (1 + math.cos(math.pi * step / self.T_max)) / 2
        return self.eta_min + (base_lr - self.eta_min) * cosine


class LinearWarmup(LRScheduler):
    """Ramp the learning rate linearly from ``start_factor * base_lr`` to ``base_lr``.

    ``lr = base_lr * (start_factor + (1 - start_factor) * min(step, warmup_steps) /
    warmup_steps)``: the base rate is reached at step ``warmup_steps`` and
    kept afterwards; the same as ``torch.optim.lr_scheduler.LinearLR`` with
    ``end_factor=1``. Chain it with a decay through :class:`SequentialLR`
    (or use :class:`WarmupCosineLR`).

    Parameters
    ----------
    optimizer : Optimizer
    warmup_steps : int
        Length of the ramp, >= 1.
    start_factor : float, default=0.1
        Fraction of the base rate at step 0, in [0, 1]. For Goyal et al.'s
        gradual warm-up after :func:`scale_lr` by ``k``, use ``1 / k`` (start
        at the single-worker rate).
    """

    def __init__(self, optimizer, warmup_steps, start_factor=0.1):
        self.warmup_steps = _check_int("LinearWarmup", "warmup_steps", warmup_steps, 1)
        self.start_factor = _check_fraction("LinearWarmup", "start_factor", start_factor)
        super().__init__(optimizer)

    def lr_at(self, base_lr, step):
        progress = min(step, self.warmup_steps) / self.warmup_steps
        return base_lr * (self.start_factor + (1 - self.start_factor) * progress)


class SequentialLR(LRScheduler):
    """Run schedules one after the other, switching at given steps.

    Schedule ``i`` is in charge from step ``milestones[i - 1]`` (0 for the
    first) and sees its own step count restart at 0 there, so
    ``SequentialLR(opt, [LinearWarmup(opt, 100), CosineAnnealingLR(opt, 900)],
    milestones=[100])`` warms up for 100 steps and then decays over 900.
    Step only the SequentialLR, not the schedules inside it.

    Parameters
    ----------
    optimizer : Optimizer
    schedules : list of LRScheduler
        Attached to ``optimizer``, in order.
    milestones : list of int
        ``len(schedules) - 1`` strictly increasing steps >= 1.
    """

    def __init__(self, optimizer, schedules, milestones):
        schedules, milestones = list(schedules), list(milestones)
        if not schedules:
            raise InvalidArgumentError(
                "SequentialLR: schedules is empty; pass at least one schedule")
        for index, schedule in enumerate(schedules):
            if not isinstance(schedule, LRScheduler):
                raise InvalidArgumentTypeError(f"SequentialLR: schedules[{index}] is a "
                                               f"{type(schedule).__name__}, not an LRScheduler")
            if schedule.optimizer is not optimizer:
                raise InvalidArgumentError(
                    f"SequentialLR: schedules[{index}] is attached to another "
                    "optimizer; attach every schedule to this one")
        if len(milestones) != len(schedules) - 1:
            raise InvalidArgumentError(f"SequentialLR: got {len(milestones)} milestones for "
                                       f"{len(schedules)} schedules; pass len(schedules) - 1 = "
                                       f"{len(schedules) - 1}")
        previous = 0
        for index, milestone in enumerate(milestones):
            _check_int("SequentialLR", f"milestones[{index}]", milestone, previous + 1)
            previous = milestone
        self.schedules = schedules
        self.milestones = [int(m) for m in milestones]
        super().__init__(optimizer)

    def _active(self, step):
        index = sum(step >= milestone for milestone in self.milestones)
        start = self.milestones[index - 1] if index else 0
        return self.schedules[index], step - start

    def lr_at(self, base_lr, step):
        schedule, local_step = self._active(step)
        return schedule.lr_at(base_lr, local_step)

    def _apply(self):
        super()._apply()
        schedule, local_step = self._active(self.last_step)
        schedule.last_step = local_step  # the schedule in charge reports its own position
        schedule._last_lr = list(self._last_lr)


class WarmupCosineLR(SequentialLR):
    """Linear warm-up followed by cosine decay to ``eta_min``.

    The common large-batch recipe: :class:`LinearWarmup` for ``warmup_steps``,
    then :class:`CosineAnnealingLR` over the remaining ``total_steps -
    warmup_steps`` steps.

    Parameters
    ----------
    optimizer : Optimizer
    warmup_steps : int
        Length of the warm-up, >= 0 (0: cosine decay only).
    total_steps : int
        Length of the whole schedule, > ``warmup_steps``.
    start_factor : float, default=0.1
        Fraction of the base rate at step 0 (see :class:`LinearWarmup`).
    eta_min : float, default=0
        The learning rate at ``total_steps``.
    """

    def __init__(self, optimizer, warmup_steps, total_steps, *, start_factor=0.1,
                 eta_min=0.0):
        warmup_steps = _check_int("WarmupCosineLR", "warmup_steps", warmup_steps, 0)
        total_steps = _check_int("WarmupCosineLR", "total_steps", total_steps,
                                 warmup_steps + 1)
        cosine = CosineAnnealingLR(optimizer, total_steps - warmup_steps, eta_min)
        if warmup_steps == 0:
            schedules, milestones = [cosine], []
        else:
            schedules = [LinearWarmup(optimizer, warmup_steps, start_factor), cosine]
            milestones = [warmup_steps]
        super().__init__(optimizer, schedules, milestones)
