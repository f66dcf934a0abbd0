"""LoRA: low-rank adapters beside frozen weights (Hu et al., 2021), as ``peft`` adds them (lesson 09)."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from ..errors import Refused, first_line


def add_adapters(runner) -> None:
    """The recipe's LoRA step: ``config.lora_rank`` > 0 puts :func:`apply_lora`'s ``peft`` model in ``runner.model``.

    After checkpointing is enabled, so that ``peft`` makes the input embeddings' output require grad (the reentrant
    variant then reaches the adapters). Adapters are float32 (``autocast_adapter_dtype=True``), or
    ``config.lora_dtype``, cast as the QLoRA paper's ``qlora.py`` casts them (``module.to(torch.bfloat16)``). Raises as
    :func:`apply_lora`. ``config.frozen`` (a model served, not trained) freezes every parameter instead, so that
    ``config.quantization`` finds the linear layers' weights frozen as under LoRA.
    """
    config = runner.config
    if config.frozen:
        runner.model.requires_grad_(False)
    if config.lora_rank:
        runner.model = apply_lora(runner.model, config.lora_rank, config.lora_targets, config.lora_dropout, config.dora)
        if config.lora_dtype != "float32":
            dtype = getattr(torch, config.lora_dtype)
            for name, module in runner.model.named_modules():
                if name.rsplit(".", 1)[-1] in ("lora_A", "lora_B", "lora_magnitude_vector"):
                    module.to(dtype)


def linear_names(model: nn.Module) -> list[str]:
    """The distinct last names of ``model``'s ``nn.Linear`` modules, in order: what LoRA targets can name."""
    names: dict[str, None] = {}
    for full, module in model.named_modules():
        if isinstance(module, nn.Linear):
            names.setdefault(full.rsplit(".", 1)[-1], None)
    return list(names)


#: The FutureWarning transformers 5 gives when its ``is_gradient_checkpointing`` is read (``modeling_utils.py``), which
#: the pinned peft does on every model it wraps (``PeftModel.__init__``, ``peft_model.py``): a deprecation between the two
#: libraries, not of the learner's code. :func:`apply_lora` silences this one message, and only around that call.
GRADIENT_CHECKPOINTING_ALIAS = "`is_gradient_checkpointing` is deprecated"


def apply_lora(model: nn.Module, rank: int, targets: tuple[str, ...] | None = None,
               dropout: float = 0.0, dora: bool = False) -> nn.Module:
    """``peft.get_peft_model(model, LoraConfig(r=rank, target_modules=targets, lora_dropout=dropout,
    use_dora=dora))``: a PeftModel.

    Every base weight is frozen; each targeted ``nn.Linear(in, out)`` gains ``lora_A`` (rank x in) and ``lora_B``
    (out x rank): ``rank * (in + out)`` parameters (Hu et al., 2021; peft's ``LoraLayer``).

    Args:
        model: a ``transformers`` model (any ``nn.Module`` with ``targets``).
        rank: LoRA's rank r, >= 1; ``dropout``: on each adapter's input, in [0, 1); ``dora``: DoRA (Liu et al., 2024,
            "DoRA: Weight-Decomposed Low-Rank Adaptation"), which adds a magnitude vector of ``out`` per layer.
        targets: last names of the ``nn.Linear`` modules to adapt; None: peft's default for the architecture.

    Raises:
        Refused (a ValueError): in one line, for a target that names no linear module (naming those it has), or no
            default targets for the architecture.
    """
    from peft import LoraConfig, get_peft_model
    from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS

    from ..hf_config import config_label

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
        with warnings.catch_warnings():  # PeftModel asks a checkpointed model transformers' deprecated alias
            warnings.filterwarnings("ignore", message=GRADIENT_CHECKPOINTING_ALIAS, category=FutureWarning)
            return get_peft_model(model, LoraConfig(r=rank, target_modules=list(targets), lora_dropout=dropout,
                                                    use_dora=dora))
    except Exception as e:
        raise Refused(f"peft cannot add LoRA adapters to {label}: {first_line(e)}") from None
