"""bitsandbytes' 4-bit compute dtype (``compute_dtype``, ``bnb_4bit_compute_dtype``) and peft's DoRA on its 4-bit
weights, simulated, checked against bitsandbytes 0.50.2's and peft's sources (the model: SmolLM2-135M's config cut to
2 of its 30 layers, as in ``tests/test_bitsandbytes.py``)."""

from __future__ import annotations

import pytest
import torch
from peft.utils.integrations import dequantize_module_weight

from helpers.allocator.rules import round_up
from helpers.config import StepConfig
from helpers.engine.bnb_rules import BNB_FUSED_FP32_ROWS, BNB_FUSED_ROWS, bnb_gemm_4bit
from helpers.engine.meter import Meter
from helpers.profile import profile_step
from helpers.techniques import bnb
from test_finetune_engine import BF16, KV, LAYERS, MLP, SMOL, H, _bytes

N, K, M = MLP, H, 32  # a gate projection, 32 tokens


def _config(compute_dtype="bfloat16", double_quant=False):
    return StepConfig(model=SMOL, seq_len=8, lora_rank=8, quantization="nf4", double_quant=double_quant,
                      compute_dtype=compute_dtype)


def _layer_forward(compute_dtype: str) -> tuple[int, torch.dtype]:
    """One ``Linear4bit`` (N x K) forward of M bfloat16 rows under bfloat16 autocast: the bytes it holds at its peak
    above what was allocated before, and its output's dtype."""
    with Meter(device="simulated") as meter, bnb.dynamic_map(meter.device, simulated=True):
        layer = bnb.bnb_linear(torch.empty(N, K, device="meta"), None, _config(compute_dtype), meter.device)
        x = torch.empty(M, K, dtype=torch.bfloat16, device=meter.device)
        meter.reset_peak()
        before = meter.allocated()
        with meter.autocast(torch.bfloat16):
            out = layer(x)
        return meter.peak() - before, out.dtype


@pytest.mark.parametrize("compute_dtype, expected", [
    # the dequantized weight in bfloat16; the bfloat16 result
    ("bfloat16", round_up(2 * N * K) + round_up(2 * M * N)),
    # x cast to float16 (Linear4bit.forward), the weight dequantized in float16, autocast's bfloat16 copies of both
    # for F.linear inside the fallback, the bfloat16 result
    ("float16", 2 * round_up(2 * M * K) + 2 * round_up(2 * N * K) + round_up(2 * M * N)),
    # the same with x and the dequantized weight in float32: 4 bytes a weight, then autocast's 2
    ("float32", round_up(4 * M * K) + round_up(4 * N * K) + round_up(2 * M * K) + round_up(2 * N * K)
     + round_up(2 * M * N)),
])
def test_a_4_bit_layer_holds_one_weight_in_its_compute_dtype_and_what_autocast_casts(compute_dtype, expected):
    """``Linear4bit.forward`` casts x to ``compute_dtype``; ``gemm_4bit``'s CUDA fallback (``_dequant_linear_fallback``,
    ``backends/cuda/ops.py``) dequantizes the weight in x's dtype and calls ``F.linear``, which bfloat16 autocast
    reaches (the operator has no autocast kernel): in another dtype both are cast to bfloat16, and the result is
    bfloat16 whatever the compute dtype."""
    transient, dtype = _layer_forward(compute_dtype)
    assert transient == expected and dtype == torch.bfloat16


@pytest.mark.parametrize("rows", [BNB_FUSED_ROWS + 1, BNB_FUSED_FP32_ROWS - 1, BNB_FUSED_FP32_ROWS])
def test_float32_takes_the_fused_kernel_below_8_rows_on_every_card(rows):
    """``_gemm_4bit_use_custom_cuda``: float32 has no MMA kernel, and the fused (SIMT) kernel runs for fewer than 8
    rows on every card; 16-bit inputs take it for up to 4 rows on every card (above, by card: the fallback here)."""
    with Meter(device="simulated") as meter, bnb.dynamic_map(meter.device, simulated=True):
        layer = bnb.bnb_linear(torch.empty(N, K, device="meta"), None, _config(), meter.device)
        state = layer.weight.quant_state
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.empty(rows, K, dtype=dtype, device=meter.device)
            meter.reset_peak()
            before = meter.allocated()
            out = bnb_gemm_4bit(x, layer.weight, state.shape, state.absmax, 64, "nf4")
            fused = rows < 8 if dtype == torch.float32 else rows <= 4
            weight = 0 if fused else round_up(N * K * dtype.itemsize)
            assert meter.peak() - before == round_up(rows * N * dtype.itemsize) + weight
            del out, x


def test_a_step_computing_in_float32_peaks_at_a_4_bit_layer():
    """At 8 tokens the bfloat16 step peaks in the LM head's backward; in float32 at the last layer's down projection
    (N 576, K 1536), by what float32 adds there: x in float32 and the weight dequantized in float32, autocast's
    bfloat16 copies of both, the bfloat16 result. Nothing is kept for backward in another dtype."""
    options = dict(BF16, seq_len=8)
    bf16 = profile_step(SMOL, quantization="nf4", **options)
    fp32 = profile_step(SMOL, quantization="nf4", compute_dtype="float32", **options)
    down = f"base_model.model.model.layers.{LAYERS - 1}.mlp.down_proj"
    m, n, k = 8, H, MLP
    assert fp32.peak.module == down and bf16.peak.module == "base_model.model.lm_head"
    before = fp32.find(down, "pre").allocated_bytes
    assert before == bf16.find(down, "pre").allocated_bytes
    assert fp32.peak_allocated_bytes == before + (round_up(4 * m * k) + round_up(4 * n * k) + round_up(2 * m * k)
                                                  + round_up(2 * n * k) + round_up(2 * m * n))
    assert bf16.find(down, "fwd").peak_bytes == before + round_up(2 * n * k) + round_up(2 * m * n)
    assert fp32.peak_allocated_bytes - bf16.peak_allocated_bytes == 1_519_104  # 1.45 MiB more
    assert _bytes(fp32, "activations") == _bytes(bf16, "activations")


def test_compute_dtype_without_bitsandbytes_is_refused():
    with pytest.raises(ValueError) as error:
        StepConfig(model=SMOL, seq_len=32, lora_rank=8, quantization="torchao-nf4", compute_dtype="float32")
    assert str(error.value) == ("compute_dtype (bitsandbytes' bnb_4bit_compute_dtype) applies to quantization='nf4' "
                                "or quantization='fp4'")
    with pytest.raises(ValueError, match="^unknown compute_dtype 'float64'; use one of bfloat16, float16, float32$"):
        _config("float64")


@pytest.mark.parametrize("double_quant", [False, True])
def test_dora_s_norm_dequantizes_a_4_bit_weight_as_peft_does(double_quant):
    """``DoraLinearLayer.forward`` (``peft/tuners/lora/dora.py``) takes ``dequantize_module_weight(base_layer)``
    (``peft/utils/integrations.py``), which for a weight whose class is named ``Params4bit`` calls
    ``bnb.functional.dequantize_4bit(weight.data, weight.quant_state)``: one copy of the weight in the state's dtype,
    the bfloat16 it was quantized from (not the compute dtype), and with double quantization the float32 scales
    dequantized on the way (``dequantize_blockwise``), freed."""
    with Meter(device="simulated") as meter, bnb.dynamic_map(meter.device, simulated=True):
        layer = bnb.bnb_linear(torch.empty(N, K, device="meta"), None,
                                         _config("float32", double_quant), meter.device)
        assert type(layer.weight).__name__ == "Params4bit" and isinstance(layer.weight, torch.nn.Parameter)
        meter.reset_peak()
        before = meter.allocated()
        weight = dequantize_module_weight(layer)
        held, peak = meter.allocated() - before, meter.peak() - before
    assert tuple(weight.shape) == (N, K) and weight.dtype == torch.bfloat16
    assert held == round_up(2 * N * K)
    assert peak == held + (round_up(4 * N * K // 64) if double_quant else 0)


def test_dora_on_4_bit_weights_adds_its_magnitudes_and_a_dequantization_per_forward():
    """DoRA on bitsandbytes' NF4: the magnitudes (float32, ``out`` per adapted layer), made as a real run makes them
    from the dequantized weight after quantization (``DoraLinearLayer.update_layer``: the same shape and dtype, before
    the step), train with their AdamW states; each adapted layer's forward holds its weight dequantized again."""
    lora = profile_step(SMOL, quantization="nf4", **BF16)
    dora = profile_step(SMOL, quantization="nf4", dora=True, **BF16)
    magnitudes = LAYERS * (round_up(4 * H) + round_up(4 * KV))
    assert _bytes(dora, "parameters") == _bytes(lora, "parameters") + magnitudes
    assert _bytes(dora, "gradients") == _bytes(lora, "gradients") + magnitudes
    assert _bytes(dora, "optimizer_states") == _bytes(lora, "optimizer_states") + 2 * magnitudes
    q = "base_model.model.model.layers.1.self_attn.q_proj"
    dequantized = [s for s in dora.storages.values() if s.shape == (H, H) and s.dtype == torch.bfloat16]
    plain = [s for s in lora.storages.values() if s.shape == (H, H) and s.dtype == torch.bfloat16]
    assert len(dequantized) > len(plain)
    assert dora.peak_allocated_bytes > lora.peak_allocated_bytes
    assert dora.find(q, "fwd").peak_bytes - dora.find(q, "pre").allocated_bytes > \
        lora.find(q, "fwd").peak_bytes - lora.find(q, "pre").allocated_bytes + round_up(2 * H * H)


def test_a_checkpoint_s_recompute_runs_the_4_bit_product_under_autocast_again():
    """``torch.utils.checkpoint`` recomputes a layer in backward under the forward's autocast (``recompute_fn``), so
    in float32 the fallback there also casts the input and the dequantized weight to bfloat16 for ``F.linear``, and
    returns bfloat16 (``bnb_gemm_4bit``): the same transient as in the forward. (Found against the stub: Llama-3.1-8B,
    8 tokens, checkpointing, was 11.3 MiB over the simulation, which computed the recompute in float32.)"""
    step = profile_step(SMOL, quantization="nf4", compute_dtype="float32", checkpoint=1, **dict(BF16, seq_len=8))
    up = "base_model.model.model.layers.1.mlp.up_proj"
    m, n, k = 8, MLP, H
    forward, recompute = step.find(up, "fwd"), step.find(up, "recompute")
    held = [step.peak_during(e) - step.events[e.index - 1].allocated_bytes for e in (forward, recompute)]
    # x in float32, the weight dequantized in float32, autocast's bfloat16 copies of both, the bfloat16 result
    assert held[0] == round_up(4 * m * k) + round_up(4 * n * k) + round_up(2 * m * k) + round_up(2 * n * k) \
        + round_up(2 * m * n)
    assert held[1] == held[0]
    assert recompute.shape == forward.shape == (1, m, n)
