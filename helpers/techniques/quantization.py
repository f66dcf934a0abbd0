"""QLoRA's frozen weights in 4-bit NormalFloat (Dettmers et al., 2023), as torchao stores them (lesson 09).

With ``StepConfig.quantization="nf4"`` every frozen linear weight (:func:`nf4_linears`) is torchao's ``NF4Tensor``,
computed in bfloat16 (:class:`NF4Linear`): :func:`hold_back` keeps those weights off the device while the model is
placed, and :func:`quantize` brings each in bfloat16, quantizes it and frees the copy, one at a time, as bitsandbytes
does while ``from_pretrained`` loads. torchao's ``to_nf4`` and ``linear_nf4`` run on fake tensors; bitsandbytes' CUDA
kernels cannot. The two layouts agree within a few bytes per 16384 weights (:func:`nf4_bytes`).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..engine.meter import remembered
from ..errors import Refused

#: NF4's blocks: one absmax scale per 64 weights, those scales quantized to int8 with one float scale per 256 of them:
#: torchao's ``to_nf4`` defaults, and the QLoRA paper's (Dettmers et al., 2023, section 3).
NF4_BLOCK = 64
NF4_SCALER_BLOCK = 256


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


def _nf4():
    """torchao's NF4 module, imported when first needed (it takes a second)."""
    from torchao.quantization.quantize_.workflows.nf4 import nf4_tensor

    return nf4_tensor


def nf4_scaler_block(numel: int) -> int:
    """The scaler block of a weight of ``numel`` elements: the largest divisor of its blocks up to 256."""
    blocks = numel // NF4_BLOCK
    return max(d for d in range(1, NF4_SCALER_BLOCK + 1) if blocks % d == 0)


def nf4_linears(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    """The linear layers QLoRA quantizes, as ``(parent, attribute, layer)``: every ``nn.Linear`` with a frozen weight
    but the output embeddings and tied weights (``get_keys_to_not_convert``, ``transformers/quantizers/base.py``)."""
    get_output = getattr(model, "get_output_embeddings", None)
    head = get_output() if callable(get_output) else None
    counts: dict[int, int] = {}
    for module in model.modules():
        for p in module._parameters.values():
            if p is not None:
                counts[id(p)] = counts.get(id(p), 0) + 1
    found = []
    for parent in model.modules():
        for attribute, layer in parent.named_children():
            if (type(layer) is nn.Linear and layer is not head and not layer.weight.requires_grad
                    and counts[id(layer.weight)] == 1):
                found.append((parent, attribute, layer))
    return found


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
#: the weight's shape (:func:`quantize`).
_DEQUANTIZED: dict = {}
_QUANTIZED: dict = {}


def dequantized(weight, dtype: torch.dtype) -> torch.Tensor:
    """``weight.to(dtype)``: an ``NF4Tensor`` dequantized by torchao's ``get_original_weight``, about 20 eager
    operations. Simulated, a weight of a layout seen before is written from the first one's allocations
    (:func:`helpers.engine.meter.remembered`: the same bytes, in the same order, without the operations)."""
    inner = tuple((t.shape, t.dtype, t.stride()) for t in map(weight.__getattribute__, weight.__tensor_flatten__()[0]))
    key = (dtype, weight.shape, weight.stride(), weight.dtype, weight.block_size, weight.scaler_block_size, inner,
           torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu"),
           torch.get_autocast_dtype("cpu"))
    return remembered(_DEQUANTIZED, key, lambda: weight.to(dtype))


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


def hold_back(runner) -> None:
    """The recipe's step before placing (``config.quantization == "nf4"``): the :func:`nf4_linears` weights wait in
    ``runner.held_back``.

    Raises:
        Refused (a ValueError): if a weight's size is not a multiple of 64, naming the layer.
    """
    if runner.config.quantization != "nf4":
        return
    model = runner.model
    layers = nf4_linears(model)
    names = {id(m): n for n, m in model.named_modules()}
    for _, _, layer in layers:
        if layer.weight.numel() % NF4_BLOCK:
            raise Refused(f"quantization='nf4': {names[id(layer)]} has {layer.weight.numel()} weights, not a "
                          f"multiple of {NF4_BLOCK} (torchao's NF4 blocks)")
    runner.held_back = [(parent, attribute, layer, layer.weight) for parent, attribute, layer in layers]
    for _, _, layer in layers:
        layer._parameters["weight"] = None  # placed by quantize(), one at a time, in 4 bits


def quantize(runner) -> None:
    """The recipe's step after placing: each held-back weight arrives in bfloat16, is quantized (``to_nf4``) into an
    :class:`NF4Linear` and its copy freed; then the meter's peak starts afresh (loading is not the step). Simulated, a
    weight of a shape seen before is written from the first one's allocations (as in :func:`dequantized`)."""
    if not runner.held_back:
        return
    nf4, device = _nf4(), runner.meter.device
    chunk = nf4.CHUNK_SIZE
    for parent, attribute, layer, weight in runner.held_back:
        if weight.is_meta:  # simulated: one chunk, for speed (the chunks bound a transient before the step)
            dense = torch.empty(weight.shape, dtype=torch.bfloat16, device=device)
            nf4.CHUNK_SIZE = max(chunk, weight.numel())
        else:
            dense = weight.detach().to(device=device, dtype=torch.bfloat16)
        try:
            key = (dense.shape, dense.stride(), dense.device, nf4.CHUNK_SIZE)  # no autograd: the same in any mode
            scaler = nf4_scaler_block(dense.numel())
            quantized = remembered(_QUANTIZED, key, lambda: nf4.to_nf4(dense, NF4_BLOCK, scaler))
        finally:
            nf4.CHUNK_SIZE = chunk
        setattr(parent, attribute, NF4Linear(quantized, layer.bias))
        del dense
    runner.held_back = []
    runner.meter.reset_peak()
