"""tools/learner_copies.py and tools/unpair_lessons.py: the lessons and the learner's copies are plain notebooks.

A notebook paired by jupytext (``formats: ipynb,py:percent`` in its metadata)
gets a ``.py`` written beside it at every save in JupyterLab.  ``make lessons``
copies the lessons unpaired; ``tools/unpair_lessons.py`` unpairs the committed
lessons and their sources, after which ``make refresh-notebooks`` (jupytext
``--update``) still builds each notebook from its source, unpaired.
tests/test_browser.py saves a learner's copy in a real JupyterLab.
"""

import pathlib
import shutil
import sys

import jupytext
import nbformat
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from learner_copies import copy_lessons  # noqa: E402
from unpair_lessons import is_paired, main, unpair  # noqa: E402

LESSON = ROOT / "lessons" / "00_setup_check"
PAIRING = {"formats": "ipynb,py:percent"}


def _paired_lesson(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A copy of lesson 00's notebook and source in ``folder``, paired as the lessons were."""
    nb = nbformat.read(LESSON.with_suffix(".ipynb"), as_version=4)
    nb.metadata["jupytext"] = dict(PAIRING)
    nbformat.write(nb, folder / "00_setup_check.ipynb")
    source = jupytext.read(LESSON.with_suffix(".py"))
    source.metadata.setdefault("jupytext", {}).update(PAIRING)
    jupytext.write(source, folder / "00_setup_check.py", fmt="py:percent")
    return folder / "00_setup_check.ipynb", folder / "00_setup_check.py"


def test_unpairing_removes_the_pairing_and_nothing_else(tmp_path):
    notebook, source = _paired_lesson(tmp_path)
    before_nb, before_py = nbformat.read(notebook, as_version=4), source.read_text()
    assert is_paired(notebook) and is_paired(source)
    assert main([str(notebook), str(source)]) == 0
    assert not is_paired(notebook) and not is_paired(source)
    after_nb = nbformat.read(notebook, as_version=4)
    assert after_nb.cells == before_nb.cells and "jupytext" not in after_nb.metadata
    assert after_nb.metadata == {k: v for k, v in before_nb.metadata.items() if k != "jupytext"}
    removed = [line for line in before_py.splitlines() if line not in source.read_text().splitlines()]
    assert removed == ["#     formats: ipynb,py:percent"]
    snapshot = notebook.read_bytes(), source.read_bytes()
    assert not unpair(notebook) and not unpair(source)  # twice: nothing more to do
    assert (notebook.read_bytes(), source.read_bytes()) == snapshot
    assert main(["--check", str(notebook), str(source)]) == 0


def test_refresh_notebooks_builds_an_unpaired_notebook_from_an_unpaired_source(tmp_path):
    """make refresh-notebooks' first step (jupytext --update --to ipynb --output NB SOURCE) takes the
    notebook's jupytext metadata from the source's header: unpair both, or the next refresh pairs again."""
    notebook, source = _paired_lesson(tmp_path)
    unpair(notebook)
    from jupytext.cli import jupytext as jupytext_cli  # the jupytext command's own entry point, in this process

    def refresh():
        assert jupytext_cli(["--quiet", "--update", "--to", "ipynb", "--output", str(notebook), str(source)]) == 0

    refresh()
    assert is_paired(notebook)  # the source's header paired it again
    unpair(notebook)
    unpair(source)
    refresh()
    assert not is_paired(notebook)
    built = nbformat.read(notebook, as_version=4)
    assert [c.source for c in built.cells] == [c.source for c in jupytext.read(LESSON.with_suffix(".py")).cells]


def test_the_learners_copies_are_plain_notebooks(tmp_path):
    lessons, work = tmp_path / "lessons", tmp_path / "my-lessons"
    lessons.mkdir()
    _paired_lesson(lessons)
    shutil.copy(ROOT / "lessons" / "01_mini_batching.ipynb", lessons)
    work.mkdir()
    (work / "01_mini_batching.ipynb").write_text("{}")  # the learner's own: never overwritten
    done = copy_lessons(lessons, work)
    assert done == [f"copied 00_setup_check.ipynb to {work}",
                    f"left {work / '01_mini_batching.ipynb'} as it is (not a notebook nbformat reads: ValidationError)"]
    assert (work / "01_mini_batching.ipynb").read_text() == "{}"
    assert not is_paired(work / "00_setup_check.ipynb") and not list(work.glob("*.py"))
    assert nbformat.read(work / "00_setup_check.ipynb", as_version=4).cells == nbformat.read(
        lessons / "00_setup_check.ipynb", as_version=4).cells
    paired_copy = work / "02_paired_earlier.ipynb"  # a copy made before this rule, with the learner's work
    nb = nbformat.read(lessons / "00_setup_check.ipynb", as_version=4)
    nb.cells[0].source += "\n\nMy note."
    nbformat.write(nb, paired_copy)
    shutil.copy(paired_copy, lessons / paired_copy.name)
    assert copy_lessons(lessons, work)[1:] == [f"unpaired {paired_copy}"]
    assert not is_paired(paired_copy) and "My note." in paired_copy.read_text()
    assert len(copy_lessons(lessons, work)) == 1  # the broken one, again: nothing else to do


def test_the_committed_lessons_are_not_paired():
    """After tools/unpair_lessons.py: no lesson notebook or source names paired formats."""
    paired = [p.name for p in sorted([*LESSON.parent.glob("*.ipynb"), *LESSON.parent.glob("[0-9][0-9]*_*.py")])
              if is_paired(p)]
    if paired:
        pytest.fail(f"paired by jupytext (run python tools/unpair_lessons.py): {', '.join(paired)}")
