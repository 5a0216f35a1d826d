"""Configuration agreement: settings that must be equal on every rank, checked cheaply.

:func:`agree_config` is the one check that estimators, samplers, data
loaders, checkpoints and wrappers call at the start of a collective
operation with the settings every rank must share (parameters, seeds, input
dtype and width). Each rank describes its settings as text, hashes them and
all ranks exchange the 16-byte digests in one ``Allgather``; only when the
digests differ are the descriptions themselves gathered, to name the first
differing setting and what each rank has. Always on, not only in check mode.
"""

import enum
import hashlib
import types

import numpy as np

from ..exceptions import ConfigMismatchError
from .checks import format_ranks, mark_raised_on_every_rank, watched
from .mpi import MPI

__all__ = ["agree_config", "describe_value", "Described", "described_layouts"]

_DIGEST_BYTES = 16
_PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes)


class Described(str):
    """A setting given as its description: compared and shown as written (no quotes)."""


def described_layouts(named_values):
    """``{name: "float32[10, 5]"}``: the dtype and shape of each array or tensor (NumPy,
    CuPy, torch), ``"a TYPE"`` for other values; what a model-layout check compares."""
    return {name: Described(f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
                            if hasattr(value, "shape") and hasattr(value, "dtype")
                            else f"a {type(value).__name__}")
            for name, value in named_values}


def _array_description(array):
    array = np.ascontiguousarray(array)
    digest = hashlib.blake2b(array.view(np.uint8).reshape(-1) if array.size else b"",
                             digest_size=8).hexdigest()
    return f"{array.dtype}{list(array.shape)} array (hash {digest})"


def _object_description(value):
    kind = type(value)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if hasattr(value, "get_params"):  # an estimator or compressor: its own settings
        return f"{name}({describe_value(value.get_params(deep=False))})"
    if isinstance(value, np.random.Generator):
        return f"{name}({describe_value(value.bit_generator.state)})"
    if isinstance(value, np.random.RandomState):
        key, position = value.get_state()[1:3]
        return f"{name}({_array_description(key)}, pos={position})"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        return f"{value.__module__}.{value.__qualname__}"
    if kind.__repr__ is object.__repr__:  # a repr holding a memory address differs by rank
        return f"{name}({describe_value(vars(value)) if hasattr(value, '__dict__') else ''})"
    return repr(value)


def describe_value(value):
    """A text that is equal on two ranks exactly when ``value`` is.

    Plain values (numbers compare exactly, through ``repr``), strings, tuples,
    lists and dicts of them read as written; a NumPy scalar reads as the
    Python number; an array reads as its dtype, shape and a hash of its bytes;
    other objects as their type and settings, never their memory address.

    Parameters
    ----------
    value : object
        A setting, e.g. ``8``, ``1e-3``, ``"k-means++"``, ``(100,)``, an ndarray.

    Returns
    -------
    str
    """
    if isinstance(value, Described):
        return str(value)
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, np.generic):  # before the plain types: np.float64 is a float
        return repr(value.item())
    if isinstance(value, _PLAIN_TYPES):
        return repr(value)
    if isinstance(value, np.dtype):
        return f"dtype {value}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(describe_value(item) for item in value)
        return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else (
            f"({inner})" if isinstance(value, tuple) else f"[{inner}]")
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda item: str(item[0]))
        return "{" + ", ".join(f"{key!r}: {describe_value(item)}" for key, item in items) + "}"
    if isinstance(value, np.ndarray):
        return _array_description(value)
    if hasattr(value, "__cuda_array_interface__") and hasattr(value, "get"):
        return _array_description(value.get())  # a device array: compared on the host
    return _object_description(value)


def _digest(descriptions):
    text = "\x1f".join(f"{name}\x1e{text}" for name, text in descriptions)
    return np.frombuffer(hashlib.blake2b(text.encode(), digest_size=_DIGEST_BYTES).digest(),
                         dtype=np.uint8)


def _ranks_have(ranks):
    return f"{format_ranks(ranks)} {'has' if len(ranks) == 1 else 'have'}"


def _first_difference(where, all_descriptions):
    """The message naming the first setting (in rank 0's order) that differs."""
    tables = [dict(descriptions) for descriptions in all_descriptions]
    names = list(dict.fromkeys(name for descriptions in all_descriptions
                               for name, _ in descriptions))
    for name in names:
        values = [table.get(name, "nothing") for table in tables]
        if len(set(values)) > 1:
            groups = {}
            for rank, value in enumerate(values):
                groups.setdefault(value, []).append(rank)
            listed = ", ".join(f"{_ranks_have(ranks)} {value}" for value, ranks in groups.items())
            return f"{where}: {name} differs across ranks: {listed}"
    return f"{where}: settings differ across ranks in their order"  # same items, other order


def agree_config(ctx, where, values, fix=None):
    """Collective: raise on every rank unless every rank passes the same settings.

    Parameters
    ----------
    ctx : Context
        Its private communicator carries the check, apart from user traffic.
    where : str
        The operation, for the message, e.g. ``"KMeans.fit"``.
    values : dict
        Setting name -> value (plain Python values, small tuples, dtypes, arrays;
        see :func:`describe_value`). Every rank passes the same names.
    fix : str, optional
        What the user should do, appended to the message.

    Raises
    ------
    ConfigMismatchError
        On every rank, naming the first differing setting and each rank's value:
        ``KMeans.fit: n_clusters differs across ranks: rank 0 has 8, rank 1 has 4``.
    """
    if ctx.size == 1:
        return
    descriptions = [(str(name), describe_value(value)) for name, value in values.items()]
    digests = np.empty((ctx.size, _DIGEST_BYTES), dtype=np.uint8)
    with watched(ctx, f"agree_config ({where})"):
        ctx._private_comm.Allgather([_digest(descriptions), MPI.BYTE], [digests, MPI.BYTE])
        if (digests == digests[0]).all():
            return
        all_descriptions = ctx._private_comm.allgather(descriptions)
    message = _first_difference(where, all_descriptions)
    raise mark_raised_on_every_rank(
        ConfigMismatchError(message if fix is None else f"{message}; {fix}"))
