"""Whether symbolic evaluation (``helpers.profile.EVALUATE``, issue 50) can be on by default: each lesson run top to
bottom with it off and on, the seconds of each and the outputs that change.

For each lesson (``lessons/*.ipynb``, or the paths given), runs two copies in fresh kernels, as JupyterLab's "Run All"
would: one as committed (``EVALUATE`` off, its default), one with a first cell that sets
``helpers.profile.EVALUATE = True``.  Prints, per lesson, the wall seconds and the kernel's CPU seconds of each run
(on a shared machine the CPU seconds are the figure to compare) and the code cells whose text outputs (printed text,
``text/plain``, ``text/html``) differ between the two runs, the cell's number and first line, leaving out the cells
whose outputs strict nbval does not compare (``nbval-ignore-output``: timings).  Figures (PNG) are not
compared: their text outputs carry the numbers they draw.  Nothing is written back.

Measured on 2026-11-29 on this project's 2-core machine, shared with a CI run and another engineer's jobs (so the
wall seconds are inflated; compare the CPU seconds), the notebooks as committed on main (56f7ff4):

    lesson                                   wall off  wall on  cpu off   cpu on  outputs changed
    01_mini_batching                              80s     116s      53s      59s  none (the stream's split aside)
    08_transformers_and_sequence_length          124s     117s      50s      50s  none
    09_fine_tuning_on_one_gpu                    500s     865s     222s     322s  none

(01's row is from a first version of this script that compared the stream's messages one by one: its "changes" were
the same text split differently, and an ``nbval-ignore-output`` timing cell.)  The other lessons did not finish
before the session's end.  Lesson 09 takes 100 s more CPU with it on: its configurations are asked about at few
points each, so the first symbolic trace (about two concrete ones) is not repaid.  Lesson 09's widget
(``benchmarks/finetune_widget.py`` run after ``helpers.profile.EVALUATE = True``), kernel CPU seconds off -> on, equal
peaks: first update 12.0 -> 14.6, rank 16 -> 64 7.2 -> 8.9, sequence 2,048 -> 4,096 7.2 -> 26.9 (the symbolic
trace), checkpointing off 4.4 -> 6.0, LoRA -> QLoRA 7.3 -> 8.9.  So ``EVALUATE`` stays off by default.

Measured again on 2026-11-29 (branch symdefault: the symbolic trace at a configuration's third point, or its second
inside ``helpers.profile.many_points``, which the searches then used whatever ``EVALUATE`` says; logs on disk), the "on" run
cold (its own empty log directory, as on CI), the machine loaded (load average 6-10 on 2 cores):

    lesson                                   wall off  wall on  cpu off   cpu on  outputs changed
    09_fine_tuning_on_one_gpu                    673s     969s     244s     299s  none
    01_mini_batching                             339s     365s      93s     100s  none

So ``EVALUATE`` stays off by default: on a first run the symbolic traces are not repaid.  ``--warm`` adds a third
run on the logs the cold run left on disk (what a learner's second run of the lesson costs).

Run with ``PYTHONPATH=$PWD python benchmarks/evaluate_lessons.py [--warm] [NOTEBOOK ...]`` from the repository root (the
kernels start in ``lessons/``, wherever the notebooks given lie, and must import this checkout's helpers).
"""

import os
import pathlib
import sys
import tempfile
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: A last cell, run after the lesson: the kernel's CPU seconds (its own and its children's).
CPU_CELL = ("import resource as _r\n"
            "print(sum(getattr(_r.getrusage(w), f) for w in (_r.RUSAGE_SELF, _r.RUSAGE_CHILDREN)"
            " for f in ('ru_utime', 'ru_stime')))")
#: The first cell of each run: symbolic evaluation on or off (``{}``).
SET_CELL = "import helpers.profile as _profile\n_profile.EVALUATE = {}"


def texts(cell) -> list[str]:
    """A code cell's text outputs, in order (printed text joined per stream, errors, and each output's text/plain and
    text/html): how the kernel split the printed text into messages is left out, as nbval leaves it out."""
    out, streams = [], {}
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream":
            streams[o.get("name")] = streams.get(o.get("name"), "") + o.get("text", "")
        elif o.get("output_type") == "error":
            out.append(f"{o.get('ename')}: {o.get('evalue')}")
        else:
            data = o.get("data", {})
            out.extend(str(data[k]) for k in ("text/plain", "text/html") if k in data)
    return [streams[k] for k in sorted(streams)] + out


def compared(cell) -> bool:
    """Whether strict nbval compares the cell's outputs (not tagged ``nbval-ignore-output`` or ``nbval-skip``)."""
    return not {"nbval-ignore-output", "nbval-skip"} & set(cell.get("metadata", {}).get("tags", []))


def run(path: pathlib.Path, evaluate: bool, logs: str = "off") -> tuple[float, float, list]:
    """Wall and kernel CPU seconds of a top-to-bottom run of a copy of ``path`` with ``EVALUATE`` as given and the
    symbolic logs on disk in ``logs`` (``$GPU_MEMORY_SYMBOLIC_CACHE``: a directory, or ``off``), and the lesson's code
    cells after it (the added cells left out)."""
    nb = nbformat.read(path, as_version=4)
    first = [nbformat.v4.new_code_cell(SET_CELL.format(evaluate))]
    nb.cells = first + nb.cells + [nbformat.v4.new_code_cell(CPU_CELL)]
    os.environ["GPU_MEMORY_SYMBOLIC_CACHE"] = logs  # the kernel inherits it
    start = time.perf_counter()
    NotebookClient(nb, timeout=1800, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(ROOT / "lessons")}}).execute()
    wall = time.perf_counter() - start
    cpu = float("".join(o.get("text", "") for o in nb.cells[-1].outputs) or "nan")
    return wall, cpu, [c for c in nb.cells[len(first):-1] if c.cell_type == "code"]


def main() -> None:
    args = sys.argv[1:]
    warm = "--warm" in args
    paths = [pathlib.Path(p) for p in args if p != "--warm"] or sorted((ROOT / "lessons").glob("*.ipynb"))
    print(f"{'lesson':<40} {'wall off':>8} {'wall on':>8} {'cpu off':>8} {'cpu on':>8}"
          + (f" {'cpu warm':>8}" if warm else "") + "  outputs changed", flush=True)
    for path in paths:
        with tempfile.TemporaryDirectory(prefix="symbolic-logs-") as logs:
            wall_off, cpu_off, off = run(path, False)
            wall_on, cpu_on, on = run(path, True, logs)  # cold: no log on disk, as on a fresh CI machine
            runs = [on]
            if warm:  # again, the logs the cold run wrote on disk
                _, cpu_warm, again = run(path, True, logs)
                runs.append(again)
        differ = sorted({i for r in runs for i, (c, d) in enumerate(zip(off, r))
                         if compared(c) and texts(c) != texts(d)})
        changed = [f"cell {i} ({off[i].source.splitlines()[0][:40] if off[i].source else ''})" for i in differ]
        print(f"{path.stem:<40} {wall_off:>7.0f}s {wall_on:>7.0f}s {cpu_off:>7.0f}s {cpu_on:>7.0f}s"
              + (f" {cpu_warm:>7.0f}s" if warm else "") + f"  {'; '.join(changed) or 'none'}", flush=True)
        for i in differ:
            for r in runs:
                for a, b in zip(texts(off[i]), texts(r[i])):
                    if a != b:
                        print(f"    cell {i} off: {a[:400]!r}\n    cell {i} on:  {b[:400]!r}", flush=True)


if __name__ == "__main__":
    main()
