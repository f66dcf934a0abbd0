"""The instructor guide's shorter workshops run as documented.

docs/instructor_guide.md lists, in one table, the sections of each lesson that
the half-day and 90-minute paths keep.  A partial lesson is its setup, then only
those sections; a section the guide keeps must never depend on one it skips.

``make test`` checks it without a kernel: every name a kept cell reads is defined
by an earlier kept cell, an import or a builtin (``lesson_runner.undefined_names``).
The slow group (``make test-slow``, ``make test-all``) also runs each partial lesson in
a fresh kernel, which catches what no name shows (a skipped cell that changes an
object a kept one reads).  Whole lessons are run by nbval.  A partial lesson that
skips only sections after its last kept one (90 minutes of lesson 03: its setup and
sections 1-3) is the start of its whole lesson, cell for cell: nbval's run of the
lesson (``make test``, in a fresh kernel, failing at a cell that raises) runs exactly
those cells first, so it is not run again here (``make test`` checks that it is such
a start: :func:`test_a_short_path_not_run_again_is_its_lessons_start`).
"""

import pathlib
import re

import nbformat
import pytest

from lesson_runner import lesson, run, sections, undefined_names

GUIDE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "instructor_guide.md"


def documented_paths() -> list[tuple[str, str, str]]:
    """(path, lesson number, sections) rows of the guide's table of short paths."""
    text = GUIDE.read_text(encoding="utf-8")
    table = text.split("<!-- short paths: tested by tests/test_short_paths.py -->")[1].split("\n\n")[0]
    rows = re.findall(r"^\| ([\w -]+?) \| (\d\d[a-z]?) [^|]*\| ([\d, -]+|all) \|", table, flags=re.M)
    assert rows, "the guide's table of short paths was not found"
    return rows


def numbers(text: str) -> set[int]:
    """'1, 3-8' -> {1, 3, 4, 5, 6, 7, 8}."""
    chosen = set()
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        chosen.update(range(int(first), int(last or first) + 1))
    return chosen


PARTIAL = [row for row in documented_paths() if row[2] != "all"]


def test_the_guide_documents_both_short_paths():
    paths = {path for path, _, _ in documented_paths()}
    assert paths == {"half day", "90 minutes"}


def kept_cells(number: str, chosen: str) -> list:
    """The cells of lesson ``number`` that a path keeps: the setup, then the ``chosen`` sections."""
    parts = sections(lesson(number))
    wanted = numbers(chosen)
    assert wanted <= {n for n, _ in parts if n is not None}, f"lesson {number} has no section {wanted}"
    return [cell for n, part in parts if n is None or n in wanted for cell in part]


IDS = [f"{p} {n} {c}" for p, n, c in PARTIAL]


@pytest.mark.parametrize("path, number, chosen", PARTIAL, ids=IDS)
def test_short_path_reads_no_name_of_a_skipped_section(path, number, chosen):
    assert undefined_names(kept_cells(number, chosen)) == []


def test_the_name_check_finds_what_only_a_skipped_section_defines():
    md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    nb = nbformat.v4.new_notebook(cells=[
        md("# A lesson"), code("import math\nfrom helpers import fmt_bytes"),
        md("## 1. Radius"), code("radius = 2\nprint(fmt_bytes(radius))"),
        md("## 2. Area"), code("area = math.pi * radius ** 2"),
        md("## 3. Later"), code("def report():\n    return [area * k for k in range(3)]"), code("print(len(report()))"),
    ])
    parts = sections(nb)
    path = {n: cells for n, cells in parts}

    def kept(*chosen):
        return [cell for n, cells in parts if n is None or n in chosen for cell in cells]

    assert [n for n, _ in parts] == [None, 1, 2, 3]
    assert undefined_names(kept(1, 2, 3)) == []
    assert undefined_names(kept(2, 3)) == [("area = math.pi * radius ** 2", "radius")]
    assert undefined_names(kept(1, 3)) == [("def report():", "area")]  # read in a function, at its call
    assert undefined_names(path[3]) == [("def report():", "area")]  # k: bound by the comprehension; print: builtin
    assert undefined_names([code("total = 0\nfor k in range(3):\n    total += k\nprint(total, k)")]) == []
    assert undefined_names([code("print(later)\nlater = 1")]) == [("print(later)", "later")]


def _code(cells: list) -> list[str]:
    return [cell.source for cell in cells if cell.cell_type == "code"]


def is_the_lessons_start(number: str, chosen: str) -> bool:
    """Whether the path's kept code cells are the first code cells of the whole lesson, in its order: the path skips
    nothing before its last kept cell, so nbval's run of the whole lesson runs it first."""
    kept, whole = _code(kept_cells(number, chosen)), _code(lesson(number).cells)
    return kept == whole[:len(kept)]


#: The partial lessons run again in a fresh kernel (the slow group): those that are not their lesson's start.
RUN = [row for row in PARTIAL if not is_the_lessons_start(row[1], row[2])]


def test_a_short_path_not_run_again_is_its_lessons_start():
    """The paths left out of the slow group's runs are, cell for cell, the start of their lesson, which nbval runs
    whole in a fresh kernel; those that skip a section before a kept one (the ones a skipped cell could break) run."""
    started = [f"{p} {n} {c}" for p, n, c in PARTIAL if (p, n, c) not in RUN]
    assert started == ["half day 04 1-3", "90 minutes 03 1-3", "90 minutes 04 1, 2"], started
    for _, number, chosen in RUN:
        kept = numbers(chosen)
        assert any(n not in kept for n in range(1, max(kept))), (number, chosen)  # a section skipped before a kept one
    assert not is_the_lessons_start("01", "1, 3") and is_the_lessons_start("01", "1, 2")


@pytest.mark.parametrize("path, number, chosen", RUN, ids=[f"{p} {n} {c}" for p, n, c in RUN])
def test_short_path_runs_without_the_skipped_sections(path, number, chosen):
    run(kept_cells(number, chosen))
