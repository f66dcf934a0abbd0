"""The instructor guide's shorter workshops run as documented.

docs/instructor_guide.md lists, in one table, the sections of each lesson that
the half-day and 90-minute paths keep.  Each partial lesson is run here in a
fresh kernel (its setup, then only those sections), so that a section the
guide keeps never depends on one it skips.  Whole lessons are run by nbval.
"""

import pathlib
import re

import pytest

from lesson_runner import lesson, run, sections

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


@pytest.mark.parametrize("path, number, chosen", PARTIAL, ids=[f"{p} {n} {c}" for p, n, c in PARTIAL])
def test_short_path_runs_without_the_skipped_sections(path, number, chosen):
    parts = sections(lesson(number))
    wanted = numbers(chosen)
    assert wanted <= {n for n, _ in parts if n is not None}, f"lesson {number} has no section {wanted}"
    cells = [cell for n, part in parts if n is None or n in wanted for cell in part]
    run(cells)
