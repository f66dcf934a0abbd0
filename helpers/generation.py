"""Memory of generating text: the weights, the KV cache, the prefill and the decode steps (issue 35).

A causal language model generates in two phases.  **Prefill** runs the whole prompt through the model once and keeps
every layer's keys and values for it (the *KV cache*); **decode** then runs one new token at a time, each attending to
the cache and adding its own keys and values to it.  :func:`generation_memory` traces both on the engine, the way
``transformers``' ``GenerationMixin._sample`` (``transformers/generation/utils.py``) runs greedy decoding:

1. the prefill forward with the cache and ``logits_to_keep=1`` (``generate`` passes it to a model that takes it, so
   the prompt's logits are computed for its last position only);
2. ``outputs.logits[:, -1].to(copy=True, dtype=torch.float32)``, the next token's scores in float32, and their
   ``argmax``;
3. the ids grown by ``torch.cat`` and the output dropped (``del outputs``);
4. each decode step: the forward of the one new token per sequence with the cache, then 2 and 3 again.

What it leaves out: ``generate``'s stopping checks read tensor values (``unfinished_sequences.max() == 0``), which fake
tensors do not have, so every sequence runs ``new_tokens`` steps; sampling (``do_sample``) would add a float32
softmax of the scores and ``multinomial``, a few vocabulary-sized rows.  Under ``torch.inference_mode()`` and
``model.eval()``, in the model's parameter dtype, as ``from_pretrained(..., dtype=torch.bfloat16)`` loads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import check_int
from .hf_config import is_hf_config
from .formats import FOR_GENERATION
from .profile import step_config
from .step import StepRunner

#: The caches :func:`generation_memory` can use: ``transformers``' classes of the same names.
CACHES = ("dynamic", "static")
#: The most decode steps traced (each one is a forward pass of the whole model).
MAX_NEW_TOKENS = 64
#: Which prefill logits are computed: the last position's (``generate`` passes ``logits_to_keep=1``), or all.
LOGITS = ("last", "all")


@dataclass(frozen=True)
class GenerationProfile:
    """What :func:`generation_memory` measured; every figure in bytes of tensor memory (``memory_allocated``).

    Attributes:
        model: the model's label.
        batch_size, prompt_len, new_tokens: sequences, prompt tokens each, tokens generated each.
        cache: ``"dynamic"`` or ``"static"`` (:data:`CACHES`).
        quantization, logits: as :func:`generation_memory` was given them.
        weights_bytes: the parameters and buffers once placed.
        kv_cache_bytes: the cache's keys and values after the last decode step.
        prefill_peak_bytes: the peak from the prefill's start to its next token, weights and cache included.
        decode_peak_bytes: the peak over the decode steps (0 when ``new_tokens`` is 1: the prefill gives the first).
        timeline: ``(moment, allocated after it, peak during it)`` in order: ``"weights"``, ``"prefill"``, then
            ``"decode 1"``, ``"decode 2"``, ...
    """

    model: str
    batch_size: int
    prompt_len: int
    new_tokens: int
    cache: str
    quantization: str
    logits: str
    weights_bytes: int
    kv_cache_bytes: int
    prefill_peak_bytes: int
    decode_peak_bytes: int
    timeline: tuple[tuple[str, int, int], ...]

    @property
    def peak_allocated_bytes(self) -> int:
        """The highest bytes allocated at any moment of the generation."""
        return max(self.prefill_peak_bytes, self.decode_peak_bytes)


def generation_memory(model, prompt_len: int, new_tokens: int = 1, batch_size: int = 1, *, cache: str = "dynamic",
                      param_dtype: str = "bfloat16", quantization: str = "none", logits: str = "last",
                      device: str = "simulated", attention: str = "auto") -> GenerationProfile:
    """Trace greedy generation of ``new_tokens`` tokens after prompts of ``prompt_len`` tokens (the module's steps).

    Args:
        model: a Hugging Face causal LM: a shipped config's name (``"meta-llama/Llama-3.1-8B"``), a config or its dict.
        prompt_len: tokens per prompt; at most the model's positions less ``new_tokens``.
        new_tokens: tokens generated per sequence, 1 to :data:`MAX_NEW_TOKENS` (the first comes from the prefill).
        batch_size: sequences generated together (prompts of equal length, no padding).
        cache: ``"dynamic"`` (``DynamicCache``: each layer's keys and values grow by ``torch.cat`` at every step, so
            a layer's old and new cache are both alive for a moment) or ``"static"`` (``StaticCache``: each layer's
            keys and values allocated for ``prompt_len + new_tokens`` tokens when the prefill first reaches the layer,
            ``lazy_initialization`` in ``transformers/cache_utils.py``, then written in place).
        param_dtype: the weights' dtype, one of :data:`helpers.config.PARAM_DTYPES`.
        quantization: one of :data:`FOR_GENERATION`: the linear layers' weights as loaded (``"none"``), or loaded into
            bitsandbytes' ``Linear4bit`` (NF4: half a byte a weight and a float32 scale per block of 64) or
            ``Linear8bitLt`` (LLM.int8(): a byte a weight and a float32 scale per row), computing in bfloat16
            (:mod:`helpers.techniques.quantization`); the embeddings, norms and the head stay in ``param_dtype``.
        logits: one of :data:`LOGITS`: ``"last"``, the prefill's logits for the last position only (``generate``);
            ``"all"``, for every position, as a plain ``model(input_ids)`` computes them.
        device, attention: as for :func:`helpers.profile.profile_step`.

    Returns:
        The :class:`GenerationProfile`.

    Raises:
        ValueError: in one line, for a model that is not a causal LM, a size out of range, an unknown cache, or a
            prompt longer than the model's positions.
    """
    check_int("prompt_len", prompt_len, 1)
    check_int("new_tokens", new_tokens, 1, MAX_NEW_TOKENS)
    check_int("batch_size", batch_size, 1)
    for name, value, choices in (("cache", cache, CACHES), ("quantization", quantization, FOR_GENERATION),
                                 ("logits", logits, LOGITS)):
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    if not is_hf_config(model):
        raise ValueError(f"{model!r} is not a Hugging Face causal language model's config: generation_memory needs "
                         f"one (a shipped name such as 'meta-llama/Llama-3.1-8B', a config or its dict)")
    config = step_config(model, batch_size, 224, "generation_memory", seq_len=prompt_len, param_dtype=param_dtype,
                         frozen=True, quantization=quantization, device=device, attention=attention)
    runner = StepRunner(config)
    hf = getattr(runner.model, "config", None)
    if hf is None or not hasattr(runner.model, "generation_config"):
        raise ValueError(f"{runner.name} is not a Hugging Face causal language model: generation_memory needs one")
    positions = getattr(hf, "max_position_embeddings", None)
    if positions is not None and prompt_len + new_tokens > positions:
        raise ValueError(f"prompt_len + new_tokens = {prompt_len + new_tokens:,} tokens is beyond {runner.name}'s "
                         f"{positions:,} positions")
    meter, timeline = runner.meter, []

    def moment(name: str) -> int:
        timeline.append((name, meter.allocated(), meter.peak()))
        meter.reset_peak()
        return timeline[-1][2]

    with meter, torch.inference_mode():
        net = runner.place()
        net.eval()
        moment("weights")
        ids = runner.batch().inputs[0]
        past = _cache(cache, hf, batch_size, prompt_len + new_tokens)
        outputs = net(input_ids=ids, past_key_values=past, use_cache=True, logits_to_keep=1 if logits == "last" else 0)
        ids = _next(ids, outputs)
        del outputs
        prefill = moment("prefill")
        for step in range(1, new_tokens):
            outputs = net(input_ids=ids[:, -1:], past_key_values=past, use_cache=True)
            ids = _next(ids, outputs)
            del outputs
            moment(f"decode {step}")
        kv = _cache_bytes(meter, past)
    decode = max((peak for name, _, peak in timeline[2:]), default=0)
    return GenerationProfile(runner.name, batch_size, prompt_len, new_tokens, cache, quantization, logits,
                             timeline[0][1], kv, prefill, decode, tuple(timeline))


def _cache(kind: str, config, batch_size: int, max_len: int):
    """A new ``DynamicCache`` or ``StaticCache`` for ``config`` (the static one for ``max_len`` tokens)."""
    from transformers import DynamicCache, StaticCache

    if kind == "dynamic":
        return DynamicCache(config=config)
    return StaticCache(config=config, max_cache_len=max_len)


def _next(ids: torch.Tensor, outputs) -> torch.Tensor:
    """``GenerationMixin._sample``'s greedy step: the last position's scores in float32, their argmax, and ``ids``
    grown by it."""
    scores = outputs.logits[:, -1].to(copy=True, dtype=torch.float32)
    return torch.cat([ids, torch.argmax(scores, dim=-1)[:, None]], dim=-1)


def _cache_bytes(meter, past) -> int:
    """Bytes of the storages holding ``past``'s keys and values, each counted once."""
    sizes = meter.storages()
    serials = {meter.serial_of(t) for layer in past.layers for t in (layer.keys, layer.values)
               if isinstance(t, torch.Tensor)}
    return sum(sizes[s][0] for s in serials if s is not None)
