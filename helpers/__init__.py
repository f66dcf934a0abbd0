"""Helpers for the lessons of "Where does my GPU memory go?".

Each module is introduced in a lesson and named in its docstring:

* :mod:`helpers.memory`: measure bytes on a GPU or simulated; the allocator's
  size rules; real GPU cards (lessons 00 and 01);
* :mod:`helpers.backends`: what differs between a real GPU and the simulation (lesson 00);
* :mod:`helpers.config`: every option of a profiled step, checked in one place;
* :mod:`helpers.models`: torchvision models by name, small networks, GPT-2 presets (lesson 03);
* :mod:`helpers.trace`: per-module events of one step (lesson 03);
* :mod:`helpers.accounting`: memory by category (lesson 03);
* :mod:`helpers.step`: one training step, profiled (lesson 03);
* :mod:`helpers.record`: the profile of a step and its queries (lesson 03);
* :mod:`helpers.techniques`: checkpointing and optimizers (lessons 01 and 04);
* :mod:`helpers.plots`: figures of a profiled step (lesson 03);
* :mod:`helpers.data`: the digits data, offline (lesson 01);
* :mod:`helpers.training`: train a small classifier, epoch by epoch (lesson 01);
* :mod:`helpers.batch`: memory against batch size, the affine law (lesson 01);
* :mod:`helpers.widgets`: the batch-size widget (lesson 01);
* :mod:`helpers.saved`: what autograd saves for backward; mask ReLUs (lesson 02);
  what a forward pass saves on fake CPU or CUDA tensors (lessons 00 and 04);
* :mod:`helpers.allocator`: a model of the CUDA caching allocator: reserved
  memory, segments, fragmentation (lesson 06);
* :mod:`helpers.check`: the workshop pre-flight check, ``python -m helpers check``.
"""

import importlib

# Where each public name lives.  Modules are imported on first use (PEP 562),
# so that ``python -m helpers check`` can diagnose a broken torch or
# torchvision instead of failing on import.
_HOME = {
    "CATEGORIES": "accounting",
    "AffineFit": "batch", "PeakCurve": "batch", "fit_affine": "batch",
    "CUDA_CONTEXT_BYTES": "memory", "CUDA_OVERHEAD_BYTES": "memory", "GPU_CARDS": "memory", "GiB": "memory", "MiB": "memory", "Meter": "memory",
    "fits": "memory", "fmt_bytes": "memory", "round_up": "memory", "tensor_bytes": "memory",
    "resolve_backend": "backends", "StepConfig": "config",
    "build_model": "models", "classification_models": "models", "mlp": "models", "sequential_form": "models",
    "DoesNotFit": "step", "profile_step": "step", "time_step": "step", "StepProfile": "record",
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name in _HOME:
        value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'helpers' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_HOME))
