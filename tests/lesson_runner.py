"""Run parts of a lesson notebook in a fresh kernel, for tests that nbval cannot express.

nbval replays a stored notebook cell by cell.  Two other promises need a kernel of
their own: that the exercise solutions (code in ``<details>`` folds, never run by
nbval) still run and hold, and that the short paths of the instructor guide,
which skip whole sections, run without the skipped ones.
"""

from __future__ import annotations

import pathlib
import re

import nbformat
from nbclient import NotebookClient

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
    if "raises-exception" in cell.metadata.get("tags", []) or "# NBVAL_RAISES_EXCEPTION" in cell.source:
        new.metadata["tags"] = ["raises-exception"]
    return new
