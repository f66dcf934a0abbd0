"""Memory around the training step: inference, and loops that keep what they should not (lesson 05b).

Both run parts of :class:`helpers.step.StepRunner`'s step (same options and backends) without the tracer. The PyTorch
FAQ (https://pytorch.org/docs/stable/notes/faq.html) names both leaks.
"""

from __future__ import annotations

import contextlib

import torch

from .config import check_int
from .profile import step_config
from .step import StepRunner

#: Grad modes of :func:`forward_peak`.
GRAD_MODES = ("enabled", "no_grad", "inference_mode")

#: The loops of :func:`loop_memory`: (what the loop does, the line that accumulates the loss).
LOOPS = {
    "train, total_loss += loss": "a training loop that sums the loss tensor itself",
    "train, total_loss += loss.detach()": "the same, summing a tensor without history",
    "eval, total_loss += loss": "an evaluation loop without torch.no_grad(), summing the loss tensor",
    "eval, total_loss += loss.detach()": "the same without no_grad(), summing a tensor without history",
    "eval under no_grad, total_loss += loss": "an evaluation loop under torch.no_grad()",
}


def _grad_mode(mode: str):
    if mode == "no_grad":
        return torch.no_grad()
    if mode == "inference_mode":
        return torch.inference_mode()
    if mode == "enabled":
        return contextlib.nullcontext()
    raise ValueError(f"grad_mode must be one of {', '.join(GRAD_MODES)}, got {mode!r}")


def forward_peak(model="resnet18", batch_size: int = 128, image_size: int = 224, grad_mode: str = "enabled",
                 **options) -> int:
    """Peak bytes of one forward pass and its loss, counted from the placed model (parameters and buffers included).

    Args:
        model, batch_size, image_size, **options: as for :func:`helpers.profile.profile_step`.
        grad_mode: ``"enabled"`` (training mode), ``"no_grad"`` or ``"inference_mode"`` (``model.eval()``).

    Raises:
        ValueError: for an unknown grad mode, or as ``profile_step`` does.
    """
    _grad_mode(grad_mode)  # checked before any work
    config = step_config(model, batch_size, image_size, "forward_peak", **options)
    runner = StepRunner(config)
    with runner.meter:
        net = runner.place()
        net.train(grad_mode == "enabled")  # inference runs in eval mode (BatchNorm's running statistics)
        batch = runner.batch()
        with _grad_mode(grad_mode):
            runner.forward(batch)
    return runner.meter.peak()


def loop_memory(loop: str, model="mlp", batch_size: int = 64, steps: int = 4, image_size: int = 224,
                **options) -> list[int]:
    """Bytes allocated after each of ``steps`` iterations of a loop written as ``loop`` (a key of :data:`LOOPS`) says.

    A training loop also runs backward, the optimizer step and ``zero_grad``. Counts include parameters, buffers and
    optimizer states.

    Raises:
        ValueError: for an unknown loop, or as ``profile_step`` does.
    """
    if loop not in LOOPS:
        raise ValueError(f"unknown loop {loop!r}; use one of: {'; '.join(LOOPS)}")
    check_int("steps", steps, 1)
    config = step_config(model, batch_size, image_size, "loop_memory", **options)
    runner = StepRunner(config)
    meter = runner.meter
    train, detach = loop.startswith("train"), loop.endswith(".detach()")
    after = []
    with meter:
        runner.place().train(train)
        total_loss = torch.zeros((), device=meter.device)
        for _ in range(steps):
            batch = runner.batch()
            with torch.no_grad() if "no_grad" in loop else contextlib.nullcontext():
                loss = runner.forward(batch)
            if train:
                runner.backward(loss)
                runner.step()
                runner.zero_grad()
            total_loss = total_loss + (loss.detach() if detach else loss)
            del batch, loss
            after.append(meter.allocated())
    return after
