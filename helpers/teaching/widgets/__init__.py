"""Widgets: change a step's batch size (and more), and watch its memory against a GPU; or explain a snapshot.

Each is an ``ipywidgets.VBox``: display it as the last expression of a cell, or read ``widget.summary()``.

* :class:`MemoryExplorer` (lessons 01, 06): batch size, model, AMP, checkpointing, optimizer, GPU, reserved memory;
* :class:`WillItFit` (lesson 05b): the model or a bare parameter count, optimizer, precision, sequence or image size;
* :class:`SequenceExplorer` (lesson 08b): a transformer by sequence length;
* :class:`FineTuneFit` (lesson 09b): fine-tuning a 7-8B model, and the largest batch or longest sequence that fits;
* :class:`ServingFit` (lesson 10b): vLLM's start-up account of a model on a GPU, and how many requests fit at once;
* :class:`SnapshotExplorer` (lesson 06b): a real GPU's memory snapshot explained, a shipped one or your own file.

:mod:`.base` holds what they share, :mod:`helpers.teaching.views` their view.
"""

from .explorers import (IMAGE_SIZES, PARAMETER_COUNT, PRECISIONS, SEGMENTS, SEQ_LENS, MemoryExplorer,
                        SequenceExplorer, WillItFit)
from .finetune import (CARD_48GB, FINETUNE_LOSSES, FINETUNE_METHODS, FINETUNE_MODELS, FINETUNE_OPTIMIZERS, LORA_RANKS,
                       QUESTIONS, SEQ_STEP, FineTuneFit)
from .serving import (BUDGETS, CONTEXTS, DEFAULT_BUDGET, SERVING_KV_DTYPES, SERVING_WEIGHTS, ServingFit,
                      context_options, serving_models)
from .snapshot import SHIPPED, SnapshotExplorer
