"""How long each lesson takes to run top to bottom ("Run All"), and what else its stated time covers.

For each committed lesson (``lessons/*.ipynb``, or the paths given), runs a
copy in a fresh kernel, as JupyterLab's "Run All" would, and prints the
seconds it took (wall clock) and the CPU seconds the kernel used, beside what
the instructor guide's method counts in it (``tools/lesson_minutes.py``):
words to read (prose, folded solutions left out, and printed outputs), lines of
code, figures, exercises, and the lesson's stated time.  Nothing is written
back: the committed notebooks are left as they are.

The run-all seconds are the machine's share of a learner's time; the guide
lists them per lesson for its method (``docs/instructor_guide.md``, "How the
minutes are stated").  On an idle machine the wall time is about the kernel's
CPU time (the simulation runs in one thread); on a shared one the wall time
grows with the load and the CPU time does not, so the CPU seconds are the
figure to copy from a busy machine.  Measured on this project's 2-core
machine unless said otherwise; a laptop is usually faster.

Run with ``python benchmarks/lesson_times.py [NOTEBOOK ...]``.
"""

import json
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from lesson_minutes import counts, stated  # noqa: E402  (tools/ is not a package)

#: A last cell, run after the lesson: the kernel's CPU seconds (its own and its children's).
CPU_CELL = ("import resource as _r\n"
            "print(sum(getattr(_r.getrusage(w), f) for w in (_r.RUSAGE_SELF, _r.RUSAGE_CHILDREN)"
            " for f in ('ru_utime', 'ru_stime')))")


def run_all(path: pathlib.Path) -> tuple[float, float]:
    """Wall seconds to run a copy of the notebook top to bottom in a fresh kernel (started in the
    lessons' folder), and the CPU seconds the kernel used for it."""
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(CPU_CELL))
    start = time.perf_counter()
    NotebookClient(nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    wall = time.perf_counter() - start
    cpu = float("".join(out.get("text", "") for out in nb.cells[-1].outputs))
    return wall, cpu


def main() -> None:
    paths = [pathlib.Path(p) for p in sys.argv[1:]] or sorted((ROOT / "lessons").glob("*.ipynb"))
    print(f"{'lesson':<40} {'words':>6} {'code':>5} {'figures':>7} {'exercises':>9} {'run-all':>8} {'cpu':>6}  stated")
    wall_total = cpu_total = 0.0
    for path in paths:
        nb = json.loads(path.read_text())
        c = counts(nb)
        wall, cpu = run_all(path)
        wall_total, cpu_total = wall_total + wall, cpu_total + cpu
        print(f"{path.stem:<40} {c.prose_words + c.output_words:>6,} {c.code_lines:>5} {c.figures:>7} "
              f"{c.exercises:>9} {wall:>7.0f}s {cpu:>5.0f}s  {(stated(nb) or '-')[10:60]}", flush=True)
    print(f"all {len(paths)} lessons run top to bottom in {wall_total / 60:.1f} minutes "
          f"({cpu_total / 60:.1f} minutes of the kernels' CPU time)")


if __name__ == "__main__":
    main()
