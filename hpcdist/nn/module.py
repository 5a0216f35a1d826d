"""Parameters, modules and containers with explicit forward and backward passes.

A :class:`Module` computes ``forward(x)`` and, given the gradient of the loss
with respect to its output, ``backward(grad_output)`` returns the gradient
with respect to its input and *accumulates* the gradients of its parameters
through :meth:`Parameter.accumulate_grad`. That call fires the parameter's
gradient hooks, which is how :class:`hpcdist.DistributedDataParallel` learns,
layer by layer, that a gradient is ready to be communicated.

Modules are array-module agnostic: they compute with the module (NumPy or
CuPy) of the arrays they are given (see :func:`array_module`).
"""

import types
from collections import OrderedDict

import numpy as np

from .._arrays import array_module
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError, StateDictKeyError

__all__ = ["Parameter", "Module", "Sequential", "array_module"]


class Parameter:
    """A trainable array and its gradient.

    Parameters
    ----------
    data : ndarray
        The values; updated in place by optimizers.
    requires_grad : bool, default=True
        False freezes the parameter: layers skip its gradient and
        optimizers and data parallelism leave it alone.

    Attributes
    ----------
    grad : ndarray or None
        The accumulated gradient, same shape and dtype as ``data``; None
        until the first backward pass (or after ``zero_grad(set_to_none=True)``).
    """

    __slots__ = ("data", "_grad", "requires_grad", "_grad_hooks", "_zero")

    def __init__(self, data, requires_grad=True):
        self.data = data
        self._grad = None
        self.requires_grad = bool(requires_grad)
        self._grad_hooks = []
        # zero_grad ran since the gradient was last written or read: its memory still
        # holds old values, zeroed when read or overwritten by the next gradient
        self._zero = False

    shape = property(lambda self: self.data.shape, doc="Shape of ``data``.")
    dtype = property(lambda self: self.data.dtype, doc="Dtype of ``data``.")
    size = property(lambda self: self.data.size, doc="Number of elements.")
    nbytes = property(lambda self: self.data.nbytes, doc="Bytes of ``data``.")

    @property
    def grad(self):
        grad = self._grad
        if self._zero:
            grad[...] = 0
            self._zero = False  # the reader may write into it
        return grad

    @grad.setter
    def grad(self, value):
        self._grad = value
        self._zero = False

    def __repr__(self):
        return f"Parameter(shape={self.shape}, dtype={self.dtype})"

    def accumulate_grad(self, grad):
        """Add ``grad`` to :attr:`grad` (in place when it exists), then run the hooks.

        In-place accumulation keeps :attr:`grad` pointing at the same memory,
        so a gradient that is a view into a communication bucket stays one.
        """
        if not self.requires_grad:
            return
        if self._grad is None:
            self._grad = grad.astype(self.data.dtype, copy=True)
        elif self._zero:
            self._grad[...] = grad
        else:
            self._grad += grad
        self._zero = False
        for hook in self._grad_hooks:
            hook(self)

    def accumulate_grad_product(self, a, b):
        """Accumulate the matrix product ``a @ b`` into :attr:`grad`.

        Right after :meth:`zero_grad`, the product is written straight into
        the gradient's memory (no temporary, no extra pass over it); the
        result is the same as ``accumulate_grad(a @ b)``.
        """
        grad = self._grad
        if (self.requires_grad and self._zero and isinstance(grad, np.ndarray)
                and grad.flags.c_contiguous and grad.dtype == np.result_type(a, b)
                and grad.shape == (a.shape[0], b.shape[1])):
            np.matmul(a, b, out=grad)
            self._zero = False
            for hook in self._grad_hooks:
                hook(self)
            return
        self.accumulate_grad(a @ b)

    def register_grad_hook(self, hook):
        """Call ``hook(parameter)`` after every :meth:`accumulate_grad`.

        Returns a callable that removes the hook.
        """
        self._grad_hooks.append(hook)
        return lambda: self._grad_hooks.remove(hook)

    def zero_grad(self, set_to_none=False):
        """Zero the gradient (or drop it with ``set_to_none=True``).

        The zeros are written lazily: when :attr:`grad` is next read, unless
        the next backward pass overwrites the memory first.
        """
        if set_to_none:
            self.grad = None
        elif self._grad is not None and not self._zero:
            self._zero = True


class Module:
    """Base class of layers and models.

    Subclasses call ``super().__init__()`` first; attributes assigned a
    :class:`Parameter` or a :class:`Module` are registered automatically (in
    assignment order), arrays that are state but not trainable go through
    :meth:`register_buffer`. Subclasses implement :meth:`forward` and
    :meth:`backward`.
    """

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.__init__ must call "
                                 "super().__init__() before assigning attributes")
        if name in self._buffers and not isinstance(value, (Parameter, Module)):
            self._buffers[name] = value
            return
        for registry in (self._parameters, self._buffers, self._modules):
            registry.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)
            return
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        for registry in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(registry)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def register_buffer(self, name, array):
        """Register ``array`` as state saved with the model but not trained
        (e.g. BatchNorm's running statistics). Reassigning ``self.name``
        afterwards replaces the buffer."""
        self.__dict__.pop(name, None)
        self._buffers[name] = array

    # -- computation ---------------------------------------------------------------
    def forward(self, x):
        """Compute the output for input ``x`` (and remember what backward needs)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement forward")

    def backward(self, grad_output):
        """Given dLoss/dOutput, accumulate parameter gradients and return dLoss/dInput."""
        raise NotImplementedError(f"{type(self).__name__} does not implement backward")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # -- hooks -----------------------------------------------------------------------
    def register_forward_pre_hook(self, hook):
        """Call ``hook(module, args)`` before every forward pass of this module.

        Hooks run however the forward pass is reached (``module(x)``,
        ``module.forward(x)``, or a container calling it), so that data
        parallelism can, for instance, gather a layer's parameters just
        before the layer needs them. Returns a callable that removes the hook.
        """
        return self._add_hook("forward_pre", hook)

    def register_forward_hook(self, hook):
        """Call ``hook(module, args, output)`` after every forward pass of this module.

        Returns a callable that removes the hook.
        """
        return self._add_hook("forward", hook)

    def register_backward_pre_hook(self, hook):
        """Call ``hook(module, grad_output)`` before every backward pass of this module.

        Returns a callable that removes the hook.
        """
        return self._add_hook("backward_pre", hook)

    def register_backward_hook(self, hook):
        """Call ``hook(module, grad_output, grad_input)`` after every backward pass of
        this module (its parameters' gradients have all been accumulated by then).

        Returns a callable that removes the hook.
        """
        return self._add_hook("backward", hook)

    def _add_hook(self, kind, hook):
        if not callable(hook):
            raise InvalidArgumentTypeError(f"{type(self).__name__}: a {kind.replace('_', '-')} "
                                           f"hook must be callable, got {type(hook).__name__}")
        hooks = self.__dict__.get("_hooks")
        if hooks is None:
            hooks = {"forward_pre": [], "forward": [], "backward_pre": [], "backward": []}
            object.__setattr__(self, "_hooks", hooks)
            # instance attributes take precedence over the class's methods, so every way of
            # calling forward/backward runs the hooks; modules without hooks pay nothing
            object.__setattr__(self, "forward", types.MethodType(_hooked_forward, self))
            object.__setattr__(self, "backward", types.MethodType(_hooked_backward, self))
        hooks[kind].append(hook)

        def remove():
            if hook in hooks[kind]:
                hooks[kind].remove(hook)
        return remove

    # -- traversal -----------------------------------------------------------------
    def named_children(self):
        """Direct sub-modules as ``(name, module)`` pairs."""
        return iter(self._modules.items())

    def children(self):
        return (module for _, module in self.named_children())

    def named_modules(self, prefix="", _seen=None):
        """This module and all sub-modules, depth first, as ``(name, module)``.

        A module reachable twice (a shared layer) is listed once.
        """
        seen = set() if _seen is None else _seen
        if id(self) in seen:
            return
        seen.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name, seen)

    def modules(self):
        return (module for _, module in self.named_modules())

    def named_parameters(self, prefix=""):
        """All parameters, in registration order, as ``("layer.weight", p)``."""
        for module_name, module in self.named_modules(prefix):
            for name, parameter in module._parameters.items():
                yield (f"{module_name}.{name}" if module_name else name), parameter

    def parameters(self):
        return (parameter for _, parameter in self.named_parameters())

    def named_buffers(self, prefix=""):
        for module_name, module in self.named_modules(prefix):
            for name, buffer in module._buffers.items():
                yield (f"{module_name}.{name}" if module_name else name), buffer

    def buffers(self):
        return (buffer for _, buffer in self.named_buffers())

    # -- modes and state -------------------------------------------------------------
    def train(self, mode=True):
        """Training mode (Dropout drops, BatchNorm uses batch statistics)."""
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self):
        """Evaluation mode: the same as ``train(False)``."""
        return self.train(False)

    def zero_grad(self, set_to_none=False):
        """Zero every parameter's gradient."""
        for parameter in self.parameters():
            parameter.zero_grad(set_to_none)

    def state_dict(self, *, copy=True):
        """Copies of all parameters and buffers, keyed by dotted name.

        Parameters
        ----------
        copy : bool, default=True
            False gives the arrays themselves, which later training changes:
            for a caller that copies them at once into arrays of its own
            (:meth:`hpcdist.resilient.State.commit` reuses its previous copy).
        """
        state = OrderedDict((name, p.data.copy() if copy else p.data)
                            for name, p in self.named_parameters())
        state.update((name, b.copy() if copy else b) for name, b in self.named_buffers())
        return state

    def load_state_dict(self, state, strict=True):
        """Copy values from ``state`` (as made by :meth:`state_dict`) in place.

        Raises
        ------
        KeyError
            With ``strict=True``, when names are missing or unexpected.
        ValueError
            When a shape differs.
        """
        targets = OrderedDict((name, p.data) for name, p in self.named_parameters())
        targets.update(self.named_buffers())
        missing = [name for name in targets if name not in state]
        unexpected = [name for name in state if name not in targets]
        if strict and (missing or unexpected):
            raise StateDictKeyError(f"load_state_dict: missing keys {missing}, unexpected keys "
                                    f"{unexpected}; pass strict=False to load the common keys "
                                    f"only")
        for name, target in targets.items():
            if name not in state:
                continue
            value = state[name]
            if tuple(np.shape(value)) != tuple(target.shape):
                raise InvalidArgumentError(
                    f"load_state_dict: {name!r} has shape {tuple(np.shape(value))} "
                    f"in the state but {tuple(target.shape)} in the model")
            xp = array_module(target)
            target[...] = xp.asarray(value, dtype=target.dtype)
        return self

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, child in self._modules.items():
            lines.append(f"  ({name}): " + repr(child).replace("\n", "\n  "))
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


def _hooked_forward(module, *args, **kwargs):
    hooks = module._hooks
    for hook in tuple(hooks["forward_pre"]):
        hook(module, args)
    output = type(module).forward(module, *args, **kwargs)
    for hook in tuple(hooks["forward"]):
        hook(module, args, output)
    return output


def _hooked_backward(module, grad_output):
    hooks = module._hooks
    for hook in tuple(hooks["backward_pre"]):
        hook(module, grad_output)
    grad_input = type(module).backward(module, grad_output)
    for hook in tuple(hooks["backward"]):
        hook(module, grad_output, grad_input)
    return grad_input


class Sequential(Module):
    """Modules applied one after the other; backward runs them in reverse.

    Parameters
    ----------
    *layers : Module
    """

    def __init__(self, *layers):
        super().__init__()
        for index, layer in enumerate(layers):
            if not isinstance(layer, Module):
                raise InvalidArgumentTypeError(
                    f"Sequential: layer {index} is a {type(layer).__name__}, "
                    "not an hpcdist.nn.Module")
            setattr(self, str(index), layer)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, index):
        return list(self._modules.values())[index]

    def forward(self, x):
        for layer in self._modules.values():
            x = layer.forward(x)
        return x

    def backward(self, grad_output):
        for layer in reversed(self._modules.values()):
            if grad_output is None:  # a layer before was told it needs no input gradient
                break
            grad_output = layer.backward(grad_output)
        return grad_output
