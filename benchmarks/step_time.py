"""Wall time of one simulated, traced ResNet18 training step at batch 128.

Prints the median of several runs (after one warm-up run).  Target: a median
at or under 0.5 s on a 2-core CPU.  Run with ``make benchmark`` or
``python benchmarks/step_time.py [--runs N] [--batch-size B]``.
"""

import argparse
import statistics
import time

import torch

from helpers import fmt_bytes, profile_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--model", default="resnet18")
    args = parser.parse_args()
    profile_step(args.model, args.batch_size, device="simulated")  # warm-up
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        profile = profile_step(args.model, args.batch_size, device="simulated")
        times.append(time.perf_counter() - start)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    print(f"{args.model}, batch {args.batch_size}, simulated traced step: {len(profile.events)} events, "
          f"peak {fmt_bytes(profile.peak_allocated_bytes)}")
    print(f"wall time over {args.runs} runs: median {statistics.median(times):.3f} s, "
          f"min {min(times):.3f} s, max {max(times):.3f} s")


if __name__ == "__main__":
    main()
