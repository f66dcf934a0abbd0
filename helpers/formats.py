"""The weights' formats, one definition each, for training, generation and serving alike (lessons 09, 10).

A format is how a model's linear weights are kept on the GPU: as loaded (``"none"``), or quantized by a library. Each
:class:`WeightFormat` says which library makes it, the bytes one weight takes in it (its codes and the scales stored
with them, before the caching allocator rounds each tensor up to 512 bytes) and where that figure comes from. Which
of them each program takes is one tuple each: :data:`FOR_TRAINING` (``StepConfig.quantization``), :data:`FOR_GENERATION`
(:func:`helpers.generation.generation_memory`) and :data:`FOR_SERVING` (:func:`helpers.serving.vllm_startup`).

Traced formats run their library's code on the engine (:mod:`helpers.techniques.quantization`); the others
(:data:`BY_FORMULA`) are counted by :func:`helpers.serving.formula_weight_bytes`. No torch here: the command line
reads this module when torch is broken.
"""

from __future__ import annotations

from dataclasses import dataclass

#: NF4's blocks: one absmax scale per 64 weights, those scales quantized to 8 bits in blocks of 256 (double
#: quantization): the QLoRA paper's (Dettmers et al., 2023, section 3), bitsandbytes' ``quantize_4bit`` default
#: ``blocksize`` and torchao's ``to_nf4`` defaults.
NF4_BLOCK = 64
NF4_SCALER_BLOCK = 256
#: Weights per 16-bit scale of ``"int4"`` (GPTQ's and AWQ's usual ``group_size``).
INT4_GROUP = 128


@dataclass(frozen=True)
class WeightFormat:
    """One format of a model's linear weights.

    Attributes:
        name: the value the options take (``quantization="nf4"``).
        label: how a sentence names it (``"bitsandbytes' NF4"``).
        library: the library whose code makes and multiplies it (``"bitsandbytes"``, ``"torchao"``), or None: the
            weights as loaded (``"none"``), or a format no library runs here (:data:`BY_FORMULA`).
        bits: bits of one weight's code (4 or 8), or None for the weights as loaded (the model's dtype decides).
        bytes_per_weight: bytes one weight takes with the scales of its block or group, for a weight of whole blocks;
            a scale per output row (``"int8"``) or per tensor (``"fp8"``) adds 4 bytes per row or tensor, not counted
            here. None for ``"none"``: the dtype's bytes.
        source: where :attr:`bytes_per_weight` comes from (the library's files and functions, pinned versions).
        traced: its library's code runs on the engine's fake tensors (:mod:`helpers.techniques.quantization`); else
            its bytes are a formula (:func:`helpers.serving.formula_weight_bytes`) and its kernels are not run.
    """

    name: str
    label: str
    library: str | None
    bits: int | None
    bytes_per_weight: float | None
    source: str
    traced: bool = True


_BNB_4BIT_SOURCE = ("bitsandbytes 0.50 quantize_4bit (functional.py, backends/cuda/ops.py): two codes a byte and one "
                    "float32 absmax per 64 weights; with bnb_4bit_use_double_quant the absmax in 8 bits "
                    "(helpers.techniques.bnb.bnb_bytes)")

#: Every format by name, in the order menus and messages list them.
WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in (
    WeightFormat("none", "as loaded", None, None, None, "the parameters' dtype (StepConfig.param_dtype)"),
    WeightFormat("nf4", "bitsandbytes' NF4", "bitsandbytes", 4, 0.5 + 4 / NF4_BLOCK, _BNB_4BIT_SOURCE),
    WeightFormat("fp4", "bitsandbytes' FP4", "bitsandbytes", 4, 0.5 + 4 / NF4_BLOCK, _BNB_4BIT_SOURCE),
    WeightFormat("torchao-nf4", "torchao's NF4", "torchao", 4, 0.5 + 1 / NF4_BLOCK + 2 / (NF4_BLOCK * NF4_SCALER_BLOCK),
                 "torchao NF4Tensor.from_tensor (quantization/quantize_/workflows/nf4/nf4_tensor.py): two codes a "
                 "byte, an int8 scale per 64 weights and a bfloat16 scale per 256 of those "
                 "(helpers.techniques.torchao_nf4.nf4_bytes)"),
    WeightFormat("int8", "bitsandbytes' LLM.int8()", "bitsandbytes", 8, 1.0,
                 "bitsandbytes 0.50 int8_vectorwise_quant (backends/cuda/ops.py): an int8 code per weight, and a "
                 "float32 scale per output row (helpers.techniques.bnb.int8_bytes)"),
    WeightFormat("fp8", "fp8", None, 8, 1.0,
                 "vLLM's Fp8LinearMethod with a per-tensor scale: a byte per weight, and one float32 scale per tensor "
                 "(helpers.serving.formula_weight_bytes)", traced=False),
    WeightFormat("int4", "4-bit GPTQ/AWQ", None, 4, 0.5 + 2 / INT4_GROUP,
                 "a symmetric GPTQ or AWQ checkpoint as vLLM's Marlin kernels keep it (gptq_marlin, awq_marlin): eight "
                 "codes to an int32 and a 16-bit scale per 128 weights (helpers.serving.formula_weight_bytes)",
                 traced=False),
)}

#: What ``StepConfig.quantization`` takes: the formats whose library runs on the engine, where QLoRA trains on them.
FOR_TRAINING = tuple(name for name, f in WEIGHT_FORMATS.items() if f.traced)
#: What :func:`helpers.generation.generation_memory` loads: as loaded, or bitsandbytes' formats
#: (``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")``, ``load_in_8bit=True``).
FOR_GENERATION = ("none", "nf4", "int8")
#: What :func:`helpers.serving.vllm_startup` loads: bitsandbytes' formats as vLLM's ``--quantization bitsandbytes``
#: loads them, traced; fp8 and 4-bit GPTQ/AWQ checkpoints by their bytes.
FOR_SERVING = ("none", "nf4", "int8", "fp8", "int4")
#: The formats counted by formula, not traced.
BY_FORMULA = tuple(name for name, f in WEIGHT_FORMATS.items() if not f.traced)
#: bitsandbytes' formats (``prepare_kbit`` applies to them), and its 4-bit ones (``double_quant`` and
#: ``compute_dtype`` apply to them).
BNB_FORMATS = tuple(name for name, f in WEIGHT_FORMATS.items() if f.library == "bitsandbytes")
BNB_4BIT = tuple(name for name in BNB_FORMATS if WEIGHT_FORMATS[name].bits == 4)
