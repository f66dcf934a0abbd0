"""Training steps on real CUDA tensors on the stub driver, against the simulation and a real GPU (issue 33).

Runs the cases of ``tests/test_real_step_on_stub.py`` (GPT-2, SmolLM2-135M with LoRA, Llama-3.1 8B with LoRA
and QLoRA, lesson 02's dropout MLP) with both stubs preloaded (``tests/cuda_stub/real_step.py``, one
subprocess: PyTorch's CUDA operators and caching allocator, every kernel a no-op), simulates each with
``profile_step(..., device="simulated")``, and prints a table in bytes:

* the stub's tensors at the peak (each block's requested size rounded up to 512 bytes) less two cuBLAS
  workspaces, the simulated peak, and their difference;
* the stub's ``max_memory_allocated()`` less the workspaces (the tensors and the allocator's unsplit rests),
  and what a GPU recorded for the same step where ``make gpu-reference`` ran it
  (``lessons/data/gpu_reference.json``), and their difference;
* whether the snapshot's trace, replayed through the allocator model at the driver's addresses
  (``benchmarks/gpu_trace_replay.py``), ends at PyTorch's reserved memory.

Needs Linux, a C compiler and the pinned CUDA wheel (it says why not and exits otherwise).  Run with
``python benchmarks/real_step_on_stub.py``.
"""

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from cuda_stub import build  # noqa: E402
from gpu_trace_replay import replay_inputs  # noqa: E402
from helpers.allocator import replay  # noqa: E402
from test_real_step_on_stub import CASES, WORKSPACES, recorded_run, run_steps, simulate  # noqa: E402


def main() -> None:
    reason = build.why_not()
    if reason is not None:
        print(f"real steps on the stub not run: {reason}")
        return
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        stub = build.build(Path(tmp) / "stub")
        (Path(tmp) / "snapshots").mkdir()
        results = run_steps(stub, Path(tmp) / "snapshots")
        on_stub = time.perf_counter() - start
        print(f"{'step':<20} {'stub tensors':>15} {'simulated':>15} {'diff':>11}   "
              f"{'stub allocated':>15} {'a GPU':>15} {'diff':>11}   replay")
        for case in CASES:
            result = results[case["name"]]
            tensors, simulated = result["tensors_peak"] - WORKSPACES, simulate(case).peak_allocated_bytes
            allocated, run = result["max_allocated"] - WORKSPACES, recorded_run(case)
            gpu = f"{run['cuda_peak_bytes']:>15,} {allocated - run['cuda_peak_bytes']:>+11,}" if run else f"{'-':>27}"
            log, addresses, reserved = replay_inputs(Path(result["snapshot"]))
            same = replay(log, segment_addresses=addresses).peak_reserved == reserved == result["reserved"]
            print(f"{case['name']:<20} {tensors:>15,} {simulated:>15,} {tensors - simulated:>+11,}   "
                  f"{allocated:>15,} {gpu}   {'exact' if same else 'DIFFERS'}")
    print(f"steps on the stub: {on_stub:.0f} s; all: {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
