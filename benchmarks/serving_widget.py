"""How fast lesson 10b's serving widget answers (issue 35): one control changed at a time.

Builds ``ServingFit()`` (Llama-3.1 8B in bfloat16 on the H100 80 GB, its whole context, vLLM's default budget; the
first update also imports transformers and traces the profile run, and is reported apart), then changes one control at
a time and times each change from setting the control to the moment the view shows the new account: the ``observe``
callbacks run synchronously, so this is the Python side of one update.  A change marked "traced" needs a new profile
run (the view says "updating" meanwhile); the others redo vLLM's arithmetic on a kept run.

Target (issue 35, 2-core machine): a change at most about 1 s of CPU once warm.  CPU and wall seconds are both
printed: a loaded machine inflates the wall time, not the CPU time.
Run with ``python benchmarks/serving_widget.py``.
"""

import time

import torch

from helpers.teaching.widgets import ServingFit

#: The target, CPU seconds (issue 35).
MAX_CHANGE_SECONDS = 1.0

#: One control changed at a time, in order: (label, control, value).
CHANGES = [
    ("gpu_memory_utilization 0.90 -> 0.95", "utilization", 0.95),
    ("max_model_len 131,072 -> 8,192", "max_model_len", 8192),
    ("kv_cache_dtype auto -> fp8", "kv_cache_dtype", "fp8"),
    ("max_num_batched_tokens default -> 16,384", "budget", "16,384"),
    ("max_num_batched_tokens 16,384 -> default", "budget", "vLLM's default"),
    ("weights bfloat16 -> float16", "weights", "float16"),
    ("weights float16 -> NF4 (bitsandbytes)", "weights", "NF4 (bitsandbytes, 4-bit)"),
    ("GPU H100 80 GB -> A100 80 GB", "gpu", "A100 80 GB"),
    ("GPU A100 80 GB -> H100 80 GB", "gpu", "H100 80 GB"),
    ("model -> Qwen/Qwen2.5-7B", "model", "Qwen/Qwen2.5-7B"),
    ("model -> huggyllama/llama-65b", "model", "huggyllama/llama-65b"),
    ("weights NF4 -> bfloat16 (65B: refused)", "weights", "bfloat16"),
    ("model -> meta-llama/Llama-3.1-8B", "model", "meta-llama/Llama-3.1-8B"),
]


def timed(action) -> tuple[float, float]:
    """CPU and wall seconds of ``action()``."""
    cpu, wall = time.process_time(), time.perf_counter()
    action()
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; ServingFit, simulated")
    holder = {}
    cpu, wall = timed(lambda: holder.setdefault("widget", ServingFit()))
    widget = holder["widget"]
    print(f"first update (imports and the first trace included): {cpu:.1f} s CPU, {wall:.1f} s wall")
    print(f"  {widget.message}")
    for label, control, value in CHANGES:
        views = []
        widget.view.observe(lambda change: views.append(change["new"]), names="value")
        cpu, wall = timed(lambda: setattr(getattr(widget, control), "value", value))
        widget.view.unobserve_all("value")
        traced = "traced" if any("gm-busy" in v for v in views) else "arithmetic"
        over = f"  <- over the target ({MAX_CHANGE_SECONDS:g} s)" if cpu > MAX_CHANGE_SECONDS else ""
        print(f"{label} ({traced}): {cpu:.3f} s CPU, {wall:.3f} s wall{over}")
        print(f"  {widget.message}")


if __name__ == "__main__":
    main()
