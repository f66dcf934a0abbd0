"""ReLUs whose backward keeps a mask instead of the float output (lesson 02).

``nn.ReLU`` saves its output for backward (``ReluBackward0._saved_result``): 4 bytes per element in float32. Its
gradient needs only the sign: a bool mask (:class:`BoolMaskReLU`) or a packed one (:class:`BitMaskReLU`) is enough.
"""

from __future__ import annotations

import torch
from torch import nn


class _BoolMaskReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        mask = x > 0
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """Pack a bool tensor into uint8, 8 elements per byte (little-endian bits): any -> ``(ceil(numel / 8),)``."""
    flat = mask.reshape(-1)
    pad = (-flat.numel()) % 8
    if pad:
        flat = torch.cat([flat, flat.new_zeros(pad)])
    bits = flat.view(-1, 8).to(torch.uint8) << torch.arange(8, dtype=torch.uint8, device=flat.device)
    return bits.sum(dim=1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Inverse of :func:`pack_bits`: uint8 ``(ceil(n / 8),)`` -> bool tensor of ``shape``."""
    n = 1
    for s in shape:
        n *= s
    bits = (packed.unsqueeze(1) >> torch.arange(8, dtype=torch.uint8, device=packed.device)) & 1
    return bits.reshape(-1)[:n].reshape(shape).bool()


class _BitMaskReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        mask = x > 0
        ctx.save_for_backward(pack_bits(mask))
        ctx.shape = x.shape
        return x * mask

    @staticmethod
    def backward(ctx, grad):
        (packed,) = ctx.saved_tensors
        return grad * unpack_bits(packed, ctx.shape)


class BoolMaskReLU(nn.Module):
    """ReLU whose backward keeps a bool mask of ``x > 0``: 1 byte per element, the same gradient. Shape: any -> same."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BoolMaskReLU.apply(x)


class BitMaskReLU(nn.Module):
    """ReLU whose backward keeps ``x > 0`` bit-packed (:func:`pack_bits`): 1/8 byte per element, the same gradient."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BitMaskReLU.apply(x)


def replace_relu(model: nn.Module, make: type[nn.Module]) -> nn.Module:
    """Replace every ``nn.ReLU`` in ``model`` (in place) by ``make()``; return the model."""
    for name, child in model.named_children():
        if isinstance(child, nn.ReLU):
            setattr(model, name, make())
        else:
            replace_relu(child, make)
    return model
