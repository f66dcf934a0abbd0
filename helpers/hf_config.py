"""A Hugging Face config, read from its name: a shipped one, a ``config.json``, a folder, or the Hub (lesson 09).

The one test of whether a model names a Hugging Face config (:func:`is_hf_config`), the configs shipped with the
package (:data:`SHIPPED`, each with its published parameter count and source), and :func:`load_config`, which reads
one into a ``transformers.PretrainedConfig``, refusing in one line what cannot run here (remote code, an architecture
the pinned ``transformers`` does not know, an unreadable file, an unreachable Hub).  ``transformers`` is imported only
by the functions that build a config, so the command line's help does not import it.  Building the model is
:mod:`helpers.models.hf`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import first_line

#: Where the shipped configs are (package data of :mod:`helpers.models`).
CONFIG_DIR = Path(__file__).parent / "models" / "hf_configs"


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

_MAXTEXT = ("AI-Hypercomputer/maxtext MaxText/utils/ckpt_conversion/utils/hf_model_configs.py (commit 94959d0: "
            "Google's own Gemma-2 configs as transformers.Gemma2Config arguments)")
_MAXTEXT_GEMMA3 = ("AI-Hypercomputer/maxtext src/MaxText/utils/ckpt_conversion/utils/hf_model_configs.py (commit "
                   "14b30db: Gemma-3 configs as transformers.Gemma3Config arguments)")
_GEMMA3_REST = ("sliding_window 1024 and linear rope scaling by 8 on the full-attention layers; the vision tower SigLIP "
                "(27 layers of 1152, MLP 4304, 16 heads, 896-pixel images in 14-pixel patches, no head) and 256 tokens "
                "per image, as there; the rest Gemma3TextConfig's defaults, as the Hub's short file relies on them "
                "(vocabulary 262,208, where maxtext writes 262,144; 131,072 positions; rope_theta 1e6, 1e4 on "
                "sliding layers)")
#: Configs shipped for vLLM's published start-up logs only (:mod:`helpers.teaching.vllm_logs`): they build offline
#: as the :data:`SHIPPED` ones do, but are not among them, so lesson 10's table of the shipped configs and the
#: widgets' menus leave them out.  The Hub's files are gated and no stored copy of them was found: each file holds the
#: sizes its source states and, for the rest, the defaults of the pinned transformers' config class (which the
#: sources rely on too); the logs confirm the head size (vLLM's ``AttentionSelectorConfig(head_size=...)`` line) and,
#: with the weights they log, the parameter counts.
FOR_LOGS: dict[str, ShippedConfig] = {
    "google/gemma-2-2b-it": ShippedConfig(
        "gemma-2-2b-it.json", "2.61B",
        f"{_MAXTEXT}: 26 layers of 2304, MLP 9216, 8 heads, 4 KV heads; the rest Gemma2Config's defaults (head_dim "
        f"256, vocabulary 256,000, sliding_window 4096, query_pre_attn_scalar 256, 8,192 positions, tied); 2.61B as "
        f"the Hub's model page counts it"),
    "google/gemma-2-9b-it": ShippedConfig(
        "gemma-2-9b-it.json", "9.24B",
        f"{_MAXTEXT}: 42 layers of 3584, MLP 14336, 16 heads, 8 KV heads, head_dim 256, sliding_window 4096, "
        f"query_pre_attn_scalar 224; the rest Gemma2Config's defaults; 9.24B as the Hub's model page counts it"),
    "google/gemma-2-27b-it": ShippedConfig(
        "gemma-2-27b-it.json", "27.2B",
        f"{_MAXTEXT}: 46 layers of 4608, MLP 36864, 32 heads, 16 KV heads, head_dim 128, sliding_window 4096, "
        f"query_pre_attn_scalar 144; the rest Gemma2Config's defaults; 27.2B as the Hub's model page counts it"),
    "google/gemma-7b": ShippedConfig(
        "gemma-7b.json", "8.54B",
        "Gemma 7B as UbiquitousLearning/mllm src/models/gemma/README.md (commit d4adb0c) lists it: vocabulary "
        "256,000, 8,192 positions, 28 layers, 16 heads, 16 KV heads, 3072 wide, MLP 24576, head_dim 256, "
        "rms_norm_eps 1e-6 (GemmaConfig's defaults too); tied; 8.54B as the Hub's model page counts it"),
    "google/gemma-3-4b-it": ShippedConfig(
        "gemma-3-4b-it.json", "4.3B",
        f"{_MAXTEXT_GEMMA3}: 34 layers of 2560, MLP 10240, 8 heads, 4 KV heads, head_dim 256; {_GEMMA3_REST}; 4.3B as "
        f"the Hub's model page counts it (4,300,079,472 built: 3,880,263,168 language model, 416,866,032 tower, "
        f"2,950,272 projector)"),
    "google/gemma-3-12b-it": ShippedConfig(
        "gemma-3-12b-it.json", "12.2B",
        f"{_MAXTEXT_GEMMA3}: 48 layers of 3840, MLP 15360, 16 heads, 8 KV heads, head_dim 256; {_GEMMA3_REST}; 12.2B "
        f"as the Hub's model page counts it (12,187,325,040 built)"),
    "google/gemma-3-27b-it": ShippedConfig(
        "gemma-3-27b-it.json", "27.4B",
        f"{_MAXTEXT_GEMMA3}: 62 layers of 5376, MLP 21504, 32 heads, 16 KV heads, head_dim 128, "
        f"query_pre_attn_scalar 168 (as NVIDIA/TensorRT-LLM tests/unittest/_torch/modeling/test_modeling_gemma3.py, "
        f"commit fe6fa01, quotes the Hub's file); {_GEMMA3_REST}; 27.4B as the Hub's model page counts it "
        f"(27,432,406,640 built)"),
}

#: What :func:`load_config` accepts, for messages.
ACCEPTED = ("a transformers PretrainedConfig, a dict, a path to config.json, "
            f"a shipped name ({', '.join(SHIPPED)}), or a Hub name org/model (online)")


def shipped_configs() -> list[str]:
    """The Hub names of the shipped configs (:data:`SHIPPED`), which build offline."""
    return list(SHIPPED)


def shipped_json(name: Any) -> dict | None:
    """The ``config.json`` of a shipped config (:data:`SHIPPED` or :data:`FOR_LOGS`) by its Hub name, as the dict the
    ``json`` module reads (no ``transformers``: the keys the file holds, none of its config class's defaults); None for
    any other name or object."""
    if not isinstance(name, str) or (name not in SHIPPED and name not in FOR_LOGS):
        return None
    return json.loads((CONFIG_DIR / {**SHIPPED, **FOR_LOGS}[name].file).read_text())


#: torch's dtypes named by their own name (``str(torch.bfloat16) == "torch.bfloat16"``; ``tests/test_cli_cold.py``
#: holds the list against the pinned torch): a config that names one is answered without importing torch.
DTYPE_NAMES = frozenset(("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64",
                         "bool", "complex64", "complex128"))


def json_dtype(data: dict) -> str:
    """The dtype a ``config.json``'s dict gives the ``PretrainedConfig`` that ``transformers`` makes of it, by torch's
    name without ``torch.`` (``"bfloat16"``), or ``""`` where it gives none: its ``dtype``, else its older
    ``torch_dtype``, a name turned into the torch dtype of that name (``PretrainedConfig.__post_init__``,
    ``transformers/configuration_utils.py``, 5.x), so an alias such as ``"half"`` is ``"float16"`` (torch is asked
    but for a name of :data:`DTYPE_NAMES`, which is its own)."""
    dtype = data.get("dtype")
    dtype = dtype if dtype is not None else data.get("torch_dtype")
    if isinstance(dtype, str) and dtype and dtype not in DTYPE_NAMES:
        import torch

        dtype = getattr(torch, dtype, dtype)
    return str(dtype or "").removeprefix("torch.")


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
        return _from_dict(thawed(config), "the config dict")
    if not isinstance(config, (str, Path)):
        raise ValueError(f"a Hugging Face config must be {ACCEPTED}; got {type(config).__name__}")
    name = str(config)
    data = shipped_json(name)
    if data is not None:
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


class FrozenDict(dict):
    """A read-only copy of a Hugging Face config dict whose values are JSON values (:func:`frozen_config`): still a
    ``dict`` (every reader of a config dict takes it), but hashable, so that a step given one is kept and answered from
    a symbolic log (:func:`helpers.profile.profile_step`, :mod:`helpers.evaluated`), like a step given a name.

    Its keys are in sorted order at every depth, nested objects are :class:`FrozenDict` and arrays :class:`FrozenList`,
    so its ``repr`` is the same in every process whatever order a learner wrote the keys in: what names its symbolic
    log (:func:`helpers.log_names.key_text`).  Equality and the hash follow that ``repr``: two configs are equal when
    they hold the same keys and values of the same types (``1``, ``1.0`` and ``True`` differ, as they may to
    ``transformers``).  It pickles as itself (a symbolic log holds it; :mod:`helpers.symbolic_store` reads this
    package's classes).  ``dict(config)`` or :func:`thawed` gives a copy that can be changed.

    Raises:
        TypeError: on any change (``config[key] = value``, ``update``, ``pop``, ...).
    """

    __slots__ = ("_text",)

    def __init__(self, items=()):
        data = dict(items)
        super().__init__((k, _frozen_value(data[k])) for k in sorted(data))
        self._text = dict.__repr__(self)

    def __reduce__(self):
        return type(self), (dict(self),)

    def __hash__(self) -> int:
        return hash(self._text)

    def __eq__(self, other) -> bool:
        if isinstance(other, dict) and not isinstance(other, FrozenDict):
            other = frozen_config(other)
        return self._text == other._text if isinstance(other, FrozenDict) else NotImplemented

    def __ne__(self, other) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def _read_only(self, *args, **kwargs):
        raise TypeError("a config dict given to a step is kept as a read-only copy (helpers.hf_config.FrozenDict): "
                        "change the dict you gave, or a copy (dict(config)), and give that")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _read_only


class FrozenList(list):
    """A read-only JSON array inside a :class:`FrozenDict` (its ``repr`` a list's; the :class:`FrozenDict` holding it is
    what is hashed).

    Raises:
        TypeError: on any change (``append``, ``sort``, item assignment, ...).
    """

    __slots__ = ()

    def __init__(self, items=()):
        super().__init__(map(_frozen_value, items))

    def __reduce__(self):
        return type(self), (list(self),)

    def _read_only(self, *args, **kwargs):
        raise TypeError("a config dict given to a step is kept as a read-only copy (helpers.hf_config.FrozenDict): "
                        "its lists cannot be changed; change the dict you gave, or a copy (thawed(config))")

    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = sort = \
        reverse = _read_only


def _frozen_value(value):
    """``value`` (a JSON value, checked by :func:`_is_json`) with its objects and arrays made read-only."""
    if isinstance(value, dict):
        return value if isinstance(value, FrozenDict) else FrozenDict(value)
    if isinstance(value, list):
        return value if isinstance(value, FrozenList) else FrozenList(value)
    return value


def _is_json(value, depth: int = 0) -> bool:
    """Whether ``value`` is a JSON value: ``str``, ``int``, ``float``, ``bool``, None, or a list or dict (string keys)
    of them, at most 32 deep."""
    if value is None or type(value) in (str, int, float, bool):
        return True
    if depth >= 32 or type(value) not in (dict, list, FrozenDict, FrozenList):
        return False
    if isinstance(value, dict):
        return all(type(k) is str and _is_json(v, depth + 1) for k, v in value.items())
    return all(_is_json(v, depth + 1) for v in value)


def frozen_config(config: Any) -> FrozenDict | None:
    """A read-only, hashable copy of ``config`` (:class:`FrozenDict`; ``config`` itself if it is one), a dict whose
    values are JSON values (``str``, ``int``, ``float``, ``bool``, None, lists and dicts of them); else None.  What
    :class:`helpers.config.StepConfig` keeps of a Hugging Face config dict, so a step given one is keyed by its content:
    the learner's dict is never changed, and changing it later changes no answer already given.

    None (the config then stays as given, and its steps are not kept nor evaluated from a symbolic log, as a learner's
    ``nn.Module`` is not): a dict holding anything else (a ``torch.dtype`` object, a tuple, a key that is not a
    string), or an object that is not a dict: a ``PretrainedConfig`` is a mutable object of ``transformers`` whose
    content is not plain values alone; its steps are traced anew each time."""
    if isinstance(config, FrozenDict):
        return config
    return FrozenDict(config) if isinstance(config, dict) and _is_json(config) else None


def thawed(value: Any) -> Any:
    """A copy of ``value`` (a :class:`FrozenDict` or any JSON value) in plain, changeable dicts and lists, at every
    depth: what ``transformers`` is given (its config classes may change a nested dict such as ``rope_scaling``)."""
    if isinstance(value, dict):
        return {k: thawed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thawed(v) for v in value]
    return value


#: A Hub name, ``org/model``.
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def is_hf_config(model: Any) -> bool:
    """True when ``model`` names or holds a Hugging Face config: the one test of it.

    An object: a dict with ``"model_type"``, or a non-callable object with ``to_dict`` and a string ``model_type`` (a
    ``PretrainedConfig``, without importing ``transformers``). A string: a shipped name (:data:`SHIPPED`), a
    ``.json`` path, a folder, or a Hub name ``org/model`` that is neither a Python file nor an existing path.
    """
    if isinstance(model, dict):
        return "model_type" in model
    if not isinstance(model, str):
        return hasattr(model, "to_dict") and isinstance(getattr(model, "model_type", None), str) and not callable(model)
    if model in SHIPPED or model in FOR_LOGS or model.endswith((".json", "/")):
        return True
    path = Path(model)
    if path.is_dir() and (path / "config.json").is_file():
        return True
    return bool(_HUB_NAME.match(model)) and not model.endswith(".py") and not path.exists()
