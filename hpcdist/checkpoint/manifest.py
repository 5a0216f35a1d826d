"""``manifest.json`` and the ``COMMIT`` marker: what a step holds, and that it is whole.

The manifest (JSON, written by rank 0 once every rank's files are on disk)::

    {"format": "hpcdist-checkpoint", "format_version": 1, "step": 100,
     "world_size": 4, "backend": "sharded", "created": "2025-...", "hpcdist": "0.1.0",
     "metadata": {...},                       # the user's JSON metadata or null
     "files": {"index.h5": {"size": 9216, "crc32": "1a2b3c4d"},
               "rank_00000.h5": {...}, ...},
     "entries": {                             # every path in save order
        "model": {"kind": "dict", "length": 2},
        "model/w": {"kind": "sharded", "dtype": {"name": "float32", "str": "<f4",
                    "itemsize": 4}, "storage": "native", "shape": [10, 3], "axis": 0,
                    "dataset": "model/w",     # its name in index.h5
                    "pieces": [{"file": "rank_00000.h5", "dataset": "model/w",
                                "start": 0, "stop": 3}, ...]},
        "epoch": {"kind": "int", "encoding": "int64", "dtype": {...}, "shape": [],
                  "axis": null, "pieces": [{"file": "index.h5", "dataset": "epoch"}], ...}}}

``pieces`` say where each range (along ``axis``) of an entry is stored; they
cover ``0..shape[axis]`` in order. ``COMMIT`` holds the manifest's SHA-256, so
a damaged manifest is detected before it is believed.

:func:`parse_manifest` checks all of it (types, file names, coverage) and
raises :class:`ManifestError` for anything wrong, or
:class:`~hpcdist.checkpoint.CheckpointError` for a format version this
hpcdist does not know.
"""

import datetime
import hashlib
import json
import re

import numpy as np

from .._version import __version__
from .errors import CheckpointCorruptError, CheckpointError
from .state import (
    CONTAINER_KINDS,
    LEAF_KINDS,
    SEPARATOR,
    dtype_from_record,
    storage_dtype,
    validate_key,
)

__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST_FILE", "COMMIT_FILE", "ManifestError",
           "build_manifest", "manifest_bytes", "commit_bytes", "parse_commit", "parse_manifest",
           "leaf_dtype"]

FORMAT = "hpcdist-checkpoint"
FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
COMMIT_FILE = "COMMIT"
BACKENDS = ("sharded", "mpio")
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_CRC = re.compile(r"^[0-9a-f]{8}$")


class ManifestError(CheckpointCorruptError):
    """The manifest or COMMIT marker of a step is missing, unreadable or inconsistent."""


def build_manifest(plan, files, metadata):
    """The manifest of a save (a dict) from its plan and ``{name: {"size", "crc32"}}``."""
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION, "step": plan.step,
        "world_size": plan.world_size, "backend": plan.backend,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hpcdist": __version__, "metadata": metadata,
        "files": {name: files[name] for name in sorted(files)},
        "entries": {path: plan.entries[path] for path in plan.order},
    }


def manifest_bytes(manifest):
    """The manifest as the bytes written to ``manifest.json``."""
    return (json.dumps(manifest, indent=1, allow_nan=False) + "\n").encode("utf-8")


def commit_bytes(step, manifest_raw):
    """The ``COMMIT`` marker: step and the manifest's SHA-256."""
    return (json.dumps({"step": step, "manifest_sha256": hashlib.sha256(manifest_raw).hexdigest()})
            + "\n").encode("utf-8")


def parse_commit(raw, manifest_raw, step):
    """Check the ``COMMIT`` marker against the manifest's bytes; ManifestError if wrong."""
    try:
        commit = json.loads(raw.decode("utf-8"))
        recorded = commit["manifest_sha256"]
        commit_step = commit["step"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise ManifestError(f"{COMMIT_FILE} is not a valid commit marker") from None
    if commit_step != step:
        raise ManifestError(f"{COMMIT_FILE} names step {commit_step!r}, not {step}")
    if hashlib.sha256(manifest_raw).hexdigest() != recorded:
        raise ManifestError(f"{MANIFEST_FILE} does not match the SHA-256 in {COMMIT_FILE} "
                            "(the manifest was changed or damaged after the commit)")


def _fail(message):
    raise ManifestError(f"{MANIFEST_FILE}: {message}")


def _int(value, what, minimum=0):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(f"{what} should be an int >= {minimum}, got {value!r}")
    return value


def _dict(value, what):
    if not isinstance(value, dict):
        _fail(f"{what} should be an object, got {type(value).__name__}")
    return value


def leaf_dtype(entry):
    """``(dtype, storage dtype)`` of a validated leaf entry."""
    dtype = dtype_from_record(entry["dtype"])
    return dtype, storage_dtype(dtype)[0]


def _check_leaf(path, entry, files):
    kind = entry["kind"]
    pieces = entry.get("pieces")
    if not isinstance(pieces, list) or not isinstance(entry.get("dataset"), str):
        _fail(f"entry {path!r} has no valid 'pieces' list and 'dataset' name")
    if kind == "none":
        if pieces:
            _fail(f"entry {path!r} of kind 'none' has pieces")
        return
    if kind in ("str", "bytes") or entry.get("encoding") == "decimal":
        _int(entry.get("nbytes"), f"entry {path!r} nbytes")
    if kind == "int" and entry.get("encoding") not in ("int64", "decimal"):
        _fail(f"entry {path!r} has an unknown int encoding {entry.get('encoding')!r}")
    try:
        dtype = dtype_from_record(_dict(entry.get("dtype"), f"entry {path!r} dtype"))
    except ValueError as error:
        _fail(f"entry {path!r}: {error}")
    if entry.get("storage") != storage_dtype(dtype)[1]:
        _fail(f"entry {path!r} has storage {entry.get('storage')!r}, expected "
              f"{storage_dtype(dtype)[1]!r} for dtype {dtype}")
    shape = entry.get("shape")
    if not isinstance(shape, list):
        _fail(f"entry {path!r} has no shape list")
    for length in shape:
        _int(length, f"entry {path!r} shape")
    axis = entry.get("axis")
    size = int(np.prod(shape, dtype=np.int64))
    if axis is None:
        if shape or kind == "sharded":
            _fail(f"entry {path!r} of shape {shape} has no axis")
        if len(pieces) != 1:
            _fail(f"entry {path!r} (0-d) should have exactly one piece, has {len(pieces)}")
    else:
        _int(axis, f"entry {path!r} axis")
        if axis >= len(shape):
            _fail(f"entry {path!r} has axis {axis} for shape {shape}")
        if size == 0 and pieces:
            _fail(f"entry {path!r} is empty but has pieces")
        position = 0
        for piece in pieces:
            start = _int(_dict(piece, f"entry {path!r} piece").get("start"),
                         f"entry {path!r} piece start")
            stop = _int(piece.get("stop"), f"entry {path!r} piece stop")
            if start != position or stop <= start:
                _fail(f"entry {path!r} pieces do not cover 0..{shape[axis]} in order "
                      f"(piece {start}..{stop} after {position})")
            position = stop
        if size and position != shape[axis]:
            _fail(f"entry {path!r} pieces cover 0..{position}, not 0..{shape[axis]}")
    for piece in pieces:
        if piece.get("file") not in files or not isinstance(piece.get("dataset"), str):
            _fail(f"entry {path!r} has a piece in {piece.get('file')!r}, which the manifest "
                  "does not list")


def parse_manifest(raw, step):
    """The manifest dict from the bytes of ``manifest.json``, fully checked.

    Raises
    ------
    ManifestError
        When anything in it is missing or inconsistent.
    CheckpointError
        When its format version is not one this hpcdist reads.
    """
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        _fail(f"not valid JSON ({error})")
    _dict(manifest, "the manifest")
    if manifest.get("format") != FORMAT:
        _fail(f"format is {manifest.get('format')!r}, not {FORMAT!r}")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"{MANIFEST_FILE} of step {step} has format_version {version!r}, but this hpcdist "
            f"({__version__}) reads version {FORMAT_VERSION} only; restore it with the hpcdist "
            "version that wrote it (see its 'hpcdist' field) or a newer one")
    if manifest.get("step") != step:
        _fail(f"step is {manifest.get('step')!r}, but the directory is step {step}")
    _int(manifest.get("world_size"), "world_size", minimum=1)
    if manifest.get("backend") not in BACKENDS:
        _fail(f"backend is {manifest.get('backend')!r}, expected one of {BACKENDS}")
    if manifest.get("metadata") is not None:
        _dict(manifest["metadata"], "metadata")
    files = _dict(manifest.get("files"), "files")
    for name, info in files.items():
        if not _FILE_NAME.match(name) or ".." in name:
            _fail(f"file name {name!r} is not a plain file name")
        _int(_dict(info, f"file {name!r}").get("size"), f"file {name!r} size")
        if not isinstance(info.get("crc32"), str) or not _CRC.match(info["crc32"]):
            _fail(f"file {name!r} has no valid crc32")
    entries = _dict(manifest.get("entries"), "entries")
    kinds = {"": "dict"}
    for path, entry in entries.items():
        kind = _dict(entry, f"entry {path!r}").get("kind")
        parent, _, key = path.rpartition(SEPARATOR)
        if kinds.get(parent) not in CONTAINER_KINDS:
            _fail(f"entry {path!r} comes before (or without) its parent {parent!r}")
        try:
            validate_key(key, parent)
        except (TypeError, ValueError) as error:
            _fail(str(error))
        if kinds[parent] != "dict" and not key.isdigit():
            _fail(f"entry {path!r} is in a {kinds[parent]} but is not an index")
        if kind in CONTAINER_KINDS:
            _int(entry.get("length"), f"entry {path!r} length")
        elif kind in LEAF_KINDS:
            _check_leaf(path, entry, files)
        else:
            _fail(f"entry {path!r} has an unknown kind {kind!r}")
        kinds[path] = kind
    return manifest
