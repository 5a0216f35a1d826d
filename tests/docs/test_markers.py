"""How tests/docs/examples.py reads the markers of code examples."""

import shutil
import tempfile
from pathlib import Path

import pytest

from tests.docs.examples import REPO_ROOT, MarkerError, example_file, examples_in_rst


@pytest.fixture
def page():
    """Writes a page into a temporary folder inside the repository (example ids are
    relative to it); the folder goes afterwards."""
    parent = REPO_ROOT / "docs" / "_build"
    parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="marker-test-", dir=parent))

    def write(text, name="page.rst"):
        path = folder / name
        path.write_text(text)
        return path
    yield write
    shutil.rmtree(folder)


def test_marked_blocks_are_found_with_kind_ranks_and_code(page):
    path = page("Title\n=====\n\n.. test: mpi 3\n\n.. code-block:: python\n   :caption: x\n\n"
                "   import hpcdist\n\n   if True:\n       pass\n\nText after.\n\n"
                ".. test: serial\n.. code-block:: python\n\n   print(1)\n")
    first, second = examples_in_rst(path)
    assert (first.kind, first.ranks, first.line) == ("mpi", 3, 6)
    assert first.code == "import hpcdist\n\nif True:\n    pass\n"
    assert (second.kind, second.ranks, second.code) == ("serial", 1, "print(1)\n")
    assert first.id.endswith("page.rst:6-mpi3")


def test_unmarked_python_block_is_an_error_naming_file_and_line(page):
    path = page("Text.\n\n.. code-block:: python\n\n   x = 1\n")
    with pytest.raises(MarkerError, match=r"marker-test-\w+/page.rst:3: python example without"):
        examples_in_rst(path)


def test_other_languages_need_no_marker(page):
    path = page(".. code-block:: console\n\n   $ hpcdist info\n\n.. code-block:: text\n\n   a\n")
    assert examples_in_rst(path) == []


BAD_MARKERS = ["mpi", "mpi 0", "mpi two", "serial 2", "gpu 9", "doctest"]


# ids by position: an id "mpi" would make pytest-mpi take the test for an MPI test
@pytest.mark.parametrize("marker", BAD_MARKERS, ids=[f"bad{i}" for i in range(len(BAD_MARKERS))])
def test_bad_markers_are_errors(page, marker):
    path = page(f".. test: {marker}\n\n.. code-block:: python\n\n   x = 1\n")
    with pytest.raises(MarkerError, match="test marker"):
        examples_in_rst(path)


def test_example_files_carry_the_marker_on_their_first_line(page):
    good = page("# test: gpu 2\nimport cupy\n", name="good.py")
    example = example_file(good)
    assert (example.kind, example.ranks) == ("gpu", 2)
    with pytest.raises(MarkerError, match="first line"):
        example_file(page("import cupy\n", name="bad.py"))
