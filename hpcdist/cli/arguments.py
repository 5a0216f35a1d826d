"""Argument parsing for commands that every rank of an MPI job runs.

Under ``mpiexec``/``srun`` each rank parses the same command line and reaches
the same verdict. :class:`RankZeroArgumentParser` lets only rank 0 print
(usage errors, ``--help``, ``--version``), while every rank exits with the
same status: 2 for a usage error, as argparse does. The rank comes from the
launcher's environment variables, so parsing starts no MPI. A check made
after parsing reports through ``parser.error(message)`` and so takes the
same path.
"""

import argparse
import math
import os
import time

from ..launch.environment import rank_layout

__all__ = ["RankZeroArgumentParser", "finite_float", "prints_for_the_job",
           "unwritable_directory"]

#: how long a silent rank waits before exiting after a usage error: Open MPI's mpiexec
#: ends the whole job when the first rank exits non-zero, which could be before rank 0
#: has printed the message
SILENT_RANK_EXIT_DELAY = 2.0


def prints_for_the_job():
    """Whether this process speaks for its job: rank 0, or a process outside any launcher."""
    rank = rank_layout()[0]
    return rank is None or rank == 0


def finite_float(low, *, strict=False, unit=""):
    """An argparse type: a finite number ``>= low`` (``> low`` when ``strict``).

    Parameters
    ----------
    low : float
    strict : bool, default=False
    unit : str, default=""
        Named in the message, e.g. ``"seconds"``.

    Returns
    -------
    callable
        ``parse(text) -> float``; raises ``argparse.ArgumentTypeError`` naming
        the text (nan and inf are refused).
    """
    bound = f"{'>' if strict else '>='} {low:g}"
    what = f"a finite number of {unit}" if unit else "a finite number"

    def parse(text):
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value > low if strict else value >= low)):
            raise argparse.ArgumentTypeError(f"{text!r} should be {what} {bound}")
        return value

    return parse


def unwritable_directory(path):
    """Why files cannot be written in the directory ``path``, or None when they can.

    ``path`` may be missing: it can be created (with its parents) when its
    nearest existing ancestor is a writable directory. Checked before any
    work, so that a run does not end by losing its output.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    str or None
        What is wrong, naming the path at fault.
    """
    path = os.path.abspath(path)
    existing = path
    while not os.path.exists(existing):  # the root always exists
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


class RankZeroArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose messages are printed once per MPI job.

    Its sub-command parsers are of the same class. Every rank still exits
    (``SystemExit``) with argparse's status: 2 after a usage error, 0 after
    ``--help``; after an error the silent ranks first wait
    :data:`SILENT_RANK_EXIT_DELAY` seconds, so rank 0's message is out before
    the launcher ends the job.
    """

    def _print_message(self, message, file=None):
        # argparse prints usage, help, version and errors through this one method
        if prints_for_the_job():
            super()._print_message(message, file)

    def exit(self, status=0, message=None):
        if status and not prints_for_the_job():
            time.sleep(SILENT_RANK_EXIT_DELAY)
        super().exit(status, message)
