"""Helpers for the lessons of "Where does my GPU memory go?".

Each module is introduced in a lesson and named in its docstring:

* :mod:`helpers.memory`: measure bytes on a GPU or simulated (lesson 00);
* :mod:`helpers.models`: torchvision models by name (lesson 03);
* :mod:`helpers.trace`: per-module events of one step (lesson 03);
* :mod:`helpers.accounting`: memory by category (lesson 03);
* :mod:`helpers.step`: one training step, profiled (lesson 03);
* :mod:`helpers.plots`: figures of a profiled step (lesson 03);
* :mod:`helpers.data`: the digits data, offline (lesson 01);
* :mod:`helpers.training`: train a small classifier, epoch by epoch (lesson 01);
* :mod:`helpers.batch`: memory against batch size, the affine law (lesson 01);
* :mod:`helpers.widgets`: the batch-size widget (lesson 01);
* :mod:`helpers.saved`: what autograd saves for backward; mask ReLUs (lesson 02).
"""

from .accounting import CATEGORIES
from .batch import AffineFit, PeakCurve, fit_affine
from .memory import CUDA_OVERHEAD_BYTES, GiB, MiB, Meter, fmt_bytes, resolve_backend, round_up, tensor_bytes
from .models import build_model, classification_models, mlp, sequential_form
from .step import DoesNotFit, StepProfile, profile_step

__all__ = [
    "AffineFit",
    "CATEGORIES",
    "CUDA_OVERHEAD_BYTES",
    "DoesNotFit",
    "GiB",
    "Meter",
    "MiB",
    "PeakCurve",
    "StepProfile",
    "build_model",
    "classification_models",
    "mlp",
    "fit_affine",
    "fmt_bytes",
    "profile_step",
    "resolve_backend",
    "round_up",
    "sequential_form",
    "tensor_bytes",
]
