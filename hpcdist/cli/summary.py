"""Side-by-side table of ``hpcdist train --compare-sklearn --output`` reports (``scripts/demo``).

    python -m hpcdist.cli.summary mlp.json kmeans.json forest.json

For each model: the held-out metric and the fit time of hpcdist and of
scikit-learn on the same rows, and how many times faster hpcdist's fit was.
"""

import json
import os
import sys

__all__ = ["results_table", "main"]

#: the held-out metric shown for each kind of model: (report key, label, which way is better)
_METRICS = (("test_accuracy", "accuracy", "higher"), ("test_r2", "R^2", "higher"),
            ("test_inertia", "inertia", "lower"))
_HEADER = ("model", "train rows", "held-out metric", "hpcdist", "scikit-learn",
           "fit s hpcdist", "fit s scikit-learn", "hpcdist speed")


def _number(value, spec):
    return "-" if value is None else format(value, spec)


def _metric(value):
    """A metric with four significant digits, a large one (an inertia) whole with commas."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def _row(report):
    key, label, better = next(metric for metric in _METRICS if metric[0] in report)
    sklearn = report.get("sklearn") or {}
    ours, theirs = report["seconds"], sklearn.get("seconds")
    speed = "-" if not theirs or not ours else f"{theirs / ours:.2f}x"
    return [report["model"], f"{report.get('rows', 0):,}", f"{label} ({better} is better)",
            _metric(report[key]), _metric(sklearn.get(key)),
            _number(ours, ".2f"), _number(theirs, ".2f"), speed]


def results_table(reports):
    """The reports as an aligned text table: each model's held-out metric and fit seconds,
    hpcdist's beside scikit-learn's, and scikit-learn's fit seconds over hpcdist's."""
    rows = [list(_HEADER)] + [_row(report) for report in reports]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_HEADER))]
    lines = ["  ".join(cell.ljust(width) if i < 3 else cell.rjust(width)
                       for i, (cell, width) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def setting_notes(reports):
    """What the table compares: ranks and cores, threads, and how each side was timed."""
    ranks = sorted({report["ranks"] for report in reports})
    threads = os.environ.get("OMP_NUM_THREADS")
    return [
        f"hpcdist: {', '.join(map(str, ranks))} MPI rank(s) on a machine with "
        f"{os.cpu_count()} cores"
        + (f", OMP_NUM_THREADS={threads} per process" if threads else "") + ".",
        "scikit-learn: one process fitting every training row (gathered on rank 0), under "
        "the same thread limits; its random forest uses every core (n_jobs=-1).",
        "fit s: wall time of fit() alone (hpcdist: its slowest rank). hpcdist speed: "
        "scikit-learn's fit seconds / hpcdist's (above 1x: hpcdist is faster).",
        "held-out metric: on rows neither fit saw (K-means: inertia of the held-out rows).",
    ] + _load_note()


def _load_note():
    """A line saying that other work shared the cores, when the load average says so."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    cores = os.cpu_count() or 1
    if load <= cores:
        return []
    return [f"load average {load:.1f} on {cores} cores: other processes shared the cores, "
            "so these times are slower and noisier than on an idle machine."]


def main(argv=None):
    """Print the table of the JSON reports named in ``argv``; returns the exit code."""
    paths = sys.argv[1:] if argv is None else argv
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    reports = []
    for path in paths:
        with open(path) as handle:
            reports.append(json.load(handle))
    print(results_table(reports))
    print("\n" + "\n".join(setting_notes(reports)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
