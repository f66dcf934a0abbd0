"""How fast the caching-allocator model replays a training step's allocation log.

Traces one steady-state ResNet18 step (batch 128, simulated; the trace's own
time is reported apart), then replays its allocation log through
:class:`helpers.allocator.CachingAllocator` with the default settings,
``expandable_segments:True``, ``max_split_size_mb:128`` and
``roundup_power2_divisions:4``, several times each,
and prints the median time of a replay with its figures.

Target: a replay of the ResNet18 batch-128 step takes well under a second on a
2-core machine.  Run with ``make benchmark`` or
``python benchmarks/allocator_replay.py [--repeats N] [--batch-size B]``.
"""

import argparse
import statistics
import time

from helpers import profile_step
from helpers.allocator import replay

MiB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="replays timed per setting")
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    start = time.perf_counter()
    profile = profile_step("resnet18", args.batch_size, device="simulated", steady_state=True)
    print(f"trace of resnet18 batch {args.batch_size} (two steps): {time.perf_counter() - start:.2f} s, "
          f"{len(profile.allocation_log)} log entries")
    for conf in ("", "expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"):
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            run = replay(profile.allocation_log, settings=conf)
            times.append(time.perf_counter() - start)
        print(f"replay, {str(run.settings):<28} median {statistics.median(times) * 1000:7.1f} ms "
              f"(max {max(times) * 1000:.1f} ms): peak allocated {run.peak_allocated / MiB:.1f} MiB, "
              f"peak reserved {run.peak_reserved / MiB:.1f} MiB, {len(run.allocator.trace)} allocator events")


if __name__ == "__main__":
    main()
