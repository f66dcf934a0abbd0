"""What the symbolic logs shipped with the package (``helpers/symbolic_logs/``, issue 50) save on a first run.

Prints the shipped directory's size, the largest log's size and the time to load it (:func:`helpers.symbolic_store.load`,
median of five, the file's decompression and unpickling), then, for each lesson given (default: 01 and 09), the
kernel's CPU seconds of a top-to-bottom run in a fresh kernel with an empty user directory (as on a fresh machine or
CI), without the shipped logs (``$GPU_MEMORY_SHIPPED_LOGS=off``: before them) and with them, and the code cells whose
compared text outputs differ between the two (``benchmarks/evaluate_lessons.py``'s comparison; ``helpers.profile``'s
``EVALUATE`` as committed, off).  Nothing is written back.

Measured on 2026-11-29 on the shared 2-core machine, loaded (load average 5.8-7.5 on 2 cores, other engineers' jobs
and this branch's ``make symbolic-logs`` running; compare CPU seconds), with 68 logs shipped so far (lessons 00-07):

    shipped: 68 logs; largest: meta-llama/Llama-3.1-8B (0.05 MiB), loaded in 0.018 s CPU (median of 5)
    lesson                                   cpu before  cpu after  outputs changed
    01_mini_batching                                89s        74s  none

Llama-3.1 8B LoRA r16 with checkpointing, steady state (lesson 09): its log is 0.91 MB as a pickle, 62 KB with
``lzma`` (``gzip``: 127 KB), decompressed in 7.2 ms (``gzip``: 2.2 ms): ``lzma`` pays.  Lesson 01's step questions are a small part of its run (its training loops on
real data are most of it).

Run with ``PYTHONPATH=$PWD python benchmarks/shipped_logs.py [NOTEBOOK ...]`` from the repository root.
"""

import os
import pathlib
import statistics
import sys
import tempfile
import time

from evaluate_lessons import ROOT, compared, run, texts

sys.path.insert(0, str(ROOT))
from helpers import log_names, symbolic_store  # noqa: E402
from helpers.models import resolve_model  # noqa: E402


def load_time() -> None:
    """The shipped directory's size, and the largest log's size and load time."""
    files = [f for f in log_names.SHIPPED.iterdir() if f.is_file()]
    print(f"shipped: {len(list(log_names.SHIPPED.glob('*.pickle')))} logs, "
          f"{sum(f.stat().st_size for f in files) / 2**20:.2f} MiB in all")
    largest = max(log_names.SHIPPED.glob("*.pickle"), key=lambda f: f.stat().st_size)
    config = symbolic_store.configuration(largest)
    spec = resolve_model(config.model, config.num_classes, config.name)
    os.environ[log_names.VARIABLE] = tempfile.mkdtemp()  # an empty user directory: the shipped file is read
    times = []
    for _ in range(5):
        start = time.process_time()
        steps = symbolic_store.load(config, spec)
        times.append(time.process_time() - start)
    assert steps, "the largest shipped log did not load"
    print(f"largest: {config.model} ({largest.stat().st_size / 2**20:.2f} MiB), loaded in "
          f"{statistics.median(times):.3f} s CPU (median of 5)")


def main() -> None:
    print("load average:", open("/proc/loadavg").read().strip(), flush=True)
    load_time()
    paths = [pathlib.Path(p) for p in sys.argv[1:]] or [ROOT / "lessons" / "01_mini_batching.ipynb",
                                                        ROOT / "lessons" / "09_fine_tuning_on_one_gpu.ipynb"]
    print(f"{'lesson':<40} {'cpu before':>10} {'cpu after':>10}  outputs changed", flush=True)
    for path in paths:
        with tempfile.TemporaryDirectory(prefix="symbolic-logs-") as before_logs, \
                tempfile.TemporaryDirectory(prefix="symbolic-logs-") as after_logs:
            os.environ[log_names.SHIPPED_VARIABLE] = "off"
            _, cpu_before, before = run(path, False, before_logs)
            os.environ[log_names.SHIPPED_VARIABLE] = "on"
            _, cpu_after, after = run(path, False, after_logs)
        differ = [i for i, (c, d) in enumerate(zip(before, after)) if compared(c) and texts(c) != texts(d)]
        print(f"{path.stem:<40} {cpu_before:>9.0f}s {cpu_after:>9.0f}s  "
              f"{', '.join(f'cell {i}' for i in differ) or 'none'}", flush=True)
        for i in differ:
            for a, b in zip(texts(before[i]), texts(after[i])):
                if a != b:
                    print(f"    cell {i} before: {a[:300]!r}\n    cell {i} after:  {b[:300]!r}", flush=True)
    print("load average:", open("/proc/loadavg").read().strip(), flush=True)


if __name__ == "__main__":
    main()
