"""vLLM's start-up of a model with a vision tower (Gemma-3): what it loads and profiles besides the language model
(lesson 10's published logs, :mod:`helpers.teaching.vllm_logs`).

vLLM v0.19.0 serves ``google/gemma-3-*-it`` as ``Gemma3ForConditionalGeneration``
(``vllm/model_executor/models/gemma3_mm.py``): a SigLIP vision tower (``SiglipVisionModel``, ``siglip.py``), a
projector (``Gemma3MultiModalProjector``) and the Gemma-3 language model (``Gemma3ForCausalLM``, ``gemma3.py``), every
weight in the model's dtype.  Its start-up differs from a text model's in three places (paths inside the ``vllm``
package of the published 0.19.0 wheel):

* **weights** ("Model loading took"): the tower and the projector too, and the language model's rotary tables.
  ``get_rope`` (``model_executor/layers/rotary_embedding/__init__.py``) keeps one ``cos_sin_cache`` per distinct rope
  (``base.py``: ``max_position_embeddings`` rows of ``rotary_dim`` in the model's dtype); Gemma-3's full-attention
  layers use linear scaling by 8 (``linear_scaling_rope.py``: ``max_position_embeddings × factor`` rows), a table of
  1,048,576 positions: 512 MiB at head size 256 (:func:`rope_table_bytes`).
* **the profile run** (``GPUModelRunner.profile_run``, ``v1/worker/gpu_model_runner.py``): first the encoder on a
  batch of dummy images (``_get_mm_dummy_batch``: the pixel values in the model's dtype, ``[items, 3, 896, 896]``,
  made inside the run and alive to its end), ``embed_multimodal`` on them, its outputs kept in ``encoder_cache`` while
  ``_dummy_run`` and ``_dummy_sampler_run`` run, then freed.  ``items`` is the encoder budget over an image's tokens
  (:func:`encoder_items`): "profiled with 32 image items of the maximum feature size" at 8,192 tokens.
* the text forward pass starts from vLLM's persistent ``inputs_embeds`` buffer (``_prepare_mm_inputs``), made before
  the run; the engine's text run (:func:`helpers.serving.vllm_startup` on the language model's config) starts from
  token ids, whose embedding is freed before the sampler sets the peak.

The encoder is traced here as torch code with vLLM's own shapes and ops (:func:`encoder_run`), not as Hugging Face's
``SiglipVisionModel``: vLLM fuses q, k and v in one ``QKVParallelLinear``, adds the residuals in place and runs the
vision attention with FlashAttention (the logs: "Using AttentionBackendEnum.FLASH_ATTN for MMEncoderAttention"),
which keeps no scores; Hugging Face's ``SiglipAttention`` projects q, k and v apart and hands them to the attention
function the engine picks.  (The language model's attention, vLLM's ``TRITON_ATTN`` in these logs, keeps no scores
either: the engine's text run stands for it with a flash kernel, as for Gemma-2.)  The activation peak is the larger of the encoder's peak and the text run's peak with the encoder's outputs and the pixel
values held (:func:`vllm_startup_mm`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .allocator.rules import round_up
from .engine.meter import Meter
from .errors import first_line
from .hf_config import config_label, load_config
from .serving import DTYPES, StartupAccount, WouldNotStart, vllm_startup

#: The multimodal architectures whose encoder this module traces.
MODEL_TYPES = ("gemma3",)
#: The rope types whose tables :func:`rope_table_bytes` sizes (``get_rope``'s ``"default"`` and ``"linear"``).
ROPE_TYPES = ("default", "linear")


@dataclass(frozen=True)
class EncoderRun:
    """The vision encoder of one multimodal model in vLLM's profile run, traced on the simulated GPU.

    Attributes:
        items: the dummy images encoded at once.
        parameters, weights: the tower's and the projector's parameters, and their bytes as placed.
        peak: the peak allocated above what was allocated before the run (pixel values included).
        held: what stays allocated after the encoder returns: the pixel values and the image embeddings
            ``[items, mm_tokens_per_image, text hidden size]``, kept while the text pass runs.
    """

    items: int
    parameters: int
    weights: int
    peak: int
    held: int


def is_multimodal(model) -> bool:
    """Whether ``model`` (anything :func:`helpers.hf_config.load_config` takes) is one of :data:`MODEL_TYPES`, whose
    start-up :func:`vllm_startup_mm` accounts."""
    return getattr(load_config(model), "model_type", None) in MODEL_TYPES


def encoder_items(tokens_per_item: int, max_num_batched_tokens: int, max_model_len: int, max_num_seqs: int) -> int:
    """The dummy items vLLM v0.19.0 encodes at once in its profile run (``MultiModalBudget._get_max_items``,
    ``multimodal/encoder_budget.py``): the encoder budget (``max(max_num_batched_tokens, tokens_per_item)``,
    ``compute_mm_encoder_budget`` in ``v1/core/encoder_cache_manager.py``) over an item's tokens, at most
    ``max_num_seqs`` requests of ``max(1, max_model_len // tokens_per_item)`` items each (the per-prompt limit, by
    default above that, is taken as not binding), at least 1.  Gemma-3 at 8,192 tokens: 8,192 // 256 = 32.

    Raises:
        ValueError: for a count below 1.
    """
    for name, value in (("tokens_per_item", tokens_per_item), ("max_num_batched_tokens", max_num_batched_tokens),
                        ("max_model_len", max_model_len), ("max_num_seqs", max_num_seqs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    budget = max(max_num_batched_tokens, tokens_per_item)
    per_prompt = max(1, max_model_len // tokens_per_item)
    return max(1, min(budget // tokens_per_item, max_num_seqs * per_prompt))


def rope_table_bytes(text, dtype_bytes: int) -> int:
    """Bytes of vLLM v0.19.0's rotary tables for a Hugging Face text config ``text``: one ``cos_sin_cache`` per
    distinct rope of its layer types (``get_rope`` keeps one per parameter set), ``rows × rotary_dim`` elements of
    ``dtype_bytes`` each, rounded up to 512 bytes (the layer types' ropes of ``rope_parameters``, as ``Gemma3Attention``
    picks them in ``gemma3.py``, or its one rope); ``rows`` is ``max_position_embeddings``, times the factor for linear
    scaling (``LinearScalingRotaryEmbedding._compute_cos_sin_cache``); ``rotary_dim`` the head size times
    ``partial_rotary_factor``.  Gemma-3 4B: 1,048,576 × 256 and 131,072 × 256 in bfloat16, 576 MiB.

    Raises:
        ValueError: for a rope type other than :data:`ROPE_TYPES`.
    """
    params = getattr(text, "rope_parameters", None) or {}
    if params and all(isinstance(v, dict) for v in params.values()):  # one rope per layer type (transformers 5)
        used = set(getattr(text, "layer_types", None) or params)
        kinds = [rope for kind, rope in params.items() if kind in used]
    else:
        kinds = [params]
    head = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    tables = {}
    for rope in kinds:
        kind = rope.get("rope_type", "default")
        if kind not in ROPE_TYPES:
            raise ValueError(f"rope_type {kind!r}: vLLM's table for it is not sized here (only {', '.join(ROPE_TYPES)})")
        rows = text.max_position_embeddings * (int(rope.get("factor", 1)) if kind == "linear" else 1)
        tables[tuple(sorted((k, str(v)) for k, v in rope.items()))] = rows * int(head * rope.get(
            "partial_rotary_factor", 1.0))
    return sum(round_up(n * dtype_bytes) for n in tables.values())


def _linear(rows: int, cols: int, device, dtype, bias: bool = True) -> tuple:
    """A linear layer's weight ``[rows, cols]`` and bias ``[rows]`` (vLLM's ``ColumnParallelLinear`` and kin on one
    card), made on ``device``."""
    return (torch.empty(rows, cols, device=device, dtype=dtype),
            torch.empty(rows, device=device, dtype=dtype) if bias else None)


def _tower(vision, text_hidden: int, device, dtype) -> dict:
    """The weights vLLM v0.19.0 holds for the SigLIP tower (``SiglipVisionTransformer`` with its post-layernorm and no
    head: ``vision_use_head`` false) and Gemma-3's projector, made on ``device`` in ``dtype``."""
    c, i = vision.hidden_size, vision.intermediate_size
    norm = lambda: (torch.empty(c, device=device, dtype=dtype), torch.empty(c, device=device, dtype=dtype))  # noqa
    layers = [dict(ln1=norm(), qkv=_linear(3 * c, c, device, dtype), out=_linear(c, c, device, dtype), ln2=norm(),
                   fc1=_linear(i, c, device, dtype), fc2=_linear(c, i, device, dtype))
              for _ in range(vision.num_hidden_layers)]
    positions = (vision.image_size // vision.patch_size) ** 2
    return dict(patch=_linear(c, vision.num_channels * vision.patch_size ** 2, device, dtype),
                position=torch.empty(positions, c, device=device, dtype=dtype),
                position_ids=torch.arange(positions, device=device), layers=layers, post=norm(),
                projection=torch.empty(c, text_hidden, device=device, dtype=dtype),
                soft_norm=torch.empty(c, device=device, dtype=dtype))


def _attention(x: torch.Tensor, layer: dict, heads: int) -> torch.Tensor:
    """``SiglipAttention.forward`` (``siglip.py``): the fused qkv projection, FlashAttention (``_forward_fa`` of
    ``mm_encoder_attention.py`` through ``flash_attn_maxseqlen_wrapper``: ``cu_seqlens`` in int32, the output, and the
    kernel's float32 log-sum-exp per head and token while it runs), the output projection."""
    items, seq, width = x.shape
    qkv = F.linear(x, *layer["qkv"])
    q, k, v = qkv.chunk(3, dim=-1)
    cu_seqlens = torch.arange(0, (items + 1) * seq, step=seq, dtype=torch.int32, device=x.device)  # noqa: F841
    lse = torch.empty(heads, items * seq, dtype=torch.float32, device=x.device)
    out = torch.empty(items * seq, heads, width // heads, dtype=x.dtype, device=x.device)
    del lse
    return F.linear(out.view(items, seq, width), *layer["out"])


def _encoder_layer(hidden: torch.Tensor, layer: dict, heads: int, eps: float) -> torch.Tensor:
    """``SiglipEncoderLayer.forward``: layer norms, attention and MLP (:func:`_mlp`), the residuals added in place."""
    residual = hidden
    x = F.layer_norm(hidden, hidden.shape[-1:], *layer["ln1"], eps)
    x = _attention(x, layer, heads)
    x += residual
    residual = x
    y = F.layer_norm(x, x.shape[-1:], *layer["ln2"], eps)
    y = _mlp(y, layer)
    y += residual
    return y


def _mlp(x: torch.Tensor, layer: dict) -> torch.Tensor:
    """``SiglipMLP.forward``: ``fc1``, tanh GELU, ``fc2``; its input (the layer norm's output) stays alive in the
    caller while it runs."""
    h = F.linear(x, *layer["fc1"])
    h = F.gelu(h, approximate="tanh")
    return F.linear(h, *layer["fc2"])


def _tower_forward(pixels: torch.Tensor, w: dict, vision) -> torch.Tensor:
    """``SiglipVisionTransformer.forward``: ``SiglipVisionEmbeddings`` (the patch convolution as vLLM's
    ``Conv2dLayer._forward_mulmat`` runs it, ``model_executor/layers/conv.py``: custom ops are off in these runs, so
    ``forward_native``, and a kernel equal to its stride is a matmul on the unfolded patches, copied to rows; the
    positions added in place; its output, the encoder's first input, alive to the end), the encoder layers, the
    post-layernorm."""
    c, k = vision.hidden_size, vision.patch_size
    items, side = pixels.shape[0], vision.image_size // k
    rows = pixels.unfold(2, k, k).unfold(3, k, k).permute(0, 2, 3, 1, 4, 5).reshape(-1, vision.num_channels * k * k)
    patches = F.linear(rows, *w["patch"]).view(items, side, side, c).permute(0, 3, 1, 2)
    del rows
    embeddings = patches.flatten(2).transpose(1, 2)
    embeddings += F.embedding(w["position_ids"], w["position"])
    hidden = embeddings
    for layer in w["layers"]:
        hidden = _encoder_layer(hidden, layer, vision.num_attention_heads, vision.layer_norm_eps)
    return F.layer_norm(hidden, (c,), *w["post"], vision.layer_norm_eps)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``GemmaRMSNorm.forward_native`` (``model_executor/layers/layernorm.py``): in float32, scaled by ``1 + weight``,
    back to ``x``'s dtype."""
    y = x.float()
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)
    return (y * (1.0 + weight.float())).to(x.dtype)


def _project(features: torch.Tensor, w: dict, vision, tokens_per_image: int) -> torch.Tensor:
    """``Gemma3MultiModalProjector.forward`` (``gemma3_mm.py``): the patches as a grid (a copy), average pooling to
    ``tokens_per_image``, Gemma's RMSNorm, the projection: ``[items, tokens_per_image, text hidden]``."""
    items, c, side = features.shape[0], vision.hidden_size, vision.image_size // vision.patch_size
    grid = features.transpose(1, 2).reshape(items, c, side, side).contiguous()
    kernel = side // int(tokens_per_image ** 0.5)
    pooled = F.avg_pool2d(grid, kernel, kernel).flatten(2).transpose(1, 2)
    normed = _rms_norm(pooled, w["soft_norm"], vision.layer_norm_eps)
    return torch.matmul(normed, w["projection"])


def _embed_images(pixels: torch.Tensor, w: dict, vision, tokens_per_image: int) -> torch.Tensor:
    """``Gemma3ForConditionalGeneration._process_image_input``: the tower's features stay alive while the projector
    runs."""
    features = _tower_forward(pixels, w, vision)
    return _project(features, w, vision, tokens_per_image)


def encoder_run(model, dtype: str, items: int) -> EncoderRun:
    """vLLM v0.19.0's vision encoder in the profile run of ``model`` (a Gemma-3 config: :data:`MODEL_TYPES`), traced on
    the simulated GPU as torch code with vLLM's shapes and ops (module docstring): the tower and projector placed in
    ``dtype``, then, under ``torch.inference_mode()``, ``items`` dummy images ``[items, 3, image_size, image_size]``
    in ``dtype`` (``_get_mm_dummy_batch``) and ``embed_multimodal`` on them (:func:`_embed_images`).

    Raises:
        ValueError: in one line, for a model that is not one of :data:`MODEL_TYPES`, an unknown dtype, or ``items``
            below 1.
    """
    config = load_config(model)
    if getattr(config, "model_type", None) not in MODEL_TYPES:
        raise ValueError(f"{config_label(model)}: no vision tower traced here (only {', '.join(MODEL_TYPES)})")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    if isinstance(items, bool) or not isinstance(items, int) or items < 1:
        raise ValueError(f"items must be an integer >= 1, got {items!r}")
    vision, text, torch_dtype = config.vision_config, config.get_text_config(), DTYPES[dtype]
    meter = Meter("simulated")
    with meter, torch.inference_mode():
        weights = _tower(vision, text.hidden_size, meter.device, torch_dtype)
        placed = meter.allocated()
        meter.reset_peak()
        pixels = torch.empty(items, vision.num_channels, vision.image_size, vision.image_size, dtype=torch_dtype,
                             device=meter.device)
        try:
            embeds = _embed_images(pixels, weights, vision, config.mm_tokens_per_image)
        except (RuntimeError, TypeError, ValueError) as e:
            raise ValueError(f"{config_label(model)} cannot run vLLM's encoder profile: {first_line(e)}") from None
        peak, held = meter.peak() - placed, meter.allocated() - placed
        del embeds, pixels
    parameters = sum(t.numel() for t in _flat(weights) if t.is_floating_point())
    return EncoderRun(items, parameters, placed, peak, held)


def _flat(weights: dict) -> list:
    """Every tensor of :func:`_tower`'s weights."""
    out = []
    for value in weights.values():
        for item in (value if isinstance(value, list) else [value]):
            parts = item.values() if isinstance(item, dict) else [item]
            for part in parts:
                out.extend(t for t in (part if isinstance(part, tuple) else (part,)) if t is not None)
    return out


def vllm_startup_mm(model, **options) -> StartupAccount:
    """vLLM v0.19.0's start-up account of a Gemma-3 model served with its vision tower, on one card: the language
    model's account (:func:`helpers.serving.vllm_startup` on ``model``'s text config, with ``options``), then

    * ``weights_bytes`` plus the tower's and projector's (:func:`encoder_run`) and vLLM's rotary tables
      (:func:`rope_table_bytes`); ``parameter_count`` plus the tower's and projector's;
    * ``activation_peak_bytes``: the larger of the encoder's peak and the text run's peak with the encoder's held
      tensors (:attr:`EncoderRun.held`) added, on :func:`encoder_items` images.

    The KV cache is the language model's (its layers and groups), as vLLM sizes it.

    Raises:
        WouldNotStart (a ValueError): in one line, when vLLM would refuse to start with these figures.
        ValueError: in one line, as :func:`helpers.serving.vllm_startup`, for a model that is not one of
            :data:`MODEL_TYPES`, or tensor or pipeline parallelism (not modelled for a vision tower).
    """
    config, label = load_config(model), config_label(model)
    if getattr(config, "model_type", None) not in MODEL_TYPES:
        raise ValueError(f"{label}: not a multimodal model traced here (only {', '.join(MODEL_TYPES)})")
    if options.get("tensor_parallel_size", 1) != 1 or options.get("pipeline_parallel_size", 1) != 1:
        raise ValueError(f"{label}: a vision tower's start-up is modelled on one card only (tensor_parallel_size "
                         f"and pipeline_parallel_size 1)")
    text = dict(config.get_text_config().to_dict(), _name_or_path=label)
    try:
        account = vllm_startup(text, **options)
    except WouldNotStart as e:
        account = e.account
    items = encoder_items(config.mm_tokens_per_image, account.max_num_batched_tokens, account.max_model_len,
                          account.max_num_seqs)
    run = encoder_run(config, account.dtype, items)
    rope = rope_table_bytes(config.get_text_config(), DTYPES[account.dtype].itemsize)
    account = dataclasses.replace(
        account, parameter_count=account.parameter_count + run.parameters,
        weights_bytes=account.weights_bytes + run.weights + rope,
        activation_peak_bytes=max(run.peak, account.activation_peak_bytes + run.held))
    if account.refusal:
        raise WouldNotStart(account.refusal, account)
    return account
