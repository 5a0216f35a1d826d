"""Stochastic gradient descent with momentum, as ``torch.optim.SGD``."""

from ...exceptions import InvalidArgumentError
from .optimizer import Optimizer, add_scaled_, check_nonnegative

__all__ = ["SGD"]


class SGD(Optimizer):
    r"""Stochastic gradient descent, optionally with (Nesterov) momentum.

    The update rule is PyTorch's (``torch.optim.SGD``). For a parameter
    :math:`\theta` with gradient :math:`g` at step :math:`t`:

    .. math::

        d &= g + \lambda\theta \\
        b_t &= \begin{cases} d & t = 1 \\
                             \mu b_{t-1} + (1 - \tau) d & t > 1 \end{cases} \\
        d &\leftarrow d + \mu b_t \text{ (Nesterov) or } b_t \text{ (otherwise)} \\
        \theta &\leftarrow \theta - \gamma d

    with learning rate :math:`\gamma` (``lr``), weight decay :math:`\lambda`,
    momentum :math:`\mu` and dampening :math:`\tau`; the momentum lines apply
    only when :math:`\mu \neq 0`. Note that the first step stores the
    (decayed) gradient itself in the buffer, without dampening, and that the
    learning rate multiplies the whole direction (not only the gradient, as
    in Sutskever et al.).

    Parameters
    ----------
    params : iterable of Parameter or of dict
        Parameters or parameter groups (see :class:`Optimizer`).
    lr : float
        Learning rate, >= 0.
    momentum : float, default=0
        Momentum factor, >= 0.
    dampening : float, default=0
        Dampening of the gradient's contribution to the momentum buffer.
    weight_decay : float, default=0
        L2 penalty added to the gradient, >= 0.
    nesterov : bool, default=False
        Nesterov momentum; requires ``momentum > 0`` and ``dampening == 0``.

    Attributes
    ----------
    state : dict
        ``Parameter -> {"momentum_buffer": array}`` once momentum is used.

    Examples
    --------
    >>> opt = SGD(model.parameters(), lr=0.1, momentum=0.9)   # doctest: +SKIP
    >>> model.backward(loss_grad); opt.step(); opt.zero_grad() # doctest: +SKIP
    """

    def __init__(self, params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False):
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(params, defaults)

    def _check_group(self, group, where):
        super()._check_group(group, where)
        for key in ("momentum", "dampening", "weight_decay"):
            group[key] = check_nonnegative("SGD", key, group[key], where)
        group["nesterov"] = bool(group["nesterov"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise InvalidArgumentError(f"SGD: nesterov=True{where} requires momentum > 0 and "
                                       f"dampening == 0, got momentum={group['momentum']} and "
                                       f"dampening={group['dampening']}")

    def _update(self, p, grad, state, group, xp):
        momentum, weight_decay = group["momentum"], group["weight_decay"]
        d = grad
        if weight_decay != 0:
            d = grad + weight_decay * p.data  # a new array: the gradient stays untouched
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                # xp.array, not astype: a 0-d ``d`` may be a NumPy scalar
                buf = state["momentum_buffer"] = xp.array(d, dtype=p.data.dtype, copy=True)
            else:
                buf *= momentum
                buf += (1 - group["dampening"]) * d
            d = d + momentum * buf if group["nesterov"] else buf
        add_scaled_(p.data, -group["lr"], d)
