"""Train a small classifier and record what each epoch cost and achieved.

Introduced in lesson 01 (mini-batching: the same network trained with
different batch sizes); lesson 04 reuses it for AMP and checkpointing.

Training runs on the CPU by default: the lessons' networks are tiny, and the
point is to compare batch sizes, not devices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ..config import check_int
from ..models import sequential_form
from ..techniques import Checkpointed
from .data import Split


@dataclass
class History:
    """What one training run did, epoch by epoch.

    Attributes:
        batch_size: samples per mini-batch.
        train_loss: mean cross-entropy over the whole training set after each
            epoch (evaluated without gradients, so comparable across batch sizes).
        test_accuracy: share of test samples classified correctly after each epoch.
        samples_seen: training samples processed by the end of each epoch.
        updates: optimizer steps taken by the end of each epoch.
        seconds: wall-clock time of each epoch's training (not its evaluation).
    """

    batch_size: int
    train_loss: list[float] = field(default_factory=list)
    test_accuracy: list[float] = field(default_factory=list)
    samples_seen: list[int] = field(default_factory=list)
    updates: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """Mean cross-entropy loss and accuracy of ``model`` on ``(x, y)``, in eval mode."""
    was_training = model.training
    model.eval()
    logits = model(x)
    model.train(was_training)
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def train(make_model: Callable[[], nn.Module], data: Split, batch_size: int, epochs: int,
          lr: float = 0.05, seed: int = 0, amp: bool = False, checkpoint: int = 0) -> tuple[nn.Module, History]:
    """Train a fresh model with plain mini-batch SGD and record each epoch.

    The model is built after seeding, so every run starts from the same
    weights; the shuffling order is seeded too.  The last batch of an epoch
    may be smaller than ``batch_size`` (``drop_last=False``).

    Args:
        make_model: returns a new model mapping ``(batch, features)`` to logits.
        data: the training and test tensors (see :mod:`helpers.teaching.data`).
        batch_size: samples per mini-batch, from 1 to the training set's size.
        epochs: passes over the training set, >= 1.
        lr: SGD learning rate (no momentum, so that batch size is the only difference).
        seed: seed for the initial weights and the shuffling.
        amp: run forward and loss under ``torch.autocast("cpu", dtype=torch.bfloat16)``
            (lesson 04; bfloat16 needs no ``GradScaler``).
        checkpoint: activation checkpointing in this many segments (0: off), with
            BatchNorm statistics updated once per step (see
            :class:`helpers.step.Checkpointed`); the model must be an ``nn.Sequential``
            or have a :func:`helpers.models.sequential_form`.

    Returns:
        The trained model and its :class:`History`.

    Raises:
        ValueError: for a batch size outside 1..len(training set) or epochs < 1.
    """
    n = len(data.x_train)
    check_int("batch_size", batch_size, 1, n, what=f"an integer from 1 to {n} (the training set)")
    check_int("epochs", epochs, 1)
    torch.manual_seed(seed)
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    runner = Checkpointed(sequential_form(model), checkpoint, freeze_bn_stats=True) if checkpoint else model
    loader = DataLoader(TensorDataset(data.x_train, data.y_train), batch_size=batch_size,
                        shuffle=True, generator=torch.Generator().manual_seed(seed))
    history = History(batch_size)
    seen = updates = 0
    for _ in range(epochs):
        start = time.perf_counter()
        for xb, yb in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
                loss = F.cross_entropy(runner(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += len(xb)
            updates += 1
        history.seconds.append(time.perf_counter() - start)
        history.train_loss.append(evaluate(model, data.x_train, data.y_train)[0])
        history.test_accuracy.append(evaluate(model, data.x_test, data.y_test)[1])
        history.samples_seen.append(seen)
        history.updates.append(updates)
    return model, history
