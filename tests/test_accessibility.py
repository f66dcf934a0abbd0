"""Every lesson against the Notebooks for All checklist, as this course applies it.

For every ``lessons/*.ipynb`` (found by glob, so a new or split lesson is checked too):

* exactly one H1, and headings never skip a level (H2 after H1, H3 after H2, ...);
* every figure (``image/png`` output) has a caption: the markdown cell right after
  the figure's cell, beginning "Look ..." or "Figure ..." (the lessons' "Look at ..."
  captions), of at least 12 words, which is also the text equivalent of what the
  figure shows (the website uses its first sentence as the figure's alt text);
* every figure is drawn in the Okabe-Ito palette (``helpers.palette.OKABE_ITO``):
  each colour that covers at least 0.2% of the picture and is not a grey is a
  palette colour, or one blended with white (a tint, transparency) or with black
  (a shade), within 8 levels of 255 per channel.

The rules are defined once, in ``tools/lesson_pages.py`` (headings, figures,
captions), and here (the palette).  Lessons that break a rule today are marked
``xfail`` (strict: the mark must go when the lesson is fixed) with the lesson and
what breaks, in :data:`KNOWN`.
"""

from __future__ import annotations

import base64
import io
import pathlib
import sys

import nbformat
import numpy as np
import pytest

from helpers.palette import OKABE_ITO

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import lesson_pages  # noqa: E402

#: (lesson number, check) -> what breaks today.  Remove an entry when its lesson is fixed.
KNOWN = {
}
PALETTE = np.array([[int(h[i:i + 2], 16) for i in (1, 3, 5)] for h in OKABE_ITO.values()], dtype=float)
#: A colour counts when it covers this share of the picture (not an antialiased edge).
MIN_SHARE = 0.002
#: Chroma (max channel minus min channel) below this is a grey.
GREY_CHROMA = 40
TOLERANCE = 8


def _cases(check: str) -> list:
    cases = []
    for path in lesson_pages.lesson_paths():
        reason = KNOWN.get((path.name[:2], check))
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        cases.append(pytest.param(path, id=path.stem, marks=marks))
    return cases


def off_palette_colours(png: bytes) -> list[tuple[tuple[int, int, int], float]]:
    """The colours of a PNG that break the palette rule, with the share of the picture each covers.

    A colour breaks it when it covers at least MIN_SHARE of the pixels, is no grey
    (chroma at least GREY_CHROMA) and is no Okabe-Ito colour blended with white or
    with black (weight 0.05 to 1) within TOLERANCE per channel.
    """
    import matplotlib.image

    rgb = matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3].reshape(-1, 3) * 255
    # Chroma (max - min of r, g, b) channel by channel: the same values as rgb.max(axis=1) - rgb.min(axis=1), a
    # tenth of its time on (pixels, 3) arrays (2.5 s of CPU for the lessons' 47 figures).
    r, g, b = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    chroma = np.maximum(np.maximum(r, g), b) - np.minimum(np.minimum(r, g), b)
    chromatic = rgb[chroma >= GREY_CHROMA].round().astype(int)
    if not len(chromatic):
        return []
    # Each colour as one integer, 0xRRGGBB: np.unique of those is the unique rows, in the same (r, g, b) order, with
    # the same counts, where np.unique(axis=0) sorted the rows as records (6.4 of the 7.3 s of CPU for the 47 figures).
    packed, counts = np.unique(chromatic @ np.array([1 << 16, 1 << 8, 1]), return_counts=True)
    colours = np.stack([packed >> 16, (packed >> 8) & 0xFF, packed & 0xFF], axis=1)
    keep = counts >= MIN_SHARE * len(rgb)
    weights = np.linspace(0.05, 1, 96)[:, None, None]
    tints = weights * PALETTE + (1 - weights) * 255  # (weights, palette, rgb)
    shades = weights * PALETTE
    blends = np.concatenate([tints, shades]).reshape(-1, 3)
    bad = []
    for colour, count in zip(colours[keep], counts[keep]):
        if np.abs(blends - colour).max(axis=1).min() > TOLERANCE:
            bad.append((tuple(int(c) for c in colour), count / len(rgb)))
    return bad


def _pngs(nb) -> list[tuple[int, bytes]]:
    return [(i, base64.b64decode(o["data"]["image/png"])) for i, c in enumerate(nb.cells) if c.cell_type == "code"
            for o in c.get("outputs", []) if "image/png" in o.get("data", {})]


def test_lessons_are_found():
    assert len(lesson_pages.lesson_paths()) >= 9


@pytest.mark.parametrize("path", _cases("headings"))
def test_one_h1_and_headings_in_order(path):
    problems = lesson_pages.heading_problems(lesson_pages.read(path))
    assert not problems, f"{path.name}: " + "; ".join(problems)


@pytest.mark.parametrize("path", _cases("captions"))
def test_every_figure_has_a_caption_that_says_what_it_shows(path):
    problems = lesson_pages.caption_problems(lesson_pages.read(path))
    assert not problems, f"{path.name}: " + "; ".join(problems)


@pytest.mark.parametrize("path", _cases("palette"))
def test_every_figure_draws_in_the_okabe_ito_palette(path):
    problems = [f"cell {cell}: {colour} on {share:.1%} of the figure"
                for cell, png in _pngs(lesson_pages.read(path)) for colour, share in off_palette_colours(png)]
    assert not problems, f"{path.name}: colours outside the Okabe-Ito palette: " + "; ".join(problems)


# -- the rules themselves, on notebooks and pictures made to break them --

def _png(*colours: str) -> bytes:
    """A PNG of vertical stripes in these colours, white between them (only tints at their edges)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 1), dpi=100)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.axis("off")
    for i, colour in enumerate(colours):
        ax.axvspan(i + 0.1, i + 0.9, color=colour)
    ax.set_xlim(0, len(colours))
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()


def test_the_palette_rule_refuses_matplotlibs_default_colours():
    assert off_palette_colours(_png(OKABE_ITO["blue"], OKABE_ITO["orange"], "#999999")) == []
    # A tint (alpha 0.4 on white) and a shade of palette colours pass.
    assert off_palette_colours(_png("#99C7E0", "#006BA8")) == []
    bad = off_palette_colours(_png(OKABE_ITO["blue"], "tab:blue", "tab:red"))
    assert [colour for colour, _ in bad] == [(31, 119, 180), (214, 39, 40)]


def _notebook(*cells) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    for kind, source, *png in cells:
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(source))
        else:
            cell = nbformat.v4.new_code_cell(source)
            if png:
                cell.outputs = [nbformat.v4.new_output("display_data", data={
                    "image/png": base64.b64encode(png[0]).decode(), "text/plain": "<Figure>"})]
            nb.cells.append(cell)
    return nb


def test_the_heading_rules():
    good = _notebook(("md", "# 99 · A lesson\n\n## 1. One\n\n### a part\n\n## 2. Two\n\n```bash\n# a comment\n```"))
    assert lesson_pages.heading_problems(good) == []
    assert [level for level, _, _ in lesson_pages.headings(good)] == [1, 2, 3, 2]
    two_h1 = _notebook(("md", "# A lesson"), ("md", "Another\n======="))
    assert lesson_pages.heading_problems(two_h1) == ["2 H1 headings, not one: ['A lesson', 'Another']"]
    skipped = _notebook(("md", "# A lesson\n\n### Too deep"))
    assert lesson_pages.heading_problems(skipped) == ["cell 0: H3 'Too deep' follows H1"]


def test_the_caption_rules():
    png = _png(OKABE_ITO["blue"])
    long = "Look at the blue bar: it is the parameters, and it stays the same height at every batch size."
    captioned = _notebook(("md", "# L"), ("code", 'plot(title="Memory per step")', png), ("md", long))
    assert lesson_pages.caption_problems(captioned) == []
    (fig,) = lesson_pages.figures(captioned)
    assert fig["alt"] == "Figure: Memory per step. " + long
    bare = _notebook(("md", "# L"), ("code", "fig", png), ("md", "Why? Because."))
    assert lesson_pages.caption_problems(bare) == ["figure of cell 1 has no caption (next: markdown cell 'Why? Because.')"]
    assert lesson_pages.figures(bare)[0]["alt"] == "Why?"
    short = _notebook(("md", "# L"), ("code", "fig", png), ("md", "*Figure: memory.*"))
    assert lesson_pages.caption_problems(short) == ["figure of cell 1: caption under 12 words"]
    last = _notebook(("md", "# L"), ("code", "fig", png))
    assert lesson_pages.caption_problems(last) == ["figure of cell 1 has no caption (next: the end)"]
