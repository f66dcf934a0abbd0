"""Every exercise solution runs, and the figures it states hold.

Solutions sit in ``<details>`` folds, as markdown, so nbval never runs them.
Here each lesson runs top to bottom in a fresh kernel with every solution's
code inserted right after its fold; a solution that states a figure asserts it.
"""

import nbformat
import pytest

from lesson_runner import LESSONS, lesson, run, solution_code

#: "00" ... "08", and "05a", "05b" for a lesson in two parts: the name up to its first underscore.
NUMBERS = sorted(p.name.split("_")[0] for p in LESSONS.glob("[0-9][0-9]*_*.ipynb"))


@pytest.mark.parametrize("number", NUMBERS)
def test_every_solution_runs(number):
    nb = lesson(number)
    cells, solutions = [], 0
    for cell in nb.cells:
        cells.append(cell)
        for code in solution_code(cell):
            cells.append(nbformat.v4.new_code_cell(code))
            solutions += 1
    assert solutions >= 2, "each lesson has exercises with solutions"
    run(cells)

