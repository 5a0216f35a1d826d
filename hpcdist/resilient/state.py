"""The training state that survives a lost rank: committed in memory on every rank."""

import copy

import numpy as np

from ..comm import resolve_context
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError, InvalidStateError
from ..kernels.streaming import stream_copy
from ..nn import Module
from ..nn.optim import Optimizer
from ..parallel import ShardedDataParallel

__all__ = ["State", "TorchState"]

_IMMUTABLE = (int, float, bool, str, bytes, type(None))
_OWN = ("_values", "_committed", "_callbacks", "_commits", "ranks_lost")


def _refuse_sharded(name, value):
    if isinstance(value, ShardedDataParallel):
        raise InvalidArgumentError(
            f"State({name}=...): a ShardedDataParallel model keeps each shard on one rank only, "
            "so a lost rank takes its shards with it and no survivor's commit could restore "
            "them; commit a DistributedDataParallel model (every rank holds all of it)")


def _is_tensor(value):
    return type(value).__module__.startswith("torch") and hasattr(value, "copy_")


def _same_layout(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and getattr(a, "device", None) == \
        getattr(b, "device", None)


def _refresh(saved, current):
    """A copy of ``current`` that later training does not change, written into the arrays
    of ``saved`` (the previous copy) where their layout matches: a commit every step
    then allocates nothing, and its streaming copy leaves the caches to training."""
    if type(current) in _IMMUTABLE:
        return current
    if isinstance(current, np.ndarray) and type(saved) is np.ndarray \
            and _same_layout(saved, current):
        stream_copy(saved, current)
        return saved
    if _is_tensor(current) and _is_tensor(saved) and _same_layout(saved, current):
        saved.copy_(current.detach())
        return saved
    if isinstance(current, dict) and type(saved) is type(current) \
            and saved.keys() == current.keys():
        return type(current)((key, _refresh(saved[key], value)) for key, value in current.items())
    if type(current) in (list, tuple) and type(saved) is type(current) \
            and len(saved) == len(current):
        return type(current)(_refresh(old, new) for old, new in zip(saved, current))
    return copy.deepcopy(current)


def _snapshot(value, saved=None):
    """A copy of ``value`` (its ``state_dict()`` when it has one) that later training does
    not change, reusing the arrays of ``saved``, the previous copy."""
    if isinstance(value, (Module, Optimizer)):
        value = value.state_dict(copy=False)  # its arrays are copied into saved's below
    elif hasattr(value, "state_dict") and hasattr(value, "load_state_dict"):
        value = value.state_dict()
    return _refresh(saved, value)


class State:
    """Values that training must not lose, committed in memory on every rank.

    Parameters
    ----------
    **values
        Arrays, scalars, hpcdist.nn modules and optimizers, and anything with
        ``state_dict()``/``load_state_dict()``; read and set them as
        attributes (``state.step += 1``).

    Attributes
    ----------
    ranks_lost : list of int
        Every rank lost so far, numbered as at the start of its loss.

    Notes
    -----
    :meth:`commit` copies the values on this rank, in memory, without
    communicating; after a loss :func:`~hpcdist.resilient.run` restores the
    lowest surviving rank's copy on every rank, so all ranks agree.
    Objects with ``load_state_dict`` are restored in place (an optimizer keeps
    its parameters); other values are replaced by the committed copy.
    """

    def __init__(self, **values):
        for name, value in values.items():
            _refuse_sharded(name, value)
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_committed", None)
        object.__setattr__(self, "_callbacks", [])
        object.__setattr__(self, "_commits", 0)
        object.__setattr__(self, "ranks_lost", [])

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        try:
            return values[name]
        except KeyError:
            raise AttributeError(f"State has no value {name!r}; it holds "
                                 f"{', '.join(sorted(values)) or 'nothing'}") from None

    def __setattr__(self, name, value):
        if name in _OWN:
            object.__setattr__(self, name, value)
            return
        _refuse_sharded(name, value)
        self._values[name] = value

    def __repr__(self):
        return f"<hpcdist.resilient.State {', '.join(sorted(self._values))}; " \
               f"{self._commits} commits>"

    @property
    def committed(self):
        """Whether a commit exists."""
        return self._committed is not None

    def commit(self):
        """Copy every value in memory on this rank (no disk, no communication).

        After a lost rank, training goes on from the last commit.
        """
        previous = self._committed or {}
        self._committed = {name: _snapshot(value, previous.get(name))
                           for name, value in self._values.items()}
        self._commits += 1

    def restore(self):
        """Put the last commit back into the values (on this rank)."""
        if self._committed is None:
            raise InvalidArgumentError("State.restore: nothing committed yet; call commit() "
                                       "first")
        for name, saved in self._committed.items():
            value = self._values.get(name)
            if hasattr(value, "load_state_dict") and hasattr(value, "state_dict"):
                value.load_state_dict(copy.deepcopy(saved))
            else:
                self._values[name] = copy.deepcopy(saved)

    def sync(self, ctx=None):
        """Collective: every rank takes the commit of the lowest rank that holds one (after
        a recovery, the lowest surviving rank's; a replacement process holds none) and
        restores it; :attr:`ranks_lost` comes from that rank too."""
        ctx = resolve_context(ctx)
        holds = self._committed is not None
        root = int(ctx.allreduce(np.array([ctx.rank if holds else ctx.size]), op="min")[0])
        if root == ctx.size:
            raise InvalidStateError("State.sync: no rank holds a commit; call commit() on "
                                    "every rank first")
        self._committed, ranks_lost = ctx.broadcast_object(
            (self._committed, list(self.ranks_lost)) if ctx.rank == root else None, root=root)
        self.ranks_lost[:] = ranks_lost
        self.restore()

    def register_reset_callbacks(self, callbacks):
        """Append ``callbacks`` (callables without arguments), called in order on every
        rank after each recovery, once the commit is restored (re-partition data there).
        """
        if callable(callbacks):
            callbacks = [callbacks]
        callbacks = list(callbacks)
        for callback in callbacks:
            if not callable(callback):
                raise InvalidArgumentTypeError(f"register_reset_callbacks: {callback!r} is not "
                                               "callable; pass functions without arguments")
        self._callbacks.extend(callbacks)

    def on_reset(self):
        """Run the reset callbacks (:func:`~hpcdist.resilient.run` calls this)."""
        for callback in self._callbacks:
            callback()


class TorchState(State):
    """A :class:`State` for a torch model and optimizer (the extra ``torch``).

    Parameters
    ----------
    model : torch.nn.Module, optional
    optimizer : torch.optim.Optimizer, optional
    **values
        As for :class:`State`.
    """

    def __init__(self, model=None, optimizer=None, **values):
        super().__init__(model=model, optimizer=optimizer, **values)
