"""Hugging Face causal language models, built from their config alone (for lesson 09).

A ``transformers`` model class is built from a config (never its weights) with
``AutoModelForCausalLM.from_config``: on the ``meta`` device when the step is
simulated, so an 8B model costs nothing to build.  A config may be

* a ``transformers.PretrainedConfig``, or a dict of ``config.json``'s keys;
* a local ``config.json`` (or a folder holding one);
* the name of a shipped config (:data:`SHIPPED`, package data: no network);
* any other Hub name, such as ``"org/model"``: its ``config.json`` alone is
  fetched, which needs internet (``transformers.AutoConfig.from_pretrained``).

A config that needs ``trust_remote_code`` (code from the Hub, not from the
pinned ``transformers``), or whose ``model_type`` the pinned ``transformers``
does not know, is refused in one line.

Attention runs as ``attn_implementation="sdpa"`` (PyTorch's
``scaled_dot_product_attention``, which the simulation gives the kernel of
``helpers.config.ATTENTION``), ``use_cache=False`` (a training step keeps no
KV cache), and parameters in float32 (PyTorch's default, as the project's own
GPT and Llama presets).  The step feeds token ids only, no ``attention_mask``:
``transformers`` then passes ``is_causal=True`` to SDPA and builds no mask,
so no code reads tensor values (no ``.item()``, no data-dependent branch).
"eager" attention runs too, and keeps the full ``(batch, heads, seq, seq)``
scores, as the math kernel does.

One limit: with grouped-query attention ``transformers`` also passes
``enable_gqa=True`` (PyTorch >= 2.5), and the simulation
(:mod:`helpers.engine.cuda_rules`) runs every ``enable_gqa`` call with the
math kernel, keeping the scores, where a GPU's flash kernel supports it
(PyTorch's ``sdp_utils.cpp``: ``supports_grouped_query_attention`` for flash,
not for memory-efficient attention).  Until the engine's rule follows,
compare kernels at ``attention="math"``.

Against the project's own Llama (:mod:`helpers.models.llama`), Hugging
Face's Llama keeps one more ``(batch, seq, hidden)`` float32 tensor per
RMSNorm (two per layer and the final norm): ``LlamaRMSNorm`` is written out
(``x * rsqrt(mean(x**2) + eps)``, then ``weight *`` that), and keeps the
normalised input for the weight's gradient, where ``torch.nn.RMSNorm``'s
fused GPU kernel keeps only its input and the reciprocal RMS.

LoRA (:func:`apply_lora`) goes through ``peft.get_peft_model`` with a
``LoraConfig``; gradient checkpointing is Hugging Face's own
``gradient_checkpointing_enable()`` (each decoder layer recomputed in backward).
:func:`prepare` applies both, in that order, as a :class:`helpers.config.StepConfig` says.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from ..config import StepConfig

#: Where the shipped configs are (package data).
CONFIG_DIR = Path(__file__).parent / "hf_configs"


@dataclass(frozen=True)
class ShippedConfig:
    """A ``config.json`` shipped with the package, and where its values come from.

    Attributes:
        file: its name in :data:`CONFIG_DIR`.
        parameters: the published parameter count.
        source: where the values and the count were checked.
    """

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

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def shipped_configs() -> list[str]:
    """The Hub names of the shipped configs (:data:`SHIPPED`), which build offline."""
    return list(SHIPPED)


def is_config_name(name: str) -> bool:
    """True when ``name`` is something :func:`load_config` reads as a string:
    a shipped name, a ``.json`` path, a folder holding ``config.json``, or a
    Hub name ``org/model`` (not a Python file, not ``module:function``)."""
    if name in SHIPPED or name.endswith(".json"):
        return True
    path = Path(name)
    if path.is_dir() and (path / "config.json").is_file():
        return True
    return bool(_HUB_NAME.match(name)) and not name.endswith(".py") and not path.exists()


def load_config(config: Any):
    """A ``transformers.PretrainedConfig`` from any of :data:`ACCEPTED`.

    Args:
        config: a ``PretrainedConfig`` (returned as a copy), a dict of
            ``config.json``'s keys (``model_type`` required), a path to a
            ``config.json`` or to a folder holding one, a name of
            :data:`SHIPPED`, or another Hub name ``org/model`` (its
            ``config.json`` only, fetched: needs internet).

    Raises:
        ValueError: in one line, for a config that needs ``trust_remote_code``
            (``auto_map``), a ``model_type`` the pinned ``transformers`` does
            not know, a missing or unreadable file, or a Hub name that cannot
            be fetched (offline, unknown, gated).
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
            raise ValueError(f"cannot read {str(path)!r} as a config.json: {_first_line(e)}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{str(path)!r} is not a config.json: it holds no JSON object")
        return _from_dict(data, str(path))
    if not _HUB_NAME.match(name):
        raise ValueError(f"{name!r} is not a Hugging Face config: give {ACCEPTED}")
    try:  # the Hub: config.json only, never the weights; remote code is never run
        loaded = AutoConfig.from_pretrained(name, trust_remote_code=False)
    except Exception as e:  # offline, unknown, gated, remote code: one line, not transformers' traceback
        text = _first_line(e)
        if "trust_remote_code" in text:
            raise ValueError(f"{name} needs trust_remote_code (its code is not in transformers "
                             f"{transformers.__version__}): refused, only architectures transformers ships "
                             f"run here") from None
        raise ValueError(f"cannot fetch the config of {name!r} from the Hugging Face Hub ({text}); "
                         f"offline, use a local config.json or a shipped name ({', '.join(SHIPPED)})") from None
    return _refuse_remote_code(loaded, name)


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
        raise ValueError(f"transformers cannot make a {model_type} config from {where}: {_first_line(e)}") from None
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


def _first_line(e: BaseException) -> str:
    return (str(e).strip() or type(e).__name__).splitlines()[0]


def config_label(config: Any) -> str:
    """A short name for a config: its Hub name or file, else its ``model_type``."""
    if isinstance(config, (str, Path)):
        return str(config)
    if isinstance(config, dict):
        return config.get("_name_or_path") or config.get("model_type") or "config"
    return getattr(config, "name_or_path", "") or getattr(config, "model_type", "") or type(config).__name__


def is_config_object(model: Any) -> bool:
    """True for a ``PretrainedConfig`` or a dict with a ``model_type`` (what :func:`load_config` takes as an object)."""
    if isinstance(model, dict):
        return "model_type" in model
    return hasattr(model, "to_dict") and hasattr(model, "model_type") and not isinstance(model, nn.Module)


@dataclass(frozen=True)
class CausalLMBuilder:
    """A function of no arguments that builds one Hugging Face causal LM from its config.

    Called by the engine's backend: on the ``meta`` device when simulating
    (shapes only, no memory, no initialisation work), on the CPU for a GPU.

    Attributes:
        config: a ``transformers.PretrainedConfig`` (from :func:`load_config`).
        attn_implementation: ``"sdpa"`` (default) or ``"eager"``.
    """

    config: Any
    attn_implementation: str = "sdpa"

    def __call__(self) -> nn.Module:
        import torch
        from transformers import AutoModelForCausalLM

        config = self.config.__class__.from_dict(self.config.to_dict())
        config.use_cache = False  # a training step keeps no KV cache
        try:
            model = AutoModelForCausalLM.from_config(config, attn_implementation=self.attn_implementation,
                                                     dtype=torch.float32, trust_remote_code=False)
        except Exception as e:  # a ValueError: never the backend's fallback to a real (CPU-sized) build
            raise ValueError(f"transformers cannot build a causal LM from {config_label(self.config)}: "
                             f"{_first_line(e)}") from None
        return model.train()


def build_causal_lm(config: Any, attn_implementation: str = "sdpa") -> nn.Module:
    """The Hugging Face causal LM of ``config`` (anything :func:`load_config` takes), in training mode.

    Built on the current default device (``with torch.device("meta"):`` for
    shapes only), float32 parameters, ``use_cache=False``; tied weights (an LM
    head tied to the token embedding) stay one tensor.

    Raises:
        ValueError: as :func:`load_config` does, or when ``transformers``
            cannot build a causal LM of that config, in one line.
    """
    if attn_implementation not in ("sdpa", "eager"):
        raise ValueError(f"unknown attn_implementation {attn_implementation!r}; use sdpa or eager")
    return CausalLMBuilder(load_config(config), attn_implementation)()


def is_hf_model(model: nn.Module) -> bool:
    """True for a ``transformers`` model, bare or wrapped by ``peft``."""
    return hasattr(model, "gradient_checkpointing_enable") and hasattr(model, "config")


def linear_names(model: nn.Module) -> list[str]:
    """The distinct last names of ``model``'s ``nn.Linear`` modules, in order
    (``q_proj``, ``k_proj``, ..., ``lm_head``): what LoRA targets can name."""
    names: dict[str, None] = {}
    for full, module in model.named_modules():
        if isinstance(module, nn.Linear):
            names.setdefault(full.rsplit(".", 1)[-1], None)
    return list(names)


def apply_lora(model: nn.Module, rank: int, targets: tuple[str, ...] | None = None,
               dropout: float = 0.0) -> nn.Module:
    """``peft.get_peft_model(model, LoraConfig(r=rank, target_modules=targets, lora_dropout=dropout))``.

    Every base weight is frozen (``requires_grad=False``: no gradient, no
    optimizer state); each targeted ``nn.Linear(in, out)`` gains two trained
    matrices, ``lora_A`` (rank x in) and ``lora_B`` (out x rank), so
    ``rank * (in + out)`` parameters (Hu et al., 2021; peft's ``LoraLayer``).
    ``lora_alpha`` (peft's default, 8) scales the update and costs no memory.

    Args:
        model: a ``transformers`` model (or any ``nn.Module`` when ``targets`` is given).
        rank: LoRA's rank r, >= 1.
        targets: last names of the ``nn.Linear`` modules to adapt
            (``("q_proj", "v_proj")``); None: peft's default for the
            architecture (``q_proj`` and ``v_proj`` for Llama, Qwen2, Mistral).
        dropout: LoRA's dropout on each adapter's input, in [0, 1).

    Returns:
        The ``peft.PeftModel``.

    Raises:
        ValueError: in one line, for a target that names no linear module of
            the model (naming those it has), or an architecture peft has no
            default targets for when ``targets`` is None.
    """
    from peft import LoraConfig, get_peft_model
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

    label = config_label(getattr(model, "config", None)) if hasattr(model, "config") else type(model).__name__
    have = linear_names(model)
    if targets is None:
        model_type = getattr(getattr(model, "config", None), "model_type", None)
        if model_type not in DEFAULTS:
            raise ValueError(f"peft has no default LoRA targets for {label}: name them with lora_targets "
                             f"(its linear layers: {', '.join(have)})")
        targets = tuple(DEFAULTS[model_type])
    missing = [t for t in targets if t not in have]
    if missing:
        raise ValueError(f"LoRA target {missing[0]!r} matches no linear layer of {label}; "
                         f"its linear layers are {', '.join(have)}")
    try:
        return get_peft_model(model, LoraConfig(r=rank, target_modules=list(targets), lora_dropout=dropout))
    except Exception as e:
        raise ValueError(f"peft cannot add LoRA adapters to {label}: {_first_line(e)}") from None


def prepare(model: nn.Module, config: StepConfig) -> nn.Module:
    """A model as ``config`` trains it: Hugging Face's checkpointing, then LoRA.

    Called once, by the step runner, on every model it builds (other models
    pass through unchanged, and are checkpointed by segments by the runner).

    * ``config.checkpoint`` > 0, a Hugging Face model: ``model.gradient_checkpointing_enable()``,
      Hugging Face's own checkpointing: every decoder layer is a segment,
      its forward recomputed in backward (``use_reentrant`` as
      ``config.reentrant``: PyTorch's default, non-reentrant, unless asked).
    * ``config.lora_rank`` > 0: :func:`apply_lora` with ``config.lora_targets``
      and ``config.lora_dropout``.  peft makes the input embeddings' output
      require grad when checkpointing is on, so the reentrant variant still
      reaches the adapters.

    Raises:
        ValueError: as :func:`apply_lora` does.
    """
    if config.checkpoint and is_hf_model(model):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": config.reentrant})
    if config.lora_rank:
        model = apply_lora(model, config.lora_rank, config.lora_targets, config.lora_dropout)
    return model
