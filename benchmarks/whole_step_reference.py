"""The simulated training step against the same step through PyTorch's own CUDA dispatch (issue 23).

Runs all twelve cases of ``tests/test_whole_step_reference.py`` (ResNet18,
Swin-T, ConvNeXt-T, EfficientNet-B0, ViT-B/16 and GPT-2, each under float16
AMP and in float32; AdamW, the second step) on fake ``cuda`` tensors with the
stub driver preloaded (``tests/cuda_stub/whole_step.py``, one subprocess),
simulates each with ``profile_step(..., device="simulated")``, and prints a
table: the peak allocated through CUDA's dispatch and simulated, their
difference, the same for the peak up to the end of backward, and the
attention kernel PyTorch ran on the card the stub reports (an H100, sm 9.0).

Then, for ViT-B/16 under AMP, each SDPA kernel forced on the stub
(``torch.nn.attention.sdpa_kernel``) against the simulation's ``attention=``
of the same name (cuDNN's against the simulation's flash, which keeps the
same bytes).

Needs Linux, a C compiler and the pinned CUDA wheel (it says why not and
exits otherwise).  Run with ``python benchmarks/whole_step_reference.py``.
"""

import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cuda_stub import build  # noqa: E402
from helpers import profile_step  # noqa: E402
from test_whole_step_reference import CASES, case_dict, run_reference, simulate  # noqa: E402

MiB = 2**20


def pct(sim: int, ref: int) -> str:
    return f"{100 * (sim - ref) / ref:+.4f}%"


def main() -> None:
    reason = build.why_not()
    if reason is not None:
        print(f"whole-step reference not run: {reason}")
        return
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        stub = build.build(Path(tmp))
        cases = [case_dict(*c) for c in CASES]
        real = run_reference(stub, cases)
        reference_seconds = time.perf_counter() - start
        rows = []
        for (model, precision), case, ref in zip(CASES, cases, real):
            peak, backward = simulate(case)
            rows.append((model, precision, case, ref, peak, backward))
        forced = [{"model": "vit_b_16", "batch": 16, "seq_len": None, "amp": True, "kernel": k}
                  for k in ("flash", "efficient", "cudnn", "math")]
        forced_real = run_reference(stub, forced)
    total = time.perf_counter() - start

    print("Peak allocated of one training step (AdamW foreach, second step), PyTorch's CUDA dispatch on the stub "
          "driver (an H100) vs the simulation; MiB = 2**20 bytes")
    head = (f"{'model':16} {'precision':9} {'batch':>9} {'CUDA dispatch':>14} {'simulated':>12} {'diff':>9}  "
            f"{'fwd+bwd CUDA':>13} {'simulated':>12} {'diff':>9}  attention (PyTorch's pick)")
    print(head)
    print("-" * len(head))
    for model, precision, case, ref, peak, backward in rows:
        shape = f"{case['batch']}x{case['seq_len']}" if case["seq_len"] else str(case["batch"])
        print(f"{model:16} {precision:9} {shape:>9} {ref['peak'] / MiB:>10.2f} MiB {peak / MiB:>8.2f} MiB "
              f"{pct(peak, ref['peak']):>9}  {ref['backward_peak'] / MiB:>9.2f} MiB {backward / MiB:>8.2f} MiB "
              f"{pct(backward, ref['backward_peak']):>9}  {', '.join(ref['attention']) or '(no SDPA)'}")
    worst = max(abs(p - r["peak"]) / r["peak"] for _, _, _, r, p, _ in rows)
    print(f"Largest difference: {100 * worst:.4f}% (the tests allow 0.1%).")

    print("\nViT-B/16, batch 16, float16 AMP, each SDPA kernel forced on the stub vs the simulation's attention=")
    for case, ref in zip(forced, forced_real):
        kernel = case["kernel"]
        simulated_as = "flash" if kernel == "cudnn" else kernel
        sim = profile_step("vit_b_16", 16, amp=True, optimizer="adamw", steady_state=True, device="simulated",
                           attention=simulated_as).peak_allocated_bytes
        print(f"  {kernel:9} (ran {', '.join(ref['attention']):9}) CUDA dispatch {ref['peak'] / MiB:9.2f} MiB, "
              f"simulated ({simulated_as + ')':10} {sim / MiB:9.2f} MiB, {pct(sim, ref['peak'])}")
    print(f"\nTook {total:.0f} s ({reference_seconds:.0f} s for the twelve steps on the stub, in one subprocess, "
          f"with the stub's compilation).")
    print(json.dumps({"cases": [[m, p, r["peak"], s, r["backward_peak"], b, r["attention"]]
                                for m, p, _, r, s, b in rows]}))


if __name__ == "__main__":
    main()
