"""The dtypes of a step: the parameters' (``param_dtype``) and autocast's (``amp``, ``amp_dtype``).

Introduced in lesson 04 (AMP), and in lesson 09 for parameters stored in
bfloat16.  Two steps of the step runner's recipe (:data:`helpers.step.RECIPE`)
are here, :func:`set_parameter_dtype` and :func:`add_grad_scaler`, and the
autocast context of each forward pass (:func:`autocast`).
"""

from __future__ import annotations

import contextlib

import torch


def set_parameter_dtype(runner) -> None:
    """The recipe's dtype step: with ``config.param_dtype == "bfloat16"``, ``runner.model.to(torch.bfloat16)``.

    That is what ``from_pretrained(torch_dtype=torch.bfloat16)`` loads: a
    module that ``transformers`` lists in the model's ``_keep_in_fp32_modules``
    stays float32, as ``transformers`` keeps it.  Gradients then are bfloat16,
    and so are the states PyTorch's Adam and AdamW make with
    ``torch.zeros_like(p)``.
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
