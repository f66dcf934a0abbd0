"""Exact depth extrapolation (:mod:`helpers.depth`): a step written from two shallow traces equals the
full trace, field for field and byte for byte (issue 31).

The cheap configurations (tiny Hugging Face configs, short sequences) run in ``make test``; the
full-size ones in the slow group: Llama-3.1 8B with LoRA and QLoRA and Qwen2.5 7B at their full depth, and at 8 of
their blocks, their own widths (:class:`AtDepth`), GPT-2 1.5B, the Llama preset, Llama-3.1 8B's QLoRA in torchao's
NF4, and SmolLM2 135M's QLoRA, paged optimizers, DoRA and float32 steps.  A seeded random draw of small
configurations stands for a property test.
"""

import random
from dataclasses import dataclass

import pytest

from helpers import depth
from helpers.allocator import replay
from helpers.models import resolve_model
from helpers.profile import profile_step
from helpers.teaching.setups import EagerCausalLM
from helpers.transformer import transformer_step

#: Every field of a profile that a lesson, a widget or the command line reads.
FIELDS = ("backend", "model", "input_shape", "parameter_count", "events", "event_categories",
          "peak_allocated_bytes", "peak_event", "categories", "reserved_bytes", "params_without_grad",
          "peak_allocation", "storages", "peak_serials", "paged_bytes")


def _tiny(model_type: str = "llama", layers: int = 8, hidden: int = 64, heads: int = 4, kv_heads: int = 2,
          tied: bool = False) -> dict:
    """A tiny Hugging Face causal LM config of ``layers`` alike decoder layers.  By default 8, the fewest that
    ``low_minimum`` writes: one more than the deeper of the two shallow traces (:data:`helpers.depth.DEPTHS`, 6 and 7
    blocks), so the middle block is written 4 times, traced 2 and 3 times.  The written cost does not depend on the
    depth, the full trace's grows with it (at 10 blocks the cheap cases below took a tenth more CPU); the random
    draws below go up to 12."""
    return {"model_type": model_type, "vocab_size": 96, "hidden_size": hidden, "intermediate_size": 2 * hidden,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "tie_word_embeddings": tied, "max_position_embeddings": 512}


def _written_and_full(model, **options):
    """The step written from shallow traces, and traced in full; the first must say it was written."""
    options.setdefault("batch_size", 1)
    written = profile_step(model, device="simulated", **options)
    full = profile_step(model, device="simulated", full_trace=True, **options)
    assert written.depth_note.startswith("written exactly from its steps with"), written.depth_note
    assert full.depth_note.endswith("asked for (full_trace=True)"), full.depth_note
    return written, full


def assert_same(written, full) -> None:
    """Equal field for field, the allocation log entry for entry, and the allocator's replay byte for byte.

    Where both logs are lists of :class:`helpers.record.Allocation` (every step's is), equal entry for entry (every
    field), :func:`helpers.allocator.replay`, which reads nothing but its log, replays them alike: the written log is
    replayed once (a replay costs about a second) and must run to the end.  Any other sequence is replayed as well."""
    assert written.config == full.config.replace(full_trace=False)
    for name in FIELDS:
        assert getattr(written, name) == getattr(full, name), name
    assert written.allocation_log == full.allocation_log
    middle = len(full.events) // 2  # what a reader of the events' live storages gets (written: worked out when read)
    assert [len(e.live) for e in written.events] == [len(e.live) for e in full.events]
    assert written.kept_between(written.events[0], written.events[middle]) == full.kept_between(
        full.events[0], full.events[middle])
    a = replay(written.allocation_log)
    assert a.error is None and a.peak_reserved >= full.peak_allocated_bytes
    if not (type(written.allocation_log) is list and type(full.allocation_log) is list):
        b = replay(full.allocation_log)
        assert b.error is None and (a.peak_reserved, a.reserved, a.requested, a.allocator.trace) == (
            b.peak_reserved, b.reserved, b.requested, b.allocator.trace)


@pytest.fixture
def low_minimum(monkeypatch):
    """Extrapolate models of 8 blocks or more (a tiny model is cheap to trace in full as well)."""
    monkeypatch.setattr(depth, "MIN_BLOCKS", 8)


#: Named configurations, one or two techniques each.  Two more, a float32 step with AdamW and a float16-autocast step
#: (GradScaler) in steady state, are made by the random draws below, which assert that they draw them.
CHEAP = {
    "llama, bf16 parameters, LoRA": (_tiny(), dict(seq_len=32, param_dtype="bfloat16", lora_rank=4)),
    "llama, bf16 autocast, checkpointing, accumulation": (
        _tiny(), dict(seq_len=32, amp=True, amp_dtype="bfloat16", checkpoint=1, accumulation_steps=2)),
    "qwen2 (biases), bf16 autocast, LoRA, checkpointing, steady state": (
        _tiny("qwen2", kv_heads=4), dict(seq_len=24, amp=True, amp_dtype="bfloat16", lora_rank=8, checkpoint=1,
                                         steady_state=True, param_dtype="bfloat16")),
    "llama, bf16 autocast, LoRA, torchtune's chunked loss": (
        _tiny(), dict(seq_len=32, batch_size=2, amp=True, amp_dtype="bfloat16", lora_rank=4, loss="chunked")),
    "llama, tied embeddings, SGD, set_to_none=False": (
        _tiny(tied=True), dict(seq_len=16, batch_size=2, optimizer="sgd", set_to_none=False)),
    "llama, eager attention (a published setup's builder), LoRA": (
        EagerCausalLM(tuple(sorted(_tiny().items()))), dict(seq_len=32, lora_rank=4)),
    "bloom (ALiBi: no context limit), eager attention": (
        EagerCausalLM((("hidden_size", 64), ("model_type", "bloom"), ("n_head", 4), ("n_layer", 8),
                       ("vocab_size", 96))), dict(seq_len=16, amp=True, amp_dtype="bfloat16")),
}


@pytest.mark.parametrize("name", CHEAP)
def test_a_written_step_equals_the_full_trace(low_minimum, name):
    model, options = CHEAP[name]
    assert_same(*_written_and_full(model, **options))


def test_random_small_configurations_are_written_exactly(low_minimum):
    """A seeded draw of depth, width, heads, kv heads, sequence, batch and options: three configurations, each about
    4 s of CPU (it drew four; the fourth, a 10-block float32 LoRA step with SGD, was cut: the cheap cases above cover
    LoRA), from the same space, the same three as before.  Two of them stand for cases :data:`CHEAP` listed until
    0.14.0, each a subset of a draw (the same claim, made twice in each run): "llama, float32" (AdamW) by the first draw,
    a float32 step of Mistral (Llama's architecture) with Adam, and "llama, fp16 autocast, GradScaler, steady state"
    by the second, the same with checkpointing and tied embeddings; asserted, so that another seed cannot drop them."""
    rng = random.Random(31)
    drawn = []
    for _ in range(3):
        heads = rng.choice([2, 4])
        options = dict(seq_len=rng.choice([8, 16, 40]), batch_size=rng.choice([1, 3]),
                       optimizer=rng.choice(["adamw", "adam", "sgd"]), lora_rank=rng.choice([0, 4]),
                       checkpoint=rng.choice([0, 1]), steady_state=rng.choice([False, True]))
        if rng.random() < 0.6:
            options.update(amp=True, amp_dtype=rng.choice(["float16", "bfloat16"]))
        model = _tiny(rng.choice(["llama", "qwen2", "mistral"]), layers=rng.randint(8, 12),
                      hidden=heads * rng.choice([8, 16]), heads=heads, kv_heads=rng.choice([1, heads]),
                      tied=rng.random() < 0.3)
        drawn.append((model, options))
    assert any(not o.get("amp") and o["optimizer"] in ("adam", "adamw") and not o["lora_rank"] for _, o in drawn)
    assert any(o.get("amp_dtype") == "float16" and o["steady_state"] and not o["lora_rank"] for _, o in drawn)
    for model, options in drawn:
        try:
            assert_same(*_written_and_full(model, **options))
        except AssertionError as e:  # say which draw
            raise AssertionError(f"{model}, {options}: {e}") from e


def test_lesson_08s_widget_step_is_written_exactly(low_minimum):
    """transformer_step's builder (a preset with a checkpointing policy per block) says its blocks: GPT-2 small's, at 8
    of its 12 (its builder's own ``at_depth``: the fewest written here, and the full trace, whose cost grows with the
    blocks, a third cheaper), written from 8 blocks on here (the widget's larger presets, 24 to 48 alike blocks, are
    written from 20 on)."""
    config = transformer_step("gpt2", 128, 2, policy="selective", optimizer="sgd")
    assert config.model.model_spec().blocks == 12
    config = config.replace(model=config.model.model_spec().at_depth(8).build)
    written, full = profile_step(config), profile_step(config.replace(full_trace=True))
    assert written.depth_note.startswith("written exactly from its steps with") and written.model == "gpt2"
    assert_same(written, full)


def test_a_step_is_traced_in_full_where_it_must_be_and_says_why(low_minimum):
    """Each reason is met by a model as shallow as shows it (each traced in full, which is what costs here): blocks
    that differ and too few blocks by 2 of them; a capacity by 8, enough to be written without one."""
    differ = dict(_tiny(layers=2), layer_types=["full_attention", "sliding_attention"], sliding_window=8)
    assert profile_step(differ, 1, seq_len=16, device="simulated").depth_note == (
        "every one of its 2 blocks traced: its layer_types differ from layer to layer")
    assert profile_step(_tiny(layers=2), 1, seq_len=16, device="simulated").depth_note == (
        "every one of its 2 blocks traced: below 8 blocks, two shallow traces cost as much")
    assert profile_step(_tiny(), 1, seq_len=16, device="simulated", capacity=8 * 2**30).depth_note.endswith(
        "a simulated capacity (capacity=) stops the step where it runs out")
    assert profile_step("mlp", 16, device="simulated").depth_note is None  # no repeated blocks


@dataclass(frozen=True)
class AtDepth:
    """``model`` (a preset or a shipped Hugging Face config) with only ``blocks`` of its blocks: its own widths, dtypes
    and code, block for block (:attr:`helpers.models.ModelSpec.at_depth`, what :mod:`helpers.depth` traces its shallow
    steps with).  A written step's cost does not depend on the depth (two shallow traces of 6 and 7 blocks), a full
    trace's grows with it: at 8 blocks (:func:`low_minimum`), the fewest written, a configuration's written step is
    checked against its full trace for about half of what the model's own depth costs."""

    model: str
    blocks: int = 8

    def model_spec(self):
        return resolve_model(self.model).at_depth(self.blocks)

    def __call__(self):
        return self.model_spec().build()


#: At full depth: Llama-3.1 8B's LoRA and QLoRA steps (lesson 09's), and Qwen2.5 7B, written with 6 and 7 of their
#: 32 and 28 blocks as a learner's step is (:data:`helpers.depth.MIN_BLOCKS`).  The others at 8 of their blocks
#: (:class:`AtDepth`): what each adds (a quantization, an optimizer, DoRA, checkpointing by segments, the preset's
#: builder) runs the same in every block, and the depth at which a written log could go wrong is checked on the three
#: above; torchao's NF4 step of Llama-3.1 8B at its full depth is also compared with its step on real CUDA tensors
#: (``tests/test_real_step_on_stub.py``, ``llama8b_qlora_ckpt``: its peak, at 2,048 tokens).
FULL_SIZE = {
    "GPT-2 1.5B at 8 of 48 blocks, fp16 autocast, a segment per block, steady state": (
        AtDepth("gpt2-xl"), dict(batch_size=1, seq_len=128, amp=True, checkpoint=10, steady_state=True)),
    "the Llama preset at 8 of 32 blocks, bf16 autocast, accumulation": (
        AtDepth("llama3-8b"), dict(batch_size=1, seq_len=64, amp=True, amp_dtype="bfloat16", accumulation_steps=2)),
    "Llama-3.1 8B, LoRA r16, checkpointing, steady state": (
        "meta-llama/Llama-3.1-8B", dict(batch_size=1, seq_len=256, amp=True, amp_dtype="bfloat16",
                                        param_dtype="bfloat16", lora_rank=16, checkpoint=1, steady_state=True)),
    "Llama-3.1 8B at 8 of 32 blocks, QLoRA (torchao's NF4), checkpointing, steady state": (
        AtDepth("meta-llama/Llama-3.1-8B"), dict(batch_size=1, seq_len=256, amp=True, amp_dtype="bfloat16",
                                                 quantization="torchao-nf4", lora_rank=16, checkpoint=1,
                                                 steady_state=True)),
    "Llama-3.1 8B, QLoRA (bitsandbytes' NF4, double quantization), checkpointing, steady state": (
        "meta-llama/Llama-3.1-8B", dict(batch_size=1, seq_len=256, amp=True, amp_dtype="bfloat16",
                                        quantization="nf4", double_quant=True, lora_rank=16, checkpoint=1,
                                        steady_state=True)),
    "Qwen2.5 7B, bf16 autocast, checkpointing": (
        "Qwen/Qwen2.5-7B", dict(batch_size=1, seq_len=128, amp=True, amp_dtype="bfloat16", param_dtype="bfloat16",
                                checkpoint=1)),
    "SmolLM2 135M (tied) at 8 of 30 blocks, QLoRA (bitsandbytes' FP4), k-bit preparation, checkpointing": (
        AtDepth("HuggingFaceTB/SmolLM2-135M"), dict(batch_size=1, seq_len=64, amp=True, amp_dtype="bfloat16",
                                                    param_dtype="bfloat16", quantization="fp4", prepare_kbit=True,
                                                    lora_rank=8, checkpoint=1, steady_state=True)),
    "SmolLM2 135M (tied) at 8 of 30 blocks, QLoRA r256, paged AdamW, bfloat16 adapters": (
        AtDepth("HuggingFaceTB/SmolLM2-135M"), dict(batch_size=1, seq_len=64, amp=True, amp_dtype="bfloat16",
                                                    param_dtype="bfloat16", quantization="nf4", lora_rank=256,
                                                    lora_dtype="bfloat16", optimizer="paged-adamw", steady_state=True)),
    "SmolLM2 135M (tied) at 8 of 30 blocks, QLoRA r256, paged 8-bit AdamW": (
        AtDepth("HuggingFaceTB/SmolLM2-135M"), dict(batch_size=1, seq_len=64, amp=True, amp_dtype="bfloat16",
                                                    param_dtype="bfloat16", quantization="nf4", lora_rank=256,
                                                    optimizer="paged-adamw8bit", steady_state=True)),
    "SmolLM2 135M (tied) at 8 of 30 blocks, DoRA r8, bf16 autocast, steady state": (
        AtDepth("HuggingFaceTB/SmolLM2-135M"), dict(batch_size=1, seq_len=64, amp=True, amp_dtype="bfloat16",
                                                    param_dtype="bfloat16", lora_rank=8, dora=True,
                                                    steady_state=True)),
    "SmolLM2 135M (tied) at 8 of 30 blocks, float32, steady state": (
        AtDepth("HuggingFaceTB/SmolLM2-135M"), dict(batch_size=2, seq_len=64, steady_state=True)),
}


@pytest.mark.parametrize("name", FULL_SIZE)
def test_a_full_size_step_written_equals_its_full_trace(low_minimum, name):
    model, options = FULL_SIZE[name]
    assert_same(*_written_and_full(model, **options))
