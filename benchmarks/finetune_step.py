"""Wall time and peak RSS of one simulated fine-tuning step of a 7-65B model (issues 24 and 31).

Sequence 2048, batch 1, bfloat16 autocast, AdamW: one line per configuration
of :data:`CONFIGURATIONS` and way of tracing it, with the wall time of
``profile_step`` (the model built on ``meta``), its CPU time
(``time.process_time``: what a loaded machine does not inflate; the first step
of a process also imports transformers, peft and torchao, a few seconds), the
CPU time of the same step traced again in the same process ("again": what a
second configuration costs in a session, without the imports; the targets are
checked against it), and
the peak resident memory of the process that ran it (``resource.getrusage``,
``ru_maxrss``).  "written" is the default: the step written exactly from
traces of fewer blocks (:mod:`helpers.depth`); "full" traces every block
(``full_trace=True``); both must give the same peak.  Each runs in a fresh
process, so that its RSS is its own.  Targets (issue 31, 2-core machine):
8B LoRA or QLoRA steady step <= 1 s, 65B QLoRA <= 3 s, RSS < 3 GiB; the
simulation allocates nothing, so RSS is Python, torch and the model's meta
objects.  For the LoRA configurations it then times the same step bare
(:func:`bare`: ``FakeTensorMode`` alone, nothing counted) at full depth and at
:data:`helpers.depth.DEPTHS`: the floor of a full trace (target: at most 1.5
times it) and of a written one (the two shallow steps it must trace).  Run with
``make benchmark`` or ``python benchmarks/finetune_step.py [--only NAME --full]``.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

#: The step every configuration shares.
STEP = dict(seq_len=2048, batch_size=1, amp=True, amp_dtype="bfloat16",
            optimizer="adamw", device="simulated")

#: name -> the options it adds to :data:`STEP`.  A new method (QLoRA, 8-bit
#: AdamW, ...) is one more entry.
_8B, _65B = "meta-llama/Llama-3.1-8B", "huggyllama/llama-65b"
_LORA = dict(lora_rank=16, lora_targets=("q_proj", "v_proj"))
_QLORA = dict(_LORA, quantization="nf4", param_dtype="bfloat16")
_STEADY = dict(steady_state=True, checkpoint=1)
CONFIGURATIONS = {
    "8B LoRA r=16 on q_proj, v_proj": dict(model=_8B, **_LORA),
    "8B QLoRA r=16 on q_proj, v_proj (NF4, bf16)": dict(model=_8B, **_QLORA),
    "8B LoRA, steady state, checkpointing": dict(model=_8B, **_LORA, **_STEADY),
    "8B QLoRA, steady state, checkpointing": dict(model=_8B, **_QLORA, **_STEADY),
    "65B QLoRA, steady state, checkpointing": dict(model=_65B, **_QLORA, **_STEADY),
}

#: The targets, seconds by configuration (issue 31), and of any step's RSS.
MAX_SECONDS = {"65B QLoRA, steady state, checkpointing": 3.0}
DEFAULT_MAX_SECONDS = 1.0
MAX_RSS_BYTES = 3 * 2**30


def measure(name: str, full: bool) -> dict:
    """Run one configuration in this process (``full``: every block traced): seconds of ``profile_step``,
    peak RSS and peak allocated bytes."""
    start = time.perf_counter()
    from helpers import profile_step  # imports counted in the process's time, not the step's

    from helpers.profile import forget_kept

    imported, cpu = time.perf_counter(), time.process_time()
    profile = profile_step(**STEP, **CONFIGURATIONS[name], full_trace=full)
    done, cpu = time.perf_counter(), time.process_time() - cpu
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    forget_kept()  # the same step again, traced anew: what a second configuration in a session costs
    again = time.process_time()
    assert profile_step(**STEP, **CONFIGURATIONS[name], full_trace=full).peak_allocated_bytes == \
        profile.peak_allocated_bytes
    again = time.process_time() - again
    return {"name": name, "step_s": done - imported, "step_cpu_s": cpu, "again_cpu_s": again,
            "process_s": done - start, "rss_bytes": rss, "peak_allocated_bytes": profile.peak_allocated_bytes}


def bare(name: str, layers: int | None = None) -> float:
    """CPU seconds of the same step with nothing but PyTorch's ``FakeTensorMode``: the model (``layers`` blocks, by
    default all) built on ``meta`` by transformers, peft's LoRA on it, each parameter given a fake storage, then one
    step (two with ``steady_state``: forward under bfloat16 autocast, Hugging Face's own loss, backward, AdamW
    ``foreach``, ``zero_grad``), no memory counted: the floor the engine's tracing adds to (issue 31's "bare step").
    Timed the second time in the process, as "again" is.  LoRA only: bitsandbytes' 4-bit layers do not run on fake
    tensors without the engine's rules."""
    import copy

    import peft
    import torch
    import transformers
    from torch._subclasses.fake_tensor import FakeTensorMode

    from helpers.hf_config import load_config

    options = CONFIGURATIONS[name]
    config = copy.deepcopy(load_config(options["model"]))
    config.num_hidden_layers = layers or config.num_hidden_layers
    seq, steps = STEP["seq_len"], 2 if options.get("steady_state") else 1

    def once() -> float:
        start = time.process_time()
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
            model = peft.get_peft_model(model, peft.LoraConfig(r=options["lora_rank"],
                                                               target_modules=list(options["lora_targets"])))
        with FakeTensorMode():
            model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype))
            if options.get("checkpoint"):
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], foreach=True)
            ids = torch.randint(0, config.vocab_size, (STEP["batch_size"], seq))
            for _ in range(steps):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        return time.process_time() - start

    once()
    return once()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(CONFIGURATIONS), help="run this configuration here and print JSON")
    parser.add_argument("--full", action="store_true", help="with --only: trace every block")
    parser.add_argument("--bare", type=int, nargs="*", metavar="LAYERS",
                        help="with --only: time the bare FakeTensorMode step instead (of these depths; none: full)")
    args = parser.parse_args()
    if args.only and args.bare is not None:
        print(json.dumps(sum(bare(args.only, n) for n in args.bare) if args.bare else bare(args.only)))
        return
    if args.only:
        print(json.dumps(measure(args.only, args.full)))
        return
    import torch

    from helpers.depth import DEPTHS

    print(f"torch {torch.__version__}; seq {STEP['seq_len']}, batch {STEP['batch_size']}, {STEP['amp_dtype']} "
          f"autocast, {STEP['optimizer']}, simulated; load average {os.getloadavg()[0]:.1f} at the start")
    for name in CONFIGURATIONS:
        peaks, again = set(), {}
        for how in ("written", "full"):
            result = subprocess.run([sys.executable, __file__, "--only", name, *(["--full"] if how == "full" else [])],
                                    capture_output=True, text=True, check=True)
            r = json.loads(result.stdout.splitlines()[-1])
            peaks.add(r["peak_allocated_bytes"])
            again[how] = r["again_cpu_s"]
            target = MAX_SECONDS.get(name, DEFAULT_MAX_SECONDS)
            ok = how == "full" or (r["again_cpu_s"] <= target and r["rss_bytes"] < MAX_RSS_BYTES)
            print(f"{name}, {how}: step {r['step_s']:.1f} s wall, {r['step_cpu_s']:.1f} s CPU (its library imports "
                  f"included; process {r['process_s']:.1f} s), again {r['again_cpu_s']:.1f} s CPU, "
                  f"peak RSS {r['rss_bytes'] / 2**30:.2f} GiB, simulated peak "
                  f"allocated {r['peak_allocated_bytes'] / 2**30:.2f} GiB"
                  f"{'' if ok else f'  <- over the target ({target:.0f} s, {MAX_RSS_BYTES / 2**30:.0f} GiB)'}",
                  flush=True)
        if len(peaks) != 1:
            raise SystemExit(f"{name}: the written and the full step differ: {sorted(peaks)}")
        if "quantization" not in CONFIGURATIONS[name]:
            floors = {}
            for what, depths in (("full depth", []), ("the shallow depths", [str(n) for n in DEPTHS])):
                result = subprocess.run([sys.executable, __file__, "--only", name, "--bare", *depths],
                                        capture_output=True, text=True, check=True)
                floors[what] = json.loads(result.stdout.splitlines()[-1])
            print(f"{name}, bare FakeTensorMode step (again): {floors['full depth']:.1f} s CPU at full depth "
                  f"(the full trace takes {again['full'] / floors['full depth']:.2f}x it; target 1.5x), "
                  f"{floors['the shallow depths']:.1f} s CPU for depths {DEPTHS[0]} and {DEPTHS[1]} together "
                  f"(the floor of the written step, which takes {again['written']:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
