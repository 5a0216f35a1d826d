"""The save plan: which rank writes which bytes where, agreed from every rank's state.

Every rank flattens its state and describes it (paths, kinds, dtypes,
shapes, split axes: no values); the descriptions are gathered and
:func:`make_plan` turns them, identically on every rank, into the manifest
entries and each rank's share of the writing:

* a :class:`~hpcdist.checkpoint.Sharded` entry: every rank writes its own
  block; the global array is their concatenation along the split axis;
* a replicated array of at least :data:`STRIPE_MIN_BYTES` (and one
  dimension or more): striped, rank ``r`` writes rows
  ``balanced_range(n, size, r)`` of it (the rows
  :class:`hpcdist.data.DataPartitioner` gives rank ``r``), so the bytes are
  written once and the work is spread;
* anything smaller (scalars, strings, small arrays): rank 0 writes it.

Backends place those writes differently: ``"sharded"`` gives every rank
its own file (small entries go straight into ``index.h5``), ``"mpio"`` puts
every entry whole into the shared ``index.h5``.
"""

import json
import zlib

import numpy as np

from .._partition import balanced_counts, offsets_of
from ..comm.checks import format_ranks
from ..exceptions import ConfigMismatchError
from .checksum import format_crc
from .state import CONTAINER_KINDS, Container, dtype_from_record, dtype_record, storage_dtype

__all__ = ["INDEX_FILE", "STRIPE_MIN_BYTES", "rank_file", "balanced_range", "describe",
           "make_plan", "Plan", "local_writes", "Write"]

INDEX_FILE = "index.h5"
STRIPE_MIN_BYTES = 1 << 20


def rank_file(rank):
    """``rank_00003.h5``: the file rank 3 writes with the sharded backend."""
    return f"rank_{rank:05d}.h5"


def balanced_range(total, parts, index):
    """``(start, stop)``: block ``index`` of ``total`` items cut into ``parts`` balanced blocks.

    The blocks are those of :func:`~hpcdist._partition.balanced_counts` (the
    split :class:`hpcdist.data.DataPartitioner` makes); ``start == stop``
    for an empty block.
    """
    counts = balanced_counts(total, parts)
    start = int(offsets_of(counts)[index])
    return start, start + counts[index]


def describe(nodes):
    """A small picklable description of a flattened state (no values).

    Returns
    -------
    list of tuple
        ``(path, kind, length)`` for containers, ``(path, kind, dtype_json,
        shape, axis, extra_json, crc)`` for leaves; ``crc`` is the CRC-32 of a
        replicated leaf's bytes (None for a Sharded one), so that ranks holding
        different values of an entry that is written once are caught.
    """
    description = []
    for path, node in nodes:
        if isinstance(node, Container):
            description.append((path, node.kind, node.length))
        else:
            dtype = None if node.data is None else json.dumps(dtype_record(node.data.dtype))
            shape = None if node.data is None else tuple(node.data.shape)
            crc = None if node.kind == "sharded" or node.data is None else _crc32(node.data)
            description.append((path, node.kind, dtype, shape, node.axis,
                                json.dumps(node.extra, sort_keys=True), crc))
    return description


def _crc32(array):
    return zlib.crc32(np.ascontiguousarray(array).reshape(-1).view(np.uint8))


class Plan:
    """The agreed layout of one save.

    Attributes
    ----------
    step, world_size : int
    backend : {"sharded", "mpio"}
    order : list of str
        Every path (containers and leaves) in rank 0's state order.
    entries : dict
        path -> the manifest entry (JSON-able): containers
        ``{"kind", "length"}``; leaves ``{"kind", "dtype", "storage",
        "shape", "axis", "dataset", "pieces", ...}``.
    contributions : dict
        leaf path -> ``[(rank, start, stop), ...]``: who writes which
        range along the entry's axis (``(0, None, None)`` for 0-d leaves).
    inline : set of str
        Leaves that rank 0 writes whole (into ``index.h5`` with the
        sharded backend).
    """

    def __init__(self, step, world_size, backend):
        self.step, self.world_size, self.backend = step, world_size, backend
        self.order, self.entries, self.contributions, self.inline = [], {}, {}, set()

    def leaves(self):
        """Leaf paths in order."""
        return [path for path in self.order if self.entries[path]["kind"] not in CONTAINER_KINDS]


def _grouped(values):
    groups = {}
    for rank, value in enumerate(values):
        groups.setdefault(value, []).append(rank)
    return ", ".join(f"{value} on {format_ranks(ranks)}" for value, ranks in groups.items())


def _kind_name(kind):
    return {"sharded": "Sharded", "array": "a replicated array"}.get(kind, kind)


def _check_same(path, label, values):
    if len(set(values)) > 1:
        raise ConfigMismatchError(f"checkpoint entry {path!r} differs between ranks: {label} "
                                   f"{_grouped(values)}")


def _check_structure(descriptions):
    """Raise ConfigMismatchError unless every rank describes the same entries."""
    by_rank = [{item[0]: item for item in description} for description in descriptions]
    paths = set().union(*by_rank)
    for path in sorted(paths):
        missing = [rank for rank, items in enumerate(by_rank) if path not in items]
        if missing:
            raise ConfigMismatchError(
                f"checkpoint entry {path!r} is missing on {format_ranks(missing)} "
                "(every rank must save the same entries; a rank without data "
                "passes an empty Sharded block)")
    for path in (item[0] for item in descriptions[0]):
        items = [items[path] for items in by_rank]
        _check_same(path, "it is", [_kind_name(item[1]) for item in items])
        kind = items[0][1]
        if kind in CONTAINER_KINDS:
            _check_same(path, "length", [item[2] for item in items])
            continue
        _check_same(path, "dtype", [None if item[2] is None else json.loads(item[2])["name"]
                                    for item in items])
        _check_same(path, "dtype", [item[2] for item in items])
        if kind == "sharded":
            _check_same(path, "split axis", [item[4] for item in items])
            axis = items[0][4]
            _check_same(path, "ndim", [len(item[3]) for item in items])
            _check_same(path, "shape apart from the split axis",
                        [str(item[3][:axis] + ("*",) + item[3][axis + 1:]).replace("'", "")
                         for item in items])
        else:
            if kind == "array":
                values = [item[3] for item in items]
                if len(set(values)) > 1:
                    raise ConfigMismatchError(
                        f"checkpoint entry {path!r} is replicated (not Sharded) "
                        f"but its shape differs between ranks: shape "
                        f"{_grouped(values)}; wrap per-rank blocks in "
                        "Sharded(local_array, axis=...)")
            crcs = [item[6] for item in items]
            if len(set(crcs)) > 1:
                raise ConfigMismatchError(
                    f"checkpoint entry {path!r} is replicated (not Sharded) and written once, "
                    f"but its value differs between ranks: CRC-32 "
                    f"{_grouped([None if crc is None else format_crc(crc) for crc in crcs])}; "
                    "save the same value on every rank, or wrap per-rank values in "
                    "Sharded(local_array, axis=...)")


def make_plan(descriptions, step, backend):
    """The plan of a save from every rank's :func:`describe` (rank order).

    Raises
    ------
    ValueError
        When the ranks' states do not match (the same on every rank, since
        every rank sees the same descriptions).
    """
    _check_structure(descriptions)
    world_size = len(descriptions)
    plan = Plan(step, world_size, backend)
    by_rank = [{item[0]: item for item in description} for description in descriptions]
    for item in descriptions[0]:
        path, kind = item[0], item[1]
        plan.order.append(path)
        if kind in CONTAINER_KINDS:
            plan.entries[path] = {"kind": kind, "length": item[2]}
            continue
        _, _, dtype_json, shape, axis, extra_json, _ = item
        entry = {"kind": kind, "dataset": path, **json.loads(extra_json)}
        plan.entries[path] = entry
        if dtype_json is None:  # None: no data at all
            entry["pieces"] = []
            plan.contributions[path] = []
            plan.inline.add(path)
            continue
        record = json.loads(dtype_json)
        entry["dtype"] = record
        entry["storage"] = storage_dtype(dtype_from_record(record))[1]
        size = int(np.prod(shape, dtype=np.int64))
        striped = False
        if kind == "sharded":
            lengths = [by_rank[rank][path][3][axis] for rank in range(world_size)]
            shape = shape[:axis] + (sum(lengths),) + shape[axis + 1:]
            size = int(np.prod(shape, dtype=np.int64))
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64).tolist()
            contributions = [(rank, offsets[rank], offsets[rank + 1])
                             for rank in range(world_size) if lengths[rank] > 0]
        elif len(shape) == 0:
            axis, contributions = None, [(0, None, None)]
        else:
            axis = 0
            striped = size * record["itemsize"] >= STRIPE_MIN_BYTES
            counts = balanced_counts(shape[0], world_size if striped else 1)
            contributions = [(rank, int(start), int(start) + count) for rank, (start, count)
                             in enumerate(zip(offsets_of(counts), counts)) if count > 0]
        if size == 0:
            contributions = []  # nothing to write or read: an empty dataset in index.h5
        entry["shape"] = list(shape)
        entry["axis"] = axis
        plan.contributions[path] = contributions
        inline = backend == "mpio" or not contributions or (kind != "sharded" and not striped)
        if inline:
            plan.inline.add(path)
        entry["pieces"] = _pieces(path, axis, shape, contributions, inline)
    return plan


def _pieces(path, axis, shape, contributions, inline):
    """The manifest's pieces of a leaf: where each range of it lives."""
    if not contributions:
        return []
    if axis is None:
        return [{"file": INDEX_FILE if inline else rank_file(contributions[0][0]),
                 "dataset": path}]
    if inline:
        return [{"file": INDEX_FILE, "dataset": path, "start": 0, "stop": shape[axis]}]
    return [{"file": rank_file(rank), "dataset": path, "start": start, "stop": stop}
            for rank, start, stop in contributions]


class Write:
    """One block this rank writes.

    Attributes
    ----------
    path : str
        The leaf (and dataset name).
    source : ndarray
        The bytes to write, C-contiguous, in the storage dtype.
    axis : int or None
        The entry's axis (None for 0-d).
    start : int or None
        Where ``source`` begins along ``axis`` in the global array.
    """

    __slots__ = ("path", "source", "axis", "start")

    def __init__(self, path, source, axis, start):
        self.path, self.source, self.axis, self.start = path, source, axis, start


def _storage_view(array, entry):
    array = np.require(array, requirements="C")  # keeps 0-d arrays 0-d
    if entry["storage"] == "opaque":
        array = array.view(f"V{array.dtype.itemsize}")
    return array


def local_writes(plan, leaves, rank, *, copy=False):
    """The blocks ``rank`` writes, from its leaves (``{path: Leaf}``).

    Parameters
    ----------
    copy : bool, default=False
        Copy every block (so the caller may change its arrays while a
        background thread writes).
    """
    writes = []
    for path in plan.leaves():
        entry = plan.entries[path]
        for owner, start, stop in plan.contributions[path]:
            if owner != rank:
                continue
            data = leaves[path].data
            if entry["kind"] != "sharded" and entry["axis"] is not None:
                data = data[start:stop]
            source = _storage_view(data, entry)
            if copy:
                source = np.array(source, copy=True)
            writes.append(Write(path, source, entry["axis"], start))
    return writes
