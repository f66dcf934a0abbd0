"""Sharding the model states across GPUs: ZeRO's formulas and DeepSpeed's estimators.

Introduced in lesson 07 (when one GPU is not enough).  ZeRO's three stages
(:func:`zero_model_state_bytes`, from Rajbhandari et al., "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", SC20,
arXiv:1910.02054, section 5 and figure 1), DeepSpeed's own estimators
(:func:`deepspeed_zero2_gpu_bytes`, :func:`deepspeed_zero3_gpu_bytes`),
rewritten here from their source, and FSDP2's shard sizes
(:func:`shard_numel`).  FSDP2 itself, run on a fake process group and
measured, is :mod:`helpers.fsdp`.

All sizes are bytes; 1 GB = 10**9 bytes, 1 GiB = 2**30 bytes.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..allocator.rules import round_up
from ..config import check_int

#: ZeRO's stages, in the paper's notation (figure 1): what each one shards.
ZERO_STAGES = {
    0: "baseline (data parallel)",
    1: "P_os: optimizer states",
    2: "P_os+g: + gradients",
    3: "P_os+g+p: + parameters",
}


def zero_model_state_bytes(parameters: int, world_size: int, stage: int, k: int = 12) -> float:
    """Model-state bytes per GPU for ZeRO stage ``stage`` on ``world_size`` GPUs.

    The paper's mixed-precision Adam: 2 bytes of 16-bit parameter, 2 of 16-bit
    gradient and ``k`` = 12 of optimizer states (fp32 master parameter,
    momentum, variance) per parameter Ψ.  Per GPU, with N = ``world_size``
    (Rajbhandari et al. 2020, section 5.1-5.3 and figure 1):

    * stage 0 (baseline): (2 + 2 + K) Ψ
    * stage 1 (P_os):     2Ψ + 2Ψ + KΨ/N
    * stage 2 (P_os+g):   2Ψ + (2 + K)Ψ/N
    * stage 3 (P_os+g+p): (2 + 2 + K)Ψ/N

    Returns:
        bytes (a float: Ψ/N need not be whole).

    Raises:
        ValueError: for a negative parameter count, a world size below 1,
            an unknown stage, or a negative ``k``.
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

    ``estimate_zero2_model_states_mem_needs(..., cpu_offload=False)`` in
    ``deepspeed/runtime/zero/stage_1_and_2.py`` (deepspeedai/DeepSpeed, the
    function behind ``estimate_zero2_model_states_mem_needs_all_live``):
    ``2 * total_params + int(18 * total_params / total_gpus)``, where 2 bytes are
    the 16-bit parameters (not sharded) and 18 = 16-bit gradient 2 + fp32
    gradient 4 + fp32 parameter 4 + Adam's two moments 8, sharded.  That is the
    code since DeepSpeed pull request #5099 (June 2024); its documentation page
    *Memory Requirements* (``docs/code-docs/source/memory.rst``) still gives the
    formula from before, ``4 * params + 16 * params / total_gpus``.

    Raises:
        ValueError: for a negative parameter count or fewer than 1 GPU.
    """
    check_int("total_params", total_params, 0)
    check_int("num_gpus", num_gpus, 1)
    return 2 * total_params + int(18 * total_params / num_gpus)


def deepspeed_zero3_gpu_bytes(total_params: int, largest_layer_params: int, num_gpus: int) -> int:
    """GPU bytes per GPU that DeepSpeed estimates for ZeRO stage 3 without offload.

    ``estimate_zero3_model_states_mem_needs(..., cpu_offload=False)`` in
    ``deepspeed/runtime/zero/stage3.py`` (deepspeedai/DeepSpeed, behind
    ``estimate_zero3_model_states_mem_needs_all_live``):
    ``4 * largest_layer_params + int(18 * total_params / total_gpus)``: the
    18 bytes per parameter of stage 2, all sharded, plus 4 bytes per parameter
    of the largest layer: its 16-bit parameters gathered (2) and its 16-bit
    gradients computed (2), as DeepSpeed's *Memory Requirements* page explains
    (its ``model_to_params`` takes the largest count of parameters any one
    module holds directly, ``parameters(recurse=False)``).

    Raises:
        ValueError: for negative counts or fewer than 1 GPU.
    """
    check_int("total_params", total_params, 0)
    check_int("largest_layer_params", largest_layer_params, 0)
    check_int("num_gpus", num_gpus, 1)
    return 4 * largest_layer_params + int(18 * total_params / num_gpus)


def largest_layer_parameters(model: nn.Module) -> int:
    """The most parameters any one module of ``model`` holds itself (not counting its children),
    as DeepSpeed's ``model_to_params`` counts them for :func:`deepspeed_zero3_gpu_bytes`."""
    return max((sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules()), default=0)


def shard_numel(shape: tuple[int, ...] | torch.Size, world_size: int) -> int:
    """Elements of the largest shard (rank 0's) of a tensor of ``shape`` sharded on dim 0.

    FSDP2 splits dim 0 into ``world_size`` chunks as ``torch.chunk`` does,
    ``ceil(shape[0] / world_size)`` rows each (the last ranks get fewer, or
    none), and pads every rank's shard to that size so that the all-gather
    moves equal pieces (``_init_sharded_param`` in
    ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``).  A 0-dimensional
    tensor counts as one row.

    Raises:
        ValueError: for a world size below 1.
    """
    check_int("world_size", world_size, 1)
    shape = tuple(shape) or (1,)
    return math.ceil(shape[0] / world_size) * math.prod(shape[1:])


def sharded_parameter_bytes(model: nn.Module, world_size: int) -> int:
    """Bytes of rank 0's shards of ``model``'s parameters under FSDP2, by formula.

    Each parameter's shard is :func:`shard_numel` elements (dim 0 split in
    ``world_size``, padded to equal pieces), one storage each, rounded up to
    512 bytes.  The same rule gives the optimizer states of rank 0 (its shards
    are the unpadded ones, and rank 0's is never padded).

    Raises:
        ValueError: for a world size below 1.
    """
    return sum(round_up(shard_numel(p.shape, world_size) * p.element_size()) for p in model.parameters())
