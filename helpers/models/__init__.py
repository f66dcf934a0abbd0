"""What a model is and what it eats, for every step: presets, torchvision classifiers, yours, Hugging Face configs.

One module per job; this one only re-exports them:

* :mod:`.presets`: the course's own models by name (:data:`PRESETS`) and torchvision's classifiers
  (:func:`build_model`), built with random weights (nothing is downloaded; memory does not depend on values);
* :mod:`.spec`: :class:`ModelSpec`, how to build a model and what it expects;
* :mod:`.resolve`: :func:`resolve_model`, what a learner passes to :func:`helpers.profile.profile_step` turned into a
  :class:`ModelSpec` (a name, a module, a builder, a Hugging Face config or a file);
* :mod:`.task`: :func:`resolve_task`, the step's :class:`Task` (its :class:`Batch` and its loss);
* :mod:`.copies`: :func:`build`, the first step of :data:`helpers.step.RECIPE`, and the copies of a learner's module
  (:func:`meta_copy`);
* the architectures: :mod:`.gpt`, :mod:`.llama`, and Hugging Face causal LMs (:mod:`.hf`, imported only when used).
"""

from .copies import build, copy_for_step, meta_copy
from .gpt import GPT, GPT2_PRESETS, GPTConfig
from .llama import LLAMA_PRESETS, Llama, LlamaConfig
from .presets import (LANGUAGE_PRESETS, PRESETS, build_model, classification_models, digits_cnn, digits_mlp,
                      dropout_mlp, mlp, model_names, sequential_form)
from .resolve import hf_spec, resolve_model, unknown_model
from .spec import ModelSpec
from .task import (CHUNKED_MODEL_TYPES, OUTPUT_CHUNKS, Batch, Task, check_chunked, chunked_output_loss, output_logits,
                   resolve_task)

__all__ = ["Batch", "CHUNKED_MODEL_TYPES", "GPT", "GPT2_PRESETS", "GPTConfig", "LANGUAGE_PRESETS", "LLAMA_PRESETS",
           "Llama", "LlamaConfig", "ModelSpec", "OUTPUT_CHUNKS", "PRESETS", "Task", "build", "build_model",
           "check_chunked", "chunked_output_loss", "classification_models", "copy_for_step", "digits_cnn",
           "digits_mlp", "dropout_mlp", "hf_spec", "meta_copy", "mlp", "model_names", "output_logits",
           "resolve_model", "resolve_task", "sequential_form", "unknown_model"]
