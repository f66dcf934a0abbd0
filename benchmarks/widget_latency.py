"""How fast the batch-size widget answers a slider move (simulated ResNet18).

Builds the widget (the first update traces, and is reported apart), then sets
the slider to random batch sizes from 1 to 1024 and times each change from
``slider.value = b`` to the moment the view's HTML has been replaced: the
``observe`` callback runs synchronously, so this is the Python side of one
update (the browser's drawing of the new HTML is not included).

Target: median at most 150 ms after the first update on a 2-core machine.

Then it changes controls that need new traces (AMP, the optimizer, the model:
``--retrace`` lists the models) and times two moments of each: when the view
first changes (it must say at once that it is tracing, so that the old figures
never look current) and when the new figures are shown.
Run with ``make benchmark`` or ``python benchmarks/widget_latency.py [--changes N] [--seed S]``.
"""

import argparse
import random
import statistics
import time

import torch

from helpers.teaching.widgets import MemoryExplorer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=100, help="slider moves to time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--retrace", default="gpt2,densenet121",
                        help="models to switch to after the slider moves (comma-separated)")
    args = parser.parse_args()
    start = time.perf_counter()
    widget = MemoryExplorer(model=args.model, device="simulated")
    first = time.perf_counter() - start
    rng = random.Random(args.seed)
    times, traced = [], 0
    for _ in range(args.changes):
        b = rng.randint(1, 1024)
        start = time.perf_counter()
        widget.batch_size.value = b
        times.append(time.perf_counter() - start)
        assert widget.result.batch_size == b and f'data-bytes="{widget.result.peak_bytes}"' in widget.view.value
        traced += widget.result.traced
    times.sort()
    p90 = times[int(0.9 * (len(times) - 1))]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(f"{args.model}, simulated: first update (traces batch 1, 1024 and 128) {first:.2f} s")
    print(f"{args.changes} slider moves to random batch sizes 1..1024: median {statistics.median(times) * 1e3:.2f} ms, "
          f"90th percentile {p90 * 1e3:.2f} ms, max {times[-1] * 1e3:.0f} ms; "
          f"{traced} of them traced directly, the rest interpolated")

    changes = [("amp", True), ("optimizer", "adam")] + [("model", m) for m in args.retrace.split(",") if m]
    for control, value in changes:
        shown = []
        start = time.perf_counter()
        handler = lambda change: shown.append((time.perf_counter() - start, change["new"]))  # noqa: E731
        widget.view.observe(handler, names="value")
        getattr(widget, control).value = value
        widget.view.unobserve(handler, names="value")
        first_seconds, first_view = shown[0]
        last_seconds, last_view = shown[-1]
        assert 'class="gm-busy"' in first_view and 'class="gm-explorer"' in last_view, (control, value)
        print(f"{control} -> {value}: 'tracing ...' shown after {first_seconds * 1e3:.1f} ms, "
              f"new figures after {last_seconds:.2f} s")


if __name__ == "__main__":
    main()
