"""Helpers for the lessons of "Where does my GPU memory go?".

**Start reading at** :mod:`helpers.engine.counting`: the storage-counting mode that makes every simulated number (200
lines, half of them explanation), then :mod:`helpers.engine.meter` (the one API over both backends), :mod:`helpers.step`
(the recipe and the one step runner), :mod:`helpers.profile` (how a question gets its answer) and :mod:`helpers.record`
(how each storage gets its category).  The layers, lowest first; nothing imports from a layer above its own
(``.importlinter`` states it, CI checks it):

* :mod:`helpers.units`, :mod:`helpers.errors`, :mod:`helpers.palette`, :mod:`helpers.versions`, :mod:`helpers.gpus`,
  :mod:`helpers.config`: bytes and formatting; one-line errors; the colours; the pinned versions; GPU cards and the one
  "does it fit?" rule; every option of a step;
* :mod:`helpers.allocator`: the caching allocator's size rules and a model of it that replays a step (lesson 06);
* :mod:`helpers.engine`: counting, CUDA's rules, the two backends, the meter (the engine's one face), the per-module
  trace (lesson 00);
* :mod:`helpers.models`: presets, Hugging Face configs, and what a model eats (its inputs and loss);
* :mod:`helpers.techniques` (precision, checkpointing, LoRA, quantization, optimizers), each with its step of the
  recipe; :mod:`helpers.record` (a step's profile and its categories);
* :mod:`helpers.shallow` (a shallow step read block by block) and :mod:`helpers.written` (the profile of a written
  log); :mod:`helpers.depth`: a step of many alike blocks written exactly from two shallow traces;
  :mod:`helpers.step`: the recipe and the step runner (:class:`StepRunner`, the training step written once);
* :mod:`helpers.profile`: the profile layer: :func:`profile_step` (lesson 03), :func:`time_step`, the kept answers,
  and the one decision of how a profile is obtained (traced in full, or written from shallow traces);
* studies built on the runner: :mod:`helpers.batch` (memory against batch size, lesson 01), :mod:`helpers.polynomial`
  (a step's peak as a polynomial in batch and sequence, from one symbolic trace, lessons 01 and 08), :mod:`helpers.saved`
  (what autograd saves, lesson 02), :mod:`helpers.masks` (ReLUs that save a mask, lesson 02), :mod:`helpers.loops`
  (inference and leaking loops, lesson 05b), :mod:`helpers.fsdp` (FSDP2 on a fake process group, lesson 07),
  :mod:`helpers.sharding` (ZeRO's and DeepSpeed's formulas, lesson 07), :mod:`helpers.transformer` (a transformer's
  activations, lessons 08 and 08b),
  :mod:`helpers.serving` (vLLM's start-up account: weights, profile run, KV cache, lesson 10),
  :mod:`helpers.generation` (greedy generation: prefill, decode steps and the KV cache, lesson 10);
* :mod:`helpers.teaching`: widgets, plots, the recorded real-GPU figures, data and a small training loop;
* :mod:`helpers.check` and ``python -m helpers``: the pre-flight check and the command line.

The names below can be imported from :mod:`helpers` itself.
"""

import importlib
import logging


def _not_torchaos_enum_notice(record: logging.LogRecord) -> bool:
    return "is an Enum subclass and is now natively supported" not in record.getMessage()


# torch logs a deprecation notice (with a time stamp and a process id) when torchao registers its enums
# with torch.utils._pytree, at its import (by transformers, as soon as torchao is installed; by a QLoRA step;
# by 8-bit AdamW).  The notice is meant for torchao's authors: keep it out of the learner's output (and the
# stored notebooks), whichever module imports torchao first.
logging.getLogger("torch.utils._pytree").addFilter(_not_torchaos_enum_notice)

# Where each public name lives.  Modules are imported on first use (PEP 562), so that ``python -m helpers check`` can
# diagnose a broken torch or torchvision instead of failing on import.
_HOME = {
    "MiB": "units", "GiB": "units", "fmt_bytes": "units",
    "CUDA_CONTEXT_BYTES": "gpus", "CUDA_OVERHEAD_BYTES": "gpus", "GPU_CARDS": "gpus", "fits": "gpus",
    "StepConfig": "config",
    "round_up": "allocator.rules",
    "tensor_bytes": "engine.counting", "Meter": "engine.meter", "resolve_backend": "engine.backends",
    "CATEGORY_COLORS": "palette", "OKABE_ITO": "palette",
    "CATEGORIES": "record", "StepProfile": "record",
    "build_model": "models", "classification_models": "models", "mlp": "models", "sequential_form": "models",
    "StepRunner": "step",
    "DoesNotFit": "profile", "forget_kept": "profile", "profile_step": "profile", "time_step": "profile",
    "AffineFit": "batch", "PeakCurve": "batch", "fit_affine": "batch",
    "BytesPolynomial": "polynomial", "peak_polynomial": "polynomial",
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
