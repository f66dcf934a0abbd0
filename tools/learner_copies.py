"""The learner's working copies of the lessons: ``python tools/learner_copies.py LESSONS WORK``.

``make lessons`` runs it before it opens JupyterLab on ``WORK`` (``my-lessons/``;
``make reset-lessons`` empties ``WORK`` first).  Each ``LESSONS/*.ipynb`` is
copied into ``WORK`` unless the learner already has it there, as a *plain* notebook: without
jupytext pairing (:func:`unpair_lessons.unpair_notebook`), so that saving it in
JupyterLab writes the notebook alone and no ``.py`` beside it.  A copy made
before this rule, still paired, is unpaired in place (its metadata only; its
cells and outputs stay as the learner left them); a file there that is no
readable notebook is left as it is.

Run as a script (``make lessons``), it also signs each new copy for this user's Jupyter
(:func:`trust`, what ``jupyter trust`` does): the copies' stored outputs are the course's own,
computed by ``make refresh-notebooks``, and JupyterLab would otherwise say "Notebook is not trusted"
on opening each one. A learner's existing copy is never signed: what it holds is theirs.
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


def trust(paths: list[pathlib.Path]) -> None:
    """Sign each notebook of ``paths`` in this user's Jupyter signature store (``nbformat.sign.NotebookNotary``, as
    ``jupyter trust`` does), so that JupyterLab shows its stored outputs as trusted."""
    from nbformat.sign import NotebookNotary

    notary = NotebookNotary()
    for path in paths:
        notary.sign(nbformat.read(path, as_version=4))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tools/learner_copies.py LESSONS WORK")
    work = pathlib.Path(sys.argv[2])
    done = copy_lessons(pathlib.Path(sys.argv[1]), work)
    trust([work / line.split()[1] for line in done if line.startswith("copied ")])
    for line in done:
        print(line)
