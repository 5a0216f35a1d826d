"""``hpcdist bench pipeline``: pipeline schedules against one rank and data parallelism.

Model: a deep hpcdist.nn MLP (``--layers`` Linear+Tanh blocks of width
``--width``, float32, one Linear to 10 classes), a global batch of ``--batch``
random rows, plain SGD. At each rank count ``p`` > 1 the model is split into
``p`` stages of consecutive blocks; for ``gpipe`` and ``1f1b`` and ``m`` = 1,
2, 4, 8, 16 micro-batches it reports:

- samples per second (median of ``--repetitions`` timed steps, after one
  warm-up step), beside the same model on one rank (the 1-rank job) and
  data parallelism (DDP, the batch split over the ``p`` ranks);
- the bubble four ways: *measured* (each stage's idle time over busy plus
  idle inside ``train_step``, from :meth:`Pipeline.stats`, averaged over
  stages), *replayed* (the schedule replayed with each stage's measured
  per-micro-batch CPU times, see
  :func:`~hpcdist.parallel.pipeline_schedules.replay_bubble`: free of the
  waits of ranks sharing cores, not of their slowing each other's compute),
  *alone* (replayed with each stage's forward and backward of one
  micro-batch timed in one process, rank 0, while the other ranks sleep, the
  stages taking turns ``ALONE_REPETITIONS`` times: the minimum of each) and
  *ideal* ``(p - 1) / (m + p - 1)``;
- the peak number of micro-batches (and bytes of activations) a stage keeps
  for its backward (1F1B at most ``p``, GPipe ``m``).

With more ranks than cores, wall time (samples per second, measured bubble)
mostly shows the ranks taking turns on the cores; the replayed bubbles and
the stash peaks do not depend on that. The in-run CPU times still do: two
stages of the same work can differ by tens of percent when ranks share
cores, and so can two cores of one virtual machine. The alone column times
every stage in one process, so it compares the stages' work.

Summary: each bubble's largest distance from the formula at m >= 4, and
1F1B's stash peak over GPipe's beside p / m, the most it should be.
"""

import time

import numpy as np

from .. import nn
from ..comm import allgather_object, broadcast_object, init
from ..nn.optim import SGD
from ..parallel import DDP, Pipeline
from ..parallel.pipeline_schedules import ideal_bubble, replay_bubble
from . import common

__all__ = ["main"]

SCHEDULES = ("gpipe", "1f1b")
MICRO_BATCHES = (1, 2, 4, 8, 16)
N_CLASSES = 10
ALONE_REPETITIONS = 15
DEFAULTS = {"width": 512, "layers": 8, "batch": 512, "repetitions": 5}
QUICK = {"width": 128, "layers": 4, "batch": 128, "repetitions": 2}


def _parse_args(argv):
    parser = common.benchmark_parser(
        "pipeline", "Pipeline schedules (GPipe, 1F1B) against one rank and data parallelism: "
        "samples per second, bubble, stashed activations.",
        quick="a small model and batch, two repetitions", plot=False)
    common.add_job_options(parser, default_ranks=(1, 2, 4))
    for key in DEFAULTS:
        parser.add_argument(f"--{key}", type=int, default=None,
                            help=f"default {DEFAULTS[key]} ({QUICK[key]} with --quick)")
    args = parser.parse_args(argv)
    common.fill_sizes(parser, args, DEFAULTS, QUICK)
    return args


def _blocks(args):
    rng = np.random.default_rng(0)
    made = [[nn.Linear(args.width, args.width, random_state=rng), nn.Tanh()]
            for _ in range(args.layers)]
    made[-1].append(nn.Linear(args.width, N_CLASSES, random_state=rng))
    return made


def _stages(args, count):
    blocks, parts, start = _blocks(args), [], 0
    for size in np.diff(np.linspace(0, len(blocks), count + 1).round().astype(int)):
        parts.append(nn.Sequential(*[m for b in blocks[start:start + size] for m in b]))
        start += size
    return parts


def _data(args):
    rng = np.random.default_rng(1)
    return (rng.normal(size=(args.batch, args.width)).astype(np.float32),
            rng.integers(0, N_CLASSES, args.batch))


def _samples_per_second(args, step, ctrl):
    def timed():
        common.idle_until_all_arrive(ctrl)
        step()
    return args.batch / common.median_seconds(timed, args.repetitions)


def _plain(args, ctx, ctrl):
    """Samples per second of the whole model: on one rank, or DDP over the ranks."""
    model = nn.Sequential(*[m for b in _blocks(args) for m in b])
    if ctx.size > 1:
        model = DDP(model, ctx=ctx)
    optimizer, loss_fn = SGD(list(model.parameters()), lr=0.01), nn.CrossEntropyLoss()
    x, y = _data(args)
    rows = np.array_split(np.arange(args.batch), ctx.size)[ctx.rank]

    def step():
        optimizer.zero_grad()
        loss_fn.forward(model.forward(x[rows]), y[rows])
        model.backward(loss_fn.backward())
        optimizer.step()
    return _samples_per_second(args, step, ctrl)


def _alone_seconds(args, ctx, ctrl, m):
    """Every stage's ``(forwards, backwards)``: seconds for one of ``m`` micro-batches,
    timed on rank 0 alone while the other ranks sleep, the stages taking turns
    ``ALONE_REPETITIONS`` times (the minimum of each), on fresh copies of the stages."""
    timings = None
    if ctx.rank == 0:
        stages = _stages(args, ctx.size)
        x, y = _data(args)
        rows = len(np.array_split(np.arange(args.batch), m)[0])
        x, y = x[:rows], y[:rows]
        loss_fn = nn.CrossEntropyLoss()
        timings = [[[], []] for _ in stages]
        for _ in range(ALONE_REPETITIONS + 1):  # the first is a warm-up
            for stage, (forwards, backwards) in zip(stages, timings):
                start = time.perf_counter()
                out = stage.forward(x)
                if stage is stages[-1]:
                    loss_fn.forward(out, y)
                middle = time.perf_counter()
                stage.backward(loss_fn.backward() if stage is stages[-1] else np.ones_like(out))
                forwards.append(middle - start)
                backwards.append(time.perf_counter() - middle)
        timings = [[min(times[1:]) for times in stage] for stage in timings]
    common.idle_until_all_arrive(ctrl)
    timings = broadcast_object(timings, root=0, ctx=ctx)
    return [forward for forward, _ in timings], [backward for _, backward in timings]


def _pipeline(args, ctx, ctrl, schedule, m, alone):
    pipe = Pipeline(_stages(args, ctx.size), micro_batches=m, schedule=schedule, ctx=ctx)
    optimizer, loss_fn = SGD(pipe.parameters(), lr=0.01), nn.CrossEntropyLoss()
    x, y = _data(args)

    def step():
        pipe.train_step(x if pipe.is_first_stage else None, y if pipe.is_last_stage else None,
                        loss_fn)
        optimizer.step()
    step()  # the shape exchange, outside the measurements
    pipe.reset_stats()
    rate = _samples_per_second(args, step, ctrl)
    stats = allgather_object(pipe.stats(), ctx=ctx)
    forwards = [s["forward_cpu_seconds"] for s in stats]
    backwards = [s["backward_cpu_seconds"] for s in stats]
    replayed = replay_bubble(schedule, forwards, backwards, m)
    alone_forwards, alone_backwards = alone
    return {"schedule": schedule, "micro_batches": m, "samples_per_second": rate,
            "bubble_measured": float(np.mean([s["bubble"] for s in stats])),
            "bubble_replayed": replayed,
            "bubble_alone": replay_bubble(schedule, alone_forwards, alone_backwards, m),
            "bubble_ideal": ideal_bubble(ctx.size, m),
            "forward_cpu_seconds": forwards,
            "backward_cpu_seconds": backwards,
            "forward_seconds_alone": alone_forwards,
            "backward_seconds_alone": alone_backwards,
            "stashed_peak": [s["stashed_peak"] for s in stats],
            "stashed_peak_bytes": [s["stashed_peak_bytes"] for s in stats]}


def _measure_job(args):
    ctx = init()
    ctrl = ctx.comm
    run = {"ranks": ctx.size}
    started = time.perf_counter()
    if ctx.size == 1:
        run["one_rank_samples_per_second"] = _plain(args, ctx, ctrl)
    else:
        run["ddp_samples_per_second"] = _plain(args, ctx, ctrl)
        alone = {m: _alone_seconds(args, ctx, ctrl, m) for m in MICRO_BATCHES}
        run["pipeline"] = [_pipeline(args, ctx, ctrl, schedule, m, alone[m])
                           for schedule in SCHEDULES for m in MICRO_BATCHES]
    run["seconds"] = time.perf_counter() - started
    run["machine"] = common.machine_info(ctrl)
    return run if ctx.rank == 0 else None


def _describe(run, runs):
    p = run["ranks"]
    if p == 1:
        return f"1 rank: {run['one_rank_samples_per_second']:.0f} samples/s"
    lines = [f"{p} ranks: DDP {run['ddp_samples_per_second']:.0f} samples/s",
             f"  {'schedule':8} {'m':>3} {'samples/s':>10} {'measured':>9} {'replayed':>9} "
             f"{'alone':>6} {'ideal':>6}  stash peaks per stage"]
    for row in run["pipeline"]:
        lines.append(f"  {row['schedule']:8} {row['micro_batches']:3d} "
                     f"{row['samples_per_second']:10.0f} {row['bubble_measured']:9.3f} "
                     f"{row['bubble_replayed']:9.3f} {row['bubble_alone']:6.3f} "
                     f"{row['bubble_ideal']:6.3f}  "
                     f"{row['stashed_peak']}")
    return "\n".join(lines)


def _summarize(runs):
    summary = {}
    for p, run in runs.items():
        if p == 1:
            continue
        rows = {(r["schedule"], r["micro_batches"]): r for r in run["pipeline"]}
        deep = [r for r in run["pipeline"] if r["micro_batches"] >= 4]
        summary[str(p)] = {
            "largest_gap_measured": max(abs(r["bubble_measured"] - r["bubble_ideal"])
                                        for r in deep),
            "largest_gap_replayed": max(abs(r["bubble_replayed"] - r["bubble_ideal"])
                                        for r in deep),
            "largest_gap_alone": max(abs(r["bubble_alone"] - r["bubble_ideal"]) for r in deep),
            "stash_ratio_1f1b_over_gpipe": {
                str(m): max(rows["1f1b", m]["stashed_peak"]) / max(rows["gpipe", m]["stashed_peak"])
                for m in MICRO_BATCHES},
            "stash_ratio_p_over_m": {str(m): min(1.0, p / m) for m in MICRO_BATCHES},
        }
    return summary


def _summary_text(summary):
    lines = []
    for p, s in summary.items():
        lines.append(f"{p} stages: bubble vs (p-1)/(m+p-1) at m >= 4: measured within "
                     f"{100 * s['largest_gap_measured']:.1f} points, replayed within "
                     f"{100 * s['largest_gap_replayed']:.1f}, alone within "
                     f"{100 * s['largest_gap_alone']:.1f}; 1F1B/GPipe stash peaks "
                     f"{s['stash_ratio_1f1b_over_gpipe']} (p/m: {s['stash_ratio_p_over_m']})")
    return "\n".join(lines)


def _write(runs, args):
    summary = _summarize(runs)
    settings = {key: getattr(args, key) for key in DEFAULTS}
    common.finish_report("pipeline", runs, args, settings=settings, summary=summary,
                         text=_summary_text(summary))


def main(argv=None):
    """Run the benchmark (see the module docstring); returns the exit status."""
    return common.run_per_rank_count(argv, _parse_args, module="hpcdist.bench.pipeline",
                                     title="pipeline schedules", measure_job=_measure_job,
                                     describe=_describe, write=_write)


if __name__ == "__main__":
    raise SystemExit(main())
