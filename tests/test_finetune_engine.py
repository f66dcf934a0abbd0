"""Issue 24's engine, part 2: QLoRA (NF4 base weights), bfloat16 parameters, 8-bit AdamW, optimizer states
offloaded to host memory.

Model states are checked against formulas written out here by hand (from the libraries' source, cited
at each), on the small shipped model (SmolLM2-135M: 30 layers, hidden 576, 3 key/value heads of 64,
MLP 1536, a 49152 x 576 embedding tied to the LM head) at 32 tokens, simulated.
"""

from __future__ import annotations

import pytest
import torch

from helpers.allocator.rules import round_up
from helpers.config import StepConfig
from helpers.models import hf
from helpers.step import profile_step

SMOL = "HuggingFaceTB/SmolLM2-135M"
LAYERS, H, KV, MLP, VOCAB = 30, 576, 192, 1536, 49152
QV = ("q_proj", "v_proj")
#: (out, in) of each linear layer of one decoder layer: q, k, v, o, gate, up, down.
LINEARS = [(H, H), (KV, H), (KV, H), (H, H), (MLP, H), (MLP, H), (H, MLP)]
#: What QLoRA runs: bf16 parameters (the recipe loads with torch_dtype=bfloat16) and bf16 autocast.
BF16 = dict(batch_size=1, seq_len=32, device="simulated", optimizer="adamw", amp=True, amp_dtype="bfloat16",
            param_dtype="bfloat16", lora_rank=8, lora_targets=QV)


def _bytes(profile, category: str) -> int:
    """Bytes of every storage of ``category`` the step allocated (each once)."""
    return sum(s.nbytes for s in profile.storages.values() if s.category == category)


def _scaler_block(numel: int) -> int:
    """torchao's scaler block (256) when the blocks of 64 are a multiple of 256, else the largest divisor below."""
    blocks = numel // 64
    return 256 if blocks % 256 == 0 else max(d for d in range(1, 256) if blocks % d == 0)


def _nf4_storage_bytes(numel: int) -> int:
    """One NF4Tensor of a bf16 weight, by hand (torchao 0.18.0 nf4_tensor.py, NF4Tensor.from_tensor): the
    uint8 codes (2 per byte), one int8 scale per 64 weights, one bf16 factor per scaler block of those,
    the bf16 mean of the scales and the 16-entry bf16 code book; each storage rounded up to 512 bytes."""
    return (round_up(numel // 2) + round_up(numel // 64) + round_up(2 * (numel // 64) // _scaler_block(numel))
            + round_up(2) + round_up(16 * 2))


def _adapters(rank: int, shapes, dtype_bytes: int = 4) -> int:
    """LoRA's A (rank x in) and B (out x rank) of every adapted (out, in) layer, each a storage."""
    return LAYERS * sum(round_up(rank * n_in * dtype_bytes) + round_up(n_out * rank * dtype_bytes)
                        for n_out, n_in in shapes)


@pytest.fixture(scope="module")
def steps():
    """One step each of SmolLM2-135M at 32 tokens: LoRA r=8 on q and v in bf16, and the same in QLoRA."""
    return {"lora": profile_step(SMOL, **BF16), "qlora": profile_step(SMOL, quantization="nf4", **BF16)}


def test_nf4_bytes_formula_against_the_paper():
    """bits per weight: 4 + 8/64 + 16/16384 (torchao, bf16 factors) against the QLoRA paper's
    4 + 8/64 + 32/(64*256) (bitsandbytes, fp32 factors): 4.1260 and 4.1270."""
    n = 4096 * 4096
    parts = hf.nf4_bytes(n)
    assert parts == {"codes": n // 2, "scales": n // 64, "scale_factors": 2 * n // 16384, "mean": 2, "code_book": 32}
    bits = 8 * (sum(parts.values()) - 34) / n
    assert bits == pytest.approx(4 + 8 / 64 + 16 / 16384) and round(bits, 4) == 4.1260
    assert round(4 + 8 / 64 + 32 / (64 * 256), 4) == 4.1270
    assert hf.nf4_scaler_block(n) == 256 and hf.nf4_scaler_block(KV * H) == 216  # 1728 blocks = 8 * 216


def test_qlora_stores_every_frozen_linear_weight_in_nf4_and_the_rest_as_it_was(steps):
    qlora, lora = steps["qlora"], steps["lora"]
    nf4 = LAYERS * sum(_nf4_storage_bytes(o * i) for o, i in LINEARS)
    # the embedding (= the LM head), the norms, and the rotary embedding's two buffers of 32
    rest = round_up(VOCAB * H * 2) + LAYERS * 2 * round_up(H * 2) + round_up(H * 2) + 2 * 512
    adapters = _adapters(8, [(H, H), (KV, H)])  # float32: peft upcasts bf16 adapters (autocast_adapter_dtype)
    assert _bytes(qlora, "parameters") == nf4 + rest + adapters
    assert _bytes(lora, "parameters") == LAYERS * sum(round_up(o * i * 2) for o, i in LINEARS) + rest + adapters
    assert qlora.parameter_count == lora.parameter_count  # the same weights, fewer bits
    codes = [s for s in qlora.storages.values() if s.dtype == torch.uint8 and s.category == "parameters"]
    assert len(codes) == LAYERS * 7  # the LM head (tied to the embedding) is not quantized


def test_qlora_trains_the_adapters_only(steps):
    adapters = _adapters(8, [(H, H), (KV, H)])
    for profile in steps.values():
        assert _bytes(profile, "gradients") == adapters
        assert _bytes(profile, "optimizer_states") == 2 * adapters  # exp_avg, exp_avg_sq (float32, as the adapters)
        assert profile.params_without_grad == []


def test_autograd_keeps_no_dequantized_weight(steps):
    """linear_nf4 saves the NF4Tensor for backward, not its bf16 copy: no tensor saved for backward has a
    weight's shape.  (LoRA's bf16 weights themselves are parameters, so none there either; with float32
    weights under autocast, its bf16 weight copies are saved, which the first assertion checks can be seen.)"""
    weights = set(LINEARS)
    amp = profile_step(SMOL, batch_size=1, seq_len=32, device="simulated", optimizer="adamw", amp=True,
                       amp_dtype="bfloat16", lora_rank=8, lora_targets=QV)
    assert any(s.category == "activations" and s.shape in weights and s.dtype == torch.bfloat16
               for s in amp.storages.values())
    assert not any(s.category == "activations" and s.shape in weights for s in steps["qlora"].storages.values())


def test_qlora_peak_is_below_lora_by_the_weight_bytes_saved(steps):
    """The peak falls by the bytes the frozen weights save (2 bytes per weight in bf16 down to about
    0.516), less what dequantizing one weight in torchao's eager code holds for the length of its
    matmul (its int64 code indices and bf16 intermediates: about 14 bytes per weight, so the
    tolerance is 20 bytes per weight of the largest layer, 1536 x 576)."""
    lora, qlora = steps["lora"], steps["qlora"]
    dense = LAYERS * sum(round_up(o * i * 2) for o, i in LINEARS)
    nf4 = LAYERS * sum(_nf4_storage_bytes(o * i) for o, i in LINEARS)
    saved = dense - nf4
    drop = lora.peak_allocated_bytes - qlora.peak_allocated_bytes
    largest = max(o * i for o, i in LINEARS)
    # dequantizing one weight (NF4Tensor.get_original_weight): two int64 index tensors of numel/2 and
    # bf16 values, scaled values and their stack: at most 20 bytes per weight of the largest layer
    assert saved - 20 * largest <= drop <= saved
