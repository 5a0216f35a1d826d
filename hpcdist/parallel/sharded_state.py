"""The state of a sharded model: checkpoint entries, loading, and the whole model (private).

:func:`sharded_state` gives each rank's rows of every parameter and of the
optimizer state as :class:`hpcdist.checkpoint.Sharded` entries of the
parameter's own shape, in the layout of the plain ``module.state_dict()`` and
``optimizer.state_dict()``. Since a rank owns the balanced block of rows that
:class:`~hpcdist.checkpoint.CheckpointManager` restores into, a checkpoint
saved at one number of ranks restores at any other, and at one rank into the
plain module and optimizer.
"""

from collections import OrderedDict

import numpy as np

from ..checkpoint import Sharded
from ..comm import allgather
from ..exceptions import InvalidArgumentError, StateDictKeyError

__all__ = ["sharded_state", "load_sharded_state", "full_module_state"]

_OWNER = "ShardedDataParallel"


def _whole(sdp, shard, rows):
    """The whole array of which this rank holds ``rows`` (of ``shard``'s parameter)."""
    gathered = (allgather(rows, counts=shard.counts, ctx=sdp.ctx) if sdp.ctx.size > 1
                else rows.copy())
    return shard.whole(gathered)


def _entry(sdp, shard, rows):
    if not shard.shape:  # a 0-d parameter: one replicated value
        return _whole(sdp, shard, rows)
    return Sharded(rows.copy())


def sharded_state(sdp):
    """``{"module": ..., "optimizer": ...}`` with this rank's rows as Sharded entries."""
    shards = {shard.name: shard for shard in sdp.shards}
    module = OrderedDict()
    for name, p in sdp.module.named_parameters():
        shard = shards.get(name)
        module[name] = (p.data.copy() if shard is None
                        else _entry(sdp, shard, shard.stepped.data))
    module.update((name, b.copy()) for name, b in sdp.module.named_buffers())
    saved = sdp.optimizer.state_dict()
    pieces = {id(shard.stepped): shard for shard in sdp.shards}
    params = sdp.optimizer._indexed_params()
    state = {}
    for index, entry in saved["state"].items():
        shard = pieces.get(id(params[index]))
        state[str(index)] = {
            key: (_entry(sdp, shard, value)
                  if shard is not None and hasattr(value, "shape")
                  and tuple(value.shape) == tuple(shard.piece.shape) else value)
            for key, value in entry.items()}
    result = {"module": module, "optimizer": {"state": state,
                                              "param_groups": saved["param_groups"]}}
    if sdp.mixed_precision is not None:
        result["scaler"] = sdp.mixed_precision.scaler.state_dict()
    return result


def _rows_for(shard, value, what):
    """This rank's rows of ``value``: a whole array, or already this rank's block."""
    shape = tuple(np.shape(value))
    if shape == shard.shape:
        return shard.rows_of(np.asarray(value) if not hasattr(value, "reshape") else value)
    if shape == tuple(shard.piece.shape):
        return value
    raise InvalidArgumentError(
        f"{_OWNER}.load_state_dict: {what} has shape {shape}; expected the whole "
        f"{shard.shape} or this rank's rows {tuple(shard.piece.shape)}; load the state a "
        "ShardedDataParallel.state_dict() saved (restored at any number of ranks) or a plain "
        "module's state_dict")


def load_sharded_state(sdp, state, strict=True):
    """Load :func:`sharded_state`'s result as restored at this number of ranks, or whole
    arrays (a plain module's and optimizer's state dicts)."""
    if not isinstance(state, dict) or "module" not in state:
        raise StateDictKeyError(f"{_OWNER}.load_state_dict: expected a dict with a 'module' "
                                "entry (and an 'optimizer' entry), as state_dict() makes, got "
                                f"{type(state).__name__}"
                                + (f" with keys {sorted(state)}" if isinstance(state, dict)
                                   else ""))
    shards = {shard.name: shard for shard in sdp.shards}
    saved = state["module"]
    targets = [name for name, _ in sdp.module.named_parameters()]
    targets += [name for name, _ in sdp.module.named_buffers()]
    missing = [name for name in targets if name not in saved]
    unexpected = [name for name in saved if name not in targets]
    if strict and (missing or unexpected):
        raise StateDictKeyError(f"{_OWNER}.load_state_dict: missing keys {missing}, unexpected "
                                f"keys {unexpected}; pass strict=False to load the common keys "
                                "only")
    for name, shard in shards.items():
        if name in saved:
            shard.stepped.data[...] = _rows_for(shard, saved[name], repr(name))
            if shard.master is not None:  # the 16-bit rows are the masters rounded
                shard.piece.data[...] = shard.master.data
    sdp.module.load_state_dict({name: value for name, value in saved.items()
                                if name not in shards}, strict=False)
    if "optimizer" in state:
        _load_optimizer(sdp, state["optimizer"])
    if sdp.mixed_precision is not None and "scaler" in state:
        sdp.mixed_precision.scaler.load_state_dict(state["scaler"])


def _load_optimizer(sdp, saved):
    pieces = {id(shard.stepped): shard for shard in sdp.shards}
    params = sdp.optimizer._indexed_params()
    state = {}
    for key, entry in saved["state"].items():
        index = int(key)
        shard = pieces.get(id(params[index])) if 0 <= index < len(params) else None
        state[index] = {name: (_rows_for(shard, value, f"optimizer state {name!r} of parameter "
                                                       f"{index}")
                               if shard is not None and hasattr(value, "shape")
                               and (np.ndim(value) > 0 or not shard.shape) else value)
                        for name, value in entry.items()}
    sdp.optimizer.load_state_dict({"state": state, "param_groups": saved["param_groups"]})


def full_module_state(sdp):
    """The plain module's state dict, whole arrays, on every rank."""
    shards = {shard.name: shard for shard in sdp.shards}
    state = OrderedDict()
    for name, p in sdp.module.named_parameters():
        shard = shards.get(name)
        if shard is None or (sdp.stage < 3 and shard.master is None):
            state[name] = p.data.copy()
        else:  # the masters under mixed precision: the trained float32 weights
            state[name] = _whole(sdp, shard, shard.stepped.data)
    state.update((name, b.copy()) for name, b in sdp.module.named_buffers())
    return state
