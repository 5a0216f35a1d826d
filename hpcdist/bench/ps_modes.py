"""``hpcdist bench ps-modes``: the parameter server's sync, async and bounded modes with stragglers.

Model: an hpcdist.nn MLP (32 inputs, two hidden layers of ``--width``, 10
classes, float32) trained with :class:`~hpcdist.parallel.ParameterServerTraining`
(plain SGD, ``--batch`` rows per worker and step) on generated rows
(``make_classification``, 10 classes). For each straggler scenario and mode,
every rank trains until a common deadline, ``--seconds`` after rank 0's
clock at a common start (on one node the ranks read one clock, so in sync
mode their step counts differ by one round at most however late a rank
leaves the barrier); then the ranks synchronize and the held-out accuracy
of the server's parameters is measured.

Scenarios, slowing by sleeping (the core goes to the others):

``none``
    every rank at full speed;
``constant``
    the last rank sleeps after computing each step's gradient as long as the
    computing took (2x slower);
``intermittent``
    at each step one rank, drawn from a generator seeded with the step
    number (the same draw on every rank), is slowed 2x.

Reported per mode: steps per second (gradients applied per second, summed
over workers), held-out accuracy, seconds until rank 0's pulled parameters
first reached ``--target`` accuracy (checked every 10 of its steps), the
largest staleness and the seconds waited.

Summary, per rank count: with ``constant``, async's steps per second over
sync's; with ``intermittent``, bounded's over sync's; and how many points of
held-out accuracy each is below sync.

The default batch (1024 rows per worker and step) makes a step's computing
outweigh its push and pull, the setting a parameter server is for: a
sleeping straggler only lengthens the computing, so where the push-pull
dominates (small batches) no mode has much to tolerate.
"""

import time

import numpy as np
from sklearn.datasets import make_classification

from .. import nn
from ..comm import allreduce, barrier, broadcast_object, init
from ..nn.optim import SGD
from ..parallel import ParameterServerTraining
from . import common

__all__ = ["main", "SCENARIOS", "MODES", "COMPARED", "compare_modes"]

MODES = ("sync", "async", "bounded")
SCENARIOS = ("none", "constant", "intermittent")
#: scenario -> the mode the summary compares with sync there
COMPARED = {"constant": "async", "intermittent": "bounded"}
DEFAULTS = {"width": 256, "batch": 1024, "rows": 40000, "staleness": 2}
QUICK = {"width": 64, "batch": 32, "rows": 8000, "staleness": 2}
FLOATS = {"seconds": (6.0, 1.5), "target": (0.80, 0.5), "lr": (0.05, 0.05)}
CHECK_EVERY = 10


def _parse_args(argv):
    parser = common.benchmark_parser(
        "ps-modes", "The parameter server's sync, async and bounded modes with and without "
        "a straggler: steps per second, accuracy, time to accuracy.",
        quick="a small model, 1.5 s per run", plot=False)
    common.add_job_options(parser, default_ranks=(2, 4))
    for key in DEFAULTS:
        parser.add_argument(f"--{key}", type=int, default=None,
                            help=f"default {DEFAULTS[key]} ({QUICK[key]} with --quick)")
    for key, (default, quick) in FLOATS.items():
        parser.add_argument(f"--{key}", type=float, default=None,
                            help=f"default {default:g} ({quick:g} with --quick)")
    args = parser.parse_args(argv)
    common.fill_sizes(parser, args, DEFAULTS, QUICK)
    for key, (default, quick) in FLOATS.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else default)
        if not getattr(args, key) > 0:
            parser.error(f"--{key}={getattr(args, key)} should be > 0")
    return args


def _data(args, ctx):
    X, y = make_classification(n_samples=args.rows + 4000, n_features=32, n_informative=24,
                               n_classes=10, n_clusters_per_class=1, class_sep=1.5,
                               random_state=0)
    X = X.astype(np.float32)
    train = np.arange(ctx.rank, args.rows, ctx.size)  # this rank's share
    return X[train], y[train], X[args.rows:], y[args.rows:]


def _model(args):
    return nn.Sequential(nn.Linear(32, args.width, random_state=1), nn.ReLU(),
                         nn.Linear(args.width, args.width, random_state=2), nn.ReLU(),
                         nn.Linear(args.width, 10, random_state=3))


def _slowed(scenario, rank, size, step):
    """Whether ``rank`` sleeps out a second step time at ``step``."""
    if scenario == "constant":
        return rank == size - 1
    if scenario == "intermittent":
        return int(np.random.default_rng(step).integers(size)) == rank
    return False


def _run(args, ctx, data, scenario, mode):
    X, y, X_test, y_test = data
    model = _model(args)
    loss_fn = nn.CrossEntropyLoss()
    training = ParameterServerTraining(model, SGD(list(model.parameters()), lr=args.lr),
                                       mode=mode, staleness=args.staleness, ctx=ctx)
    rng = np.random.default_rng([ctx.rank, 7])
    step, reached = 0, None
    barrier(ctx=ctx)
    deadline = broadcast_object(time.time() + args.seconds, root=0, ctx=ctx)
    start = time.perf_counter()
    while time.time() < deadline:
        began = time.perf_counter()
        rows = rng.integers(0, len(X), args.batch)
        model.zero_grad()
        loss_fn(model(X[rows]), y[rows])
        model.backward(loss_fn.backward())
        if _slowed(scenario, ctx.rank, ctx.size, step):
            time.sleep(time.perf_counter() - began)  # this step's computing, twice as long
        training.step()
        step += 1
        if ctx.rank == 0 and reached is None and step % CHECK_EVERY == 0 and \
                _accuracy(model, X_test, y_test) >= args.target:
            reached = time.perf_counter() - start
    elapsed = time.perf_counter() - start
    stats = training.stats()
    training.finalize()
    accuracy = _accuracy(model, X_test, y_test)
    applied = allreduce(step, op="sum", ctx=ctx)  # each step's gradient is applied once
    seconds = allreduce(elapsed, op="max", ctx=ctx)
    return {"scenario": scenario, "mode": mode, "steps_per_second": applied / seconds,
            "accuracy": accuracy, "seconds_to_target": broadcast_object(reached, root=0, ctx=ctx),
            "max_staleness": allreduce(stats["max_staleness"], op="max", ctx=ctx),
            "seconds_waited": allreduce(stats["seconds_waited"], op="max", ctx=ctx),
            "steps_per_rank": _steps_per_rank(step, ctx)}


def _steps_per_rank(step, ctx):
    """Every rank's number of steps, on every rank."""
    counts = np.zeros(ctx.size, dtype=np.int64)
    counts[ctx.rank] = step
    return allreduce(counts, op="sum", ctx=ctx).tolist()


def _accuracy(model, X, y):
    return float((model(X).argmax(axis=1) == y).mean())


def _measure_job(args):
    ctx = init()
    data = _data(args, ctx)
    run = {"ranks": ctx.size, "rows": [_run(args, ctx, data, scenario, mode)
                                       for scenario in SCENARIOS for mode in MODES]}
    run["machine"] = common.machine_info(ctx.comm)
    return run if ctx.rank == 0 else None


def _describe(run, runs):
    lines = [f"{run['ranks']} ranks:",
             f"  {'straggler':12} {'mode':8} {'steps/s':>8} {'accuracy':>8} {'to target':>9} "
             f"{'staleness':>9} {'waited':>7}  steps per rank"]
    for row in run["rows"]:
        reached = row["seconds_to_target"]
        lines.append(f"  {row['scenario']:12} {row['mode']:8} {row['steps_per_second']:8.0f} "
                     f"{row['accuracy']:8.4f} {'-' if reached is None else f'{reached:.2f} s':>9} "
                     f"{row['max_staleness']:9d} {row['seconds_waited']:6.2f}s  "
                     f"{row['steps_per_rank']}")
    return "\n".join(lines)


def compare_modes(runs):
    """Per rank count and scenario of :data:`COMPARED`: that mode's steps per second over
    sync's, and the points of held-out accuracy it is below sync."""
    summary = {}
    for p, run in runs.items():
        rows = {(r["scenario"], r["mode"]): r for r in run["rows"]}
        for scenario, mode in COMPARED.items():
            fast, sync = rows[scenario, mode], rows[scenario, "sync"]
            summary[f"{p} ranks, {scenario}"] = {
                "mode": mode,
                "ratio_to_sync": fast["steps_per_second"] / sync["steps_per_second"],
                "accuracy_points_below_sync": 100 * (sync["accuracy"] - fast["accuracy"])}
    return summary


def _write(runs, args):
    summary = compare_modes(runs)
    settings = {key: getattr(args, key) for key in (*DEFAULTS, *FLOATS)}
    common.finish_report("ps-modes", runs, args, settings=settings, summary=summary,
                         text=_summary_text(summary))


def _summary_text(summary):
    lines = []
    for key, s in summary.items():
        lines.append(f"{key}: {s['mode']} {s['ratio_to_sync']:.2f}x sync's steps per second, "
                     f"{s['accuracy_points_below_sync']:+.2f} points below sync's accuracy")
    return "\n".join(lines)


def main(argv=None):
    """Run the benchmark (see the module docstring); returns the exit status."""
    return common.run_per_rank_count(argv, _parse_args, module="hpcdist.bench.ps_modes",
                                     title="parameter server modes", measure_job=_measure_job,
                                     describe=_describe, write=_write)


if __name__ == "__main__":
    raise SystemExit(main())
