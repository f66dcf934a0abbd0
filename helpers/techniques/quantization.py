"""The recipe's quantization steps: LoRA's (QLoRA's) frozen weights, or a served model's, in a format of
:data:`helpers.formats.FOR_TRAINING` (lesson 09): bitsandbytes' 4-bit NF4 and FP4 or LLM.int8()
(:mod:`helpers.techniques.bnb`), or torchao's NF4 (:mod:`helpers.techniques.torchao_nf4`).

``StepConfig.quantization`` names the format, and through it the library (:data:`helpers.formats.WEIGHT_FORMATS`):
``"nf4"`` and ``"fp4"`` are bitsandbytes' ``Linear4bit`` (what Hugging Face's
``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=...)`` builds, and what QLoRA users run), with
``double_quant`` (``bnb_4bit_use_double_quant``) and ``compute_dtype`` (``bnb_4bit_compute_dtype``, bfloat16 by
default); ``"int8"`` is bitsandbytes' ``Linear8bitLt`` (``BitsAndBytesConfig(load_in_8bit=True)``); ``"torchao-nf4"``
is torchao's ``NF4Tensor``, always double-quantized. Every frozen linear weight (:func:`nf4_linears`) waits off the
device while the model is placed (:func:`hold_back`); :func:`quantize` then brings each in bfloat16, quantizes it and
frees the copy, one at a time, as ``Params4bit`` (``Int8Params``) does while ``from_pretrained`` loads.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from ..errors import Refused
from ..formats import NF4_BLOCK
from .bnb import bnb_linear, dynamic_map, int8_linear, peft_wrapper, state_tensors, weights
from .torchao_nf4 import torchao_linear

#: Read here by the step runner (:mod:`helpers.step`): the tensors a bitsandbytes weight carries, and the weights a
#: parameter stands for.
__all__ = ["cast_embeddings_to_bf16", "hold_back", "nf4_linears", "prepare_kbit", "quantize", "state_tensors",
           "weights"]


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


def quantize(runner) -> None:
    """The recipe's step after placing: each held-back weight arrives in bfloat16 (float16 for int8), is quantized
    into bitsandbytes' ``Linear4bit`` (:func:`helpers.techniques.bnb.bnb_linear`) or ``Linear8bitLt``
    (:func:`helpers.techniques.bnb.int8_linear`), or torchao's ``NF4Linear``
    (:func:`helpers.techniques.torchao_nf4.torchao_linear`), and its copy freed; then the meter's peak starts afresh
    (loading is not the step)."""
    if not runner.held_back:
        return
    config, device = runner.config, runner.meter.device
    torchao, int8 = config.quantization == "torchao-nf4", config.quantization == "int8"
    cache = (contextlib.nullcontext([]) if torchao or int8
             else dynamic_map(device, runner.meter.backend == "simulated"))
    with cache as runner.caches:
        for parent, attribute, layer, weight in runner.held_back:
            if torchao:
                quantized = torchao_linear(weight, layer.bias, device)
            elif int8:
                quantized = int8_linear(weight, layer.bias, device)
                peft_wrapper(parent, int8=True)
            else:
                quantized = bnb_linear(weight, layer.bias, config, device)
                peft_wrapper(parent)
            setattr(parent, attribute, quantized)
    runner.held_back = []
    runner.meter.reset_peak()
