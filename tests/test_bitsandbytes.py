"""QLoRA as its users run it: bitsandbytes' ``Linear4bit`` (NF4 and FP4, with and without double quantization) under
the simulation, checked against the byte formulas of bitsandbytes 0.50.2 (``functional.quantize_4bit``,
``backends/cuda/ops.py``) and against its CUDA kernels' allocations (``bnb_gemm_4bit``).

The model is the small shipped SmolLM2-135M's config (hidden 576, 3 key/value heads of 64, MLP 1536, a tied
49152 x 576 embedding) cut to 2 of its 30 layers, at 32 tokens, simulated, as in ``tests/test_finetune_engine.py``.
"""

from __future__ import annotations

import pytest
import torch
from peft.tuners.lora.bnb import Linear4bit as LoraLinear4bit
from peft.tuners.lora.bnb import Linear8bitLt as LoraLinear8bitLt

from helpers.allocator.rules import round_up
from helpers.batch import model_state_estimate
from helpers.engine.bnb_rules import BNB_FUSED_ROWS, bnb_gemm_4bit
from helpers.engine.meter import Meter
from helpers.config import StepConfig
from helpers.profile import profile_step
from helpers.step import StepRunner
from helpers.techniques import bnb
from helpers.techniques.optimizers import PAGED_MIN_NUMEL
from test_finetune_engine import BF16, LAYERS, LINEARS, MLP, SMOL, H, KV, VOCAB, _adapters, _bytes

FORMATS = [("nf4", False), ("nf4", True), ("fp4", False), ("fp4", True)]


def _bnb_storage_bytes(numel: int, double_quant: bool) -> int:
    """One weight in bitsandbytes' 4 bits, by hand: the packed codes (2 per byte), the 16-value float32 code book,
    and either a float32 scale per 64 weights, or (double quantization) a uint8 scale per 64 weights, a float32 scale
    per 256 of those, their float32 mean and the 256-value float32 dynamic code book; each storage rounded to 512."""
    blocks = numel // 64
    if not double_quant:
        return round_up(numel // 2) + round_up(4 * blocks) + round_up(64)
    return (round_up(numel // 2) + round_up(blocks) + round_up(64) + round_up(4 * -(-blocks // 256)) + round_up(4)
            + round_up(1024))


@pytest.fixture(scope="module")
def steps():
    """One QLoRA step of SmolLM2-135M at 32 tokens in each of bitsandbytes' formats, and one in torchao's NF4."""
    made = {f: profile_step(SMOL, quantization=f[0], double_quant=f[1], **BF16) for f in FORMATS}
    made["torchao"] = profile_step(SMOL, quantization="torchao-nf4", **BF16)
    return made


@pytest.mark.parametrize("quant_type, double_quant", FORMATS)
def test_a_layer_holds_what_the_formula_says(quant_type, double_quant):
    """The tensors ``quantize_4bit`` makes for one (out, in) weight, element for element, against ``bnb_bytes``."""
    config = type("C", (), {"quantization": quant_type, "double_quant": double_quant, "compute_dtype": "bfloat16"})
    with Meter(device="simulated") as meter, bnb.dynamic_map(meter.device, simulated=True):
        layer = bnb.bnb_linear(torch.empty(1536, 576, device="meta"), None, config, meter.device)
        parts = [layer.weight, *bnb.state_tensors(layer.weight)]
        held = sorted(t.numel() * t.element_size() for t in parts)
    assert held == sorted(bnb.bnb_bytes(1536 * 576, double_quant).values())
    assert bnb.weights(layer.weight) == 1536 * 576 and layer.weight.dtype == torch.uint8
    assert layer.weight.quant_state.quant_type == quant_type and layer.compute_dtype == torch.bfloat16


@pytest.mark.parametrize("quant_type, double_quant", FORMATS)
def test_qlora_stores_the_frozen_linear_weights_in_bitsandbytes_4_bits(steps, quant_type, double_quant):
    qlora = steps[(quant_type, double_quant)]
    quantized = LAYERS * sum(_bnb_storage_bytes(o * i, double_quant) for o, i in LINEARS)
    rest = round_up(VOCAB * H * 2) + LAYERS * 2 * round_up(H * 2) + round_up(H * 2) + 2 * 512
    adapters = _adapters(8, [(H, H), (KV, H)])
    assert _bytes(qlora, "parameters") == quantized + rest + adapters
    # double quantization's 256-value code book, made once by the first layer and kept in bitsandbytes' module cache
    code_books = [s for s in qlora.storages.values() if s.category == "other" and s.shape == (256,)]
    assert len(code_books) == double_quant
    assert qlora.parameter_count == steps["torchao"].parameter_count  # the same weights, counted as transformers does


def test_the_adapters_are_peft_s_4_bit_wrappers_and_train_alone(steps):
    """peft wraps a 4-bit base layer in ``lora.bnb.Linear4bit``; only the adapters get gradients and states."""
    adapters = _adapters(8, [(H, H), (KV, H)])
    for fmt in FORMATS:
        assert _bytes(steps[fmt], "gradients") == adapters
        assert _bytes(steps[fmt], "optimizer_states") == 2 * adapters
        assert steps[fmt].params_without_grad == []
    _assert_peft_wraps("nf4", LoraLinear4bit, "Linear4bit")


def _assert_peft_wraps(quantization: str, wrapper: type, base: str) -> None:
    """Every adapted layer (q and v of each of SmolLM2's layers) is peft's ``wrapper`` around bitsandbytes' ``base``."""
    runner = StepRunner(StepConfig(model=SMOL, quantization=quantization, **BF16))
    with runner.meter:
        wrappers = [m for m in runner.place().modules() if isinstance(m, wrapper)]
    assert len(wrappers) == LAYERS * 2 and all(type(w.base_layer).__name__ == base for w in wrappers)


@pytest.mark.parametrize("double_quant", [False, True])
@pytest.mark.parametrize("rows", [BNB_FUSED_ROWS, 2048])
def test_the_4_bit_product_allocates_what_the_cuda_kernel_does(rows, double_quant):
    """``gemm_4bit`` on CUDA: the fused kernel (up to 4 rows) allocates its result only; past that the fallback also
    holds one bfloat16 copy of the weight (and with double quantization the float32 scales twice) until it returns."""
    config = type("C", (), {"quantization": "nf4", "double_quant": double_quant, "compute_dtype": "bfloat16"})
    n, k = 1536, 576
    with Meter(device="simulated") as meter, bnb.dynamic_map(meter.device, simulated=True):
        layer = bnb.bnb_linear(torch.empty(n, k, device="meta"), None, config, meter.device)
        x = torch.empty(rows, k, dtype=torch.bfloat16, device=meter.device)
        state = layer.weight.quant_state
        meter.reset_peak()
        before = meter.allocated()
        if double_quant:
            out = bnb_gemm_4bit(x, layer.weight, state.shape, state.state2.absmax, 64, "nf4", None, state.absmax,
                                state.state2.code, state.offset)
        else:
            out = bnb_gemm_4bit(x, layer.weight, state.shape, state.absmax, 64, "nf4")
        transient = meter.peak() - before
    result = round_up(rows * n * 2)
    scales = 2 * round_up(4 * (n * k // 64)) if double_quant else 0
    assert tuple(out.shape) == (rows, n)
    assert transient == (result if rows <= BNB_FUSED_ROWS else result + round_up(n * k * 2) + scales)


def test_bitsandbytes_holds_less_than_torchao_at_a_dequantization(steps):
    """torchao's eager dequantization holds about 14 bytes per weight; bitsandbytes' kernel 2: at 32 tokens the
    step's peak is a dequantization, and bitsandbytes' is lower."""
    assert steps[("nf4", True)].peak_allocated_bytes < steps["torchao"].peak_allocated_bytes


def test_k_bit_preparation_makes_every_parameter_that_is_not_4_bit_float32(steps):
    """peft's ``prepare_model_for_kbit_training`` (``prepare_kbit=True``): every 16-bit parameter that is not 4-bit,
    the embedding (tied to the LM head) and the norms, becomes float32; the 4-bit weights and adapters are as before."""
    kbit = profile_step(SMOL, quantization="nf4", double_quant=True, prepare_kbit=True, **BF16)
    quantized = LAYERS * sum(_bnb_storage_bytes(o * i, True) for o, i in LINEARS)
    rest = round_up(VOCAB * H * 4) + LAYERS * 2 * round_up(H * 4) + round_up(H * 4) + 2 * 512
    assert _bytes(kbit, "parameters") == quantized + rest + _adapters(8, [(H, H), (KV, H)])
    assert kbit.peak_allocated_bytes > steps[("nf4", True)].peak_allocated_bytes


def test_trl_casts_the_embeddings_back_to_bfloat16_after_the_k_bit_preparation():
    """``bf16_embeddings=True`` (TRL's ``peft_module_casting_to_bf16``): the embedding (tied to the LM head) is
    bfloat16 again, the norms stay float32; nothing else changes."""
    kbit = profile_step(SMOL, quantization="nf4", double_quant=True, prepare_kbit=True, **BF16)
    cast = profile_step(SMOL, quantization="nf4", double_quant=True, prepare_kbit=True, bf16_embeddings=True, **BF16)
    assert _bytes(kbit, "parameters") - _bytes(cast, "parameters") == round_up(VOCAB * H * 4) - round_up(VOCAB * H * 2)
    with pytest.raises(ValueError, match="^bf16_embeddings casts back what prepare_kbit .* give prepare_kbit too$"):
        StepConfig(model=SMOL, seq_len=32, lora_rank=8, quantization="nf4", bf16_embeddings=True)


def test_trls_cast_comes_after_lora_and_reaches_the_heads_adapters():
    """TRL casts after ``get_peft_model``: an adapted LM head's LoRA weights have "lm_head" in their names, are
    float32 like every adapter, and become bfloat16 with the head; the other adapters stay float32."""
    tiny = {"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    runner = StepRunner(StepConfig(model=tiny, seq_len=16, lora_rank=4, lora_targets=("q_proj", "lm_head"),
                                   quantization="nf4", prepare_kbit=True, bf16_embeddings=True, param_dtype="bfloat16",
                                   device="simulated"))
    dtypes = {name: p.dtype for name, p in runner.model.named_parameters()}
    assert dtypes["base_model.model.lm_head.lora_A.default.weight"] == torch.bfloat16
    assert dtypes["base_model.model.lm_head.base_layer.weight"] == torch.bfloat16
    assert dtypes["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"] == torch.float32
    assert dtypes["base_model.model.model.norm.weight"] == torch.float32


def test_dora_adds_a_magnitude_per_adapted_layer_and_its_norms_activations():
    """peft's DoRA (``dora=True``) on SmolLM2's q and v: one magnitude vector of ``out`` per adapted layer (float32,
    with its gradient and AdamW's two states), and more kept for backward (the base weight's norm, the scaled output)."""
    lora = profile_step(SMOL, **dict(BF16, seq_len=256, steady_state=True))
    dora = profile_step(SMOL, dora=True, **dict(BF16, seq_len=256, steady_state=True))
    magnitudes = LAYERS * (round_up(4 * H) + round_up(4 * KV))
    assert _bytes(dora, "parameters") == _bytes(lora, "parameters") + magnitudes
    assert _bytes(dora, "optimizer_states") == _bytes(lora, "optimizer_states") + 2 * magnitudes
    assert dora.categories["activations"] > lora.categories["activations"]


@pytest.mark.parametrize("options, message", [
    ({"quantization": "torchao-nf4", "dora": True}, "dora= with quantization='torchao-nf4' fails in peft itself: its "
     "DoRA calls weight.dequantize(), which torchao's NF4Tensor does not take without arguments"),
    ({"quantization": "torchao-nf4", "prepare_kbit": True},
     "prepare_kbit (peft's prepare_model_for_kbit_training) applies to bitsandbytes' quantization='nf4', "
     "quantization='fp4' or quantization='int8'"),
    ({"quantization": "none", "double_quant": True}, "double_quant (bitsandbytes' double quantization) applies to "
     "quantization='nf4' or quantization='fp4' (torchao-nf4 always quantizes its scales)"),
])
def test_bitsandbytes_options_without_bitsandbytes_are_refused(options, message):
    with pytest.raises(ValueError) as error:
        StepConfig(model=SMOL, seq_len=32, lora_rank=8, **options)
    assert str(error.value) == message


def test_a_paged_adamw_keeps_large_states_in_unified_memory_and_small_ones_on_the_device():
    """bitsandbytes' ``PagedAdamW`` (32-bit): two float32 states per trainable parameter, paged (outside the allocated
    figures, :attr:`StepProfile.paged_bytes`) from 100,000 elements on, on the device below; rank 256 on q and v of
    SmolLM2 puts q's A and B and v's A (256 x 576 and 576 x 256) above it, v's B (192 x 256) below."""
    options = dict(BF16, lora_rank=256, optimizer="paged-adamw")
    paged = profile_step(SMOL, quantization="nf4", **options)
    big, small = 3 * 256 * 576, KV * 256
    assert big // 3 >= PAGED_MIN_NUMEL > small
    assert paged.paged_bytes == LAYERS * 2 * 4 * big
    assert _bytes(paged, "optimizer_states") == LAYERS * 2 * round_up(4 * small)
    adamw = profile_step(SMOL, quantization="nf4", **dict(options, optimizer="adamw"))
    assert adamw.paged_bytes == 0 and _bytes(adamw, "optimizer_states") == LAYERS * 2 * (
        3 * round_up(4 * big // 3) + round_up(4 * small))
    assert "paged optimizer states" in paged.summary()


def test_a_paged_optimizer_with_another_way_of_stepping_is_refused():
    with pytest.raises(ValueError) as error:
        StepConfig(model=SMOL, seq_len=32, lora_rank=8, optimizer="paged-adamw", fused=True)
    assert str(error.value) == ("a paged optimizer (bitsandbytes' PagedAdamW, PagedAdamW8bit) pages its own states "
                                "and steps after backward: not with fused, optimizer_offload or step_in_backward")


def test_a_paged_8_bit_adamw_keeps_codes_and_scales():
    """``PagedAdamW8bit``: from 4,096 elements, two uint8 states (paged from 100,000 elements on) with a float32
    scale per 256 values each (on the device), and the two 256-value code books once; smaller parameters keep
    32-bit states. Rank 256 on q and v of SmolLM2: q's A and B and v's A paged, v's B (49,152) on the device."""
    paged = profile_step(SMOL, quantization="nf4", **dict(BF16, lora_rank=256, optimizer="paged-adamw8bit"))
    big, small = 256 * 576, KV * 256
    assert paged.paged_bytes == LAYERS * 3 * 2 * big
    scales = 3 * round_up(4 * -(-big // 256)) + round_up(4 * -(-small // 256))
    assert _bytes(paged, "optimizer_states") == LAYERS * 2 * (round_up(small) + scales) + 2 * round_up(1024)


def test_bitsandbytes_8_bit_adamw_pages_nothing():
    """``AdamW8bit`` (Hugging Face's ``optim="adamw_bnb_8bit"``): the paged 8-bit AdamW's states, all on the device."""
    paged = profile_step(SMOL, quantization="nf4", **dict(BF16, lora_rank=256, optimizer="paged-adamw8bit"))
    bnb = profile_step(SMOL, quantization="nf4", **dict(BF16, lora_rank=256, optimizer="bnb-adamw8bit"))
    assert bnb.paged_bytes == 0 and paged.paged_bytes == LAYERS * 3 * 2 * 256 * 576
    assert _bytes(bnb, "optimizer_states") == _bytes(paged, "optimizer_states") + LAYERS * 3 * 2 * round_up(256 * 576)


def test_what_the_new_options_cannot_do_is_refused_in_one_line():
    with pytest.raises(ValueError, match="^optimizer='bnb-adamw8bit' .* not with optimizer_offload or step_in_backward$"):
        StepConfig(model=SMOL, seq_len=32, lora_rank=8, optimizer="bnb-adamw8bit", optimizer_offload=True)
    with pytest.raises(ValueError, match="^prepare_kbit .* applies to a Hugging Face transformers model, not ResNet$"):
        profile_step("resnet18", 2, image_size=32, lora_rank=4, lora_targets=("fc",), quantization="nf4",
                     prepare_kbit=True, device="simulated")
    with pytest.raises(ValueError, match="^'paged-adamw' keeps its large states in unified memory"):
        model_state_estimate(10**9, "paged-adamw")


def test_a_simulated_step_leaves_bitsandbytes_module_cache_as_it_was():
    """The code book a simulated double quantization makes is a fake tensor: it must not stay in bitsandbytes'
    module cache, where a later real quantization would meet it."""
    from bitsandbytes import functional

    before = dict(functional.name2qmap)
    profile_step(SMOL, quantization="nf4", double_quant=True, **BF16)
    assert functional.name2qmap == before
    codes, state = functional.quantize_4bit(torch.randn(64, 64), compress_statistics=True, quant_type="nf4")
    assert codes.shape == (2048, 1) and state.nested


# LLM.int8(): bitsandbytes' Linear8bitLt (load_in_8bit=True) as LoRA's frozen base, on bitsandbytes' CUDA path.

def _int8_storage_bytes(n_out: int, n_in: int) -> int:
    """One (out, in) weight in LLM.int8(), by hand: an int8 code per weight and a float32 scale per row, each storage
    rounded to 512."""
    return round_up(n_out * n_in) + round_up(4 * n_out)


@pytest.fixture(scope="module")
def int8_step():
    return profile_step(SMOL, quantization="int8", **BF16)


def test_an_int8_layer_holds_what_the_formula_says():
    """``Int8Params._quantize``: the weight arrives in float16, ``int8_vectorwise_quant`` makes the float32 row scales
    and then the int8 codes, and the float16 copy is freed; the layer is ``Linear8bitLt(has_fp16_weights=False,
    threshold=6.0)`` with its codes and scales on the weight, as after ``.cuda()``."""
    import bitsandbytes  # noqa: F401  (imported before the meter, as peft imports it before a step)

    n, k = 1536, 576
    weight = torch.empty(n, k, dtype=torch.bfloat16, device="meta")
    with Meter(device="simulated") as meter:
        start = meter.log_length()
        layer = bnb.int8_linear(weight, None, meter.device)
        log = [(e.kind, e.delta) for e in meter.allocation_log()[start:]]
        held = sorted(t.numel() * t.element_size() for t in [layer.weight, *bnb.state_tensors(layer.weight)])
    assert held == sorted(bnb.int8_bytes(n, k).values())
    assert log == [("alloc", round_up(2 * n * k)), ("alloc", round_up(4 * n)), ("alloc", round_up(n * k)),
                   ("free", -round_up(2 * n * k))]
    assert layer.weight.dtype == torch.int8 and layer.weight.SCB.dtype == torch.float32
    assert type(layer).__name__ == "Linear8bitLt" and layer.state.threshold == 6.0
    assert not layer.state.has_fp16_weights and layer.state.CB is None  # moved there by the first forward
    assert bnb.weights(layer.weight) == n * k


@pytest.mark.parametrize("rows", [32, 2048])
def test_the_int8_product_allocates_what_bitsandbytes_cuda_path_does(rows):
    """``MatMul8bitLt`` (``autograd/_functions.py``) on CUDA, with a bfloat16 input of M rows and K features and an
    (N, K) weight, no outlier column. Forward: the input in float16 (2MK); ``int8_vectorwise_quant``: float32 row
    scales (4M), int8 codes (MK), the outlier search ``A.abs()`` in float16 (2MK, freed) and its bool mask (MK), the
    0-dim ``any()`` (512); the input's float16 copy freed; ``int8_mixed_scaled_mm``: an empty ``subA``, the int32
    product (4MN), dequantized into float16 (2MN) and cast to bfloat16 (2MN, the output); the codes and scales freed
    on return. It keeps the input (``ctx.tensors``). Backward (the input's gradient only): ``CB`` in bfloat16 (2NK),
    times ``SCB / 127`` in float32 (4N, freed), then ``grad_output @ W`` (2MK)."""
    import bitsandbytes.autograd._functions as functions

    n, k = 1536, 576
    r = round_up
    with Meter(device="simulated") as meter:
        layer = bnb.int8_linear(torch.empty(n, k, device="meta"), None, meter.device)
        x = torch.empty(rows, k, dtype=torch.bfloat16, device=meter.device, requires_grad=True)
        meter.reset_peak()
        before = meter.allocated()
        out = layer(x)
        forward, held = meter.peak() - before, meter.allocated() - before
        grad = torch.empty_like(out)
        meter.reset_peak()
        before = meter.allocated()
        out.backward(grad)
        backward = meter.peak() - before
    assert type(out.grad_fn).__name__ == "MatMul8bitLtBackward"  # the CUDA path, not MatMul8bitFp's
    assert functions.MatMul8bitFp.__name__ == "MatMul8bitFp"  # itself again after the forward
    assert out.grad_fn.tensors[2] is not None and out.grad_fn.tensors[2].shape == (rows, k)
    quantizing = r(2 * rows * k) + r(4 * rows) + r(rows * k) + r(2 * rows * k) + r(rows * k)
    multiplying = r(rows * k) + r(4 * rows) + r(4 * rows * n) + r(2 * rows * n) + r(2 * rows * n)
    assert forward == max(quantizing, multiplying) and held == r(2 * rows * n)
    assert backward == r(2 * n * k) + max(r(4 * n), r(2 * rows * k))
    assert x.grad.shape == (rows, k) and layer.state.CB is not None and layer.weight.CB is None


def test_int8_lora_stores_the_frozen_linear_weights_in_one_byte_each(int8_step):
    """SmolLM2 with ``quantization="int8"``: every frozen linear weight in int8 with a float32 scale per row; the
    adapters alone train, in peft's ``lora.bnb.Linear8bitLt`` wrappers; weights counted as transformers counts them."""
    quantized = LAYERS * sum(_int8_storage_bytes(o, i) for o, i in LINEARS)
    rest = round_up(VOCAB * H * 2) + LAYERS * 2 * round_up(H * 2) + round_up(H * 2) + 2 * 512
    adapters = _adapters(8, [(H, H), (KV, H)])
    assert _bytes(int8_step, "parameters") == quantized + rest + adapters
    assert _bytes(int8_step, "gradients") == adapters and _bytes(int8_step, "optimizer_states") == 2 * adapters
    assert int8_step.params_without_grad == []
    assert int8_step.parameter_count == profile_step(SMOL, quantization="nf4", **BF16).parameter_count
    _assert_peft_wraps("int8", LoraLinear8bitLt, "Linear8bitLt")


def test_an_int8_step_is_the_same_written_from_shallow_traces_or_traced_in_full(monkeypatch):
    """The step's peak and every category, traced block by block (``full_trace``) or written from 6 and 7 blocks: 10 of
    SmolLM2's layers, written from 8 blocks on (:data:`helpers.depth.MIN_BLOCKS` lowered, as in
    ``tests/test_depth.py``, so that the full trace is cheap too)."""
    from helpers import depth

    monkeypatch.setattr(depth, "MIN_BLOCKS", 8)
    ten = {**SMOL, "num_hidden_layers": 10}
    written = profile_step(ten, quantization="int8", **BF16)
    full = profile_step(ten, quantization="int8", full_trace=True, **BF16)
    assert written.depth_note.startswith("written exactly from its steps with"), written.depth_note
    assert full.peak_allocated_bytes == written.peak_allocated_bytes
    assert full.categories == written.categories


def test_k_bit_preparation_applies_to_int8():
    """``prepare_kbit`` with int8 (peft reads ``is_loaded_in_8bit``): the embedding and norms in float32."""
    kbit = profile_step(SMOL, quantization="int8", prepare_kbit=True, **BF16)
    quantized = LAYERS * sum(_int8_storage_bytes(o, i) for o, i in LINEARS)
    rest = round_up(VOCAB * H * 4) + LAYERS * 2 * round_up(H * 4) + round_up(H * 4) + 2 * 512
    assert _bytes(kbit, "parameters") == quantized + rest + _adapters(8, [(H, H), (KV, H)])


@pytest.mark.parametrize("options, message", [
    ({"double_quant": True}, "double_quant (bitsandbytes' bnb_4bit_use_double_quant) applies to its 4-bit "
     "quantization='nf4' or quantization='fp4', not to int8 (one float32 scale per row)"),
    ({"dora": True}, "dora= with bitsandbytes' int8 weights is not simulated: peft dequantizes them through "
     "bitsandbytes' Int8Params, which cannot hold the simulation's fake tensors"),
    ({"lora_rank": 0}, "quantization= (QLoRA) quantizes the frozen base weights of LoRA: give lora_rank too"),
])
def test_what_int8_cannot_do_is_refused_in_one_line(options, message):
    with pytest.raises(ValueError) as error:
        StepConfig(**{**dict(model=SMOL, seq_len=32, lora_rank=8, quantization="int8"), **options})
    assert str(error.value) == message


def test_int8_keeps_each_layer_input_for_backward(int8_step):
    """``MatMul8bitLt`` keeps its input on its context (``ctx.tensors``), though its backward needs only the weight;
    ``gemm_4bit`` keeps none. Of SmolLM2's inputs to its int8 layers, only o_proj's (32 x 576) and down_proj's
    (32 x 1536), in bfloat16, are kept by nothing else: those are the activations int8 adds to NF4's, per layer."""
    nf4 = profile_step(SMOL, quantization="nf4", **BF16)
    kept = LAYERS * (round_up(32 * H * 2) + round_up(32 * MLP * 2))
    assert int8_step.categories["activations"] == nf4.categories["activations"] + kept
    assert int8_step.categories["other"] == nf4.categories["other"]
