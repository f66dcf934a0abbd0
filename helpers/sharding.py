"""Sharding the model states across GPUs: ZeRO's formulas and DeepSpeed's estimators (lesson 07).

ZeRO's three stages (Rajbhandari et al., SC20, arXiv:1910.02054, section 5 and figure 1), DeepSpeed's estimators
rewritten from their source, and FSDP2's shard sizes; FSDP2 itself, measured, is :mod:`helpers.fsdp`. Bytes.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .allocator.rules import round_up
from .config import check_int

#: ZeRO's stages, in the paper's notation (figure 1): what each one shards.
ZERO_STAGES = {
    0: "baseline (data parallel)",
    1: "P_os: optimizer states",
    2: "P_os+g: + gradients",
    3: "P_os+g+p: + parameters",
}


def zero_model_state_bytes(parameters: int, world_size: int, stage: int, k: int = 12) -> float:
    """Model-state bytes per GPU for ZeRO stage ``stage`` on N = ``world_size`` GPUs.

    The paper's mixed-precision Adam (section 5.1-5.3, figure 1), Ψ parameters of 2 bytes, 2 of gradient, ``k`` = 12
    of optimizer states: stage 0 (2 + 2 + K)Ψ; stage 1 2Ψ + 2Ψ + KΨ/N; stage 2 2Ψ + (2 + K)Ψ/N; stage 3
    (2 + 2 + K)Ψ/N. A float (Ψ/N need not be whole).
    Raises ``ValueError`` for a negative parameter count, a world size below 1, an unknown stage, or a negative ``k``.
    """
    check_int("parameters", parameters, 0)
    check_int("world_size", world_size, 1)
    if stage not in ZERO_STAGES:
        raise ValueError(f"stage must be one of {sorted(ZERO_STAGES)}, got {stage!r}")
    check_int("k", k, 0)
    p, n = parameters, world_size
    return {0: (4 + k) * p, 1: 4 * p + k * p / n, 2: 2 * p + (2 + k) * p / n, 3: (4 + k) * p / n}[stage]


def deepspeed_zero2_gpu_bytes(total_params: int, num_gpus: int) -> int:
    """GPU bytes per GPU that DeepSpeed estimates for ZeRO stage 2 without offload.

    ``estimate_zero2_model_states_mem_needs(cpu_offload=False)``, ``deepspeed/runtime/zero/stage_1_and_2.py``:
    ``2 * total_params + int(18 * total_params / total_gpus)``. Its documentation (``memory.rst``) still gives the
    formula from before DeepSpeed #5099, ``4 * params + 16 * params / total_gpus``.
    Raises ``ValueError`` for a negative parameter count or fewer than 1 GPU.
    """
    check_int("total_params", total_params, 0)
    check_int("num_gpus", num_gpus, 1)
    return 2 * total_params + int(18 * total_params / num_gpus)


def deepspeed_zero3_gpu_bytes(total_params: int, largest_layer_params: int, num_gpus: int) -> int:
    """GPU bytes per GPU that DeepSpeed estimates for ZeRO stage 3 without offload.

    ``estimate_zero3_model_states_mem_needs(cpu_offload=False)``, ``deepspeed/runtime/zero/stage3.py``:
    ``4 * largest_layer_params + int(18 * total_params / total_gpus)`` (:func:`largest_layer_parameters`).
    Raises ``ValueError`` for negative counts or fewer than 1 GPU.
    """
    check_int("total_params", total_params, 0)
    check_int("largest_layer_params", largest_layer_params, 0)
    check_int("num_gpus", num_gpus, 1)
    return 4 * largest_layer_params + int(18 * total_params / num_gpus)


def largest_layer_parameters(model: nn.Module) -> int:
    """The most parameters one module of ``model`` holds itself (DeepSpeed's ``model_to_params``, ``recurse=False``)."""
    return max((sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()), default=0)


def shard_numel(shape: tuple[int, ...] | torch.Size, world_size: int) -> int:
    """Elements of the largest shard (rank 0's) of a tensor of ``shape`` sharded on dim 0.

    FSDP2 splits dim 0 as ``torch.chunk`` does and pads every shard to ``ceil(shape[0] / world_size)`` rows
    (``_init_sharded_param``, ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``); a 0-d tensor is one row.
    Raises ``ValueError`` for a world size below 1.
    """
    check_int("world_size", world_size, 1)
    shape = tuple(shape) or (1,)
    return math.ceil(shape[0] / world_size) * math.prod(shape[1:])


def sharded_parameter_bytes(model: nn.Module, world_size: int) -> int:
    """Bytes of rank 0's shards of ``model``'s parameters under FSDP2 (:func:`shard_numel`, each rounded up to 512).
    Raises ``ValueError`` for a world size below 1.
    """
    return sum(round_up(shard_numel(p.shape, world_size) * p.element_size()) for p in model.parameters())
