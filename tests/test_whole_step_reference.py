"""A whole training step through PyTorch's own CUDA dispatch: the reference for the simulation's CUDA rules (issue 23).

With the stub driver preloaded (``tests/cuda_stub/cuda_stub.c``, built once
per session by the ``cuda_stub`` fixture of ``tests/conftest.py``),
``torch.cuda.is_available()`` is True and a whole step on fake ``cuda``
tensors runs forward, loss, backward, ``optimizer.step()`` and ``zero_grad``
through CUDA's autocast lists, CUDA's kernel choices and the autograd engine
(``tests/cuda_stub/whole_step.py``, one subprocess for all the cases, counted
by the engine's core, :class:`helpers.engine.counting.StorageTracker`, alone).
The same step simulated (``profile_step(..., device="simulated")``: CPU
kernels under :func:`helpers.engine.cuda_rules.cuda_rules`) must reach the
same peak allocated within 0.1%, for the whole step and for forward and
backward alone (the peak up to ``loss.backward()`` returning): AdamW
(``foreach``, the second step, when its states exist), float16 AMP with a
``GradScaler`` or float32, attention "auto".  The models: ResNet18, Swin-T,
ConvNeXt-T, EfficientNet-B0, ViT-B/16, GPT-2, and a Hugging Face model
fine-tuned with LoRA (SmolLM2-135M from its shipped config, peft's adapters,
grouped-query attention; issue 24).

The card the stub reports is an H100 (sm 9.0).  On it PyTorch 2.14.1 runs
``scaled_dot_product_attention`` with cuDNN's kernel for float16 and the
memory-efficient kernel for float32 (asserted below).  The simulation's
"auto" runs flash for 16 bits: cuDNN's kernel keeps what CUDA's flash kernel
keeps (the output, a float32 log-sum-exp per row, two 8-byte random-number
scalars; each forced on the stub, ViT-B/16's two peaks are equal), so the
peaks agree but for those scalars (below).  Swin-T computes its attention itself (matmul, softmax) and
runs no SDPA kernel.

What remains, each well inside 0.1% (the simulation is under by a few KiB):

* batch norm on 16-bit inputs: CUDA keeps the saved mean and inverse
  standard deviation in float32 (``cudnn_batch_norm``, or
  ``native_batch_norm`` for bfloat16 and 2-D inputs), the CPU's kernel in the
  input's type; 512-byte rounding hides most of it (ResNet18 AMP: 7 KiB of
  269 MiB; EfficientNet-B0 AMP: 80 KiB of 417 MiB);
* flash and cuDNN attention keep two 8-byte random-number scalars on the
  device (512 B each after rounding), which the CPU's flash kernel does not
  create (1 KiB per attention layer: 12 KiB for ViT-B/16 and GPT-2 under AMP).
  :func:`helpers.engine.cuda_rules.attention_saved_bytes` and lesson 08's
  per-block formulas leave them out too.

By default a representative subset runs (CI time); ``WHOLE_STEP_REFERENCE=all``
runs all twelve cases, and ``benchmarks/whole_step_reference.py`` prints the
table of all twelve.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from cuda_stub.build import STUB, stub_env
from helpers import profile_step
from helpers.engine.cuda_rules import cuda_rules

ROOT = Path(__file__).resolve().parents[1]

#: model -> (batch, sequence length for token models): small, so that a step on
#: fake tensors takes a second or two, but large enough that the activations
#: reach above the optimizer step's peak (the whole step's peak is in backward).
MODELS = {"resnet18": (8, None), "swin_t": (8, None), "convnext_tiny": (8, None), "efficientnet_b0": (8, None),
          "vit_b_16": (16, None), "gpt2": (4, 256), "HuggingFaceTB/SmolLM2-135M": (2, 256)}
#: model -> LoRA rank (peft's default targets, base weights frozen): a Hugging Face model fine-tuned
#: with LoRA (issue 24), grouped-query attention included (9 query heads, 3 key/value heads).
LORA = {"HuggingFaceTB/SmolLM2-135M": 16}
PRECISIONS = ("amp", "fp32")
CASES = [(model, precision) for model in MODELS for precision in PRECISIONS]
#: The default run (CI time): a CNN with batch norm under AMP, and the attention models in each precision
#: (both SDPA kernels PyTorch picks; ViT-B/16 in float32 is the case that found the efficient kernel's rule).
DEFAULT = {("resnet18", "amp"), ("vit_b_16", "amp"), ("vit_b_16", "fp32"), ("gpt2", "fp32"),
           ("HuggingFaceTB/SmolLM2-135M", "amp")}
ALL = os.environ.get("WHOLE_STEP_REFERENCE", "") == "all"

#: The attention kernel PyTorch's dispatch picks on the stub's H100 (None: no SDPA call).
KERNEL = {"vit_b_16": {"amp": "cudnn", "fp32": "efficient"}, "gpt2": {"amp": "cudnn", "fp32": "efficient"},
          "HuggingFaceTB/SmolLM2-135M": {"amp": "cudnn", "fp32": "efficient"}}


def case_dict(model: str, precision: str) -> dict:
    batch, seq_len = MODELS[model]
    return {"model": model, "batch": batch, "seq_len": seq_len, "amp": precision == "amp",
            "lora_rank": LORA.get(model, 0)}


def run_reference(stub: Path, cases: list[dict]) -> list[dict]:
    """Each case's step through PyTorch's CUDA dispatch on the stub (see whole_step.py), in one subprocess."""
    env = stub_env(stub, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, str(STUB / "whole_step.py")], input=json.dumps(cases),
                          capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    assert done.returncode == 0, f"the step on the stub failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.splitlines()[-1])


def simulate(case: dict) -> tuple[int, int]:
    """The simulated step's peak allocated, and its peak up to the end of backward (bytes)."""
    extra = {"seq_len": case["seq_len"]} if case["seq_len"] else {}
    if case["lora_rank"]:
        extra["lora_rank"] = case["lora_rank"]
    profile = profile_step(case["model"], case["batch"], amp=case["amp"], optimizer="adamw", steady_state=True,
                           device="simulated", **extra)
    backward = next(e.peak_bytes for e in profile.events if e.phase == "backward")
    return profile.peak_allocated_bytes, backward


def selected() -> list:
    return [pytest.param(m, p, marks=() if ALL or (m, p) in DEFAULT else pytest.mark.skip(
        reason="not in the default subset: WHOLE_STEP_REFERENCE=all runs it")) for m, p in CASES]


@pytest.fixture(scope="module")
def reference(cuda_stub) -> dict:
    """The reference of every case this run selects, from one subprocess (one torch import)."""
    wanted = [c for c in CASES if ALL or c in DEFAULT]
    return dict(zip(wanted, run_reference(cuda_stub, [case_dict(*c) for c in wanted])))


@pytest.mark.parametrize("model, precision", selected())
def test_the_simulated_step_matches_pytorchs_cuda_dispatch(reference, model, precision):
    real = reference[(model, precision)]
    peak, backward = simulate(case_dict(model, precision))
    print(f"{model} {precision}: CUDA dispatch {real['peak']} B, simulated {peak} B, attention {real['attention']}")
    assert abs(peak - real["peak"]) <= 0.001 * real["peak"], (peak, real["peak"], real["categories"])
    assert abs(backward - real["backward_peak"]) <= 0.001 * real["backward_peak"], (backward, real["backward_peak"])
    # the step really ran through CUDA's dispatch: the kernel PyTorch picks for an H100
    assert real["attention"] == ([KERNEL[model][precision]] if model in KERNEL else [])
    # and the steady state was measured: parameters, optimizer states and the batch alive at the peak
    assert all(real["categories"][kind] > 0 for kind in ("parameters", "optimizer_states", "input"))
    if model in LORA:  # only the adapters train: their AdamW states are a sliver of the frozen weights
        assert real["categories"]["optimizer_states"] < 0.02 * real["categories"]["parameters"]


@pytest.mark.parametrize("kernel", ["efficient", "auto"])
def test_the_memory_efficient_kernel_keeps_cudas_output_layout_and_padding(kernel):
    """``cuda_rules``' efficient kernel is CUDA's: whatever the query's layout, the output is
    ``(batch, seq, heads, head_dim)`` in memory, and the log-sum-exp kept for backward is
    padded to 32 rows (197 -> 224), with the random-number seed and offset; "auto" takes it
    for float32 inputs, as PyTorch does on an H100.  (The CPU's
    flash kernel, run before, followed the query's layout and padded nothing: ViT-B/16's
    float32 step was 3.8% under PyTorch's CUDA dispatch.)"""
    with cuda_rules(kernel), FakeTensorMode():
        x = torch.randn(197, 2, 3, 768, requires_grad=True)  # a packed projection, sequence first (nn.MultiheadAttention)
        q, k, v = (x[:, :, i].view(197, 2, 12, 64).permute(1, 2, 0, 3) for i in range(3))
        out = F.scaled_dot_product_attention(q, k, v)
        node = out.grad_fn
        assert out.shape == (2, 12, 197, 64) and out.stride() == (197 * 768, 64, 768, 1)
        assert tuple(node._saved_log_sumexp.shape) == (2, 12, 224)
        assert node._saved_philox_seed.dtype == node._saved_philox_offset.dtype == torch.int64
        with torch.no_grad():  # no log-sum-exp to keep, the same layout
            assert F.scaled_dot_product_attention(q, k, v).stride() == out.stride()
