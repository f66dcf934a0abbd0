"""helpers.generation: greedy generation traced on the simulated GPU, its KV cache against the config's formula."""

import pytest

from helpers import generation
from helpers.allocator.rules import round_up
from helpers.depth import MIN_BLOCKS
from helpers.generation import MAX_NEW_TOKENS, generation_memory
from helpers.hf_config import load_config, shipped_json

SMOL = "HuggingFaceTB/SmolLM2-135M"
#: SmolLM2-135M's shipped config with 2 of its 30 decoder layers (a config dict): the cache's rules per layer, traced in
#: a fraction of the time.
SMALL = shipped_json(SMOL) | {"num_hidden_layers": 2}
LLAMA = "meta-llama/Llama-3.1-8B"


@pytest.fixture(scope="module")
def generated():
    """:data:`SMALL`'s generation after a prompt of 64 tokens, 4 new tokens, batch 2, by cache (traced once for the
    file: two tests read them)."""
    return {cache: generation_memory(SMALL, 64, new_tokens=4, batch_size=2, cache=cache)
            for cache in ("dynamic", "static")}


@pytest.fixture(scope="module")
def llama_8b():
    """Llama-3.1 8B's generation after a prompt of 2,048 tokens, in bfloat16 (read by two tests)."""
    return generation_memory(LLAMA, 2048)


def _kv_tensor_bytes(model: str, batch_size: int, tokens: int, value_bytes: int = 2) -> int:
    """One layer's keys (or values) for ``tokens`` tokens, as a storage: batch × KV heads × tokens × head size."""
    c = load_config(model)
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return round_up(batch_size * c.num_key_value_heads * tokens * head_dim * value_bytes)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_the_kv_cache_is_two_tensors_per_layer_of_every_token(cache, generated):
    """After the prefill of 64 tokens and 3 decode steps, a dynamic cache holds 67 tokens (the last generated token
    is not fed yet), a static one the 68 it was made for; each is 2 × layers tensors of batch × KV heads × tokens ×
    head size in bfloat16."""
    p = generated[cache]
    layers = load_config(SMALL).num_hidden_layers
    tokens = 64 + 4 - 1 if cache == "dynamic" else 64 + 4
    assert layers == 2 and p.kv_cache_bytes == 2 * layers * _kv_tensor_bytes(SMALL, 2, tokens)
    assert [name for name, _, _ in p.timeline] == ["weights", "prefill", "decode 1", "decode 2", "decode 3"]


def test_a_dynamic_cache_grows_by_one_token_a_step_and_a_static_one_not_at_all(generated):
    dynamic, static = generated["dynamic"], generated["static"]
    c = load_config(SMALL)
    per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 2
    grown = [after - before for (_, before, _), (_, after, _) in zip(dynamic.timeline[1:], dynamic.timeline[2:])]
    # each step's keys and values are new tensors (torch.cat), rounded up to 512 bytes each
    assert all(abs(g - 2 * per_token) <= 2 * c.num_hidden_layers * 512 for g in grown), (grown, per_token)
    assert len({after for _, after, _ in static.timeline[1:]}) == 1  # written in place
    # torch.cat makes a layer's new keys while the old are alive: a decode step's peak is above what it leaves
    assert dynamic.decode_peak_bytes > dynamic.timeline[-1][1]


def test_an_8b_model_weights_and_prefill(llama_8b):
    """Llama-3.1 8B in bfloat16: 2 bytes a parameter; 2,048 tokens of KV cache is 2,048 × 128 KiB (grouped-query
    attention: 8 KV heads of 128 over 32 layers); the prefill's peak is above weights and cache."""
    p = llama_8b
    assert abs(p.weights_bytes - 8_030_261_248 * 2) < 2**20  # the published parameter count, plus small buffers
    assert p.kv_cache_bytes == 2048 * 128 * 1024
    assert p.prefill_peak_bytes > p.weights_bytes + p.kv_cache_bytes
    assert p.decode_peak_bytes == 0 and p.peak_allocated_bytes == p.prefill_peak_bytes


@pytest.mark.parametrize("kwargs, message", [
    (dict(cache="paged"), "cache must be one of dynamic, static, got 'paged'"),
    (dict(new_tokens=MAX_NEW_TOKENS + 1), "new_tokens"),
    (dict(prompt_len=8192), "beyond HuggingFaceTB/SmolLM2-135M's 8,192 positions"),
])
def test_bad_input_is_one_line(kwargs, message):
    options = dict(prompt_len=64, new_tokens=2) | kwargs
    with pytest.raises(ValueError) as e:
        generation_memory(SMOL, **options)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_model_that_does_not_generate_is_refused():
    with pytest.raises(ValueError, match="not a Hugging Face causal language model.s config"):
        generation_memory("resnet18", 16)


#: SmolLM2-135M's shipped config with 20 of its 30 decoder layers: as many as helpers.depth writes from shallow traces
#: (MIN_BLOCKS), so that the full trace it is checked against costs two thirds of the 30 layers'.
DEEP = shipped_json(SMOL) | {"num_hidden_layers": MIN_BLOCKS}


@pytest.fixture(scope="module")
def deep():
    """:data:`DEEP`'s generation after a prompt of 16 tokens, 3 new tokens (two decode steps, each freeing the cache
    the one before made), batch 2: written from 6- and 7-layer traces, not traced in full after the template failed
    (``NotRepeated``): the first of what ``_written`` returned (read by two tests)."""
    written = []
    real = generation._written
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(generation, "_written", lambda *args: written.append(real(*args)) or written[-1])
        fast = generation_memory(DEEP, 16, new_tokens=3, batch_size=2)
    assert written == [fast]
    return fast


def test_a_deep_models_generation_is_written_from_shallow_traces(deep):
    """A model of MIN_BLOCKS alike layers with a dynamic cache: its generation is written from the same generation
    traced with 6 and 7 layers (helpers.depth's template, which first writes both traced logs again, entry for
    entry); its cache is every layer's keys and values of the 18 tokens fed."""
    assert [name for name, _, _ in deep.timeline] == ["weights", "prefill", "decode 1", "decode 2"]
    assert deep.kv_cache_bytes == 2 * MIN_BLOCKS * _kv_tensor_bytes(SMOL, 2, 16 + 3 - 1)
    assert deep.decode_peak_bytes > deep.timeline[-1][1] and deep.prefill_peak_bytes > deep.timeline[1][1]


def test_a_deep_models_written_generation_is_the_full_traces(deep):
    """The written generation equals the trace of every layer in every field: each moment's allocated and peak bytes,
    and the cache's (the lesson's and this file's Llama-3.1 8B calls were checked the same way, every field equal).
    The full trace of 20 layers is most of this file's time, and it is what makes the written path exact."""
    assert deep == generation_memory(DEEP, 16, new_tokens=3, batch_size=2, full_trace=True)


def test_quantized_weights_and_all_logits(llama_8b):
    """bitsandbytes' NF4 weights take about a third of bfloat16's for an 8B model (the embeddings and head stay
    16-bit). The prefill's logits for every position (a plain forward) raise its peak over generate's, which asks for
    the last position's only (logits_to_keep=1); once the next token is chosen, both are dropped."""
    base = llama_8b
    nf4 = generation_memory(LLAMA, 2048, quantization="nf4")
    every = generation_memory(LLAMA, 2048, logits="all")
    assert 0.3 < nf4.weights_bytes / base.weights_bytes < 0.4 and nf4.kv_cache_bytes == base.kv_cache_bytes
    assert every.weights_bytes == base.weights_bytes and every.prefill_peak_bytes > base.prefill_peak_bytes
    assert every.timeline[1][1] == base.timeline[1][1]  # the logits are dropped after the next token: the same after
