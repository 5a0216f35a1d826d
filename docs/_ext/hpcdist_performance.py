"""Generate the performance pages from ``benchmarks/results/*.json``.

Each benchmark run by ``hpcdist bench NAME`` writes a JSON report (and, for
some, a PNG plot) into ``benchmarks/results``.  This extension turns every
report into one page under ``docs/performance/``: when and where it was
measured, the versions, the command that reproduces it, its settings, its
summary (ratios against the baselines) and its plot.  The pages are written
at the start of every build and are not kept in git, so the site always shows
the committed results.

:func:`write_pages` does the work and is what the tests call.
"""

import importlib
import json
import math
import os
import re

#: summary fields that hold this project's pass/fail bookkeeping, not a measurement
BOOKKEEPING = {"status", "target", "limit", "strict", "pass", "passed"}
#: machine fields shown in the run table, in this order, with their labels
MACHINE_FIELDS = (("date", "Date"), ("hostname", "Host"), ("cpu_model", "CPU"),
                  ("cpu_count", "CPU cores"), ("nodes", "Nodes"), ("ranks", "Ranks"),
                  ("platform", "Platform"), ("mpi_library", "MPI library"),
                  ("gpu", "GPU"), ("gpus", "GPUs"))
#: package versions shown when the report records them
VERSION_FIELDS = ("hpcdist", "python", "numpy", "numba", "mpi4py", "h5py", "torch",
                  "scikit-learn", "sklearn", "cupy", "dask")


def _text(value):
    """One table cell: numbers with four significant digits, no newlines."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items())
    text = " ".join(str(value).split())
    return _escape(text)


def _escape(text):
    """Text shown as it is in rst (no emphasis, references or substitutions)."""
    for char in "\\*_`|":
        text = text.replace(char, "\\" + char)
    return text


def _table(header, rows, widths=None, cells_are_rst=False):
    """An rst ``list-table`` of ``rows`` (lists of cells) under ``header``.

    Cells are shown as plain text unless ``cells_are_rst`` (already escaped rst).
    """
    lines = [".. list-table::", "   :header-rows: 1"]
    if widths:
        lines.append("   :widths: " + " ".join(str(w) for w in widths))
    lines.append("")
    for row in [header, *rows]:
        cells = [(str(c) if cells_are_rst else _text(c)) or "\\ " for c in row]
        lines.append("   * - " + cells[0])
        lines.extend("     - " + c for c in cells[1:])
    lines.append("")
    return lines


def _heading(text, char):
    return [text, char * len(text), ""]


def _versions(report):
    """Package versions recorded anywhere at the top of the report."""
    found = {}
    for source in (report.get("machine", {}), report.get("versions", {}),
                   report.get("settings", {})):
        if not isinstance(source, dict):
            continue
        for name in VERSION_FIELDS:
            value = source.get(name)
            if isinstance(value, dict):
                value = value.get("version")
            if isinstance(value, str) and name not in found:
                found[name] = value
    return found


def command_of(name, report):
    """The shell command that reproduces a report.

    The report's own ``"command"`` entry when it has one; otherwise
    ``hpcdist bench NAME`` with the rank count the report was measured at.
    """
    command = report.get("command")
    if isinstance(command, list):
        command = " ".join(str(c) for c in command)
    if command:
        return str(command)
    bench = str(report.get("benchmark") or name).split()[0]
    ranks = report.get("machine", {}).get("ranks")
    return f"hpcdist bench {bench}" + (f" -n {ranks}" if ranks else "")


def _summary_blocks(summary):
    """The summary as tables: ratios and figures, without pass/fail fields."""
    lines = []
    scalars = []
    for key, value in summary.items():
        if key in BOOKKEEPING:
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            columns = [c for c in dict.fromkeys(k for v in value for k in v)
                       if c not in BOOKKEEPING]
            lines += [f"**{_escape(key)}**", ""]
            lines += _table(columns, [[v.get(c, "") for c in columns] for v in value])
        elif isinstance(value, dict) and value and all(isinstance(v, dict)
                                                       for v in value.values()):
            columns = [c for c in dict.fromkeys(k for v in value.values() for k in v)
                       if c not in BOOKKEEPING]
            lines += [f"**{_escape(key)}**", ""]
            lines += _table(["", *columns],
                            [[k, *[v.get(c, "") for c in columns]] for k, v in value.items()])
        elif isinstance(value, dict) and "value" in value:
            details = {k: v for k, v in value.items() if k not in BOOKKEEPING | {"value"}}
            scalars.append([key, value["value"], details])
        elif isinstance(value, dict):
            for k, v in value.items():
                if k not in BOOKKEEPING:
                    scalars.append([f"{key}: {k}", v, ""])
        else:
            scalars.append([key, value, ""])
    if scalars:
        lines = _table(["Measure", "Value", "What"], scalars, widths=[45, 15, 40]) + lines
    return lines


def page_for(name, report, results_dir, out_dir):
    """The rst text of one benchmark's page."""
    machine = report.get("machine", {}) if isinstance(report.get("machine"), dict) else {}
    title = str(report.get("benchmark") or name)
    if title != name:
        title = f"{title} ({name})"
    lines = [f".. _performance-{name}:", "", *_heading(title, "=")]
    rows = [[label, machine[key]] for key, label in MACHINE_FIELDS if key in machine]
    versions = _versions(report)
    if versions:
        rows.append(["Versions", ", ".join(f"{k} {v}" for k, v in versions.items())])
    lines += _table(["Run", ""], rows, widths=[25, 75])
    lines += ["The command that reproduces it:", "", ".. code-block:: console", "",
              "   $ " + command_of(name, report), ""]
    settings = report.get("settings")
    if isinstance(settings, dict) and settings:
        lines += _heading("Settings", "-")
        lines += _table(["Setting", "Value"],
                        [[k, v] for k, v in settings.items() if k not in BOOKKEEPING],
                        widths=[30, 70])
    summary = report.get("summary")
    if isinstance(summary, dict) and summary:
        lines += _heading("Summary", "-")
        lines += _summary_blocks(summary)
    plot = os.path.join(results_dir, name + ".png")
    if os.path.exists(plot):
        rel = os.path.relpath(plot, out_dir).replace(os.sep, "/")
        lines += _heading("Plot", "-")
        lines += [f".. image:: {rel}", f"   :alt: {title}", "   :width: 100%", ""]
    rel_json = os.path.relpath(os.path.join(results_dir, name + ".json"),
                               out_dir).replace(os.sep, "/")
    lines += [f"Every figure of this run: :download:`{name}.json <{rel_json}>`.", ""]
    return "\n".join(lines)


def benchmark_descriptions():
    """``{benchmark name: what it measures}``, the first line of each benchmark's docstring."""
    from hpcdist.cli.main import BENCHMARKS

    found = {}
    for name, module in BENCHMARKS.items():
        doc = (importlib.import_module(module).__doc__ or "").strip()
        first = doc.split("\n\n")[0].replace("\n", " ")
        found[name] = re.sub(r"^``hpcdist bench [\w-]+``(, [^:]*)?:\s*", "", first)
    return found


def _description(report, name, descriptions):
    bench = str(report.get("benchmark") or name)
    for key in (bench, bench.split("_")[0], name.split("_")[0]):
        if key in descriptions:
            return descriptions[key]
    return ""


def write_pages(results_dir, out_dir, descriptions=None):
    """Write ``index.rst`` and one page per report of ``results_dir`` into ``out_dir``.

    ``descriptions`` maps a benchmark's name to what it measures, shown in the
    index.  Returns the names of the benchmark pages written (the JSON files'
    stems).  A report that is not valid JSON raises ``ValueError`` naming the file.
    """
    descriptions = descriptions or {}
    rows = []
    names = sorted(f[:-5] for f in os.listdir(results_dir) if f.endswith(".json"))
    os.makedirs(out_dir, exist_ok=True)
    for stale in os.listdir(out_dir):
        if stale.endswith(".rst") and stale[:-4] not in names and stale != "index.rst":
            os.remove(os.path.join(out_dir, stale))
    for name in names:
        path = os.path.join(results_dir, name + ".json")
        try:
            with open(path, encoding="utf-8") as f:
                report = json.load(f)
        except ValueError as exc:
            raise ValueError(f"{path} is not a JSON benchmark report: {exc}") from exc
        if not isinstance(report, dict):
            raise ValueError(f"{path} holds a {type(report).__name__}, not a benchmark report")
        _write(os.path.join(out_dir, name + ".rst"), page_for(name, report, results_dir, out_dir))
        machine = report.get("machine") if isinstance(report.get("machine"), dict) else {}
        rows.append([f":ref:`{name} <performance-{name}>`",
                     _escape(_description(report, name, descriptions)),
                     _escape(str(machine.get("date", ""))[:10]), machine.get("ranks", "")])
    index = [".. _performance:", "", *_heading("Performance", "="),
             "Each page shows one benchmark run: where and when it was measured, with",
             "which versions, the command that reproduces it, its settings, the ratios",
             "against its baselines and its plot.  The pages are generated from the",
             "JSON reports in ``benchmarks/results`` at every build of this site.",
             "",
             "Run any of them on your own machine or cluster with ``hpcdist bench NAME``",
             "(see :ref:`cli`); ``hpcdist bench NAME --help`` lists its options.",
             "",
             ""]
    index += _table(["Report", "What it measures", "Date", "Ranks"], rows, widths=[26, 50, 16, 8],
                    cells_are_rst=True)
    index += [".. toctree::", "   :hidden:", "   :maxdepth: 1", ""]
    index += [f"   {name}" for name in names]
    _write(os.path.join(out_dir, "index.rst"), "\n".join(index) + "\n")
    return names


def _write(path, text):
    """Write only when the text changed, so that Sphinx rebuilds only changed pages."""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _generate(app):
    root = os.path.dirname(os.path.abspath(app.srcdir))
    write_pages(os.path.join(root, "benchmarks", "results"),
                os.path.join(app.srcdir, "performance"), benchmark_descriptions())


def setup(app):
    app.connect("builder-inited", _generate)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


__all__ = ["write_pages", "page_for", "command_of"]
