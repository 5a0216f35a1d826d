"""``hpcdist bench strategies``: time and bytes to a held-out accuracy, per training strategy.

Data: ``hpcdist.data.make_classification`` (``--rows`` rows, default 220,000,
32 features, 10 classes), each rank generating its own rows; the last 10 %
of every rank's rows are held out. Model: an hpcdist.nn MLP 32-128-10
(float32), SGD with momentum 0.9, ``--batch`` rows per rank and step.

Strategies: ``data_parallel`` (DDP), ``local_sgd`` (period 8), ``easgd``
(period 4, alpha 0.9 / ranks), ``gossip`` (ring) and ``federated`` (every
rank sampled; a round trains on the next ``--eval-every`` batches of the
rank's rows). Each trains for ``--epochs`` passes over the data, evaluating
the held-out accuracy every ``--eval-every`` steps (evaluation not timed).
Reported per strategy: training seconds, bytes sent by this rank (from
``ctx.stats()``, the gossip graph's included) and steps when the accuracy
first reaches ``--target``, and the accuracy at the end.

Projection (the alpha-beta model of ``hpcdist bench compression``): on a
network of latency ``alpha`` = 5 us and bandwidth ``B`` = 10 Gbit/s, an
allreduce of ``b`` bytes on ``p`` ranks costs ``2 (p - 1) (alpha + b / (p B))``
and a ring gossip exchange ``2 (alpha + b / B)``. The projected time to the
target at ``p`` = 64 and 1024 ranks is the steps to the target times one
compute time per step (the smallest of the strategies' training time less
their time in collectives, per step, at the largest rank count run: the
model and batch are the same for all) plus the modelled communication of the
same number of rounds. It assumes the steps to the target do not change with
``p``.

At 2 ranks, with torch installed, the torch row
(:mod:`hpcdist.bench.strategies_torch`): steps per second of hpcdist's
LocalSGD against torch's ``PostLocalSGDOptimizer`` + ``PeriodicModelAverager``.

Summary: local SGD's final accuracy against data parallelism's and its
share of data parallelism's bytes sent until the target accuracy; hpcdist's
LocalSGD steps per second over torch's local SGD (2 ranks).
"""

import argparse
import sys
import time

import numpy as np

from .. import nn
from ..comm import allreduce, init
from ..data import make_classification
from ..nn.optim import SGD
from ..parallel import DDP, ElasticAveraging, FederatedAveraging, GossipSGD, LocalSGD
from . import common
from .strategies_torch import measure_torch_row

__all__ = ["main"]

STRATEGIES = ("data_parallel", "local_sgd", "easgd", "gossip", "federated")
N_FEATURES, N_HIDDEN, N_CLASSES = 32, 128, 10
ALPHA_SECONDS = 5e-6
BANDWIDTH_BYTES = 10e9 / 8
MODEL_RANKS = (64, 1024)
DEFAULTS = {"rows": 220_000, "batch": 64, "eval_every": 250, "epochs": 1,
            "torch_steps": 24, "repetitions": 5}
QUICK = {"rows": 20_000, "batch": 64, "eval_every": 50, "epochs": 1, "torch_steps": 8,
         "repetitions": 2}


def _parse_args(argv):
    parser = common.benchmark_parser("strategies", __doc__.split("\n\n")[0],
                                     quick="a small data set and few torch steps")
    common.add_job_options(parser, default_ranks=(1, 2, 4))
    for key in DEFAULTS:
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=None)
    parser.add_argument("--target", type=_fraction, default=0.92,
                        help="held-out accuracy to reach (default 0.92)")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch row")
    args = parser.parse_args(argv)
    common.fill_sizes(parser, args, DEFAULTS, QUICK)
    return args


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} should be an accuracy in (0, 1)")
    return value


def _model():
    return nn.Sequential(nn.Linear(N_FEATURES, N_HIDDEN, dtype=np.float32, random_state=0),
                         nn.ReLU(),
                         nn.Linear(N_HIDDEN, N_CLASSES, dtype=np.float32, random_state=1))


def _strategy(name, model, optimizer, ctx, batch):
    """(what forward/backward run on, what replaces optimizer.step, the strategy or None)."""
    if name == "data_parallel":
        ddp = DDP(model, ctx=ctx)
        return ddp, optimizer.step, None
    make = {"local_sgd": lambda: LocalSGD(model, optimizer, period=8, ctx=ctx),
            "easgd": lambda: ElasticAveraging(model, optimizer, period=4, ctx=ctx),
            "gossip": lambda: GossipSGD(model, optimizer, topology="ring", ctx=ctx),
            "federated": lambda: FederatedAveraging(model, optimizer, batch_size=batch,
                                                    ctx=ctx)}
    strategy = make[name]()
    return model, strategy.step if name != "federated" else None, strategy


def _accuracy(network, X, y, ctx):
    correct = float((network(X).argmax(axis=1) == y).sum()) if len(X) else 0.0
    totals = allreduce(np.array([correct, float(len(X))]), ctx=ctx)
    return float(totals[0] / totals[1])


def _communication(ctx, strategy):
    """(bytes sent, seconds in collectives) of this rank so far."""
    contexts = [ctx] + ([strategy.graph] if getattr(strategy, "graph", None) else [])
    records = [record for c in contexts for record in c.stats().values()]
    return (sum(r["bytes_sent"] for r in records), sum(r["seconds"] for r in records))


def _train(name, data, args, ctx):
    """Train one strategy for ``--epochs``; its record."""
    X, y, X_test, y_test = data
    model = _model()
    optimizer = SGD(list(model.parameters()), lr=0.05, momentum=0.9)
    ctx.reset_stats()
    network, step, strategy = _strategy(name, model, optimizer, ctx, args.batch)
    criterion = nn.CrossEntropyLoss()
    rng = np.random.default_rng(ctx.rank)
    total_steps = args.epochs * (len(X) // args.batch)
    total_steps = int(allreduce(total_steps, op="min", ctx=ctx))
    order = np.concatenate([rng.permutation(len(X)) for _ in range(args.epochs + 1)])
    record = {"reached": None, "curve": []}
    seconds = communicating = 0.0  # training time, and its part in collectives
    done = 0
    while done < total_steps:
        block = min(args.eval_every, total_steps - done)
        rows = order[done * args.batch:(done + block) * args.batch]
        _, communicated_before = _communication(ctx, strategy)
        start = time.perf_counter()
        if name == "federated":
            strategy.round(X[rows], y[rows], criterion)
        else:
            for index in range(block):
                batch = rows[index * args.batch:(index + 1) * args.batch]
                optimizer.zero_grad()
                criterion(network(X[batch]), y[batch])
                network.backward(criterion.backward())
                step()
        seconds += time.perf_counter() - start
        done += block
        sent, communicated = _communication(ctx, strategy)
        communicating += communicated - communicated_before  # not the evaluation's
        accuracy = _accuracy(model, X_test, y_test, ctx)
        record["curve"].append((done, seconds, sent, accuracy))
        if record["reached"] is None and accuracy >= args.target:
            record["reached"] = {"steps": done, "seconds": seconds, "bytes_sent": sent,
                                 "communication_seconds": communicating,
                                 "rounds": _rounds(name, strategy, done)}
    if strategy is not None:
        strategy.finalize()
    sent, _ = _communication(ctx, strategy)
    record.update(final_accuracy=_accuracy(model, X_test, y_test, ctx), steps=done,
                  seconds=seconds, bytes_sent=sent, communication_seconds=communicating,
                  parameter_bytes=sum(p.data.nbytes for p in model.parameters()))
    return record


def _rounds(name, strategy, steps):
    """Collectives of the strategy's averaging so far (DDP: one allreduce of all gradients per
    step)."""
    return steps if strategy is None else strategy.communication_rounds


def _measure_job(args):
    ctx = init()
    ctrl = ctx.comm
    X, y = make_classification(args.rows, N_FEATURES, N_CLASSES, n_informative=8,
                               n_redundant=4, class_sep=1.5, random_state=0, ctx=ctx,
                               dtype=np.float32)
    held_out = len(X) - len(X) // 10
    data = (X[:held_out], y[:held_out], X[held_out:], y[held_out:])
    strategies = {name: _train(name, data, args, ctx) for name in STRATEGIES}
    run = {"ranks": ctx.size, "strategies": strategies}
    if ctx.size == 2 and not args.no_torch:
        torch, _ = common.init_gloo(ctrl)
        if torch is not None:
            torch.set_num_threads(common.blas_threads())  # as many threads as NumPy's BLAS
            run["torch_row"] = measure_torch_row(torch, ctx, ctrl, batch=args.batch,
                                                 steps=args.torch_steps,
                                                 repetitions=args.repetitions)
    run["machine"] = common.machine_info(ctrl)
    return run if ctx.rank == 0 else None


def _compute_per_step(strategies):
    """Seconds of computation per step: the least of the strategies' (time outside
    collectives) / steps.

    Collectives that overlap the computing (DDP's communication thread) can
    add up to more than the time outside them; such a strategy's value is
    left out (its whole time per step when every value is).
    """
    per_step = [((record["seconds"] - record["communication_seconds"]) / record["steps"],
                 record["seconds"] / record["steps"])
                for record in strategies.values() if record["steps"]]
    outside = [value for value, _ in per_step if value > 0]
    return min(outside) if outside else min(whole for _, whole in per_step)


def _modelled_seconds(name, record, p, compute_per_step):
    """Projected seconds to the target at ``p`` ranks: compute plus the alpha-beta model's
    communication of the rounds."""
    reached = record["reached"]
    b = record["parameter_bytes"]
    if name == "gossip":
        per_round = 2 * (ALPHA_SECONDS + b / BANDWIDTH_BYTES)
    else:
        per_round = 2 * (p - 1) * (ALPHA_SECONDS + b / (p * BANDWIDTH_BYTES))
    return reached["steps"] * compute_per_step + reached["rounds"] * per_round


def _summarize(runs):
    largest = runs[max(runs)]
    strategies = largest["strategies"]
    compute = _compute_per_step(strategies)
    summary = {"ranks": largest["ranks"], "compute_seconds_per_step": compute, "projection": {}}
    for name, record in strategies.items():
        if record["reached"] is not None:
            summary["projection"][name] = {str(p): _modelled_seconds(name, record, p, compute)
                                           for p in MODEL_RANKS}
    data_parallel, local = strategies["data_parallel"], strategies["local_sgd"]
    gap = data_parallel["final_accuracy"] - local["final_accuracy"]
    share = None
    if data_parallel["reached"] and local["reached"]:
        share = local["reached"]["bytes_sent"] / data_parallel["reached"]["bytes_sent"]
    summary["local_sgd"] = {"accuracy_gap": gap, "bytes_share_to_target": share}
    torch_row = runs.get(2, {}).get("torch_row")
    if torch_row is not None:
        ratio = torch_row["ratio"]["hpcdist/torch"]
        summary["torch"] = {"ratio": ratio, "torch_model_ratio":
                            torch_row["ratio"]["hpcdist torch model/torch"]}
    return summary


def _describe(run, runs):
    lines = [f"\n{run['ranks']} rank(s): strategy, to the target (steps, s, MB sent), final "
             "accuracy"]
    for name, record in run["strategies"].items():
        reached = record["reached"]
        to_target = ("not reached" if reached is None else
                     f"{reached['steps']:6d} steps {reached['seconds']:7.2f} s "
                     f"{reached['bytes_sent'] / 1e6:9.2f} MB")
        lines.append(f"  {name:14s} {to_target:40s} {record['final_accuracy']:.4f}")
    if "torch_row" in run:
        row = run["torch_row"]
        rates = ", ".join(f"{name} {rate:.1f}" for name, rate in row["steps_per_second"].items())
        lines.append(f"  torch row (steps/s): {rates}; hpcdist/torch "
                     f"{row['ratio']['hpcdist/torch']:.2f}x")
    return "\n".join(lines)


def _summary_text(summary):
    lines = [f"\nprojection from {summary['ranks']} rank(s) to a 10 Gbit/s, 5 us network "
             "(s to the target):"]
    for name, by_ranks in summary["projection"].items():
        lines.append(f"  {name:14s} " + "  ".join(f"{p} ranks {s:8.2f}"
                                                   for p, s in by_ranks.items()))
    local = summary["local_sgd"]
    share = local["bytes_share_to_target"]
    lines.append(f"local SGD: {local['accuracy_gap'] * 100:+.2f} points below data parallel, "
                 f"{'target not reached' if share is None else f'{share:.3f}'} of its bytes "
                 "to the target")
    if "torch" in summary:
        lines.append(f"hpcdist LocalSGD / torch PostLocalSGD: {summary['torch']['ratio']:.2f}x "
                     f"(torch model {summary['torch']['torch_model_ratio']:.2f}x)")
    return "\n".join(lines)


def _plot(report, path):
    pyplot = common.pyplot()
    if pyplot is None:
        return False
    figure, axes = pyplot.subplots(1, 2, figsize=(11, 4))
    largest = report["runs"][str(max(map(int, report["runs"])))]
    for name, record in largest["strategies"].items():
        steps, seconds, sent, accuracy = zip(*record["curve"])
        axes[0].plot(seconds, accuracy, marker=".", label=name)
        axes[1].plot(np.maximum(sent, 1), accuracy, marker=".", label=name)
    for axis, label in zip(axes, ("training seconds", "bytes sent per rank")):
        axis.set_xlabel(label)
        axis.set_ylabel("held-out accuracy")
        axis.axhline(report["settings"]["target"], color="grey", linewidth=0.5)
    axes[1].set_xscale("log")
    axes[0].legend()
    figure.suptitle(f"strategies at {largest['ranks']} ranks")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return True


def _write(runs, args):
    summary = _summarize(runs)
    settings = {key: getattr(args, key) for key in (*DEFAULTS, "target")}
    common.finish_report("strategies", runs, args, settings=settings, summary=summary,
                         text=_summary_text(summary), plot=_plot)


def main(argv=None):
    """Run the benchmark (see the module docstring); returns the exit status."""
    job = {"measure_job": _measure_job, "describe": _describe, "write": _write}
    return common.run_per_rank_count(argv, _parse_args, module="hpcdist.bench.strategies",
                                     title="training strategies", **job)


if __name__ == "__main__":  # each job of the benchmark: python -m hpcdist.bench.strategies
    sys.exit(main())
