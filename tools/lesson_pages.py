"""What a lesson notebook says about itself: title, minutes, headings, figures and their captions.

One definition of each, shared by the website build (``tools/build_site.py``: the
schedule, the figures' alt text, the references page) and the accessibility test
(``tests/test_accessibility.py``).  Needs only ``nbformat`` and ``markdown-it-py``,
so it runs in the lessons' environment and in the website's.

The rules (the Notebooks for All checklist, as this course applies it):

* **Headings** are the Markdown headings of the markdown cells, read by a
  CommonMark parser (a ``#`` line inside a fenced code block is no heading).  A
  lesson has exactly one H1 (its title, the first line), and a heading is at most
  one level below the heading before it (H2 after H1, H3 after H2, ...).
* A **figure** is an ``image/png`` output of a code cell.
* Its **caption** is the markdown cell right after the figure's cell, when that
  cell's text begins with "Look" ("Look at ...", "Look where ...") or with
  "Figure" (also "*Figure ...*", "**Figure ...**"): the lessons' convention of a
  sentence that says what to see.  A caption is also the figure's text
  equivalent, so it must be a real description: at least :data:`MIN_CAPTION_WORDS`
  words.
* The **alt text** of a figure on the website is its caption's first sentence,
  prefixed with the figure's title when the cell gives one (``title="..."``).  A
  figure without a caption gets the first sentence of the next markdown cell.
"""

from __future__ import annotations

import pathlib
import re

import nbformat
from markdown_it import MarkdownIt

ROOT = pathlib.Path(__file__).resolve().parent.parent
LESSONS = ROOT / "lessons"

#: A caption shorter than this says too little to stand in for the figure.
MIN_CAPTION_WORDS = 12
_CAPTION_START = re.compile(r"^\W*(Look\b|Figure\b)")
_TITLE = re.compile(r"""title\s*=\s*(["'])(.+?)\1""")
_MINUTES = re.compile(r"(\d+)\s*minutes")
_SENTENCE = re.compile(r"(.+?[.!?])(?=\s+[A-Z(\"]|\s*$)", re.S)
_MD = MarkdownIt("commonmark")


def lesson_paths() -> list[pathlib.Path]:
    """Every lesson notebook, ``lessons/*.ipynb`` sorted by name (never a fixed list)."""
    return sorted(LESSONS.glob("*.ipynb"))


def read(path: pathlib.Path) -> nbformat.NotebookNode:
    """The stored notebook at ``path`` (nbformat 4), outputs included."""
    return nbformat.read(path, as_version=4)


def headings(nb: nbformat.NotebookNode) -> list[tuple[int, str, int]]:
    """The Markdown headings of the notebook's markdown cells, in order.

    Returns ``[(level, text, cell index), ...]`` with level 1 for ``#`` (H1), ATX
    and setext headings alike; fenced code is skipped, as a Markdown renderer does.
    """
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        tokens = _MD.parse(cell.source)
        for i, token in enumerate(tokens):
            if token.type == "heading_open":
                found.append((int(token.tag[1]), tokens[i + 1].content, index))
    return found


def heading_problems(nb: nbformat.NotebookNode) -> list[str]:
    """What breaks the heading rules (one H1; no skipped level), one line each; ``[]`` when none."""
    found = headings(nb)
    problems = []
    h1 = [text for level, text, _ in found if level == 1]
    if len(h1) != 1:
        problems.append(f"{len(h1)} H1 headings, not one: {h1}")
    previous = 0
    for level, text, index in found:
        if level > previous + 1:
            problems.append(f"cell {index}: H{level} {text!r} follows H{previous}")
        previous = level
    return problems


def title(nb: nbformat.NotebookNode) -> str:
    """The lesson's H1 (its first heading)."""
    return headings(nb)[0][1]


def minutes(nb: nbformat.NotebookNode) -> int:
    """The lesson's stated minutes, from its first cell's ``**Time:**`` line.

    "about N minutes alone: ..." gives N; otherwise the minutes listed are added
    ("40 minutes teaching, 20 minutes exercises" gives 60).  Raises ValueError when
    the first cell states no time.
    """
    match = re.search(r"\*\*Time:\*\*(.*?)(\*\*GPU|$)", nb.cells[0].source, re.S)
    if not match or not _MINUTES.search(match.group(1)):
        raise ValueError("the lesson's first cell has no '**Time:** N minutes' line")
    text = match.group(1)
    about = re.match(r"\s*about\s+(\d+)\s*minutes", text)
    return int(about.group(1)) if about else sum(int(n) for n in _MINUTES.findall(text))


def first_sentence(markdown: str) -> str:
    """The first sentence of a markdown text (ending at '.', '!' or '?' before a capital), one line.

    Emphasis stars and backticks are dropped.
    """
    text = re.sub(r"[*`]", "", " ".join(markdown.split()))
    match = _SENTENCE.match(text)
    return (match.group(1) if match else text).strip()


def figures(nb: nbformat.NotebookNode) -> list[dict]:
    """Every figure (``image/png`` output) with what describes it.

    Returns one dict per figure: ``cell`` (index of its code cell), ``output``
    (index among that cell's outputs), ``title`` (the ``title="..."`` of the
    cell's source, last one, or None), ``caption`` (the caption cell's text, or
    None when the next cell is no caption, see the module docstring) and
    ``alt`` (the website's alt text, never empty).
    """
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for out_index, output in enumerate(cell.get("outputs", [])):
            if "image/png" not in output.get("data", {}):
                continue
            after = nb.cells[index + 1] if index + 1 < len(nb.cells) else None
            caption = None
            if after is not None and after.cell_type == "markdown" and _CAPTION_START.match(after.source):
                caption = after.source
            following = caption or next((c.source for c in nb.cells[index + 1:] if c.cell_type == "markdown"), "")
            titles = _TITLE.findall(cell.source)
            fig_title = titles[-1][1] if titles else None
            alt = first_sentence(following) if following else ""
            if fig_title:
                alt = f"Figure: {fig_title}. {alt}".strip()
            found.append({"cell": index, "output": out_index, "title": fig_title, "caption": caption,
                          "alt": alt or "Figure (see the text after it)."})
    return found


def caption_problems(nb: nbformat.NotebookNode) -> list[str]:
    """Figures without a caption, or with one too short to be their text equivalent; one line each."""
    problems = []
    for fig in figures(nb):
        if fig["caption"] is None:
            after = nb.cells[fig["cell"] + 1] if fig["cell"] + 1 < len(nb.cells) else None
            said = f"{after.cell_type} cell {after.source[:40]!r}" if after is not None else "the end"
            problems.append(f"figure of cell {fig['cell']} has no caption (next: {said})")
        elif len(fig["caption"].split()) < MIN_CAPTION_WORDS:
            problems.append(f"figure of cell {fig['cell']}: caption under {MIN_CAPTION_WORDS} words")
    return problems


def further_reading(nb: nbformat.NotebookNode) -> str:
    """The Markdown of the lesson's "Further reading" (or "References") section, heading excluded.

    The section runs from that H2 to the next heading of level 2 or above, or the
    lesson's end; ``""`` when the lesson has none.
    """
    lines: list[str] = []
    inside = False
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            heading = re.match(r"^(#{1,2}) (.*)", line)
            if heading:
                inside = bool(re.match(r"(Further reading|References|Sources)\b", heading.group(2).strip(), re.I))
                continue
            if inside:
                lines.append(line)
        if inside:
            lines.append("")
    return "\n".join(lines).strip()
