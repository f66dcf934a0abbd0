"""The defaults ``python -m helpers profile`` takes from the pinned libraries for a Hugging Face model
(:func:`library_defaults`): its parameters' dtype from its config, and the ``Trainer``'s optimizer.

A shipped config's dtype is read from its ``config.json`` with ``json`` (:func:`helpers.hf_config.json_dtype`), so
that an answer read from a symbolic log on disk (:mod:`helpers.cli_cold`) imports no ``transformers``; any other
config's from the ``PretrainedConfig`` that ``transformers`` makes of it.
"""

from __future__ import annotations

from . import config, hf_config

#: The options whose default ``profile`` takes from the libraries for a Hugging Face model (:func:`library_defaults`),
#: as its help says them.
LIBRARY_DEFAULTS = {
    "optimizer": "a Hugging Face model's default: adamw with --fused, what the pinned transformers' Trainer uses "
                 "(TrainingArguments.optim: adamw_torch_fused with torch 2.8 or later)",
    "param_dtype": "a Hugging Face model's default: its config's dtype, as from_pretrained's dtype=\"auto\" loads "
                   "it (float32 where the config says nothing)",
}


def library_defaults(options: dict) -> list[str]:
    """Fill ``options``' unset ``optimizer`` and ``param_dtype`` (None) as the pinned libraries would, and say how.

    For a Hugging Face causal LM (:func:`helpers.hf_config.is_hf_config`): its parameters in its config's ``dtype``, as
    transformers 5's ``from_pretrained(dtype="auto")`` loads them (``modeling_utils.py``), where that is one of
    :data:`helpers.config.PARAM_DTYPES` (float32 otherwise, said); and fused AdamW, the optimizer the ``Trainer``
    of the pinned transformers uses by default (``TrainingArguments.optim``, ``"adamw_torch_fused"`` from torch 2.8,
    ``training_args.py``). Other models keep :class:`helpers.config.StepConfig`'s defaults and say nothing; so does
    ``profile_step`` itself. Returns the lines that say each default taken; a config that cannot be read is left to
    the step to refuse.
    """
    hf_model = hf_config.is_hf_config(options["model"])
    said = []
    if options["param_dtype"] is None:
        options["param_dtype"] = config.StepConfig.param_dtype
        dtype = _config_dtype(options["model"]) if hf_model else None
        if dtype in config.PARAM_DTYPES:
            options["param_dtype"] = dtype
            said.append(f"parameters in {dtype}: the config's dtype, as from_pretrained's dtype=\"auto\" loads them")
        elif dtype is not None:
            said.append(f"parameters in float32: the config says {dtype or 'no dtype'}, which these steps do not store "
                        f"parameters in (--param-dtype bfloat16 for 16-bit weights)")
    if options["optimizer"] is None:
        options["optimizer"] = "adamw" if hf_model else config.StepConfig.optimizer
        if hf_model:
            options["fused"] = True
            said.append("fused AdamW: the Trainer's default optimizer (adamw_torch_fused)")
    return said


def _config_dtype(model) -> str | None:
    """The dtype of a Hugging Face config by torch's name (``""``: it gives none), or None where it cannot be read
    (said by ``profile_step``, in one line): a shipped config's read from its ``config.json`` with ``json``
    (:func:`helpers.hf_config.json_dtype`, no ``transformers``), any other's from the config ``transformers`` makes."""
    data = hf_config.shipped_json(model)
    if data is not None:
        return hf_config.json_dtype(data)
    try:
        return str(getattr(hf_config.load_config(model), "dtype", None) or "").removeprefix("torch.")
    except ValueError:
        return None
