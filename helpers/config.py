"""Every option of a profiled training step, defined and checked in one place (:class:`StepConfig`).

What :func:`helpers.profile.profile_step` runs, what ``python -m helpers profile`` builds from its flags
(:data:`helpers.flags.CLI_OPTIONS`), what a profile echoes (:meth:`StepConfig.to_dict`), and what widgets cache traces by.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from .formats import BNB_4BIT, BNB_FORMATS, FOR_TRAINING
from .hf_config import frozen_config, is_hf_config

#: Optimizers a step can use (:func:`helpers.techniques.optimizers.make_optimizer`).
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw", "adamw8bit", "bnb-adamw8bit", "paged-adamw", "paged-adamw8bit")
#: PyTorch's own (``torch.optim``), each with a ``foreach`` and a ``fused`` implementation.
TORCH_OPTIMIZERS = OPTIMIZERS[:4]
#: A readable name for each, for tables and menus.
OPTIMIZER_NAMES = {"sgd": "SGD", "sgd-momentum": "SGD with momentum", "adam": "Adam", "adamw": "AdamW",
                   "adamw8bit": "8-bit AdamW", "bnb-adamw8bit": "bitsandbytes' 8-bit AdamW", "paged-adamw": "paged AdamW",
                   "paged-adamw8bit": "paged 8-bit AdamW"}
#: How the frozen linear weights are stored (:mod:`helpers.techniques.quantization`), one of the weight formats of
#: :data:`helpers.formats.WEIGHT_FORMATS` that run on the engine: as they are, in bitsandbytes' 4-bit NormalFloat or FP4
#: (``Linear4bit``, what QLoRA users run), in torchao's NF4 (``NF4Tensor``), or in bitsandbytes' LLM.int8()
#: (``Linear8bitLt``, ``load_in_8bit=True``).
QUANTIZATIONS = FOR_TRAINING
#: bitsandbytes' 4-bit quantizations, which ``double_quant`` applies to.
BNB_4BIT = BNB_4BIT
#: The quantizations made by bitsandbytes, which ``prepare_kbit`` applies to.
BNB_QUANTIZATIONS = BNB_FORMATS
#: The dtypes bitsandbytes' 4-bit layers can compute in (``bnb_4bit_compute_dtype``; ``Linear4bit``'s ``compute_dtype``).
COMPUTE_DTYPES = ("bfloat16", "float16", "float32")
#: The dtypes a model's parameters can be stored in (Hugging Face's ``torch_dtype``; vLLM's ``--dtype``).
PARAM_DTYPES = ("float32", "bfloat16", "float16")
#: The dtypes of LoRA's adapters: peft's float32, or bfloat16 (the QLoRA paper's ``qlora.py --bf16``).
LORA_DTYPES = ("float32", "bfloat16")
#: Where a step runs: a real GPU, the simulation, or whichever this machine has.
DEVICES = ("auto", "cuda", "simulated")
#: The 16-bit types autocast can use (float16 with a GradScaler).
AMP_DTYPES = ("float16", "bfloat16")
#: Kernels of ``scaled_dot_product_attention`` the simulation can take (:mod:`helpers.engine.cuda_rules`): "auto" is
#: what a recent GPU picks (flash for 16-bit inputs, memory-efficient for float32); "math" keeps the full scores.
ATTENTION = ("auto", "flash", "efficient", "math")
#: Losses: cross-entropy against one class per sample, next-token cross-entropy over a ``(batch, seq, vocab)`` output,
#: the same with the output projection and its float32 upcast in chunks (torchtune's ``CEWithChunkedOutputLoss``), or
#: "auto" (next-token for token inputs, else classification).
LOSSES = ("auto", "classification", "next_token", "chunked")
#: What the simulated GPU's kernels allocate for themselves beyond the tensors (:mod:`helpers.engine.workspaces`):
#: "none", the tensors only (a floor: a real GPU adds cuDNN's workspaces and reductions' staging buffers); "measured",
#: reductions' staging buffers (``Reduce.cuh``'s rule, exact) and each convolution's cuDNN workspace from the table
#: measured on the simulated card (:data:`helpers.engine.workspaces.CUDNN_TABLES`); "bound", the staging buffers and
#: each workspace at its bound (:data:`helpers.engine.workspaces.CUDNN_BOUND_RATIO`), for a card without a table.
WORKSPACES = ("none", "measured", "bound")

#: The options that describe a model's data (inputs and loss): they belong to the model they are given with.
DATA_OPTIONS = ("image_size", "input_shape", "seq_len", "vocab_size", "inputs", "loss", "num_classes")

#: The height and width of image inputs unless ``image_size`` says otherwise (ImageNet's).
IMAGE_SIZE = 224

#: What the model presets of :mod:`helpers.models` take, in ``helpers.models.PRESETS``' order (a test checks).
PRESET_INPUTS = {
    "mlp": "64 features",
    **dict.fromkeys(("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "llama3-8b"), "token ids"),
}


def check_int(name: str, value: Any, lowest: int, highest: int | None = None, *, what: str | None = None) -> int:
    """``value`` if it is an integer (not a bool) >= ``lowest`` and, if given, <= ``highest``.

    Raises:
        ValueError: ``"<name> must be <what>, got <value>"`` otherwise (``what``: the rule in the caller's words).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest or (
            highest is not None and value > highest):
        if what is None:
            what = f"an integer >= {lowest}" if highest is None else f"an integer from {lowest} to {highest}"
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; use one of {', '.join(choices)}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


#: The integer options and their lowest value; then those that may be None.
_INTEGERS = (("batch_size", 1), ("image_size", 1), ("checkpoint", 0), ("accumulation_steps", 1), ("lora_rank", 0))
_OPTIONAL_INTEGERS = ("seq_len", "vocab_size", "num_classes", "capacity")
_FLAGS = ("amp", "reentrant", "offload", "steady_state", "fused", "step_in_backward", "set_to_none", "optimizer_offload",
          "full_trace", "symbolic", "double_quant", "prepare_kbit", "bf16_embeddings", "dora", "frozen")
_CHOICES = (("optimizer", OPTIMIZERS), ("device", DEVICES), ("amp_dtype", AMP_DTYPES), ("attention", ATTENTION),
            ("quantization", QUANTIZATIONS), ("param_dtype", PARAM_DTYPES), ("lora_dtype", LORA_DTYPES),
            ("compute_dtype", COMPUTE_DTYPES), ("workspaces", WORKSPACES))


def _check_values(config: "StepConfig") -> None:
    """Each option on its own: integers, flags, choices."""
    for option, lowest in _INTEGERS:
        check_int(option, getattr(config, option), lowest)
    for option in _OPTIONAL_INTEGERS:
        if getattr(config, option) is not None:
            check_int(option, getattr(config, option), 1)
    for flag in _FLAGS:
        _check_bool(flag, getattr(config, flag))
    for option, choices in _CHOICES:
        _check_choice(option, getattr(config, option), choices)


def _check_data(config: "StepConfig") -> None:
    """The inputs and the loss: ``input_shape`` (made a tuple), ``inputs``, ``loss``."""
    if config.input_shape is not None:
        shape = tuple(config.input_shape)
        for n in shape:
            check_int("each input_shape entry", n, 1)
        object.__setattr__(config, "input_shape", shape)
    if config.inputs is not None and not callable(config.inputs):
        raise ValueError(f"inputs must be a function (batch_size, device) -> tensors, got {config.inputs!r}")
    if not callable(config.loss):
        _check_choice("loss", config.loss, LOSSES)


def _check_lora(config: "StepConfig") -> None:
    """LoRA's targets (made a tuple of names) and dropout."""
    if config.lora_targets is not None:
        targets = (config.lora_targets,) if isinstance(config.lora_targets, str) else config.lora_targets
        if (not isinstance(targets, (tuple, list)) or not targets
                or not all(isinstance(t, str) and t for t in targets)):
            raise ValueError(f"lora_targets must be names of linear layers such as ('q_proj', 'v_proj'), "
                             f"got {config.lora_targets!r}")
        object.__setattr__(config, "lora_targets", tuple(targets))
    dropout = config.lora_dropout
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"lora_dropout must be a probability from 0 to below 1, got {dropout!r}")


def _check_model(config: "StepConfig") -> None:
    """The model (a name, a Hugging Face config, or something callable) and the profile's name; a config dict of JSON
    values replaced by its read-only copy (:func:`helpers.hf_config.frozen_config`), so the step is keyed by the
    dict's content."""
    model = config.model
    if (isinstance(model, str) and not model) or not (isinstance(model, str) or is_hf_config(model)
                                                      or callable(model)):
        got = f", got {model!r}" if not isinstance(model, str) else ""
        raise ValueError(f"model must be a model name, an nn.Module or a function returning one{got}")
    if isinstance(model, dict):
        frozen = frozen_config(model)
        if frozen is not None:
            object.__setattr__(config, "model", frozen)
    if config.name is not None and not isinstance(config.name, str):
        raise ValueError(f"name must be a string, got {config.name!r}")


#: Options that do not go together: (when, the message), checked in this order.
_CONFLICTS: tuple[tuple[Callable[["StepConfig"], bool], str], ...] = (
    (lambda c: c.workspaces != "none" and c.device == "cuda",
     "workspaces applies to the simulated GPU: a real GPU's kernels allocate their own (device='simulated')"),
    (lambda c: c.fused and c.optimizer in ("adamw8bit", "bnb-adamw8bit"),
     "fused applies to torch.optim's optimizers: the 8-bit AdamWs (torchao's, bitsandbytes') have no fused "
     "implementation"),
    (lambda c: c.optimizer.startswith("paged-") and (c.fused or c.optimizer_offload or c.step_in_backward),
     "a paged optimizer (bitsandbytes' PagedAdamW, PagedAdamW8bit) pages its own states and steps after backward: "
     "not with fused, optimizer_offload or step_in_backward"),
    (lambda c: c.optimizer == "bnb-adamw8bit" and (c.optimizer_offload or c.step_in_backward),
     "optimizer='bnb-adamw8bit' (bitsandbytes' AdamW8bit) steps on the GPU after backward: not with "
     "optimizer_offload or step_in_backward"),
    (lambda c: c.optimizer_offload and c.step_in_backward,
     "optimizer_offload steps on the host after backward: it cannot step inside backward (step_in_backward)"),
    (lambda c: c.optimizer_offload and not c.set_to_none,
     "optimizer_offload frees the GPU gradients at zero_grad (torchao's CPUOffloadOptimizer asserts "
     "set_to_none): leave set_to_none=True"),
    (lambda c: c.reentrant and not c.checkpoint, "reentrant applies to checkpointing: give checkpoint segments too"),
    (lambda c: c.step_in_backward and c.amp and c.amp_dtype == "float16",
     "step_in_backward cannot unscale float16 gradients (GradScaler): use amp_dtype='bfloat16', or no AMP"),
    (lambda c: c.param_dtype == "float16" and c.amp and c.amp_dtype == "float16" and not c.lora_rank and not c.frozen,
     "float16 parameters have float16 gradients, which float16 AMP's GradScaler cannot unscale "
     "(torch/amp/grad_scaler.py): use amp_dtype='bfloat16', or no AMP"),
    (lambda c: c.step_in_backward and c.accumulation_steps > 1,
     "step_in_backward steps at every backward: it cannot accumulate gradients"),
    (lambda c: c.inputs is not None and (c.input_shape is not None or c.seq_len is not None),
     "give inputs=, or input_shape= / seq_len=, not both"),
    (lambda c: c.input_shape is not None and c.seq_len is not None,
     "give input_shape= (float samples) or seq_len= (token ids), not both"),
    (lambda c: c.vocab_size is not None and c.seq_len is None, "vocab_size applies to token inputs: give seq_len too"),
    (lambda c: not c.lora_rank and (c.lora_targets is not None or c.lora_dropout),
     "lora_targets and lora_dropout apply to LoRA: give lora_rank too"),
    (lambda c: not c.lora_rank and c.lora_dtype != "float32", "lora_dtype applies to LoRA: give lora_rank too"),
    (lambda c: not c.lora_rank and c.dora, "dora (peft's use_dora) applies to LoRA: give lora_rank too"),
    (lambda c: c.dora and c.quantization == "int8",
     "dora= with bitsandbytes' int8 weights is not simulated: peft dequantizes them through bitsandbytes' "
     "Int8Params, which cannot hold the simulation's fake tensors"),
    (lambda c: c.dora and c.quantization == "torchao-nf4",
     "dora= with quantization='torchao-nf4' fails in peft itself: its DoRA calls weight.dequantize(), which torchao's "
     "NF4Tensor does not take without arguments"),
    (lambda c: c.quantization != "none" and not c.lora_rank and not c.frozen,
     "quantization= (QLoRA) quantizes the frozen base weights of LoRA: give lora_rank too"),
    (lambda c: c.frozen and c.lora_rank,
     "frozen= keeps every parameter frozen (a model served, not trained); LoRA trains adapters: not both"),
    (lambda c: c.prepare_kbit and c.quantization not in BNB_QUANTIZATIONS,
     "prepare_kbit (peft's prepare_model_for_kbit_training) applies to bitsandbytes' quantization='nf4', "
     "quantization='fp4' or quantization='int8'"),
    (lambda c: c.bf16_embeddings and not c.prepare_kbit,
     "bf16_embeddings casts back what prepare_kbit (peft's prepare_model_for_kbit_training) made float32: give "
     "prepare_kbit too"),
    (lambda c: c.compute_dtype != "bfloat16" and c.quantization not in BNB_4BIT,
     "compute_dtype (bitsandbytes' bnb_4bit_compute_dtype) applies to quantization='nf4' or quantization='fp4'"),
    (lambda c: c.double_quant and c.quantization == "int8",
     "double_quant (bitsandbytes' bnb_4bit_use_double_quant) applies to its 4-bit quantization='nf4' or "
     "quantization='fp4', not to int8 (one float32 scale per row)"),
    (lambda c: c.double_quant and c.quantization not in BNB_4BIT,
     "double_quant (bitsandbytes' double quantization) applies to quantization='nf4' or quantization='fp4' "
     "(torchao-nf4 always quantizes its scales)"),
)


@dataclass(frozen=True)
class StepConfig:
    """One training step to profile. Every field is checked when it is made.

    Model:
        model: a torchvision classifier name, a preset of :mod:`helpers.models` (``"mlp"``, ``"gpt2"``, ...), an
            ``nn.Module`` (profiled on a copy), a function returning one, or a Hugging Face causal LM config
            (:mod:`helpers.models.hf`: a shipped or Hub name, a ``config.json`` path, a dict or a ``PretrainedConfig``).
            A dict of JSON values is kept as a read-only copy (:func:`helpers.hf_config.frozen_config`): its steps are
            kept and evaluated from symbolic logs by its content, and the learner's dict can change after the call;
            a dict with other values (a ``torch.dtype``) and a ``PretrainedConfig`` (a mutable object) stay as given.
        name: the profile's label (default: the model's name).
    Data:
        batch_size: samples per batch, >= 1.
        image_size: height and width of image inputs (refused, if not :data:`IMAGE_SIZE`, for other inputs).
        input_shape: shape of one float sample, e.g. ``(3, 224, 224)`` or ``(784,)``.
        seq_len: token inputs: ``seq_len`` int64 token ids per sample; ``vocab_size``: ids below it (default: model's).
        inputs: a function ``(batch_size, device) -> tensor(s)`` making the input.
        loss: ``"auto"``, ``"classification"``, ``"next_token"``, ``"chunked"`` (next-token, as torchtune's
            ``CEWithChunkedOutputLoss``: a Hugging Face causal LM's head in 8 chunks of the sequence, each upcast to
            float32 on its own), or ``(output) -> scalar``. The model's output (the logits) is freed before backward,
            as Hugging Face's ``Trainer`` and torchtune's recipes free it.
        num_classes: a classifier's classes (default 1000 for torchvision names, else the logits' size).
    Techniques:
        amp: forward and loss under autocast, in ``amp_dtype``: ``"float16"`` (with a GradScaler) or ``"bfloat16"``.
        checkpoint: activation checkpointing in this many segments (0: off; a Hugging Face model checkpoints each
            decoder layer); ``reentrant``: the reentrant variant (lesson 04).
        offload: keep tensors saved for backward in host memory (``save_on_cpu``).
        optimizer: one of :data:`OPTIMIZERS`; ``fused``: its fused implementation instead of ``foreach``.
        step_in_backward: step each parameter in backward as its gradient is ready and free it
            (``register_post_accumulate_grad_hook``, PyTorch's tutorial); not with float16 AMP.
        accumulation_steps: forward and backward passes per optimizer step; ``set_to_none``: of ``zero_grad``.
        attention: the simulated attention kernel, one of :data:`ATTENTION`.
        lora_rank: ``peft`` LoRA adapters of this rank on ``lora_targets`` (None: peft's default), base weights frozen
            (0: off); ``lora_dropout`` in [0, 1); ``lora_dtype``: the adapters' dtype, ``"float32"`` (peft's default,
            ``autocast_adapter_dtype=True``) or ``"bfloat16"`` (``autocast_adapter_dtype=False`` on a
            bfloat16 base; the QLoRA paper's ``qlora.py --bf16``); ``dora``: peft's DoRA (``use_dora=True``, Liu et
            al., 2024), a magnitude vector per adapted layer and the base weight's norm at every forward.
        quantization: one of :data:`QUANTIZATIONS`; ``"nf4"`` is QLoRA with bitsandbytes, ``"torchao-nf4"`` with
            torchao, ``"int8"`` LoRA on bitsandbytes' LLM.int8() base (``load_in_8bit=True``: one byte per weight
            and a float32 scale per row; no outlier column assumed) (:mod:`helpers.techniques.quantization`). Needs
            ``lora_rank``, or ``frozen``. ``double_quant``: bitsandbytes' ``bnb_4bit_use_double_quant`` (4-bit only: the scales in 8
            bits; Hugging Face's default is off). ``prepare_kbit``: peft's ``prepare_model_for_kbit_training`` before
            LoRA, as Hugging Face's QLoRA recipes run it (bitsandbytes' formats): every parameter that is not quantized
            in float32, and checkpointing as ``checkpoint`` and ``reentrant`` say.
            ``bf16_embeddings``: after it, the embeddings and the LM head cast back to bfloat16, norms kept float32
            (TRL's ``peft_module_casting_to_bf16``, which ``SFTTrainer`` runs with ``bf16=True``; ``qlora.py``).
            ``compute_dtype``: the dtype bitsandbytes' 4-bit layers dequantize into and multiply in
            (``bnb_4bit_compute_dtype``), one of :data:`COMPUTE_DTYPES`: ``"bfloat16"`` (the default here, the
            QLoRA recipes'), ``"float16"``, or ``"float32"`` (``BitsAndBytesConfig``'s own default).
        frozen: no parameter requires grad: a model served or generating, not trained (:mod:`helpers.generation`,
            :mod:`helpers.serving`); ``quantization`` then quantizes its linear layers without LoRA, as
            ``from_pretrained(quantization_config=...)`` loads a model for inference. No training step: refused by
            :func:`helpers.profile.profile_step`.
        param_dtype: one of :data:`PARAM_DTYPES` (``from_pretrained(torch_dtype=...)``); gradients and Adam's states
            follow it (``torch/optim/adamw.py``: ``torch.zeros_like(p)``); peft's adapters stay float32. Trained in
            float16, not with float16 AMP (its GradScaler refuses float16 gradients).
        optimizer_offload: optimizer states in host memory, stepped on the CPU (torchao's ``CPUOffloadOptimizer``,
            :class:`helpers.engine.backends.HostStates`). Paged optimizers are not simulated.
    Measurement:
        steady_state: trace the second step, when the optimizer states exist.
        full_trace: trace every block of a model of repeated blocks, instead of writing its step exactly from traces
            of 6 and 7 blocks (:mod:`helpers.depth`, the default where it applies).
        symbolic: False: trace (or write) the step concretely, never evaluate it from a symbolic log, kept or shipped
            (:mod:`helpers.evaluated`; :func:`helpers.symbolic_scope.applies` refuses it by name).  The bytes are the
            same either way; only the profile's ``depth_note`` (how it was made) and the time differ.
        device, capacity: one of :data:`DEVICES`; act as a GPU of this many bytes (:class:`helpers.engine.meter.Meter`).
        workspaces: simulated only: what kernels allocate beyond the tensors, one of :data:`WORKSPACES` (default
            "none": today's figures, a floor), on the card :func:`helpers.gpus.simulated_card` names for ``capacity``.

    Raises:
        ValueError: for any option out of range, with the option's name.
    """

    model: Any = "resnet18"
    batch_size: int = 128
    image_size: int = IMAGE_SIZE
    input_shape: tuple[int, ...] | None = None
    seq_len: int | None = None
    vocab_size: int | None = None
    inputs: Callable | None = None
    loss: str | Callable = "auto"
    num_classes: int | None = None
    name: str | None = None
    amp: bool = False
    amp_dtype: str = "float16"
    checkpoint: int = 0
    reentrant: bool = False
    offload: bool = False
    optimizer: str = "sgd-momentum"
    fused: bool = False
    step_in_backward: bool = False
    accumulation_steps: int = 1
    set_to_none: bool = True
    attention: str = "auto"
    lora_rank: int = 0
    lora_targets: tuple[str, ...] | None = None
    lora_dropout: float = 0.0
    lora_dtype: str = "float32"
    dora: bool = False
    quantization: str = "none"
    double_quant: bool = False
    compute_dtype: str = "bfloat16"
    prepare_kbit: bool = False
    bf16_embeddings: bool = False
    frozen: bool = False
    param_dtype: str = "float32"
    optimizer_offload: bool = False
    steady_state: bool = False
    full_trace: bool = False
    symbolic: bool = True
    device: str = "auto"
    capacity: int | None = None
    workspaces: str = "none"

    def __post_init__(self) -> None:
        for check in (_check_values, _check_data, _check_lora, _check_model):
            check(self)
        for conflict, message in _CONFLICTS:
            if conflict(self):
                raise ValueError(message)
        takes = self._not_images()
        if self.image_size != IMAGE_SIZE and takes:
            raise ValueError(f"image_size (--image-size) applies to image inputs; {self.label} takes {takes}")

    def _not_images(self) -> str | None:
        """What the model takes when not images of ``image_size``, else None."""
        if self.seq_len is not None:
            return "token ids (seq_len=, --seq-len)"
        if self.input_shape is not None:
            return f"samples of input_shape {self.input_shape} (--input-shape)"
        if self.inputs is not None:
            return "what inputs= makes"
        return PRESET_INPUTS.get(self.model) if isinstance(self.model, str) else None

    @property
    def tokens(self) -> bool:
        """True when the inputs are token ids (``seq_len`` given)."""
        return self.seq_len is not None

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one float sample: ``input_shape``, or ``(3, image_size, image_size)``."""
        return self.input_shape if self.input_shape is not None else (3, self.image_size, self.image_size)

    @property
    def label(self) -> str:
        """The profile's name: ``name``, or the model's."""
        if self.name:
            return self.name
        if isinstance(self.model, str):
            return self.model
        if is_hf_config(self.model) and not isinstance(self.model, str):
            model = self.model
            if isinstance(model, dict):
                return model.get("_name_or_path") or model["model_type"]
            return getattr(model, "name_or_path", "") or model.model_type
        return getattr(self.model, "__name__", type(self.model).__name__)

    def replace(self, **changes) -> "StepConfig":
        """A copy with some options changed (and checked again)."""
        return dataclasses.replace(self, **changes)

    def curve_key(self) -> "StepConfig":
        """Everything but the batch size: one :class:`helpers.batch.PeakCurve` per key."""
        return self.replace(batch_size=1)

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values (a model or function is given by its name)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "model":
                value = self.label
            elif callable(value):
                value = getattr(value, "__name__", type(value).__name__)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


def step_config(model, batch_size: int, image_size: int, caller: str, **options) -> StepConfig:
    """The :class:`StepConfig` of ``profile_step(model, batch_size, image_size, **options)``
    (:func:`helpers.profile.profile_step`; a :class:`StepConfig` ``model`` as it is).

    Raises:
        ValueError: for an option :class:`StepConfig` does not have (naming ``caller``), or a bad value.
    """
    if isinstance(model, StepConfig):
        return model
    known = {f.name for f in dataclasses.fields(StepConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} for {caller}; the options are "
                         f"{', '.join(sorted(known - {'model', 'batch_size', 'image_size'}))}")
    return StepConfig(model=model, batch_size=batch_size, image_size=image_size, **options)
