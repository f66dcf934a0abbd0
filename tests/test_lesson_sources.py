"""Each lesson notebook is built from a readable source beside it (jupytext py:percent).

``lessons/NN_topic.py`` is what people edit and review; ``make refresh-notebooks``
rebuilds ``lessons/NN_topic.ipynb`` from it and stores the outputs of a fresh run,
which strict nbval then checks.  These tests fail when the two drift apart.
"""

import ast
import pathlib

import jupytext
import nbformat
import pytest

LESSONS = pathlib.Path(__file__).parent.parent / "lessons"
NOTEBOOKS = sorted(LESSONS.glob("[0-9][0-9]*_*.ipynb"))   # 05a_..., 05b_...: a lesson in two parts


#: Cell metadata that the source carries into the notebook: nbval's tags and their reason.
KEPT_METADATA = ("tags", "nbval_reason")


def _cells(notebook) -> list[tuple]:
    return [(c.cell_type, c.source.strip(), {k: c.metadata[k] for k in KEPT_METADATA if k in c.metadata})
            for c in notebook.cells]


def test_every_notebook_has_a_source_and_every_source_a_notebook():
    sources = {p.stem for p in LESSONS.glob("[0-9][0-9]*_*.py")}
    assert sources == {p.stem for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_source_and_notebook_agree(path):
    source = jupytext.read(path.with_suffix(".py"))
    notebook = nbformat.read(path, as_version=4)
    built, stored = _cells(source), _cells(notebook)
    for i, (a, b) in enumerate(zip(built, stored)):
        assert a == b, f"cell {i} differs between {path.stem}.py and {path.name}: run make refresh-notebooks"
    assert len(built) == len(stored), f"{path.stem}.py has {len(built)} cells, {path.name} {len(stored)}"
    assert source.metadata["kernelspec"]["name"] == "python3"
    ast.parse(path.with_suffix(".py").read_text(encoding="utf-8"))  # every markdown line commented: runnable Python
