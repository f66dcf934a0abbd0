"""Where a lesson's run-all time goes: each code cell's kernel CPU seconds, and each step it asks and how the answer
was obtained.

Runs a copy of one lesson (a committed ``lessons/*.ipynb``) in a fresh kernel, as JupyterLab's "Run All" would, with a
first cell that watches the profile layer (nothing in the lesson changes; nothing is written back).  For each code
cell over ``--min`` CPU seconds, prints its seconds, then one line per step configuration it asked
(:func:`helpers.profile.obtain`, or a kept answer, :func:`helpers.profile.recall`): the batch size and sequence length,
the options that differ from :class:`helpers.config.StepConfig`'s defaults, how the answer came (``kept``: an answer
kept in the process; ``evaluated``: from a symbolic log; ``written``: from the 6- and 7-block traces; ``traced``: a
full concrete trace; ``depth_note`` says why), the concrete traces it made (:func:`helpers.traced.trace`: a written
step's two shallow traces count two), the symbolic traces it made (:func:`helpers.symbolic.trace`), and its CPU
seconds.

Run with ``PYTHONPATH=$PWD python benchmarks/lesson_cells.py [--evaluate] [--min SECONDS] NOTEBOOK`` from the
repository root (the kernel starts in ``lessons/`` and must import this checkout's helpers); ``--evaluate`` sets
``helpers.profile.EVALUATE = True`` first.  ``$GPU_MEMORY_SYMBOLIC_CACHE`` (an empty directory, or ``off``) decides
whether symbolic logs on disk are read: set it for a first run's figures.
"""

import json
import os
import pathlib
import sys
import tempfile

import nbformat
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: The first cell: wraps the profile layer's entry points to log, per cell, what each question cost.
WATCH_CELL = r'''
import dataclasses as _dc, json as _json, resource as _r
import helpers.profile as _P, helpers.traced as _T, helpers.evaluated as _E, helpers.symbolic as _S
from helpers.config import StepConfig as _SC
_P.EVALUATE = {evaluate}
_OUT = {out!r}
def _cpu():
    return sum(getattr(_r.getrusage(w), f) for w in (_r.RUSAGE_SELF, _r.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))
_COUNT = {{"concrete": 0, "symbolic": 0}}
_CELL = {{"calls": [], "start": 0.0}}
def _describe(config):
    opts = {{f.name: getattr(config, f.name) for f in _dc.fields(config)
            if f.name not in ("batch_size", "seq_len") and f.default is not _dc.MISSING
            and getattr(config, f.name) != f.default}}
    model = config.model if isinstance(config.model, str) else type(config.model).__name__
    return f"{{model}} B={{config.batch_size}} S={{config.seq_len}} " + " ".join(f"{{k}}={{v}}" for k, v in opts.items())
def _wrap(module, name, counter):
    orig = getattr(module, name)
    def wrapped(*a, **k):
        _COUNT[counter] += 1
        return orig(*a, **k)
    setattr(module, name, wrapped)
_wrap(_T, "trace", "concrete")  # a full trace, or one of a written step's two shallow ones
_symbolic_trace = _S.trace
def _symbolic_watched(*a, **k):  # its own shallow traces (with symbolic sizes) are not concrete ones
    n0 = _COUNT["concrete"]
    try:
        return _symbolic_trace(*a, **k)
    finally:
        _COUNT["symbolic"] += 1
        _COUNT["concrete"] = n0
_S.trace = _E.trace = _symbolic_watched  # evaluated.py imports it by name
_obtain, _recall = _P.obtain, _P.recall
def _obtain_watched(config, spec=None, evaluate=True):
    c0, n0, s0 = _cpu(), _COUNT["concrete"], _COUNT["symbolic"]
    prof = _obtain(config, spec, evaluate)
    note = prof.depth_note or ""
    how = "evaluated" if _E.was_evaluated(prof) else "written" if note.startswith("written") else "traced"
    _CELL["calls"].append(dict(config=_describe(config), how=how, note=note[:160], cpu=_cpu() - c0,
                               concrete=_COUNT["concrete"] - n0, symbolic=_COUNT["symbolic"] - s0,
                               evaluate=evaluate))
    return prof
def _recall_watched(key):
    got = _recall(key)
    if got is not None and isinstance(key, tuple) and key[0] == "profile_step":
        _CELL["calls"].append(dict(config=_describe(key[1]), how="kept", note="", cpu=0.0, concrete=0, symbolic=0))
    return got
_P.obtain, _P.recall = _obtain_watched, _recall_watched
def _pre(*_):
    _CELL["calls"], _CELL["start"] = [], _cpu()
def _post(result):
    with open(_OUT, "a") as f:
        f.write(_json.dumps(dict(cpu=_cpu() - _CELL["start"], calls=_CELL["calls"],
                                 source=result.info.raw_cell[:60])) + "\n")
get_ipython().events.register("pre_run_cell", _pre)
get_ipython().events.register("post_run_cell", _post)
'''


def main() -> None:
    args = sys.argv[1:]
    evaluate = "--evaluate" in args
    least = float(args[args.index("--min") + 1]) if "--min" in args else 1.0
    path = pathlib.Path([a for a in args if a.endswith(".ipynb")][0])
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cells.jsonl")
        nb = nbformat.read(path, as_version=4)
        nb.cells = [nbformat.v4.new_code_cell(WATCH_CELL.format(evaluate=evaluate, out=out))] + nb.cells
        NotebookClient(nb, timeout=1800, kernel_name="python3", allow_errors=True,
                       resources={"metadata": {"path": str(ROOT / "lessons")}}).execute()
        rows = [json.loads(line) for line in open(out)]
    code = [c for c in nb.cells[1:] if c.cell_type == "code"]
    errors = [i for i, c in enumerate(code, 1) for o in c.outputs if o.get("output_type") == "error"]
    print(f"{path.stem}: EVALUATE={evaluate}, kernel CPU {sum(r['cpu'] for r in rows):.1f} s"
          + (f"; errors in code cells {errors}" if errors else ""))
    for i, row in enumerate(rows[1:], 1):  # the watch cell's own row left out
        if row["cpu"] < least and not row["calls"]:
            continue
        print(f"code cell {i:>2}: {row['cpu']:6.1f} s  {row['source'].splitlines()[0] if row['source'] else ''}")
        for call in row["calls"]:
            print(f"      {call['how']:<9} {call['cpu']:5.1f} s  concrete {call['concrete']} symbolic "
                  f"{call['symbolic']}{'' if call.get('evaluate', True) else ' (concrete asked)'}  {call['config']}")
            if call["how"] == "traced" and call["note"]:
                print(f"                note: {call['note']}")


if __name__ == "__main__":
    main()
