"""Surviving a lost rank: commit the training state, recover, go on (an MPI with ULFM).

Shaped like Horovod Elastic's API::

    ctx = hpcdist.init(fault_tolerance="shrink")
    state = hpcdist.resilient.State(model=model, optimizer=optimizer, step=0)

    @hpcdist.resilient.run
    def train(state):
        while state.step < n_steps:
            ...one step...
            state.step += 1
            state.commit()

    train(state)

When a rank is lost, every survivor's next hpcdist call raises
:class:`~hpcdist.exceptions.RankFailedError`; :func:`run` then recovers the
context in place (``"shrink"``: the survivors go on; ``"respawn"``:
replacement processes take the lost ranks' numbers), restores the last
commit (the lowest surviving rank's copy) on every rank, runs the reset
callbacks and calls ``train`` again.
"""

from .run import run
from .state import State, TorchState

__all__ = ["State", "TorchState", "run"]
