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
GPT and Llama presets) unless ``StepConfig.param_dtype`` says bfloat16.  The step feeds token ids only, no ``attention_mask``:
on real tensors ``transformers`` then passes ``is_causal=True`` to SDPA and
builds no mask, and with grouped-query attention passes the key and value
un-expanded with ``enable_gqa=True`` (``use_gqa_in_sdpa`` in
``transformers/integrations/sdpa_attention.py``), which PyTorch 2.14.1's fused
kernels take as they are (:func:`helpers.engine.cuda_rules.attention_kernel`).
"eager" attention runs too, and keeps the full ``(batch, heads, seq, seq)``
scores, as the math kernel does.

On the simulation's fake tensors ``transformers`` cannot see that the
positions it made (``arange``) are one unpacked sequence: its check for
packed sequences (``find_packed_sequence_indices`` in ``masking_utils.py``)
reads tensor values, so under ``is_tracing`` (true for a ``FakeTensor``) it
keeps a ``(batch, 1, seq, seq)`` boolean mask, repeats the key and value to
every head, and SDPA takes the math kernel, which a GPU would not.  The
supported way around it is ``transformers``' own extension point: "sdpa" is
built as :data:`SDPA`, Hugging Face's SDPA forward unchanged, registered
(``AttentionInterface``) with a mask function (``AttentionMaskInterface``)
that returns no mask exactly when the mask would be the plain causal one (no
``attention_mask``, no cache, query as long as the keys, no sliding window
shorter than the sequence), as ``transformers`` itself does on real tensors.

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
QLoRA (``StepConfig.quantization="nf4"``) stores the frozen linear weights in
torchao's 4-bit NF4 when the model is placed (:func:`quantize_nf4`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from torch import nn

from ..config import StepConfig

def _not_torchaos_enum_notice(record: logging.LogRecord) -> bool:
    return "is an Enum subclass and is now natively supported" not in record.getMessage()


# torch 2.14 logs a deprecation notice (with a time stamp and a process id) when torchao 0.18 registers
# its enums with torch.utils._pytree; transformers imports torchao as soon as it is installed.  The
# notice is meant for torchao's authors: keep it out of the learner's output (and the stored notebooks).
logging.getLogger("torch.utils._pytree").addFilter(_not_torchaos_enum_notice)

class Refused(ValueError):
    """A model or LoRA option this module refuses, in one line that names the problem.

    Raised while the step runner builds the model; it reports the message as
    it is (other errors of a constructor are prefixed with what failed)."""


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
    a shipped name, a ``.json`` path, a folder (holding ``config.json``, or
    named with a trailing ``/``), or a
    Hub name ``org/model`` (not a Python file, not ``module:function``)."""
    if name in SHIPPED or name.endswith((".json", "/")):
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
    if name.endswith(("/", "\\")):
        raise ValueError(f"no folder {name!r} holding a config.json")
    if not _HUB_NAME.match(name):
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
        text = _first_line(e)
        if "trust_remote_code" in text:
            raise ValueError(f"{name} needs trust_remote_code (its code is not in transformers "
                             f"{transformers.__version__}): refused, only architectures transformers ships "
                             f"run here") from None
        raise ValueError(offline.format(text)) from None
    return _refuse_remote_code(loaded, name)


def _hub_unreachable() -> str:
    """Why the Hub cannot be asked now (``HF_HUB_OFFLINE`` set, or its host name does not
    resolve: no network), or ``""``."""
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
    """``huggingface_hub``'s warnings (retries, HTTP errors) off: the one-line error says what failed."""
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


#: The name "sdpa" models are built with (see the module's docstring): Hugging
#: Face's SDPA forward, with :func:`_causal_sdpa_mask` as its mask function.
SDPA = "sdpa_causal_skip"


def _causal_sdpa_mask(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset=0,
                      attention_mask=None, local_size=None, **kwargs):
    """``transformers``' ``sdpa_mask``, except that it returns None (SDPA's ``is_causal=True``)
    whenever the mask would be the plain causal one, even on fake tensors."""
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
        Refused (a ValueError): in one line, for a target that names no linear module of
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
            raise Refused(f"peft has no default LoRA targets for {label}: name them with lora_targets (--lora-targets) "
                             f"(its linear layers: {', '.join(have)})")
        targets = tuple(DEFAULTS[model_type])
    missing = [t for t in targets if t not in have]
    if missing:
        raise Refused(f"LoRA target {missing[0]!r} matches no linear layer of {label}; "
                         f"its linear layers are {', '.join(have)}")
    try:
        return get_peft_model(model, LoraConfig(r=rank, target_modules=list(targets), lora_dropout=dropout))
    except Exception as e:
        raise Refused(f"peft cannot add LoRA adapters to {label}: {_first_line(e)}") from None


def prepare(model: nn.Module, config: StepConfig) -> nn.Module:
    """A model as ``config`` trains it: its parameters' dtype, Hugging Face's checkpointing, then LoRA.

    Called once, by the step runner, on every model it builds (other models
    pass through unchanged, and are checkpointed by segments by the runner).

    * ``config.param_dtype`` ``"bfloat16"``: ``model.to(torch.bfloat16)``,
      what ``from_pretrained(torch_dtype=torch.bfloat16)`` loads (for a
      model without ``_keep_in_fp32_modules``; a module listed there stays
      float32, as ``transformers`` keeps it).
    * ``config.checkpoint`` > 0, a Hugging Face model: ``model.gradient_checkpointing_enable()``,
      Hugging Face's own checkpointing: every decoder layer is a segment,
      its forward recomputed in backward (``use_reentrant`` as
      ``config.reentrant``: PyTorch's default, non-reentrant, unless asked).
    * ``config.lora_rank`` > 0: :func:`apply_lora` with ``config.lora_targets``
      and ``config.lora_dropout``.  peft makes the input embeddings' output
      require grad when checkpointing is on, so the reentrant variant still
      reaches the adapters.  peft makes the adapters float32 whatever the
      base layer's dtype (``autocast_adapter_dtype=True``, its default).

    Quantization (``config.quantization``) comes later, when the model is
    placed (:func:`quantize_nf4`).

    Raises:
        ValueError: as :func:`apply_lora` does.
    """
    if config.param_dtype == "bfloat16":
        import torch

        keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
        model.to(torch.bfloat16)
        for name, module in model.named_modules():
            if keep and any(part in keep for part in name.split(".")):
                module.to(torch.float32)
    if config.checkpoint and is_hf_model(model):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": config.reentrant})
    if config.lora_rank:
        model = apply_lora(model, config.lora_rank, config.lora_targets, config.lora_dropout)
    return model


# -- QLoRA: 4-bit NormalFloat base weights -------------------------------------------------------------------------

#: NF4's blocks: one absmax scale per 64 weights, and those scales quantized to
#: int8 with one float scale per 256 of them (double quantization): torchao's
#: ``to_nf4(tensor, block_size=64, scaler_block_size=256)`` defaults, and the
#: QLoRA paper's (Dettmers et al., 2023, section 3: blocksize 64 for W, 256 for c2).
NF4_BLOCK = 64
NF4_SCALER_BLOCK = 256


def nf4_bytes(numel: int, dtype_bytes: int = 2) -> dict[str, int]:
    """The bytes of one weight of ``numel`` elements as torchao's ``NF4Tensor`` stores it (before the allocator
    rounds each storage up).

    From ``torchao/quantization/quantize_/workflows/nf4/nf4_tensor.py`` (torchao 0.18.0),
    ``NF4Tensor.from_tensor`` of a weight of ``dtype_bytes`` per element (2: bfloat16):

    * ``quantized_data``: two 4-bit codes per uint8: ``numel / 2``;
    * ``quantized_scalers``: one int8 per block of 64 weights: ``numel / 64``;
    * ``quantization_factor``: one scale per 256 blocks, in the weight's dtype:
      ``dtype_bytes * numel / (64 * 256)``;
    * ``scaler_mean`` (one value) and ``nf4`` (the 16-value code book), in the weight's dtype.

    So ``4 + 8/64 + 16/16384`` bits per weight in bfloat16 (about 4.126), against
    the QLoRA paper's ``4 + 8/64 + 32/(64*256)`` (about 4.127): bitsandbytes
    keeps the second-level scales in float32, torchao in the weight's dtype,
    and torchao subtracts the mean of the first-level scales (one value) where
    bitsandbytes keeps an offset too.  Both need ``numel`` divisible by
    64 * 256 here (torchao asserts it).

    Returns:
        ``{"codes": ..., "scales": ..., "scale_factors": ..., "mean": ..., "code_book": ...}`` in bytes.
    """
    blocks = numel // NF4_BLOCK
    return {"codes": numel // 2, "scales": blocks, "scale_factors": dtype_bytes * (blocks // nf4_scaler_block(numel)),
            "mean": dtype_bytes, "code_book": 16 * dtype_bytes}


def _nf4():
    """torchao's NF4 module (imported when first needed: torchao takes a second to import)."""
    from torchao.quantization.quantize_.workflows.nf4 import nf4_tensor

    return nf4_tensor


def nf4_scaler_block(numel: int) -> int:
    """The scaler block of a weight of ``numel`` elements: :data:`NF4_SCALER_BLOCK` (256) when its blocks of 64
    are a multiple of it, else the largest number below it that divides them (see :func:`nf4_bytes`)."""
    blocks = numel // NF4_BLOCK
    return max(d for d in range(1, NF4_SCALER_BLOCK + 1) if blocks % d == 0)


def nf4_linears(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    """The linear layers QLoRA quantizes, as ``(parent, attribute, layer)``: every ``nn.Linear`` whose weight is
    frozen (LoRA's base layers and the layers it does not adapt), but the output embeddings (the LM head)
    and any weight tied to another module.

    That is ``transformers``' rule for bitsandbytes 4-bit loading when
    ``llm_int8_skip_modules`` is not given (``transformers/quantizers/base.py``,
    ``get_keys_to_not_convert``: tied weights, the last module and the output
    embeddings stay in 16 bits); the token embedding is an ``nn.Embedding``,
    which it never converts.
    """
    get_output = getattr(model, "get_output_embeddings", None)
    head = get_output() if callable(get_output) else None
    counts: dict[int, int] = {}
    for module in model.modules():
        for p in module._parameters.values():
            if p is not None:
                counts[id(p)] = counts.get(id(p), 0) + 1
    found = []
    for parent in model.modules():
        for attribute, layer in parent.named_children():
            if (type(layer) is nn.Linear and layer is not head and not layer.weight.requires_grad
                    and counts[id(layer.weight)] == 1):
                found.append((parent, attribute, layer))
    return found


class NF4Linear(nn.Module):
    """A frozen linear layer whose weight is torchao's ``NF4Tensor``, computed in bfloat16: what bitsandbytes'
    ``Linear4bit`` with ``bnb_4bit_compute_dtype=torch.bfloat16`` does (the input is cast to bfloat16, the
    output back to the input's dtype), through torchtune's ``FrozenNF4Linear`` path, ``torchao``'s ``linear_nf4``.

    ``linear_nf4`` is an autograd function (``LinearNF4``) that dequantizes the
    weight to the input's dtype for the matmul and frees it; it saves the
    ``NF4Tensor`` itself for backward (``ctx.save_for_backward(weight)``), not
    the dequantized copy, and dequantizes again in backward for the input's
    gradient.  So a dequantized weight lives only during its matmul, in
    forward and again in backward, and nothing of it stays; the weight gets
    no gradient.  torchao's dequantization is eager PyTorch
    (``NF4Tensor.get_original_weight``): for the length of the matmul it
    holds two int64 tensors of code indices (``numel / 2`` each), the looked-up
    values, the scaled values and their interleaving, about 14 bytes per
    weight (224.5 MiB for a 4096 x 4096 weight, measured by the engine), where
    bitsandbytes' CUDA kernel writes the 2-byte bf16 weight directly: the
    engine's QLoRA transient is torchao's, larger than bitsandbytes' by about
    12 bytes per weight of the largest layer being multiplied.

    Args:
        weight: the ``NF4Tensor``.
        bias: the layer's bias (kept as it is), or None.
    """

    def __init__(self, weight, bias: nn.Parameter | None):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = bias
        self.out_features, self.in_features = weight.shape

    def forward(self, x):
        import torch

        out = _nf4().linear_nf4(x.to(torch.bfloat16), self.weight)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weight=NF4"


def quantize_nf4(model: nn.Module, place: Callable[[nn.Module], nn.Module], device) -> nn.Module:
    """Place ``model`` on ``device`` with its frozen linear weights (:func:`nf4_linears`) in NF4 (QLoRA).

    The other parameters are placed by ``place`` (the backend's); then each
    frozen weight arrives on the device in bfloat16, one at a time, is
    quantized by torchao's ``to_nf4`` (block 64, scaler block 256: double
    quantization, :func:`nf4_bytes`) and its bfloat16 copy freed, as
    bitsandbytes quantizes a weight while ``from_pretrained`` loads it.  The
    layer becomes an :class:`NF4Linear`.  (Quantizing after a whole placement
    would hold every weight dense at once; and placing an ``NF4Tensor`` would
    make it dense again: ``place`` makes plain tensors.)

    Why torchao's ``NF4Tensor`` and not bitsandbytes' ``Linear4bit``: both
    were tried on the engine's fake tensors.  torchao 0.18.0's ``to_nf4`` and
    ``linear_nf4`` are written in PyTorch operations: they run under
    ``FakeTensorMode`` and every storage they make is counted.  bitsandbytes
    0.50.2 does not: ``bnb.functional.quantize_4bit`` of a fake bfloat16
    weight raises ``DataDependentOutputException``
    (``aten._local_scalar_dense``: its CPU path reads a tensor's value), and on
    a GPU it quantizes and multiplies in its own CUDA kernels, which fake
    tensors cannot run; a ``Linear4bit`` built on ``meta`` cannot be moved
    (``Cannot copy out of meta tensor``).  The two layouts agree to within a
    few bytes per 16384 weights (:func:`nf4_bytes`).

    Args:
        model: the built model (frozen base weights: LoRA applied).
        place: puts a model's parameters and buffers on the device; returns it.
        device: where the quantized weights are made.

    Returns:
        The placed model.

    Raises:
        ValueError: if a weight's size is not a multiple of 64, naming the layer.
    """
    import torch

    nf4 = _nf4()
    layers = nf4_linears(model)
    names = {id(m): n for n, m in model.named_modules()}
    for _, _, layer in layers:
        if layer.weight.numel() % NF4_BLOCK:
            raise ValueError(f"quantization='nf4': {names[id(layer)]} has {layer.weight.numel()} weights, not a "
                             f"multiple of {NF4_BLOCK} (torchao's NF4 blocks)")
    weights = [layer.weight for _, _, layer in layers]
    for _, _, layer in layers:
        layer._parameters["weight"] = None  # placed below, one at a time, in 4 bits
    model = place(model)
    chunk = nf4.CHUNK_SIZE
    for (parent, attribute, layer), weight in zip(layers, weights):
        if weight.is_meta:  # simulated: fake tensors, so quantize in one chunk, not in chunks of 2**20 (speed only:
            # the chunks bound a GPU's transient while loading, which is over before the step and not counted)
            dense = torch.empty(weight.shape, dtype=torch.bfloat16, device=device)
            nf4.CHUNK_SIZE = max(chunk, weight.numel())
        else:
            dense = weight.detach().to(device=device, dtype=torch.bfloat16)
        try:
            quantized = nf4.to_nf4(dense, NF4_BLOCK, nf4_scaler_block(weight.numel()))
        finally:
            nf4.CHUNK_SIZE = chunk
        setattr(parent, attribute, NF4Linear(quantized, layer.bias))
        del dense
    return model
