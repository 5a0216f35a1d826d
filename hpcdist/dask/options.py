"""The options of a Dask phase: checked for agreement across ranks, then validated."""

import numbers
from dataclasses import dataclass

from .._checks import check_int
from ..comm.agreement import agree_config
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["PhaseOptions", "phase_options", "check_size", "refuse_n_workers"]

#: the ranks a phase needs: the scheduler, the client and one worker
MIN_RANKS = 3
_ROLES = ("the scheduler runs on rank 0, the client on client_rank and a worker on every "
          "other rank")


@dataclass(frozen=True)
class PhaseOptions:
    """The validated options of one phase (the same on every rank)."""

    client_rank: int
    threads_per_worker: int
    memory_limit: object  # "auto", None (no limit), bytes (int) or a fraction (float)
    interface: object  # None or a network interface name
    verbose: bool
    dashboard: bool


def refuse_n_workers(where, unexpected):
    """Raise a TypeError naming keyword arguments a phase does not take (``n_workers`` first)."""
    if "n_workers" in unexpected:
        raise InvalidArgumentTypeError(
            f"{where}: n_workers={unexpected['n_workers']!r} is not a parameter: the workers "
            f"are the job's ranks other than the scheduler (rank 0) and the client "
            f"(client_rank); start the job with n_workers + 2 ranks instead")
    if unexpected:
        raise InvalidArgumentTypeError(
            f"{where}: unexpected keyword argument(s) {', '.join(sorted(unexpected))}")


def check_size(ctx, where):
    """Raise on every rank when the job has fewer ranks than a phase needs."""
    if ctx.size < MIN_RANKS:
        raise InvalidArgumentError(
            f"{where}: a Dask phase needs at least {MIN_RANKS} ranks ({_ROLES}); this job has "
            f"{ctx.size}: start it with mpiexec -n 3 or more")


def _memory_limit(value, where):
    """``"auto"``, None, a byte count or a fraction, from what the user passed."""
    if value is None or (isinstance(value, str) and value == "auto"):
        return value
    problem = (f"{where}: memory_limit={value!r} should be 'auto', None (no limit), a byte "
               f"count (int >= 0 or a string such as '4GiB') or a fraction of the node's "
               f"memory in (0, 1]")
    if isinstance(value, str):
        from dask.utils import parse_bytes  # the dask extra

        try:
            value = parse_bytes(value)
        except ValueError:
            raise InvalidArgumentError(problem) from None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentTypeError(problem)
    if isinstance(value, numbers.Integral):
        if value < 0:
            raise InvalidArgumentError(problem)
        return int(value) or None
    if not 0 < value <= 1:
        raise InvalidArgumentError(problem)
    return float(value)


def phase_options(ctx, where, *, client_rank, threads_per_worker, memory_limit, interface,
                  verbose, dashboard):
    """The phase's options, agreed on by every rank and validated (collective).

    The agreement comes first, so a value that differs between ranks is a
    ConfigMismatchError on every rank and validation then fails or passes
    the same way everywhere.

    Returns
    -------
    PhaseOptions

    Raises
    ------
    ConfigMismatchError
        An option differs between ranks.
    InvalidArgumentError, InvalidArgumentTypeError
        A bad value, named with the fix.
    """
    check_size(ctx, where)
    agree_config(ctx, where, {"client_rank": client_rank,
                              "threads_per_worker": threads_per_worker,
                              "memory_limit": memory_limit, "interface": interface,
                              "verbose": verbose, "dashboard": dashboard},
                 fix="pass the same options on every rank")
    client_rank = check_int(client_rank, f"{where}: client_rank", 1, ctx.size - 1,
                            hint=f" ({_ROLES}; this job has {ctx.size} ranks)")
    threads_per_worker = check_int(threads_per_worker, f"{where}: threads_per_worker", 1)
    if interface is not None and (not isinstance(interface, str) or not interface):
        raise InvalidArgumentTypeError(
            f"{where}: interface={interface!r} should be a network interface name such as "
            f"'ib0', or None (loopback on one node, else the default route's interface)")
    return PhaseOptions(client_rank, threads_per_worker, _memory_limit(memory_limit, where),
                        interface, bool(verbose), bool(dashboard))
