"""The dtypes of a step (lessons 04, 09): parameters, autocast and the GradScaler."""

from __future__ import annotations

import contextlib

import torch


def set_parameter_dtype(runner) -> None:
    """The recipe's dtype step: ``config.param_dtype`` ``"bfloat16"`` or ``"float16"`` -> ``runner.model.to(dtype)``
    (parameters and floating-point buffers), but the model's ``_keep_in_fp32_modules``, as
    ``from_pretrained(torch_dtype=...)`` does (``PreTrainedModel._keep_in_fp32_modules``,
    ``transformers/modeling_utils.py``); ``"float32"``: the model as built."""
    if runner.config.param_dtype == "float32":
        return
    model = runner.model
    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
    model.to(getattr(torch, runner.config.param_dtype))
    for name, module in model.named_modules():
        if keep and any(part in keep for part in name.split(".")):
            module.to(torch.float32)


def arriving(weight: torch.Tensor, device: torch.device, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``weight`` as it arrives on ``device`` to be quantized (:mod:`helpers.techniques.quantization`): in ``dtype``
    (uninitialised for a weight on meta)."""
    if weight.is_meta:
        return torch.empty(weight.shape, dtype=dtype, device=device)
    return weight.detach().to(device=device, dtype=dtype)


def autocast(config, meter):
    """A new autocast context of ``meter``'s backend for one forward pass: ``config.amp`` in
    ``config.amp_dtype`` (:meth:`helpers.engine.meter.Meter.autocast`), or one that does nothing."""
    return meter.autocast(getattr(torch, config.amp_dtype)) if config.amp else contextlib.nullcontext()


def add_grad_scaler(runner) -> None:
    """The recipe's GradScaler step: ``runner.scaler`` for float16 autocast, else None."""
    config = runner.config
    runner.scaler = runner.meter.grad_scaler() if config.amp and config.amp_dtype == "float16" else None
