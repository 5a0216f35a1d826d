"""A model's trainable parameters and gradients as arrays, packed flat for averaging.

The model-averaging strategies reach a model only through :class:`Replica`:
an :class:`hpcdist.nn.Module`'s ``Parameter.data`` and ``.grad`` directly, a
``torch.nn.Module``'s tensors through comm's zero-copy views
(:func:`hpcdist.comm.tensors.tensor_view`, which :mod:`hpcdist.torch` uses
too), so one implementation serves both kinds of model and this layer never
imports the torch adapter. :class:`FlatBuffers` packs the arrays into one
flat buffer per dtype and array module, for one coalesced collective, and
writes results back in place.
"""

import numpy as np

from .._arrays import array_module
from ..comm.agreement import described_layouts
from ..comm.tensors import tensor_view
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ..nn.module import Module
from .ddp import DistributedDataParallel

__all__ = ["Replica", "FlatBuffers"]


def _is_torch_module(module):
    """Whether ``module`` is a ``torch.nn.Module`` (without importing torch)."""
    return any(cls.__name__ == "Module" and cls.__module__.startswith("torch.nn")
               for cls in type(module).__mro__)


def _check_optimizer_owns(owner, optimizer, module, trainable):
    """Raise unless ``optimizer`` steps exactly ``module``'s parameters.

    Both hpcdist.nn and torch optimizers list their parameters in
    ``param_groups[i]["params"]`` (the module's own objects, compared by
    identity). The optimizer may hold frozen parameters of the module, but
    none of another model and every trainable one: otherwise the strategy
    would average a model that its optimizer never changes.

    Parameters
    ----------
    owner : str
        The strategy, for messages.
    optimizer : hpcdist.nn.optim.Optimizer or torch.optim.Optimizer
    module : hpcdist.nn.Module or torch.nn.Module
    trainable : list of (str, parameter)
        The module's trainable parameters.
    """
    groups = getattr(optimizer, "param_groups", None)
    if groups is None:
        raise InvalidArgumentTypeError(
            f"{owner}: optimizer is a {type(optimizer).__name__} without param_groups; pass "
            "the optimizer of the module's parameters (an hpcdist.nn.optim or torch.optim "
            "optimizer)")
    held = {id(p) for group in groups for p in group["params"]}
    foreign = len(held - {id(p) for p in module.parameters()})
    missing = [name for name, p in trainable if id(p) not in held]
    if foreign or missing:
        found = []
        if foreign:
            found.append(f"holds {foreign} parameter(s) that are not the module's")
        if missing:
            found.append(f"lacks {len(missing)} of the module's {len(trainable)} trainable "
                         f"parameter(s) (the first: {missing[0]!r})")
        raise InvalidArgumentError(
            f"{owner}: the optimizer {' and '.join(found)}, so it would not train the module "
            "the strategy averages; make the optimizer from this module's parameters, e.g. "
            "SGD(module.parameters(), lr=0.1), and pass that module and that optimizer")


class Replica:
    """This rank's copy of a model and its optimizer, seen as arrays.

    Parameters
    ----------
    module : hpcdist.nn.Module or torch.nn.Module
        Not wrapped in a data-parallel wrapper.
    optimizer : hpcdist.nn.optim.Optimizer or torch.optim.Optimizer
        Updates ``module``'s parameters in place.
    owner : str
        The strategy, for messages.
    """

    def __init__(self, module, optimizer, owner):
        if isinstance(module, DistributedDataParallel) or \
                type(module).__name__ == "DistributedDataParallel":
            raise InvalidArgumentTypeError(
                f"{owner}: module is a {type(module).__name__}; pass the model itself (the "
                "strategy averages parameters, a data-parallel wrapper would average the "
                "gradients as well)")
        if isinstance(module, Module):
            self.is_torch = False
        elif _is_torch_module(module):
            self.is_torch = True
        else:
            raise InvalidArgumentTypeError(f"{owner}: module is a {type(module).__name__}, not "
                                           "an hpcdist.nn.Module or a torch.nn.Module")
        if not (callable(getattr(optimizer, "step", None))
                and callable(getattr(optimizer, "zero_grad", None))):
            raise InvalidArgumentTypeError(
                f"{owner}: optimizer is a {type(optimizer).__name__}; pass the optimizer of "
                "the module's parameters (an hpcdist.nn.optim or torch.optim optimizer)")
        self.module = module
        self.optimizer = optimizer
        self.named = [(name, p) for name, p in module.named_parameters() if p.requires_grad]
        if not self.named:
            raise InvalidArgumentError(f"{owner}: the module has no trainable parameters")
        _check_optimizer_owns(owner, optimizer, module, self.named)

    def arrays(self):
        """The parameters' values, as arrays sharing their memory."""
        if self.is_torch:
            return [tensor_view(p) for _, p in self.named]
        return [p.data for _, p in self.named]

    def gradients(self):
        """The parameters' gradients as arrays sharing their memory (zeros where none yet)."""
        if not self.is_torch:
            for _, p in self.named:
                if p.grad is None:
                    p.grad = array_module(p.data).zeros_like(p.data)
            return [p.grad for _, p in self.named]
        import torch  # the module is a torch module: the extra is installed

        for _, p in self.named:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        return [tensor_view(p.grad) for _, p in self.named]

    def described(self, values=True):
        """The layout (and the values) every rank must share at the start, for the agreement
        check."""
        described = dict(described_layouts([(f"parameter {name}", p) for name, p in self.named]))
        if values:
            described.update((f"initial values of {name}", array)
                             for (name, _), array in zip(self.named, self.arrays()))
        return described

    # -- local training (federated rounds) ---------------------------------------------------
    def inputs(self, X, y):
        """``X`` and ``y`` as the model takes them (tensors of its dtype for a torch model)."""
        if not self.is_torch:
            return X, y
        import torch

        first = self.named[0][1]
        X = torch.as_tensor(X, device=first.device)
        y = torch.as_tensor(y, device=first.device)
        if X.is_floating_point():
            X = X.to(first.dtype)
        if y.is_floating_point():
            y = y.to(first.dtype)
        return X, y

    def rows(self, data, rows):
        """``data[rows]`` for an array or a tensor."""
        if self.is_torch:
            import torch

            return data[torch.as_tensor(rows, device=data.device)]
        return data[rows]

    def local_step(self, X, y, loss_fn, proximal=None):
        """One optimizer step on a batch; returns the batch's loss.

        ``proximal=(mu, anchors)`` adds FedProx's ``mu * (w - anchor)`` to each
        gradient before the step.
        """
        self.optimizer.zero_grad()
        if self.is_torch:
            loss = loss_fn(self.module(X), y)
            loss.backward()
            value = float(loss.detach())
        else:
            value = float(loss_fn(self.module(X), y))
            self.module.backward(loss_fn.backward())
        if proximal is not None:
            mu, anchors = proximal
            for grad, weight, anchor in zip(self.gradients(), self.arrays(), anchors):
                grad += mu * (weight - anchor)
        self.optimizer.step()
        return value


class FlatBuffers:
    """One flat buffer per kind of array (dtype, array module), for coalesced collectives.

    16-bit floating parameters travel as float32 (averages of 16-bit values
    lose less that way). The first buffer has ``extra`` trailing slots for
    scalars that travel with the parameters (counts, flags).

    Parameters
    ----------
    arrays : list of array
        The parameters (or gradients), in a fixed order.
    extra : int, default=0
    """

    def __init__(self, arrays, extra=0):
        groups = {}
        for index, array in enumerate(arrays):
            key = (np.dtype(array.dtype).str, array_module(array).__name__)
            groups.setdefault(key, []).append(index)
        self.groups = []
        for position, indices in enumerate(groups.values()):
            first = arrays[indices[0]]
            xp = array_module(first)
            dtype = np.float32 if np.dtype(first.dtype).itemsize < 4 else first.dtype
            size = sum(arrays[i].size for i in indices) + (extra if position == 0 else 0)
            self.groups.append((indices, xp.zeros(size, dtype=dtype)))  # extras start at 0
        self.extra = extra
        self._shapes = [tuple(array.shape) for array in arrays]

    @property
    def flats(self):
        """The flat buffers (their contents: zeros, then whatever was last packed or
        received)."""
        return [flat for _, flat in self.groups]

    @property
    def nbytes(self):
        return sum(flat.nbytes for flat in self.flats)

    def extras(self):
        """The trailing slots of the first buffer (a view)."""
        flat = self.groups[0][1]
        return flat[flat.size - self.extra:]

    def pack(self, arrays):
        """Copy ``arrays`` into the buffers; returns them."""
        for indices, flat in self.groups:
            offset = 0
            for index in indices:
                size = arrays[index].size
                flat[offset:offset + size] = arrays[index].reshape(-1)
                offset += size
        return self.flats

    def unpack(self, arrays, flats=None):
        """Copy the buffers (or ``flats`` of the same layout) back into ``arrays``, in place."""
        for array, view in zip(arrays, self.views(flats)):
            array[...] = view

    def views(self, flats=None):
        """Per-array views (of each array's shape) into ``flats`` (default: the buffers)."""
        flats = self.flats if flats is None else flats
        views = {}
        for (indices, _), flat in zip(self.groups, flats):
            offset = 0
            for index in indices:
                shape = self._shapes[index]
                size = int(np.prod(shape))
                views[index] = flat[offset:offset + size].reshape(shape)
                offset += size
        return [views[index] for index in range(len(views))]
