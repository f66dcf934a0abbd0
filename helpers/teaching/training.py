"""Train a small classifier on the CPU and record what each epoch cost and achieved (lessons 01, 04b); one step's
gradients in a chosen configuration (lessons 04, 04b)."""

from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

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

    The loop is the textbook one, ``DataLoader(TensorDataset(x, y), batch_size, shuffle=True, generator=...)`` and
    ``torch.optim.SGD(model.parameters(), lr)``, with the same results to the last bit (``tests/test_training.py``
    checks it) and less Python per step, which at batch 1 is most of the step: each epoch's order is the one that
    ``DataLoader`` draws (it draws it here, over the indices, once per epoch), each batch is indexed out of the data
    as one tensor instead of fetched and collated by the loader sample by sample (measured at batch 1 under
    ``ATEN_CPU_CAPABILITY=default``: about 0.3 ms of a 0.8 ms step), and autocast is entered only for ``amp``.

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
    # The whole training set's indices as one batch: the random numbers DataLoader draws for an epoch do not depend
    # on the batch size (its iterator's base seed, the sampler's permutation, and, once the sampler is exhausted, a
    # second permutation of which it yields nothing), so this yields the epoch's order and leaves the generator where
    # a training epoch leaves it.
    orders = DataLoader(range(n), batch_size=n, shuffle=True, generator=torch.Generator().manual_seed(seed))
    history = History(batch_size)
    seen = updates = 0
    for _ in range(epochs):
        start = time.perf_counter()
        (order,) = orders                   # unpacking runs the loader to its end, as a training epoch does
        for idx in order.split(batch_size):
            xb, yb = data.x_train[idx], data.y_train[idx]
            with torch.autocast("cpu", dtype=torch.bfloat16) if amp else contextlib.nullcontext():
                loss = F.cross_entropy(runner(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            seen += len(idx)
            updates += 1
        history.seconds.append(time.perf_counter() - start)
        history.train_loss.append(evaluate(model, data.x_train, data.y_train)[0])
        history.test_accuracy.append(evaluate(model, data.x_test, data.y_test)[1])
        history.samples_seen.append(seen)
        history.updates.append(updates)
    return model, history


def one_step(reference: nn.Module, x: torch.Tensor, y: torch.Tensor, checkpoint: int = 0, reentrant: bool = False,
             amp: bool = False, freeze_bn_stats: bool = False, offload: bool = False) -> tuple[float, nn.Module]:
    """One forward and backward pass of a copy of ``reference``, on real tensors: lesson 04's ``one_step``, reused by 04b.

    Lesson 04, section 3 writes this function out in a cell (checkpointing, the reentrant trap, AMP and BatchNorm's
    double update are compared there); lesson 04b recomputes its baseline from here and adds ``offload``.  The
    reference model is left as it is: a deep copy takes the step, so each configuration starts from the same weights.

    Args:
        reference: the model whose weights every configuration starts from; it maps ``x`` to logits
            ``(batch, classes)`` and, when ``checkpoint`` is set, has a :func:`helpers.models.sequential_form`.
        x, y: the input batch and its integer class targets ``(batch,)``.
        checkpoint: checkpoint segments (0: none), as :class:`helpers.techniques.Checkpointed` splits them.
        reentrant, freeze_bn_stats: passed on to :class:`helpers.techniques.Checkpointed`.
        amp: forward and loss under ``torch.autocast("cpu", dtype=torch.bfloat16)``.
        offload: every tensor saved for backward goes through ``torch.autograd.graph.save_on_cpu()``
            (on CPU tensors a copy within host memory: the same hooks as on a GPU).

    Returns:
        The cross-entropy loss (a float) and the copy, its ``.grad`` filled by ``backward``
        (``None`` for a parameter that got no gradient).

    Raises:
        ValueError: as :class:`helpers.techniques.Checkpointed` does for bad ``checkpoint`` options.
    """
    model = copy.deepcopy(reference)
    runner = model
    if checkpoint:
        runner = Checkpointed(sequential_form(model), checkpoint, reentrant=reentrant, freeze_bn_stats=freeze_bn_stats)
    saving = torch.autograd.graph.save_on_cpu() if offload else contextlib.nullcontext()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp), saving:
        loss = F.cross_entropy(runner(x), y)
    loss.backward()
    return loss.item(), model
