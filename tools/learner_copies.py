"""The learner's working copies of the lessons: ``python tools/learner_copies.py LESSONS WORK``.

``make lessons`` runs it before it opens JupyterLab on ``WORK`` (``my-lessons/``;
``make reset-lessons`` empties ``WORK`` first).  Each ``LESSONS/*.ipynb`` is
copied into ``WORK`` unless the learner already has it there, as a *plain* notebook: without
jupytext pairing (:func:`unpair_lessons.unpair_notebook`), so that saving it in
JupyterLab writes the notebook alone and no ``.py`` beside it.  A copy made
before this rule, still paired, is unpaired in place (its metadata only; its
cells and outputs stay as the learner left them); a file there that is no
readable notebook is left as it is.
"""

from __future__ import annotations

import pathlib
import sys

import nbformat

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from unpair_lessons import unpair, unpair_notebook  # noqa: E402


def copy_lessons(lessons: pathlib.Path, work: pathlib.Path) -> list[str]:
    """Copy every ``lessons/*.ipynb`` into ``work`` as a plain notebook (see the module); return what was done,
    one line per notebook copied or unpaired."""
    work.mkdir(parents=True, exist_ok=True)
    done = []
    for source in sorted(lessons.glob("*.ipynb")):
        copy = work / source.name
        if copy.exists():
            try:
                if unpair(copy):
                    done.append(f"unpaired {copy}")
            except Exception as e:  # not a notebook nbformat reads: the learner's file, left as it is
                done.append(f"left {copy} as it is (not a notebook nbformat reads: {type(e).__name__})")
            continue
        nb = nbformat.read(source, as_version=4)
        unpair_notebook(nb)
        nbformat.write(nb, copy)
        done.append(f"copied {source.name} to {work}")
    return done


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tools/learner_copies.py LESSONS WORK")
    for line in copy_lessons(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])):
        print(line)
