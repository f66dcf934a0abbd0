"""Seconds and peak memory of ``python -m helpers explain`` on real snapshots (issue 33).

Targets, on the 2-core machine: a ResNet18 step's snapshot explained in 2 s or less; an 8B LoRA step's (hundreds of
thousands of trace entries) in 30 s or less and under 3 GiB of process memory.  Each line runs the command in a fresh
process and prints its wall and CPU seconds, its peak resident memory (``ru_maxrss`` of the child) and the trace's
length:

* lesson 06's ResNet18 step (an H200, ``lessons/data/gpu_snapshot_resnet18_b128.pickle``);
* the Llama-3.1 8B LoRA step an H200 recorded (``lessons/data/h200_2026-11-26/llama_lora.pickle.gz``), alone and
  beside the same step simulated (``--model ...``: the simulation's seconds included);
* where the stub driver builds (``tests/cuda_stub/``), lesson 09's 8B QLoRA step run on real CUDA tensors there, whose
  snapshot holds about 210,000 trace entries (torchao quantizes each weight op by op), beside its simulation.

Run with ``python benchmarks/explain_snapshot.py`` (``make benchmark``).
"""

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cuda_stub import build  # noqa: E402

LORA = ["--model", "meta-llama/Llama-3.1-8B", "--seq-len", "2048", "--amp", "--amp-dtype", "bfloat16",
        "--param-dtype", "bfloat16", "--lora-rank", "16", "--optimizer", "adamw"]
QLORA = [*LORA, "--checkpoint", "1", "--quantization", "torchao-nf4"]
H200 = ROOT / "lessons" / "data" / "h200_2026-11-26" / "llama_lora.pickle.gz"
TARGETS = {"ResNet18": 2.0}  # seconds; every other line: 30 s
RSS = 3 * 2**30


#: The child: the command, then its own peak resident memory on stderr's last line.
CHILD = """
import atexit, resource, runpy, sys
atexit.register(lambda: print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr))
sys.argv = ["python -m helpers", *sys.argv[1:]]
runpy.run_module("helpers", run_name="__main__")
"""


def measure(name: str, path: Path, options: list[str]) -> None:
    """Run ``python -m helpers explain path options`` in a child process and print its line."""
    from helpers.snapshot import load_snapshot, pick_trace

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, "explain", str(path), *options], capture_output=True,
                          text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    rss = int(done.stderr.strip().splitlines()[-1]) * 1024
    entries = len(pick_trace(load_snapshot(path))[1])
    target = TARGETS.get(name.split()[0], 30.0)
    verdict = "ok" if done.returncode == 0 and wall <= target and rss < RSS else "MISSED"
    print(f"{name:<44} {entries:>9,} {wall:>7.1f} {cpu:>7.1f} {rss / 2**30:>7.2f}   <= {target:.0f} s  {verdict}"
          + ("" if done.returncode == 0 else f"  (exit {done.returncode}: {done.stderr.strip()[-300:]})"))


def main() -> None:
    print(f"{'snapshot':<44} {'entries':>9} {'wall s':>7} {'cpu s':>7} {'RSS GiB':>7}   target")
    measure("ResNet18 batch 128 (H200)", ROOT / "lessons" / "data" / "gpu_snapshot_resnet18_b128.pickle", [])
    measure("Llama-3.1 8B LoRA (H200)", H200, [])
    measure("Llama-3.1 8B LoRA (H200), beside its twin", H200, LORA)
    reason = build.why_not()
    if reason is not None:
        print(f"the QLoRA step on the stub not run: {reason}")
        return
    from test_real_step_on_stub import CASES, run_steps

    (case,) = [c for c in CASES if c["name"] == "llama8b_qlora_ckpt"]
    with tempfile.TemporaryDirectory() as tmp:
        stub = build.build(Path(tmp) / "stub")
        (Path(tmp) / "snapshots").mkdir()
        path = Path(run_steps(stub, Path(tmp) / "snapshots", [case])[case["name"]]["snapshot"])
        measure("Llama-3.1 8B QLoRA (stub), beside its twin", path, QLORA)


if __name__ == "__main__":
    main()
