"""The API reference (docs/api/*.rst) has an entry for every public name.

Public names are the ``__all__`` lists of ``hpcdist`` and of each public
subpackage (and of ``hpcdist.exceptions``); the command-line modules
``hpcdist.cli`` and ``hpcdist.bench`` are documented by the CLI reference
instead.  A name counts as documented when an autosummary list of the
reference names it under its package (a line ``   Name`` below
``.. currentmodule:: package``), or, for a name a package re-exports from a
parent package's ``__all__`` (the same object), under that parent.  A new
public name therefore fails this test until one line naming it is added to
its package's page.
"""

import importlib
import inspect
import pkgutil
import re

import pytest

import hpcdist
from tests.docs.examples import DOCS

API = DOCS / "api"
UNDOCUMENTED_PACKAGES = {"cli", "bench"}


def public_packages():
    """Names of the public packages with an ``__all__``, ``hpcdist`` first."""
    names = ["hpcdist"]
    for info in pkgutil.walk_packages(hpcdist.__path__, "hpcdist."):
        parts = info.name.split(".")[1:]
        if any(p.startswith("_") for p in parts) or parts[0] in UNDOCUMENTED_PACKAGES:
            continue
        if not info.ispkg and info.name != "hpcdist.exceptions":
            continue
        if hasattr(importlib.import_module(info.name), "__all__"):
            names.append(info.name)
    return names


def reference_entries():
    """``package.Name`` for every autosummary entry of the reference pages."""
    entries = set()
    for page in sorted(API.glob("*.rst")):
        module = None
        in_autosummary = False
        for line in page.read_text(encoding="utf-8").splitlines():
            current = re.match(r"^\.\. currentmodule::\s*(\S+)", line)
            if current:
                module = current.group(1)
                continue
            if line.startswith(".. autosummary::"):
                in_autosummary = True
                continue
            if in_autosummary:
                if not line.strip() or line.strip().startswith(":"):
                    continue
                if not line.startswith("   "):
                    in_autosummary = False
                    continue
                entries.add(f"{module}.{line.strip()}")
    return entries


def documented_modules():
    """Modules with a reference page (``.. module:: NAME``)."""
    found = set()
    for page in API.glob("*.rst"):
        found.update(re.findall(r"^\.\. module::\s*(\S+)", page.read_text(encoding="utf-8"),
                                re.M))
    return found


def documented_under(package, name, entries):
    """The package whose reference entry documents ``package.name``, or None.

    A subpackage in ``__all__`` (``hpcdist.nn.optim``) is documented by its own page.
    """
    if f"{package}.{name}" in entries:
        return package
    obj = getattr(importlib.import_module(package), name)
    if inspect.ismodule(obj) and obj.__name__ in documented_modules():
        return obj.__name__
    parts = package.split(".")
    for i in range(1, len(parts)):
        parent = importlib.import_module(".".join(parts[:i]))
        if name in getattr(parent, "__all__", ()) and getattr(parent, name) is obj \
                and f"{parent.__name__}.{name}" in entries:
            return parent.__name__
    return None


PACKAGES = public_packages()


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_has_a_reference_entry(package):
    entries = reference_entries()
    module = importlib.import_module(package)
    missing = [n for n in module.__all__ if documented_under(package, n, entries) is None]
    page = API / ("hpcdist.rst" if package == "hpcdist"
                  else package[len("hpcdist."):] + ".rst")
    assert not missing, (
        f"{package} exports {missing} but the API reference has no entry for them: add "
        f"each name on its own line to an autosummary list of {page.relative_to(DOCS.parent)}"
        + ("" if page.exists() else " (a new page: copy another docs/api page and add it "
           "to docs/api/index.rst)"))


def test_every_reference_entry_is_public():
    """The reference documents no name that is gone from its package's ``__all__``."""
    stale = []
    for entry in sorted(reference_entries()):
        package, name = entry.rsplit(".", 1)
        module = importlib.import_module(package)
        if name not in getattr(module, "__all__", ()):
            stale.append(entry)
    assert not stale, f"reference entries that are no public name: {stale}"


def test_every_package_page_is_in_the_index():
    index = (API / "index.rst").read_text(encoding="utf-8")
    pages = [p.stem for p in API.glob("*.rst") if p.stem != "index"]
    missing = [p for p in pages if not re.search(rf"^\s+{re.escape(p)}\s*$", index, re.M)]
    assert not missing, f"docs/api/index.rst lists no {missing}"
