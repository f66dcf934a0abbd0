"""Lesson 10b's widget, ServingFit: its figures are vllm_startup's for the options its controls show (the widget
computes nothing of its own), a refusal is vLLM's own line, and its view changes through traits.

Most tests use SmolLM2-135M (a shipped config), whose profile runs trace in a fraction of a second; the refusals
need Llama-3.1 8B, whose weights alone fill a V100.
"""

from __future__ import annotations

import dataclasses
import html
import math
import re

import pytest

from helpers.gpus import GPU_CARDS
from helpers.hf_config import load_config, shipped_configs
from helpers.serving import WouldNotStart, vllm_startup
from helpers.teaching.views import STARTUP_DATA, startup_answer, startup_parts, startup_view
from helpers.teaching.widgets import CONTEXTS, ServingFit, context_options, serving_models

SMOL = "HuggingFaceTB/SmolLM2-135M"
LLAMA = "meta-llama/Llama-3.1-8B"


def _shown(widget) -> list[str]:
    """Every value the widget's view takes from now on."""
    values: list[str] = []
    widget.view.observe(lambda change: values.append(change["new"]), names="value")
    return values


def _data(view: str) -> dict[str, str]:
    """The data attributes of the view's ``.gm-serving``, unescaped."""
    top = re.search(r'<div class="gm-serving" ([^>]*)>', view).group(1)
    return {k: html.unescape(v) for k, v in re.findall(r'data-([\w-]+)="([^"]*)"', top)}


def _parts(view: str) -> dict[str, int]:
    return {name: int(n) for name, n in re.findall(r'class="gm-part" data-part="([^"]+)" data-bytes="(\d+)"', view)}


def test_its_figures_are_vllm_startups_for_the_options_its_controls_show():
    w = ServingFit(SMOL, max_model_len=8192)
    expected = dict(model=SMOL, gpu="H100 80 GB", gpu_memory_utilization=0.9, max_model_len=8192,
                    max_num_batched_tokens=None, kv_cache_dtype="auto", dtype="bfloat16", quantization="none",
                    tensor_parallel_size=1)
    for control, value, option in ((None, None, {}),
                                   ("utilization", 0.77, dict(gpu_memory_utilization=0.77)),
                                   ("kv_cache_dtype", "fp8", dict(kv_cache_dtype="fp8")),
                                   ("max_model_len", 4096, dict(max_model_len=4096)),
                                   ("gpu", "A100 40 GB", dict(gpu="A100 40 GB")),
                                   ("budget", "4,096", dict(max_num_batched_tokens=4096)),
                                   ("weights", "float16", dict(dtype="float16")),
                                   ("gpus", 3, dict(tensor_parallel_size=3))):  # SmolLM2's 9 heads: 3 GPUs
        if control:
            getattr(w, control).value = value
        expected.update(option)  # one control at a time, the others as they were
        assert w.options() == expected, control
        account = vllm_startup(**w.options())
        assert w.result == account, control  # every figure, traced and computed, is the function's
        data, parts = _data(w.view.value), _parts(w.view.value)
        assert data == {name: str(getattr(account, attr)) for name, attr in STARTUP_DATA.items()}
        assert parts == dict(startup_parts(account)) and sum(parts.values()) == account.total_bytes
        assert parts["weights"] == account.weights_bytes and parts["KV cache"] == account.kv_cache_bytes
        whole = math.floor(account.max_concurrency)
        each = "" if account.tensor_parallel_size == 1 else f" on each of {account.tensor_parallel_size} GPUs"
        assert w.message == startup_answer(account) == (
            f"{whole:,} requests of {account.max_model_len:,} tokens fit at once, maximum concurrency "
            f"{account.max_concurrency:.2f}× (KV cache: {account.kv_tokens:,} tokens, "
            f"{account.kv_cache_bytes / 2**30:,.2f} GiB{each})")
        assert html.escape(w.message) in w.view.value and 'data-starts="true"' in w.view.value
    assert w.summary().splitlines() == [w.message, *w.result.lines()]


def test_the_default_is_llama_3_1_8b_on_an_h100_at_its_whole_context_as_vllm_serve():
    w = ServingFit()
    assert w.options() == dict(model=LLAMA, gpu="H100 80 GB", gpu_memory_utilization=0.9, max_model_len=131_072,
                               max_num_batched_tokens=None, kv_cache_dtype="auto", dtype="bfloat16",
                               quantization="none", tensor_parallel_size=1)
    assert w.result == vllm_startup(LLAMA) and w.result.max_num_batched_tokens == 8192
    assert w.message.startswith("3 requests of 131,072 tokens fit at once, maximum concurrency 3.39× (KV cache: ")


def test_a_refusal_shows_vllms_line_and_the_account_that_says_so():
    w = ServingFit(LLAMA, gpu="RTX 4090 24 GB")  # 131,072 tokens of KV cache need 16 GiB; 5.96 are left
    with pytest.raises(WouldNotStart) as refused:
        vllm_startup(**w.options())
    assert w.result == refused.value.account and w.message == str(refused.value) == w.result.refusal
    assert w.message.startswith("one sequence of max_model_len 131,072 tokens needs 16.00 GiB of KV cache")
    view = w.view.value
    assert '<div class="gm-answer" data-starts="false"' in view and html.escape(w.message) in view
    kv = _parts(view)["KV cache"]  # the account's bar all the same: the cache it would have, short of one sequence
    assert 'class="gm-bar"' in view and kv == w.result.kv_cache_bytes and 0 < kv < 131_072 * 128 * 2**10
    w.gpu.value = "V100 16 GB"  # the weights alone take more than 0.90 of the card
    assert w.message.startswith("no memory is left for the KV cache: weights, activation peak and non-torch memory")
    assert w.result.available_kv_bytes < 0 and _parts(w.view.value)["KV cache"] == 0
    assert "border-left:3px solid #b00" not in w.view.value  # within the card: the bar is the card
    heavier = dataclasses.replace(w.result, weights_bytes=20 * 2**30)  # weights beyond the card: a red line at its end
    answer, view = startup_view(heavier)
    parts = _parts(view)
    assert answer == heavier.refusal and parts["unused"] == 0 and sum(parts.values()) > GPU_CARDS["V100 16 GB"]
    assert "border-left:3px solid #b00" in view
    w.gpu.value, w.max_model_len.value = "RTX 4090 24 GB", 8192
    assert w.result.refusal is None
    assert w.message.startswith("5 requests of 8,192 tokens fit at once, maximum concurrency 5.96×")
    w.max_model_len.value = 32_768  # lesson 10's 1.5 requests of 32k on the 24 GB card: one whole request (issue 52.18)
    assert w.message.startswith("1 request of 32,768 tokens fits at once, maximum concurrency 1.49×"), w.message
    assert w.message == startup_answer(w.result)


def test_quantized_weights_reach_vllm_startup_and_a_65b_model_starts_in_nf4():
    """The weights menu's bitsandbytes entries are vllm_startup's quantization; LLaMA 65B, refused in bfloat16 on
    every card, starts on an H100 in NF4 (slow: 65B's profile run traced twice)."""
    w = ServingFit(SMOL, weights="int8 (bitsandbytes LLM.int8())")
    assert w.options()["quantization"] == "int8" and w.result == vllm_startup(**w.options())
    assert w.result.weights_bytes < vllm_startup(SMOL).weights_bytes and "bitsandbytes int8" in w.view.value
    w = ServingFit("huggyllama/llama-65b")  # 122 GiB in bfloat16: no card of GPU_CARDS holds it
    assert w.max_model_len.value == 2048 and w.result.refusal and w.result.weights_bytes > GPU_CARDS["H100 80 GB"]
    w.weights.value = "NF4 (bitsandbytes, 4-bit)"
    assert w.options()["quantization"] == "nf4" and w.result == vllm_startup(**w.options())
    assert w.result.refusal is None and w.result.weights_bytes < GPU_CARDS["H100 80 GB"] / 2
    assert "bitsandbytes nf4, the embeddings, norms and head in bfloat16" in w.view.value


def test_the_gpus_menu_shows_one_gpus_account_and_vllms_refusals():
    """The GPUs menu is tensor_parallel_size: the account shown is one GPU's of vllm_startup's, its answer says so; a
    split vLLM refuses shows vLLM's line (heads not divisible); LLaMA 65B's weights, larger than an H100 in bfloat16,
    fit on 2 (slow: 65B's profile run traced twice)."""
    w = ServingFit(LLAMA, max_model_len=32_768)
    one = w.result
    w.gpus.value = 2
    assert w.options()["tensor_parallel_size"] == 2 and w.result == vllm_startup(**w.options())
    assert w.result.tensor_parallel_size == 2 and w.result.weights_bytes < one.weights_bytes / 2 + 2**30
    assert w.result.kv_tokens > 2 * one.kv_tokens  # half the KV heads per GPU, and more room beside half the weights
    assert w.message.endswith(" GiB on each of 2 GPUs)") and _data(w.view.value)["gpus"] == "2"
    assert "one of 2 (tensor_parallel_size), its shard of the model" in w.view.value
    w.gpus.value = 3  # Llama-3.1 8B's 32 heads: vLLM refuses before it loads a weight
    assert w.result is None and w.message == ("cannot run this configuration: Total number of attention heads (32) "
                                              "must be divisible by tensor parallel size (3).")
    assert 'class="gm-refused"' in w.view.value
    w.gpus.value = 1
    assert w.result == one and "on each of" not in w.message
    big = ServingFit("huggyllama/llama-65b")
    assert big.result.refusal.startswith("CUDA out of memory: weights take 121.")
    big.gpus.value = 2
    assert big.result == vllm_startup(**big.options()) and big.result.refusal is None
    assert big.result.weights_bytes < GPU_CARDS["H100 80 GB"] and big.message.endswith("on each of 2 GPUs)")


def test_the_context_menu_never_exceeds_the_models_positions():
    assert serving_models() == tuple(shipped_configs())  # all full attention: kv_bytes_per_token sizes each
    for name in serving_models():
        positions = load_config(name).get_text_config().max_position_embeddings
        menu = context_options(name)
        assert menu and max(menu) <= positions and set(menu) <= set(CONTEXTS) | {positions}
    assert context_options("huggyllama/llama-65b") == (2048,)  # fewer positions than the smallest: its own
    assert context_options("mistralai/Mistral-7B-v0.3") == (4096, 8192, 32_768)
    w = ServingFit(SMOL)
    assert [v for _, v in w.max_model_len.options] == [4096, 8192] and w.max_model_len.value == 8192
    w.model.value = "meta-llama/Llama-2-7b-hf"  # 4,096 positions
    assert [v for _, v in w.max_model_len.options] == [4096] and w.options()["max_model_len"] == 4096
    assert w.result == vllm_startup(**w.options())
    w.utilization.value = 0.8  # another change while the menu offers 4,096 alone: not the learner's choice
    w.model.value = SMOL  # the learner's 8,192 again
    assert w.max_model_len.value == 8192 and w.result.max_model_len == 8192
    with pytest.raises(ValueError, match=r"^max_model_len for mistralai/Mistral-7B-v0.3 must be one of 4,096, "
                                         r"8,192, 32,768, got 131072$"):
        ServingFit("mistralai/Mistral-7B-v0.3", max_model_len=131_072)


def test_a_notebook_not_run_shows_what_the_widget_does():
    data = ServingFit(SMOL)._repr_mimebundle_()
    assert data["text/plain"].startswith("ServingFit(children=(")  # how the browser test finds it in a lesson
    assert "<b>ServingFit</b>: menus for a model, its weights, the KV cache&#x27;s dtype" in data["text/html"]
    assert "how many requests fit at once" in data["text/html"] and "Run All Cells" in data["text/html"]


def test_a_control_changes_the_view_through_its_trait_and_a_new_trace_says_updating_first():
    w = ServingFit(SMOL, max_model_len=4096)
    shown = _shown(w)
    for control, value in (("utilization", 0.6), ("kv_cache_dtype", "fp8"), ("max_model_len", 8192)):
        before = w.view.value
        getattr(w, control).value = value  # vLLM's arithmetic on the kept run: at once
        assert len(shown) == 1 and "gm-busy" not in shown[0] and shown[0] != before and w.view.value == shown[0]
        shown.clear()
    before = w.view.value
    w.budget.value = "16,384"  # a profile run not traced yet
    assert len(shown) == 2, shown
    busy, after = shown
    assert busy.startswith('<div class="gm-busy" aria-busy="true">')
    assert (f"updating&hellip; tracing vLLM&#x27;s profile run: {SMOL} in bfloat16, max_num_batched_tokens 16,384"
            in busy) and busy.endswith(f'{before}</div></div>')  # the old figures, dimmed
    assert "gm-busy" not in after and _data(after)["batched-tokens"] == "16384"
    shown.clear()
    w.budget.value = "vLLM's default"  # shown before: kept, at once
    assert len(shown) == 1 and "gm-busy" not in shown[0]


@pytest.mark.parametrize("options, message", [
    (dict(model="gpt2"), r"^unknown model 'gpt2'; use one of meta-llama/Llama-3.1-8B, "),
    (dict(weights="float32"), r"^unknown weights 'float32'; use one of bfloat16, float16, NF4 "),
    (dict(kv_cache_dtype="fp8_e5m2"), r"^unknown kv_cache_dtype 'fp8_e5m2'; use one of auto, fp8$"),
    (dict(gpu="T4 16 GB"), r"^unknown gpu 'T4 16 GB'"),
    (dict(max_num_batched_tokens=3000), r"^unknown max_num_batched_tokens 3000; use one of None, 2048, "),
    (dict(tensor_parallel_size=5), r"^unknown tensor_parallel_size 5; use one of 1, 2, 3, 4, 8$"),
    (dict(gpu_memory_utilization=0.99), r"^gpu_memory_utilization must be from 0.50 to 0.98, got 0.99$"),
    (dict(gpu_memory_utilization=True), r"^gpu_memory_utilization must be from 0.50 to 0.98, got True$"),
])
def test_it_refuses_what_its_controls_cannot_show(options, message):
    with pytest.raises(ValueError, match=message):
        ServingFit(**options)
