"""QLoRA's frozen weights in 4 bits (Dettmers et al., 2023), as bitsandbytes stores them, or torchao, and in
bitsandbytes' LLM.int8() (Dettmers et al., 2022) (lesson 09).

``StepConfig.quantization`` names the format and the library: ``"nf4"`` and ``"fp4"`` are bitsandbytes' ``Linear4bit``
(what Hugging Face's ``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=...)`` builds, and what QLoRA users
run), with ``double_quant`` (``bnb_4bit_use_double_quant``) and ``compute_dtype`` (``bnb_4bit_compute_dtype``,
bfloat16 by default); ``"int8"`` is bitsandbytes'
``Linear8bitLt`` (``BitsAndBytesConfig(load_in_8bit=True)``, :func:`_int8_linear`); ``"torchao-nf4"`` is torchao's
``NF4Tensor`` (:class:`NF4Linear`), always double-quantized. Every frozen linear weight (:func:`nf4_linears`)
waits off the device while the model is placed (:func:`hold_back`); :func:`quantize` then brings each in bfloat16,
quantizes it and frees the copy, one at a time, as ``Params4bit`` (``Int8Params``) does while ``from_pretrained``
loads.

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
from torch.nn import functional as F
from torch.utils._python_dispatch import _disable_current_modes

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


#: bitsandbytes' CPU backend logs a warning on AVX-512 machines when imported (by this module, peft or transformers)
#: about an optional package of CPU kernels, which the simulation does not use: its errors only.
logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
#: ``MatMul8bitLt`` logs a warning at every product of an input not in float16 (a bfloat16 one, under bfloat16 AMP)
#: that it is cast to float16 to be quantized, which :func:`_int8_linear` says once: its errors only.
logging.getLogger("bitsandbytes.autograd._functions").setLevel(logging.ERROR)


def _bitsandbytes():
    """bitsandbytes, imported when first needed."""
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


def nf4_scaler_block(numel: int) -> int:
    """The scaler block of a weight of ``numel`` elements: the largest divisor of its blocks up to 256."""
    blocks = numel // NF4_BLOCK
    return max(d for d in range(1, NF4_SCALER_BLOCK + 1) if blocks % d == 0)


def nf4_linears(model: nn.Module) -> list[tuple[nn.Module, str, nn.Linear]]:
    """The linear layers QLoRA quantizes, as ``(parent, attribute, layer)``: every ``nn.Linear`` with a frozen weight
    but the output embeddings and tied weights (``get_keys_to_not_convert``, ``transformers/quantizers/base.py``)."""
    get_output = getattr(model, "get_output_embeddings", None)
    head = get_output() if callable(get_output) else None
    head = getattr(head, "base_layer", head)  # peft's wrapper of an adapted head: the head is its base layer
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


def _bnb_linear(weight: torch.Tensor, bias: nn.Parameter | None, config, device: torch.device) -> nn.Module:
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
    dense = _arriving(weight, device)
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


def _int8_linear(weight: torch.Tensor, bias: nn.Parameter | None, device: torch.device) -> nn.Module:
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
    dense = _arriving(weight, device, torch.float16)
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


def _arriving(weight: torch.Tensor, device: torch.device, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``weight`` as it arrives on ``device`` to be quantized: in ``dtype`` (uninitialised for a weight on meta)."""
    if weight.is_meta:
        return torch.empty(weight.shape, dtype=dtype, device=device)
    return weight.detach().to(device=device, dtype=dtype)


def _peft_bnb(parent: nn.Module, int8: bool = False) -> None:
    """Make ``parent``, peft's LoRA wrapper of a layer now in bitsandbytes' 4 bits (``int8``: 8 bits), the wrapper
    peft picks for such a layer (``dispatch_bnb_4bit``: ``peft.tuners.lora.bnb.Linear4bit``; ``dispatch_bnb_8bit``:
    ``peft.tuners.lora.bnb.Linear8bitLt``; the same adapters): its forward, under autocast, feeds the adapters the
    input as it comes, uncast (the 4-bit one also clones the base layer's result)."""
    from peft.tuners.lora import Linear as LoraLinear
    from peft.tuners.lora.bnb import Linear4bit as LoraLinear4bit, Linear8bitLt as LoraLinear8bitLt

    if type(parent) is LoraLinear:
        parent.__class__ = LoraLinear8bitLt if int8 else LoraLinear4bit


def prepare_kbit(runner) -> None:
    """The recipe's step before LoRA (``config.prepare_kbit``): peft's ``prepare_model_for_kbit_training`` on the model
    built on meta, marked as loaded in 4 bits (``is_loaded_in_4bit``; ``is_loaded_in_8bit`` for ``"int8"``) as
    ``from_pretrained`` marks it: it freezes every parameter, casts every 16-bit one that is not 4-bit to float32 (here
    the weights still to be quantized too: they arrive in bfloat16, or float16 for int8, all the same,
    :func:`quantize`; an ``Int8Params`` holds int8, which it leaves), makes the input embeddings' output require grad
    for reentrant checkpointing, and enables checkpointing with ``config.reentrant`` when ``config.checkpoint`` asks for it."""
    config = runner.config
    if not config.prepare_kbit:
        return
    if not hasattr(runner.model, "get_input_embeddings"):
        raise Refused("prepare_kbit (peft's prepare_model_for_kbit_training) applies to a Hugging Face transformers "
                      f"model, not {type(runner.model).__name__}")
    from peft import prepare_model_for_kbit_training

    if config.quantization == "int8":
        runner.model.is_loaded_in_8bit = True
    else:
        runner.model.is_loaded_in_4bit = True
    prepare_model_for_kbit_training(runner.model, use_gradient_checkpointing=bool(config.checkpoint),
                                    gradient_checkpointing_kwargs={"use_reentrant": config.reentrant})


def cast_embeddings_to_bf16(runner) -> None:
    """The recipe's step after LoRA (``config.bf16_embeddings``): TRL's ``peft_module_casting_to_bf16``
    (``trl/trainer/utils.py``, v0.13), which ``SFTTrainer`` runs after ``prepare_model_for_kbit_training`` and
    ``get_peft_model`` when ``bf16=True`` and the model is loaded in 4 bits (the QLoRA paper's ``qlora.py`` does the
    same at any bits): every module with "norm" in its name to float32; every module with "lm_head", "embed_tokens",
    "wte" or "wpe" in its name whose weight is float32 (the embeddings, the LM head, and LoRA's adapters of the head
    if it is adapted) to bfloat16."""
    if not runner.config.bf16_embeddings:
        return
    for name, module in runner.model.named_modules():
        if isinstance(module, nn.LayerNorm) or "norm" in name:
            module.to(torch.float32)
        elif any(x in name for x in ("lm_head", "embed_tokens", "wte", "wpe")) and hasattr(module, "weight"):
            if module.weight.dtype == torch.float32:
                module.to(torch.bfloat16)


def hold_back(runner) -> None:
    """The recipe's step before placing (``config.quantization`` not ``"none"``): the :func:`nf4_linears` weights wait
    in ``runner.held_back``.

    Raises:
        Refused (a ValueError): with torchao's NF4, if a weight's size is not a multiple of its blocks of 64, naming
            the layer (bitsandbytes pads its last block).
    """
    if runner.config.quantization == "none":
        return
    model = runner.model
    layers = nf4_linears(model)
    names = {id(m): n for n, m in model.named_modules()}
    for _, _, layer in layers:
        if runner.config.quantization == "torchao-nf4" and layer.weight.numel() % NF4_BLOCK:
            raise Refused(f"quantization='torchao-nf4': {names[id(layer)]} has {layer.weight.numel()} weights, not a "
                          f"multiple of {NF4_BLOCK} (torchao's NF4 blocks)")
    runner.held_back = [(parent, attribute, layer, layer.weight) for parent, attribute, layer in layers]
    for _, _, layer in layers:
        layer._parameters["weight"] = None  # placed by quantize(), one at a time, quantized


@contextlib.contextmanager
def _dynamic_map(device: torch.device, simulated: bool):
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


def quantize(runner) -> None:
    """The recipe's step after placing: each held-back weight arrives in bfloat16 (float16 for int8), is quantized
    into bitsandbytes' ``Linear4bit`` (:func:`_bnb_linear`) or ``Linear8bitLt`` (:func:`_int8_linear`), or torchao's
    :class:`NF4Linear` (``to_nf4``), and its copy freed; then the meter's peak starts afresh (loading is not the
    step)."""
    if not runner.held_back:
        return
    config, device = runner.config, runner.meter.device
    torchao, int8 = config.quantization == "torchao-nf4", config.quantization == "int8"
    cache = (contextlib.nullcontext([]) if torchao or int8
             else _dynamic_map(device, runner.meter.backend == "simulated"))
    with cache as runner.caches:
        for parent, attribute, layer, weight in runner.held_back:
            if torchao:
                quantized = _torchao_linear(weight, layer.bias, device)
            elif int8:
                quantized = _int8_linear(weight, layer.bias, device)
                _peft_bnb(parent, int8=True)
            else:
                quantized = _bnb_linear(weight, layer.bias, config, device)
                _peft_bnb(parent)
            setattr(parent, attribute, quantized)
    runner.held_back = []
    runner.meter.reset_peak()


def _torchao_linear(weight: torch.Tensor, bias: nn.Parameter | None, device: torch.device) -> "NF4Linear":
    """torchao's :class:`NF4Linear` for a frozen ``weight``: it arrives in bfloat16 and ``to_nf4`` quantizes it.
    Simulated, a weight of a shape seen before is written from the first one's allocations (as in
    :func:`dequantized`), in one chunk (the chunks bound a transient before the step)."""
    nf4 = _nf4()
    chunk = nf4.CHUNK_SIZE
    dense = _arriving(weight, device)
    if weight.is_meta:
        nf4.CHUNK_SIZE = max(chunk, weight.numel())
    try:
        key = (dense.shape, dense.stride(), dense.device, nf4.CHUNK_SIZE)  # no autograd: the same in any mode
        scaler = nf4_scaler_block(dense.numel())
        quantized = remembered(_QUANTIZED, key, lambda: nf4.to_nf4(dense, NF4_BLOCK, scaler))
    finally:
        nf4.CHUNK_SIZE = chunk
    del dense
    return NF4Linear(quantized, bias)
