"""Train a small classifier on the CPU and record what each epoch cost and achieved (lessons 01, 04)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ..config import check_int
from ..models.presets import sequential_form
from ..techniques import Checkpointed
from .data import Split


@dataclass
class History:
    """What one training run did, epoch by epoch.

    Attributes:
        batch_size: samples per mini-batch.
        train_loss: mean cross-entropy over the training set after each epoch (no gradients).
        test_accuracy: share of test samples classified correctly after each epoch.
        samples_seen, updates: samples and optimizer steps by the end of each epoch.
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
    """Train a fresh model (seeded weights and shuffling) with plain mini-batch SGD and record each epoch.

    Args:
        make_model: returns a new model mapping ``(batch, features)`` to logits.
        data: the training and test tensors (:mod:`helpers.teaching.data`).
        batch_size: from 1 to the training set's size (last batch may be smaller).
        epochs: passes over the training set, >= 1.
        lr: SGD learning rate (no momentum).
        seed: seed for the initial weights and the shuffling.
        amp: forward and loss under ``torch.autocast("cpu", dtype=torch.bfloat16)``.
        checkpoint: checkpoint segments (0: off), BatchNorm statistics updated
            once (:class:`helpers.techniques.Checkpointed`); the model must be an
            ``nn.Sequential`` or have a :func:`helpers.models.sequential_form`.

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
