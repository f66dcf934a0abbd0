# Sphinx configuration of the course's website (make site; tools/build_site.py).
#
# The pages are staged by tools/build_site.py into build/site/src (the landing
# page, every lesson notebook with its stored outputs, the instructor guide, the
# references, the changelog and the licence) and built from there with this
# configuration (sphinx-build -c site).  Nothing is executed: the notebooks'
# stored outputs are the pages' outputs.
import pathlib
import re
import sys

_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_ROOT / "tools"))
import publish  # noqa: E402  (where the course is published: site/publish.cfg)
# The material's version: pyproject.toml's (CITATION.cff says the same; tests/test_citation.py checks).
_VERSION = re.search(r'^version = "(.+)"', (_ROOT / "pyproject.toml").read_text(), re.M).group(1)

project = "Where does my GPU memory go?"
author = "the authors of the course (CITATION.cff)"
copyright = "2026, the authors of the course"
version = release = _VERSION

extensions = ["myst_nb"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# The notebooks' stored outputs, never re-run (a build needs neither torch nor a kernel).
nb_execution_mode = "off"
# stderr (library warnings, which differ between machines) is not part of a lesson (nbval ignores it too).
nb_output_stderr = "remove"
# The lessons' <details> solution folds are raw HTML in their Markdown (passed through).
# linkify: the bare URLs of the lessons' further reading become links; only those
# with a scheme (no "fuzzy" links, which would turn train_fsdp.py into a web address).
myst_enable_extensions = ["linkify"]
myst_linkify_fuzzy_links = False
myst_heading_anchors = 3
suppress_warnings = ["mystnb.unknown_mime_type"]

html_theme = "sphinx_book_theme"
html_title = f"Where does my GPU memory go? (version {_VERSION})"
html_static_path = ["_static"]
html_css_files = ["site.css"]
html_show_sourcelink = False
html_last_updated_fmt = None
# Light: the figures are drawn on white. An explicit mode also keeps the theme from
# logging "Got invalid theme mode" on a first visit (its template's default is empty).
html_context = {"default_mode": "light"}
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "use_download_button": True,
    "extra_footer": ("Lessons' text and figures: "
                     '<a href="https://creativecommons.org/licenses/by/4.0/">CC BY 4.0</a>; '
                     'code: MIT. See <a href="licence.html">Licence and citation</a>.'),
}
# Launch links (Binder, JupyterHub via nbgitpuller, Colab) to run a lesson where the course is
# published: off until site/publish.cfg sets them (tools/publish.py).
html_theme_options.update(publish.theme_options(publish.settings()))
