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
import time

from ..launch.environment import rank_layout

__all__ = ["RankZeroArgumentParser", "prints_for_the_job"]

#: how long a silent rank waits before exiting after a usage error: Open MPI's mpiexec
#: ends the whole job when the first rank exits non-zero, which could be before rank 0
#: has printed the message
SILENT_RANK_EXIT_DELAY = 2.0


def prints_for_the_job():
    """Whether this process speaks for its job: rank 0, or a process outside any launcher."""
    rank = rank_layout()[0]
    return rank is None or rank == 0


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
