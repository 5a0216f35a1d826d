"""Starting, watching and restarting MPI jobs; stopping them cleanly on a signal.

``hpcdist run`` (:func:`run_job`) starts a command under the MPI launcher and
restarts it after a failure; :mod:`~hpcdist.launch.rank_wrapper` wraps each
rank to export ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` and report how it ended;
:class:`PreemptionHandler` turns SIGUSR1/SIGTERM into a checkpoint and exit
code 75 at the next step boundary, on every rank at the same step.
"""

from .._preemption import EXIT_RESUME, Preempted, PreemptionHandler
from .runner import RunResult, build_command, run_job

__all__ = ["run_job", "build_command", "RunResult", "EXIT_RESUME", "PreemptionHandler",
           "Preempted"]
