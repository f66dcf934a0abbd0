"""Make the lessons plain notebooks: no jupytext pairing.  ``python tools/unpair_lessons.py [--check] [PATH...]``

A notebook whose metadata says ``jupytext: {formats: "ipynb,py:percent"}`` is
*paired*: JupyterLab's jupytext extension then writes a ``.py`` copy beside it
at every save, so a learner's folder fills with scripts that look like lessons.
The lessons need no pairing: ``make refresh-notebooks`` names both files
(``jupytext --update --to ipynb --output lessons/X.ipynb lessons/X.py``), and
``--update`` takes the notebook's jupytext metadata from the source's header, so
a source without ``formats:`` builds an unpaired notebook.

For each path (default: every ``lessons/*.ipynb`` and ``lessons/*.py`` of the
repository) this removes the pairing and nothing else:

* a notebook: ``metadata.jupytext.formats`` (and ``metadata.jupytext`` when
  nothing else is left in it), written back with nbformat, which keeps every
  other byte of a notebook nbconvert wrote;
* a ``py:percent`` source: the ``#     formats: ...`` line of its jupytext header.

``--check`` changes nothing: it lists the paired files and exits with status 1
if there are any.  Running it twice changes nothing the second time.
"""

from __future__ import annotations

import pathlib
import re
import sys

import nbformat

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The ``formats:`` line of a py:percent file's jupytext header.
_FORMATS_LINE = re.compile(r"^#\s+formats:.*\n", re.M)
_HEADER = re.compile(r"\A# ---\n(?:#.*\n)*?# ---\n")


def is_paired(path: pathlib.Path) -> bool:
    """Whether the notebook (``.ipynb``) or jupytext source (``.py``) at ``path`` names paired formats."""
    if path.suffix == ".ipynb":
        return "formats" in nbformat.read(path, as_version=4).metadata.get("jupytext", {})
    header = _HEADER.match(path.read_text())
    return bool(header and _FORMATS_LINE.search(header.group(0)))


def unpair_notebook(nb: nbformat.NotebookNode) -> bool:
    """Remove the pairing from a notebook in memory; return whether there was one."""
    jupytext = nb.metadata.get("jupytext")
    if not jupytext or "formats" not in jupytext:
        return False
    del jupytext["formats"]
    if not jupytext:
        del nb.metadata["jupytext"]
    return True


def unpair(path: pathlib.Path) -> bool:
    """Remove the pairing from the file at ``path`` (``.ipynb`` or ``.py``); return whether it had one."""
    if path.suffix == ".ipynb":
        nb = nbformat.read(path, as_version=4)
        if not unpair_notebook(nb):
            return False
        nbformat.write(nb, path)
        return True
    text = path.read_text()
    header = _HEADER.match(text)
    if not header or not _FORMATS_LINE.search(header.group(0)):
        return False
    path.write_text(_FORMATS_LINE.sub("", header.group(0), count=1) + text[header.end():])
    return True


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [pathlib.Path(a) for a in argv if a != "--check"] or sorted(
        [*(ROOT / "lessons").glob("*.ipynb"), *(ROOT / "lessons").glob("[0-9][0-9]*_*.py")])
    paired = [p for p in paths if is_paired(p)]
    if check:
        for p in paired:
            print(f"paired (jupytext formats in its metadata): {p}")
        return 1 if paired else 0
    for p in paired:
        unpair(p)
        print(f"unpaired: {p}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
