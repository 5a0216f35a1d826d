"""``hpcdist bench kmeans``: Lloyd iterations, hpcdist KMeans against scikit-learn.

The data: ``hpcdist.data.make_blobs(1_000_000, 32, centers=64,
cluster_std=4.0, random_state=0)`` in float32 (overlapping blobs, so that
Lloyd does not converge before the last iteration), each rank generating only
its own rows. Every implementation starts from the same initial centers (the
first 64 global rows) and runs ``--iterations`` (50) Lloyd iterations with
``tol=0``::

    hpcdist:       hpcdist.ml.KMeans(64, init=C, max_iter=50, tol=0).fit(X_local)
    scikit-learn:  sklearn.cluster.KMeans(64, init=C, n_init=1, max_iter=50, tol=0,
                                          algorithm="lloyd").fit(X)
    sklearnex:     sklearnex.cluster.KMeans(...)  (when scikit-learn-intelex is installed)

A measurement is the wall time of a whole ``fit`` (validation, centering,
iterations, final labels) divided by its ``n_iter_``: seconds per iteration.
GFLOP/s counts the distance GEMM only, ``2 n k d`` per iteration. The
machine's sgemm peak is measured in the same job: a large float32 ``np.dot``
(4096 x 4096) on every rank at once, with the rank's BLAS threads; the peak is
the sum over ranks.

Rank counts and threads. Each rank count is its own ``mpiexec -n N`` job
(default 1 and 2). ``hpcdist.init()`` gives every rank ``cores / N`` BLAS and
Numba threads. Every job also times the baselines, interleaved with hpcdist
so that both see the same machine load: on rank 0, on all cores
(``threadpoolctl`` limits set to the core count) and on the whole data set,
while the other ranks sleep (a polled ``Ibarrier``, not a spinning wait). The
speedup at N ranks compares with the baseline timed in the same job::

    python benchmarks/bench_kmeans.py                 # jobs at 1 and 2 ranks, merged
    hpcdist bench kmeans [-n N]                       # the same, at 1 and N ranks
    python -m hpcdist.bench.kmeans --ranks 1,2,4      # any list of rank counts
    mpiexec -n 2 python -m hpcdist.bench.kmeans       # one job, this rank count only

Timing: one warm-up fit per implementation (Numba compilation, caches), then
``--repetitions`` rounds, each timing every implementation once, the first
one rotating between rounds; a fit's time is that of the slowest rank (barrier
before). Reported: medians over rounds.

Summary: at 2 ranks, scikit-learn's seconds per iteration (on all cores)
over hpcdist's, and hpcdist's distance GFLOP/s as a fraction of the
machine's sgemm peak measured in the same job.

Output: a table per rank count and the summary on rank 0 (or the launching
process), ``<output-dir>/<name>.json`` and ``<name>.png`` (skipped without
matplotlib).
"""

from __future__ import annotations

import os
import sys
import time

import numba
import numpy as np
from sklearn import cluster
from threadpoolctl import threadpool_limits

from ..comm import broadcast, init
from ..data import make_blobs
from ..ml import KMeans
from . import common

__all__ = ["main", "DEFAULTS", "QUICK"]

DEFAULTS = {"samples": 1_000_000, "features": 32, "clusters": 64, "iterations": 50,
            "repetitions": 5, "sgemm_size": 4096}
QUICK = {"samples": 20_000, "features": 32, "clusters": 16, "iterations": 5,
         "repetitions": 2, "sgemm_size": 512}
DEFAULT_RANKS = (1, 2)
CLUSTER_STD = 4.0
DTYPE = np.float32

SUMMARY_RANKS = 2  # the rank count the summary compares with scikit-learn


# -- arguments ------------------------------------------------------------------------------

def _build_parser():
    parser = common.benchmark_parser(
        "kmeans",
        "Seconds per Lloyd iteration of hpcdist's KMeans against scikit-learn (and "
        "scikit-learn-intelex) from the same initial centers, with GFLOP/s and the fraction "
        "of the machine's sgemm peak. Outside mpiexec it launches one job per rank count.",
        quick="a few seconds per job (for tests): "
              + ", ".join(f"{k}={v}" for k, v in QUICK.items()))
    for key, text in (("samples", "global rows"), ("features", "columns"),
                      ("clusters", "k"), ("iterations", "Lloyd iterations per fit (tol=0)"),
                      ("repetitions", "timed rounds"),
                      ("sgemm_size", "side of the square float32 matrices of the sgemm peak")):
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, dest=key,
                            help=f"{text} (default {DEFAULTS[key]}; {QUICK[key]} with --quick)")
    parser.add_argument("--no-baselines", action="store_true",
                        help="time hpcdist only (no scikit-learn, no sklearnex)")
    common.add_job_options(parser, default_ranks=DEFAULT_RANKS)
    return parser


def _parse_args(argv):
    parser = _build_parser()
    args = parser.parse_args(argv)
    common.fill_sizes(parser, args, DEFAULTS, QUICK)
    if args.samples < args.clusters * max(args.ranks):
        parser.error(f"--samples={args.samples} should be at least --clusters x ranks "
                     f"({args.clusters} x {max(args.ranks)})")
    return args


# -- implementations ---------------------------------------------------------------------------

def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _hpcdist_fit(ctx, X_local, centers, args):
    model = KMeans(args.clusters, init=centers, max_iter=args.iterations, tol=0.0,
                   comm=ctx).fit(X_local)
    return model.n_iter_, model.inertia_


def _sklearn_fit(X, centers, args, module):
    with threadpool_limits(limits=_cores()):
        model = module.KMeans(args.clusters, init=centers, n_init=1, max_iter=args.iterations,
                              tol=0.0, algorithm="lloyd").fit(X)
    return int(model.n_iter_), float(model.inertia_)


def _sklearnex_module():
    try:
        import sklearnex.cluster as module
    except ImportError:
        return None
    return module


def _sgemm_seconds(ctrl, size, repetitions=3):
    """Median seconds of a ``size``-square float32 np.dot, run on every rank at once."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    np.dot(a, b)
    times = []
    for _ in range(repetitions):
        ctrl.Barrier()
        start = time.perf_counter()
        np.dot(a, b)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


# -- one job: measure at this rank count ---------------------------------------------------------

def _whole_data_on_rank_0(ctx, X_local, args):
    """The whole data set on rank 0 (generated there alone), None elsewhere."""
    if ctx.size == 1:
        return X_local
    solo = ctx.split(ctx.rank)
    if ctx.rank != 0:
        return None
    X, _ = make_blobs(args.samples, args.features, centers=args.clusters,
                      cluster_std=CLUSTER_STD, random_state=0, ctx=solo, dtype=DTYPE)
    return X


def _timed(ctrl, function, root_only=False):
    """Run ``function()`` after a barrier; the slowest rank's seconds and its result.

    With ``root_only``, only rank 0 runs it (a baseline on all cores) while
    the other ranks sleep until it is done.
    """
    ctrl.Barrier()
    start = time.perf_counter()
    if root_only and ctrl.Get_rank() != 0:
        result = None
    else:
        result = function()
    elapsed = time.perf_counter() - start
    if root_only:
        common.idle_until_all_arrive(ctrl)
        result = ctrl.bcast(result, root=0)
    return max(ctrl.allgather(elapsed)), result


def _measure_job(args):
    """Measure at this job's rank count; returns the record on rank 0, else None."""
    ctx = init()
    ctx.check = False
    ctrl = ctx.comm.Dup()
    load_before = common.load_average()
    try:
        X_local, _ = make_blobs(args.samples, args.features, centers=args.clusters,
                                cluster_std=CLUSTER_STD, random_state=0, ctx=ctx, dtype=DTYPE)
        centers = broadcast(X_local[:args.clusters].copy() if ctx.rank == 0 else None,
                            root=0, ctx=ctx)
        cases = {"hpcdist": lambda: _hpcdist_fit(ctx, X_local, centers, args)}
        baselines = {}
        if not args.no_baselines:
            baselines["scikit-learn"] = cluster
            module = _sklearnex_module()
            if module is not None:
                baselines["sklearnex"] = module
            X_full = _whole_data_on_rank_0(ctx, X_local, args)
            for name, module in baselines.items():
                cases[name] = (lambda module=module: _sklearn_fit(X_full, centers, args,
                                                                  module))
        names = list(cases)
        root_only = {name: name != "hpcdist" and ctx.size > 1 for name in names}
        results = {name: _timed(ctrl, cases[name], root_only[name])[1]
                   for name in names}  # warm-up
        seconds = {name: [] for name in names}
        sgemm = []
        for rep in range(args.repetitions):
            first = rep % len(names)
            for name in names[first:] + names[:first]:
                elapsed, results[name] = _timed(ctrl, cases[name], root_only[name])
                seconds[name].append(elapsed)
            sgemm.append(_sgemm_seconds(ctrl, args.sgemm_size, repetitions=1))
        sgemm_rank_gflops = 2.0 * args.sgemm_size ** 3 / float(np.median(sgemm)) / 1e9
        machine_peak = float(sum(ctrl.allgather(sgemm_rank_gflops)))
        run = _run_record(ctx, args, seconds, results, machine_peak, {
            "numba_threads_per_rank": numba.get_num_threads(),
            "blas_threads_per_rank": common.blas_threads(),
            "baseline_threads": _cores() if baselines else None,
            "sklearnex": ("available" if "sklearnex" in baselines else
                          "not installed (pip install scikit-learn-intelex)")
            if not args.no_baselines else "left out (--no-baselines)",
            "sgemm_seconds": sgemm,
            "machine": common.machine_info(ctrl, load_average_before=load_before,
                                           load_average_after=common.load_average()),
        })
    finally:
        ctrl.Free()
    return run if ctx.rank == 0 else None


def _run_record(ctx, args, seconds, results, machine_peak, extra):
    flops = 2.0 * args.samples * args.clusters * args.features
    cases = {}
    for name, times in seconds.items():
        n_iter, inertia = results[name]
        per_iteration = float(np.median(times)) / n_iter
        cases[name] = {"fit_seconds": times, "n_iter": int(n_iter), "inertia": float(inertia),
                       "seconds_per_iteration": per_iteration,
                       "gflops": flops / per_iteration / 1e9,
                       "sgemm_peak_fraction": flops / per_iteration / 1e9 / machine_peak}
    return {"ranks": ctx.size, "repetitions": args.repetitions,
            "sgemm_peak_gflops": machine_peak, **extra, "cases": cases}


# -- launching one job per rank count -----------------------------------------------------------

# -- report -----------------------------------------------------------------------------------

def _baseline(runs, ranks=None, name="scikit-learn"):
    """The baseline's record: from the job at ``ranks`` when it timed one (the same
    conditions as hpcdist there), else from the first job that did; or None."""
    if ranks in runs and name in runs[ranks]["cases"]:
        return runs[ranks]["cases"][name]
    for run in runs.values():
        if name in run["cases"]:
            return run["cases"][name]
    return None


def _run_text(run, runs):
    lines = [f"\n{run['ranks']} rank(s): {run['numba_threads_per_rank']} Numba / "
             f"{run['blas_threads_per_rank']} BLAS thread(s) per rank; sgemm peak "
             f"{run['sgemm_peak_gflops']:.1f} GFLOP/s; sklearnex: {run['sklearnex']}",
             f"  {'case':14s} {'n_iter':>6s} {'s/iter':>9s} {'GFLOP/s':>9s} {'of peak':>8s} "
             f"{'vs sklearn':>10s} {'inertia':>14s}"]
    reference = _baseline(runs, run["ranks"])
    for name, case in run["cases"].items():
        ratio = ("-" if reference is None else
                 f"{reference['seconds_per_iteration'] / case['seconds_per_iteration']:.2f}x")
        lines.append(f"  {name:14s} {case['n_iter']:6d} {case['seconds_per_iteration']:9.4f} "
                     f"{case['gflops']:9.1f} {100 * case['sgemm_peak_fraction']:7.1f}% "
                     f"{ratio:>10s} {case['inertia']:14.6g}")
    return "\n".join(lines)


def _summarize(runs):
    reference = _baseline(runs, SUMMARY_RANKS)
    at = runs.get(SUMMARY_RANKS, {}).get("cases", {}).get("hpcdist")
    speedup = (None if reference is None or at is None else
               reference["seconds_per_iteration"] / at["seconds_per_iteration"])
    fraction = None if at is None else at["sgemm_peak_fraction"]
    summary = {
        f"speedup_vs_sklearn_at_{SUMMARY_RANKS}_ranks": common.summary_entry(
            "scikit-learn s/iter (all cores) / hpcdist s/iter", speedup),
        f"sgemm_peak_fraction_at_{SUMMARY_RANKS}_ranks": common.summary_entry(
            "hpcdist distance GFLOP/s / machine sgemm GFLOP/s", fraction),
    }
    agreement = {}
    for n, run in runs.items():
        reference = _baseline(runs, n)
        if reference is not None:
            case = run["cases"]["hpcdist"]
            agreement[str(n)] = {
                "inertia_relative_difference": abs(case["inertia"] - reference["inertia"])
                / reference["inertia"],
                "same_n_iter": case["n_iter"] == reference["n_iter"]}
    return summary, agreement


def _summary_text(summary, agreement):
    lines = common.summary_lines(summary)
    for n, entry in agreement.items():
        lines.append(f"  hpcdist at {n} rank(s) vs scikit-learn: inertia relative difference "
                     f"{entry['inertia_relative_difference']:.2e}, same n_iter: "
                     f"{entry['same_n_iter']}")
    return "\n".join(lines)


def _settings(args):
    return {"samples": args.samples, "features": args.features, "clusters": args.clusters,
            "iterations": args.iterations, "tol": 0.0, "dtype": np.dtype(DTYPE).name,
            "data": f"hpcdist.data.make_blobs(centers={args.clusters}, "
                    f"cluster_std={CLUSTER_STD}, random_state=0)",
            "init": "the first `clusters` global rows", "rank_counts": list(args.ranks),
            "repetitions": args.repetitions, "sgemm_size": args.sgemm_size,
            "quick": args.quick,
            "flops_per_iteration": 2.0 * args.samples * args.clusters * args.features,
            "timing": "whole fit() / n_iter_, slowest rank, barrier before; one warm-up fit "
                      "per implementation, then rounds timing each once (first one rotating); "
                      "medians over rounds"}


def _plot(report, path):
    plt = common.pyplot()
    if plt is None:
        return False
    labels, values = [], []
    for n, run in report["runs"].items():
        for name, case in run["cases"].items():
            labels.append(f"{name}\n{n} rank(s)" if name == "hpcdist" else f"{name}\nall cores")
            values.append(case["seconds_per_iteration"] * 1e3)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(range(len(values)), values, color=["tab:blue" if "hpcdist" in label else "tab:gray"
                                              for label in labels])
    ax.set_xticks(range(len(values)), labels, fontsize="small")
    ax.set_ylabel("ms per Lloyd iteration (median)")
    settings, machine = report["settings"], report["machine"]
    ax.set_title(f"K-means {settings['samples']} x {settings['features']} float32, "
                 f"k={settings['clusters']}\n{machine['hostname']} ({machine['cpu_count']} "
                 f"cores), {machine['date']}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _write_report(runs, args):
    summary, agreement = _summarize(runs)
    common.finish_report("kmeans", runs, args, settings=_settings(args), summary=summary,
                         text=_summary_text(summary, agreement), plot=_plot,
                         agreement_with_sklearn=agreement)


# -- main -------------------------------------------------------------------------------------

def main(argv=None):
    """Run the K-means benchmark with ``argv`` (default ``sys.argv[1:]``, see ``--help``);
    returns the exit status. See the module docstring."""
    return common.run_per_rank_count(argv, _parse_args, module="hpcdist.bench.kmeans",
                                     title="hpcdist K-means benchmark", measure_job=_measure_job,
                                     describe=_run_text, write=_write_report)


if __name__ == "__main__":
    sys.exit(main())
