"""The dtypes of a step (lessons 04, 09): parameters, autocast and the GradScaler."""

from __future__ import annotations

import contextlib

import torch


def set_parameter_dtype(runner) -> None:
    """The recipe's dtype step: ``config.param_dtype == "bfloat16"`` -> ``runner.model.to(torch.bfloat16)``, but the
    model's ``_keep_in_fp32_modules``, as ``from_pretrained(torch_dtype=torch.bfloat16)`` does."""
    if runner.config.param_dtype != "bfloat16":
        return
    model = runner.model
    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
    model.to(torch.bfloat16)
    for name, module in model.named_modules():
        if keep and any(part in keep for part in name.split(".")):
            module.to(torch.float32)


def autocast(config, meter):
    """A new autocast context of ``meter``'s backend for one forward pass: ``config.amp`` in
    ``config.amp_dtype`` (:meth:`helpers.engine.meter.Meter.autocast`), or one that does nothing."""
    return meter.autocast(getattr(torch, config.amp_dtype)) if config.amp else contextlib.nullcontext()


def add_grad_scaler(runner) -> None:
    """The recipe's GradScaler step: ``runner.scaler`` for float16 autocast, else None."""
    config = runner.config
    runner.scaler = runner.meter.grad_scaler() if config.amp and config.amp_dtype == "float16" else None
