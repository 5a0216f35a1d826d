"""Shared-memory segments that killed MPICH jobs leave behind, removed before a rank starts.

MPICH (4 and later) names a node's shared-memory segment after the job:
``/dev/shm/mpich_shm_<world id>_<node>`` (and ``mpich_vci_...``), the world id
being a hash of the process manager's job name. Under Slurm that name is
``<job id>.<step id>``, so a requeued job, a step number used again, or a
job id used again (a test cluster started afresh) gets the name of a segment
that an earlier, killed job never removed (only a clean ``MPI_Finalize``
unlinks it). The new job then opens the stale segment instead of creating its
own, and ``MPI_Init`` fails with ``MPIDI_POSIX_comm_bootstrap: Out of memory``.

Before it starts its command, every rank that ``hpcdist run`` launches removes
such segments: files of this user made before the attempt started (so never
a segment of the job now starting) that no live process maps or holds open
(so never one of a job still running).
"""

import os
import time

__all__ = ["SEGMENT_PREFIXES", "stale_segments", "remove_stale_segments"]

#: names of the segments MPICH makes in /dev/shm
SEGMENT_PREFIXES = ("mpich_shm_", "mpich_vci_")
_SHM_DIR = "/dev/shm"


def _candidates(directory, created_before, uid):
    """This user's segment files in ``directory`` made before ``created_before``."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    found = []
    for entry in entries:
        if not entry.name.startswith(SEGMENT_PREFIXES):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if info.st_uid == uid and info.st_ctime < created_before:
            found.append(entry.path)
    return found


def _in_use(paths):
    """Which of ``paths`` a live process maps or holds open (the processes whose
    /proc entries this user may read: their own, or all for root)."""
    wanted, used = set(paths), set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    path = line.rstrip("\n").partition("/")[2]
                    if path and "/" + path in wanted:
                        used.add("/" + path)
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target in wanted:
                    used.add(target)
        except OSError:  # gone, or another user's process
            continue
    return used


def stale_segments(directory=_SHM_DIR, created_before=None):
    """The MPICH segments in ``directory`` that killed jobs left behind.

    Parameters
    ----------
    directory : str, default="/dev/shm"
    created_before : float, optional
        Epoch seconds: only files made earlier count (default: now). Pass the
        time the job started, so that its own segments are never taken.

    Returns
    -------
    list of str
        Paths of this user's ``mpich_shm_*`` and ``mpich_vci_*`` files made before
        ``created_before`` that no live process maps or holds open.
    """
    created_before = time.time() if created_before is None else created_before
    candidates = _candidates(directory, created_before, os.getuid())
    if not candidates:
        return []
    used = _in_use(candidates)
    return [path for path in candidates if path not in used]


def remove_stale_segments(directory=_SHM_DIR, created_before=None):
    """Remove :func:`stale_segments`; returns the paths removed (a file another rank
    removed first is skipped)."""
    removed = []
    for path in stale_segments(directory, created_before):
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(path)
    return removed
