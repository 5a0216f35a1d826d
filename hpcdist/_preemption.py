"""Stop training cleanly on SIGUSR1/SIGTERM: checkpoint, then exit with code 75.

A scheduler that preempts a job (SLURM's ``--signal=B:USR1@120``) or a user
who wants it to stop sends a signal. The handler only sets a flag; the
training loop calls :meth:`PreemptionHandler.should_stop` at each step
boundary, where the ranks agree with one small allreduce, so a signal that
reached only some ranks still stops every rank at the same step. The loop
then writes a checkpoint and raises :class:`Preempted`, a ``SystemExit``
with code :data:`EXIT_RESUME` (75), which ``hpcdist run`` and the SLURM
templates read as "resume me".

This module sits at the bottom of the layers: the launcher (``hpcdist run``)
and the estimators' fit loops both use it, and it imports nothing of hpcdist.
"""

import signal
import threading

__all__ = ["EXIT_RESUME", "Preempted", "PreemptionHandler"]

#: exit code meaning "a checkpoint was written on a signal; start me again to resume"
EXIT_RESUME = 75

_SIGNALS = (signal.SIGUSR1, signal.SIGTERM)


class Preempted(SystemExit):
    """Raised after the checkpoint on a stop signal; exits the program with 75."""

    def __init__(self, step=None):
        super().__init__(EXIT_RESUME)
        self.step = step

    def __str__(self):
        where = "" if self.step is None else f" at step {self.step}"
        return f"stopped by a signal{where}; checkpoint written, exit code {EXIT_RESUME}"


class PreemptionHandler:
    """Catch SIGUSR1 and SIGTERM while active; report them collectively.

    Use as a context manager around a training loop (handlers are installed
    only from the main thread; elsewhere the handler only answers False).

    Parameters
    ----------
    ctx : Context
        The ranks that must stop together.
    signals : tuple of signal.Signals
        Defaults to SIGUSR1 and SIGTERM.
    """

    def __init__(self, ctx, signals=_SIGNALS):
        self.ctx = ctx
        self.signals = tuple(signals)
        self.received = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        return False

    def _handle(self, signum, _frame):
        self.received = signal.Signals(signum).name

    def should_stop(self):
        """Collective: True on every rank if any rank received a signal."""
        local = 1 if self.received else 0
        if self.ctx.size == 1:
            return bool(local)
        return bool(self.ctx.allreduce(local, op="max"))
