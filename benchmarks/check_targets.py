"""Check the team's performance targets against the benchmark results.

hpcdist's benchmarks report figures and ratios; the targets this project sets
itself live in ``benchmarks/targets.toml`` and are judged here, on the JSON
files the benchmarks wrote::

    python benchmarks/check_targets.py [--targets benchmarks/targets.toml]
                                       [--fail-on-miss] [RESULTS.json ...]

Without file arguments every ``benchmarks/results/*.json`` is read. Each
target applies to the files whose ``"benchmark"`` matches its ``benchmark``
and is reported as ``met``, ``missed``, ``not measured`` (the file has no
such figure) or ``not judged`` (the run had another rank count than the
target's ``ranks``).

A target (one ``[[target]]`` table) has

``benchmark``, ``name``
    The benchmark's name in its JSON, and what the target says.
``value``
    A dotted path to the figure in the JSON (``summary.speedup.value``).
``rows``, ``sizes``, ``where`` (optional)
    With ``rows`` (a dotted path to a list), ``value`` is a path inside each
    row and the target is judged on the worst row: rows whose
    ``size_bytes`` lies in ``sizes = [low, high]`` (``high = -1``: no end)
    and whose fields match ``where`` (a table of field = list of values).
``at_least``, ``at_most``, ``below``
    The bound (exactly one).
``ranks`` (optional)
    The rank count the target is set for (``machine.ranks``).
"""

import argparse
import json
import sys
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
BOUNDS = ("at_least", "at_most", "below")


def load_targets(path):
    """The ``[[target]]`` tables of a TOML file, each checked for its keys."""
    with open(path, "rb") as stream:
        targets = tomllib.load(stream).get("target", [])
    for number, target in enumerate(targets, start=1):
        missing = {"benchmark", "name", "value"} - set(target)
        bounds = [key for key in BOUNDS if key in target]
        if missing or len(bounds) != 1:
            raise ValueError(f"{path}: target {number} ({target.get('name', '?')}) needs "
                             f"benchmark, name, value and one of {', '.join(BOUNDS)}")
    return targets


def _lookup(data, path):
    """``data`` at a dotted ``path``; None where a step is missing."""
    for key in path.split("."):
        if isinstance(data, dict) and key in data:
            data = data[key]
        elif isinstance(data, list) and key.isdigit() and int(key) < len(data):
            data = data[int(key)]
        else:
            return None
    return data


def _selected(row, target):
    low, high = target.get("sizes", (0, -1))
    size = row.get("size_bytes")
    if "sizes" in target and (size is None or size < low or (high >= 0 and size >= high)):
        return False
    return all(row.get(field) in values for field, values in target.get("where", {}).items())


def _figure(report, target):
    """``(value, where)``: the target's figure in ``report`` (the worst row's, with its size),
    or ``(None, "")`` when the report has none."""
    if "rows" not in target:
        value = _lookup(report, target["value"])
        return (value, "") if isinstance(value, (int, float)) else (None, "")
    rows = _lookup(report, target["rows"]) or []
    found = [(value, row) for row in rows if isinstance(row, dict) and _selected(row, target)
             and isinstance(value := _lookup(row, target["value"]), (int, float))]
    if not found:
        return None, ""
    pick = min if "at_least" in target else max
    value, row = pick(found, key=lambda pair: pair[0])
    where = row.get("kernel") or (f"{row['size_bytes']} B" if "size_bytes" in row else "")
    return value, where


def judge(report, target):
    """One target on one report: ``(status, value, where)``."""
    ranks = target.get("ranks")
    if ranks is not None and _lookup(report, "machine.ranks") != ranks:
        return "not judged", None, f"set for {ranks} ranks"
    value, where = _figure(report, target)
    if value is None:
        return "not measured", None, where
    if "at_least" in target:
        met = value >= target["at_least"]
    elif "at_most" in target:
        met = value <= target["at_most"]
    else:
        met = value < target["below"]
    return ("met" if met else "missed"), value, where


def bound_text(target):
    """``">= 1.5"``, ``"<= 0.4"`` or ``"< 1"``."""
    for key, sign in zip(BOUNDS, (">=", "<=", "<")):
        if key in target:
            return f"{sign} {target[key]:g}"
    raise AssertionError(target)


def check(paths, targets):
    """Judge every target on every report of its benchmark.

    Returns
    -------
    list of dict
        One per (file, target): ``file``, ``command``, ``name``, ``bound``,
        ``status``, ``value``, ``where``.
    """
    results = []
    for path in paths:
        report = json.loads(Path(path).read_text())
        for target in targets:
            if target["benchmark"] != report.get("benchmark"):
                continue
            status, value, where = judge(report, target)
            results.append({"file": str(path), "command": report.get("command"),
                            "name": target["name"], "bound": bound_text(target),
                            "status": status, "value": value, "where": where})
    return results


def report_text(results):
    """The results as text, grouped by file, with a count per status at the end."""
    lines, current = [], None
    for result in results:
        if result["file"] != current:
            current = result["file"]
            lines.append(f"\n{current}" + (f"\n  ({result['command']})"
                                          if result["command"] else ""))
        value = "-" if result["value"] is None else f"{result['value']:.4g}"
        where = f" @ {result['where']}" if result["where"] else ""
        lines.append(f"  {result['status']:>12}  {value:>10}{where:<12} {result['bound']:<8} "
                     f"{result['name']}")
    counts = {}
    for result in results:
        counts[result["status"]] = counts.get(result["status"], 0) + 1
    lines.append("\n" + ", ".join(f"{count} {status}" for status, count in sorted(counts.items())))
    return "\n".join(lines)


def main(argv=None):
    """Check the targets; returns the exit status (1 with ``--fail-on-miss`` and a miss)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="*", type=Path,
                        help="benchmark JSON files (default: benchmarks/results/*.json)")
    parser.add_argument("--targets", type=Path, default=HERE / "targets.toml")
    parser.add_argument("--fail-on-miss", action="store_true",
                        help="exit with status 1 when a target is missed")
    args = parser.parse_args(argv)
    paths = args.results or sorted((HERE / "results").glob("*.json"))
    results = check(paths, load_targets(args.targets))
    print(report_text(results))
    missed = any(result["status"] == "missed" for result in results)
    return 1 if missed and args.fail_on_miss else 0


if __name__ == "__main__":
    sys.exit(main())
