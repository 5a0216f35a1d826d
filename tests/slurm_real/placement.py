"""Where Slurm put every MPI rank: run by the placement tests on every rank.

Every rank joins an allreduce (so the ranks really form one MPI job) and
rank 0 prints one line, ``placement {json}``: the world size, the
allreduce's result, and for every rank its Slurm variables and host.
"""

import json
import os
import socket

import hpcdist

VARIABLES = ("SLURM_PROCID", "SLURM_NODEID", "SLURMD_NODENAME", "SLURM_JOB_NUM_NODES",
             "SLURM_JOB_ID", "TMPDIR")


def main():
    ctx = hpcdist.init()
    total = hpcdist.allreduce(float(ctx.rank + 1), ctx=ctx)
    mine = {"rank": ctx.rank, "host": socket.gethostname(),
            **{name: os.environ.get(name) for name in VARIABLES}}
    everyone = hpcdist.gather_object(mine, ctx=ctx)
    if ctx.rank == 0:
        print("placement " + json.dumps({"world_size": ctx.size, "sum": total,
                                          "ranks": everyone}), flush=True)


if __name__ == "__main__":
    main()
