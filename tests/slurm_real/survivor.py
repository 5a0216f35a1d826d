"""The training slurm/fault_tolerant.sbatch runs in the real-Slurm tier: it survives lost ranks.

Every rank says where it runs (``rank R pid P node N``: Slurm's node of the
process that started it, see :func:`_node`), then the ranks add up ones under
:func:`hpcdist.resilient.run`, one step every ``STEP_SECONDS``, committing each
step; rank 0 prints ``step S size N`` as they go, which is how the test sees
training under way. After ``STEPS`` steps every rank prints
``DONE rank R size N total T lost [...]``.
"""

import os
import time
from pathlib import Path

import numpy as np

import hpcdist
from hpcdist.resilient import State, run

STEPS = 40
STEP_SECONDS = 0.25


def _node():
    """The Slurm node this rank runs on: ``SLURMD_NODENAME`` of the nearest ancestor
    process that has it (Open MPI's daemon on another node is a task of Slurm's there;
    the ranks on the batch node are children of mpirun, a child of the batch step)."""
    pid = os.getpid()
    while pid > 1:
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        for entry in environ:
            if entry.startswith(b"SLURMD_NODENAME="):
                return entry.split(b"=", 1)[1].decode()
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the parent
    return "?"


def main():
    ctx = hpcdist.init()  # the mode comes from hpcdist run --fault-tolerant
    print(f"rank {ctx.rank} pid {os.getpid()} node {_node()} mode {ctx.fault_tolerance}",
          flush=True)
    state = State(step=0, total=0.0)

    @run
    def train(state):
        while state.step < STEPS:
            state.total += float(hpcdist.allreduce(np.ones(1))[0])
            state.step += 1
            state.commit()
            if ctx.rank == 0:
                print(f"step {state.step} size {ctx.size}", flush=True)
            time.sleep(STEP_SECONDS)
        return state.total

    total = train(state)
    print(f"DONE rank {ctx.rank} size {ctx.size} total {total:g} lost {state.ranks_lost}",
          flush=True)


if __name__ == "__main__":
    main()
