"""The dtypes of a step (lessons 04, 09): the recipe's :func:`set_parameter_dtype` and :func:`add_grad_scaler`, and each forward's :func:`autocast`."""

from __future__ import annotations

import contextlib

import torch


def set_parameter_dtype(runner) -> None:
    """The recipe's dtype step: ``config.param_dtype == "bfloat16"`` -> ``runner.model.to(torch.bfloat16)``.

    As ``from_pretrained(torch_dtype=torch.bfloat16)`` loads it: modules in the
    model's ``_keep_in_fp32_modules`` stay float32.
    """
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
    if config.amp:
        return meter.autocast(getattr(torch, config.amp_dtype))
    return contextlib.nullcontext()


def add_grad_scaler(runner) -> None:
    """The recipe's GradScaler step: float16 autocast (``config.amp``, ``amp_dtype="float16"``) scales
    the loss (:meth:`helpers.engine.meter.Meter.grad_scaler`); bfloat16 and float32 need no scaler
    (``runner.scaler`` stays None)."""
    config = runner.config
    runner.scaler = runner.meter.grad_scaler() if config.amp and config.amp_dtype == "float16" else None
