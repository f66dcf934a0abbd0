"""Activation checkpointing by segments, BatchNorm statistics that stay right,
and full or selective checkpointing of transformer blocks.

Introduced in lesson 04 (AMP and activation checkpointing); lesson 01's training
loop uses :class:`Checkpointed`, and the step runner's recipe
(:data:`helpers.step.RECIPE`) :func:`enable`; lesson 08 checkpoints
transformer blocks with :func:`checkpoint_blocks`.
"""

from __future__ import annotations

import contextlib
import functools

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from ..errors import Refused, first_line
from ..models import sequential_form


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


#: Activation checkpointing of each block: none, full (the block keeps only its
#: input and recomputes everything in backward), or selective (matmul and
#: attention outputs saved, the rest recomputed; see :class:`CheckpointedBlock`).
CHECKPOINT_POLICIES = ("none", "full", "selective")


#: The operations whose outputs the selective policy saves: the matmuls, and
#: the fused attention kernels (CUDA's and the CPU's, which the simulation runs).
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
    """A transformer block run under activation checkpointing.

    ``"full"``: ``torch.utils.checkpoint.checkpoint(block, ..., use_reentrant=False)``:
    the block keeps its input only, and runs again in backward.  ``"selective"``:
    the same with ``context_fn=functools.partial(create_selective_checkpoint_contexts,
    policy)``, whose policy saves the outputs of the matmuls and fused attention
    kernels (:data:`SAVED_BY_SELECTIVE`) and recomputes the cheap rest
    (LayerNorms, GELU, residual sums, softmax): the policy of the PyTorch blog
    post *Current and New Activation Checkpointing Techniques in PyTorch* (2025).
    The tensors it saves pass through the saved-tensor hooks around it
    (``respect_saved_tensors_hooks=True``), which PyTorch 2.14.1 announces as
    its future default; with no hooks of the learner's (no offloading), as in
    every step here, that changes nothing in memory.

    Args:
        block: the block (called with the same arguments).
        policy: ``"full"`` or ``"selective"``.

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
            # What SAC saves goes through the saved-tensor hooks around it, so that the step's tracer
            # counts it as saved for backward (its hooks return the tensor itself: no byte changes).
            # PyTorch 2.14.1's default (None) bypasses the hooks and warns when one is active.
            options["respect_saved_tensors_hooks"] = True
        return checkpoint(self.block, *args, **options)


def checkpoint_blocks(model: nn.Module, policy: str) -> nn.Module:
    """Wrap each of ``model.blocks`` in a :class:`CheckpointedBlock` (in place; returned).

    Raises:
        ValueError: for a policy not in :data:`CHECKPOINT_POLICIES`, or a model
            without a ``blocks`` list.
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

    A model with Hugging Face's ``gradient_checkpointing_enable()`` (a
    ``transformers`` model) checkpoints its own way, whatever the number: each
    decoder layer a segment, its forward recomputed in backward
    (``use_reentrant`` as ``config.reentrant``).  Any other model runs as
    :class:`Checkpointed` segments of :func:`helpers.models.sequential_form`
    (``runner.segments``).

    Raises:
        Refused (a ValueError): for a model that is not a sequence of modules,
            a number of segments it does not have, or offloading
            (``config.offload``) with selective checkpointing, which PyTorch's
            tensors saved by SAC bypass (``save_on_cpu``).
    """
    config, model = runner.config, runner.model
    if config.offload and any(isinstance(m, CheckpointedBlock) and m.policy == "selective" for m in model.modules()):
        raise Refused("offloading saved tensors (save_on_cpu) with selective activation checkpointing is not "
                      "simulated: PyTorch 2.14.1 lets the tensors SAC saves bypass save_on_cpu, and announces "
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
