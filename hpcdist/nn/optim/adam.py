"""Adam and AdamW, as ``torch.optim.Adam`` and ``torch.optim.AdamW``."""

import math
import numbers

from ...exceptions import InvalidArgumentError
from .optimizer import Optimizer, check_nonnegative

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    r"""Adam (Kingma and Ba, 2015) with PyTorch's update rule.

    For a parameter :math:`\theta` with gradient :math:`g` at step
    :math:`t = 1, 2, \dots` (counted per parameter):

    .. math::

        g &\leftarrow g + \lambda\theta \quad\text{(L2 penalty; AdamW instead
             does } \theta \leftarrow (1 - \gamma\lambda)\theta\text{)} \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1) g \\
        v_t &= \beta_2 v_{t-1} + (1 - \beta_2) g^2 \\
        \hat v_t &= \max(\hat v_{t-1}, v_t) \text{ with amsgrad, else } v_t \\
        \theta &\leftarrow \theta - \frac{\gamma}{1 - \beta_1^t}\,
            \frac{m_t}{\sqrt{\hat v_t} / \sqrt{1 - \beta_2^t} + \epsilon}

    with :math:`m_0 = v_0 = 0`. As in PyTorch, :math:`\epsilon` is added
    after the bias correction of :math:`\sqrt{v}`, the AMSGrad maximum is taken
    over the uncorrected :math:`v_t`, and :math:`m_t` is computed as
    :math:`m_{t-1} + (1 - \beta_1)(g - m_{t-1})` (the same value).

    Parameters
    ----------
    params : iterable of Parameter or of dict
        Parameters or parameter groups (see :class:`Optimizer`).
    lr : float, default=1e-3
        Learning rate :math:`\gamma`, >= 0.
    betas : tuple of 2 floats, default=(0.9, 0.999)
        Decay rates of the first and second moments, each in [0, 1).
    eps : float, default=1e-8
        Added to the denominator, >= 0.
    weight_decay : float, default=0
        :math:`\lambda`, >= 0: an L2 penalty added to the gradient
        (decoupled in :class:`AdamW`).
    amsgrad : bool, default=False
        Use the running maximum of the second moment (Reddi et al., 2018).

    Attributes
    ----------
    state : dict
        ``Parameter -> {"step": int, "exp_avg": array, "exp_avg_sq": array}``
        (plus ``"max_exp_avg_sq"`` with amsgrad).
    """

    #: weight decay applied to the parameter (AdamW) instead of the gradient
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        amsgrad=amsgrad)
        super().__init__(params, defaults)

    def _check_group(self, group, where):
        super()._check_group(group, where)
        name = type(self).__name__
        betas = group["betas"]
        try:
            beta1, beta2 = betas
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{name}: betas={betas!r}{where} should be a pair "
                                       "(beta1, beta2)") from None
        for index, beta in enumerate((beta1, beta2)):
            if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or \
                    not 0.0 <= beta < 1.0:
                raise InvalidArgumentError(f"{name}: betas[{index}]={beta!r}{where} should be in "
                                           "[0, 1)")
        group["betas"] = (float(beta1), float(beta2))
        group["eps"] = check_nonnegative(name, "eps", group["eps"], where)
        group["weight_decay"] = check_nonnegative(name, "weight_decay",
                                                  group["weight_decay"], where)
        group["amsgrad"] = bool(group["amsgrad"])

    def _update(self, p, grad, state, group, xp):
        lr, weight_decay, eps = group["lr"], group["weight_decay"], group["eps"]
        beta1, beta2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = xp.zeros_like(p.data)
            state["exp_avg_sq"] = xp.zeros_like(p.data)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = xp.zeros_like(p.data)
        state["step"] += 1
        step = state["step"]
        if weight_decay != 0:
            if self._decoupled:
                p.data *= 1 - lr * weight_decay
            else:
                grad = grad + weight_decay * p.data  # a new array: the gradient stays untouched
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg += (1 - beta1) * (grad - exp_avg)
        exp_avg_sq *= beta2
        exp_avg_sq += (1 - beta2) * (grad * grad)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2_sqrt = math.sqrt(1 - beta2 ** step)
        if group["amsgrad"]:
            if "max_exp_avg_sq" not in state:  # amsgrad switched on after some steps
                state["max_exp_avg_sq"] = xp.zeros_like(p.data)
            second = xp.maximum(state["max_exp_avg_sq"], exp_avg_sq,
                                out=state["max_exp_avg_sq"])
        else:
            second = exp_avg_sq
        update = xp.sqrt(second, out=xp.empty_like(p.data))  # out=: 0-d stays an array
        update /= bias_correction2_sqrt
        update += eps
        xp.divide(exp_avg, update, out=update)
        update *= lr / bias_correction1
        p.data -= update


class AdamW(Adam):
    r"""Adam with decoupled weight decay (Loshchilov and Hutter, 2019), as ``torch.optim.AdamW``.

    Before the Adam update, every step multiplies the parameter by
    :math:`1 - \gamma\lambda` (learning rate times weight decay) instead of
    adding :math:`\lambda\theta` to the gradient; otherwise the same as
    :class:`Adam`, whose parameters it takes, with ``weight_decay=1e-2`` by
    default.
    """

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad)
