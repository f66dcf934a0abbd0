"""Hugging Face causal language models, built from their config alone (lesson 09).

``AutoModelForCausalLM.from_config``, never weights: on ``meta`` when simulated, so an 8B model costs nothing to
build. A config needing ``trust_remote_code``, or whose ``model_type`` the pinned ``transformers`` does not know, is
refused in one line. Only building lives here; the step's recipe (:data:`helpers.step.RECIPE`) does the rest.

Models run with ``use_cache=False`` and token ids without ``attention_mask``: ``transformers`` then passes
``is_causal=True`` and, with grouped-query attention, ``enable_gqa=True`` (``use_gqa_in_sdpa``,
``transformers/integrations/sdpa_attention.py``). On fake tensors its packed-sequence check
(``find_packed_sequence_indices``, ``masking_utils.py``) cannot read the positions and would build a full mask; so
"sdpa" is :data:`SDPA`, Hugging Face's SDPA forward with a mask function that returns no mask exactly when the mask is
the plain causal one, as ``transformers`` does on real tensors. "eager" keeps the full scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from ..errors import Refused, first_line
# SHIPPED and load_config are also the lessons' names for them here (hf.SHIPPED, hf.load_config)
from ..hf_config import SHIPPED, config_label, load_config  # noqa: F401

#: The name "sdpa" models are built with: Hugging Face's SDPA forward, :func:`_causal_sdpa_mask` its mask function.
SDPA = "sdpa_causal_skip"


def _causal_sdpa_mask(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset=0,
                      attention_mask=None, local_size=None, **kwargs):
    """``transformers``' ``sdpa_mask``, but None (``is_causal=True``) for a plain causal mask, even on fake tensors."""
    from transformers.masking_utils import sdpa_mask

    if (attention_mask is None and q_length == kv_length and isinstance(q_offset, int) and q_offset == 0
            and isinstance(kv_offset, int) and kv_offset == 0 and (local_size is None or local_size >= kv_length)):
        return None
    return sdpa_mask(batch_size, q_length, kv_length, q_offset, kv_offset, attention_mask=attention_mask,
                     local_size=local_size, **kwargs)


#: The attention of a served model as vLLM runs it (:mod:`helpers.vllm_profile`), for models Hugging Face runs only
#: with its eager attention (Gemma-2's logit softcapping) or with a mask tensor (sliding windows): vLLM's FlashAttention
#: backend applies the softcap and the window inside the kernel (``logits_soft_cap``, ``sliding_window`` of
#: ``FlashAttentionImpl``, ``vllm/v1/attention/backends/flash_attn.py``, v0.19.0; the Gemma-2 logs of
#: :mod:`helpers.teaching.vllm_logs` print "Using FLASH_ATTN attention backend"), so no score or mask is stored and
#: its memory is that of a causal flash kernel: ``scaled_dot_product_attention`` with ``is_causal=True`` and no mask
#: stands for it (its softcap and window, which change values and not sizes, are dropped).  Not a training kernel.
FLASH_IN_KERNEL = "vllm_kernel"  # no "sdpa", "flash" or "flex" in it: transformers checks those names


def _flash_in_kernel(module, query, key, value, attention_mask, **kwargs):
    """:data:`FLASH_IN_KERNEL`: transformers' SDPA forward, causal, without the mask, the softcap and the window."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    for name in ("softcap", "sliding_window"):
        kwargs.pop(name, None)
    return sdpa_attention_forward(module, query, key, value, None, **kwargs)


def _no_mask(*args, **kwargs):
    """No mask tensor: the kernel is causal (and windowed) by itself."""
    return None


def _register_sdpa() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register(SDPA, sdpa_attention_forward)
    AttentionMaskInterface.register(SDPA, _causal_sdpa_mask)


@dataclass(frozen=True)
class CausalLMBuilder:
    """A function of no arguments that builds one Hugging Face causal LM from ``config`` (a ``PretrainedConfig``),
    with ``attn_implementation`` ``"sdpa"``, ``"eager"`` or :data:`FLASH_IN_KERNEL` (the serving profile run's);
    ``label``: its name in profiles."""

    config: Any
    attn_implementation: str = "sdpa"
    label: str = ""

    @property
    def vocab_size(self) -> int:
        """The vocabulary: token ids are below it."""
        return self.config.get_text_config().vocab_size

    @property
    def context(self) -> int | None:
        """The longest sequence (``max_position_embeddings``; None without one, as BLOOM's ALiBi)."""
        return getattr(self.config.get_text_config(), "max_position_embeddings", None)

    @property
    def blocks(self) -> int:
        """The decoder layers (``num_hidden_layers``)."""
        return self.config.get_text_config().num_hidden_layers

    def layers_differ(self) -> str | None:
        """Why this config's decoder layers may not all run alike (per-layer lists that differ, sliding windows or
        mixture-of-experts on some layers only), or None when they do."""
        text, n = self.config.get_text_config().to_dict(), self.blocks
        for key, value in text.items():
            if isinstance(value, (list, tuple)) and len(value) == n and len({str(v) for v in value}) > 1:
                return f"its {key} differ from layer to layer"
        if text.get("use_sliding_window") and (text.get("max_window_layers") or 0) < n:
            return "sliding-window attention on some layers only (max_window_layers)"
        for key, plain in (("mlp_only_layers", None), ("first_k_dense_replace", 0), ("decoder_sparse_step", 1),
                           ("moe_layer_freq", 1)):
            if text.get(key) not in (plain, None, [], ()):
                return f"{key} makes some layers differ from the others"
        return None

    def at_depth(self, n: int) -> "CausalLMBuilder":
        """The same model with ``n`` decoder layers (per-layer lists cut to ``n``)."""
        data = self.config.to_dict()
        text = data.get("text_config", data) if self.config.get_text_config() is not self.config else data
        for key, value in list(text.items()):
            if isinstance(value, (list, tuple)) and len(value) == self.blocks:
                text[key] = list(value)[:n]
        layers = self.config.get_text_config().attribute_map.get("num_hidden_layers", "num_hidden_layers")
        text[layers] = n  # BLOOM's is n_layer
        config = self.config.__class__.from_dict(data)
        config.name_or_path = self.config.name_or_path
        return CausalLMBuilder(config, self.attn_implementation, self.label)

    def __call__(self) -> nn.Module:
        return self._build()

    def _build(self) -> nn.Module:
        import torch
        from transformers import AutoModelForCausalLM

        config = self.config.__class__.from_dict(self.config.to_dict())
        config.use_cache = False  # a training step keeps no KV cache
        attn_implementation = self.attn_implementation
        if attn_implementation == "sdpa":
            _register_sdpa()
            attn_implementation = SDPA
        elif attn_implementation == FLASH_IN_KERNEL:
            from transformers import AttentionInterface, AttentionMaskInterface

            AttentionInterface.register(FLASH_IN_KERNEL, _flash_in_kernel)
            AttentionMaskInterface.register(FLASH_IN_KERNEL, _no_mask)
        try:
            model = AutoModelForCausalLM.from_config(config, attn_implementation=attn_implementation,
                                                     dtype=torch.float32, trust_remote_code=False)
        except Exception as e:  # a ValueError: never the backend's fallback to a real (CPU-sized) build
            raise Refused(f"transformers cannot build a causal LM from {config_label(self.config)}: "
                          f"{first_line(e)}") from None
        return model.train()


def causal_lm(config: Any) -> CausalLMBuilder:
    """The :class:`CausalLMBuilder` of ``config`` (anything :func:`load_config` takes); raises as it does."""
    return CausalLMBuilder(load_config(config), label=config_label(config))


def build_causal_lm(config: Any, attn_implementation: str = "sdpa") -> nn.Module:
    """The Hugging Face causal LM of ``config``, in training mode, float32, on the default device.

    Raises:
        ValueError: in one line, as :func:`load_config` does, or when ``transformers`` cannot build it.
    """
    if attn_implementation not in ("sdpa", "eager"):
        raise ValueError(f"unknown attn_implementation {attn_implementation!r}; use sdpa or eager")
    return CausalLMBuilder(load_config(config), attn_implementation)()
