"""Every lesson is found by the machinery that globs for lessons, under one id.

A lesson is ``lessons/NN_topic.py`` (+ ``.ipynb``), or ``NNa_`` and ``NNb_`` for a
lesson in two parts (05a, 05b).  The Makefile's ``LESSONS``, the source/notebook
check and the solutions test each find lessons by a glob; a glob that misses a
name, or an id that names two notebooks, silently leaves a lesson untested.
"""

import pathlib
import re

import pytest
from lesson_runner import LESSONS, lesson
from test_lesson_sources import NOTEBOOKS
from test_solutions import NUMBERS

ROOT = pathlib.Path(__file__).resolve().parent.parent
NAME = re.compile(r"^(\d\d[a-z]?)_[a-z0-9_]+$")


def test_every_lesson_file_is_named_by_the_convention():
    stems = {p.stem for p in LESSONS.iterdir() if p.suffix in (".py", ".ipynb")}
    assert stems, "no lessons found"
    assert [s for s in sorted(stems) if not NAME.match(s)] == []


def test_the_globs_find_every_lesson_under_one_id():
    notebooks = sorted(LESSONS.glob("*.ipynb"))
    assert NOTEBOOKS == notebooks
    assert NUMBERS == sorted(NAME.match(p.stem).group(1) for p in notebooks)
    assert len(set(NUMBERS)) == len(NUMBERS), "two notebooks share an id"


@pytest.mark.parametrize("number", NUMBERS)
def test_each_id_opens_its_own_notebook(number):
    assert lesson(number).cells


def test_the_makefile_rebuilds_every_lesson():
    glob = re.search(r"^LESSONS \?= \$\(wildcard (\S+)\)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert sorted(ROOT.glob(glob)) == sorted(LESSONS.glob("*.py"))
