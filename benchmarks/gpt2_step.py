"""Wall time and host memory of simulated GPT-2 training steps.

Two configurations, each in a fresh Python process so that its peak resident
memory (``ru_maxrss``) is its own:

* GPT-2 124M (``gpt2``), batch 8, sequence 1024, AMP (float16), Adam, steady
  state (the traced step is the second, when Adam's states exist).
  Target: under 3 s.
* GPT-2 1.5B (``gpt2-xl``), batch 1, sequence 1024, AMP, Adam, steady state.
  Target: under 10 s, with the process's peak RSS under 2 GiB: the simulation
  allocates none of the 29 GiB it counts.

Each process imports torch, then times ``profile_step`` ``--runs`` times; the
first run includes the one-time costs of a process (building the model on the
meta device for the first time, registering the simulated CUDA rules).  Peak
RSS includes torch itself (about 0.4 GiB).  Run with ``make benchmark`` or
``python benchmarks/gpt2_step.py [--runs N]``.
"""

import argparse
import json
import subprocess
import sys

CONFIGS = {
    "gpt2 b8 s1024 AMP Adam steady": dict(model="gpt2", batch_size=8, seq_len=1024),
    "gpt2-xl b1 s1024 AMP Adam steady": dict(model="gpt2-xl", batch_size=1, seq_len=1024),
}
TARGETS_S = {"gpt2 b8 s1024 AMP Adam steady": 3.0, "gpt2-xl b1 s1024 AMP Adam steady": 10.0}

CHILD = """
import json, resource, statistics, sys, time
from helpers import profile_step
options, runs = json.loads(sys.argv[1]), int(sys.argv[2])
times = []
for _ in range(runs):
    start = time.perf_counter()
    p = profile_step(**options, amp=True, optimizer="adam", steady_state=True, device="simulated")
    times.append(time.perf_counter() - start)
print(json.dumps({"times": times, "peak": p.peak_allocated_bytes, "events": len(p.events),
                  "params": p.parameter_count, "states_per_param": p.model_state_bytes / p.parameter_count,
                  "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="profiles per process (the first is cold)")
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads")
    for label, options in CONFIGS.items():
        done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(options), str(args.runs)],
                              capture_output=True, text=True, check=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        times = r["times"]
        warm = sorted(times[1:]) or times
        print(f"{label}: {r['params']:,} parameters, peak {r['peak'] / 2**30:.2f} GiB "
              f"(model states at optimizer.step: {r['states_per_param']:.4f} bytes/parameter), {r['events']} events")
        print(f"  wall time: first {times[0]:.2f} s, then median {warm[len(warm) // 2]:.2f} s "
              f"(target under {TARGETS_S[label]:.0f} s); process peak RSS {r['rss'] / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
