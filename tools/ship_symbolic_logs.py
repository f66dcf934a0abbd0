"""Make the symbolic logs shipped with the package (``helpers/symbolic_logs/``, issue 50): ``make symbolic-logs``.

Empties the shipped directory, then runs every lesson top to bottom, and after it the lesson's exercise solutions (as
nbval runs them: ``tests/lesson_runner.py``), each lesson in a fresh kernel whose first cell sets the rule of
:data:`helpers.evaluated.AT_POINT` to 1 (and :data:`helpers.profile.EVALUATE` on), so that every configuration asked
is traced symbolically at its first point and checked against that point's concrete answer in every field before it
is written (:func:`helpers.evaluated.remember`), with ``$GPU_MEMORY_SYMBOLIC_CACHE`` pointing at the shipped
directory.  The widgets' first configurations are among them: a lesson builds each widget, which answers its default
configuration.  A configuration that cannot be traced symbolically (:class:`helpers.symbolic.NotSymbolic`), or
whose evaluation differs from its concrete trace, is simply not shipped; its questions are answered concretely.

The plain forms written beside the Hugging Face configs' logs (:mod:`helpers.plain_log`, what the command line reads
without torch) are removed, not shipped: uncompressed JSON, about 1 MiB each (25 times what ``lzma`` makes of one),
they would be most of the directory.  The command line answers a shipped configuration from its pickle instead
(:func:`helpers.cli_cold.from_disk`: no transformers, peft or bitsandbytes imported).

Each file is named by what made it (:func:`helpers.log_names.key_text`): an edit of the code of the engine or of any
module at or below :mod:`helpers.symbolic` (not of a docstring, a comment or a blank line:
:func:`helpers.log_names.code_text`), or another version of torch, transformers, peft, bitsandbytes, torchvision or
sympy, leaves the shipped logs unused until this is run again (``tests/test_shipped_logs.py`` fails with a one-line message
until it is).  Prints, per lesson, its kernel's CPU seconds and the files written, then the directory's size.

Run with ``PYTHONPATH=$PWD python tools/ship_symbolic_logs.py [--jobs N] [NOTEBOOK ...]`` from the repository root
(the kernels start in ``lessons/`` and must import this checkout's helpers); notebooks given: only those are run, and
the directory is not emptied first.
"""

import argparse
import concurrent.futures
import os
import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from lesson_runner import solution_code  # noqa: E402 (the solutions as nbval runs them)

sys.path.insert(0, str(ROOT))
from helpers.log_names import SHIPPED  # noqa: E402

#: The first cell of each run: every configuration traced symbolically at its first point, checked, written.
RULE_CELL = ("import helpers.evaluated as _evaluated, helpers.profile as _profile\n"
             "_profile.EVALUATE = True\n"
             "_evaluated.AT_POINT = _evaluated.AT_POINT_WHEN_MANY = 1")
#: A last cell: the kernel's CPU seconds (its own and its children's).
CPU_CELL = ("import resource as _r\n"
            "print(sum(getattr(_r.getrusage(w), f) for w in (_r.RUSAGE_SELF, _r.RUSAGE_CHILDREN)"
            " for f in ('ru_utime', 'ru_stime')))")


def run(path: pathlib.Path) -> tuple[str, float, float, int]:
    """Run ``path``'s code cells, then its solutions, in a fresh kernel with the rule of :data:`RULE_CELL`; its
    name, wall and kernel CPU seconds, and how many cells raised (a lesson's cells that raise on purpose count)."""
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    solutions = [nbformat.v4.new_code_cell(s) for c in nb.cells for s in solution_code(c)]
    nb.cells = [nbformat.v4.new_code_cell(RULE_CELL)] + code + solutions + [nbformat.v4.new_code_cell(CPU_CELL)]
    start = time.perf_counter()
    NotebookClient(nb, timeout=3600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(ROOT / "lessons")}}).execute()
    wall = time.perf_counter() - start
    cpu = float("".join(o.get("text", "") for o in nb.cells[-1].outputs) or "nan")
    raised = sum(o.get("output_type") == "error" for c in nb.cells for o in c.get("outputs", []))
    return path.stem, wall, cpu, raised


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=pathlib.Path)
    parser.add_argument("--jobs", type=int, default=1, help="lessons run at once (default 1)")
    args = parser.parse_args()
    paths = args.notebooks or sorted((ROOT / "lessons").glob("[0-9][0-9]*_*.ipynb"))
    SHIPPED.mkdir(exist_ok=True)
    if not args.notebooks:
        for old in SHIPPED.iterdir():
            if old.suffix in (".pickle", ".json", ".part"):
                old.unlink()
    os.environ.update(GPU_MEMORY_SYMBOLIC_CACHE=str(SHIPPED), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    total = 0.0
    with concurrent.futures.ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for stem, wall, cpu, raised in pool.map(run, paths):
            total += cpu
            print(f"{stem:<40} wall {wall:6.0f} s  kernel CPU {cpu:6.0f} s  cells raised {raised}", flush=True)
    for part in SHIPPED.glob("*.part"):  # a write that a kernel's end cut short
        part.unlink()
    plain = list(SHIPPED.glob("*.json"))
    plain_size = sum(path.stat().st_size for path in plain)
    for path in plain:  # the plain forms are not shipped: the module's docstring says why
        path.unlink()
    files = sorted(SHIPPED.glob("*.pickle"))
    size = sum(f.stat().st_size for f in SHIPPED.iterdir() if f.is_file())
    print(f"kernel CPU in all: {total:.0f} s; {len(files)} configurations shipped, {size / 2**20:.1f} MiB in {SHIPPED} "
          f"({len(plain)} plain forms, {plain_size / 2**20:.1f} MiB, left out)")

if __name__ == "__main__":
    main()
