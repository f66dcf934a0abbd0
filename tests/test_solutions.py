"""Every exercise solution runs, and the figures it states hold.

Solutions sit in ``<details>`` folds, as markdown, so nbval never runs them by
itself.  ``tests/conftest.py`` appends them to each lesson's nbval items
(``lessons/NN_topic.ipynb::Solution 1``, ...), run in the kernel in which nbval
has just run the whole lesson: each lesson is executed once.  A solution that
states a figure asserts it.  The tests here check that arrangement.
"""

import os
import pathlib
import re
import subprocess
import sys

import nbformat
import pytest

from lesson_runner import LESSONS, lesson, reads_and_binds, solution_code

#: "00" ... "08", and "05a", "05b" for a lesson in two parts: the name up to its first underscore.
NUMBERS = sorted(p.name.split("_")[0] for p in LESSONS.glob("[0-9][0-9]*_*.ipynb"))
TESTS = pathlib.Path(__file__).resolve().parent


@pytest.mark.parametrize("number", NUMBERS)
def test_each_solution_reads_what_its_fold_sees(number):
    """Each lesson has exercises with solutions; no code cell after a solution's fold rebinds a name the
    solution reads, so running the solutions after the lesson's last cell runs each as where its fold is."""
    cells = lesson(number).cells
    folds = [(i, code) for i, cell in enumerate(cells) for code in solution_code(cell)]
    assert len(folds) >= 2, "each lesson has exercises with solutions"
    for i, code in folds:
        later = set().union(*(reads_and_binds(c.source)[1] for c in cells[i + 1:] if c.cell_type == "code"))
        assert reads_and_binds(code)[0] & later == set(), code


def test_each_collected_lesson_ends_with_its_solutions(request):
    """In this session's items (make test collects tests/ and lessons/), each notebook's cells are
    followed at once by one item per solution, in order, none elsewhere."""
    notebooks = {}
    for item in request.session.items:
        if item.nodeid.startswith("lessons/"):
            notebooks.setdefault(item.nodeid.split("::")[0], []).append(item.name)
    if not notebooks:
        pytest.skip("no lesson collected in this session (run with lessons/, as make test does)")
    for path, names in notebooks.items():
        count = sum(len(solution_code(cell)) for cell in nbformat.read(path, as_version=4).cells)
        cells = [name for name in names if name.startswith("Cell ")]
        assert names == cells + [f"Solution {k}" for k in range(1, count + 1)], path


def test_a_broken_solution_fails_its_notebook(tmp_path):
    """A notebook whose second solution no longer holds: nbval passes its cells and the first
    solution, and fails the second, in the lesson's kernel (it reads the lesson's ``x``)."""
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 41", execution_count=1),
        nbformat.v4.new_markdown_cell("<details>\n\n```python\nassert x == 41\n```\n</details>"),
        nbformat.v4.new_markdown_cell("<details>\n\n```python\nassert x + 1 == 43, 'off by one'\n```\n</details>"),
    ])
    nbformat.write(nb, tmp_path / "lesson.ipynb")
    (tmp_path / "conftest.py").write_text(
        "from lesson_runner import add_exercise_solutions\n\n"
        "def pytest_collection_modifyitems(items):\n    add_exercise_solutions(items)\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-v", "--color=no", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--nbval", "--nbval-current-env", "--rootdir", str(tmp_path), "lesson.ipynb"],
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                             [str(TESTS), os.environ.get("PYTHONPATH", "")])},
                         capture_output=True, text=True, timeout=300)
    out = re.sub(r"\x1b\[[0-9;]*m", "", run.stdout)  # the kernel's traceback is coloured
    assert run.returncode == 1, out[-3000:]
    assert "::Cell 0 PASSED" in out and "::Solution 1 PASSED" in out, out[-3000:]
    assert "::Solution 2 FAILED" in out and "AssertionError: off by one" in out, out[-3000:]
