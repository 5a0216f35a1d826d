"""The installed package speaks to its users only: no references to this project's own
documents or issue numbers, and no verdicts against this project's performance targets
(those live in ``benchmarks/targets.toml``, outside the package)."""
import re
from pathlib import Path

import pytest

import hpcdist

PACKAGE = Path(hpcdist.__file__).resolve().parent
SOURCES = sorted(path for path in PACKAGE.rglob("*") if path.suffix in (".py", ".txt", ".cfg",
                                                                         ".toml", ".json"))

#: what a user of the package cannot open or does not need: (pattern, what it is)
INTERNAL = (
    (r"\b(API|DESIGN)\.md\b", "an internal design document"),
    (r"ISSUE-NOTES|/work/shared", "the internal notes"),
    (r"(?<![\w/])[Ii]ssues? #?\d+", "an issue number"),
    (r"(?<![\w&/])#\d{1,4}\b", "an issue reference (#NN)"),
    (r"\bsection \d+ of\b|\b[A-Z]+\.md section\b", "a section of an internal document"),
)
#: what ``hpcdist bench`` must not print or write: the team's verdicts
VERDICTS = (
    (r"[\"'](PASS|MISS)[\"']", "a PASS/MISS verdict"),
    (r"target\(s\) missed|All targets met", "a count of missed targets"),
)


def _hits(patterns, paths):
    found = []
    for path in paths:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for pattern, what in patterns:
                if re.search(pattern, line):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{number}: {what}: "
                                 f"{line.strip()}")
    return found


def test_the_package_has_sources_to_check():
    assert len(SOURCES) > 50 and PACKAGE / "__init__.py" in SOURCES


def test_no_internal_documents_or_issue_numbers():
    assert _hits(INTERNAL, SOURCES) == []


def test_benchmarks_report_figures_not_verdicts():
    assert _hits(VERDICTS, [path for path in SOURCES if "bench" in path.parts]) == []


@pytest.mark.parametrize("line, what", [
    ("The loop (API.md section 10), the same", "an internal design document"),
    ("Target (issue #17, as the notes set it)", "an issue number"),
    ("#: the targets of #28, at 2 ranks", "an issue reference (#NN)"),
    ("see /work/shared/ISSUE-NOTES.md", "the internal notes"),
])
def test_the_patterns_catch_what_they_are_for(line, what):
    assert what in [label for pattern, label in INTERNAL if re.search(pattern, line)]


@pytest.mark.parametrize("line", [
    "# directly in a prange body are lost (github.com/numba/numba/issues/5872 and /7135)",
    'color = "#1f77b4"',
    "x = values[-1]  # the last one",
])
def test_public_links_and_ordinary_code_pass(line):
    assert not [label for pattern, label in INTERNAL if re.search(pattern, line)]
