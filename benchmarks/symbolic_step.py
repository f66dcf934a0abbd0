"""CPU seconds of a step traced once with symbolic batch and sequence (:mod:`helpers.symbolic`) and evaluated at new
points, beside today's concrete ``profile_step`` (issue 50's targets).

For each configuration of :data:`CONFIGURATIONS`: the concrete ``profile_step`` at the first point (traced, or written
from shallow traces by :mod:`helpers.depth`, as today), the symbolic trace once, and the evaluation at each further
point (:meth:`helpers.symbolic.SymbolicStep.evaluate`: the log evaluated and read into a profile), each checked to give
the concrete peak.  CPU time (``time.process_time``), which a loaded machine does not inflate as much as wall time.
The first configuration also pays the imports (transformers, peft, ``torch._dynamo``'s sources).  Targets (2-core
machine): a new (B, S) of an 8B LoRA or QLoRA steady step <= 0.2 s; the symbolic trace <= 2x its concrete trace.
Run ``python benchmarks/symbolic_step.py [--only NAME]``.
"""

import argparse
import time

_8B = "meta-llama/Llama-3.1-8B"
_STEADY = dict(amp=True, amp_dtype="bfloat16", lora_rank=16, lora_targets=("q_proj", "v_proj"), checkpoint=1,
               steady_state=True)
#: name -> (model, options, points (batch, sequence or None)).
CONFIGURATIONS = {
    "ResNet18 by batch": ("resnet18", {}, [(32, None), (8, None), (100, None), (7, None)]),
    "GPT-2, batch and sequence": ("gpt2", {}, [(4, 256), (2, 1000), (8, 128), (3, 77)]),
    "8B LoRA, steady state, checkpointing": (_8B, dict(_STEADY, param_dtype="bfloat16"),
                                             [(2, 2048), (2, 1000), (4, 4096), (3, 8192)]),
    "8B QLoRA (NF4), steady state, checkpointing": (_8B, dict(_STEADY, quantization="nf4", param_dtype="bfloat16"),
                                                    [(2, 2048), (2, 1000), (4, 4096), (3, 8192)]),
}
#: The targets (issue 50): seconds per new point of an 8B step; the symbolic trace over the concrete one.
MAX_POINT_S, MAX_TRACE_RATIO = 0.2, 2.0


def measure(name: str) -> dict:
    """Time one configuration: the concrete step, the symbolic trace, and the evaluation at each further point."""
    from helpers import symbolic
    from helpers.config import StepConfig
    from helpers.profile import forget_kept, profile_step, trace as trace_step

    model, options, points = CONFIGURATIONS[name]

    def config(b, s):
        return StepConfig(model=model, batch_size=b, device="simulated", **options,
                          **({} if s is None else {"seq_len": s}))

    forget_kept()
    cpu = time.process_time()
    concrete = profile_step(config(*points[0]))
    concrete_s = time.process_time() - cpu
    cpu = time.process_time()
    step = symbolic.trace(config(*points[0]), trace_step)
    trace_s = time.process_time() - cpu
    per_point = []
    for b, s in points[1:]:
        cpu = time.process_time()
        evaluated = step.evaluate(config(b, s))
        per_point.append(time.process_time() - cpu)
        forget_kept()
        assert evaluated.peak_allocated_bytes == profile_step(config(b, s)).peak_allocated_bytes, (b, s)
    assert step.evaluate(config(*points[0])).peak_allocated_bytes == concrete.peak_allocated_bytes
    return {"name": name, "concrete_s": concrete_s, "trace_s": trace_s, "point_s": max(per_point),
            "guards": step.guards_named(), "how": step.how}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(CONFIGURATIONS), help="one configuration")
    args = parser.parse_args()
    names = [args.only] if args.only else list(CONFIGURATIONS)
    print(f"{'configuration':<46} {'concrete s':>10} {'symbolic trace s':>16} {'ratio':>6} {'new point s':>11}")
    for name in names:
        r = measure(name)
        ratio = r["trace_s"] / r["concrete_s"]
        print(f"{name:<46} {r['concrete_s']:>10.2f} {r['trace_s']:>16.2f} {ratio:>6.1f} {r['point_s']:>11.3f}"
              f"  guards {r['guards'] or 'none'}")
    print(f"targets: a new point of an 8B step <= {MAX_POINT_S} s (today: its concrete step); "
          f"the symbolic trace <= {MAX_TRACE_RATIO}x the concrete one")


if __name__ == "__main__":
    main()
