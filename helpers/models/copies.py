"""The model a step gets: its spec built fresh (:func:`build`, the first step of :data:`helpers.step.RECIPE`), or a
copy of a learner's module (:func:`copy_for_step`) that leaves the original untouched.
"""

from __future__ import annotations

import copy
from itertools import chain

import torch
from torch import nn

from ..errors import Refused


def meta_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` with its parameters and buffers on ``meta`` (tied weights stay tied; the original is untouched)."""
    memo = {}
    for t in chain(module.parameters(), module.buffers()):
        meta = torch.empty_like(t, device="meta")
        memo[id(t)] = nn.Parameter(meta, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else meta
    return copy.deepcopy(module, memo)


def copy_for_step(module: nn.Module) -> nn.Module:
    """A copy of a learner's model for one step: meta tensors under a ``meta`` device, else a real copy."""
    return meta_copy(module) if torch.get_default_device().type == "meta" else copy.deepcopy(module)


def build(runner) -> None:
    """The recipe's first step: ``runner.model`` is ``runner.spec.build()``, outside any measurement.

    Raises:
        Refused (a ValueError): if the builder returns something else than an ``nn.Module``.
    """
    model = runner.spec.build()
    if not isinstance(model, nn.Module):
        raise Refused(f"the model function must return an nn.Module, got {type(model).__name__}")
    runner.model = model
