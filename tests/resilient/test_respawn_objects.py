"""Objects built before ``hpcdist.resilient.run`` in a job whose lost rank is replaced.

A replacement runs the script from its start while the survivors are inside
``run``: the set-up collectives of what it builds before ``run`` (DDP,
DistributedSampler, CheckpointManager, strategies, an
object of the script's own) wait until ``run``, where every rank runs them again
in creation order. Each object must then work on every rank, the replacement
included.
"""
import json

from tests.resilient.ulfm import messages_from, needs_ulfm, run_ulfm_job

_JOB = """
import json
from mpi4py import MPI
from hpcdist import nn
from hpcdist.checkpoint import CheckpointManager
from hpcdist.data import DistributedSampler
from hpcdist.nn.optim import SGD
from hpcdist.parallel import ElasticAveraging, LocalSGD
from hpcdist.resilient import State, run

REPLACEMENT = MPI.Comm.Get_parent() != MPI.COMM_NULL
ctx = hpcdist.init(fault_tolerance="respawn")
rng = np.random.default_rng(0)
X, Y = rng.normal(size=(24, 3)), rng.normal(size=(24, 1))

model = nn.Linear(3, 1, dtype=np.float64, random_state=0)
ddp = hpcdist.DDP(model)
optimizer = SGD(ddp.parameters(), lr=0.1)
sampler = DistributedSampler(len(X), seed=1)
manager = CheckpointManager("checkpoints")
local_model = nn.Linear(3, 1, dtype=np.float64, random_state=1)
local_sgd = LocalSGD(local_model, SGD(local_model.parameters(), lr=0.1), period=2)
elastic_model = nn.Linear(3, 1, dtype=np.float64, random_state=2)
elastic = ElasticAveraging(elastic_model, SGD(elastic_model.parameters(), lr=0.1), period=2)
criterion = nn.MSELoss()


class RankZeroValue:
    def __init__(self):
        self.value = np.array([float(ctx.rank + 10)])
        self.set_ups = 0
        ctx.run_setup(self.set_up)

    def set_up(self):
        self.value = ctx.broadcast(self.value)
        self.set_ups += 1


shared = RankZeroValue()
state = State(model=model, optimizer=optimizer, local_sgd=local_sgd,
              local_model=local_model, elastic=elastic, elastic_model=elastic_model, step=0)


@run
def train(state):
    while state.step < 8:
        if ctx.rank == 1 and state.step == 3 and not REPLACEMENT:
            die_here()
        sampler.set_epoch(state.step)
        rows = sampler.indices()
        optimizer.zero_grad()
        criterion(ddp(X[rows]), Y[rows])
        ddp.backward(criterion.backward())
        optimizer.step()
        local_model.zero_grad()
        criterion(local_model(X[rows]), Y[rows])
        local_model.backward(criterion.backward())
        local_sgd.step()
        elastic_model.zero_grad()
        criterion(elastic_model(X[rows]), Y[rows])
        elastic_model.backward(criterion.backward())
        elastic.step()
        state.step += 1
        state.commit()
    manager.save(state.step, {"w": model.weight.data})
    manager.wait()
    return state.step


steps = train(state)
elastic.finalize()
weights = hpcdist.allgather(model.weight.data.reshape(1, -1))
local = hpcdist.allgather(local_model.weight.data.reshape(1, -1))
local = np.concatenate([local, hpcdist.allgather(elastic_model.weight.data.reshape(1, -1))], 1)
print("RESULT " + json.dumps({
    "rank": ctx.rank, "size": ctx.size, "steps": steps, "replacement": REPLACEMENT,
    "same_model": bool(np.all(weights == weights[0])),
    "same_local_model": bool(np.all(local == local[0])),
    "shared": float(shared.value[0]), "set_ups": shared.set_ups,
    "saved": manager.latest_step(), "lost": state.ranks_lost}), flush=True)
"""


@needs_ulfm
def test_objects_built_before_run_work_on_every_rank_after_a_respawn(tmp_path):
    rc, seconds, output = run_ulfm_job(_JOB, tmp_path, n=3, timeout=280)
    results = [json.JSONDecoder().raw_decode(line[len("RESULT "):])[0]
               for line in messages_from(output, "RESULT ")]
    assert sorted(r["rank"] for r in results) == [0, 1, 2], output
    assert [r for r in results if r["replacement"]] and all(
        r["size"] == 3 and r["steps"] == 8 and r["lost"] == [1] and r["saved"] == 8
        and r["same_model"] and r["same_local_model"] and r["shared"] == 10.0
        for r in results), output
    # the set-up ran once when built, and once more after the respawn (the replacement's: once)
    assert sorted(r["set_ups"] for r in results) == [1, 2, 2], output
