"""Build the course's website from the committed notebooks and their stored outputs (``make site``).

Usage: ``python tools/build_site.py [OUT]`` (default ``build/site``), run with the
website's environment (``requirements-site.txt``: Sphinx, myst-nb and the book
theme).  Nothing is executed.  Steps:

1. Stage the pages in ``OUT/src``, all in one folder (so every page links to every
   other page the same way):

   * ``index.md``: the landing page: the README's introduction (what the course
     teaches and for whom) and its quick-start commands, the schedule (each
     lesson's title and stated minutes, from the lessons themselves), the pages.
   * every ``lessons/*.ipynb``, found by glob and sorted (no lesson is named
     here), with each figure's alt text in its cell's metadata
     (``mystnb.image.alt``, from ``tools/lesson_pages.py``) and any stored widget
     view dropped, so that a widget's readable ``text/html`` stand-in is shown;
   * ``instructor_guide.md`` (``docs/instructor_guide.md``), ``references.md``
     (every lesson's "Further reading" section), ``changelog.md``
     (``CHANGELOG.md``) and ``licence.md`` (licences and ``CITATION.cff``).

2. Run ``sphinx-build -b html -c site`` into ``OUT/html``, warnings as errors.

Open ``OUT/html/index.html``; ``tests/test_site.py`` checks every page in Chromium.
"""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys
import time

import nbformat

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import lesson_pages  # noqa: E402

ROOT = lesson_pages.ROOT
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


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
    """The README's quick-start commands: the first fenced bash block of its "Quick start"."""
    match = re.search(r"```bash\n.*?```", readme_section("Quick start"), re.S)
    if not match:
        raise ValueError("README.md's Quick start has no ```bash block")
    return match.group(0)


def stage_lesson(path: pathlib.Path, dest: pathlib.Path) -> dict:
    """Copy one lesson notebook into ``dest`` with its figures' alt text; return its schedule row."""
    nb = lesson_pages.read(path)
    for fig in lesson_pages.figures(nb):
        cell = nb.cells[fig["cell"]]
        cell.metadata.setdefault("mystnb", {}).setdefault("image", {}).setdefault("alt", fig["alt"])
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            data = output.get("data", {})
            if WIDGET_VIEW in data and "text/html" in data:
                del data[WIDGET_VIEW]
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


def landing_page(rows: list[dict]) -> str:
    """The landing page's Markdown: introduction, how to run it, schedule, the pages."""
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


def main(out: pathlib.Path) -> None:
    """Stage the pages in ``out/src`` and build the HTML into ``out/html`` (warnings are errors)."""
    start = time.perf_counter()
    src, html = out / "src", out / "html"
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(html, ignore_errors=True)
    src.mkdir(parents=True)
    paths = lesson_pages.lesson_paths()
    if not paths:
        raise SystemExit("no lessons/*.ipynb to build")
    rows = [stage_lesson(path, src) for path in paths]
    (src / "index.md").write_text(landing_page(rows))
    shutil.copy(ROOT / "docs" / "instructor_guide.md", src / "instructor_guide.md")
    (src / "references.md").write_text(references_page(rows))
    shutil.copy(ROOT / "CHANGELOG.md", src / "changelog.md")
    (src / "licence.md").write_text(licence_page())
    subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-c", str(ROOT / "site"), "-W", "--keep-going",
                    "-q", "-j", "1", str(src), str(html)], check=True)
    print(f"website: {len(paths)} lessons, {html / 'index.html'} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "site")
