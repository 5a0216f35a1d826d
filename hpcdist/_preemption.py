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

import atexit
import os
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


def _note_while_exiting(signum, _frame):
    """A stop signal after :class:`Preempted`: the process is already leaving with 75."""


def _ignore_signals(signals):
    for signum in signals:
        signal.signal(signum, signal.SIG_IGN)


class PreemptionHandler:
    """Catch SIGUSR1 and SIGTERM while active; report them collectively.

    Use as a context manager around a training loop (handlers are installed
    only from the main thread; elsewhere the handler only answers False).
    Left with :class:`Preempted`, it leaves a handler that ignores its
    signals: the process is exiting with :data:`EXIT_RESUME`.

    Parameters
    ----------
    ctx : Context
        The ranks that must stop together.
    signals : tuple of signal.Signals
        Defaults to SIGUSR1 and SIGTERM.
    on_terminate : callable, optional
        Called with no arguments as soon as SIGTERM arrives, from a thread of
        the handler's, also while the main thread is blocked inside a C call
        (an MPI collective waiting for a rank that died), where Python runs no
        signal handler. It must be safe to call from any thread.
    """

    def __init__(self, ctx, signals=_SIGNALS, on_terminate=None):
        self.ctx = ctx
        self.signals = tuple(signals)
        self.on_terminate = on_terminate
        self.received = None
        self._previous = {}
        self._wakeup = None  # (the previous wakeup fd, our pipe's write end, reader thread)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in self.signals:
                self._previous[signum] = signal.signal(signum, self._handle)
            if self.on_terminate is not None and signal.SIGTERM in self.signals:
                self._start_wakeup_reader()
        return self

    def __exit__(self, exc_type, exc, traceback):
        # leaving with Preempted, the rank is on its way out with 75: a later stop signal
        # must not turn that into death by SIGTERM (srun sends one to the ranks still
        # running as soon as one has exited 75, which it counts as a failure). A Python
        # handler, not SIG_IGN, which child processes would inherit.
        leaving = exc_type is not None and issubclass(exc_type, Preempted)
        for signum, handler in self._previous.items():
            signal.signal(signum, _note_while_exiting if leaving else handler)
        if leaving and self._previous:
            # Python puts SIG_DFL back for its own handlers when it finalizes: ignore the
            # signals from the start of the process's exit (before mpi4py finalizes MPI)
            atexit.register(_ignore_signals, tuple(self._previous))
        self._previous.clear()
        if self._wakeup is not None:
            previous, write_end, reader = self._wakeup
            signal.set_wakeup_fd(previous)
            os.close(write_end)  # the reader sees the end of the pipe
            reader.join()
            self._wakeup = None
        return False

    def _start_wakeup_reader(self):
        """Python's C-level handler writes each signal's number into a pipe
        (``signal.set_wakeup_fd``); a thread reads it at once."""
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        reader = threading.Thread(target=self._read_signals, args=(read_end,), daemon=True,
                                  name="hpcdist-preemption")
        reader.start()
        self._wakeup = (previous, write_end, reader)

    def _read_signals(self, read_end):
        try:
            while data := os.read(read_end, 64):
                if signal.SIGTERM in data:
                    self.on_terminate()
        finally:
            os.close(read_end)

    def _handle(self, signum, _frame):
        self.received = signal.Signals(signum).name

    def should_stop(self):
        """Collective: True on every rank if any rank received a signal."""
        local = 1 if self.received else 0
        if self.ctx.size == 1:
            return bool(local)
        return bool(self.ctx.allreduce(local, op="max"))
