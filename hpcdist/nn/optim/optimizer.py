"""The optimizer base class: parameter groups, state, zeroing and checkpoints.

An optimizer holds ``param_groups``, a list of dicts each with a ``"params"``
list and that group's hyperparameters (``"lr"`` and the rest), and ``state``,
a dict from :class:`~hpcdist.nn.module.Parameter` to that parameter's buffers
(moments, step counts). Subclasses implement :meth:`Optimizer._update`, the
update of one parameter, and :meth:`Optimizer._check_group`, the validation of
one group's hyperparameters.

Updates happen in place on ``parameter.data``: the array object never
changes, so whoever holds a reference to it (data parallelism, checkpoints,
mixed precision) keeps seeing the current values.
"""

import math
import numbers

import numpy as np

from ...exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ...kernels import scale_add
from ..module import Parameter, array_module

__all__ = ["Optimizer", "check_nonnegative"]


def check_nonnegative(owner, name, value, where=""):
    """Return ``value`` as a float, or raise when it is not a finite number >= 0.

    Parameters
    ----------
    owner : str
        Who checks (``"SGD"``), for the message.
    name : str
        The argument's name.
    value : object
    where : str, optional
        Extra context for the message (``" in param group 1"``).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentTypeError(f"{owner}: {name}={value!r}{where} should be a real number")
    if not 0 <= value < math.inf:  # also catches NaN
        raise InvalidArgumentError(f"{owner}: {name}={value!r}{where} should be a finite "
                                   "number >= 0")
    return float(value)


class Optimizer:
    """Base class of optimizers.

    Parameters
    ----------
    params : iterable of Parameter, or iterable of dict
        The parameters to optimize (``model.parameters()``), or parameter
        groups as in PyTorch: ``[{"params": [...], "lr": 0.1}, {"params": [...]}]``,
        where keys missing from a group are taken from ``defaults``.
    defaults : dict
        Default hyperparameters of every group.

    Attributes
    ----------
    param_groups : list of dict
        Each with ``"params"`` (a list of Parameter) and the group's
        hyperparameters; learning-rate schedules change ``group["lr"]``.
    state : dict
        ``Parameter -> dict`` of that parameter's optimizer state.
    defaults : dict

    Notes
    -----
    :meth:`step` skips parameters with ``requires_grad=False`` or with
    ``grad is None`` (their state is not created or advanced), as PyTorch does.
    """

    def __init__(self, params, defaults):
        name = type(self).__name__
        if isinstance(params, (Parameter, dict)) or hasattr(params, "shape"):
            raise InvalidArgumentTypeError(
                f"{name}: params should be an iterable of Parameters or of "
                f"parameter-group dicts, got a single {type(params).__name__}; "
                "wrap it in a list")
        self.defaults = dict(defaults)
        self.param_groups = []
        self.state = {}
        groups = list(params)
        if not groups:
            raise InvalidArgumentError(
                f"{name}: got an empty parameter list; pass model.parameters() "
                "of a model that has parameters")
        # name the group in messages only when the caller made groups
        self._label_groups = isinstance(groups[0], dict)
        if not self._label_groups:
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # -- groups --------------------------------------------------------------------
    def add_param_group(self, group):
        """Add a parameter group (a dict with ``"params"`` and optional hyperparameters).

        Useful to start training layers that were frozen. Raises ``ValueError``
        when a parameter already belongs to another group.
        """
        name = type(self).__name__
        if not isinstance(group, dict):
            raise InvalidArgumentTypeError(
                f"{name}: a parameter group should be a dict with a 'params' key, "
                f"got {type(group).__name__}; do not mix Parameters and dicts")
        if "params" not in group:
            raise InvalidArgumentError(f"{name}: parameter group {len(self.param_groups)} has no "
                                       f"'params' key (keys: {sorted(group)})")
        params = group["params"]
        params = [params] if isinstance(params, Parameter) else list(params)
        for index, p in enumerate(params):
            if not isinstance(p, Parameter):
                raise InvalidArgumentTypeError(
                    f"{name}: parameter {index} of group {len(self.param_groups)} "
                    f"is a {type(p).__name__}, not an hpcdist.nn.Parameter")
        if not params:
            raise InvalidArgumentError(f"{name}: parameter group {len(self.param_groups)} is empty")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if len({id(p) for p in params}) != len(params) or any(id(p) in seen for p in params):
            raise InvalidArgumentError(
                f"{name}: a parameter appears twice (in one group or in two); "
                "each parameter may belong to one group only")
        new_group = {**self.defaults, **{k: v for k, v in group.items() if k != "params"}}
        new_group["params"] = params
        where = ""
        if getattr(self, "_label_groups", True) or self.param_groups:
            where = f" in param group {len(self.param_groups)}"
        self._check_group(new_group, where)
        self.param_groups.append(new_group)

    def _check_group(self, group, where):
        """Validate (and normalise in place) one group's hyperparameters."""
        group["lr"] = check_nonnegative(type(self).__name__, "lr", group["lr"], where)

    # -- stepping ----------------------------------------------------------------------
    def zero_grad(self, set_to_none=False):
        """Zero every parameter's gradient in place (or drop it with ``set_to_none=True``).

        Zeroing in place (the default here) keeps gradients that are views
        into communication buckets attached to them.
        """
        for group in self.param_groups:
            for p in group["params"]:
                p.zero_grad(set_to_none)

    def step(self, closure=None):
        """Update every parameter that has a gradient, in place.

        Parameters
        ----------
        closure : callable, optional
            Called first (to recompute the loss); its result is returned.

        Returns
        -------
        object
            What ``closure`` returned, or None.
        """
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad or p.grad is None:
                    continue
                self._update(p, p.grad, self.state.setdefault(p, {}), group,
                             array_module(p.data))
        return loss

    def _update(self, p, grad, state, group, xp):
        """Update ``p.data`` in place from ``grad``; ``state`` is p's own dict."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _update")

    # -- checkpoints -----------------------------------------------------------------
    def _indexed_params(self):
        return [p for group in self.param_groups for p in group["params"]]

    def state_dict(self, *, copy=True):
        """The optimizer's state as plain dicts, lists, scalars and array copies.

        Parameters
        ----------
        copy : bool, default=True
            False gives the state's arrays themselves, which later steps
            change: for a caller that copies them at once into arrays of its
            own (:meth:`hpcdist.resilient.State.commit` reuses its previous
            copy).

        Returns
        -------
        dict
            ``{"state": {index: {name: array or scalar}}, "param_groups":
            [{hyperparameter: value, "params": [index, ...]}]}``, where
            ``index`` numbers the parameters across groups in order, as in
            PyTorch. Arrays are copies (of the parameters' array module).
        """
        params = self._indexed_params()
        state = {}
        for index, p in enumerate(params):
            if p in self.state:
                state[index] = {key: (value.copy() if copy and hasattr(value, "shape") else value)
                                for key, value in self.state[p].items()}
        groups, start = [], 0
        for group in self.param_groups:
            saved = {k: v for k, v in group.items() if k != "params"}
            saved["params"] = list(range(start, start + len(group["params"])))
            start += len(group["params"])
            groups.append(saved)
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore hyperparameters and state saved by :meth:`state_dict`.

        Arrays are copied into this optimizer's parameters' array module and
        dtype; integer keys may also be strings (as after a round trip
        through a file format with string keys).

        Raises
        ------
        ValueError
            When the numbers of groups or of parameters per group differ, or a
            saved buffer's shape differs from its parameter's.
        """
        name = type(self).__name__
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise InvalidArgumentError(f"{name}.load_state_dict: the state has {len(saved_groups)} "
                                       f"parameter groups, this optimizer {len(self.param_groups)}")
        for index, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            if len(saved["params"]) != len(group["params"]):
                raise InvalidArgumentError(f"{name}.load_state_dict: group {index} has "
                                           f"{len(saved['params'])} parameters in the state, "
                                           f"{len(group['params'])} in this optimizer")
        params = self._indexed_params()
        new_state = {}
        for key, entry in state_dict["state"].items():
            index = int(key)
            if not 0 <= index < len(params):
                raise InvalidArgumentError(
                    f"{name}.load_state_dict: state for parameter {index}, but "
                    f"this optimizer has {len(params)} parameters")
            p = params[index]
            new_state[p] = {k: self._load_value(p, index, k, v) for k, v in entry.items()}
        for index, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            updated = {**group, **{k: v for k, v in saved.items() if k != "params"}}
            if "betas" in updated:
                updated["betas"] = tuple(updated["betas"])
            self._check_group(updated, f" in param group {index} of the loaded state")
            group.update(updated)
        self.state = new_state

    def _load_value(self, p, index, key, value):
        if hasattr(value, "dtype") and value.dtype.kind in "iub" and np.ndim(value) == 0:
            return value.item()  # a step count
        if hasattr(value, "shape") and (np.ndim(value) > 0 or p.data.ndim == 0):
            if tuple(value.shape) != tuple(p.shape):
                raise InvalidArgumentError(
                    f"{type(self).__name__}.load_state_dict: state {key!r} of "
                    f"parameter {index} has shape {tuple(value.shape)}, the "
                    f"parameter {tuple(p.shape)}")
            xp = array_module(p.data)
            if xp is np and type(value).__module__.startswith("cupy"):
                value = value.get()  # device state into a host optimizer
            return xp.array(value, dtype=p.dtype, copy=True)
        if hasattr(value, "item"):  # NumPy/CuPy scalars and 0-d arrays
            return value.item()
        return value

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for index, group in enumerate(self.param_groups):
            lines.append(f"  group {index}: {len(group['params'])} parameters, " + ", ".join(
                f"{k}={v!r}" for k, v in group.items() if k != "params"))
        return "\n".join(lines) + "\n)"


def add_scaled_(target, scale, values):
    """``target += scale * values`` in place, without a temporary for NumPy.

    Contiguous float32/float64 NumPy arrays go through hpcdist's fused Numba
    kernel (one pass over memory, half the traffic of ``target -= lr * d``,
    and no second BLAS thread pool competing with NumPy's); anything else
    (CuPy, 0-d, other dtypes) falls back to the array expression.
    """
    if (isinstance(target, np.ndarray) and isinstance(values, np.ndarray)
            and target.dtype == values.dtype and target.dtype in _FUSED_DTYPES
            and target.ndim > 0 and target.flags.c_contiguous and values.flags.c_contiguous):
        scale_add(target, values, scale)
    else:
        target += scale * values
    return target


_FUSED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
