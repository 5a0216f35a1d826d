"""The ``hpcdist-bench-help`` directive: the options of every ``hpcdist bench NAME``.

Each benchmark parses its own options (``hpcdist bench NAME --help``).  The
directive runs that help for every benchmark the command knows (the
``BENCHMARKS`` table of :mod:`hpcdist.cli.main`) in the build's process, as
the command does, and shows it under a heading per benchmark, so the reference
always matches the installed benchmarks.
"""

import contextlib
import importlib
import io

from docutils import nodes
from docutils.parsers.rst import Directive

from hpcdist.cli.main import BENCHMARKS


def benchmark_help(name):
    """The text ``hpcdist bench NAME --help`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            importlib.import_module(BENCHMARKS[name]).main(["--help"])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise RuntimeError(f"hpcdist bench {name} --help exited with {exc.code}") \
                    from None
    text = out.getvalue().strip()
    if not text:
        raise RuntimeError(f"hpcdist bench {name} --help printed nothing")
    return text


class BenchHelp(Directive):
    """One rubric and one literal block of help per benchmark."""

    has_content = False

    def run(self):
        result = []
        for name in sorted(BENCHMARKS):
            result.append(nodes.rubric(text=f"hpcdist bench {name}", ids=[f"bench-{name}"]))
            block = nodes.literal_block(text=benchmark_help(name))
            block["language"] = "text"
            result.append(block)
        return result


def setup(app):
    app.add_directive("hpcdist-bench-help", BenchHelp)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
