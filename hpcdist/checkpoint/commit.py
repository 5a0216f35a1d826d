"""The checkpoint directory: committed steps, temporaries, the atomic commit, retention.

Layout of a checkpoint directory::

    DIR/step_000000100/          a committed step (visible)
        index.h5                 the whole checkpoint for plain h5py (virtual datasets)
        rank_00000.h5 ...        the ranks' files (sharded backend)
        manifest.json            entries, shapes, dtypes, offsets; files' sizes and CRC-32s
        COMMIT                   written last: the manifest's SHA-256
    DIR/.tmp-step_000000110-1a2b3c4d/   a save in progress (invisible)
    DIR/.trash-step_000000080-5e6f7a8b/ a step being deleted (invisible)

A step becomes visible in one ``rename`` of its finished temporary directory,
after every file, the directory and the marker were fsynced; a crash at any
point leaves either the old set of steps or the new one. Temporaries left by
a crash are never listed and are removed when a manager is created.

Everything here is local file-system work (rank 0 does it for everyone).
"""

import os
import re
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

from .manifest import COMMIT_FILE, MANIFEST_FILE, commit_bytes

__all__ = ["step_dir_name", "list_steps", "new_temp_dir", "remove_tree", "cleanup_temporaries",
           "fsync_file", "flush_data", "WriteBehind", "fsync_dir", "write_file_durably",
           "commit_step",
           "apply_retention", "wait_for_deletions"]

_STEP = re.compile(r"^step_(\d{9,})$")
_TEMP_PREFIXES = (".tmp-step_", ".trash-step_")


def step_dir_name(step):
    """``step_000000100`` for step 100."""
    return f"step_{step:09d}"


def list_steps(directory):
    """Committed steps (those with a ``COMMIT`` marker), ascending."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    steps = []
    for name in names:
        match = _STEP.match(name)
        if match and os.path.isfile(os.path.join(directory, name, COMMIT_FILE)):
            steps.append(int(match.group(1)))
    return sorted(steps)


def new_temp_dir(directory, step):
    """Create and return the name of a fresh temporary directory for ``step``."""
    name = f".tmp-{step_dir_name(step)}-{uuid.uuid4().hex[:8]}"
    os.mkdir(os.path.join(directory, name))
    return name


def remove_tree(path):
    """Delete ``path`` (renamed to a ``.trash-`` name first, so it is never half-visible)."""
    parent, name = os.path.split(path)
    if name.startswith(_TEMP_PREFIXES):
        shutil.rmtree(path, ignore_errors=True)
        return
    trash = os.path.join(parent, f".trash-{name}-{uuid.uuid4().hex[:8]}")
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def cleanup_temporaries(directory):
    """Remove what interrupted saves and deletions left; returns the names removed."""
    removed = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(_TEMP_PREFIXES):
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
            removed.append(name)
    return removed


def _sync_path(path, sync):
    """Open ``path`` and call ``sync`` (``os.fsync``, ``os.fdatasync``) on it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        sync(fd)
    finally:
        os.close(fd)


def fsync_file(path):
    """Flush a file's data to stable storage."""
    _sync_path(path, os.fsync)


def flush_data(path):
    """Write a file's dirty pages to stable storage (``fdatasync``; ``fsync`` where the
    platform has no ``fdatasync``)."""
    _sync_path(path, getattr(os, "fdatasync", os.fsync))


class WriteBehind:
    """Flush a file to disk while it is still being written.

    A save ends with an fsync that waits until the disk holds every byte.
    Started only then, the disk idles while the file is produced and the
    writer idles while the disk works. Here :meth:`written`, called after
    each block, starts :func:`flush_data` in a background thread whenever
    the previous flush has finished, so the final fsync only waits for the
    last blocks.

    Use it as a context manager around the writing; leaving the block waits
    for the flush in flight and raises the error of any failed flush (EIO,
    ENOSPC). :meth:`written` itself never raises, so a rank that writes a
    shared file collectively never leaves the other ranks waiting in a
    collective call.

    Parameters
    ----------
    path : str or None
        The file being written (it must exist when :meth:`written` is
        called); None flushes nothing (ranks of a shared file that leave it
        to one rank).
    """

    def __init__(self, path):
        self.path = path
        self._flusher = None
        self._pending = None

    def __enter__(self):
        if self.path is not None:
            self._flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hpcdist-flush")
        return self

    def written(self):
        """A block went into the file: flush what is written so far, unless a
        flush is still running (it will be followed by the next call's)."""
        if self._flusher is None:
            return
        pending = self._pending
        if pending is not None:
            if not pending.done() or pending.exception() is not None:
                return  # still running, or failed: leaving the block raises its error
        self._pending = self._flusher.submit(flush_data, self.path)

    def __exit__(self, error_type, error, traceback):
        if self._flusher is None:
            return False
        try:
            if self._pending is not None and error_type is None:
                self._pending.result()
        finally:
            self._flusher.shutdown(wait=True)
        return False


def fsync_dir(path):
    """Flush a directory's entries (new, renamed, deleted names) to stable storage."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - platforms without directory descriptors
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def write_file_durably(path, data):
    """Write ``data`` (bytes) to a new file and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def commit_step(directory, temp_name, step, manifest_raw):
    """Make the finished temporary directory ``temp_name`` the visible ``step``.

    Writes ``manifest.json`` and ``COMMIT`` (fsynced), fsyncs the temporary
    directory, renames it to ``step_NNNNNNNNN`` (an existing step of the same
    number is replaced) and fsyncs ``directory``.
    """
    temp = os.path.join(directory, temp_name)
    errors = []
    marker = threading.Thread(target=_write_marker, args=(temp, step, manifest_raw, errors))
    marker.start()  # the two small files are flushed in parallel
    try:
        write_file_durably(os.path.join(temp, MANIFEST_FILE), manifest_raw)
    finally:
        marker.join()
    if errors:
        raise errors[0]
    fsync_dir(temp)
    final = os.path.join(directory, step_dir_name(step))
    old = None
    if os.path.exists(final):
        old = os.path.join(directory, f".trash-{step_dir_name(step)}-{uuid.uuid4().hex[:8]}")
        os.rename(final, old)
    os.rename(temp, final)
    fsync_dir(directory)
    if old is not None:
        _remove_in_background([old])


def _write_marker(temp, step, manifest_raw, errors):
    try:
        write_file_durably(os.path.join(temp, COMMIT_FILE), commit_bytes(step, manifest_raw))
    except OSError as error:
        errors.append(error)


def apply_retention(directory, max_to_keep, keep):
    """Delete the oldest committed steps beyond ``max_to_keep``; never step ``keep``.

    ``keep`` is the step just committed (and so valid): retention runs only
    after a newer commit and always leaves that step. The doomed steps are
    renamed to ``.trash-`` names at once (so they are gone from
    :func:`list_steps` when this returns) and their files are deleted by a
    background thread (what a crash leaves is removed by
    :func:`cleanup_temporaries`). Returns the steps deleted.
    """
    if max_to_keep is None:
        return []
    others = [step for step in list_steps(directory) if step != keep]
    doomed = others[:max(0, len(others) - (max_to_keep - 1))]
    trash = []
    for step in doomed:
        name = step_dir_name(step)
        trash.append(os.path.join(directory, f".trash-{name}-{uuid.uuid4().hex[:8]}"))
        os.rename(os.path.join(directory, name), trash[-1])
    if doomed:
        fsync_dir(directory)
        _remove_in_background(trash)
    return doomed


_DELETIONS = []  # background deletion threads (tests join them through wait_for_deletions)


def _remove_all(paths):
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)


def _remove_in_background(paths):
    thread = threading.Thread(target=_remove_all, args=(paths,), daemon=True,
                              name="hpcdist-checkpoint-delete")
    thread.start()
    _DELETIONS[:] = [other for other in _DELETIONS if other.is_alive()] + [thread]


def wait_for_deletions():
    """Wait until the background deletions of old steps have finished."""
    while _DELETIONS:
        _DELETIONS.pop().join()
