"""Activation checkpointing by segments, and BatchNorm statistics that stay right.

Introduced in lesson 04 (AMP and activation checkpointing); lesson 01's training
loop and :func:`helpers.step.profile_step` use :class:`Checkpointed`.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


@contextlib.contextmanager
def frozen_batchnorm_stats(module: nn.Module):
    """Keep BatchNorm running statistics unchanged while the block runs.

    A checkpointed segment runs its forward twice in training: once in the
    forward pass and once when backward recomputes it.  Each run of a
    training-mode BatchNorm updates ``running_mean``/``running_var`` (and
    ``num_batches_tracked``), so without this they are updated twice per step.
    Inside this block every BatchNorm's ``momentum`` is 0 (the running values
    are kept exactly) and ``num_batches_tracked`` is decremented back after.
    The batch statistics used for the output, and so the gradients, do not change.
    """
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.momentum = 0.0
    try:
        yield
    finally:
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
            if m.training and m.num_batches_tracked is not None:
                m.num_batches_tracked.sub_(1)


class Checkpointed(nn.Module):
    """Run a sequence of modules with activation checkpointing in segments.

    As ``torch.utils.checkpoint.checkpoint_sequential`` does, the sequence is
    split into ``segments`` parts of ``len(sequence) // segments`` modules, the
    last part taking the rest.  All parts but the last keep only their input
    during the forward pass and recompute their activations during backward;
    the last part runs normally, because backward needs its activations at
    once.  So ``segments=1`` checkpoints nothing.

    Args:
        sequence: modules to run in order (see :func:`helpers.models.sequential_form`).
        segments: number of segments, from 1 to ``len(sequence)``.
        reentrant: use the reentrant variant (``use_reentrant=True``), the old
            default.  It gives no gradient to the parameters of a segment whose
            inputs do not require grad (lesson 04 shows the trap).  Default:
            the non-reentrant variant PyTorch recommends.
        freeze_bn_stats: during recomputation, leave BatchNorm running
            statistics alone (see :func:`frozen_batchnorm_stats`); non-reentrant only.

    Raises:
        ValueError: if ``segments`` is out of range, or ``freeze_bn_stats``
            is asked of the reentrant variant.
    """

    def __init__(self, sequence: nn.Sequential, segments: int, reentrant: bool = False,
                 freeze_bn_stats: bool = False):
        super().__init__()
        if not 1 <= segments <= len(sequence):
            raise ValueError(
                f"checkpoint segments must be between 1 and {len(sequence)} "
                f"(the model has {len(sequence)} sequential units), got {segments}"
            )
        if reentrant and freeze_bn_stats:
            raise ValueError("freeze_bn_stats needs the non-reentrant checkpoint (context_fn)")
        self.sequence = sequence
        self.segments = segments
        self.reentrant = reentrant
        self.freeze_bn_stats = freeze_bn_stats

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        units = list(self.sequence)
        size = len(units) // self.segments
        for start in range(0, size * (self.segments - 1), size):
            part = nn.Sequential(*units[start:start + size])
            options = {"use_reentrant": self.reentrant}
            if self.freeze_bn_stats:
                options["context_fn"] = lambda part=part: (contextlib.nullcontext(), frozen_batchnorm_stats(part))
            x = checkpoint(part, x, **options)
        for unit in units[size * (self.segments - 1):]:
            x = unit(x)
        return x
