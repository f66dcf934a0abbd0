"""torchao's NF4 (``NF4Tensor``, what torchtune's QLoRA recipes use): its bytes, its linear layer and its
quantization of a frozen weight (lesson 09), for the recipe's ``quantize`` step
(:mod:`helpers.techniques.quantization`).

Simulated, torchao's eager operations run on fake tensors; a quantization or dequantization of a layout seen before is
written from the first one's allocations (:func:`helpers.engine.meter.remembered`: the same bytes, in the same order).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..engine.meter import remembered
from ..formats import NF4_BLOCK, NF4_SCALER_BLOCK
from .precision import arriving


def nf4_bytes(numel: int, dtype_bytes: int = 2) -> dict[str, int]:
    """The bytes of one weight of ``numel`` elements as torchao's ``NF4Tensor`` stores it (before 512-byte rounding).

    ``NF4Tensor.from_tensor`` (``torchao/quantization/quantize_/workflows/nf4/nf4_tensor.py``), ``dtype_bytes`` per
    element (2: bfloat16): codes ``numel / 2``; scales ``numel / 64`` int8; scale factors
    ``dtype_bytes * numel / (64 * 256)``; a mean and a 16-value code book in the weight's dtype. Returns
    ``{"codes", "scales", "scale_factors", "mean", "code_book"}`` -> bytes.
    """
    blocks = numel // NF4_BLOCK
    return {"codes": numel // 2, "scales": blocks, "scale_factors": dtype_bytes * (blocks // nf4_scaler_block(numel)),
            "mean": dtype_bytes, "code_book": 16 * dtype_bytes}


def nf4_module():
    """torchao's NF4 module, imported when first needed (it takes a second)."""
    from torchao.quantization.quantize_.workflows.nf4 import nf4_tensor

    return nf4_tensor


def nf4_scaler_block(numel: int) -> int:
    """The scaler block of a weight of ``numel`` elements: the largest divisor of its blocks up to 256."""
    blocks = numel // NF4_BLOCK
    return max(d for d in range(1, NF4_SCALER_BLOCK + 1) if blocks % d == 0)


class LinearNF4(torch.autograd.Function):
    """torchao's ``LinearNF4`` (``nf4_tensor.py``), its dequantizations through :func:`dequantized`."""

    @staticmethod
    def forward(ctx, input: torch.Tensor, weight) -> torch.Tensor:
        ctx.save_for_backward(weight)
        return F.linear(input, dequantized(weight, input.dtype))

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        weight = ctx.saved_tensors[0]
        return grad_output @ dequantized(weight, grad_output.dtype), None


#: The allocations of one dequantization, by the weight's layout (:func:`dequantized`), and of one quantization, by
#: the weight's shape (:func:`torchao_linear`).
DEQUANTIZED: dict = {}
QUANTIZED: dict = {}


def dequantized(weight, dtype: torch.dtype) -> torch.Tensor:
    """``weight.to(dtype)``: an ``NF4Tensor`` dequantized by torchao's ``get_original_weight``, about 20 eager
    operations. Simulated, a weight of a layout seen before is written from the first one's allocations
    (:func:`helpers.engine.meter.remembered`: the same bytes, in the same order, without the operations)."""
    inner = tuple((t.shape, t.dtype, t.stride()) for t in map(weight.__getattribute__, weight.__tensor_flatten__()[0]))
    key = (dtype, weight.shape, weight.stride(), weight.dtype, weight.block_size, weight.scaler_block_size, inner,
           torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu"),
           torch.get_autocast_dtype("cpu"))
    return remembered(DEQUANTIZED, key, lambda: weight.to(dtype))


class NF4Linear(nn.Module):
    """A frozen linear layer whose weight is torchao's ``NF4Tensor``, computed in bfloat16 (bitsandbytes'
    ``Linear4bit`` with ``bnb_4bit_compute_dtype=torch.bfloat16``), through torchao's ``linear_nf4``
    (:class:`LinearNF4`): the weight is dequantized for the matmul and freed, the ``NF4Tensor`` saved and dequantized
    again in backward. torchao's eager dequantization holds about 14 bytes per weight during the matmul, where
    bitsandbytes' kernel writes 2."""

    def __init__(self, weight, bias: nn.Parameter | None):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = bias
        self.out_features, self.in_features = weight.shape

    def forward(self, x):
        out = LinearNF4.apply(x.to(torch.bfloat16), self.weight)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, weight=NF4"


def torchao_linear(weight: torch.Tensor, bias: nn.Parameter | None, device: torch.device) -> "NF4Linear":
    """torchao's :class:`NF4Linear` for a frozen ``weight``: it arrives in bfloat16 and ``to_nf4`` quantizes it.
    Simulated, a weight of a shape seen before is written from the first one's allocations (as in
    :func:`dequantized`), in one chunk (the chunks bound a transient before the step)."""
    nf4 = nf4_module()
    chunk = nf4.CHUNK_SIZE
    dense = arriving(weight, device)
    if weight.is_meta:
        nf4.CHUNK_SIZE = max(chunk, weight.numel())
    try:
        key = (dense.shape, dense.stride(), dense.device, nf4.CHUNK_SIZE)  # no autograd: the same in any mode
        scaler = nf4_scaler_block(dense.numel())
        quantized = remembered(QUANTIZED, key, lambda: nf4.to_nf4(dense, NF4_BLOCK, scaler))
    finally:
        nf4.CHUNK_SIZE = chunk
    del dense
    return NF4Linear(quantized, bias)
