"""Issue 24's engine, part 2: QLoRA (NF4 base weights), bfloat16 parameters, 8-bit AdamW, optimizer states
offloaded to host memory.

Model states are checked against formulas written out here by hand (from the libraries' source, cited
at each), on the small shipped model's config (SmolLM2-135M: hidden 576, 3 key/value heads of 64, MLP 1536, a
49152 x 576 embedding tied to the LM head) cut to 2 of its 30 decoder layers, at 32 tokens, simulated: every
formula counts per layer, and the layers are alike, so 2 check what 30 do at a fraction of the tracing (that a
step written from shallow traces equals its full trace is ``tests/test_depth.py``'s claim: SmolLM2's at 8 of its
layers, Llama-3.1 8B's at its 32).
"""

from __future__ import annotations

import pytest
import torch

from helpers.allocator.rules import round_up
from helpers.config import StepConfig
from helpers.hf_config import shipped_json
from helpers.models import hf
from helpers.profile import profile_step
from helpers.techniques import quantization, torchao_nf4
from helpers.techniques.lora import apply_lora

#: SmolLM2-135M's shipped config.json with 2 of its 30 decoder layers.
SMOL = {**shipped_json("HuggingFaceTB/SmolLM2-135M"), "num_hidden_layers": 2}
LAYERS, H, KV, MLP, VOCAB = 2, 576, 192, 1536, 49152
#: The RMSNorms' weights of H (two per layer and the final one): the parameters below 4,096 weights.
NORMS = 2 * LAYERS + 1
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
    """One step each of SmolLM2-135M (2 layers) at 32 tokens: LoRA r=8 on q and v in bf16, and the same in QLoRA."""
    return {"lora": profile_step(SMOL, **BF16), "qlora": profile_step(SMOL, quantization="torchao-nf4", **BF16)}


def test_nf4_bytes_formula_against_the_paper():
    """bits per weight: 4 + 8/64 + 16/16384 (torchao, bf16 factors) against the QLoRA paper's
    4 + 8/64 + 32/(64*256) (bitsandbytes, fp32 factors): 4.1260 and 4.1270."""
    n = 4096 * 4096
    parts = torchao_nf4.nf4_bytes(n)
    assert parts == {"codes": n // 2, "scales": n // 64, "scale_factors": 2 * n // 16384, "mean": 2, "code_book": 32}
    bits = 8 * (sum(parts.values()) - 34) / n
    assert bits == pytest.approx(4 + 8 / 64 + 16 / 16384) and round(bits, 4) == 4.1260
    assert round(4 + 8 / 64 + 32 / (64 * 256), 4) == 4.1270
    assert torchao_nf4.nf4_scaler_block(n) == 256 and torchao_nf4.nf4_scaler_block(KV * H) == 216  # 1728 blocks = 8 * 216


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


def test_bfloat16_adapters_halve_the_adapters_their_gradients_and_states(steps):
    """``lora_dtype="bfloat16"`` (the QLoRA paper's ``qlora.py --bf16``): the adapters, their gradients and AdamW's
    states (``torch.zeros_like(p)``) in 2 bytes instead of peft's float32."""
    half = profile_step(SMOL, quantization="torchao-nf4", lora_dtype="bfloat16", **BF16)
    full, half_adapters = _adapters(8, [(H, H), (KV, H)]), _adapters(8, [(H, H), (KV, H)], dtype_bytes=2)
    assert _bytes(half, "parameters") == _bytes(steps["qlora"], "parameters") - full + half_adapters
    assert _bytes(half, "gradients") == half_adapters and _bytes(half, "optimizer_states") == 2 * half_adapters


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


# -- bfloat16 parameters and 8-bit AdamW: full fine-tuning ----------------------------------------------------------

FULL = dict(batch_size=1, seq_len=32, device="simulated", optimizer="adamw")


def _shapes():
    """Every parameter's shape of SmolLM2-135M (2 layers; the tied embedding once), from its config, by hand."""
    layer = [(o, i) for o, i in LINEARS] + [(H,), (H,)]
    return [(VOCAB, H)] + LAYERS * layer + [(H,)]


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _adamw8bit_bytes(numel: int, param_bytes: int) -> int:
    """torchao AdamW8bit's two moments of one parameter, by hand (torchao 0.18.0 optim/adam.py _new_buffer,
    subclass_8bit.py OptimState8bit.zeros): >= 4096 weights and a multiple of 256: uint8 codes, a float32 scale
    per 256, a 256-entry float32 code book each; else two zeros_like(p)."""
    if numel >= 4096 and numel % 256 == 0:
        return 2 * (round_up(numel) + round_up(4 * numel // 256) + round_up(4 * 256))
    return 2 * round_up(param_bytes * numel)


@pytest.fixture(scope="module")
def full():
    """Full fine-tuning of SmolLM2-135M (2 layers), 32 tokens: AdamW in float32, AdamW in bf16, 8-bit AdamW in
    float32."""
    return {"fp32": profile_step(SMOL, **FULL), "bf16": profile_step(SMOL, param_dtype="bfloat16", **FULL),
            "8bit": profile_step(SMOL, **{**FULL, "optimizer": "adamw8bit"})}


def test_bf16_parameters_halve_the_parameters_gradients_and_adamw_states(full):
    fp32, bf16 = full["fp32"], full["bf16"]
    params = sum(round_up(4 * _numel(s)) for s in _shapes())
    assert _bytes(fp32, "parameters") == params + 2 * 512  # and the rotary embedding's two buffers
    assert _bytes(bf16, "parameters") == sum(round_up(2 * _numel(s)) for s in _shapes()) + 2 * 512
    assert _bytes(bf16, "gradients") == sum(round_up(2 * _numel(s)) for s in _shapes())
    # torch/optim/adamw.py (_init_group): exp_avg and exp_avg_sq are torch.zeros_like(p): bf16 like the parameter
    assert _bytes(bf16, "optimizer_states") == 2 * _bytes(bf16, "gradients")
    # half of float32's, but for each storage's rounding up to 512 bytes (the norms of 576)
    assert 0 <= _bytes(bf16, "optimizer_states") - _bytes(fp32, "optimizer_states") // 2 <= 2 * NORMS * 512
    assert {s.dtype for s in bf16.storages.values() if s.category == "optimizer_states"} == {torch.bfloat16}


def test_adamw8bit_keeps_about_two_bytes_of_state_per_parameter(full):
    eight = full["8bit"]
    expected = sum(_adamw8bit_bytes(_numel(s), 4) for s in _shapes())
    assert _bytes(eight, "optimizer_states") == expected
    big = sum(_numel(s) for s in _shapes() if _numel(s) >= 4096)
    assert 2 * big <= expected <= 2.04 * big + 2 * 4 * 4 * 576 * NORMS  # the norms of 576 stay float32
    assert _bytes(eight, "gradients") == _bytes(full["fp32"], "gradients")
    assert eight.peak_allocated_bytes < full["fp32"].peak_allocated_bytes - 0.7 * _bytes(full["fp32"], "optimizer_states")


@pytest.mark.parametrize("options, message", [
    ({"quantization": "nf4"}, "quantization= (QLoRA) quantizes the frozen base weights of LoRA: give lora_rank too"),
    ({"quantization": "int4", "lora_rank": 8}, "unknown quantization 'int4'; use one of none, nf4, fp4, torchao-nf4, int8"),
    ({"quantization": "torchao-nf4", "lora_rank": 8, "double_quant": True},
     "double_quant (bitsandbytes' double quantization) applies to quantization='nf4' or quantization='fp4' "
     "(torchao-nf4 always quantizes its scales)"),
    ({"param_dtype": "float64"}, "unknown param_dtype 'float64'; use one of float32, bfloat16, float16"),
    ({"param_dtype": "float16", "amp": True}, "float16 parameters have float16 gradients, which float16 AMP's "
                                              "GradScaler cannot unscale (torch/amp/grad_scaler.py): use "
                                              "amp_dtype='bfloat16', or no AMP"),
    ({"lora_dtype": "bfloat16"}, "lora_dtype applies to LoRA: give lora_rank too"),
    ({"lora_dtype": "float16", "lora_rank": 8}, "unknown lora_dtype 'float16'; use one of float32, bfloat16"),
    ({"optimizer": "adamw8bit", "fused": True},
     "fused applies to torch.optim's optimizers: the 8-bit AdamWs (torchao's, bitsandbytes') have no fused "
     "implementation"),
    ({"optimizer_offload": "yes"}, "optimizer_offload must be True or False, got 'yes'"),
])
def test_bad_options_are_refused_in_one_line(options, message):
    with pytest.raises(ValueError) as error:
        StepConfig(model=SMOL, seq_len=32, **options)
    assert str(error.value) == message


def test_the_new_options_are_in_the_json_and_in_the_widget_curve_key():
    config = StepConfig(model=SMOL, seq_len=32, batch_size=4, lora_rank=8, quantization="torchao-nf4",
                        param_dtype="bfloat16", optimizer="adamw8bit", optimizer_offload=True)
    d = config.to_dict()
    assert (d["quantization"], d["param_dtype"], d["optimizer"], d["optimizer_offload"]) == (
        "torchao-nf4", "bfloat16", "adamw8bit", True)
    key = config.curve_key()
    assert key.batch_size == 1 and key.quantization == "torchao-nf4" and key.optimizer_offload
    assert key != config.replace(quantization="none").curve_key()  # each option its own curve


# -- optimizer states in host memory ----------------------------------------------------------------------------------

def test_optimizer_offload_keeps_only_the_small_parameters_states_on_the_gpu():
    """torchao's CPUOffloadOptimizer (optim/cpu_offload.py): parameters of >= 4096 weights are stepped on
    the host, with their states there; the norms of 576 (5 in 2 layers) keep a GPU AdamW.  The gradients stay on the
    GPU until zero_grad (offload_gradients=False, its default).  With a vocabulary of 4,096: in 2 layers, SmolLM2's
    49,152 x 576 tied embedding would be most of the weights and move the offloaded step's peak into the backward of
    its LM head, above the fp32 step's less its states; at 4,096 the layers hold most of the weights, as 30 layers
    do."""
    model = {**SMOL, "vocab_size": 4096}
    fp32 = profile_step(model, **FULL)
    offloaded = profile_step(model, optimizer_offload=True, **FULL)
    small = [s for s in _shapes() if _numel(s) < 4096]
    assert len(small) == NORMS == 5
    states = 2 * sum(round_up(4 * _numel(s)) for s in small)
    assert _bytes(offloaded, "optimizer_states") == states == 25_600  # 2 states x 5 norms x 2,560 bytes
    assert _bytes(offloaded, "gradients") == _bytes(fp32, "gradients")
    assert _bytes(offloaded, "parameters") == _bytes(fp32, "parameters")  # no GPU copy of anything
    # the peak loses the states and the foreach step's temporary (one float32 per parameter: the host steps)
    assert offloaded.peak_allocated_bytes <= fp32.peak_allocated_bytes - _bytes(fp32, "optimizer_states")


@pytest.mark.parametrize("options, message", [
    ({"optimizer_offload": True, "step_in_backward": True},
     "optimizer_offload steps on the host after backward: it cannot step inside backward (step_in_backward)"),
    ({"optimizer_offload": True, "set_to_none": False},
     "optimizer_offload frees the GPU gradients at zero_grad (torchao's CPUOffloadOptimizer asserts set_to_none): "
     "leave set_to_none=True"),
])
def test_offload_combinations_refused_in_one_line(options, message):
    with pytest.raises(ValueError) as error:
        StepConfig(model=SMOL, seq_len=32, optimizer="adamw", **options)
    assert str(error.value) == message


def test_llama_8b_qlora_weights_by_formula():
    """Llama-3.1-8B, built on meta with LoRA r=16 on q, k, v, o: QLoRA quantizes the 7 linear layers of each of
    the 32 decoder layers (the untied LM head stays 16-bit), 6,979,321,856 weights in 0.5157 bytes each."""
    with torch.device("meta"):
        model = apply_lora(hf.build_causal_lm("meta-llama/Llama-3.1-8B"), 16, ("q_proj", "k_proj", "v_proj", "o_proj"))
    layers = quantization.nf4_linears(model)
    assert len(layers) == 32 * 7
    assert all(not name.endswith("lm_head") for name, m in model.named_modules() if any(m is l for *_, l in layers))
    h, kv, mlp = 4096, 1024, 14336
    weights = 32 * (2 * h * h + 2 * kv * h + 3 * h * mlp)
    assert sum(layer.weight.numel() for *_, layer in layers) == weights == 6_979_321_856
    nf4 = sum(sum(torchao_nf4.nf4_bytes(layer.weight.numel()).values()) for *_, layer in layers)
    assert nf4 == weights // 2 + weights // 64 + 2 * weights // 16384 + 224 * 34
    assert round(nf4 / weights, 4) == 0.5157  # 4.126 bits


# -- shortcuts that must change no byte ---------------------------------------------------------------
#: A tiny Llama of 2 layers: cheap to run op by op, and each layer's weight shapes met again (q and o, gate and up,
#: then the second layer's), so a remembered pattern is both kept and used.
TINY = {"model_type": "llama", "vocab_size": 96, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512}


def _same_step(a, b) -> None:
    """Two profiles of one step: the same log, storages, events and figures."""
    assert a.allocation_log == b.allocation_log
    assert (a.storages, a.events, a.categories, a.peak_allocated_bytes, a.peak_event, a.reserved_bytes) == (
        b.storages, b.events, b.categories, b.peak_allocated_bytes, b.peak_event, b.reserved_bytes)


@pytest.mark.parametrize("options", [
    dict(amp=True, amp_dtype="bfloat16", param_dtype="bfloat16", checkpoint=1, steady_state=True),
    dict(full_trace=True),
], ids=["bf16, checkpointing, steady state, written", "float32, traced in full"])
def test_a_remembered_dequantization_changes_no_byte(monkeypatch, options):
    """QLoRA's quantizations and dequantizations written from the first one's allocations equal torchao's operations
    run each time."""
    from helpers.profile import forget_kept

    step = dict(batch_size=1, seq_len=32, device="simulated", quantization="torchao-nf4", lora_rank=4, **options)
    remembered = profile_step(TINY, **step)
    for kept in (torchao_nf4.DEQUANTIZED, torchao_nf4.QUANTIZED):  # a pattern was kept, and used
        assert any(kept.values())
    assert all(p.wrapper is not None and len(p.kept) == 5 for p in torchao_nf4.QUANTIZED.values())  # NF4Tensor's
    forget_kept()
    monkeypatch.setattr(torchao_nf4, "remembered", lambda patterns, key, call: call())
    _same_step(remembered, profile_step(TINY, **step))


def test_a_remembered_call_is_written_again_or_run_again():
    """:func:`helpers.engine.patterns.remember`: a call that keeps only its result is written from its pattern (the
    same log entries, not run); one that keeps another storage is run every time."""
    from helpers.engine.meter import Meter, remembered

    runs, kept, patterns = [], [], {}

    def call(keep: bool):
        runs.append(keep)
        x = torch.ones(1000, device=meter.device)
        y = (x * 2).view(10, 100)  # a view of a new storage; x is freed on return unless kept
        if keep:
            kept.append(x)
        return y

    with Meter("simulated") as meter:
        for keep in (False, False, True, True):
            start = meter.log_length()
            out = remembered(patterns, keep, lambda: call(keep))
            assert out.shape == (10, 100) and out.dtype == torch.float32
            entries = [(e.kind, e.delta) for e in meter.allocation_log()[start:]]
            assert entries == [("alloc", 4096), ("alloc", 4096)] + ([] if keep else [("free", -4096)])
            del out
    assert runs == [False, True, True] and patterns[True] is False
    assert remembered({}, 0, lambda: torch.zeros(3)).tolist() == [0.0, 0.0, 0.0]  # outside a meter: run


def test_a_simulated_8bit_adamw_step_skips_only_arithmetic(monkeypatch):
    """torchao's ``single_param_adam`` skipped (its temporaries are not counted) changes no byte."""
    from helpers.engine import backends
    from helpers.profile import forget_kept

    step = dict(batch_size=1, seq_len=32, device="simulated", optimizer="adamw8bit", steady_state=True,
                full_trace=True)
    skipped = profile_step(TINY, **step)
    forget_kept()
    monkeypatch.setattr(backends, "_skipped", lambda fn, *args, **kwargs: fn)
    _same_step(skipped, profile_step(TINY, **step))
