"""How fast lesson 09b's fine-tuning widget answers (issue 31): a change of one control, and its two searches.

Builds ``FineTuneFit`` (Llama-3.1 8B, LoRA r16, 2,048 tokens, batch 1, checkpointing, simulated; the first
update also imports transformers and peft, and is reported apart), then changes one control at a time and
times each change from setting the control to the moment the view shows the new figures: the ``observe``
callbacks run synchronously, so this is the Python side of one update. Then, for LoRA and for QLoRA, it asks
"longest sequence" (at batch 1) and "largest batch" (at 2,048 tokens), at rank 16, and times each search, with the sizes
it judged (each new size is one simulated step, written from shallow traces).

Targets (issue 31, 2-core machine, quiet): a change at most 2 s, a search at most 5 s. Both CPU and wall
seconds are printed: a loaded machine inflates the wall time, not the CPU time.

Then the same widget with each method's symbolic logs kept (issue 50, :func:`kept_log_rows`): made once inside
:func:`helpers.profile.many_points` (both regimes: batch 1, and batch 2 and up), then a batch change, a sequence change
and the two searches, each answered from the kept log where it holds and shown at once, then confirmed by its two
concrete traces (its answer and the size just beyond, :func:`helpers.batch.confirm_fit`) on a thread while the
widget takes new questions: "answer shown" and "confirmed" are timed apart.  Targets (issue 50): a change at most
0.3 s, a search (its answer shown) at most 1 s.  ``--kept-only``: only these rows.  With the machine's load
(``/proc/loadavg``) before and after, as the CPU seconds are what to compare.
Run with ``make benchmark`` or ``python benchmarks/finetune_widget.py [--kept-only]``.
"""

import argparse
import os
import time

import torch

from helpers.teaching.widgets import FineTuneFit

#: The targets, seconds (issue 31).
MAX_CHANGE_SECONDS = 2.0
MAX_SEARCH_SECONDS = 5.0
#: The targets with a symbolic log kept, seconds (issue 50).
MAX_KEPT_CHANGE_SECONDS = 0.3
MAX_KEPT_SEARCH_SECONDS = 1.0
METHODS = ("LoRA", "QLoRA (bitsandbytes' NF4 base)")

#: One control changed at a time, in order: (label, control, value).
CHANGES = [
    ("LoRA rank 16 -> 64", "lora_rank", 64),
    ("sequence 2,048 -> 4,096", "seq", 4096),
    ("checkpointing off", "checkpointing", False),
    ("checkpointing on", "checkpointing", True),
    ("method LoRA -> QLoRA (bitsandbytes' NF4 base)", "method", "QLoRA (bitsandbytes' NF4 base)"),
    ("batch 1 -> 2", "batch_box", 2),
    ("batch 2 -> 4", "batch_box", 4),
]


def timed(action) -> tuple[float, float]:
    """CPU and wall seconds of ``action()``."""
    cpu, wall = time.process_time(), time.perf_counter()
    action()
    return time.process_time() - cpu, time.perf_counter() - wall


def over(seconds: float, target: float) -> str:
    return f"  <- over the target ({target:g} s)" if seconds > target else ""


def _set_quietly(widget, **values) -> None:
    """Ask "does it fit?" (a search's control then shows the learner's value again), then set controls without an
    update each, then update once: a benchmark's setup, not a learner's change, so that no point a row will time is
    traced on the way (QLoRA's change rows once timed points traced while the controls were set one by one, from
    LoRA's last search: "0.00 s (concrete)")."""
    widget.question.value = "does it fit?"
    widget._quiet = True
    try:
        for control, value in values.items():
            getattr(widget, control).value = value
    finally:
        widget._quiet = False
    widget.update()


def kept_log_rows(widget) -> None:
    """Each method at rank 16 with its symbolic logs kept (the module's text): a batch change (2 -> 5 at 2,048 tokens),
    a sequence change (2,048 -> 3,000 at batch 5), the largest batch and the longest sequence.  A change: CPU and wall
    seconds, and whether its point was evaluated from the log.  A search: "answer shown" (setting the question, until
    the view shows the answer: the widget's own process, CPU and wall) and "confirmed" (until the background check's
    two concrete traces have agreed or replaced it, on the widget's thread: wall and CPU seconds from the question), with
    the sizes
    judged and how many of them were traced concretely (not evaluated)."""
    from helpers.profile import many_points

    judged = []
    asked = widget.estimate_at

    def counting(seq, batch_size, concrete=False):
        if not concrete:
            judged.append((seq, batch_size))
        return asked(seq, batch_size, concrete=concrete)

    widget.estimate_at = counting
    for method in METHODS:
        _set_quietly(widget, method=method, lora_rank=16, seq=2048, batch_box=2)
        # the log of batch 2 and up, then batch 1's (evaluated.AT_POINT_WHEN_MANY), each at a point not asked before:
        # (2,048, 1) was, by the first update, so the widget's curve answered it and batch 1 got no log, and LoRA's
        # "largest batch" traced (3,000, 1) concretely (the 7.9-11.6 s CPU it took beyond its evaluated sizes)
        with many_points():
            cpu, _ = timed(lambda: (widget.estimate_at(2048, 3), widget.estimate_at(2304, 1)))
        print(f"{method}, symbolic logs made (both regimes, each checked against a concrete answer): {cpu:.1f} s CPU")
        for label, control, value in (("batch 2 -> 5", "batch_box", 5), ("sequence 2,048 -> 3,000", "seq", 3000)):
            curve = widget._curves.get(widget.config(value if control == "seq" else None))
            before = list(curve.traces.values()) if curve else []
            cpu, wall = timed(lambda: setattr(getattr(widget, control), "value", value))
            profile = widget._curves[widget.config()].traces.get(widget.batch_box.value)
            how = ("not traced: interpolated" if profile is None else "asked before: kept" if any(
                   profile is p for p in before) else "evaluated" if profile.depth_note.endswith("(helpers.symbolic)") else "concrete")
            print(f"{method}, log kept, {label}: {cpu:.2f} s CPU, {wall:.2f} s wall ({how}), peak "
                  f"{widget.result.peak_bytes:,} B{over(cpu, MAX_KEPT_CHANGE_SECONDS)}")
        for question in ("largest batch", "longest sequence"):
            _set_quietly(widget, seq=3000, batch_box=5)
            judged.clear()
            cpu0, wall0 = time.process_time(), time.perf_counter()
            cpu, wall = timed(lambda: setattr(widget.question, "value", question))
            shown, status = widget.answer, widget.status
            sizes = sorted(set(judged))
            concrete = len([p for p in sizes if p not in widget._quick])
            status = widget.wait_for_check()
            checked_wall, checked_cpu = time.perf_counter() - wall0, time.process_time() - cpu0
            assert widget.largest is not None, (method, question, widget.message)
            print(f"{method}, log kept, {question}: answer shown in {cpu:.2f} s CPU, {wall:.2f} s wall "
                  f"({len(sizes)} sizes judged, {concrete} traced concretely){over(cpu, MAX_KEPT_SEARCH_SECONDS)}; "
                  f"{status or 'confirmed before it was shown'} after {checked_wall:.1f} s wall "
                  f"({checked_cpu:.1f} s CPU, the check's thread included): {shown}"
                  + ("" if widget.answer == shown else f" -> {widget.answer}")
                  + (f" [{widget.status_text()}]" if status in ("failed", "replaced") else ""))
    widget.estimate_at = asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kept-only", action="store_true", help="only the rows with symbolic logs kept")
    args = parser.parse_args()
    os.environ["GPU_MEMORY_SYMBOLIC_CACHE"] = "off"  # no log from disk: today's rows concrete, the kept ones made here
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; FineTuneFit, simulated; load "
          f"{_load()}")
    holder = {}
    cpu, wall = timed(lambda: holder.setdefault("widget", FineTuneFit()))
    widget = holder["widget"]
    print(f"first update (imports included): {cpu:.1f} s CPU, {wall:.1f} s wall")
    if args.kept_only:
        kept_log_rows(widget)
        return print(f"load {_load()}")
    judged = []
    original = widget.estimate_at

    def counting(seq, batch_size, **options):  # options: concrete=True, the search's confirming traces
        judged.append((seq, batch_size))
        return original(seq, batch_size, **options)

    widget.estimate_at = counting
    for label, control, value in CHANGES:
        cpu, wall = timed(lambda: setattr(getattr(widget, control), "value", value))
        assert widget.result is not None, (label, widget.message)
        print(f"{label}: {cpu:.2f} s CPU, {wall:.2f} s wall, peak {widget.result.peak_bytes:,} B"
              f"{over(cpu, MAX_CHANGE_SECONDS)}")
    for method in METHODS:
        for question in ("longest sequence", "largest batch"):
            widget.question.value = "does it fit?"
            widget.method.value, widget.lora_rank.value, widget.seq.value, widget.batch_box.value = method, 16, 2048, 1
            judged.clear()
            cpu, wall = timed(lambda: setattr(widget.question, "value", question))
            assert widget.largest is not None, (method, question, widget.message)
            sizes = sorted({seq if question == "longest sequence" else batch for seq, batch in judged})
            print(f"{method}, {question}: {widget.answer}; {cpu:.1f} s CPU, {wall:.1f} s wall, "
                  f"{len(sizes)} sizes judged ({', '.join(f'{n:,}' for n in sizes)})"
                  f"{over(cpu, MAX_SEARCH_SECONDS)}")
    widget.estimate_at = original
    kept_log_rows(widget)
    print(f"load {_load()}")


def _load() -> str:
    """The machine's load averages (1, 5, 15 minutes), from ``/proc/loadavg`` where there is one."""
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
