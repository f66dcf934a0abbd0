"""bitsandbytes' formats: 4-bit NF4 and FP4 (``Linear4bit``, what QLoRA users run; Dettmers et al., 2023) and
LLM.int8() (``Linear8bitLt``; Dettmers et al., 2022): their bytes, and the layers ``from_pretrained`` makes of a frozen
weight with ``BitsAndBytesConfig`` (lesson 09), for the recipe's ``quantize`` step
(:mod:`helpers.techniques.quantization`).

Simulated, the tensors are CPU fake tensors, and bitsandbytes' operators run as their registered fake kernels
(``bitsandbytes/_ops.py``), which allocate what its CUDA kernels allocate (``backends/cuda/ops.py``), in the same
order, except the fused ``gemm_4bit`` and the int8 operators: :data:`helpers.engine.bnb_rules.BNB_CUDA` writes their
CUDA allocations. The CPU branches bitsandbytes would take on such tensors are turned off: repacking 4-bit weights for
AVX-512 inference, and training an int8 layer through ``MatMul8bitFp`` (:func:`_cuda_path`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes

from ..formats import NF4_BLOCK
from .precision import arriving


#: bitsandbytes' CPU backend logs a warning on AVX-512 machines when imported (by this module, peft or transformers)
#: about an optional package of CPU kernels, which the simulation does not use: its errors only.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
#: ``MatMul8bitLt`` logs a warning at every product of an input not in float16 (a bfloat16 one, under bfloat16 AMP)
#: that it is cast to float16 to be quantized, which :func:`int8_linear` says once: its errors only.
logging.getLogger("bitsandbytes.autograd._functions").setLevel(logging.ERROR)


def _bitsandbytes():
    """bitsandbytes, imported when first needed, outside the step's dispatch modes: its modules make tensors as they
    are imported (the 4-bit code tables of ``bitsandbytes/backends/utils.py``), which would otherwise be fake tensors
    of the step, counted by its tracker the first time in a process (1 KiB more weights) and kept in the module."""
    with _disable_current_modes():
        import bitsandbytes

    return bitsandbytes


def bnb_bytes(numel: int, double_quant: bool, blocksize: int = NF4_BLOCK) -> dict[str, int]:
    """The bytes of one weight of ``numel`` elements in bitsandbytes' 4-bit formats, NF4 or FP4 alike (before 512-byte
    rounding): ``quantize_4bit`` (``bitsandbytes/functional.py``, ``backends/cuda/ops.py``) packs two codes a byte
    (``numel / 2``) and keeps one float32 scale (absmax) per ``blocksize`` weights, and a 16-value float32 code book.
    With ``double_quant`` (``bnb_4bit_use_double_quant``) the scales are shifted by their float32 mean and quantized
    to 8 bits in blocks of 256 (``quantize_blockwise``), with a float32 scale per block and the 256-value dynamic
    code book. Returns ``{"codes", "scales", "code_book"}``, and with ``double_quant`` also ``"scale_scales",
    "offset", "scale_code_book"``, -> bytes."""
    blocks = -(-numel // blocksize)
    if not double_quant:
        return {"codes": (numel + 1) // 2, "scales": 4 * blocks, "code_book": 64}
    return {"codes": (numel + 1) // 2, "scales": blocks, "code_book": 64, "scale_scales": 4 * -(-blocks // 256),
            "offset": 4, "scale_code_book": 1024}


#: LLM.int8()'s outlier threshold, Hugging Face's ``BitsAndBytesConfig(load_in_8bit=True)`` default
#: (``llm_int8_threshold``): input columns with a value of at least this size are multiplied in 16 bits.
INT8_THRESHOLD = 6.0


def int8_bytes(out_features: int, in_features: int) -> dict[str, int]:
    """The bytes of one (``out_features``, ``in_features``) weight in bitsandbytes' LLM.int8() (before 512-byte
    rounding): ``Int8Params._quantize`` (``bitsandbytes/nn/modules.py``) runs ``int8_vectorwise_quant``
    (``backends/cuda/ops.py``), which keeps one int8 code per weight (``CB``) and one float32 absmax per output row
    (``SCB``). Returns ``{"codes", "row_scales"}`` -> bytes."""
    return {"codes": out_features * in_features, "row_scales": 4 * out_features}


def state_tensors(weight: torch.Tensor) -> list[torch.Tensor]:
    """The tensors a bitsandbytes ``weight`` carries beside its codes (none for another tensor): for a 4-bit weight
    those of its ``QuantState``, its scales, code book and offset, and with double quantization those of its scales'
    own state (``state2``); for an int8 weight its float32 row scales (``SCB``, until the layer's first forward moves
    them into its ``MatmulLtState``)."""
    found, state = [], getattr(weight, "quant_state", None)
    while state is not None:
        found += [t for t in (state.absmax, state.code, state.offset) if isinstance(t, torch.Tensor)]
        state = state.state2
    scales = getattr(weight, "SCB", None)
    return found + [scales] if isinstance(scales, torch.Tensor) else found


def weights(parameter: torch.Tensor) -> int:
    """The weights a parameter stands for: its elements (an int8 weight: one code each), or for a bitsandbytes 4-bit
    weight (two codes a byte) those of the shape it was quantized from (as ``transformers``' ``num_parameters`` counts
    them)."""
    state = getattr(parameter, "quant_state", None)
    return parameter.numel() if state is None else math.prod(state.shape)


def bnb_linear(weight: torch.Tensor, bias: nn.Parameter | None, config, device: torch.device) -> nn.Module:
    """bitsandbytes' ``Linear4bit`` for a frozen ``weight`` (out, in), as ``from_pretrained`` makes it with
    ``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=config.quantization,
    bnb_4bit_use_double_quant=config.double_quant, bnb_4bit_compute_dtype=config.compute_dtype)``: the weight arrives on
    the device in bfloat16, ``quantize_4bit`` makes its 4-bit codes and their ``QuantState``, as
    ``Params4bit._quantize`` does, and the copy is freed. On a GPU the codes become bitsandbytes' ``Params4bit``
    (``bnb_quantized``, as ``Params4bit.from_prequantized`` makes it); simulated, ``Params4bit`` cannot wrap a fake
    tensor, and the codes are a frozen fake ``Parameter`` of the class :class:`Params4bit`, carrying the state.
    ``Linear4bit.forward`` reads it from there."""
    bnb = _bitsandbytes()
    with _disable_current_modes():  # the module is made on meta, outside the step's fake tensors
        layer = bnb.nn.Linear4bit(weight.shape[1], weight.shape[0], bias=False,
                                  compute_dtype=getattr(torch, config.compute_dtype),
                                  compress_statistics=config.double_quant, quant_type=config.quantization,
                                  device="meta")
    layer.support_avx512bf16_for_cpu = False  # a CPU-only repacking for inference; CUDA has none
    dense = arriving(weight, device)
    codes, state = bnb.functional.quantize_4bit(dense, blocksize=NF4_BLOCK, compress_statistics=config.double_quant,
                                                quant_type=config.quantization, quant_storage=torch.uint8)
    del dense
    if isinstance(codes, FakeTensor):
        layer.weight = nn.Parameter(codes, requires_grad=False)
        layer.weight.__class__ = Params4bit
    else:
        layer.weight = bnb.nn.Params4bit(codes, requires_grad=False, quant_state=state, blocksize=NF4_BLOCK,
                                         compress_statistics=config.double_quant, quant_type=config.quantization,
                                         quant_storage=torch.uint8, module=layer, bnb_quantized=True)
    layer.weight.quant_state = layer.quant_state = state
    layer.bias = bias
    return layer


def int8_linear(weight: torch.Tensor, bias: nn.Parameter | None, device: torch.device) -> nn.Module:
    """bitsandbytes' ``Linear8bitLt`` for a frozen ``weight`` (out, in), as ``from_pretrained`` makes it with
    ``BitsAndBytesConfig(load_in_8bit=True)`` (``Linear8bitLt(has_fp16_weights=False, threshold=6.0)``,
    ``transformers/integrations/bitsandbytes.py``): ``Int8Params._quantize`` brings the weight to the device in
    float16, ``int8_vectorwise_quant`` makes its int8 codes ``CB`` and float32 row scales ``SCB``
    (:func:`int8_bytes`), and the copy is freed. The codes are a plain frozen ``Parameter`` carrying ``CB`` and ``SCB``
    (``Int8Params`` cannot wrap a fake tensor), as an ``Int8Params`` carries them after ``.cuda()``; the layer's first
    forward moves them into its ``MatmulLtState`` (``Linear8bitLt.init_8bit_state``).

    Its product (``MatMul8bitLt``, ``bitsandbytes/autograd/_functions.py``, on bitsandbytes' CUDA path,
    :func:`_cuda_path`) casts the input to float16 and quantizes it row-wise to int8, multiplies the int8 codes into
    the input's dtype (:data:`helpers.engine.bnb_rules.BNB_CUDA`), and keeps the input for backward (``ctx.tensors``,
    not ``save_for_backward``), though its backward does not read it; its backward dequantizes ``CB`` into the input's
    dtype (``N * K`` elements, with ``SCB / 127`` in float32) for ``grad_output @ W``. The simulation assumes no
    outlier column (:func:`helpers.engine.bnb_rules.bnb_int8_vectorwise_quant`)."""
    bnb = _bitsandbytes()
    with _disable_current_modes():  # the module is made on meta, outside the step's fake tensors
        layer = bnb.nn.Linear8bitLt(weight.shape[1], weight.shape[0], bias=False, has_fp16_weights=False,
                                    threshold=INT8_THRESHOLD, device="meta")
    dense = arriving(weight, device, torch.float16)
    codes, scales, _ = bnb.functional.int8_vectorwise_quant(dense)
    del dense
    layer.weight = nn.Parameter(codes, requires_grad=False)
    layer.weight.CB, layer.weight.SCB = codes, scales
    layer.bias = bias
    layer.__class__ = _cuda_path()
    return layer


@functools.cache
def _cuda_path():
    """bitsandbytes' ``Linear8bitLt`` on its CUDA path, the class of every simulated int8 layer: its ``matmul``
    (``autograd/_functions.py``) trains a CPU or XPU input through ``MatMul8bitFp`` (the weight dequantized, then
    ``F.linear``) and a CUDA one through ``MatMul8bitLt``; while its forward runs, the name ``MatMul8bitFp`` is
    ``MatMul8bitLt``, so the simulation's CPU fake tensors take the CUDA path (a CUDA tensor takes it anyway), and
    whatever ends the forward (a return, an exception, an interrupt) restores it."""
    bnb = _bitsandbytes()

    class Linear8bitLt(bnb.nn.Linear8bitLt):
        __doc__ = _cuda_path.__doc__

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            functions = bnb.autograd._functions
            cpu_path = functions.MatMul8bitFp
            functions.MatMul8bitFp = functions.MatMul8bitLt
            try:
                return super().forward(x)
            finally:
                functions.MatMul8bitFp = cpu_path

    return Linear8bitLt


class Params4bit(FakeTensor):
    """A simulated bitsandbytes 4-bit weight: the fake tensor of its packed codes (a frozen ``Parameter``, carrying
    its ``quant_state``), of a class named as bitsandbytes' ``Params4bit``, which cannot wrap a fake tensor.

    peft tells a 4-bit weight by its class's name: ``dequantize_module_weight`` and ``dequantize_bnb_weight``
    (``peft/utils/integrations.py``) dequantize a weight whose ``__class__.__name__`` is ``"Params4bit"`` with
    ``bnb.functional.dequantize_4bit(weight.data, weight.quant_state)`` and return any other as it is; DoRA calls them
    at every forward (``DoraLinearLayer.forward``, ``peft/tuners/lora/dora.py``) for the weight's norm. With this
    name the simulated weight takes that branch, whose allocations are the operators' fake kernels (``_ops.py``),
    which allocate what their CUDA kernels do. Anything else sees a fake tensor."""


def peft_wrapper(parent: nn.Module, int8: bool = False) -> None:
    """Make ``parent``, peft's LoRA wrapper of a layer now in bitsandbytes' 4 bits (``int8``: 8 bits), the wrapper
    peft picks for such a layer (``dispatch_bnb_4bit``: ``peft.tuners.lora.bnb.Linear4bit``; ``dispatch_bnb_8bit``:
    ``peft.tuners.lora.bnb.Linear8bitLt``; the same adapters): its forward, under autocast, feeds the adapters the
    input as it comes, uncast (the 4-bit one also clones the base layer's result)."""
    with _disable_current_modes():  # peft makes tensors as it is imported (loha's, 1 KiB): not the step's
        from peft.tuners.lora import Linear as LoraLinear
        from peft.tuners.lora.bnb import Linear4bit as LoraLinear4bit, Linear8bitLt as LoraLinear8bitLt

    if type(parent) is LoraLinear:
        parent.__class__ = LoraLinear8bitLt if int8 else LoraLinear4bit


@contextlib.contextmanager
def dynamic_map(device: torch.device, simulated: bool):
    """bitsandbytes' 8-bit code book of double quantization (``name2qmap["dynamic"]``), made afresh as in a new
    process: computed on the host and copied to the device (1 KiB) the first time it is needed. Simulated, its values
    cannot be computed on fake tensors; the copy is made empty, where it would be. Yields a list that holds, after the
    block, the code book made in it (a process keeps it in the module cache: the caller keeps it alive); the module
    cache is then as it was before (no fake tensor is left in it)."""
    functional = _bitsandbytes().functional
    saved, made = dict(functional.name2qmap), []
    functional.name2qmap.clear()
    make = functional.create_dynamic_map
    if simulated:
        functional.create_dynamic_map = lambda *args, **kwargs: torch.empty(256, dtype=torch.float32, device=device)
    try:
        yield made
    finally:
        functional.create_dynamic_map = make
        made.extend(functional.name2qmap.values())
        functional.name2qmap.clear()
        functional.name2qmap.update(saved)
