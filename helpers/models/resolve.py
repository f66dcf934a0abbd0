"""From what a learner names to a :class:`helpers.models.spec.ModelSpec` (:func:`resolve_model`): a preset or a
torchvision classifier (:mod:`helpers.models.presets`), a Hugging Face config (:func:`hf_spec`), a learner's own
function (``"package.module:function"``, ``"path/to/file.py:function"``), a module, or a builder that knows its spec.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from pathlib import Path
from typing import Callable

from torch import nn

from .. import hf_config
from ..hf_config import is_hf_config
from ..errors import first_line
from .copies import copy_for_step
from .presets import PRESETS, build_model, classification_models
from .spec import ModelSpec


def hf_spec(config, name: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face causal LM from its config (:func:`helpers.models.hf.causal_lm`).

    Token ids below ``vocab_size``, as many as ``seq_len`` says; next-token loss.

    Raises:
        ValueError: as :func:`helpers.hf_config.load_config` does.
    """
    from . import hf  # only for a Hugging Face config: no transformers on the path of other models

    return _hf_spec(config if isinstance(config, hf.CausalLMBuilder) else hf.causal_lm(config), name)


def shipped_task_spec(model, name: str | None = None) -> ModelSpec | None:
    """What a step's task (:func:`helpers.models.task.resolve_task`) reads of the :class:`ModelSpec` of a shipped
    Hugging Face config (:func:`helpers.hf_config.shipped_json`), read from its ``config.json`` with ``json``, without
    ``transformers``: the name, ``vocab_size``, ``seq_len`` (the context, ``max_position_embeddings``) and
    ``seq_len_required``, equal to :func:`hf_spec`'s (``tests/test_cli_cold.py`` checks every shipped config).

    Enough to evaluate a symbolic log at a point (:meth:`helpers.symbolic.SymbolicStep.evaluate`), never to trace:
    it knows no blocks (``blocks``, ``at_depth`` None), and its ``build`` resolves :func:`hf_spec` first, so that it
    builds the same model.  None for any other model, and for a shipped config that leaves either size to its config
    class's defaults or nests them in a ``text_config`` (the file alone does not say them).
    """
    data = hf_config.shipped_json(model)
    if data is None or "text_config" in data or not {"vocab_size", "max_position_embeddings"} <= data.keys():
        return None
    return ModelSpec(name or hf_config.config_label(model), lambda: hf_spec(model).build(),
                     vocab_size=data["vocab_size"], seq_len=data["max_position_embeddings"], seq_len_required=True)


def _hf_spec(builder, name: str | None) -> ModelSpec:
    differ = builder.layers_differ()
    return ModelSpec(name or builder.label, builder, vocab_size=builder.vocab_size, seq_len=builder.context,
                     seq_len_required=True, blocks=builder.blocks, blocks_differ=differ,
                     at_depth=None if differ else lambda n: _hf_spec(builder.at_depth(n), name))


def _import_function(path: str) -> Callable[[], nn.Module]:
    """``"package.module:function"`` or ``"path/to/file.py:function"`` -> the function (a learner's own model).

    Raises:
        ValueError: if the module or file does not import or has no such function.
    """
    source, _, attribute = path.rpartition(":")  # rpartition: a Windows path has a colon of its own
    if _is_file(source) and not Path(source).is_file():
        raise ValueError(f"no file {source!r} (from --model {path})")
    try:
        if _is_file(source):
            spec = importlib.util.spec_from_file_location(f"_model_file_{Path(source).stem}", source)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(source)
    except Exception as e:  # any import failure is the learner's file, reported in one line
        raise ValueError(f"cannot import {source!r} for --model {path}: {type(e).__name__}: {first_line(e)}") from None
    builder = getattr(module, attribute, None)
    if not callable(builder):
        raise ValueError(f"{source!r} has no function {attribute!r} (from --model {path})")
    return builder


def _is_file(source: str) -> bool:
    """A file path (``mymodel.py``, ``./models/net.py``), not a module name (``package.module``)."""
    return source.endswith(".py") or "/" in source or "\\" in source


def unknown_model(name: str) -> str:
    """The one-line message for a model name :func:`resolve_model` does not know, with what it does."""
    close = [n for n in classification_models() if n.startswith(name[:3])][:4]
    return (f"unknown model {name!r}; use a preset ({', '.join(PRESETS)}), any torchvision classification model "
            f"(resnet18, vit_b_16, ...{'; close to yours: ' + ', '.join(close) if close else ''}), "
            f"or your own as package.module:function or path/to/file.py:function")


def resolve_model(model, num_classes: int | None = None, name: str | None = None) -> ModelSpec:
    """What :func:`helpers.profile.profile_step` needs to know about ``model``.

    Args:
        model: a torchvision classifier name, a preset of :data:`PRESETS`, ``"package.module:function"`` or
            ``"path/to/file.py:function"``, an ``nn.Module`` (a :func:`meta_copy` when simulating, a deep copy on a
            GPU), a function returning one, or a Hugging Face config (:func:`hf_spec`: a shipped or Hub name, a
            ``config.json`` path, a dict or a ``PretrainedConfig``), or a builder whose ``model_spec()`` returns its
            :class:`ModelSpec`, blocks known (``helpers.transformer.TransformerBuilder``,
            ``helpers.teaching.setups.CausalLM``).
        num_classes: classes for a torchvision name (default 1000).
        name: the label (default: the model's name).

    Raises:
        ValueError: for an unknown name, an import that fails, or anything else.
    """
    if isinstance(model, str) and model in PRESETS:
        spec = PRESETS[model]()
    elif is_hf_config(model):
        spec = hf_spec(model)
    elif isinstance(model, str):
        if ":" in model:
            spec = ModelSpec(model.rpartition(":")[2], _import_function(model))
        elif _is_file(model):
            raise ValueError(f"name the function in {model} that returns the model: {model}:function")
        else:
            if model not in classification_models():
                raise ValueError(unknown_model(model))
            classes = num_classes or 1000
            spec = ModelSpec(model, lambda: build_model(model, classes), num_classes=classes)
    elif callable(getattr(model, "model_spec", None)):
        spec = model.model_spec()
    elif type(model).__name__ == "CausalLMBuilder" and type(model).__module__ == f"{__package__}.hf":
        spec = hf_spec(model)  # a Hugging Face builder with its attention chosen (helpers.vllm_profile)
    elif isinstance(model, nn.Module):
        instance = model
        spec = ModelSpec(type(instance).__name__, lambda: copy_for_step(instance))
    elif callable(model):
        spec = ModelSpec(getattr(model, "__name__", type(model).__name__), model)
    else:
        raise ValueError(f"model must be a model name, an nn.Module or a function returning one, got {model!r}")
    return spec if name is None else dataclasses.replace(spec, name=name)
