"""One training step on real CUDA tensors, every kernel a no-op, recorded as a memory snapshot (issue 33).

Run only in a subprocess with both stubs preloaded (``tests/cuda_stub/build.py``,
``stub_env``): ``python real_step.py SNAPSHOT_DIR < cases.json``.  Unlike
``whole_step.py`` (fake tensors of the ``cuda`` device), the tensors here are
real ``cuda`` tensors: every operator runs PyTorch's CUDA implementation, which
allocates its outputs and its own temporaries through PyTorch's compiled caching
allocator; only the kernels compute nothing (``cuda_stub.c`` returns from every
launch, ``cublas_stub.c`` from every matrix product).  cuBLAS's workspaces are
allocated by PyTorch, as on a GPU.  A copy to the host reads zeros, so the
``GradScaler`` finds no inf and always steps, as it would on a GPU.

The step is whole_step.py's, written as a training loop writes it: the model
(built on ``meta`` by :mod:`helpers.models`, with peft's LoRA adapters for
``lora_rank``, then given one uninitialised ``cuda`` tensor per parameter and
buffer by whole_step.py's ``place``: ``to_empty`` would untie a tied head),
the case's optimizer (``helpers.techniques.optimizers.make_optimizer``, ``foreach``;
AdamW by default) over the trained parameters,
a ``torch.amp.GradScaler("cuda")`` under float16 AMP; a batch of token ids (or images);
forward and cross-entropy under ``torch.autocast("cuda")`` in the case's ``amp_dtype`` (float16 by default);
backward; the optimizer step; ``zero_grad(set_to_none=True)``.  Two steps; the
second is measured.  cuDNN is not stubbed: ``scaled_dot_product_attention`` is
kept off cuDNN's kernel (``torch.backends.cuda.enable_cudnn_sdp(False)``), so
PyTorch picks flash (16 bits) or memory-efficient (float32) attention.

History is recorded from an emptied cache (the last case's cuBLAS workspaces
cleared too), before the model is placed
(``torch.cuda.memory._record_memory_history(stacks="python")``), and dumped with
``torch.cuda.memory._dump_snapshot`` to ``SNAPSHOT_DIR/<name>.pickle``: the format
of https://pytorch.org/memory_viz, made by PyTorch itself.

Input (stdin): a JSON list of cases ``{"name": str, "model": name, "batch": n,
"seq_len": n, "amp": bool}`` and optionally ``"amp_dtype"``, ``"param_dtype"``, ``"lora_rank"``,
``"blocks"`` (the model with only that many of its blocks: ``ModelSpec.at_depth``),
``"checkpoint"`` (Hugging Face's, each decoder layer), ``"keep_loss"`` (the loss alive to the end of the step, as
the simulation's loop keeps it: ``whole_step.training_step``), ``"quantization"`` (``"torchao-nf4"``, or bitsandbytes'
``"nf4"`` or ``"fp4"`` with ``"double_quant"``, or its LLM.int8() ``"int8"``), ``"optimizer"``, and for
image models ``"input_shape"`` and ``"num_classes"`` (no ``seq_len``) and ``"cudnn": false`` (PyTorch's own CUDA
convolutions, ``torch.backends.cudnn.enabled = False``: cuDNN has no stub).  Output (stdout, last line): a JSON
list, for each case, ``{"snapshot": path, "max_allocated": bytes,
"tensors_peak": bytes, "allocated": bytes, "reserved": bytes, "trace_start": n}``:
``torch.cuda.max_memory_allocated()`` over the measured step (the allocator's
blocks), the peak over that step of the blocks' requested sizes, each rounded
up to 512 bytes as the allocator rounds a request (the tensors alone, as the
simulation counts them), ``memory_allocated()`` and ``memory_reserved()`` when
the snapshot was taken, and the index of the measured step's first entry in
the snapshot's ``device_traces[0]``.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path

import torch

from helpers.models import resolve_model
from helpers.techniques.optimizers import make_optimizer
from whole_step import place, training_step  # the same placement (a tied head stays tied) and step


def round_up(nbytes: int) -> int:
    """A request's block size below 1 MiB and above it alike: a multiple of 512 bytes (``round_size`` in
    ``c10/cuda/CUDACachingAllocator.cpp``)."""
    return max(512, -(-nbytes // 512) * 512)


def tensors_peak(trace: list[dict], start: int, live: dict[int, int]) -> int:
    """The peak of the live blocks' rounded requested sizes over ``trace[start:]``; ``live``: address -> rounded
    requested size of the blocks allocated when it starts."""
    live = dict(live)
    now = peak = sum(live.values())
    for entry in trace[start:]:
        if entry["action"] == "alloc":
            live[entry["addr"]] = round_up(entry["size"])
            now += live[entry["addr"]]
            peak = max(peak, now)
        elif entry["action"] == "free_completed" and entry["addr"] in live:
            now -= live.pop(entry["addr"])
    return peak


def quantize_nf4(net: torch.nn.Module) -> None:
    """QLoRA's base weights: each linear weight :func:`helpers.techniques.quantization.nf4_linears` picks, arriving in
    bfloat16 and quantized by torchao's ``to_nf4`` into the engine's ``NF4Linear``, one at a time (the recipe's
    ``quantize``)."""
    from helpers.techniques import quantization as q, torchao_nf4

    to_nf4 = torchao_nf4.nf4_module().to_nf4
    for parent, attribute, layer in q.nf4_linears(net):
        dense = torch.empty(layer.weight.shape, dtype=torch.bfloat16, device="cuda")
        layer._parameters["weight"] = None  # the placed weight goes: the bfloat16 copy arrives in its place
        setattr(parent, attribute, torchao_nf4.NF4Linear(to_nf4(dense, torchao_nf4.NF4_BLOCK,
                                                                   torchao_nf4.nf4_scaler_block(dense.numel())),
                                                            layer.bias))
        del dense


def quantize_bnb(net: torch.nn.Module, case: dict) -> list:
    """QLoRA's base weights as bitsandbytes' ``Linear4bit`` (``case["quantization"]``, ``case["double_quant"]``), made
    by the recipe's own function, one at a time, the adapters' wrappers made peft's 4-bit ones (the recipe's
    ``quantize``); bitsandbytes' CUDA code runs, its kernels no-ops. Returns what bitsandbytes' module cache made
    (its code book, which the caller keeps alive, as the process would)."""
    from types import SimpleNamespace

    from helpers.techniques import bnb, quantization as q

    config = SimpleNamespace(quantization=case["quantization"], double_quant=case.get("double_quant", False),
                             compute_dtype=case.get("compute_dtype", "bfloat16"))
    with bnb.dynamic_map(torch.device("cuda"), simulated=False) as cached:
        for parent, attribute, layer in q.nf4_linears(net):
            shape = layer.weight.shape
            layer._parameters["weight"] = None  # the placed weight goes: the bfloat16 copy arrives in its place
            quantized = bnb.bnb_linear(torch.empty(shape, device="meta"), layer.bias, config, torch.device("cuda"))
            bnb.peft_wrapper(parent)
            setattr(parent, attribute, quantized)
    return cached


def quantize_int8(net: torch.nn.Module) -> None:
    """LLM.int8()'s base weights (``case["quantization"] == "int8"``), as ``from_pretrained`` makes them with
    ``BitsAndBytesConfig(load_in_8bit=True)``: each linear weight :func:`helpers.techniques.quantization.nf4_linears`
    picks becomes bitsandbytes' own ``Linear8bitLt(has_fp16_weights=False, threshold=6.0)``, its weight a real
    ``Int8Params`` made from a float16 weight on the host and moved to the device, where ``Int8Params._quantize``
    quantizes it (``int8_vectorwise_quant``: the int8 codes and float32 row scales) and the float16 copy is freed
    (``transformers/integrations/bitsandbytes.py``: ``Int8Params(value.to("cpu"), requires_grad=False).to(device)``),
    one at a time; the adapters' wrappers made peft's 8-bit ones. Not the simulation's stand-in
    (``helpers.techniques.bnb.int8_linear``, a plain ``Parameter`` carrying ``CB`` and ``SCB``): bitsandbytes'
    classes and its CUDA code, its kernels no-ops."""
    import bitsandbytes as bnb

    from helpers.techniques import bnb as formats, quantization as q

    for parent, attribute, layer in q.nf4_linears(net):
        out_features, in_features = layer.weight.shape
        layer._parameters["weight"] = None  # the placed weight goes: the float16 copy arrives in its place
        int8 = bnb.nn.Linear8bitLt(in_features, out_features, bias=False, has_fp16_weights=False,
                                   threshold=formats.INT8_THRESHOLD, device="meta")
        host = torch.empty(out_features, in_features, dtype=torch.float16)  # as loaded, on the host
        int8.weight = bnb.nn.Int8Params(host, requires_grad=False, has_fp16_weights=False).to("cuda")
        int8.bias = layer.bias
        formats.peft_wrapper(parent, int8=True)
        setattr(parent, attribute, int8)


def run_case(case: dict, out: Path) -> dict:
    """One case, from an empty cache: placed, two steps, the second measured; its snapshot written to ``out``."""
    torch.backends.cudnn.enabled = case.get("cudnn", True)  # False: PyTorch's own convolutions (cuDNN is no stub)
    torch._C._cuda_clearCublasWorkspaces()  # the last case's, kept by cuBLAS's handles
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    spec = resolve_model(case["model"])
    if case.get("blocks"):  # the same model with fewer of its blocks (ModelSpec.at_depth: its own widths and code)
        spec = spec.at_depth(case["blocks"])
    with torch.device("meta"):
        net = spec.build().train()
        if case.get("param_dtype"):
            net = net.to(getattr(torch, case["param_dtype"]))
        if case.get("checkpoint"):  # each decoder layer, as helpers.techniques.checkpointing.enable does it
            net.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if case.get("lora_rank"):
            from helpers.techniques.lora import apply_lora
            net = apply_lora(net, case["lora_rank"])
    net = place(net)
    if case.get("quantization") == "torchao-nf4":  # each frozen linear weight in torchao's NF4, as the recipe quantizes it
        quantize_nf4(net)
    elif case.get("quantization") == "int8":  # in bitsandbytes' LLM.int8()
        quantize_int8(net)
    elif case.get("quantization"):  # in bitsandbytes' 4 bits
        cached = quantize_bnb(net, case)  # noqa: F841 (kept alive for the case)
    optimizer = make_optimizer(case.get("optimizer", "adamw"), [p for p in net.parameters() if p.requires_grad])
    amp_dtype = getattr(torch, case.get("amp_dtype", "float16"))
    scaler = torch.amp.GradScaler("cuda") if case["amp"] and amp_dtype == torch.float16 else None

    def step():
        training_step(net, spec, optimizer, scaler, case["batch"], case.get("seq_len"), case["amp"], amp_dtype=amp_dtype,
                      sample_shape=tuple(case.get("input_shape", (3, 224, 224))), classes=case.get("num_classes", 1000),
                      keep_loss=case.get("keep_loss", False))

    step()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory._snapshot()
    start = len(before["device_traces"][0])
    live = {b["address"]: round_up(b["requested_size"]) for seg in before["segments"] for b in seg["blocks"]
            if b["state"] == "active_allocated"}
    step()
    path = out / f"{case['name']}.pickle"
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._dump_snapshot(str(path))
    torch.cuda.memory._record_memory_history(enabled=None)
    result = {"snapshot": str(path), "max_allocated": torch.cuda.max_memory_allocated(),
              "tensors_peak": tensors_peak(snapshot["device_traces"][0], start, live),
              "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
              "trace_start": start}
    del net, optimizer, scaler
    # bitsandbytes' Linear4bit and its weight refer to each other (Params4bit(..., module=self) in Linear4bit.__init__,
    # bitsandbytes/nn/modules.py, 0.50.2; quantize_bnb makes them so too): only the cycle collector frees the 4-bit
    # weights, which would otherwise stay live into the next case's step (as RealBackend.release collects).
    gc.collect()
    torch.cuda.empty_cache()
    return result


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("the stub did not load: torch.cuda.is_available() is False")
    torch.backends.cuda.enable_cudnn_sdp(False)  # cuDNN is not stubbed
    out = Path(sys.argv[1])
    cases = json.load(sys.stdin)
    print(json.dumps([run_case(case, out) for case in cases]))


if __name__ == "__main__":
    main()
