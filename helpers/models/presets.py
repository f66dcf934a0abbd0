"""The course's own models by name, and torchvision's classifiers: what :data:`PRESETS` and :func:`build_model` build.

Lesson 01's MLP (:func:`mlp`, :func:`digits_mlp`), lesson 02's :func:`dropout_mlp`, lesson 04b's :func:`digits_cnn`,
the GPT-2 sizes (:mod:`helpers.models.gpt`) and lesson 08b's Llama-3 8B (:mod:`helpers.models.llama`), with random
weights (nothing is downloaded; memory does not depend on values); and :func:`sequential_form`, the model as the
sequence of modules that checkpointing by segments cuts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from typing import Callable

import torch
from torch import nn

from ..config import check_int
from .gpt import GPT, GPT2_PRESETS, GPTConfig
from .llama import LLAMA_PRESETS, Llama, LlamaConfig
from .spec import ModelSpec


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
    """A small CNN for the 8x8 digits (lesson 04b): ``(batch, 64)`` pixels -> ``(batch, num_classes)`` logits.

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


def _gpt_spec(name: str, config: GPTConfig | None = None) -> ModelSpec:
    config = config or GPT2_PRESETS[name]
    return ModelSpec(name, lambda: GPT(config), vocab_size=config.vocab_size, seq_len=config.n_positions,
                     blocks=config.n_layer, at_depth=lambda n: _gpt_spec(name, dataclasses.replace(config, n_layer=n)))


def _llama_spec(name: str, config: LlamaConfig | None = None) -> ModelSpec:
    config = config or LLAMA_PRESETS[name]
    return ModelSpec(name, lambda: Llama(config), vocab_size=config.vocab_size, seq_len=config.n_positions,
                     blocks=config.n_layer,
                     at_depth=lambda n: _llama_spec(name, dataclasses.replace(config, n_layer=n)))


#: The language models by name: the GPT-2 sizes and lesson 08b's Llama-3 8B.
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
