"""The command-line reference shows every benchmark's options."""

import sys

import pytest

from hpcdist.cli.main import BENCHMARKS
from tests.docs.examples import DOCS

sys.path.insert(0, str(DOCS / "_ext"))
import hpcdist_bench_help  # noqa: E402


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_benchmark_help_is_shown(name):
    text = hpcdist_bench_help.benchmark_help(name)
    assert text.startswith("usage: ") and f"bench {name}" in text.splitlines()[0]


def test_cli_page_uses_the_parsers():
    page = (DOCS / "cli.rst").read_text()
    assert ":func: build_parser" in page and ".. hpcdist-bench-help::" in page
