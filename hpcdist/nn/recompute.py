"""Activation recomputation: keep a block's input, recompute its forward in the backward pass.

A layer remembers in ``forward`` what its ``backward`` needs (its input, a
mask, an output): for a deep model those activations are most of the memory
of a training step. :class:`Checkpoint` wraps a block of layers, lets the
forward pass run as usual, then drops what the block's layers remembered and
keeps only the block's input. Its ``backward`` runs the block's forward again
on that input (restoring, first, the random state that Dropout drew from and
the buffers that BatchNorm updates, so the recomputation sees exactly what the
first pass saw) and then the block's ``backward``: the same outputs and
gradients as without it, for one extra forward pass of the block.
"""

import numpy as np

from ..exceptions import InvalidArgumentTypeError, InvalidStateError
from .module import Module

__all__ = ["Checkpoint"]


class Checkpoint(Module):
    """Run ``module`` keeping only its input; recompute its forward in the backward pass.

    Parameters
    ----------
    module : Module
        The block to recompute (often a few layers in a :class:`Sequential`).

    Examples
    --------
    >>> import numpy as np
    >>> from hpcdist import nn
    >>> block = nn.Checkpoint(nn.Sequential(nn.Linear(4, 16, random_state=0), nn.Tanh(),
    ...                                     nn.Linear(16, 4, random_state=1)))
    >>> out = block(np.ones((2, 4), dtype=np.float32))
    >>> block.backward(np.ones_like(out)).shape
    (2, 4)
    """

    def __init__(self, module):
        super().__init__()
        if not isinstance(module, Module):
            raise InvalidArgumentTypeError(f"Checkpoint: module is a {type(module).__name__}, "
                                           "not an hpcdist.nn.Module")
        self.module = module
        self._saved = None  # (input, random states before the forward, after it)

    def forward(self, x):
        """The module's output; only ``x`` (and random-number states) stay in memory."""
        caches = _layer_caches(self.module)
        before = _random_states(self.module)
        output = self.module.forward(x)
        _restore_caches(self.module, caches)
        self._saved = (x, before, _random_states(self.module))
        return output

    def backward(self, grad_output):
        """Recompute the module's forward on the saved input, then run its backward."""
        if self._saved is None:
            raise InvalidStateError("Checkpoint.backward called before forward (or twice after one "
                               "forward); run forward first")
        x, before, after = self._saved
        self._saved = None
        caches = _layer_caches(self.module)
        buffers = _buffer_copies(self.module)
        _set_random_states(before)
        self.module.forward(x)
        _set_random_states(after)
        _restore_buffers(buffers)
        try:
            return self.module.backward(grad_output)
        finally:
            _restore_caches(self.module, caches)

    def extra_repr(self):
        return ""


def _layer_caches(module):
    """Each sub-module's plain attributes (where layers keep their activations)."""
    return [(m, dict(m.__dict__)) for m in module.modules()]


def _restore_caches(module, caches):
    """Drop every attribute a forward or backward pass added or replaced."""
    for m, attributes in caches:
        current = m.__dict__
        for name in [name for name in current if name not in attributes]:
            if not _is_generator(current[name]):  # one made on first use (a device RNG) stays
                del current[name]
        for name, value in attributes.items():
            if current.get(name) is not value:
                current[name] = value


def _is_generator(value):
    return isinstance(value, np.random.Generator) or (
        hasattr(value, "get_state") and hasattr(value, "set_state"))  # a (CuPy) RandomState


def _random_states(module):
    """The state of every random generator the sub-modules hold (Dropout's)."""
    states = []
    for m in module.modules():
        for value in m.__dict__.values():
            if isinstance(value, np.random.Generator):
                states.append((value, value.bit_generator.state))
            elif _is_generator(value):
                states.append((value, value.get_state()))
    return states


def _set_random_states(states):
    for generator, state in states:
        if isinstance(generator, np.random.Generator):
            generator.bit_generator.state = state
        else:
            generator.set_state(state)


def _buffer_copies(module):
    return [(m, name, value.copy()) for m in module.modules()
            for name, value in m._buffers.items() if hasattr(value, "copy")]


def _restore_buffers(copies):
    for m, name, value in copies:
        target = m._buffers[name]
        if hasattr(target, "shape") and target.shape == value.shape:
            target[...] = value
        else:
            m._buffers[name] = value
