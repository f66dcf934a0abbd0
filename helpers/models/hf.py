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

import contextlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..config import is_hf_config
from ..errors import Refused, first_line

#: Where the shipped configs are (package data).
CONFIG_DIR = Path(__file__).parent / "hf_configs"


@dataclass(frozen=True)
class ShippedConfig:
    """A ``config.json`` shipped with the package (``file`` in :data:`CONFIG_DIR`), its published ``parameters`` count,
    and the ``source`` where the values and the count were checked."""

    file: str
    parameters: int | str
    source: str


#: The configs that ship with the package, by Hub name: they build offline.
SHIPPED: dict[str, ShippedConfig] = {
    "meta-llama/Llama-3.1-8B": ShippedConfig(
        "Llama-3.1-8B.json", 8_030_261_248,
        "config.json of meta-llama/Llama-3.1-8B, as reproduced in citsjtu2020/LLM-Prof sglang/Model_Config.md; "
        "the count as the Hub's model page states it (8.03B)"),
    "Qwen/Qwen2.5-7B": ShippedConfig(
        "Qwen2.5-7B.json", "7.61B (6.53B non-embedding)",
        "config.json of Qwen/Qwen2.5-7B, as reproduced in citsjtu2020/LLM-Prof sglang/Model_Config.md; "
        "the count from the model card (Number of Parameters: 7.61B; non-embedding: 6.53B)"),
    "mistralai/Mistral-7B-v0.3": ShippedConfig(
        "Mistral-7B-v0.3.json", "7.25B",
        "config.json of mistralai/Mistral-7B-v0.3: no stored copy of the file was found; its sizes are "
        "Mistral 7B's (edadaltocg/mistral-src-finetune finetune/config.py: 4096, 32 layers, 14336, 32 heads, "
        "8 KV heads, rope_theta 1e6) with v0.3's vocabulary extended to 32768 (model card); 7.25B as listed "
        "for it in public tables"),
    "meta-llama/Llama-2-7b-hf": ShippedConfig(
        "Llama-2-7b-hf.json", 6_738_415_616,
        "config.json of meta-llama/Llama-2-7b-hf (transformers 4.31.0.dev0), as printed in public write-ups "
        "(e.g. a chenshake.com post on the Llama 2 files, and transformers' own log of the file with 4.39.1, "
        "which adds only rope_theta 10000.0, attention_bias and attention_dropout at their defaults); "
        "6,738,415,616 parameters, as peft's print_trainable_parameters() prints them for this model"),
    "huggyllama/llama-65b": ShippedConfig(
        "llama-65b.json", 65_285_660_672,
        "LLaMA 65B (Touvron et al., 2023: 8192 wide, 80 layers, 64 heads, 65.2B parameters), as QLoRA's "
        "Guanaco 65B was fine-tuned from it: no stored copy of the Hub's config.json was found; its values are "
        "those of PaddleNLP's llama configuration table (facebook/llama-65b: 8192, 22016, 80 layers, 64 heads, "
        "rms_norm_eps 1e-05, vocabulary 32000, 2048 positions) and EasyLM's LLAMA_STANDARD_CONFIGS['65b'], "
        "with num_key_value_heads 64 written out (LlamaConfig's default: no grouped-query attention); "
        "65,285,660,672 parameters as counted in public tables (the paper rounds it down to 65.2B)"),
    "HuggingFaceTB/SmolLM2-135M": ShippedConfig(
        "SmolLM2-135M.json", 134_515_008,
        "config.json of HuggingFaceTB/SmolLM2-135M, as printed in satyasundar/erav3-s13 README.md (an "
        "earlier revision: max_position_embeddings 2048; the current file has 8192, as other public copies "
        "quote it); 134,515,008 parameters, 106,203,456 without the tied embedding, as counted from the "
        "Hub's model in public write-ups"),
}

#: What :func:`load_config` accepts, for messages.
ACCEPTED = ("a transformers PretrainedConfig, a dict, a path to config.json, "
            f"a shipped name ({', '.join(SHIPPED)}), or a Hub name org/model (online)")

def shipped_configs() -> list[str]:
    """The Hub names of the shipped configs (:data:`SHIPPED`), which build offline."""
    return list(SHIPPED)


def load_config(config: Any):
    """A ``transformers.PretrainedConfig`` from any of :data:`ACCEPTED` (a ``PretrainedConfig`` is copied).

    Raises:
        ValueError: in one line, for a config that needs ``trust_remote_code`` (``auto_map``), an unknown
            ``model_type``, a missing or unreadable file, or a Hub name that cannot be fetched.
    """
    import transformers
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config, PretrainedConfig):
        return _refuse_remote_code(config.__class__.from_dict(config.to_dict()), config.name_or_path or
                                   config.model_type)
    if isinstance(config, dict):
        return _from_dict(dict(config), "the config dict")
    if not isinstance(config, (str, Path)):
        raise ValueError(f"a Hugging Face config must be {ACCEPTED}; got {type(config).__name__}")
    name = str(config)
    if name in SHIPPED:
        data = json.loads((CONFIG_DIR / SHIPPED[name].file).read_text())
        return _from_dict(data, name, name_or_path=name)
    path = Path(name)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.exists():
        if not path.is_file():
            raise ValueError(f"no config file {str(path)!r}")
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read {str(path)!r} as a config.json: {first_line(e)}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{str(path)!r} is not a config.json: it holds no JSON object")
        return _from_dict(data, str(path))
    if name.endswith(("/", "\\")):
        raise ValueError(f"no folder {name!r} holding a config.json")
    if not is_hf_config(name):
        raise ValueError(f"{name!r} is not a Hugging Face config: give {ACCEPTED}")
    offline = (f"cannot fetch the config of {name!r} from the Hugging Face Hub"
               + " ({}); offline, use a local config.json or a shipped name " + f"({', '.join(SHIPPED)})")
    unreachable = _hub_unreachable()
    if unreachable:  # fail at once, not after huggingface_hub's retries (about half a minute)
        raise ValueError(offline.format(unreachable))
    try:  # the Hub: config.json only, never the weights; remote code is never run
        with _quiet_hub():
            loaded = AutoConfig.from_pretrained(name, trust_remote_code=False)
    except Exception as e:  # offline, unknown, gated, remote code: one line, not transformers' traceback
        text = first_line(e)
        if "trust_remote_code" in text:
            raise ValueError(f"{name} needs trust_remote_code (its code is not in transformers "
                             f"{transformers.__version__}): refused, only architectures transformers ships "
                             f"run here") from None
        raise ValueError(offline.format(text)) from None
    return _refuse_remote_code(loaded, name)


def _hub_unreachable() -> str:
    """Why the Hub cannot be asked now (``HF_HUB_OFFLINE``, or no network), or ``""``."""
    import os
    import socket
    from urllib.parse import urlparse

    if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):
        return "HF_HUB_OFFLINE is set"
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        return f"no network: {host} does not resolve"
    return ""


def _quiet_hub():
    """``huggingface_hub``'s warnings off: the one-line error says what failed."""
    return _quiet_logger("huggingface_hub")


@contextlib.contextmanager
def _quiet_logger(name: str):
    """The logger ``name`` shows errors only, while the block runs."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _from_dict(data: dict, where: str, name_or_path: str | None = None):
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    _refuse_remote_code(data, where)
    model_type = data.pop("model_type", None)
    if not model_type:
        raise ValueError(f"{where} has no model_type: it is not a transformers config.json")
    if model_type not in CONFIG_MAPPING:
        raise ValueError(f"transformers {transformers.__version__} does not know the architecture "
                         f"{model_type!r} (from {where}); it needs a newer transformers or remote code, "
                         f"and neither runs here")
    data.pop("transformers_version", None)
    try:
        config = AutoConfig.for_model(model_type, **data)
    except Exception as e:
        raise ValueError(f"transformers cannot make a {model_type} config from {where}: {first_line(e)}") from None
    if name_or_path:
        config.name_or_path = name_or_path
    return config


def _refuse_remote_code(config, where: str):
    """``config`` (a dict or a PretrainedConfig), unless it needs code from the Hub."""
    auto_map = config.get("auto_map") if isinstance(config, dict) else getattr(config, "auto_map", None)
    if auto_map:
        raise ValueError(f"{where} needs trust_remote_code (auto_map: {', '.join(auto_map)}): refused, only "
                         f"architectures the pinned transformers ships run here")
    return config


def config_label(config: Any) -> str:
    """A short name for a config: its Hub name or file, else its ``model_type``."""
    if isinstance(config, (str, Path)):
        return str(config)
    if isinstance(config, dict):
        return config.get("_name_or_path") or config.get("model_type") or "config"
    return getattr(config, "name_or_path", "") or getattr(config, "model_type", "") or type(config).__name__


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


def _register_sdpa() -> None:
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    AttentionInterface.register(SDPA, sdpa_attention_forward)
    AttentionMaskInterface.register(SDPA, _causal_sdpa_mask)


@dataclass(frozen=True)
class CausalLMBuilder:
    """A function of no arguments that builds one Hugging Face causal LM from ``config`` (a ``PretrainedConfig``),
    with ``attn_implementation`` ``"sdpa"`` or ``"eager"``; ``label``: its name in profiles."""

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
