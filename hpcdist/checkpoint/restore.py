"""Reading a committed step: its manifest, the files' checksums, this rank's data.

Reading needs only serial h5py, whatever backend wrote the step: the
manifest says which file and dataset hold each range of each entry, and
every rank opens just the files its ranges live in and reads them as
hyperslabs. Sharded entries are re-split for the reading world size as
:class:`~hpcdist.data.DataPartitioner` splits them (:func:`.plan.balanced_range`).
"""

import os

import h5py
import numpy as np

from ..comm import allgather_object
from .checksum import chunk_items, combine_items, crc32_of_items, format_crc
from .errors import CheckpointCorruptError
from .manifest import (
    COMMIT_FILE,
    MANIFEST_FILE,
    ManifestError,
    leaf_dtype,
    parse_commit,
    parse_manifest,
)
from .plan import balanced_range
from .state import CONTAINER_KINDS, decode_leaf, unflatten_state

__all__ = ["load_manifest", "verify_files", "read_state"]


def _read_bytes(path, what):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise ManifestError(f"{what} is missing") from None
    except OSError as error:
        raise ManifestError(f"{what} cannot be read ({error})") from None


def load_manifest(step_dir, step):
    """The checked manifest of the step in ``step_dir`` (local; no communication).

    Raises
    ------
    ManifestError
        Missing, damaged or inconsistent manifest or COMMIT marker.
    CheckpointError
        A manifest of a format version this hpcdist does not read.
    """
    manifest_raw = _read_bytes(os.path.join(step_dir, MANIFEST_FILE), MANIFEST_FILE)
    commit_raw = _read_bytes(os.path.join(step_dir, COMMIT_FILE), COMMIT_FILE)
    parse_commit(commit_raw, manifest_raw, step)
    return parse_manifest(manifest_raw, step)


def _local_problems(step_dir, files, items, threads):
    """Size checks of every file and CRCs of ``items``; (problems, parts)."""
    problems = []
    for name, info in files.items():
        try:
            size = os.stat(os.path.join(step_dir, name)).st_size
        except FileNotFoundError:
            problems.append(f"{name} is missing")
            continue
        except OSError as error:
            problems.append(f"{name} cannot be read ({error})")
            continue
        if size < info["size"]:
            problems.append(f"{name} is truncated ({size} bytes, the manifest says "
                            f"{info['size']})")
        elif size > info["size"]:
            problems.append(f"{name} has {size} bytes, the manifest says {info['size']}")
    damaged = {problem.split(" ", 1)[0] for problem in problems}
    parts = []
    for item in items:
        if item[0] in damaged:
            continue
        try:
            parts.extend(crc32_of_items(step_dir, [item], threads))
        except OSError as error:
            problems.append(f"{item[0]} cannot be read ({error})")
            damaged.add(item[0])
    return problems, parts


def verify_files(step_dir, manifest, ctx, threads):
    """Collective: check every file's size and CRC-32, the work spread over the ranks.

    Returns
    -------
    list of str
        The problems found (the same list on every rank), empty when all
        files verify.
    """
    files = manifest["files"]
    items = chunk_items({name: info["size"] for name, info in files.items()})
    start, stop = balanced_range(len(items), ctx.size, ctx.rank)
    local = _local_problems(step_dir, files, items[start:stop], threads)
    reports = allgather_object(local, ctx=ctx)
    problems = sorted({problem for found, _ in reports for problem in found})
    damaged = {problem.split(" ", 1)[0] for problem in problems}
    crcs = combine_items([part for _, parts in reports for part in parts])
    for name, info in files.items():
        if name in damaged:
            continue
        actual = format_crc(crcs.get(name, 0))
        if actual != info["crc32"]:
            problems.append(f"{name} is corrupted (CRC-32 {actual}, the manifest says "
                            f"{info['crc32']})")
    return problems


class _Files:
    """The files of one restore, each opened once (read-only) on first use."""

    def __init__(self, step_dir):
        self.step_dir, self.open = step_dir, {}

    def dataset(self, piece, expected_shape, storage):
        name = piece["file"]
        if name not in self.open:
            self.open[name] = h5py.File(os.path.join(self.step_dir, name), "r")
        try:
            dataset = self.open[name][piece["dataset"]]
        except KeyError:
            raise CheckpointCorruptError(f"{name} has no dataset {piece['dataset']!r}") from None
        if dataset.shape != tuple(expected_shape) or dataset.dtype != storage:
            raise CheckpointCorruptError(
                f"{name}:{piece['dataset']} is {dataset.dtype}{list(dataset.shape)}, the "
                f"manifest says {storage}{list(expected_shape)}")
        return dataset

    def close(self):
        for handle in self.open.values():
            handle.close()
        self.open.clear()


def _read_leaf(files, entry, rank, size):
    """This rank's part of a leaf as an array in its own dtype."""
    dtype, storage = leaf_dtype(entry)
    shape, axis = entry["shape"], entry["axis"]
    if axis is None:
        out = np.empty((), dtype=storage)
        files.dataset(entry["pieces"][0], (), storage).read_direct(out)
    else:
        length = shape[axis]
        if entry["kind"] == "sharded":
            low, high = balanced_range(length, size, rank)
        else:
            low, high = 0, length
        out = np.empty(tuple(shape[:axis]) + (high - low,) + tuple(shape[axis + 1:]),
                       dtype=storage)
        for piece in entry["pieces"] if out.size else ():
            start, stop = piece["start"], piece["stop"]
            first, last = max(low, start), min(high, stop)
            if first >= last:
                continue
            piece_shape = shape[:axis] + [stop - start] + shape[axis + 1:]
            dataset = files.dataset(piece, piece_shape, storage)
            source = [slice(None)] * len(shape)
            target = [slice(None)] * len(shape)
            source[axis] = slice(first - start, last - start)
            target[axis] = slice(first - low, last - low)
            dataset.read_direct(out, source_sel=tuple(source), dest_sel=tuple(target))
    return out.view(dtype) if storage != dtype else out


def read_state(step_dir, manifest, rank, size):
    """The state of a verified step as this rank restores it (local; no communication).

    Raises
    ------
    CheckpointCorruptError, OSError
        A dataset missing or not as the manifest says, an unreadable file.
    """
    files = _Files(step_dir)
    items = []
    try:
        for path, entry in manifest["entries"].items():
            kind = entry["kind"]
            if kind in CONTAINER_KINDS or kind == "none":
                items.append((path, kind, None))
            else:
                items.append((path, kind, decode_leaf(kind, _read_leaf(files, entry, rank, size),
                                                      entry)))
    finally:
        files.close()
    return unflatten_state(items)
