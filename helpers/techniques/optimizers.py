"""The optimizers of a profiled step.

Introduced in lesson 01 (steady-state steps keep the optimizer states) and
used by every profiled step.
"""

from __future__ import annotations

import torch

from ..config import OPTIMIZERS


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    """The optimizer of a traced step.

    * ``sgd``: ``SGD(lr=0.01, momentum=0.9)``: one momentum buffer per
      parameter (4 bytes per fp32 parameter).
    * ``adam``: ``Adam(lr=1e-3)``: two moment estimates per parameter
      (8 bytes per fp32 parameter) and a step counter per tensor.

    Both use ``foreach=True``, the implementation PyTorch picks by default on
    a GPU, so that simulated and real steps allocate the same temporaries.

    Raises:
        ValueError: for a name not in :data:`OPTIMIZERS`.
    """
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=True)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=True)
    raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}")
