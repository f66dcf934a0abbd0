"""The lessons' promises that nbval's replay of a stored notebook does not check by itself.

* The exercise solutions (code in ``<details>`` folds, markdown to nbval) run and
  hold: :func:`add_exercise_solutions` appends them to each lesson's nbval items,
  run in the same kernel after its last cell, so a lesson is executed once.
* The instructor guide's short paths, which skip whole sections, read no name that
  only a skipped section defines: :func:`undefined_names` checks it without a
  kernel; :func:`run` executes the partial lessons in a fresh kernel (slow, CI).
"""

from __future__ import annotations

import ast
import builtins
import pathlib
import re
import symtable
from collections import defaultdict

import nbformat
from nbclient import NotebookClient
from nbval.plugin import IPyNbCell, IPyNbFile, find_comment_markers

LESSONS = pathlib.Path(__file__).resolve().parent.parent / "lessons"
_SECTION = re.compile(r"^## (\d+)\. ", re.M)
_CODE = re.compile(r"```python\n(.*?)```", re.S)


def lesson(number: str) -> nbformat.NotebookNode:
    """The stored notebook whose name starts with ``number`` and an underscore (``"01"``, ``"05a"``)."""
    (path,) = LESSONS.glob(f"{number}_*.ipynb")
    return nbformat.read(path, as_version=4)


def sections(nb: nbformat.NotebookNode) -> list[tuple[int | None, list]]:
    """The cells split at numbered section headings (``## 3. Title``).

    Returns ``[(None, cells before section 1), (1, cells of section 1), ...]``;
    the exercises and key points belong to the last numbered section.
    """
    parts: list[tuple[int | None, list]] = [(None, [])]
    for cell in nb.cells:
        match = _SECTION.search(cell.source) if cell.cell_type == "markdown" else None
        if match:
            parts.append((int(match.group(1)), []))
        parts[-1][1].append(cell)
    return parts


def solution_code(cell) -> list[str]:
    """The python code blocks inside the ``<details>`` folds of a markdown cell."""
    if cell.cell_type != "markdown" or "<details>" not in cell.source:
        return []
    return [block for fold in cell.source.split("<details>")[1:]
            for block in _CODE.findall(fold.split("</details>")[0])]


def run(cells: list, timeout: int = 600) -> None:
    """Execute these cells in order in a fresh python3 kernel; raise on the first error.

    Cells tagged ``raises-exception`` (nbval's and nbclient's tag) may raise, as
    may cells marked with the comment ``# NBVAL_RAISES_EXCEPTION``.  The kernel
    starts in ``lessons/``, as JupyterLab would start it.
    """
    nb = nbformat.v4.new_notebook(cells=[_fresh(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(LESSONS)}}).execute()


def _fresh(cell):
    if cell.cell_type != "code":
        return nbformat.v4.new_markdown_cell(cell.source)
    new = nbformat.v4.new_code_cell(cell.source)
    markers = dict(find_comment_markers(cell.source))
    if markers.get("check_exception") or "raises-exception" in cell.get("metadata", {}).get("tags", []):
        new.metadata["tags"] = ["raises-exception"]
    return new


# -- Checks without a kernel ------------------------------------------------------------------

#: Names the IPython kernel defines in every notebook, beside Python's builtins.
IPYTHON_NAMES = frozenset({"display", "get_ipython", "In", "Out", "exit", "quit"})


def undefined_names(cells: list) -> list[tuple[str, str]]:
    """The names the code cells read before any of them defines them, in order: ``[(cell's first line, name)]``.

    A name counts as defined from the statement on that binds it at module level
    (an assignment, ``for``, ``with ... as``, ``import``, ``def``, ``class``, ``:=``,
    ``global`` in a function), in an earlier cell or earlier in the same cell; the
    builtins and IPython's :data:`IPYTHON_NAMES` always are.  A name read inside a
    function, lambda, class or comprehension counts as read by the statement that
    holds it, as if the function were called at once (stricter than Python).  A
    name a statement both binds and reads (``for k in ...: print(k)``) counts as
    defined by it.  Static: a skipped cell that only changes an object's state is not seen.
    """
    defined = set(dir(builtins)) | IPYTHON_NAMES
    missing = []
    for cell in cells:
        if cell.cell_type != "code":
            continue
        first_line = (cell.source.strip().splitlines() or [""])[0]
        for reads, binds in _statements(cell.source):
            missing += [(first_line, name) for name in sorted(reads - binds - defined)]
            defined |= binds
    return missing


def reads_and_binds(source: str) -> tuple[set[str], set[str]]:
    """The module-level names a cell's code reads before binding them, and those it binds (as :func:`undefined_names`)."""
    reads, binds = set(), set()
    for statement_reads, statement_binds in _statements(source):
        reads |= statement_reads - statement_binds - binds
        binds |= statement_binds
    return reads, binds


def _statements(source: str):
    """``(reads, binds)`` of each top-level statement of a cell, read with IPython's transformations (``%magic``, ``!``)."""
    from IPython.core.inputtransformer2 import TransformerManager

    for statement in ast.parse(TransformerManager().transform_cell(source)).body:
        table = symtable.symtable(ast.unparse(statement), "<cell>", "exec")
        reads = {s.get_name() for s in table.get_symbols() if s.is_referenced()}
        binds = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
        nested = list(table.get_children())
        while nested:
            scope = nested.pop()
            nested += scope.get_children()
            for symbol in scope.get_symbols():
                if symbol.is_global() and symbol.is_referenced():
                    reads.add(symbol.get_name())
                if symbol.is_declared_global() and symbol.is_assigned():
                    binds.add(symbol.get_name())
        yield reads, binds


# -- Exercise solutions as nbval items --------------------------------------------------------

class ExerciseSolution(IPyNbCell):
    """One exercise solution, run as a cell in its lesson's nbval kernel; outputs are not compared.

    It fails when the solution raises (an ``assert`` that no longer holds, a name
    that no longer exists), as a lesson cell does.
    """

    def reportinfo(self):
        return self.path, 0, f"{self.path.relative_to(self.config.rootpath)}::{self.name}"

    def repr_failure(self, excinfo):
        return f"{self.name} of {self.path.name} failed\n" + str(super().repr_failure(excinfo))


def add_exercise_solutions(items: list) -> None:
    """Put one :class:`ExerciseSolution` per ``<details>`` fold right after each notebook's last nbval cell.

    ``items`` is pytest's collected list (``pytest_collection_modifyitems``),
    changed in place.  The solutions run in order, in the kernel in which nbval
    has just run the whole lesson.  Every lesson's exercises come after its last
    section, and no cell after a solution's fold rebinds a name the solution reads
    (``tests/test_solutions.py`` checks it): each runs as it would right after its fold.
    """
    last = {}
    for index, item in enumerate(items):
        if isinstance(item.parent, IPyNbFile) and not isinstance(item, ExerciseSolution):
            last[item.parent] = index
    for notebook, index in sorted(last.items(), key=lambda pair: -pair[1]):
        items[index + 1:index + 1] = solution_items(notebook)


def solution_items(notebook: IPyNbFile) -> list[ExerciseSolution]:
    """The items of a collected notebook's solutions, named ``Solution 1``, ``Solution 2``, ... in order."""
    cells = notebook.nb.cells
    codes = [code for cell in cells for code in solution_code(cell)]
    first = sum(cell.cell_type == "code" for cell in cells)  # numbered on after nbval's "Cell N"
    items = []
    for k, code in enumerate(codes):
        options = defaultdict(bool, find_comment_markers(code))
        options["check"] = False
        items.append(ExerciseSolution.from_parent(notebook, name=f"Solution {k + 1}", cell_num=first + k,
                                                  cell=nbformat.v4.new_code_cell(code), options=options))
    return items
