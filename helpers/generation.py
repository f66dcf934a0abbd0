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

Every decode step is a forward pass of every layer: with a dynamic cache, a model of at least
:data:`helpers.depth.MIN_BLOCKS` alike layers has its generation written exactly from the same generation traced with
6 and 7 layers (:func:`_written`, :mod:`helpers.depth`'s template), in about 0.6 of the full trace's time for the
lesson's Llama-3.1 8B, 16 new tokens (``full_trace=True``: every layer traced, the same profile).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from . import depth
from .config import check_int
from .engine.meter import Meter
from .hf_config import is_hf_config
from .formats import FOR_GENERATION
from .models import resolve_model
from .profile import step_config
from .shallow import (NotRepeated, ShallowStep, ShallowStepTracer, ShallowStepTracker, block_labels, block_list,
                      block_of, log_items)
from .step import StepRunner, owned_storages

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
                      device: str = "simulated", attention: str = "auto", full_trace: bool = False) -> GenerationProfile:
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
        full_trace: trace every block of a model of alike blocks, instead of writing its generation exactly from the
            same generation traced with a few blocks (:func:`_written`; :func:`helpers.depth.applies` says where that
            applies: the simulated GPU, at least :data:`helpers.depth.MIN_BLOCKS` blocks) with a dynamic cache (a
            ``StaticCache`` makes a tensor per layer when it is created, before any block runs, which the template
            cannot repeat).  The same profile either way, every field (``tests/test_generation.py``).

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
                         frozen=True, quantization=quantization, device=device, attention=attention,
                         full_trace=full_trace)
    spec = resolve_model(config.model, config.num_classes, config.name)
    run = (prompt_len, new_tokens, batch_size, cache, logits)
    if cache == "dynamic" and depth.applies(config, spec)[0]:  # a StaticCache makes a tensor per layer outside them
        try:
            return _written(config, spec, *run)
        except NotRepeated:
            pass  # not made of alike blocks after all: every block traced
    runner = StepRunner(config, spec=spec)
    timeline, kv = _generate(runner, spec.name, *run)
    return _profile(spec.name, run, quantization, timeline, sum(kv))


def _profile(name: str, run: tuple, quantization: str, timeline: list, kv: int) -> GenerationProfile:
    """The :class:`GenerationProfile` of a generation ``run`` (:func:`_generate`'s arguments) from its ``timeline``
    and the bytes of its cache ``kv``."""
    prompt_len, new_tokens, batch_size, cache, logits = run
    decode = max((peak for _, _, peak in timeline[2:]), default=0)
    return GenerationProfile(name, batch_size, prompt_len, new_tokens, cache, quantization, logits,
                             timeline[0][1], kv, timeline[1][2], decode, tuple(timeline))


def _generate(runner: StepRunner, name: str, prompt_len: int, new_tokens: int, batch_size: int, cache: str,
              logits: str, tracer=None) -> tuple[list, list[int]]:
    """The module's steps run on ``runner`` (its model named ``name`` in messages), under ``tracer`` where given (a
    :class:`helpers.shallow.ShallowStepTracer`'s class, for :func:`_written`): the timeline, ``(moment, allocated
    after it, peak during it)``, and the bytes of each layer's keys and values after the last step
    (:func:`_cache_bytes`).

    Raises:
        ValueError: for a model that is not a causal LM, or a prompt longer than its positions.
    """
    hf = getattr(runner.model, "config", None)
    if hf is None or not hasattr(runner.model, "generation_config"):
        raise ValueError(f"{name} is not a Hugging Face causal language model: generation_memory needs one")
    positions = getattr(hf, "max_position_embeddings", None)
    if positions is not None and prompt_len + new_tokens > positions:
        raise ValueError(f"prompt_len + new_tokens = {prompt_len + new_tokens:,} tokens is beyond {name}'s "
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
        with tracer(meter, net) if tracer is not None else contextlib.nullcontext() as traced:
            if traced is not None:  # what came before is labelled by its owner's block (helpers.shallow.block_labels)
                traced.record(None, "parameters and buffers", "model")
            ids = runner.batch().inputs[0]
            past = _cache(cache, hf, batch_size, prompt_len + new_tokens)
            outputs = net(input_ids=ids, past_key_values=past, use_cache=True,
                          logits_to_keep=1 if logits == "last" else 0)
            ids = _next(ids, outputs)
            del outputs
            moment("prefill")
            for step in range(1, new_tokens):
                outputs = net(input_ids=ids[:, -1:], past_key_values=past, use_cache=True)
                ids = _next(ids, outputs)
                del outputs
                moment(f"decode {step}")
        kv = _cache_bytes(meter, past)
    return timeline, kv


def _written(config, spec, prompt_len: int, new_tokens: int, batch_size: int, cache: str,
             logits: str) -> GenerationProfile:
    """The generation of a model of ``spec.blocks`` alike blocks written exactly from the same generation traced with
    each of :data:`helpers.depth.DEPTHS` blocks, as :func:`helpers.depth.write_step` writes a training step: each
    traced generation read block by block (:mod:`helpers.shallow`), one template learned from both
    (:func:`helpers.depth.template_of`), which must write both traced logs again entry for entry (events, storages,
    sizes, markers) before it writes the log of ``spec.blocks`` blocks.  The timeline is that log replayed between
    the moments (each a ``reset`` marker, :meth:`helpers.engine.meter.Meter.reset_peak`), as the meter counts it; the
    cache's bytes are ``spec.blocks`` times one layer's, which must be the same in every layer at both depths.

    Raises:
        NotRepeated: where the traced generations do not repeat block by block, or their layers' caches differ.
    """
    run, shallow_steps, per_layer = (prompt_len, new_tokens, batch_size, cache, logits), [], set()
    for n in depth.DEPTHS:
        config_n, spec_n = depth.shallow(config, spec, n)
        tracker = ShallowStepTracker()
        meter = Meter(config_n.device, attention=config_n.attention, tracker=tracker)
        runner = StepRunner(config_n, meter, spec=spec_n)
        timeline, kv = _generate(runner, spec.name, *run, tracer=ShallowStepTracer)
        log, storages, markers = _traced_log(meter, tracker)
        if _replayed(log, markers)[-len(timeline):] != [(a, p) for _, a, p in timeline]:
            raise NotRepeated("the log replayed does not give the meter's timeline")
        blocks = block_list(runner.model, n)
        owned, states = owned_storages(runner)
        owners = {serial: block_of(name, blocks) for name, serials in owned.items() for serial in serials}
        for name, serials in states:
            owners.update(dict.fromkeys(serials, block_of(name, blocks)))
        items = log_items(log, markers)
        labels = block_labels(items, markers, blocks, owners, tracker.parents)
        shallow_steps.append(ShallowStep(n, None, blocks, log, storages, markers, items, labels))
        per_layer.update(kv)
        if len(kv) != n:
            raise NotRepeated(f"{len(kv)} layers of cache in a model of {n} blocks")
    if len(per_layer) != 1:
        raise NotRepeated(f"the layers' caches differ: {sorted(per_layer)} bytes")
    low, high = shallow_steps
    if low.blocks != high.blocks:
        raise NotRepeated(f"the lists of blocks differ: {low.blocks} and {high.blocks}")
    template = depth.merge_templates(depth.template_of(high), depth.template_of(low))
    for s in (low, high):
        if depth.write_log(template, s.depth) != (s.log, s.storages, s.markers):
            raise NotRepeated(f"the template does not write the {s.depth}-block generation again")
    log, _, markers = depth.write_log(template, spec.blocks)
    names = [name for name, _, _ in timeline]
    timeline = [(name, *moment) for name, moment in zip(names, _replayed(log, markers)[-len(names):], strict=True)]
    return _profile(spec.name, run, config.quantization, timeline, spec.blocks * per_layer.pop())


def _traced_log(meter: Meter, tracker: ShallowStepTracker) -> tuple[tuple, tuple, tuple]:
    """``(log, storages, markers)`` of a generation traced under ``meter`` with ``tracker``, in the form
    :func:`helpers.depth.write_log` writes (:func:`helpers.shallow.traced_log`'s): log entries ``(serial, kind,
    bytes)`` up to the meter's exit (:meth:`helpers.engine.meter.Meter.allocation_log`), negative bytes for a free;
    storages ``(None, dtype, shape, bytes)`` by serial; markers ``(position, kind, payload)``."""
    log = tuple((e.serial, e.kind, e.delta) for e in meter.allocation_log())
    storages = tuple((None, tracker.dtypes[s], tracker.shapes[s], tracker.sizes[s]) for s in sorted(tracker.sizes))
    markers = tuple((pos, kind, None if kind == "reset" else (e.phase, e.module, e.module_type, e.note, e.shape))
                    for pos, kind, e in tracker.markers)
    return log, storages, markers


def _replayed(log: tuple, markers: tuple) -> list[tuple[int, int]]:
    """``(allocated, peak)`` at each ``reset`` marker of ``log``, the peak since the one before, as
    :class:`helpers.engine.counting.StorageTracker` counts them: the last are the moments of :func:`_generate` (a
    quantized model's placing resets the peak before them)."""
    resets = [pos for pos, kind, _ in markers if kind == "reset"]
    out, allocated, peak, at = [], 0, 0, 0
    for pos in resets:
        for _, _, delta in log[at:pos]:
            allocated += delta
            peak = max(peak, allocated)
        out.append((allocated, peak))
        peak, at = allocated, pos
    return out


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


def _cache_bytes(meter, past) -> list[int]:
    """Bytes of the storages holding ``past``'s keys and values, each counted once, by layer."""
    sizes, seen, out = meter.storages(), set(), []
    for layer in past.layers:
        serials = {meter.serial_of(t) for t in (layer.keys, layer.values) if isinstance(t, torch.Tensor)} - seen
        serials.discard(None)
        seen |= serials
        out.append(sum(sizes[s][0] for s in serials))
    return out
