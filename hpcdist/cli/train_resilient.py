"""``hpcdist train --fault-tolerant``: a fit that survives a lost rank.

The fit runs inside :func:`hpcdist.resilient.run`. Its progress (the
estimator's ``state_dict`` every ``--checkpoint-every`` epochs, iterations or
tree batches) is committed in memory on every rank through the estimators'
checkpoint protocol instead of a checkpoint directory. When a rank is lost,
the survivors load their rows again for the smaller job (from ``--data`` or
the built-in generator, which makes any rank's rows), resume from the last
commit and finish: the estimators' results do not depend on the number of
ranks, so the fit ends as an uninterrupted one would. With ``--fault-tolerant
respawn`` a replacement process takes each lost rank's number: it runs the
same command, loads that rank's rows and joins the fit at the last commit, so
the job ends at its original number of ranks.
"""

import numpy as np

from ..comm import allgather
from ..resilient import State, run

__all__ = ["CommittedProgress", "fit_surviving_lost_ranks"]


class CommittedProgress:
    """The checkpoint protocol of the estimators' ``fit`` (``save``, ``restore``,
    ``latest_step``), kept in a :class:`~hpcdist.resilient.State` in memory.

    Each save is committed on this rank; after a loss, :func:`hpcdist.resilient.run`
    gives every survivor the lowest surviving rank's commit, which the next
    ``fit`` resumes from.

    Parameters
    ----------
    state : hpcdist.resilient.State
        Holds ``progress``: None, or ``{"step", "tree", "metadata"}`` of the last save.
    """

    def __init__(self, state):
        self.state = state
        self.restored_metadata = None

    def latest_step(self):
        """The step of the last save, or None."""
        progress = self.state.progress
        return None if progress is None else progress["step"]

    def save(self, step, tree, metadata=None):
        """Keep ``tree`` as step ``step`` and commit it (in memory, no communication)."""
        self.state.progress = {"step": int(step), "tree": tree, "metadata": metadata}
        self.state.commit()

    def restore(self):
        """The tree of the last save."""
        self.restored_metadata = self.state.progress["metadata"]
        return self.state.progress["tree"]


def fit_surviving_lost_ranks(fit, ctx):
    """Call ``fit(progress)`` until it ends, again after each lost rank (on the survivors,
    or with the replacements of the lost ranks).

    Parameters
    ----------
    fit : callable
        ``fit(progress)`` loads this rank's rows for the context's current size,
        fits the estimator with ``checkpoint=progress``, measures it and returns
        the result (its collectives may meet a lost rank too).
    ctx : Context
        The default context, with fault tolerance on.

    Returns
    -------
    result : object
        What the last call of ``fit`` returned.
    ranks_lost : list of int
        The lost ranks, numbered as at the start of the job (replacements that
        took a lost rank's number are not counted again).
    """
    first_rank, first_size = ctx.rank, ctx.size
    state = State(progress=None)
    progress = CommittedProgress(state)

    @run
    def attempt(state):
        result = fit(progress)
        # inside run: a rank lost after the fit ended is survived too (the fit resumes
        # from its final commit)
        if ctx.fault_tolerance == "respawn":  # replacements took the lost ranks' numbers
            return result, sorted(set(state.ranks_lost))
        survivors = {int(rank) for rank in allgather(np.array([first_rank]), ctx=ctx)}
        return result, sorted(set(range(first_size)) - survivors)

    return attempt(state)
