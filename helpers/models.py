"""Models the lessons trace: torchvision classification models, by name.

Introduced in lesson 03 (ResNet18 layer by layer).  Models are always built
with random weights (``weights=None``): nothing is downloaded, and memory does
not depend on the values of the weights.
"""

from __future__ import annotations

import warnings

import torch
import torchvision
from torch import nn


def classification_models() -> list[str]:
    """Names of all torchvision classification model builders, sorted.

    These are the names ``torchvision.models.get_model`` accepts that build an
    image classifier (``resnet18``, ``vgg11``, ``vit_b_16``, ...); detection,
    segmentation, video and quantized models are not included.
    """
    return sorted(torchvision.models.list_models(module=torchvision.models))


def build_model(name: str, num_classes: int = 1000) -> nn.Module:
    """Build the torchvision classification model ``name`` with random weights.

    Args:
        name: a builder name from :func:`classification_models`.
        num_classes: size of the classifier's output (1000, as ImageNet).

    Returns:
        The model, in training mode, on the current default device.  Under a
        simulated :class:`helpers.memory.Meter` it is made of fake tensors.

    Raises:
        ValueError: if ``name`` is not a torchvision classification model, or
            ``num_classes`` < 1.
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision's notes on default init
        model = torchvision.models.get_model(name, **kwargs)
    return model.train()


def sequential_form(model: nn.Module) -> nn.Sequential:
    """The model as one ``nn.Sequential`` of its own submodules, for checkpointing.

    ``torch.utils.checkpoint.checkpoint_sequential`` splits a sequence of
    modules into segments.  This returns such a sequence that computes exactly
    what ``model(x)`` computes, sharing the same parameter tensors:

    * ResNet, ResNeXt, Wide ResNet: the stem (conv1, bn1, relu, maxpool) as
      one unit, each residual block of layer1..layer4 as its own unit, and
      the head (avgpool, flatten, fc): 10 units for ResNet18;
    * VGG, AlexNet, MobileNet V2/V3, EfficientNet: each module of
      ``features``, then the pooling, flatten, and ``classifier``, with every
      in-place module joined to the one before it (a checkpoint segment must
      not start with an in-place operation, which would overwrite the
      segment's kept input);
    * an ``nn.Sequential`` (such as :func:`mlp`): itself.

    Args:
        model: a model from :func:`build_model`.

    Raises:
        ValueError: for a model family whose forward is not such a sequence
            (DenseNet, Inception, ViT, Swin, ...).
    """
    models = torchvision.models
    if isinstance(model, nn.Sequential):
        return model
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
        f"AlexNet, MobileNet V2/V3, EfficientNet)"
    )


def mlp(in_features: int = 64, hidden: tuple[int, ...] = (256, 256), num_classes: int = 10) -> nn.Sequential:
    """A multi-layer perceptron: ``Linear -> ReLU`` per hidden layer, then a ``Linear``.

    The default is the small network of lesson 01, for the 8x8 digits data
    (64 input features, 10 classes): 64 -> 256 -> 256 -> 10, 85,002 parameters.

    Input shape ``(batch, in_features)``; output ``(batch, num_classes)`` logits.

    Raises:
        ValueError: if a size is below 1.
    """
    sizes = (in_features, *hidden, num_classes)
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"layer sizes must be integers >= 1, got {sizes}")
    layers: list[nn.Module] = []
    for n_in, n_out in zip(sizes[:-2], sizes[1:-1]):
        layers += [nn.Linear(n_in, n_out), nn.ReLU()]
    layers.append(nn.Linear(sizes[-2], sizes[-1]))
    return nn.Sequential(*layers)


def digits_cnn(num_classes: int = 10) -> nn.Sequential:
    """A small CNN for the 8x8 digits (lesson 04), taking the 64 flattened pixels.

    ``(batch, 64)`` -> view as ``(batch, 1, 8, 8)`` -> Conv 32 -> BatchNorm -> ReLU
    -> Conv 64 -> BatchNorm -> ReLU -> MaxPool 2 -> Linear -> ``(batch, num_classes)``.
    """
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 4 * 4, num_classes),
    )


def _merge_inplace(units: list[nn.Module]) -> nn.Sequential:
    """Join each in-place module (``ReLU(inplace=True)``, ...) to the unit before it.

    A checkpoint segment keeps its input for recomputation; if the next
    segment began with an in-place ReLU, that ReLU would overwrite the kept
    input and backward would fail.  Keeping the pair in one unit avoids it.
    """
    merged: list[nn.Module] = []
    for unit in units:
        if merged and getattr(unit, "inplace", False):
            previous = merged.pop()
            merged.append(nn.Sequential(*(previous if isinstance(previous, nn.Sequential) else [previous]), unit))
        else:
            merged.append(unit)
    return nn.Sequential(*merged)


def output_logits(output) -> torch.Tensor:
    """The logits tensor from a model's output (a tensor, or a named tuple)."""
    if isinstance(output, torch.Tensor):
        return output
    return output[0]
