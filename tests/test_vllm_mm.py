"""vLLM v0.19.0's start-up of Gemma-3 with its vision tower (helpers.vllm_mm): the encoder's items, vLLM's rotary
tables, the SigLIP tower and projector traced with vLLM's ops, and the account built from them (the published rows
are asserted in tests/test_vllm_groups.py)."""

import dataclasses

import pytest
import torch
import transformers

from helpers.hf_config import load_config
from helpers.serving import vllm_startup
from helpers.units import GiB, MiB
from helpers.vllm_mm import encoder_items, encoder_run, is_multimodal, rope_table_bytes, vllm_startup_mm

FOUR, TWENTY_SEVEN = "google/gemma-3-4b-it", "google/gemma-3-27b-it"
LOGGED = dict(gpu=round(79.19 * GiB), gpu_memory_utilization=0.95, max_model_len=8192, max_num_batched_tokens=8192,
              max_num_seqs=1024, non_torch_bytes=round(0.25 * GiB))


def test_the_encoder_is_profiled_on_the_budget_over_an_images_tokens():
    assert encoder_items(256, 8192, 8192, 1024) == 32  # the logs: "profiled with 32 image items"
    assert encoder_items(256, 2048, 8192, 256) == 8
    assert encoder_items(4096, 2048, 8192, 256) == 1  # one item larger than the budget: the budget grows to it
    assert encoder_items(256, 8192, 8192, 1) == 32 and encoder_items(256, 8192, 512, 1) == 2  # a prompt's items
    with pytest.raises(ValueError, match="^max_num_seqs must be an integer >= 1, got 0$"):
        encoder_items(256, 8192, 8192, 0)


def test_vllm_keeps_one_rotary_table_per_rope_with_linear_scaling_rows():
    text = load_config(FOUR).get_text_config()
    # full attention: linear scaling by 8 over 131,072 positions; sliding: the default rope; head size 256, bfloat16
    assert rope_table_bytes(text, 2) == (131_072 * 8 + 131_072) * 256 * 2 == 576 * MiB
    assert rope_table_bytes(load_config(TWENTY_SEVEN).get_text_config(), 2) == 288 * MiB  # head size 128
    llama = load_config("meta-llama/Llama-3.1-8B")
    with pytest.raises(ValueError, match="^rope_type 'llama3': vLLM's table for it is not sized here"):
        rope_table_bytes(llama, 2)


@pytest.fixture(scope="module")
def four():
    return encoder_run(FOUR, "bfloat16", 32)


def test_the_tower_holds_what_transformers_counts(four):
    config = load_config(FOUR)
    with torch.device("meta"):
        model = transformers.Gemma3ForConditionalGeneration(config)
    tower = sum(p.numel() for p in model.model.vision_tower.parameters())
    projector = sum(p.numel() for p in model.model.multi_modal_projector.parameters())
    assert four.parameters == tower + projector == 416_866_032 + 2_950_272
    assert four.weights == pytest.approx(four.parameters * 2, rel=1e-3)  # bfloat16, each tensor rounded to 512 bytes


def test_the_encoders_peak_is_its_mlp_on_every_image_at_once(four):
    n, width, mlp = 32 * 4096, 1152, 4304
    pixels = 32 * 3 * 896 * 896 * 2
    # the pixels, the first layer's input (kept by the encoder), a layer's input, its attention output with the
    # residual, the layer norm's output, fc1's output and the GELU's: bfloat16
    assert four.peak == pixels + 4 * n * width * 2 + 2 * n * mlp * 2
    assert four.held == pixels + 32 * 256 * 2560 * 2  # and the embeddings, [32 images, 256 tokens, 2,560]


def test_the_account_adds_the_tower_and_holds_the_encoders_outputs_through_the_text_run(four):
    text = dict(load_config(FOUR).get_text_config().to_dict(), _name_or_path=FOUR)
    alone, account = vllm_startup(text, **LOGGED), vllm_startup_mm(FOUR, **LOGGED)
    assert account.weights_bytes == alone.weights_bytes + four.weights + 576 * MiB
    assert account.parameter_count == 4_300_079_472
    # the sampler's float32 logits after the text pass set the peak, with the encoder's tensors alive beside them
    assert four.peak < alone.activation_peak_bytes + four.held == account.activation_peak_bytes
    assert dataclasses.replace(alone, weights_bytes=account.weights_bytes,
                               activation_peak_bytes=account.activation_peak_bytes).kv_tokens == account.kv_tokens
    assert is_multimodal(FOUR) and not is_multimodal("google/gemma-2-9b-it")


def test_what_is_refused_in_one_line():
    with pytest.raises(ValueError, match="^google/gemma-3-4b-it has a vision tower: its start-up is helpers.vllm_mm"):
        vllm_startup(FOUR, max_model_len=8192)  # the text account alone would leave the tower's profile out
    with pytest.raises(ValueError, match="modelled on one card only"):
        vllm_startup_mm(FOUR, tensor_parallel_size=2)
    with pytest.raises(ValueError, match="^google/gemma-2-9b-it: not a multimodal model traced here"):
        vllm_startup_mm("google/gemma-2-9b-it")
    with pytest.raises(ValueError, match="^items must be an integer >= 1"):
        encoder_run(FOUR, "bfloat16", 0)
    with pytest.raises(ValueError, match="^unknown dtype 'int8'"):
        encoder_run(FOUR, "int8", 32)
