"""How fast lesson 09's fine-tuning widget answers (issue 31): a change of one control, and its two searches.

Builds ``FineTuneFit`` (Llama-3.1 8B, LoRA r16, 2,048 tokens, batch 1, checkpointing, simulated; the first
update also imports transformers and peft, and is reported apart), then changes one control at a time and
times each change from setting the control to the moment the view shows the new figures: the ``observe``
callbacks run synchronously, so this is the Python side of one update. Then, for LoRA and for QLoRA, it asks
"longest sequence" (at batch 1) and "largest batch" (at 2,048 tokens), at rank 16, and times each search, with the sizes
it judged (each new size is one simulated step, written from shallow traces).

Targets (issue 31, 2-core machine, quiet): a change at most 2 s, a search at most 5 s. Both CPU and wall
seconds are printed: a loaded machine inflates the wall time, not the CPU time.
Run with ``make benchmark`` or ``python benchmarks/finetune_widget.py``.
"""

import time

import torch

from helpers.teaching.widgets import FineTuneFit

#: The targets, seconds (issue 31).
MAX_CHANGE_SECONDS = 2.0
MAX_SEARCH_SECONDS = 5.0

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


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; FineTuneFit, simulated")
    holder = {}
    cpu, wall = timed(lambda: holder.setdefault("widget", FineTuneFit()))
    widget = holder["widget"]
    print(f"first update (imports included): {cpu:.1f} s CPU, {wall:.1f} s wall")
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
    for method in ("LoRA", "QLoRA (bitsandbytes' NF4 base)"):
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


if __name__ == "__main__":
    main()
