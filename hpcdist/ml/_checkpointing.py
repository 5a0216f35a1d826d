"""Checkpoints and stop signals inside an estimator's ``fit`` loop.

``fit(X, y, checkpoint=CheckpointManager(...), checkpoint_every=N)`` saves
the estimator's full :meth:`state_dict` every ``N`` epochs (iterations,
tree batches) and at the end; a fit started on a directory that already
holds a checkpoint resumes from its newest valid step. SIGUSR1 or SIGTERM
on any rank makes every rank save at the next epoch boundary and exit with
code 75 (see :mod:`hpcdist._preemption`).
"""

import numbers
from contextlib import ExitStack

import numpy as np

from .._preemption import Preempted, PreemptionHandler
from ..comm import broadcast_object
from ..comm.checks import mark_raised_on_every_rank
from ..comm.watchdog import end_stalls_after_termination
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["FitCheckpointing", "optimizer_to_tree", "optimizer_from_tree"]


class FitCheckpointing:
    """Resume, periodic saves and signal handling for one call of ``fit``.

    Parameters
    ----------
    estimator : object
        Has ``state_dict()`` and ``load_state_dict(state)``.
    checkpoint : hpcdist.checkpoint.CheckpointManager or None
        None turns everything off (the loop helpers do nothing).
    every : int or None
        Epochs between saves (None: only at the end and on a signal).
    ctx : Context
    """

    def __init__(self, estimator, checkpoint, every, ctx):
        name = type(estimator).__name__
        if checkpoint is None and every is not None:
            raise InvalidArgumentError(f"{name}.fit: checkpoint_every={every} needs checkpoint= (a "
                                       "hpcdist.checkpoint.CheckpointManager)")
        if checkpoint is not None and not all(hasattr(checkpoint, method) for method in
                                              ("save", "restore", "latest_step")):
            raise InvalidArgumentTypeError(f"{name}.fit: checkpoint={checkpoint!r} should be a "
                                           "hpcdist.checkpoint.CheckpointManager")
        if every is not None and (isinstance(every, (bool, np.bool_))
                                  or not isinstance(every, numbers.Real)
                                  or not float(every).is_integer() or every < 1):
            raise InvalidArgumentError(f"{name}.fit: checkpoint_every={every!r} should be a whole "
                                       "number >= 1")
        self.estimator = estimator
        self.checkpoint = checkpoint
        self.every = None if every is None else int(every)
        self.ctx = ctx
        self._stack = ExitStack()
        self._handler = None
        self._last_saved = None

    @property
    def enabled(self):
        return self.checkpoint is not None

    def __enter__(self):
        if self.enabled:
            self._handler = self._stack.enter_context(
                PreemptionHandler(self.ctx, on_terminate=end_stalls_after_termination))
        return self

    def __exit__(self, *exc):
        self._stack.__exit__(*exc)  # the handler must see Preempted leaving (not close())
        return False

    def resume(self):
        """Load the newest checkpoint into the estimator; its step, or None."""
        if not self.enabled:
            return None
        latest = self.checkpoint.latest_step()
        if self.ctx.size > 1:  # one decision for all ranks, whatever their file-system caches
            latest = broadcast_object(latest, ctx=self.ctx)
        if latest is None:
            return None
        state = self.checkpoint.restore()  # may fall back to an older valid step, warning
        name = type(self.estimator).__name__
        saved_by = (getattr(self.checkpoint, "restored_metadata", None) or {}).get("estimator")
        try:
            if saved_by not in (None, name):
                raise InvalidArgumentError(f"it was saved by a {saved_by} fit")
            if not {"estimator", "progress"} <= set(state):
                raise InvalidArgumentError(f"it holds {sorted(map(str, state))[:8]}, not the "
                                           "state of an estimator's fit")
            self.estimator.load_state_dict(state["estimator"])
        except (ValueError, TypeError, KeyError) as error:
            # the state and the parameters are the same on every rank: so is the error
            where = getattr(self.checkpoint, "directory", repr(self.checkpoint))
            raise mark_raised_on_every_rank(InvalidArgumentError(
                f"{name}.fit: the checkpoint directory {where} holds another run's checkpoint "
                f"(step {latest}), which this {name} cannot resume: {error}; use a new "
                "directory for this fit (or this estimator's settings of that run to resume "
                "it)")) from None
        self._last_saved = int(state["progress"])
        return self._last_saved

    def save(self, progress):
        """Save the estimator's state as step ``progress`` (if not saved already)."""
        if not self.enabled or progress == self._last_saved:
            return
        self.checkpoint.save(progress, {"estimator": self.estimator.state_dict(),
                                        "progress": int(progress)},
                             metadata={"estimator": type(self.estimator).__name__})
        self._last_saved = progress

    def end_of_epoch(self, progress):
        """Call after each epoch: saves when due; on a stop signal saves and exits 75."""
        if not self.enabled:
            return
        stop = self._handler.should_stop()
        if stop or (self.every is not None and progress % self.every == 0):
            self.save(progress)
        if stop:
            if hasattr(self.checkpoint, "wait"):
                self.checkpoint.wait()
            raise Preempted(progress)

    def finish(self, progress):
        """Call when ``fit`` ends: the final state is saved and written."""
        if self.enabled:
            self.save(progress)
            if hasattr(self.checkpoint, "wait"):
                self.checkpoint.wait()


def optimizer_to_tree(state_dict):
    """An optimizer ``state_dict`` as a checkpointable tree (string keys, no lists)."""
    groups = {}
    for index, group in enumerate(state_dict["param_groups"]):
        groups[str(index)] = {key: (np.asarray(value) if isinstance(value, (list, tuple))
                                    else value) for key, value in group.items()}
    return {"state": {str(key): dict(value) for key, value in state_dict["state"].items()},
            "param_groups": groups}


def optimizer_from_tree(tree):
    """Inverse of :func:`optimizer_to_tree`."""
    groups = tree["param_groups"]
    return {"state": dict(tree["state"]),
            "param_groups": [dict(groups[str(index)]) for index in range(len(groups))]}
