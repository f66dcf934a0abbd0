"""Wall time and peak RSS of one simulated fine-tuning step of an 8B model (issue 24's targets).

Llama-3.1-8B (the shipped config), sequence 2048, batch 1, bfloat16 autocast,
AdamW: one line per configuration of :data:`CONFIGURATIONS` with the wall time
of ``profile_step`` (the model built on ``meta``, one traced step), its CPU
time (``time.process_time``: what a loaded machine does not inflate), and the peak
resident memory of the process that ran it (``resource.getrusage``,
``ru_maxrss``).  Each configuration runs in a fresh process, so that its RSS is
its own.  Targets: at most 15 s and under 3 GiB on the 2-core machine; the
simulation allocates nothing, so RSS is Python, torch and the model's meta
objects.  Run with ``make benchmark`` or ``python benchmarks/finetune_step.py
[--only NAME]``.
"""

import argparse
import json
import resource
import subprocess
import sys
import time

#: The step every configuration shares.
STEP = dict(model="meta-llama/Llama-3.1-8B", seq_len=2048, batch_size=1, amp=True, amp_dtype="bfloat16",
            optimizer="adamw", device="simulated")

#: name -> the options it adds to :data:`STEP`.  A new method (QLoRA, 8-bit
#: AdamW, ...) is one more entry.
CONFIGURATIONS = {
    "LoRA r=16 on q_proj, v_proj": dict(lora_rank=16, lora_targets=("q_proj", "v_proj")),
    "QLoRA r=16 on q_proj, v_proj (NF4, bf16)": dict(lora_rank=16, lora_targets=("q_proj", "v_proj"),
                                                     quantization="nf4", param_dtype="bfloat16"),
}

#: The issue's targets.
MAX_SECONDS = 15.0
MAX_RSS_BYTES = 3 * 2**30


def measure(name: str) -> dict:
    """Run one configuration in this process: seconds of ``profile_step``, peak RSS and peak allocated bytes."""
    start = time.perf_counter()
    from helpers import profile_step  # imports counted in the process's time, not the step's

    imported, cpu = time.perf_counter(), time.process_time()
    profile = profile_step(**STEP, **CONFIGURATIONS[name])
    done, cpu = time.perf_counter(), time.process_time() - cpu
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"name": name, "step_s": done - imported, "step_cpu_s": cpu, "process_s": done - start, "rss_bytes": rss,
            "peak_allocated_bytes": profile.peak_allocated_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(CONFIGURATIONS), help="run this configuration here and print JSON")
    args = parser.parse_args()
    if args.only:
        print(json.dumps(measure(args.only)))
        return
    import torch

    print(f"torch {torch.__version__}; {STEP['model']}, seq {STEP['seq_len']}, batch {STEP['batch_size']}, "
          f"{STEP['amp_dtype']} autocast, {STEP['optimizer']}, simulated; targets: <= {MAX_SECONDS:.0f} s, "
          f"< {MAX_RSS_BYTES / 2**30:.0f} GiB RSS")
    for name in CONFIGURATIONS:
        result = subprocess.run([sys.executable, __file__, "--only", name], capture_output=True, text=True,
                                check=True)
        r = json.loads(result.stdout.splitlines()[-1])
        ok = r["step_s"] <= MAX_SECONDS and r["rss_bytes"] < MAX_RSS_BYTES
        print(f"{name}: step {r['step_s']:.1f} s wall, {r['step_cpu_s']:.1f} s CPU (process {r['process_s']:.1f} s "
              f"with imports), peak RSS "
              f"{r['rss_bytes'] / 2**30:.2f} GiB, simulated peak allocated {r['peak_allocated_bytes'] / 2**30:.1f} GiB"
              f"{'' if ok else '  <- over target'}")


if __name__ == "__main__":
    main()
