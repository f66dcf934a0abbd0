"""Print ``tests/conftest.py``'s ``COSTS`` table from pytest runs' item durations.

Give it the output of one or more runs made with ``--durations=0`` (``make test-all PYTEST_ARGS=--durations=0``,
or ``make test`` and ``make test-slow`` likewise), as files or on standard input; it sums each test file's
``setup``, ``call`` and ``teardown`` seconds, apart for its tests in ``make test`` and in the slow groups
(``conftest.slow_reason``), and prints the files that cost 10 seconds or more, the heaviest first, as the table's
lines.  pytest leaves out items under 5 ms.  The lessons are not in the table: they weigh their run-all's seconds
(``tools/lesson_minutes.py``).

    python tools/test_costs.py make-test.log make-test-slow.log
"""

from __future__ import annotations

import fileinput
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: One line of pytest's ``--durations`` report: seconds, phase, node id.
LINE = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(setup|call|teardown)\s+(tests/\S+?\.py)(::\S.*)?$")


def costs(lines) -> dict[str, list[float]]:
    """``{test file: [seconds of its make-test items, seconds of its slow items]}`` from ``--durations`` lines."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import slow_reason

    table: dict[str, list[float]] = {}
    for line in lines:
        match = LINE.match(line)
        if match:
            seconds, _, file, rest = match.groups()
            group = slow_reason(file + (rest or "")) is not None
            table.setdefault(file, [0.0, 0.0])[group] += float(seconds)
    return table


def main() -> None:
    table = costs(fileinput.input())
    for file, (fast, slow) in sorted(table.items(), key=lambda kv: -sum(kv[1])):
        if fast + slow >= 10:
            print(f'    "{file}": ({round(fast)}, {round(slow)}),')


if __name__ == "__main__":
    main()
