"""Sphinx configuration of the hpcdist documentation (built by ``scripts/docs``)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))
sys.path.insert(0, os.path.dirname(HERE))

# Importing the reference's modules must not start MPI jobs or threads of its own.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import hpcdist  # noqa: E402

project = "hpcdist"
author = "the hpcdist developers"
copyright = "the hpcdist developers"
release = hpcdist.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "numpydoc",
    "sphinxarg.ext",
    "hpcdist_performance",
    "hpcdist_bench_help",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "examples", "Thumbs.db", ".DS_Store"]
root_doc = "index"

# --- API reference ---------------------------------------------------------
autosummary_generate = sorted(
    os.path.relpath(os.path.join(HERE, "api", f), HERE)
    for f in os.listdir(os.path.join(HERE, "api")) if f.endswith(".rst"))
autosummary_imported_members = True
autodoc_default_options = {"members": True, "inherited-members": False, "show-inheritance": True}
autodoc_typehints = "none"
autodoc_mock_imports = ["cupy"]
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks = set()

intersphinx_mapping = {}  # no network during the build
nitpicky = False
smartquotes = False          # "--option" stays two hyphens
highlight_language = "none"   # a bare ``::`` block is text; Python examples say so


def skip_member(app, what, name, obj, skip, options):
    """Leave out members that hpcdist does not define: scikit-learn's metadata
    routing methods (``set_fit_request`` and such) and the methods str and
    int give the string and integer enums."""
    module = getattr(obj, "__module__", None) or ""
    if module.startswith("sklearn") or (name.startswith("set_") and name.endswith("_request")):
        return True
    if what == "class" and getattr(obj, "__objclass__", None) in (str, int):
        return True
    return skip


def setup(app):
    app.connect("autodoc-skip-member", skip_member)

# --- HTML ------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"hpcdist {release}"
html_static_path = []
html_theme_options = {
    "navigation_depth": 3,
    "show_toc_level": 2,
    "navbar_align": "left",
    "header_links_before_dropdown": 7,
    "secondary_sidebar_items": ["page-toc"],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
html_show_sourcelink = False
html_copy_source = False
