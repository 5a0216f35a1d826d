"""What a checkpoint holds: nested containers of arrays and scalars, flattened to paths.

A state is a dict whose values are dicts, lists, tuples, NumPy arrays,
:class:`Sharded` arrays, NumPy scalars, or the Python scalars ``bool``,
``int``, ``float``, ``complex``, ``str``, ``bytes`` and ``None``.
:func:`flatten_state` turns it into ``(path, node)`` pairs (``"model/w"``),
:func:`unflatten_state` builds it back. Every leaf becomes a host NumPy array
plus a kind that says how to turn the array back into the value, so that
nothing is ever pickled.

Any NumPy dtype without Python objects is stored bit for bit: HDF5's own
types where HDF5 has one that maps exactly (bool, integers, float16/32/64,
complex64/128, fixed-length bytes), else opaque bytes of the same item size
(longdouble, datetime64, unicode, structured, ml_dtypes' bfloat16, ...) with
the dtype recorded in the manifest.
"""

import json
import numbers
from collections.abc import Mapping

import ml_dtypes
import numpy as np

from .._arrays import to_host
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["Sharded", "Leaf", "Container", "flatten_state", "unflatten_state",
           "validate_key", "dtype_record", "dtype_from_record", "storage_dtype",
           "decode_leaf", "CONTAINER_KINDS", "SCALAR_KINDS", "LEAF_KINDS"]

SEPARATOR = "/"
CONTAINER_KINDS = ("dict", "list", "tuple")
SCALAR_KINDS = ("bool", "int", "float", "complex", "str", "bytes", "none", "numpy")
LEAF_KINDS = ("array", "sharded") + SCALAR_KINDS
_INT64 = np.iinfo(np.int64)


class Sharded:
    """Mark a state entry as distributed: each rank passes its own block.

    The global array is the concatenation of every rank's ``local_array``
    along ``axis``, in rank order; blocks may differ in length along
    ``axis`` (zero included) but must agree in dtype and in every other
    dimension. On restore, at any number of ranks, each rank gets back its
    balanced block of the global array (the rows
    :class:`hpcdist.data.DataPartitioner` gives it along ``axis``) as a
    plain NumPy array, not a ``Sharded``.

    Parameters
    ----------
    local_array : array of shape (..., n_local, ...)
        This rank's block (NumPy, or a device array, copied to the host
        when saved); at least one dimension.
    axis : int, default=0
        The axis the global array is split along (negative counts from the
        end).

    Examples
    --------
    >>> state = {"X": Sharded(X_local), "w": w}       # doctest: +SKIP
    >>> mgr.save(10, state)                           # doctest: +SKIP
    """

    __slots__ = ("array", "axis")

    def __init__(self, local_array, axis=0):
        if not hasattr(local_array, "shape") or not hasattr(local_array, "dtype"):
            local_array = np.asarray(local_array)
        ndim = len(local_array.shape)
        if ndim == 0:
            raise InvalidArgumentError(
                "Sharded: local_array should have at least one dimension, got a "
                f"0-d {type(local_array).__name__}; wrap scalars without Sharded")
        if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, numbers.Integral):
            raise InvalidArgumentTypeError(f"Sharded: axis={axis!r} should be an int")
        if not -ndim <= axis < ndim:
            raise InvalidArgumentError(
                f"Sharded: axis={axis} is out of range for an array of shape "
                f"{tuple(local_array.shape)} (ndim={ndim})")
        self.array = local_array
        self.axis = int(axis) % ndim

    def __repr__(self):
        return (f"Sharded({type(self.array).__name__} of shape {tuple(self.array.shape)}, "
                f"dtype {self.array.dtype}, axis={self.axis})")


class Container:
    """A dict, list or tuple of the state (``kind``) with ``length`` children."""

    __slots__ = ("kind", "length")

    def __init__(self, kind, length):
        self.kind, self.length = kind, length


class Leaf:
    """One stored value.

    Attributes
    ----------
    kind : str
        One of :data:`LEAF_KINDS`.
    data : ndarray or None
        The value as a host array in its own dtype (None for ``None``).
    axis : int or None
        The split axis of a ``"sharded"`` leaf.
    extra : dict
        Kind-specific manifest fields (``nbytes`` of a str, an int's
        ``encoding``).
    """

    __slots__ = ("kind", "data", "axis", "extra")

    def __init__(self, kind, data, axis=None, extra=None):
        self.kind, self.data, self.axis, self.extra = kind, data, axis, extra or {}


# -- keys -------------------------------------------------------------------------------------

def validate_key(key, parent=""):
    """Check one dict key of the state; returns it as a plain ``str``.

    Keys become HDF5 group and dataset names, so they must be non-empty
    strings without ``/``, ``..`` or NUL, and not ``.``.
    """
    where = f" in {parent!r}" if parent else " at the top level"
    if not isinstance(key, str):
        raise InvalidArgumentTypeError(
            f"checkpoint state key {key!r}{where} is a {type(key).__name__}; keys "
            "should be non-empty str (they name HDF5 groups and datasets)")
    key = str(key)
    problem = None
    if key == "":
        problem = "is empty"
    elif SEPARATOR in key:
        problem = f"contains {SEPARATOR!r}"
    elif ".." in key:
        problem = "contains '..'"
    elif key == ".":
        problem = "is '.'"
    elif "\x00" in key:
        problem = "contains a NUL character"
    else:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            problem = "is not valid UTF-8"
    if problem is not None:
        raise InvalidArgumentError(
            f"checkpoint state key {key!r}{where} {problem}; keys name HDF5 groups "
            "and datasets: use non-empty names without '/', '..' or NUL (nest "
            "dicts instead of using '/', e.g. {'model': {'w': ...}})")
    return key


# -- dtypes -----------------------------------------------------------------------------------

def _is_ml_dtype(dt):
    return getattr(dt.type, "__module__", "") == "ml_dtypes"


def _is_native(dt):
    """Whether HDF5 (through h5py) stores ``dt`` as a type of its own, bit for bit."""
    if dt.fields is not None or dt.subdtype is not None or _is_ml_dtype(dt):
        return False
    if dt.kind == "b":
        return True
    if dt.kind in "iu":
        return dt.itemsize in (1, 2, 4, 8)
    if dt.kind == "f":
        return dt.itemsize in (2, 4, 8)
    if dt.kind == "c":
        return dt.itemsize in (8, 16)
    return dt.kind == "S"


def check_dtype(dt, path):
    """Refuse dtypes that cannot be stored without pickling; returns ``np.dtype(dt)``."""
    dt = np.dtype(dt)
    if dt.hasobject:
        raise InvalidArgumentTypeError(
            f"checkpoint entry {path!r} has dtype {dt} with Python objects; "
            "checkpoints never pickle: convert it to a fixed-size dtype "
            "(numbers, fixed-length strings)")
    if dt.itemsize == 0:
        raise InvalidArgumentTypeError(
            f"checkpoint entry {path!r} has a dtype of item size 0 ({dt}); "
            "give it a fixed size")
    return dt


def storage_dtype(dt):
    """``(dtype in the file, "native" or "opaque")`` for arrays of ``dt``."""
    dt = np.dtype(dt)
    if _is_native(dt):
        return dt, "native"
    return np.dtype(f"V{dt.itemsize}"), "opaque"


def dtype_record(dt):
    """A JSON-able description of ``dt`` that :func:`dtype_from_record` reverses."""
    dt = np.dtype(dt)
    record = {"name": dt.name, "str": dt.str, "itemsize": dt.itemsize}
    if _is_ml_dtype(dt):
        record["ml_dtypes"] = dt.type.__name__
    elif dt.fields is not None or dt.subdtype is not None:
        record["descr"] = dt.descr
    return record


def _descr_from_json(value):
    """JSON lists back into the tuples of a NumPy ``descr``."""
    if isinstance(value, str):
        return value
    fields = []
    for field in value:
        name = tuple(field[0]) if isinstance(field[0], list) else field[0]
        entry = [name, _descr_from_json(field[1])]
        if len(field) > 2:
            entry.append(tuple(field[2]))
        fields.append(tuple(entry))
    return fields


def dtype_from_record(record):
    """The dtype that :func:`dtype_record` described (no code is evaluated).

    Raises
    ------
    ValueError
        When the record does not describe a dtype this NumPy can build.
    """
    try:
        if "ml_dtypes" in record:
            name = record["ml_dtypes"]
            kind = getattr(ml_dtypes, name, None) if isinstance(name, str) else None
            if not isinstance(kind, type):
                raise InvalidArgumentError(f"ml_dtypes has no dtype {name!r}")
            dt = np.dtype(kind)
        elif "descr" in record:
            dt = np.lib.format.descr_to_dtype(_descr_from_json(record["descr"]))
        else:
            dt = np.dtype(str(record["str"]))
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        raise InvalidArgumentError(
            f"dtype record {json.dumps(record)} cannot be read: {error}") from None
    if dt.itemsize != record.get("itemsize", dt.itemsize) or dt.hasobject:
        raise InvalidArgumentError(f"dtype record {json.dumps(record)} does not match dtype {dt}")
    return dt


# -- flattening -------------------------------------------------------------------------------

def _array_leaf(kind, array, path, axis=None):
    if isinstance(array, np.ma.MaskedArray):
        raise InvalidArgumentTypeError(
            f"checkpoint entry {path!r} is a masked array; save its .data and "
            ".mask (np.ma.getmaskarray) as two entries")
    array = np.asarray(to_host(array))  # np.matrix and other subclasses as plain arrays
    if type(array) is not np.ndarray:
        array = array.view(np.ndarray)
    dt = check_dtype(array.dtype, path)
    if dtype_from_record(json.loads(json.dumps(dtype_record(dt)))) != dt:
        raise InvalidArgumentTypeError(
            f"checkpoint entry {path!r}: dtype {dt!r} cannot be described "
            "exactly; use a plain or structured NumPy dtype")
    return Leaf(kind, array, axis)


def _scalar_leaf(value, path):
    if isinstance(value, np.generic):
        return Leaf("numpy", _array_leaf("array", np.asarray(value), path).data)
    if isinstance(value, (bool, np.bool_)):
        return Leaf("bool", np.asarray(bool(value)))
    if isinstance(value, numbers.Integral) and isinstance(value, int):
        value = int(value)
        if _INT64.min <= value <= _INT64.max:
            return Leaf("int", np.asarray(value, dtype=np.int64), extra={"encoding": "int64"})
        digits = str(value).encode("ascii")
        return Leaf("int", np.asarray(digits, dtype=f"S{len(digits)}"),
                    extra={"encoding": "decimal", "nbytes": len(digits)})
    if isinstance(value, float):
        return Leaf("float", np.asarray(float(value), dtype=np.float64))
    if isinstance(value, complex):
        return Leaf("complex", np.asarray(complex(value), dtype=np.complex128))
    if isinstance(value, (str, bytes)):
        raw = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        kind = "str" if isinstance(value, str) else "bytes"
        return Leaf(kind, np.asarray(raw, dtype=f"S{max(len(raw), 1)}"),
                    extra={"nbytes": len(raw)})
    if value is None:
        return Leaf("none", None)
    return None


def flatten_state(state):
    """The nodes of ``state`` in order, as ``[(path, Container | Leaf), ...]``.

    Parameters
    ----------
    state : dict
        See the module docstring.

    Raises
    ------
    TypeError, ValueError
        For a value that cannot be stored or a key that cannot name a
        dataset, naming its path.
    """
    if not isinstance(state, Mapping):
        raise InvalidArgumentTypeError(
            f"checkpoint state should be a dict of arrays and scalars, got "
            f"{type(state).__name__}")
    nodes = []

    def visit(value, path):
        if isinstance(value, Sharded):
            nodes.append((path, _array_leaf("sharded", value.array, path, value.axis)))
        elif isinstance(value, Mapping):
            nodes.append((path, Container("dict", len(value))))
            for key, child in value.items():
                key = validate_key(key, path)
                visit(child, f"{path}{SEPARATOR}{key}" if path else key)
        elif isinstance(value, (list, tuple)):
            nodes.append((path, Container("tuple" if isinstance(value, tuple) else "list",
                                          len(value))))
            for index, child in enumerate(value):
                visit(child, f"{path}{SEPARATOR}{index}" if path else str(index))
        elif isinstance(value, np.ndarray) or (hasattr(value, "__cuda_array_interface__")
                                                and hasattr(value, "get")):
            nodes.append((path, _array_leaf("array", value, path)))
        else:
            leaf = _scalar_leaf(value, path)
            if leaf is None:
                raise InvalidArgumentTypeError(
                    f"checkpoint entry {path!r} is a {type(value).__module__}."
                    f"{type(value).__qualname__}; a state holds dicts, lists and tuples of "
                    "NumPy arrays, Sharded arrays, NumPy scalars and bool, int, float, "
                    "complex, str, bytes or None (convert it, e.g. with np.asarray)")
            nodes.append((path, leaf))

    visit(state, "")
    return nodes[1:]  # the root dict itself is implicit


def decode_leaf(kind, array, extra):
    """The value of a leaf from its array (in its own dtype) and manifest fields."""
    if kind in ("array", "sharded"):
        return array
    if kind == "none":
        return None
    if kind == "numpy":
        return array[()]
    if kind == "bool":
        return bool(array[()])
    if kind == "int":
        if extra.get("encoding") == "decimal":
            return int(array.tobytes()[:extra["nbytes"]].decode("ascii"))
        return int(array[()])
    if kind == "float":
        return float(array[()])
    if kind == "complex":
        return complex(array[()])
    raw = array.tobytes()[:extra["nbytes"]]
    return raw.decode("utf-8") if kind == "str" else raw


def unflatten_state(items):
    """Build the nested state from ``[(path, kind, value_or_length), ...]`` in save order.

    Containers carry their kind (``"dict"``, ``"list"``, ``"tuple"``) and
    None as value; leaves their decoded value.
    """
    children = {"": []}
    kinds = {"": "dict"}
    values = {}
    for path, kind, value in items:
        parent, _, key = path.rpartition(SEPARATOR)
        children[parent].append((key, path))
        kinds[path] = kind
        if kind in CONTAINER_KINDS:
            children[path] = []
        else:
            values[path] = value

    def build(path):
        kind = kinds[path]
        if kind not in CONTAINER_KINDS:
            return values[path]
        if kind == "dict":
            return {key: build(child) for key, child in children[path]}
        ordered = sorted(children[path], key=lambda pair: int(pair[0]))
        sequence = [build(child) for _, child in ordered]
        return tuple(sequence) if kind == "tuple" else sequence

    return build("")
