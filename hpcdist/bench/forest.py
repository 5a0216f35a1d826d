"""``hpcdist bench forest``: random forest fit time, hpcdist against scikit-learn.

Data: ``hpcdist.data.make_classification`` with 250,000 x 32 rows
(``--train`` + ``--test``; 3 classes, 6 informative and 6 redundant
features, ``class_sep=0.8``), generated per rank (each rank makes only its
own rows). Every fifth row (``--test`` rows spread evenly over the global
order) is held out, so the ranks train on balanced shares.
Forest: ``--trees`` (100) trees, ``max_depth`` ``--max-depth`` (16),
``max_features="sqrt"``, ``random_state=0``, everything else default, for
hpcdist's ``RandomForestClassifier`` and scikit-learn's.

Rank counts. Each rank count is its own ``mpiexec -n N`` job::

    python benchmarks/bench_forest.py                 # jobs at 1 and 2 ranks, merged
    hpcdist bench forest [-n N]                        # the same, at 1 and N ranks
    python -m hpcdist.bench.forest --ranks 1,2,4       # any list of rank counts
    mpiexec -n 2 python -m hpcdist.bench.forest        # one job, this rank count only

Outside ``mpiexec``, :func:`main` launches one job per rank count in
``--ranks`` (one after the other) and merges their reports.

Baselines. scikit-learn's ``RandomForestClassifier(n_jobs=cores)`` (and
scikit-learn-intelex's, when ``sklearnex`` is importable) run in the
1-rank job, on the same (gathered) training rows, interleaved with
hpcdist's 1-rank fits: at more ranks the other ranks would busy-wait in MPI
and steal the baseline's cores. The 2-rank comparison uses those times.

Threads: ``hpcdist.init()`` gives every rank ``cores // ranks`` Numba
threads (2 at 1 rank, 1 per rank at 2 ranks on 2 cores) unless
``NUMBA_NUM_THREADS`` / ``OMP_NUM_THREADS`` is set (then honoured: do not
set them to 1 for this benchmark). The counts are in the JSON.

Timing: one warm-up fit on a small sample loads the Numba kernels; then
``--repetitions`` rounds, each timing one fit of every implementation of the
job (the first rotates). A fit's time is the slowest rank's (barrier
before, ``allreduce`` of the times after). Reported: medians, held-out
accuracies, and a checksum of the forest (the same at every rank count).

Summary: the baselines' fit seconds (``n_jobs=cores``) over hpcdist's at
1 and 2 ranks, the held-out accuracy's difference, and the resident memory
a fit adds against scikit-learn-intelex's; "not measured" where the run has
no such figure.

Output: a table per rank count and a summary on rank 0 (or the launching
process), ``<output-dir>/<name>.json``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time

import numba
import numpy as np
from sklearn import ensemble

from ..comm import allreduce, init
from ..data import DataPartitioner, make_classification
from ..ml import RandomForestClassifier
from . import common

__all__ = ["main", "DATA", "SPEED_COMPARISONS", "MEMORY_COMPARISONS"]

DATA = {"n_features": 32, "n_classes": 3, "n_informative": 6, "n_redundant": 6,
        "class_sep": 0.8, "random_state": 0}
DEFAULTS = {"train": 200_000, "test": 50_000, "trees": 100, "max_depth": 16,
            "repetitions": 3, "baseline_repetitions": 1}
QUICK = {"train": 4_000, "test": 1_000, "trees": 8, "max_depth": 8, "repetitions": 1,
         "baseline_repetitions": 1}
DEFAULT_RANKS = (1, 2)
PREDICT_REPETITIONS = 5  # predict_proba of the held-out rows, median

#: the summary's fit-time and accuracy comparisons: (baseline, its short name, hpcdist's
#: rank count); the baselines run with n_jobs=cores
SPEED_COMPARISONS = (("scikit-learn", "sklearn", 2),
                     ("scikit-learn-intelex", "sklearnex", 2),
                     ("scikit-learn-intelex", "sklearnex", 1))
#: the summary's memory comparisons (hpcdist's largest rank's resident memory added during
#: fit / the baseline's): (baseline, short name, hpcdist's rank count)
MEMORY_COMPARISONS = (("scikit-learn-intelex", "sklearnex", 1),
                      ("scikit-learn-intelex", "sklearnex", 2))


# -- arguments ------------------------------------------------------------------------------

def _build_parser():
    parser = common.benchmark_parser(
        "forest",
        "Fit seconds and held-out accuracy of a 100-tree random forest on 200,000 x 32 "
        "generated rows: hpcdist at each rank count against scikit-learn (and "
        "scikit-learn-intelex) with n_jobs=cores. Outside mpiexec it launches one job per "
        "rank count.",
        quick="tiny run for tests: 4,000 rows, 8 trees of depth 8, 1 repetition", plot=False)
    for name, help_text in (("train", "training rows"), ("test", "held-out rows"),
                            ("trees", "trees per forest"), ("max-depth", "max_depth"),
                            ("repetitions", "timed hpcdist fits per job"),
                            ("baseline-repetitions", "timed fits of each baseline")):
        key = name.replace("-", "_")
        parser.add_argument(f"--{name}", type=int,
                            help=f"{help_text} (default {DEFAULTS[key]}; {QUICK[key]} with "
                                 "--quick)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="leave scikit-learn and scikit-learn-intelex out")
    common.add_job_options(parser, default_ranks=DEFAULT_RANKS)
    return parser


def _parse_args(argv):
    parser = _build_parser()
    args = parser.parse_args(argv)
    common.fill_sizes(parser, args, DEFAULTS, QUICK, minimums={"baseline_repetitions": 0})
    return args


# -- one job ----------------------------------------------------------------------------------

def _local_data(ctx, args):
    """This rank's training and held-out rows.

    Global row ``g`` of the ``train + test`` rows is held out when
    ``floor((g + 1) * test / n) > floor(g * test / n)``: exactly ``test`` rows,
    spread evenly, so every rank trains on its balanced share.
    """
    n = args.train + args.test
    X, y = make_classification(n, ctx=ctx, **DATA)
    start, stop = DataPartitioner(n, ctx.size).get_partition(ctx.rank)
    g = np.arange(start, stop, dtype=np.int64)
    held_out = (g + 1) * args.test // n > g * args.test // n
    return X[~held_out], y[~held_out], X[held_out], y[held_out]


def _checksum(vector):
    return hashlib.sha256(np.ascontiguousarray(vector, dtype=np.float64).tobytes()).hexdigest()


class _Hpcdist:
    name = "hpcdist"

    def __init__(self, ctx, args, data):
        self.ctx, self.args, self.data = ctx, args, data
        self.model = None

    def _estimator(self, trees, depth):
        return RandomForestClassifier(trees, max_depth=depth, random_state=0, comm=self.ctx)

    def warm_up(self):
        X, y = self.data[0][:500], self.data[1][:500]
        self._estimator(2, 4).fit(X, y)

    def fit(self):
        self.model = self._estimator(self.args.trees, self.args.max_depth).fit(*self.data[:2])

    def predict(self):
        return self.model.predict_proba(self.data[2])  # this rank's held-out rows

    def accuracy(self):
        return self.model.score(*self.data[2:])  # global


class _Sklearn:
    """A scikit-learn-compatible forest on the gathered rows (the 1-rank job only)."""

    def __init__(self, name, cls, args, data):
        self.name, self.cls, self.args, self.data = name, cls, args, data
        self.n_jobs = os.cpu_count() or 1
        self.model = None

    def warm_up(self):
        self.cls(2, max_depth=4, n_jobs=self.n_jobs, random_state=0).fit(self.data[0][:500],
                                                                      self.data[1][:500])

    def fit(self):
        self.model = self.cls(self.args.trees, max_depth=self.args.max_depth,
                              n_jobs=self.n_jobs, random_state=0).fit(*self.data[:2])

    def predict(self):
        return self.model.predict_proba(self.data[2])

    def accuracy(self):
        return float(self.model.score(*self.data[2:]))


def _baselines(args, data):
    """scikit-learn, and scikit-learn-intelex when importable; notes on what is left out."""
    if args.no_baseline:
        return [], {"scikit-learn": "left out (--no-baseline)",
                    "scikit-learn-intelex": "left out (--no-baseline)"}
    cases = [_Sklearn("scikit-learn", ensemble.RandomForestClassifier, args, data)]
    notes = {}
    try:
        from sklearnex.ensemble import RandomForestClassifier as IntelexForest
    except ImportError:
        notes["scikit-learn-intelex"] = "not installed (pip install scikit-learn-intelex)"
    else:
        cases.append(_Sklearn("scikit-learn-intelex", IntelexForest, args, data))
    return cases, notes


def _slowest(ctx, values):
    values = np.asarray(values, dtype=np.float64)
    return allreduce(values, op="max", ctx=ctx) if ctx.size > 1 else values


def _timed(ctx, case):
    """One fit: the slowest rank's seconds, and the largest rank's peak resident MiB during
    the fit and its rise above the resident size before it (0 where not measurable)."""
    ctx.barrier()
    with common.resident_peak() as memory:
        start = time.perf_counter()
        case.fit()
        elapsed = time.perf_counter() - start
    return _slowest(ctx, [elapsed, memory["peak_mib"] or 0.0, memory["added_mib"] or 0.0])


def _predict_seconds(ctx, case, repetitions):
    """Median over ``repetitions`` of the slowest rank's ``predict_proba`` seconds."""
    times = []
    for _ in range(repetitions):
        ctx.barrier()
        start = time.perf_counter()
        case.predict()
        times.append(float(_slowest(ctx, [time.perf_counter() - start])[0]))
    return float(np.median(times))


def _measure_job(args):
    """Measure at this job's rank count; returns the record on rank 0, else None."""
    ctx = init()
    ctx.check = False
    load_before = common.load_average()
    X, y, X_test, y_test = _local_data(ctx, args)
    ours = _Hpcdist(ctx, args, (X, y, X_test, y_test))
    cases, notes = [ours], {}
    if ctx.size == 1:
        baselines, notes = _baselines(args, (X, y, X_test, y_test))
        cases += baselines
    elif not args.no_baseline:
        notes = {"scikit-learn": "measured in the 1-rank job"}
    for case in cases:
        case.warm_up()
    fits = {case.name: [] for case in cases}
    rounds = max(args.repetitions, args.baseline_repetitions if len(cases) > 1 else 0)
    for round_ in range(rounds):
        first = round_ % len(cases)
        for case in cases[first:] + cases[:first]:
            wanted = args.repetitions if case is ours else args.baseline_repetitions
            if len(fits[case.name]) < wanted:
                fits[case.name].append(_timed(ctx, case))
    records = {}
    for case in cases:
        seconds, peak, added = np.asarray(fits[case.name]).T
        measured = peak.max() > 0
        predict = _predict_seconds(ctx, case, PREDICT_REPETITIONS)
        records[case.name] = {"fit_seconds": seconds.tolist(),
                              "median_fit_seconds": float(np.median(seconds)),
                              "fit_peak_resident_mib": float(peak.max()) if measured else None,
                              "fit_added_resident_mib": float(added.max()) if measured else None,
                              "predict_proba_seconds": predict,
                              "predict_proba_rows_per_second": args.test / predict,
                              "accuracy": case.accuracy()}
        if case is not ours:
            records[case.name]["n_jobs"] = case.n_jobs
            records[case.name]["version"] = common.package_version(
                "sklearn" if case.name == "scikit-learn" else "sklearnex")
    forest = ours.model.forest_
    records["hpcdist"].update({
        "numba_threads_per_rank": numba.get_num_threads(), "nodes": int(forest.n_nodes),
        "mean_depth": float(forest.depths().mean()),
        "forest_sha256": _checksum(ours.model.get_parameters()),
        "communication": {name: {"calls": entry["calls"], "bytes_sent": entry["bytes_sent"]}
                          for name, entry in ctx.stats().items()}})
    machine = common.machine_info(ctx.comm, load_average_before=load_before,
                                  load_average_after=common.load_average())
    run = {"ranks": ctx.size, "train_rows": args.train, "test_rows": args.test,
           "local_train_rows": int(len(X)), "cases": records, "baseline_notes": notes,
           "machine": machine}
    return run if ctx.rank == 0 else None


# -- launching one job per rank count -----------------------------------------------------------

# -- report -----------------------------------------------------------------------------------

def _run_text(run):
    ours = run["cases"]["hpcdist"]
    lines = [f"\n{run['ranks']} rank(s): {run['train_rows']} training rows "
             f"({run['local_train_rows']} on rank 0), {run['test_rows']} held out; "
             f"{ours['numba_threads_per_rank']} Numba thread(s) per rank",
             f"  {'implementation':32s} {'fit s (median)':>15s} {'fit MiB peak':>12s} "
             f"{'(added)':>8s} {'predict rows/s':>15s} {'accuracy':>9s}"]
    for name, record in run["cases"].items():
        jobs = f" (n_jobs={record['n_jobs']})" if "n_jobs" in record else ""
        peak, added = record["fit_peak_resident_mib"], record["fit_added_resident_mib"]
        lines.append(f"  {name + jobs:32s} {record['median_fit_seconds']:15.2f} "
                     f"{'-' if peak is None else f'{peak:.0f}':>12s} "
                     f"{'-' if added is None else f'({added:.0f})':>8s} "
                     f"{record['predict_proba_rows_per_second']:15,.0f} "
                     f"{record['accuracy']:9.4f}")
    for name, note in run.get("baseline_notes", {}).items():
        lines.append(f"  {name}: {note}")
    lines.append(f"  forest: {ours['nodes']} nodes, mean depth {ours['mean_depth']:.1f}, "
                 f"sha256 {ours['forest_sha256'][:16]}")
    return "\n".join(lines)


def _summarize(runs):
    """Ratios against the 1-rank job's baselines, and the summary's figures."""
    comparisons = {}
    for n, run in sorted(runs.items()):
        ours = run["cases"]["hpcdist"]
        entry = {"hpcdist_fit_seconds": ours["median_fit_seconds"],
                 "hpcdist_accuracy": ours["accuracy"]}
        for name in ("scikit-learn", "scikit-learn-intelex"):
            other = runs.get(1, {}).get("cases", {}).get(name)
            if other is not None:
                entry[f"speedup_vs_{name}"] = (other["median_fit_seconds"]
                                               / ours["median_fit_seconds"])
                entry[f"accuracy_minus_{name}"] = ours["accuracy"] - other["accuracy"]
                entry[f"predict_speedup_vs_{name}"] = (ours["predict_proba_rows_per_second"]
                                                       / other["predict_proba_rows_per_second"])
                if ours["fit_added_resident_mib"] is not None and other["fit_added_resident_mib"]:
                    entry[f"fit_memory_vs_{name}"] = (ours["fit_added_resident_mib"]
                                                      / other["fit_added_resident_mib"])
        comparisons[str(n)] = entry
    summary = {}
    for name, short, ranks in SPEED_COMPARISONS:
        entry = comparisons.get(str(ranks), {})
        summary[f"fit_speedup_vs_{short}_at_{ranks}_ranks"] = common.summary_entry(
            f"{name} fit seconds (n_jobs=cores) / hpcdist fit seconds",
            entry.get(f"speedup_vs_{name}"))
        summary.setdefault(f"accuracy_vs_{short}_at_{ranks}_ranks", common.summary_entry(
            f"hpcdist held-out accuracy - {name}'s", entry.get(f"accuracy_minus_{name}")))
    for name, short, ranks in MEMORY_COMPARISONS:
        summary[f"fit_memory_vs_{short}_at_{ranks}_ranks"] = common.summary_entry(
            f"hpcdist's largest rank's resident memory added during fit / {name}'s",
            comparisons.get(str(ranks), {}).get(f"fit_memory_vs_{name}"))
    checksums = {run["cases"]["hpcdist"]["forest_sha256"] for run in runs.values()}
    return summary, comparisons, len(checksums) == 1


def _summary_text(summary, comparisons, identical):
    lines = ["\nComparisons (baselines from the 1-rank job):"]
    for n, entry in comparisons.items():
        parts = [f"hpcdist {entry['hpcdist_fit_seconds']:.2f} s, acc "
                 f"{entry['hpcdist_accuracy']:.4f}"]
        for key, value in entry.items():
            if key.startswith("speedup_vs_"):
                parts.append(f"{value:.2f}x faster than {key[len('speedup_vs_'):]}")
            elif key.startswith("accuracy_minus_"):
                parts.append(f"accuracy {value:+.4f} vs {key[len('accuracy_minus_'):]}")
            elif key.startswith("predict_speedup_vs_"):
                parts.append(f"predict_proba {value:.2f}x {key[len('predict_speedup_vs_'):]}'s "
                             "rows/s")
            elif key.startswith("fit_memory_vs_"):
                parts.append(f"fit memory {value:.2f}x {key[len('fit_memory_vs_'):]}'s")
        lines.append(f"  {n} rank(s): " + "; ".join(parts))
    lines.append(f"  forest identical at every rank count: {identical}")
    lines += common.summary_lines(summary)
    return "\n".join(lines)


def _settings(args):
    return {"data": dict(DATA, generator="hpcdist.data.make_classification",
                         train_rows=args.train, test_rows=args.test,
                         split="test_rows rows spread evenly over the global order are held out"),
            "forest": {"n_estimators": args.trees, "max_depth": args.max_depth,
                       "max_features": "sqrt", "random_state": 0},
            "rank_counts": list(args.ranks), "repetitions": args.repetitions,
            "baseline_repetitions": args.baseline_repetitions, "quick": args.quick,
            "timing": "one mpiexec job per rank count; warm-up fit, then rounds timing one fit "
                      "of every implementation (first rotating); a fit's time is the slowest "
                      "rank's; baselines run in the 1-rank job with n_jobs=cores"}


def _write_report(runs, args):
    summary, comparisons, identical = _summarize(runs)
    common.finish_report("forest", runs, args, settings=_settings(args), summary=summary,
                         text=_summary_text(summary, comparisons, identical),
                         comparisons=comparisons, forest_identical_across_rank_counts=identical)


# -- main -------------------------------------------------------------------------------------

def main(argv=None):
    """Run the random forest benchmark with ``argv`` (default ``sys.argv[1:]``, see ``--help``);
    returns the exit status. See the module docstring."""
    return common.run_per_rank_count(argv, _parse_args, module="hpcdist.bench.forest",
                                     title="hpcdist random forest benchmark",
                                     measure_job=_measure_job,
                                     describe=lambda run, runs: _run_text(run),
                                     write=_write_report)


if __name__ == "__main__":
    sys.exit(main())
