"""Build the course's website from the committed notebooks and their stored outputs (``make site``).

Usage: ``python tools/build_site.py [OUT [LESSON ...]]`` (default ``build/site``), run with the
website's environment (``requirements-site.txt``: Sphinx, myst-nb and the book
theme).  Nothing is executed.  Named lessons (``01b_out_of_memory_and_deep_mlps``)
build a site of those lessons only, with the same landing, guide, references,
changelog and licence pages (``tests/test_site.py`` checks a page's launch links on
such a site, in a third of a whole build's time).  Steps:

1. Stage the pages in ``OUT/src``, all in one folder (so every page links to every
   other page the same way):

   * ``index.md``: the landing page: the README's introduction (what the course
     teaches and for whom) and its quick-start commands, the schedule (each
     lesson's title and stated minutes, from the lessons themselves), the pages.
   * every ``lessons/*.ipynb``, found by glob and sorted (no lesson is named
     here), with each figure's alt text in its cell's metadata
     (``mystnb.image.alt``, from ``tools/lesson_pages.py``) and each widget's
     output written for a reader of the page (:func:`reader_outputs`): its stored
     view dropped, its stand-in (which tells a learner to run the notebook) turned
     into a note that says what the widget does and where it runs, after the
     widget's first figure when its output has one;
   * ``instructor_guide.md`` (``docs/instructor_guide.md``), ``references.md``
     (every lesson's "Further reading" section), ``changelog.md``
     (``CHANGELOG.md``) and ``licence.md`` (licences and ``CITATION.cff``).

2. Run ``sphinx-build -b html -c site`` into ``OUT/html``, warnings as errors.

Open ``OUT/html/index.html``; ``tests/test_site.py`` checks every page in Chromium.
"""

from __future__ import annotations

import html
import pathlib
import re
import shutil
import subprocess
import sys
import time

import nbformat

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import lesson_pages  # noqa: E402
import publish  # noqa: E402

ROOT = lesson_pages.ROOT
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: A displayed widget's ``text/plain``: ``MemoryExplorer(children=(...``.
_WIDGET_REPR = re.compile(r"(\w+)\(children=\(")
#: Its ``text/html`` stand-in (``helpers.teaching.widgets``): ``<b>Name</b>: what it does. It appears here ...``.
_STAND_IN = re.compile(r"<b>(\w+)</b>: (.*?) It appears here when you run", re.S)
#: The class of the note that stands for a widget on a page (site/_static/site.css).
WIDGET_NOTE = "gm-widget-note"


def readme_section(heading: str | None) -> str:
    """The README's text under ``## heading`` (None: the introduction under the H1), up to the next H2."""
    text = (ROOT / "README.md").read_text()
    parts = re.split(r"^## ", text, flags=re.M)
    if heading is None:
        return parts[0].split("\n", 1)[1].strip()
    for part in parts[1:]:
        title, _, body = part.partition("\n")
        if title.strip() == heading:
            return body.strip()
    raise ValueError(f"README.md has no '## {heading}' section")


def quick_start() -> str:
    """The README's quick-start commands (the first fenced bash block of its "Quick start") as a Markdown
    list: each command as code, then what its ``#`` comment says, as prose that wraps on a narrow page."""
    match = re.search(r"```bash\n(.*?)```", readme_section("Quick start"), re.S)
    if not match:
        raise ValueError("README.md's Quick start has no ```bash block")
    items = []
    for line in match.group(1).splitlines():
        command, _, comment = (part.strip() for part in line.partition(" #"))
        if command:
            items.append(f"- `{command}`" + (f": {comment}" if comment else ""))
    return "\n".join(items)


def reader_outputs(outputs: list, services: list[str], where: str) -> list:
    """A code cell's outputs as a reader of the page sees them: each widget's output (known by its
    ``text/plain`` repr) becomes a note (class :data:`WIDGET_NOTE`) that names the widget, says what it
    does (from its stand-in) and that it runs in JupyterLab (or on ``services``, the page's launch menu),
    preceded by the widget's first figure when its output has one (``image/png``); other outputs stay.

    Raises:
        SystemExit: for a widget output without a stand-in this can read (``where`` names the cell).
    """
    staged = []
    for output in outputs:
        data = output.get("data", {})
        shown = _WIDGET_REPR.match(data.get("text/plain", ""))
        if not shown:
            staged.append(output)
            continue
        stand_in = _STAND_IN.search(data.get("text/html", ""))
        if not stand_in:
            raise SystemExit(f"{where}: the widget {shown.group(1)} has no text/html stand-in to write a note from")
        if "image/png" in data:  # its first state is a figure: show it
            staged.append(nbformat.v4.new_output("display_data", data={"image/png": data["image/png"]}))
        run = (f"or use this page's launch menu (the rocket at its top: {', '.join(services)})" if services else
               'see <a href="index.html#how-to-run-the-lessons">how to run the lessons</a>')
        note = (f'<div class="{WIDGET_NOTE}"><b>{stand_in.group(1)}</b>, an interactive widget: {stand_in.group(2)} '
                f"It runs when the lesson runs in JupyterLab, not on this page: {run}.</div>")
        staged.append(nbformat.v4.new_output("display_data", data={"text/html": note,
                                                                   "text/plain": html.unescape(stand_in.group(2))}))
    return staged


def stage_lesson(path: pathlib.Path, dest: pathlib.Path, services: list[str]) -> dict:
    """Copy one lesson notebook into ``dest`` with its figures' alt text and its widgets' notes
    (:func:`reader_outputs`); return its schedule row."""
    nb = lesson_pages.read(path)
    for fig in lesson_pages.figures(nb):
        cell = nb.cells[fig["cell"]]
        cell.metadata.setdefault("mystnb", {}).setdefault("image", {}).setdefault("alt", fig["alt"])
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs = reader_outputs(cell.outputs, services, f"{path.name} cell {index}")
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, dest / path.name)
    questions = re.search(r"\*\*Questions\*\*\n((?:- .*\n?)+)", nb.cells[0].source)
    try:
        stated = lesson_pages.minutes(nb)
    except ValueError as error:
        raise SystemExit(f"{path.name}: {error}") from None
    return {"page": path.stem, "title": lesson_pages.title(nb), "minutes": stated,
            "questions": [q[2:].strip() for q in questions.group(1).splitlines()] if questions else [],
            "reading": lesson_pages.further_reading(nb)}


def landing_page(rows: list[dict], services: list[str]) -> str:
    """The landing page's Markdown: introduction, how to run it (and where, with ``services``: the
    lesson pages' launch menu), schedule, the pages."""
    intro = readme_section(None)
    table = ["| lesson | the questions it answers | minutes |", "|---|---|---|"]
    for row in rows:
        asks = " ".join(row["questions"]).replace("|", "\\|")
        table.append(f"| [{row['title']}]({row['page']}.ipynb) | {asks} | {row['minutes']} |")
    total = sum(row["minutes"] for row in rows)
    pages = [row["page"] for row in rows] + ["instructor_guide", "references", "changelog", "licence"]
    return f"""# Where does my GPU memory go?

{intro}

## How to run the lessons

This website shows each lesson as it was last run, with its outputs and figures;
the interactive widgets appear only when you run the notebooks yourself. On a
machine with Python 3.10+ and `make` (Linux or macOS), in a clone of the repository:

{quick_start()}
{launch_note(services)}
## Schedule

Each lesson states how long it takes a learner alone (reading, running the cells
and the exercises): {total} minutes, about {total / 60:.1f} hours, for all {len(rows)}.
For a workshop (two days with breaks, and shorter variants), see the
[instructor guide](instructor_guide.md).

{chr(10).join(table)}

The [references](references.md) gather every lesson's further reading; the
[changelog](changelog.md) says what changed for learners; the
[licence page](licence.md) says how to reuse and cite the material.

```{{toctree}}
:hidden:
:maxdepth: 1

{chr(10).join(pages)}
```
"""


def launch_note(services: list[str]) -> str:
    """A paragraph on running a lesson online from its page (``services``: :func:`publish.launch_services`),
    or ``""`` when no launch link is set."""
    if not services:
        return ""
    where = " or ".join([", ".join(services[:-1]), services[-1]] if len(services) > 1 else services)
    return (f"\nOr run a lesson online, without installing anything: each lesson page's launch menu (the rocket "
            f"at its top) opens it on {where}.\n")


def references_page(rows: list[dict]) -> str:
    """Every lesson's "Further reading" section under the lesson's title."""
    parts = ["# References", "",
             "The further reading of every lesson, as each lesson gives it at its end.", ""]
    for row in rows:
        if row["reading"]:
            parts += [f"## [{row['title']}]({row['page']}.ipynb)", "", row["reading"], ""]
    return "\n".join(parts)


def licence_page() -> str:
    """Licences, version and the citation (CITATION.cff as it is)."""
    cff = (ROOT / "CITATION.cff").read_text()
    version = re.search(r"^version:\s*\"?([^\"\n]+)", cff, re.M).group(1)
    return f"""# Licence and citation

- **The lessons' text and figures** (the notebooks in `lessons/`, this website's
  pages, `docs/`): [Creative Commons Attribution 4.0 International (CC BY 4.0)](https://creativecommons.org/licenses/by/4.0/)
  (`LICENSE-lessons`). Share and adapt them, also commercially, with credit.
- **The code** (`helpers/`, `tools/`, `tests/`, `benchmarks/`, the build files):
  the MIT licence (`LICENSE`).

This is version **{version}** of the material (see the [changelog](changelog.md)).
To cite it, use `CITATION.cff` (GitHub's "Cite this repository" reads it):

```yaml
{cff.strip()}
```
"""


def main(out: pathlib.Path, only: list[str] | None = None) -> None:
    """Stage the pages in ``out/src`` and build the HTML into ``out/html`` (warnings are errors): every lesson, or
    the lessons named in ``only`` (their file names' stems)."""
    start = time.perf_counter()
    src, html = out / "src", out / "html"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(html, ignore_errors=True)
    src.mkdir(parents=True)
    paths = lesson_pages.lesson_paths()
    if only:
        unknown = set(only) - {path.stem for path in paths}
        if unknown:
            raise SystemExit(f"no lesson named {', '.join(sorted(unknown))}")
        paths = [path for path in paths if path.stem in only]
    if not paths:
        raise SystemExit("no lessons/*.ipynb to build")
    services = publish.launch_services(publish.settings())
    rows = [stage_lesson(path, src, services) for path in paths]
    (src / "index.md").write_text(landing_page(rows, services))
    shutil.copy(ROOT / "docs" / "instructor_guide.md", src / "instructor_guide.md")
    (src / "references.md").write_text(references_page(rows))
    shutil.copy(ROOT / "CHANGELOG.md", src / "changelog.md")
    (src / "licence.md").write_text(licence_page())
    subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-c", str(ROOT / "site"), "-W", "--keep-going",
                    "-q", "-j", "1", str(src), str(html)], check=True)
    print(f"website: {len(paths)} lessons, {html / 'index.html'} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "site", sys.argv[2:])
