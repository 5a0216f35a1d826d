"""Side-by-side table of ``hpcdist train --output`` reports (used by ``scripts/demo``).

    python -m hpcdist.cli.summary mlp.json kmeans.json forest.json
"""

import json
import sys

__all__ = ["results_table", "main"]

#: metric shown for each model, best first
_METRICS = ("test_accuracy", "test_r2", "inertia")


def _row(report):
    metric = next(m for m in _METRICS if m in report)
    sklearn = report.get("sklearn") or {}
    theirs = sklearn.get(metric)
    return [report["model"], report["estimator"], str(report["ranks"]), metric,
            f"{report[metric]:.4g}", f"{report['seconds']:.2f}",
            "-" if theirs is None else f"{theirs:.4g}",
            "-" if "seconds" not in sklearn else f"{sklearn['seconds']:.2f}"]


def results_table(reports):
    """The reports as an aligned text table: hpcdist's metric and time next to scikit-learn's."""
    header = ["model", "estimator", "ranks", "metric", "hpcdist", "seconds", "scikit-learn",
              "seconds"]
    rows = [header] + [_row(report) for report in reports]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
