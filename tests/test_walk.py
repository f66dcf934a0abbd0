"""The way from a widget's batch size to the counted bytes goes down, and enters each file at most twice (issue 49).

A widget changes the batch size of one step (:meth:`helpers.batch.PeakCurve.trace`, which the widgets call) and the
question travels down: the profile layer decides how it is answered (:mod:`helpers.profile`), asks the symbolic logs
(:mod:`helpers.evaluated`, :mod:`helpers.symbolic`), writes a deep step from shallow ones (:mod:`helpers.depth`) or
traces it (:mod:`helpers.traced`), and the step runner runs it (:mod:`helpers.step`).  This test records, with
``sys.settrace``, every call into a file of ``helpers/`` made from a function of another file (a file *entered*: a
call within a file does not leave it, and a return goes back to a caller that is still running), and holds two
things of the files of :data:`WAY`, question by question:

* none is entered more than twice (consecutive entries into one file counted once: between them the way went only
  through files outside :data:`WAY`);
* none is entered from one below it in :data:`WAY` (a function passed down to be called back, or a helper living a
  layer too high: what made the profile layer entered five times in the static walk before this test).

Left out of :data:`WAY`, by name: the engine (``engine/``, ``allocator/``) and the trackers (``shallow.py``,
``symbolic_sizes.py``), which PyTorch's dispatch enters at every operation: they are the counted bytes, the end of the
way; ``models/`` and ``techniques/``, the model's and the recipe's own code, entered by the step as it runs, layer by
layer; and the leaves that read a log or check an option and call nothing above them (``record.py``, ``written.py``,
``config.py``, ``units.py`` and the other foundations; ``symbolic_scope.py``, which says which configurations one
symbolic log answers).
"""

import sys
from collections import Counter
from pathlib import Path

import pytest

from helpers import profile
from helpers.batch import PeakCurve

HELPERS = str(Path(__file__).resolve().parent.parent / "helpers") + "/"
#: The files a question passes on its way down to the step runner, highest first (``.importlinter``'s order).
WAY = ("profile.py", "evaluated.py", "symbolic.py", "depth.py", "traced.py", "step.py")


def entries(call) -> list[tuple[str, str]]:
    """``(caller's file, callee's file)``, paths under ``helpers/``, of each call into a function of ``helpers/`` made
    from a function of another file while ``call()`` runs (the caller's file ``""`` when outside ``helpers/``)."""
    seen = []

    def entered(frame, event, arg):  # only "call" comes here: returning None traces no line of the frame
        if not frame.f_code.co_filename.startswith(HELPERS):
            return None
        callee = frame.f_code.co_filename[len(HELPERS):]
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        caller = caller[len(HELPERS):] if caller.startswith(HELPERS) else ""
        if caller != callee:
            seen.append((caller, callee))
        return None

    before = sys.gettrace()
    sys.settrace(entered)
    try:
        call()
    finally:
        sys.settrace(before)
    return seen


def way(seen: list[tuple[str, str]]) -> list[str]:
    """The files of :data:`WAY` entered, in order, consecutive entries into one file as one."""
    files = [callee for _, callee in seen if callee in WAY]
    return [f for k, f in enumerate(files) if k == 0 or files[k - 1] != f]


def ask(curve: PeakCurve, batch_size: int) -> tuple[list[str], str]:
    """The way of one question (:func:`way`), held to the module's two rules, and its profile's ``depth_note``."""
    answer = []
    seen = entries(lambda: answer.append(curve.trace(batch_size)))
    files = way(seen)
    assert max(Counter(files).values()) <= 2, files
    climbs = sorted({(a, b) for a, b in seen if a in WAY and b in WAY and WAY.index(a) > WAY.index(b)})
    assert not climbs, f"entered from below: {climbs}"
    return files, answer[0].depth_note or ""


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """Nothing kept (answers, symbolic logs), in memory or on disk (an empty directory of logs, as a first run has):
    every question travels its whole way."""
    monkeypatch.setenv("GPU_MEMORY_SYMBOLIC_CACHE", str(tmp_path / "symbolic"))
    profile.forget_kept()
    yield
    profile.forget_kept()


def test_a_written_step_then_one_evaluated_each_go_down(fresh):
    """GPT-2 medium (24 blocks) as a search asks it: batch 2 written from two shallow traces; batch 3 traced once with
    symbolic sizes (written from two shallow symbolic traces), checked against batch 2 and evaluated; batch 4
    evaluated from that log."""
    curve = PeakCurve("gpt2-medium", device="simulated", seq_len=16)
    with profile.many_points():
        written, note = ask(curve, 2)
        assert note == "written exactly from its steps with 6 and 7 blocks (helpers.depth)", note
        assert written == ["profile.py", "evaluated.py", "depth.py", "traced.py", "step.py", "traced.py", "step.py",
                           "evaluated.py"]
        traced, note = ask(curve, 3)
        assert note.endswith("traced once with symbolic sizes; evaluated at batch 3, sequence 16 (helpers.symbolic)")
        assert traced == ["profile.py", "evaluated.py", "symbolic.py", "depth.py", "traced.py", "step.py",
                          "traced.py", "step.py", "symbolic.py"]
        evaluated, note = ask(curve, 4)
        assert note.endswith("evaluated at batch 4, sequence 16 (helpers.symbolic)")
        assert evaluated == ["profile.py", "evaluated.py", "symbolic.py"]


def test_a_step_traced_in_full_then_evaluated_goes_down(fresh):
    """Lesson 01's MLP: batch 2 traced in full (not built of repeated blocks: not written), batch 3 traced
    symbolically, checked against batch 2 and evaluated, batch 4 evaluated."""
    curve = PeakCurve("mlp", device="simulated")
    with profile.many_points():
        traced, note = ask(curve, 2)
        assert note == "" and traced == ["profile.py", "evaluated.py", "depth.py", "step.py", "traced.py", "step.py",
                                         "evaluated.py"]
        symbolic, note = ask(curve, 3)
        assert note == "traced once with symbolic sizes; evaluated at batch 3 (helpers.symbolic)", note
        assert symbolic == ["profile.py", "evaluated.py", "symbolic.py", "depth.py", "traced.py", "step.py",
                            "symbolic.py"]
        assert ask(curve, 4)[0] == ["profile.py", "evaluated.py", "symbolic.py"]
