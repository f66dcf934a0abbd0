"""The flags of ``python -m helpers profile`` (and of ``explain``'s simulated twin): one for each option of
:class:`helpers.config.StepConfig`, named after its field, with its help text.

:func:`helpers.__main__._step_options` adds them to the parser; the options themselves are defined, defaulted and
checked in :mod:`helpers.config`.
"""

from .config import IMAGE_SIZE, PRESET_INPUTS
from .hf_config import SHIPPED

#: The options ``python -m helpers profile`` offers: (flag, field, help); booleans take no value.
CLI_OPTIONS = (
    ("--model", "model", f"a torchvision classification model, a preset ({', '.join(PRESET_INPUTS)}), a Hugging "
                         f"Face causal LM by its config (a shipped one, offline: {', '.join(SHIPPED)}; a "
                         f"path/to/config.json; another Hub name org/model, online; give --seq-len), or your "
                         f"own: package.module:function or path/to/file.py:function (default resnet18)"),
    ("--batch-size", "batch_size", "samples per batch (default 128; 1 for token inputs, whose sample is a "
                                   "whole sequence)"),
    ("--image-size", "image_size", f"image height and width, for image models (default {IMAGE_SIZE})"),
    ("--input-shape", "input_shape", "shape of one float sample, comma-separated: 784 or 3,32,32 "
                                     "(default: 3,IMAGE_SIZE,IMAGE_SIZE)"),
    ("--seq-len", "seq_len", "token inputs of this length (default for the GPT-2 and Llama presets: their "
                             "context, 1024 and 131072)"),
    ("--vocab-size", "vocab_size", "with --seq-len: token ids below this (default: the model's vocabulary)"),
    ("--num-classes", "num_classes", "classes of a classification model (default: 1000 for torchvision, "
                                     "else the size of the output)"),
    ("--loss", "loss", "auto (default: next_token for token inputs, else classification), classification, "
                       "next_token, or chunked: next-token with the LM head and its float32 upcast in 8 chunks "
                       "(torchtune's CEWithChunkedOutputLoss; a Hugging Face causal LM)"),
    ("--amp", "amp", "automatic mixed precision (autocast)"),
    ("--amp-dtype", "amp_dtype", "float16 (default, with a GradScaler) or bfloat16"),
    ("--checkpoint", "checkpoint", "activation checkpointing with this many segments (default 0: off)"),
    ("--reentrant", "reentrant", "with --checkpoint: the reentrant variant (lesson 04's trap)"),
    ("--offload", "offload", "keep tensors saved for backward in host memory (save_on_cpu)"),
    ("--steady-state", "steady_state", "trace the second step, when the optimizer states exist: what every "
                                       "step of training needs, and what a verdict judges (the default; lesson 01)"),
    ("--optimizer", "optimizer", "sgd, sgd-momentum (default), adam, adamw, adamw8bit (torchao's 8-bit states), "
                                   "bnb-adamw8bit (bitsandbytes'), or paged-adamw or paged-adamw8bit (bitsandbytes' "
                                   "PagedAdamW, 32-bit or 8-bit states in unified memory)"),
    ("--fused", "fused", "the optimizer's fused implementation instead of foreach"),
    ("--step-in-backward", "step_in_backward", "step the optimizer inside backward, one parameter at a time"),
    ("--accumulation-steps", "accumulation_steps", "gradient accumulation: backward passes per optimizer step "
                                                   "(default 1)"),
    ("--quantization", "quantization", "none (default), nf4 or fp4 (bitsandbytes' Linear4bit), or torchao-nf4 "
                                       "(torchao's NF4Tensor): QLoRA, the frozen base weights in 4 bits; or int8 "
                                       "(bitsandbytes' LLM.int8() Linear8bitLt, load_in_8bit): in 8 bits (needs a "
                                       "LoRA rank)"),
    ("--prepare-kbit", "prepare_kbit", "with --quantization nf4, fp4 or int8: peft's "
                                       "prepare_model_for_kbit_training before LoRA (every parameter that is not "
                                       "quantized in float32)"),
    ("--bf16-embeddings", "bf16_embeddings", "with --prepare-kbit: the embeddings and LM head cast back to "
                                             "bfloat16 after it, as TRL's SFTTrainer and qlora.py do "
                                             "(peft_module_casting_to_bf16)"),
    ("--double-quant", "double_quant", "with --quantization nf4 or fp4: bitsandbytes' double quantization, the "
                                       "scales in 8 bits (bnb_4bit_use_double_quant)"),
    ("--compute-dtype", "compute_dtype", "with --quantization nf4 or fp4: the dtype bitsandbytes' 4-bit layers "
                                         "dequantize into and multiply in (bnb_4bit_compute_dtype): bfloat16 "
                                         "(default, the QLoRA recipes'), float16 or float32 (BitsAndBytesConfig's "
                                         "default)"),
    ("--param-dtype", "param_dtype", "float32 (default), bfloat16 or float16: the dtype the parameters are stored in"),
    ("--optimizer-offload", "optimizer_offload", "optimizer states in host memory, stepped on the CPU"),
    ("--attention", "attention", "simulated attention kernel: auto (default), flash, efficient or math"),
    ("--lora-rank", "lora_rank", "LoRA adapters of this rank (peft) on a Hugging Face model, its base weights "
                                 "frozen (default 0: off, full fine-tuning)"),
    ("--lora-targets", "lora_targets", "with --lora-rank: the linear layers to adapt, by last name, "
                                       "comma-separated: q_proj,v_proj (default: peft's for the architecture)"),
    ("--lora-dtype", "lora_dtype", "with --lora-rank: the adapters' dtype, float32 (default, peft's) or bfloat16 "
                                   "(peft's autocast_adapter_dtype=False on a bfloat16 base)"),
    ("--dora", "dora", "with --lora-rank: peft's DoRA (use_dora=True), weight-decomposed LoRA"),
    ("--lora-dropout", "lora_dropout", "with --lora-rank: dropout on each adapter's input, from 0 to below 1 "
                                       "(default 0)"),
    ("--full-trace", "full_trace", "trace every block of a model of repeated blocks, instead of writing its "
                                   "step exactly from two shallow traces (the default where it applies)"),
    ("--device", "device", "auto (default): the GPU if there is one, else simulated"),
    ("--workspaces", "workspaces", "simulated: what kernels allocate beyond the tensors: none (default, a floor), "
                                   "measured (reduction buffers and the cuDNN workspaces measured on the card; H200 "
                                   "only) or bound (reduction buffers and each cuDNN workspace at its bound)"),
)
