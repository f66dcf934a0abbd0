"""Activation checkpointing: by segments (lesson 04; the recipe's :func:`enable`), BatchNorm statistics that stay
right, and full or selective checkpointing of transformer blocks (lesson 08b, section 2)."""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from ..errors import Refused, first_line
from ..versions import TORCH
from ..models.presets import sequential_form


@contextlib.contextmanager
def frozen_batchnorm_stats(module: nn.Module):
    """Keep BatchNorm running statistics unchanged while the block runs (a checkpointed segment runs forward twice):
    inside, every BatchNorm's ``momentum`` is 0, and ``num_batches_tracked`` is decremented back after."""
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

    As ``torch.utils.checkpoint.checkpoint_sequential``: ``segments`` parts of ``len(sequence) // segments`` modules,
    the last taking the rest; all but the last keep only their input and recompute in backward.

    Args:
        sequence, segments: modules to run in order (:func:`helpers.models.sequential_form`); from 1 to their number.
        reentrant: ``use_reentrant=True``, which gives no gradient to a segment whose inputs do not require grad
            (lesson 04's trap); default: the non-reentrant variant PyTorch recommends.
        freeze_bn_stats: :func:`frozen_batchnorm_stats` during recomputation (non-reentrant only).

    Raises:
        ValueError: if ``segments`` is out of range, or ``freeze_bn_stats`` with the reentrant variant.
    """

    def __init__(self, sequence: nn.Sequential, segments: int, reentrant: bool = False, freeze_bn_stats: bool = False):
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


#: Activation checkpointing of each block: none, full or selective (:class:`CheckpointedBlock`).
CHECKPOINT_POLICIES = ("none", "full", "selective")

#: The operations whose outputs the selective policy saves: the matmuls, and the fused attention kernels (CUDA's and
#: the CPU's, which the simulation runs).
SAVED_BY_SELECTIVE = (
    torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
)


def _save_matmuls(ctx, op, *args, **kwargs) -> CheckpointPolicy:
    """The selective policy: save the outputs of :data:`SAVED_BY_SELECTIVE`, recompute the rest."""
    return CheckpointPolicy.MUST_SAVE if op in SAVED_BY_SELECTIVE else CheckpointPolicy.PREFER_RECOMPUTE


class CheckpointedBlock(nn.Module):
    """A transformer block run under activation checkpointing, ``"full"`` or ``"selective"``.

    ``"full"``: ``checkpoint(block, use_reentrant=False)``, the input kept. ``"selective"``: with
    ``context_fn=partial(create_selective_checkpoint_contexts, policy)``, saving :data:`SAVED_BY_SELECTIVE`'s outputs
    and recomputing the rest: the policy of the PyTorch blog post *Current and New Activation Checkpointing Techniques
    in PyTorch* (2025).

    Raises:
        ValueError: for another policy.
    """

    def __init__(self, block: nn.Module, policy: str):
        super().__init__()
        if policy not in ("full", "selective"):
            raise ValueError(f"policy must be 'full' or 'selective', got {policy!r}")
        self.block, self.policy = block, policy

    def forward(self, *args):
        options = {"use_reentrant": False}
        if self.policy == "selective":
            options["context_fn"] = functools.partial(create_selective_checkpoint_contexts, _save_matmuls)
            # So that the step's tracer counts what SAC saves as saved for backward (no byte changes); the pinned
            # PyTorch's default (None) bypasses the hooks and warns when one is active.
            options["respect_saved_tensors_hooks"] = True
        return checkpoint(self.block, *args, **options)


def checkpoint_blocks(model: nn.Module, policy: str) -> nn.Module:
    """Wrap each of ``model.blocks`` in a :class:`CheckpointedBlock` (in place; returned).

    Raises:
        ValueError: for a policy not in :data:`CHECKPOINT_POLICIES`, or no ``blocks`` list.
    """
    if policy not in CHECKPOINT_POLICIES:
        raise ValueError(f"unknown checkpointing policy {policy!r}; use one of {', '.join(CHECKPOINT_POLICIES)}")
    if not isinstance(getattr(model, "blocks", None), nn.ModuleList):
        raise ValueError(f"{type(model).__name__} has no 'blocks' list to checkpoint")
    if policy != "none":
        for i, block in enumerate(model.blocks):
            model.blocks[i] = CheckpointedBlock(block, policy)
    return model


def enable(runner) -> None:
    """The recipe's checkpointing step: ``config.checkpoint`` segments (``config.reentrant``).

    A ``transformers`` model checkpoints each decoder layer (``gradient_checkpointing_enable()``); any other runs as
    :class:`Checkpointed` segments of :func:`helpers.models.sequential_form` (``runner.segments``).

    Raises:
        Refused (a ValueError): for a model that is not a sequence of modules, a number of segments it does not
            have, or offloading with selective checkpointing (SAC's saved tensors bypass ``save_on_cpu``).
    """
    config, model = runner.config, runner.model
    if config.offload and any(isinstance(m, CheckpointedBlock) and m.policy == "selective" for m in model.modules()):
        raise Refused("offloading saved tensors (save_on_cpu) with selective activation checkpointing is not "
                      f"simulated: PyTorch {TORCH} lets the tensors SAC saves bypass save_on_cpu, and announces "
                      "that this will change")
    if not config.checkpoint:
        return
    try:
        if hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": config.reentrant})
        else:
            runner.segments = Checkpointed(sequential_form(model), config.checkpoint, config.reentrant)
    except ValueError as e:
        raise Refused(first_line(e)) from None
