"""Every lesson states the minutes that the instructor guide's one method gives it.

The method and its measured inputs (each lesson's run-all seconds, its exercise
minutes) are two tables of ``docs/instructor_guide.md``; ``tools/lesson_minutes.py``
reads them and counts the rest in the stored notebook (words to read, lines of
code, figures).  Here every lesson's "**Time:**" line and the guide's own total
for it are recomputed; ``python tools/lesson_minutes.py`` prints the line a
lesson should state.  Nothing is timed here: the run-all seconds are measured by
``benchmarks/lesson_times.py`` and copied into the guide.
"""

import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from lesson_minutes import (Counts, counts, disagreement, guide_totals, lesson_number, measured,  # noqa: E402
                            method, minutes, stated, time_line)

NOTEBOOKS = sorted((ROOT / "lessons").glob("[0-9][0-9]*_*.ipynb"))


def _lesson(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    number = lesson_number(path)
    return nb, counts(nb), minutes(counts(nb), method(), *measured()[number])


def test_the_guide_states_the_method_and_lists_every_lesson():
    rates = method()
    assert rates["reading"] == 120   # NOTEBOOKS.md: technical prose reads at about 120 words a minute
    assert rates["most"] == 75       # NOTEBOOKS.md: over 75 minutes, two notebooks
    assert rates["code"] > 0 and rates["figure"] > 0
    assert set(measured()) == {lesson_number(p) for p in NOTEBOOKS}
    assert all(seconds > 0 and exercise > 0 for seconds, exercise in measured().values())


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_lesson_states_its_minutes_by_the_method(path):
    nb, c, m = _lesson(path)
    why = disagreement(stated(nb), m, c)
    assert why is None, f"{path.name}: {why}\n(python tools/lesson_minutes.py prints every lesson's line)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_guide_states_the_same_total(path):
    _, _, m = _lesson(path)
    assert guide_totals()[lesson_number(path)] == m.total


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_notebook_takes_longer_than_the_limit(path):
    """Every lesson, none excepted: the last one over the limit (08) was split into 08 and 08b (issue 34)."""
    _, _, m = _lesson(path)
    assert m.total <= method()["most"], f"{path.name}: {m.total} minutes; split it or trim it (NOTEBOOKS.md)"


def test_the_method_adds_its_parts_and_rounds_the_total_to_five_minutes():
    rates = {"reading": 120, "code": 10, "figure": 1, "most": 75}
    c = Counts(prose_words=2400, output_words=600, code_lines=125, figures=3, exercises=2)
    m = minutes(c, rates, run_seconds=90, exercise_minutes=20)
    assert (m.reading, m.code, m.figures, m.running, m.exercises) == (25, 13, 3, 2, 20)   # 12.5 and 1.5 round up
    assert m.total == 60                                                                  # 62.0 to the nearest 5
    assert minutes(c, rates, run_seconds=5, exercise_minutes=20).running == 1             # a minute at least
    line = time_line(m, c)
    assert line == ("**Time:** about 60 minutes alone: 25 of reading, 13 of code, 3 for the figures, "
                    "2 to run all, 20 for the two exercises")
    assert disagreement(line, m, c) is None
    assert disagreement(line.replace("13 of code", "12 of code"), m, c) is None          # a part within a minute
    assert disagreement(line.replace("60 minutes", "65 minutes"), m, c) is not None       # the total exactly
    assert disagreement(line.replace("13 of code", "10 of code"), m, c) is not None
    assert disagreement(None, m, c) is not None


def test_counting_leaves_out_folded_solutions_comments_and_table_rules():
    nb = {"cells": [
        {"cell_type": "markdown", "source": ["| a | b |\n|---|---|\n| one | 2 |\n",
                                             "**Exercise 1: x.** y\n<details>four words not read</details>"]},
        {"cell_type": "code", "source": ["# a comment\n", "x = 1\n", "\n", "print(x)  # counted\n"],
         "outputs": [{"output_type": "stream", "text": ["1 2 three\n"]},
                     {"output_type": "display_data", "data": {"image/png": "...", "text/plain": ["<Figure>"]}}]}]}
    assert counts(nb) == Counts(prose_words=8, output_words=3, code_lines=2, figures=1, exercises=1)


def _schedules():
    """The guide's schedule tables: for each day, its rows (start minute, what, minutes)."""
    text = (ROOT / "docs" / "instructor_guide.md").read_text(encoding="utf-8")
    schedule = text.split("## Schedule", 1)[1].split("\n## ", 1)[0]
    days, rows = [], []
    for line in schedule.splitlines() + [""]:
        match = re.match(r"^\| (\d+):(\d\d) \| ([^|]+?) \| (\d+) min \|", line)
        if match:
            rows.append((60 * int(match.group(1)) + int(match.group(2)), match.group(3), int(match.group(4))))
        elif rows:
            days.append(rows)
            rows = []
    return days


def test_the_schedule_gives_each_lesson_its_minutes_and_its_times_add_up():
    days, totals = _schedules(), guide_totals()
    assert days, "the guide's schedule tables were not found"
    scheduled = []
    for rows in days:
        assert rows[0][0] == 0
        for (start, _, length), (following, _, _) in zip(rows, rows[1:]):
            assert following == start + length, rows
        for _, what, length in rows:
            number = what.split()[0]
            if number in totals:
                scheduled.append(number)
                assert length == totals[number], f"lesson {number}: {length} min in the schedule, {totals[number]} by the method"
    assert sorted(scheduled) == sorted(totals), "every lesson once in the schedule"


#: Number words the schedule's first sentence may open with ("Four days: ...").
DAYS = {"two": 2, "three": 3, "four": 4, "five": 5}
#: The guide's rule for a day's breaks: a pause (a break or the lunch) after at most this much teaching.
LONGEST_STRETCH = 100


def test_no_day_is_longer_than_the_guide_says_and_its_totals_add_up():
    """The schedule's first sentence ("Four days: 17 hours 20 minutes of teaching in lessons, ...; 6 to 7 hours
    a day with breaks") against its tables: the number of days, the lessons' minutes added up, each day ending
    by the longest day it states, with one 60-minute lunch and a pause after at most 100 minutes of teaching."""
    text = (ROOT / "docs" / "instructor_guide.md").read_text(encoding="utf-8")
    schedule = text.split("## Schedule", 1)[1]
    match = re.search(r"(\w+) days: (\d+) hours (\d+) minutes of teaching in lessons.*?(\d+) to (\d+) hours a day "
                      r"with breaks", schedule, re.S)
    assert match, "the schedule's first sentence states the days, the hours of teaching and the length of a day"
    days = _schedules()
    assert DAYS[match.group(1).lower()] == len(days)
    assert 60 * int(match.group(2)) + int(match.group(3)) == sum(guide_totals().values())
    longest = 60 * int(match.group(5))
    for number, rows in enumerate(days, 1):
        start, _, length = rows[-1]
        assert start + length <= longest, f"day {number} ends at {start + length} minutes, past {longest}"
        assert [length for _, what, length in rows if what == "lunch"] == [60], f"day {number}: one lunch of 60 min"
        stretch = 0
        for _, what, length in rows:
            stretch = 0 if what in ("break", "lunch") else stretch + length
            assert stretch <= LONGEST_STRETCH, f"day {number}: {stretch} minutes of teaching without a break"


def test_the_readme_states_the_course_total():
    """README's "The course is 17 hours 20 minutes in all." is the lessons' minutes added up."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    match = re.search(r"The course is (\d+) hours (\d+) minutes in all", text)
    assert match, "README states the course's total"
    assert 60 * int(match.group(1)) + int(match.group(2)) == sum(guide_totals().values())
