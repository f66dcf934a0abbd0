"""How long a lesson takes a learner alone, by the one method the instructor guide states.

``docs/instructor_guide.md`` ("How the minutes are stated") holds the method in
two tables that this module reads: the rates (words of reading a minute, lines
of code a minute, minutes a figure), and, per lesson, the two figures that
cannot be counted in its notebook: the seconds a run-all takes (measured by
``benchmarks/lesson_times.py``) and the minutes of its exercises.  The rest is
counted in the stored notebook (:func:`counts`).  A lesson's minutes are then

    reading   words of its prose (markdown, folded solutions left out) and of
              its printed outputs, at the reading rate;
    code      its lines of code (neither blank nor comments), at the code rate;
    figures   its PNG figures, at the minutes a figure;
    running   its run-all seconds;
    exercises its exercise minutes;

each part rounded to the nearest minute, and their exact sum to the nearest
5 minutes for the total.  A word is what ``str.split`` separates and holds a
letter or a digit (as ``wc -w`` counts, without the table rules).

Each lesson states the result in its "**Time:**" line, in the words of
:func:`time_line`; ``tests/test_lesson_minutes.py`` recomputes it for every
lesson and fails where a lesson, or the guide's table, says otherwise.

Run ``python tools/lesson_minutes.py`` to print every lesson's parts and the
"**Time:**" line it should state.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "instructor_guide.md"
LESSONS = ROOT / "lessons"
#: The markers of the guide's two tables.
METHOD_MARK = "<!-- lesson minutes, the method: read by tools/lesson_minutes.py -->"
LESSONS_MARK = "<!-- lesson minutes, per lesson: read by tools/lesson_minutes.py -->"
#: Exercise headings in a lesson's markdown: "**Exercise 2: ...**".
EXERCISE = re.compile(r"\*\*Exercise \d+\b")
#: A lesson's stated time: "**Time:** about 85 minutes alone: 36 of reading, ...".
TIME = re.compile(r"\*\*Time:\*\* about (\d+) minutes alone: (.*?)\. \*\*")
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


@dataclass(frozen=True)
class Counts:
    """What a stored lesson notebook holds for a learner to read, look at and do."""

    prose_words: int    # markdown, folded <details> solutions left out
    output_words: int   # printed text outputs (stream and text/plain, not figures)
    code_lines: int     # lines of code cells, neither blank nor comments
    figures: int        # PNG outputs
    exercises: int      # "**Exercise N" headings


@dataclass(frozen=True)
class Minutes:
    """A lesson's minutes by the method: each part rounded, and the total to the nearest 5."""

    reading: int
    code: int
    figures: int
    running: int
    exercises: int
    total: int


def _words(text: str) -> int:
    return sum(1 for w in text.split() if any(ch.isalnum() for ch in w))


def counts(nb: dict) -> Counts:
    """Count a notebook (as JSON) for :func:`minutes`."""
    prose = output = code = figures = exercises = 0
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            text = re.sub(r"<details>.*?</details>", " ", source, flags=re.S)  # solutions: read after trying
            prose += _words(re.sub(r"<[^>]+>", " ", text))
            exercises += len(EXERCISE.findall(text))
        elif cell["cell_type"] == "code":
            code += sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))
            for out in cell.get("outputs", []):
                data = out.get("data", {})
                if "image/png" in data:
                    figures += 1
                elif out.get("output_type") == "stream":
                    output += _words("".join(out.get("text", "")))
                elif "text/plain" in data:
                    output += _words("".join(data["text/plain"]))
    return Counts(prose, output, code, figures, exercises)


def _table(text: str, mark: str) -> list[list[str]]:
    """The body rows of the markdown table right after ``mark``, as lists of stripped cells."""
    if mark not in text:
        raise ValueError(f"the guide has no table marked {mark!r}")
    lines = text.split(mark, 1)[1].strip().splitlines()
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[2:]  # after the header and its rule


def method(text: str | None = None) -> dict[str, float]:
    """The rates of the guide's method table: ``reading`` (words a minute), ``code`` (lines a
    minute), ``figure`` (minutes each) and ``most`` (the most minutes for one notebook).

    Raises:
        ValueError: if the table or one of its rates is missing.
    """
    text = GUIDE.read_text(encoding="utf-8") if text is None else text
    rows = {row[0]: row[1] for row in _table(text, METHOD_MARK)}
    found = {}
    for key, part, pattern in (("reading", "reading", r"at (\d+) words a minute"),
                               ("code", "code", r"at (\d+) lines a minute"),
                               ("figure", "figures", r"(\d+) minutes? each"),
                               ("most", "total", r"at most (\d+)")):
        match = re.search(pattern, rows.get(part, ""))
        if match is None:
            raise ValueError(f"the guide's method table gives no rate for {part!r} ({pattern})")
        found[key] = float(match.group(1))
    return found


def measured(text: str | None = None) -> dict[str, tuple[float, float]]:
    """Lesson number (``"00"``, ``"05a"``) -> (run-all seconds, exercise minutes), from the guide."""
    text = GUIDE.read_text(encoding="utf-8") if text is None else text
    return {row[0]: (float(row[1]), float(row[2])) for row in _table(text, LESSONS_MARK)}


def guide_totals(text: str | None = None) -> dict[str, int]:
    """Lesson number -> the total minutes the guide's table states for it."""
    text = GUIDE.read_text(encoding="utf-8") if text is None else text
    return {row[0]: int(row[3]) for row in _table(text, LESSONS_MARK)}


def minutes(c: Counts, rates: dict[str, float], run_seconds: float, exercise_minutes: float) -> Minutes:
    """A lesson's minutes by the method (see the module's docstring)."""
    parts = [(c.prose_words + c.output_words) / rates["reading"], c.code_lines / rates["code"],
             c.figures * rates["figure"], run_seconds / 60, exercise_minutes]
    rounded = [int(p + 0.5) for p in parts]
    rounded[3] = max(rounded[3], 1)  # a run-all takes a minute at least, to start and to look at
    return Minutes(*rounded, total=5 * int(sum(parts) / 5 + 0.5))


def time_line(m: Minutes, c: Counts) -> str:
    """The words of a lesson's "**Time:**" line, up to the full stop before "**GPU:**"."""
    figures = "" if not c.figures else f", {m.figures} for the figure{'s' if c.figures > 1 else ''}"
    exercises = NUMBER_WORDS.get(c.exercises, str(c.exercises))
    return (f"**Time:** about {m.total} minutes alone: {m.reading} of reading, {m.code} of code{figures}, "
            f"{m.running} to run all, {m.exercises} for the {exercises} exercise{'s' if c.exercises != 1 else ''}")


def stated(nb: dict) -> str | None:
    """The lesson's own "**Time:**" line up to its full stop, or None."""
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            match = TIME.search("".join(cell["source"]))
            if match:
                return match.group(0)[: -len(". **")]
    return None


def disagreement(line: str | None, m: Minutes, c: Counts) -> str | None:
    """Why a lesson's stated "**Time:**" line does not hold by the method, or None when it does.

    It holds when it states the method's total and each part within a minute of the method's
    (so that a few words more or less do not call for a new line), in :func:`time_line`'s words.
    """
    expected = time_line(m, c)
    if line is None:
        return f"no \"**Time:** about N minutes alone: ...\" line; the method gives: {expected}"
    shape = re.compile(re.sub(r"\d+", r"(\\d+)", re.escape(expected)))  # the same words, any numbers
    match = shape.fullmatch(line)
    if match is None:
        return f"states: {line}\nthe method's words: {expected}"
    numbers = [int(n) for n in match.groups()]
    wanted = [int(n) for n in re.findall(r"\d+", expected)]
    if numbers[0] != wanted[0] or any(abs(a - b) > 1 for a, b in zip(numbers[1:], wanted[1:])):
        return f"states: {line}\nthe method gives: {expected}"
    return None


def lesson_number(path: pathlib.Path) -> str:
    """``lessons/05a_model_states.ipynb`` -> ``"05a"``."""
    return path.stem.split("_", 1)[0]


def main() -> None:
    rates, inputs = method(), measured()
    print(f"{'lesson':<6} {'words':>6} {'code':>5} {'figures':>7} {'run-all':>8} {'exercises':>9}  minutes")
    total = 0
    for path in sorted(LESSONS.glob("[0-9][0-9]*_*.ipynb")):
        number = lesson_number(path)
        nb = json.loads(path.read_text(encoding="utf-8"))
        c = counts(nb)
        if number not in inputs:
            print(f"{number:<6} not in the guide's table")
            continue
        m = minutes(c, rates, *inputs[number])
        total += m.total
        print(f"{number:<6} {c.prose_words + c.output_words:>6,} {c.code_lines:>5} {c.figures:>7} "
              f"{inputs[number][0]:>7.0f}s {inputs[number][1]:>9.0f}  {m.total}")
        why = disagreement(stated(nb), m, c)
        if why:
            print("       " + why.replace("\n", "\n       "))
    print(f"all lessons: {total} minutes ({total // 60} h {total % 60:02d} min)")


if __name__ == "__main__":
    sys.exit(main())
