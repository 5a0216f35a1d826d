"""``hpcdist bench mlp``: data-parallel MLP training, hpcdist DDP against torch DDP (gloo).

The model is an MLP 784-1024-1024-10 with ReLU (1.86 M float32 parameters,
7.1 MiB of gradients), trained with plain SGD and a cross-entropy loss on
synthetic float32 data (a fixed random batch per rank, the same arrays for
both implementations). One training step::

    hpcdist:  opt.zero_grad(); loss = crit(ddp(x), y); ddp.backward(crit.backward()); opt.step()
    torch:    opt.zero_grad(); loss = crit(ddp(x), y); loss.backward(); opt.step()

with ``hpcdist.DDP(model, bucket_size_mb=B)`` and
``torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=B)`` on a
gloo process group (CPU), both starting from the same weights.

Rank counts. Each rank count is its own ``mpiexec -n N`` job, so that every
measurement sees only its own ranks (and its own thread count)::

    python benchmarks/bench_mlp.py                  # jobs at 1 and 2 ranks, merged
    hpcdist bench mlp [-n N]                         # the same, at 1 and N ranks
    python -m hpcdist.bench.mlp --ranks 1,2,4        # any list of rank counts
    mpiexec -n 2 python -m hpcdist.bench.mlp         # one job, this rank count only

Outside ``mpiexec``, :func:`main` launches one job per rank count in
``--ranks`` (one after the other), each writing its part, and merges them
into one report; under ``mpiexec`` it measures that job's rank count only.

Threads: every rank runs ``hpcdist.init()``, which caps BLAS threads at
``cores // ranks`` per node (1 per rank at 2 ranks on 2 cores; unlimited
when ``OMP_NUM_THREADS`` or a BLAS variable is set, which it honours); at
more than one rank, DDP's communication thread then takes one of them where
a rank has at least 4 (``hpcdist.comm.threads.reserve_core_for_communication``).
torch gets the same count with ``torch.set_num_threads``. The counts are in
the JSON.

Timing: a global batch of ``--batch`` samples (``--batch / N`` per rank) and
``--steps`` steps per timed block. Every implementation is warmed up, then
``--repetitions`` rounds each time one block of every case, one after another
(the first case rotates between rounds). A block's time is that of the
slowest rank (barrier before). Reported: medians over rounds, samples per
second (``batch * steps / time``) and the ratio hpcdist/torch of samples per
second, also as the median of the per-round ratios.

Cases, at N ranks:

``hpcdist``, ``torch``
    Training steps with ``--bucket-size-mb`` (default 25, both DDPs' default).
``hpcdist no_sync``, ``torch no_sync`` (N > 1)
    The same steps inside ``ddp.no_sync()``: the compute of a step without
    its communication. ``1 - no_sync time / step time`` is the share of the
    step that communication costs.
``hpcdist bucket=B`` (N > 1)
    The bucket-size sweep (``--sweep``, default 0, 1, 4, 25, inf MiB; 0 is
    one bucket per parameter, inf one bucket).

For every hpcdist case at N > 1, the share of the step spent in communication
that is not overlapped with computation: on each rank, the sum over the
block's steps of ``ddp.exposed_communication_seconds`` (read after each
``ddp.backward``) over the block's time; reported as the mean over ranks
(median over rounds), and for the rank where it is largest. That one also
counts the time a rank waits for a slower one (skew from other load, not
communication), so the mean is the headline.

Summary: hpcdist's samples/s over torch DDP's at 1 and 2 ranks, the torch
model trained through ``hpcdist.torch`` over torch DDP at 2 ranks, and the
non-overlapped communication's share of the step at 2 ranks (main case);
"not measured" where the run has no such figure.

Output: a table per rank count and a summary on rank 0 (or the launching
process), ``<output-dir>/<name>.json`` and ``<name>.png`` (skipped without
matplotlib).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from .. import nn
from ..comm import init
from ..comm.background import CommunicationThread
from ..nn.optim import SGD
from ..parallel import DDP
from . import common

__all__ = ["main", "LAYER_SIZES"]

LAYER_SIZES = (784, 1024, 1024, 10)
DTYPE = np.float32
LEARNING_RATE = 0.01

DEFAULT_RANKS = (1, 2)
DEFAULT_BATCH = 256
DEFAULT_STEPS = 20
DEFAULT_REPETITIONS = 7
DEFAULT_BUCKET_MB = 25.0
DEFAULT_SWEEP = (0.0, 1.0, 4.0, 25.0, math.inf)
QUICK = {"batch": 32, "steps": 2, "repetitions": 2, "warmup": 1}
WARMUP_STEPS = 3

# the rank counts the summary compares at
RATIO_RANKS = (1, 2)  # hpcdist samples/s over torch's
ADAPTER_RANKS = 2  # the torch model with hpcdist.torch over torch DDP (gloo)
ADAPTER_CASE = "torch+hpcdist"  # the torch model trained with hpcdist.torch.DistributedOptimizer
EXPOSED_RANKS = 2  # non-overlapped communication share of the step


# -- arguments ------------------------------------------------------------------------------

def _bucket_list(text):
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or any(not value >= 0 for value in values):
        raise argparse.ArgumentTypeError(f"{text!r} should be a comma list of bucket sizes "
                                         "in MiB >= 0, e.g. 0,1,4,25,inf")
    return values


def _build_parser():
    parser = common.benchmark_parser(
        "mlp",
        f"Samples per second of data-parallel training of an MLP "
        f"{'-'.join(map(str, LAYER_SIZES))}: hpcdist.DDP against torch DDP (gloo), "
        "interleaved, at each rank count; non-overlapped communication and a bucket-size "
        "sweep. Outside mpiexec it launches one job per rank count.",
        quick=f"short run (a few seconds per job): batch {QUICK['batch']}, {QUICK['steps']} "
              f"steps, {QUICK['repetitions']} repetitions")
    parser.add_argument("--batch", type=int,
                        help=f"global batch, split evenly over the ranks (default "
                             f"{DEFAULT_BATCH}; {QUICK['batch']} with --quick)")
    parser.add_argument("--steps", type=int,
                        help=f"training steps per timed block (default {DEFAULT_STEPS})")
    parser.add_argument("--repetitions", type=int,
                        help=f"timed rounds (default {DEFAULT_REPETITIONS})")
    parser.add_argument("--bucket-size-mb", type=float, default=DEFAULT_BUCKET_MB,
                        help="bucket size of both DDPs in the main comparison (default 25)")
    parser.add_argument("--sweep", type=_bucket_list, default=list(DEFAULT_SWEEP),
                        help="hpcdist bucket sizes in MiB timed at more than one rank "
                             "(default 0,1,4,25,inf)")
    parser.add_argument("--no-torch", action="store_true",
                        help="leave torch DDP out even when torch is importable")
    common.add_job_options(parser, default_ranks=DEFAULT_RANKS)
    return parser


def _parse_args(argv):
    parser = _build_parser()
    args = parser.parse_args(argv)
    common.fill_sizes(parser, args, {"batch": DEFAULT_BATCH, "steps": DEFAULT_STEPS,
                                     "repetitions": DEFAULT_REPETITIONS}, QUICK)
    args.warmup = QUICK["warmup"] if args.quick else WARMUP_STEPS
    if not args.bucket_size_mb >= 0 or math.isinf(args.bucket_size_mb):
        parser.error(f"--bucket-size-mb={args.bucket_size_mb} should be finite and >= 0 "
                     "(torch's bucket_cap_mb takes no inf)")
    uneven = [n for n in args.ranks if args.batch % n]
    if uneven:
        parser.error(f"--batch={args.batch} should be a multiple of every rank count; "
                     f"it is not for {uneven}")
    return args


def _bucket_label(size_mb):
    return "inf" if math.isinf(size_mb) else f"{size_mb:g}"


# -- the two trainers -------------------------------------------------------------------------

class _HpcdistTrainer:
    """hpcdist.DDP over the MLP; ``exposed`` sums ``exposed_communication_seconds``."""

    def __init__(self, ctx, bucket_size_mb, x, y):
        layers = []
        for seed, (n_in, n_out) in enumerate(zip(LAYER_SIZES[:-1], LAYER_SIZES[1:])):
            layers += [nn.Linear(n_in, n_out, dtype=DTYPE, random_state=seed), nn.ReLU()]
        layers[0].needs_input_grad = False  # the input is data, as torch knows for its x
        self.model = nn.Sequential(*layers[:-1])
        self.ddp = DDP(self.model, bucket_size_mb=bucket_size_mb, ctx=ctx)
        self.optimizer = SGD(self.model.parameters(), lr=LEARNING_RATE)
        self.criterion = nn.CrossEntropyLoss()
        self.x, self.y = x, y
        self.exposed = 0.0

    def _gradients(self):
        self.optimizer.zero_grad()
        self.criterion(self.ddp(self.x), self.y)
        self.ddp.backward(self.criterion.backward())

    def step(self):
        self._gradients()
        self.exposed += self.ddp.exposed_communication_seconds
        self.optimizer.step()

    def local_step(self):
        """A step with the backward inside ``no_sync()``: the same compute, no communication."""
        with self.ddp.no_sync():
            self._gradients()
        self.optimizer.step()

    def weights(self):
        """(weight, bias) of each Linear layer, as NumPy arrays."""
        return [(layer.weight.data, layer.bias.data) for layer in self.model
                if hasattr(layer, "weight")]


def _torch_mlp(torch, weights):
    """The benchmark's MLP in torch, starting from ``weights`` (hpcdist's)."""
    layers = []
    for n_in, n_out in zip(LAYER_SIZES[:-1], LAYER_SIZES[1:]):
        layers += [torch.nn.Linear(n_in, n_out), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1])
    with torch.no_grad():
        linears = [layer for layer in model if isinstance(layer, torch.nn.Linear)]
        for layer, (weight, bias) in zip(linears, weights):
            layer.weight.copy_(torch.from_numpy(weight))
            layer.bias.copy_(torch.from_numpy(bias))
    return model


class _TorchTrainer:
    """torch DistributedDataParallel over the same layers, starting from ``weights``."""

    exposed = 0.0  # torch DDP does not measure its non-overlapped communication

    def __init__(self, torch, bucket_size_mb, x, y, weights):
        model = _torch_mlp(torch, weights)
        self.ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_size_mb)
        self.optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
        self.criterion = torch.nn.CrossEntropyLoss()
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)

    def step(self):
        self.optimizer.zero_grad()
        self.criterion(self.ddp(self.x), self.y).backward()
        self.optimizer.step()

    def local_step(self):
        with self.ddp.no_sync():
            self.step()


class _TorchAdapterTrainer(_TorchTrainer):
    """The same torch model trained with ``hpcdist.torch.DistributedOptimizer`` (no DDP)."""

    def __init__(self, torch, ctx, bucket_size_mb, x, y, weights):
        from .. import torch as adapter  # the torch extra: imported only when torch is

        model = _torch_mlp(torch, weights)
        self.ddp = model  # what step() runs: the plain model
        self.optimizer = adapter.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=LEARNING_RATE), model.named_parameters(),
            bucket_size_mb=bucket_size_mb, ctx=ctx)
        self.criterion = torch.nn.CrossEntropyLoss()
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)


# -- one job: measure at this rank count ------------------------------------------------------

def _cases(ctx, torch, args, x, y):
    """name -> (trainer, its step method) for every case timed at this rank count."""
    main = _HpcdistTrainer(ctx, args.bucket_size_mb, x, y)
    cases = {"hpcdist": (main, main.step)}
    if torch is not None:
        baseline = _TorchTrainer(torch, args.bucket_size_mb, x, y, main.weights())
        cases["torch"] = (baseline, baseline.step)
        adapted = _TorchAdapterTrainer(torch, ctx, args.bucket_size_mb, x, y, main.weights())
        cases[ADAPTER_CASE] = (adapted, adapted.step)
    if ctx.size > 1:
        cases["hpcdist no_sync"] = (main, main.local_step)
        if torch is not None:
            cases["torch no_sync"] = (baseline, baseline.local_step)
        for size_mb in args.sweep:
            if size_mb != args.bucket_size_mb:  # that one is the "hpcdist" case
                trainer = _HpcdistTrainer(ctx, size_mb, x, y)
                cases[_sweep_case(size_mb, args)] = (trainer, trainer.step)
    return cases


def _sweep_case(size_mb, args):
    """The case that times hpcdist with buckets of ``size_mb`` MiB."""
    if size_mb == args.bucket_size_mb:
        return "hpcdist"
    return f"hpcdist bucket={_bucket_label(size_mb)}"


def _time_block(ctrl, trainer, step, steps):
    """Run ``steps`` steps; the slowest rank's seconds and each rank's non-overlapped share."""
    trainer.exposed = 0.0
    ctrl.Barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    elapsed = time.perf_counter() - start
    per_rank = ctrl.allgather((elapsed, trainer.exposed / elapsed))
    return max(t for t, _ in per_rank), [share for _, share in per_rank]


def _measure(ctrl, cases, args):
    """Warm up every case, then time interleaved rounds; seconds and shares per case."""
    for trainer, step in cases.values():
        _time_block(ctrl, trainer, step, args.warmup)
    names = list(cases)
    seconds = {name: [] for name in names}
    exposed = {name: [] for name in names}
    for rep in range(args.repetitions):
        first = rep % len(names)
        for name in names[first:] + names[:first]:
            elapsed, share = _time_block(ctrl, *cases[name], args.steps)
            seconds[name].append(elapsed)
            exposed[name].append(share)
    return seconds, exposed


def _median(values):
    return float(np.median(values))


def _case_record(seconds, exposed, args, with_exposed):
    """Medians of one case; ``exposed`` holds each round's per-rank shares."""
    record = {"step_ms": _median(seconds) / args.steps * 1e3,
              "samples_per_second": args.batch * args.steps / _median(seconds),
              "block_seconds": seconds}
    if with_exposed:
        record["exposed_communication_share"] = _median([np.mean(r) for r in exposed])
        record["exposed_communication_share_max_rank"] = _median([max(r) for r in exposed])
        record["exposed_communication_shares_per_rank"] = exposed
    return record


def _run_record(ctx, cases, seconds, exposed, args, extra):
    """The JSON record of one rank count."""
    communicating = ctx.size > 1  # only synchronising hpcdist steps have an exposed share
    records = {name: _case_record(seconds[name], exposed[name], args,
                                  communicating and name.startswith("hpcdist")
                                  and not name.endswith("no_sync"))
               for name in cases}
    run = {"ranks": ctx.size, "global_batch": args.batch, "local_batch": args.batch // ctx.size,
           "steps": args.steps, "repetitions": args.repetitions, "warmup_steps": args.warmup,
           "bucket_size_mb": args.bucket_size_mb, **extra,
           "cases": {name: record for name, record in records.items()
                     if not name.startswith("hpcdist bucket=")}}
    if "torch" in records:
        run["ratio"] = {"hpcdist/torch samples_per_second":
                        records["hpcdist"]["samples_per_second"]
                        / records["torch"]["samples_per_second"],
                        "paired": _median(np.divide(seconds["torch"], seconds["hpcdist"])),
                        "adapter/torch samples_per_second":
                        records[ADAPTER_CASE]["samples_per_second"]
                        / records["torch"]["samples_per_second"],
                        "adapter paired": _median(np.divide(seconds["torch"],
                                                            seconds[ADAPTER_CASE]))}
    overhead = {}
    for name in ("hpcdist", "torch"):
        if f"{name} no_sync" in records:
            overhead[name] = 1.0 - (_median(seconds[f"{name} no_sync"]) / _median(seconds[name]))
    if overhead:
        run["communication_share"] = overhead
    if ctx.size > 1:
        sweep = {_bucket_label(size): _sweep_case(size, args) for size in args.sweep}
        run["bucket_sweep"] = [{"bucket_size_mb": label,
                                "buckets": len(cases[name][0].ddp.buckets), **records[name]}
                               for label, name in sweep.items()]
    return run


def _measure_job(args):
    """Measure at this job's rank count; returns the record on rank 0, else None."""
    ctx = init()
    ctx.check = False
    ctrl = ctx.comm.Dup()
    if args.batch % ctx.size:
        raise SystemExit(f"hpcdist bench mlp: --batch={args.batch} should be a multiple of "
                         f"the {ctx.size} ranks")
    if ctx.size > 1 and CommunicationThread.available():
        # DDP's communication thread, started before any case so that all of them (torch
        # too) compute with the threads it leaves (see hpcdist.comm.threads)
        ctx.communication_thread()
    threads = common.blas_threads()  # before torch loads its own thread pools
    torch, dist = common.init_gloo(ctrl, enabled=not args.no_torch)
    if torch is not None:
        torch.set_num_threads(threads)
    load_before = common.load_average()
    try:
        rng = np.random.default_rng(1000 + ctx.rank)
        local = args.batch // ctx.size
        x = rng.standard_normal((local, LAYER_SIZES[0]), dtype=DTYPE)
        y = rng.integers(0, LAYER_SIZES[-1], size=local, dtype=np.int64)
        cases = _cases(ctx, torch, args, x, y)
        seconds, exposed = _measure(ctrl, cases, args)
        torch_note = ({"available": True, "version": str(torch.__version__),
                       "threads": torch.get_num_threads(), "backend": "gloo"}
                      if torch is not None else
                      {"available": False, "note": "left out (--no-torch)" if args.no_torch
                       else "torch.distributed with gloo is not importable: no baseline"})
        extra = {"blas_threads_per_rank": threads, "torch": torch_note,
                 "machine": common.machine_info(ctrl, load_average_before=load_before,
                                                load_average_after=common.load_average())}
        run = _run_record(ctx, cases, seconds, exposed, args, extra)
    finally:
        if dist is not None:
            dist.destroy_process_group()
        ctrl.Free()
    return run if ctx.rank == 0 else None


# -- launching one job per rank count -----------------------------------------------------------

# -- report -----------------------------------------------------------------------------------

def _percent(value):
    return "-" if value is None else f"{100 * value:.1f}%"


def _run_text(run):
    cases, share = run["cases"], run.get("communication_share", {})
    lines = [f"\n{run['ranks']} rank(s): global batch {run['global_batch']} "
             f"({run['local_batch']} per rank), {run['steps']} steps x {run['repetitions']} "
             f"repetitions, {run['blas_threads_per_rank']} BLAS thread(s) per rank"
             + (f", torch {run['torch']['threads']} thread(s)" if run["torch"]["available"]
                else f"; torch: {run['torch']['note']}"),
             f"  {'case':18s} {'step ms':>9s} {'samples/s':>11s} {'not overlapped':>15s} "
             f"{'comm. share':>12s}"]
    for name, record in cases.items():
        implementation = name.split()[0]
        lines.append(f"  {name:18s} {record['step_ms']:9.2f} {record['samples_per_second']:11.0f} "
                     f"{_percent(record.get('exposed_communication_share')):>15s} "
                     f"{_percent(None if 'no_sync' in name else share.get(implementation)):>12s}")
    if "ratio" in run:
        ratio = run["ratio"]
        lines.append(f"  hpcdist/torch samples/s: {ratio['hpcdist/torch samples_per_second']:.3f} "
                     f"(paired per round: {ratio['paired']:.3f})")
        lines.append(f"  {ADAPTER_CASE}/torch samples/s: "
                     f"{ratio['adapter/torch samples_per_second']:.3f} "
                     f"(paired per round: {ratio['adapter paired']:.3f})")
    if "bucket_sweep" in run:
        lines.append(f"  bucket sweep (hpcdist): {'MiB':>5s} {'buckets':>8s} {'step ms':>9s} "
                     f"{'samples/s':>11s} {'not overlapped':>15s}")
        for row in run["bucket_sweep"]:
            lines.append(f"  {'':23s}{row['bucket_size_mb']:>5s} {row['buckets']:8d} "
                         f"{row['step_ms']:9.2f} {row['samples_per_second']:11.0f} "
                         f"{_percent(row['exposed_communication_share']):>15s}")
    return "\n".join(lines)


def _summarize(runs):
    """The summary's figures, from the runs by rank count (None where not measured)."""
    summary = {}
    for n in RATIO_RANKS:
        ratio = runs.get(n, {}).get("ratio", {}).get("hpcdist/torch samples_per_second")
        summary[f"samples_per_second_vs_torch_at_{n}_ranks"] = common.summary_entry(
            "hpcdist/torch samples/s", ratio)
    adapter = (runs.get(ADAPTER_RANKS, {}).get("ratio", {})
               .get("adapter/torch samples_per_second"))
    summary[f"torch_adapter_vs_torch_ddp_at_{ADAPTER_RANKS}_ranks"] = common.summary_entry(
        f"{ADAPTER_CASE}/torch samples/s", adapter)
    share = (runs.get(EXPOSED_RANKS, {}).get("cases", {}).get("hpcdist", {})
             .get("exposed_communication_share"))
    summary[f"exposed_communication_at_{EXPOSED_RANKS}_ranks"] = common.summary_entry(
        "non-overlapped communication / step time (hpcdist)", share)
    return summary


def _summary_text(summary):
    return "\n".join(common.summary_lines(summary))


def _settings(args):
    return {"layers": list(LAYER_SIZES), "activation": "relu", "dtype": np.dtype(DTYPE).name,
            "optimizer": f"SGD(lr={LEARNING_RATE})", "loss": "cross-entropy",
            "data": "synthetic: one fixed standard-normal batch per rank, uniform labels",
            "rank_counts": list(args.ranks), "global_batch": args.batch, "steps": args.steps,
            "repetitions": args.repetitions, "bucket_size_mb": args.bucket_size_mb,
            "sweep_bucket_size_mb": [_bucket_label(size) for size in args.sweep],
            "quick": args.quick,
            "timing": "one mpiexec job per rank count; per round every case runs a block of "
                      "`steps` steps after a barrier, the first case rotating between rounds; "
                      "a block's time is the slowest rank's; medians over rounds"}


def _plot(report, path):
    """Samples/s per rank count, and the bucket sweep; False without matplotlib."""
    plt = common.pyplot()
    if plt is None:
        return False
    runs = report["runs"]
    sweep = next((run["bucket_sweep"] for run in reversed(list(runs.values()))
                  if "bucket_sweep" in run), None)
    fig, axes = plt.subplots(1, 2 if sweep else 1, figsize=(11 if sweep else 5.5, 4),
                             squeeze=False)
    ax = axes[0, 0]
    ranks = list(runs)
    for offset, name in ((-0.2, "hpcdist"), (0.2, "torch")):
        values = [runs[n]["cases"].get(name, {}).get("samples_per_second", 0) for n in ranks]
        ax.bar(np.arange(len(ranks)) + offset, values, width=0.4, label=name)
    ax.set_xticks(range(len(ranks)), [f"{n} rank(s)" for n in ranks])
    ax.set_ylabel("samples / s (median)")
    ax.set_title("training throughput")
    ax.legend(fontsize="small")
    if sweep:
        ax = axes[0, 1]
        labels = [row["bucket_size_mb"] for row in sweep]
        ax.bar(range(len(sweep)), [row["samples_per_second"] for row in sweep], color="tab:blue")
        ax.set_xticks(range(len(sweep)), labels)
        ax.set_xlabel("bucket_size_mb")
        ax.set_ylabel("samples / s (median)")
        twin = ax.twinx()
        twin.plot(range(len(sweep)), [100 * row["exposed_communication_share"] for row in sweep],
                  "o-", color="tab:red")
        twin.set_ylabel("non-overlapped communication (% of step)", color="tab:red")
        ax.set_title(f"hpcdist bucket sweep at {ranks[-1]} ranks")
    machine = report["machine"]
    fig.suptitle(f"hpcdist MLP {'-'.join(map(str, LAYER_SIZES))}, global batch "
                 f"{report['settings']['global_batch']}: {machine['hostname']} "
                 f"({machine['cpu_count']} cores), {machine['date']}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _write_report(runs, args):
    """Print the summary and write the JSON (and the plot) of the runs by rank count."""
    summary = _summarize(runs)
    common.finish_report("mlp", runs, args, settings=_settings(args), summary=summary,
                         text=_summary_text(summary), plot=_plot)


# -- main -------------------------------------------------------------------------------------

def main(argv=None):
    """Run the MLP benchmark with ``argv`` (default ``sys.argv[1:]``, see ``--help``);
    returns the exit status. See the module docstring."""
    return common.run_per_rank_count(argv, _parse_args, module="hpcdist.bench.mlp",
                                     title="hpcdist MLP benchmark", measure_job=_measure_job,
                                     describe=lambda run, runs: _run_text(run), write=_write_report)


if __name__ == "__main__":
    sys.exit(main())
