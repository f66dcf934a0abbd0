"""What a model is and what it eats, for every step: presets, torchvision classifiers, yours, Hugging Face configs.

Models are built with random weights (nothing is downloaded; memory does not depend on values). :func:`resolve_model`
turns what a learner passes to :func:`helpers.step.profile_step` into a :class:`ModelSpec`; :func:`resolve_task` adds
the step's options: the :class:`Task` that makes each :class:`Batch` and computes the loss; :func:`build` is the first
step of :data:`helpers.step.RECIPE`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import importlib.util
import warnings
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..config import StepConfig, check_int, is_hf_config
from ..errors import Refused, first_line
from .gpt import GPT, GPT2_PRESETS, GPTConfig  # noqa: F401 (GPTConfig re-exported: a learner sizes their own GPT)
from .llama import LLAMA_PRESETS, Llama, LlamaConfig


def _torchvision():
    """torchvision, imported when a model needs it (1.5 s that a language model's step, or a refusal, does without)."""
    import torchvision

    return torchvision


def classification_models() -> list[str]:
    """Names of torchvision's image classifier builders (``resnet18``, ``vit_b_16``, ...), sorted."""
    models = _torchvision().models
    return sorted(models.list_models(module=models))


def build_model(name: str, num_classes: int = 1000) -> nn.Module:
    """Build the torchvision classification model ``name`` with random weights, in training mode.

    Under a simulated :class:`helpers.engine.meter.Meter` it is made of fake tensors.

    Raises:
        ValueError: if ``name`` is not a torchvision classification model, or ``num_classes`` < 1.
    """
    known = classification_models()
    if name not in known:
        close = [n for n in known if n.startswith(name[:3])][:6] or known[:6]
        raise ValueError(
            f"unknown model {name!r}: not a torchvision classification model "
            f"(for example: {', '.join(close)})"
        )
    if num_classes < 1:
        raise ValueError(f"num_classes must be at least 1, got {num_classes}")
    kwargs = {"weights": None, "num_classes": num_classes}
    if name in ("googlenet", "inception_v3"):
        kwargs["aux_logits"] = False  # one output tensor, as in the other models
        kwargs["init_weights"] = True
    with warnings.catch_warnings(), _regnet_widths_on_cpu():
        warnings.simplefilter("ignore")  # torchvision's notes on default init
        model = _torchvision().models.get_model(name, **kwargs)
    return model.train()


@contextlib.contextmanager
def _regnet_widths_on_cpu():
    """Let RegNets build on ``meta``: ``BlockParams.from_init_params`` reads tensors back (``.tolist()``), so compute those widths on the CPU."""
    params = _torchvision().models.regnet.BlockParams
    original = params.__dict__["from_init_params"]

    def on_cpu(cls, *args, **kwargs):
        with torch.device("cpu"):
            return original.__func__(cls, *args, **kwargs)

    params.from_init_params = classmethod(on_cpu)
    try:
        yield
    finally:
        params.from_init_params = original


def sequential_form(model: nn.Module) -> nn.Sequential:
    """The model as one ``nn.Sequential`` of its own submodules, for ``checkpoint_sequential``.

    It computes exactly what ``model(x)`` computes, with the same parameters:
    ResNet-style models as stem, each residual block, head (10 units for ResNet18); VGG, AlexNet, MobileNet,
    EfficientNet as each module of ``features``, pooling, flatten, ``classifier``, in-place modules joined to the one
    before (:func:`_merge_inplace`); an ``nn.Sequential`` as itself; a
    :class:`helpers.models.gpt.GPT` as embeddings, blocks, head.

    Raises:
        ValueError: for a family whose forward is not such a sequence (DenseNet, Inception, ViT, Swin, ...).
    """
    if isinstance(model, nn.Sequential):
        return model
    if isinstance(model, GPT):
        return nn.Sequential(*model.units())
    models = _torchvision().models
    if isinstance(model, models.ResNet):
        stem = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
        blocks = [b for layer in (model.layer1, model.layer2, model.layer3, model.layer4) for b in layer]
        return nn.Sequential(stem, *blocks, nn.Sequential(model.avgpool, nn.Flatten(1), model.fc))
    if isinstance(model, (models.VGG, models.AlexNet, models.MobileNetV3, models.EfficientNet)):
        return _merge_inplace([*model.features, model.avgpool, nn.Flatten(1), *model.classifier])
    if isinstance(model, models.MobileNetV2):
        return _merge_inplace([*model.features, nn.AdaptiveAvgPool2d(1), nn.Flatten(1), *model.classifier])
    raise ValueError(
        f"activation checkpointing by segments needs the model as a sequence of modules; "
        f"{type(model).__name__} is not one (supported: ResNet/ResNeXt/Wide ResNet, VGG, "
        f"AlexNet, MobileNet V2/V3, EfficientNet, GPT, nn.Sequential)"
    )


def mlp(in_features: int = 64, hidden: tuple[int, ...] = (256, 256), num_classes: int = 10) -> nn.Sequential:
    """A multi-layer perceptron: ``Linear -> ReLU`` per hidden layer, then a ``Linear``.

    Input ``(batch, in_features)``, output ``(batch, num_classes)`` logits.  The
    default is lesson 01's 64 -> 256 -> 256 -> 10 (85,002 parameters).

    Raises:
        ValueError: if a size is below 1.
    """
    sizes = (in_features, *hidden, num_classes)
    for n in sizes:
        check_int(f"each of the layer sizes {sizes}", n, 1)
    layers: list[nn.Module] = []
    for n_in, n_out in zip(sizes[:-2], sizes[1:-1]):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


def digits_mlp() -> nn.Sequential:
    """Lesson 01's small MLP for the 8x8 digits: 64 -> 256 -> 256 -> 10 (85,002 parameters)."""
    return mlp(64, (256, 256), 10)


def dropout_mlp(relu: Callable[[], nn.Module] = nn.ReLU) -> nn.Sequential:
    """Lesson 02's MLP after the dropout paper (Srivastava et al., JMLR 2014): 3,962,890 parameters.

    ``Flatten``, 4 x (``Linear(., 1024)``, ``relu()``, ``Dropout(0.5)``), ``Linear(1024, 10)``:
    input ``(batch, 1, 28, 28)``, output ``(batch, 10)``. ``relu`` is the activation's class or builder.
    """
    layers, width = [nn.Flatten()], 784
    for _ in range(4):
        layers += [nn.Linear(width, 1024), relu(), nn.Dropout(0.5)]
        width = 1024
    return nn.Sequential(*layers, nn.Linear(width, 10))


def digits_cnn(num_classes: int = 10) -> nn.Sequential:
    """A small CNN for the 8x8 digits (lesson 04): ``(batch, 64)`` pixels -> ``(batch, num_classes)`` logits.

    Narrow, so that bfloat16 autocast trains it in seconds on a CPU without bfloat16 instructions (PyTorch's slow
    reference kernel, ``_slow_conv2d_forward``), and above 95% test accuracy in 8 epochs."""
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, num_classes),
    )


def _merge_inplace(units: list[nn.Module]) -> nn.Sequential:
    """Join each in-place module to the unit before it: a segment starting in place would overwrite its kept input."""
    merged: list[nn.Module] = []
    for unit in units:
        if merged and getattr(unit, "inplace", False):
            previous = merged.pop()
            merged.append(nn.Sequential(*(previous if isinstance(previous, nn.Sequential) else [previous]), unit))
        else:
            merged.append(unit)
    return nn.Sequential(*merged)


def output_logits(output) -> torch.Tensor:
    """The logits of a model's output: a tensor, ``.logits`` (Hugging Face), or a tuple's first element.

    Raises:
        ValueError: if no tensor can be found.
    """
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise ValueError(f"the model returned {type(output).__name__}, not a tensor of logits; "
                     f"give loss= a function of the output")


@dataclass(frozen=True)
class ModelSpec:
    """How to build a model, and what it expects.

    Attributes:
        name: the label of its profiles.
        build: returns a fresh model (on ``meta`` when simulating).
        input_shape: one float sample's shape, if the model fixes it.
        vocab_size, seq_len: token models: the vocabulary and the longest sequence.
        num_classes: a classifier's classes, if known before a forward pass.
        seq_len_required: ``seq_len`` must be given (a Hugging Face causal LM).
        blocks: a model built of identical repeated blocks (the GPT and Llama presets, a Hugging Face causal LM whose
            decoder layers all run alike): how many; None for any other model.
        at_depth: with ``blocks``, ``n -> ModelSpec`` of the same model with ``n`` blocks (:mod:`helpers.depth` traces
            two such copies and writes the step of ``blocks`` from them); None when the blocks differ.
        blocks_differ: why the blocks are not all alike (a Hugging Face config whose layers differ), or None.
    """

    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...] | None = None
    vocab_size: int | None = None
    seq_len: int | None = None
    num_classes: int | None = None
    seq_len_required: bool = False
    blocks: int | None = None
    at_depth: Callable[[int], "ModelSpec"] | None = None
    blocks_differ: str | None = None


def _gpt_spec(name: str, config: GPTConfig | None = None) -> ModelSpec:
    config = config or GPT2_PRESETS[name]
    return ModelSpec(name, lambda: GPT(config), vocab_size=config.vocab_size, seq_len=config.n_positions,
                     blocks=config.n_layer, at_depth=lambda n: _gpt_spec(name, dataclasses.replace(config, n_layer=n)))


def hf_spec(config, name: str | None = None) -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face causal LM from its config (:func:`helpers.models.hf.causal_lm`).

    Token ids below ``vocab_size``, as many as ``seq_len`` says; next-token loss.

    Raises:
        ValueError: as :func:`helpers.models.hf.load_config` does.
    """
    from . import hf  # only for a Hugging Face config: no transformers on the path of other models

    return _hf_spec(config if isinstance(config, hf.CausalLMBuilder) else hf.causal_lm(config), name)


def _hf_spec(builder, name: str | None) -> ModelSpec:
    differ = builder.layers_differ()
    return ModelSpec(name or builder.label, builder, vocab_size=builder.vocab_size, seq_len=builder.context,
                     seq_len_required=True, blocks=builder.blocks, blocks_differ=differ,
                     at_depth=None if differ else lambda n: _hf_spec(builder.at_depth(n), name))


def _llama_spec(name: str, config: LlamaConfig | None = None) -> ModelSpec:
    config = config or LLAMA_PRESETS[name]
    return ModelSpec(name, lambda: Llama(config), vocab_size=config.vocab_size, seq_len=config.n_positions,
                     blocks=config.n_layer,
                     at_depth=lambda n: _llama_spec(name, dataclasses.replace(config, n_layer=n)))


#: The language models by name: the GPT-2 sizes and lesson 08's Llama-3 8B.
#: Their inputs are token ids, by default as many as their context holds.
LANGUAGE_PRESETS = (*GPT2_PRESETS, "llama3-8b")

#: Models by name besides torchvision's: lesson 01's MLP and :data:`LANGUAGE_PRESETS`.
PRESETS: dict[str, Callable[[], ModelSpec]] = {
    "mlp": lambda: ModelSpec("mlp", digits_mlp, input_shape=(64,), num_classes=10),
    **{name: (lambda name=name: _gpt_spec(name)) for name in GPT2_PRESETS},
    "llama3-8b": lambda: _llama_spec("llama3-8b"),
}


def model_names() -> list[str]:
    """Every model name :func:`resolve_model` accepts: the presets, then torchvision's classifiers."""
    return list(PRESETS) + classification_models()


def meta_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` with its parameters and buffers on ``meta`` (tied weights stay tied; the original is untouched)."""
    memo = {}
    for t in chain(module.parameters(), module.buffers()):
        meta = torch.empty_like(t, device="meta")
        memo[id(t)] = nn.Parameter(meta, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else meta
    return copy.deepcopy(module, memo)


def _import_function(path: str) -> Callable[[], nn.Module]:
    """``"package.module:function"`` or ``"path/to/file.py:function"`` -> the function (a learner's own model).

    Raises:
        ValueError: if the module or file does not import or has no such function.
    """
    source, _, attribute = path.rpartition(":")  # rpartition: a Windows path has a colon of its own
    if _is_file(source) and not Path(source).is_file():
        raise ValueError(f"no file {source!r} (from --model {path})")
    try:
        if _is_file(source):
            spec = importlib.util.spec_from_file_location(f"_model_file_{Path(source).stem}", source)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(source)
    except Exception as e:  # any import failure is the learner's file, reported in one line
        raise ValueError(f"cannot import {source!r} for --model {path}: {type(e).__name__}: {first_line(e)}") from None
    builder = getattr(module, attribute, None)
    if not callable(builder):
        raise ValueError(f"{source!r} has no function {attribute!r} (from --model {path})")
    return builder


def _is_file(source: str) -> bool:
    """A file path (``mymodel.py``, ``./models/net.py``), not a module name (``package.module``)."""
    return source.endswith(".py") or "/" in source or "\\" in source


def unknown_model(name: str) -> str:
    """The one-line message for a model name :func:`resolve_model` does not know, with what it does."""
    close = [n for n in classification_models() if n.startswith(name[:3])][:4]
    return (f"unknown model {name!r}; use a preset ({', '.join(PRESETS)}), any torchvision classification model "
            f"(resnet18, vit_b_16, ...{'; close to yours: ' + ', '.join(close) if close else ''}), "
            f"or your own as package.module:function or path/to/file.py:function")


def resolve_model(model, num_classes: int | None = None, name: str | None = None) -> ModelSpec:
    """What :func:`helpers.step.profile_step` needs to know about ``model``.

    Args:
        model: a torchvision classifier name, a preset of :data:`PRESETS`, ``"package.module:function"`` or
            ``"path/to/file.py:function"``, an ``nn.Module`` (a :func:`meta_copy` when simulating, a deep copy on a
            GPU), a function returning one, or a Hugging Face config (:func:`hf_spec`: a shipped or Hub name, a
            ``config.json`` path, a dict or a ``PretrainedConfig``), or a builder whose ``model_spec()`` returns its
            :class:`ModelSpec`, blocks known (``helpers.transformer.TransformerBuilder``,
            ``helpers.teaching.setups.CausalLM``).
        num_classes: classes for a torchvision name (default 1000).
        name: the label (default: the model's name).

    Raises:
        ValueError: for an unknown name, an import that fails, or anything else.
    """
    if isinstance(model, str) and model in PRESETS:
        spec = PRESETS[model]()
    elif is_hf_config(model):
        spec = hf_spec(model)
    elif isinstance(model, str):
        if ":" in model:
            spec = ModelSpec(model.rpartition(":")[2], _import_function(model))
        elif _is_file(model):
            raise ValueError(f"name the function in {model} that returns the model: {model}:function")
        else:
            if model not in classification_models():
                raise ValueError(unknown_model(model))
            classes = num_classes or 1000
            spec = ModelSpec(model, lambda: build_model(model, classes), num_classes=classes)
    elif callable(getattr(model, "model_spec", None)):
        spec = model.model_spec()
    elif isinstance(model, nn.Module):
        instance = model
        spec = ModelSpec(type(instance).__name__, lambda: _copy_for_step(instance))
    elif callable(model):
        spec = ModelSpec(getattr(model, "__name__", type(model).__name__), model)
    else:
        raise ValueError(f"model must be a model name, an nn.Module or a function returning one, got {model!r}")
    return spec if name is None else dataclasses.replace(spec, name=name)


def _copy_for_step(module: nn.Module) -> nn.Module:
    """A copy of a learner's model for one step: meta tensors under a ``meta`` device, else a real copy."""
    return meta_copy(module) if torch.get_default_device().type == "meta" else copy.deepcopy(module)


def build(runner) -> None:
    """The recipe's first step: ``runner.model`` is ``runner.spec.build()``, outside any measurement.

    Raises:
        Refused (a ValueError): if the builder returns something else than an ``nn.Module``.
    """
    model = runner.spec.build()
    if not isinstance(model, nn.Module):
        raise Refused(f"the model function must return an nn.Module, got {type(model).__name__}")
    runner.model = model


@dataclass
class Batch:
    """One (micro-)batch: ``inputs`` (the forward's positional inputs) and ``targets`` (None: drawn by :meth:`Task.loss_of`)."""

    inputs: tuple
    targets: torch.Tensor | None = None

    def tensors(self) -> list[torch.Tensor]:
        """The inputs and targets that are tensors."""
        return [t for t in (*self.inputs, self.targets) if isinstance(t, torch.Tensor)]


#: The chunks of torchtune's ``CEWithChunkedOutputLoss`` (its ``num_output_chunks`` default).
OUTPUT_CHUNKS = 8
#: The Hugging Face model types whose forward applies the LM head to the decoder's last hidden state and returns its
#: output as the logits, with nothing between (no transform, scale or soft-capping): their head can run in chunks.
CHUNKED_MODEL_TYPES = ("llama", "mistral", "qwen2", "gpt2", "bloom")


def check_chunked(model: nn.Module) -> None:
    """That ``model`` can compute :func:`chunked_output_loss`: a Hugging Face causal LM of
    :data:`CHUNKED_MODEL_TYPES` with an LM head (peft's wrapper passes both on).

    Raises:
        Refused (a ValueError): in one line, otherwise.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    head = getattr(model, "get_output_embeddings", None)
    if model_type not in CHUNKED_MODEL_TYPES or not callable(head) or head() is None:
        what = f"a {model_type!r} model" if model_type else type(model).__name__
        raise Refused(f"loss='chunked' (torchtune's chunked output) needs a Hugging Face causal LM whose LM head reads "
                      f"the decoder's output as it is ({', '.join(CHUNKED_MODEL_TYPES)}), not {what}")


def chunked_output_loss(model: nn.Module, inputs: tuple, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy as torchtune 0.6.1 computes it with ``CEWithChunkedOutputLoss``, for a causal LM that
    :func:`check_chunked` accepts.

    The model runs as usual, but its LM head runs on :data:`OUTPUT_CHUNKS` chunks of the last hidden state
    ``(batch, seq, hidden)`` along the sequence and returns their logits as a list
    (``TransformerDecoder.chunked_output``, ``torchtune/modules/transformer.py``); each chunk is upcast to float32 and
    scored on its own (``compute_cross_entropy``, a sum), and the sum divided by the number of targets
    (``torchtune/modules/loss/ce_chunked_output_loss.py``): one chunk's float32 copy at a time instead of the whole
    logits'. ``targets``: ``(batch, seq)`` token ids. Returns the mean loss, a scalar.
    """
    head = model.get_output_embeddings()
    forward = type(head).forward
    head.forward = lambda x: [forward(head, chunk) for chunk in x.chunk(OUTPUT_CHUNKS, dim=1)]
    try:
        logits = model(*inputs).logits
    finally:
        del head.forward  # the class's forward again
    total = 0.0
    for chunk, target in zip(logits, targets.chunk(OUTPUT_CHUNKS, dim=1)):
        total = total + F.cross_entropy(chunk.flatten(0, 1).float(), target.flatten(), reduction="sum")
    return total / targets.numel()


@dataclass(frozen=True)
class Task:
    """What a step feeds the model and how it scores the output (:func:`resolve_task`).

    Attributes:
        inputs: ``"features"`` (float samples), ``"tokens"`` (int64 ids) or ``"custom"``.
        sample_shape: one sample's shape (``()`` for custom inputs).
        vocab_size: token inputs are drawn below it.
        loss: ``"classification"``, ``"next_token"``, ``"chunked"`` (:func:`chunked_output_loss`), or a function
            of the output.
        num_classes: a classifier's classes, if known before the forward pass.
        dtype: the float samples' dtype (``StepConfig.param_dtype``).
        make: custom inputs: ``StepConfig.inputs``, a function ``(batch_size, device)``.
    """

    inputs: str
    sample_shape: tuple[int, ...]
    vocab_size: int | None
    loss: str | Callable
    num_classes: int | None
    dtype: torch.dtype = torch.float32
    make: Callable | None = None

    def batch(self, batch_size: int, device: torch.device) -> Batch:
        """Random inputs of ``batch_size`` samples on ``device``, and the targets when they can be drawn
        before the forward pass (class ids for a known number of classes; next tokens)."""
        if self.inputs == "custom":
            made = self.make(batch_size, device)
            return Batch(made if isinstance(made, tuple) else (made,))
        shape = (batch_size, *self.sample_shape)
        if self.inputs == "tokens":
            x = torch.randint(0, self.vocab_size, shape, device=device)
            if self.loss in ("next_token", "chunked"):
                return Batch((x,), torch.randint(0, self.vocab_size, shape, device=device))
        else:
            x = torch.randn(shape, device=device, dtype=self.dtype)
        if self.loss == "classification" and self.num_classes:
            return Batch((x,), torch.randint(0, self.num_classes, (batch_size,), device=device))
        return Batch((x,))

    def forward(self, model: nn.Module, inputs: tuple, targets: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The forward pass of ``model`` on ``inputs`` and its loss (:meth:`loss_of`, or
        :func:`chunked_output_loss`); the output is freed on return."""
        if self.loss == "chunked":
            return chunked_output_loss(model, inputs, targets), targets
        return self.loss_of(model(*inputs), targets)

    def loss_of(self, output, targets: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The loss (a scalar) of the model's ``output``, and the targets (drawn here if ``targets`` is None).

        Raises:
            ValueError: in one line, if the output does not fit the loss.
        """
        if callable(self.loss):
            loss = self.loss(output)
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                raise ValueError(f"the loss function must return a scalar tensor, got {type(loss).__name__}"
                                 + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""))
            return loss, targets
        logits = output_logits(output)
        if self.loss == "next_token":
            if logits.dim() != 3:
                raise ValueError(f"next-token loss expects (batch, seq, vocab) logits, got shape {tuple(logits.shape)}")
            if targets is None:
                targets = torch.randint(0, logits.shape[-1], logits.shape[:2], device=logits.device)
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), targets
        if logits.dim() != 2:
            raise ValueError(f"classification loss expects (batch, classes) logits, got shape {tuple(logits.shape)}; "
                             f"for a language model use seq_len= (next-token loss)")
        if self.num_classes is not None and logits.shape[1] != self.num_classes:
            raise ValueError(f"the model's output has {logits.shape[1]} classes, but num_classes is {self.num_classes}")
        if targets is None:
            targets = torch.randint(0, logits.shape[1], (logits.shape[0],), device=logits.device)
        return F.cross_entropy(logits, targets), targets


def resolve_task(config: StepConfig, spec: ModelSpec) -> Task:
    """The :class:`Task` of a step: ``config``'s inputs and loss, completed by what ``spec`` knows.

    Token ids when ``config.seq_len`` is given or the model is a token model,
    else float samples of ``config.input_shape``, the model's shape, or images;
    loss ``"auto"``: next-token for token ids, else classification.

    Raises:
        ValueError: for ``input_shape`` given to a token model, a Hugging Face causal LM without ``seq_len``, token ids
            without a vocabulary, or ``num_classes`` with a next-token loss.
    """
    if spec.vocab_size and config.input_shape is not None:
        raise ValueError(f"{spec.name} takes token ids: give their number with seq_len= (--seq-len), "
                         f"not input_shape=")
    if config.seq_len is None and config.inputs is None and spec.seq_len_required:
        raise ValueError(f"{spec.name} is a Hugging Face causal LM: give the sequence length with seq_len= "
                         f"(--seq-len); its context{f', {spec.seq_len:,} tokens,' if spec.seq_len else ''} "
                         f"is not taken by default")
    seq_len = config.seq_len if config.seq_len is not None else (spec.seq_len if spec.vocab_size else None)
    if config.inputs is not None:
        kind, shape, vocab = "custom", (), None
    elif seq_len is not None:
        vocab = config.vocab_size or spec.vocab_size
        if vocab is None:
            raise ValueError("token inputs need a vocabulary: give vocab_size= (--vocab-size) with seq_len=")
        kind, shape = "tokens", (seq_len,)
    else:
        kind, shape, vocab = "features", config.input_shape or spec.input_shape or config.sample_shape, None
    loss = config.loss
    if loss == "auto":
        loss = "next_token" if kind == "tokens" else "classification"
    if loss == "chunked" and kind != "tokens":
        raise ValueError("loss='chunked' is a next-token loss: it needs token inputs (seq_len=)")
    if loss in ("next_token", "chunked") and config.num_classes is not None:
        raise ValueError("num_classes applies to a classification loss; next-token loss has the vocabulary "
                         "as its classes")
    return Task(kind, shape, vocab, loss, config.num_classes or spec.num_classes, getattr(torch, config.param_dtype),
                config.inputs)
