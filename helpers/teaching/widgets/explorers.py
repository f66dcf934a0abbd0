"""Lessons 01, 05b and 08b's widgets: the batch size, "will it fit?", and the sequence length.

Each shows one steady-state training step against a GPU, by category, with :func:`helpers.teaching.views.verdict`.
In each, ``capacity`` is a card of :data:`helpers.gpus.GPU_CARDS` (or ``"this GPU"`` on a GPU), ``device`` ``"auto"``,
``"cuda"`` or ``"simulated"``, ``batch_size`` and ``max_batch_size`` the slider's start and end; the attributes named
like the arguments are the controls (set their ``value`` from code as a learner does), and ``view``, ``result``,
``message`` are :class:`helpers.teaching.widgets.base.StepWidget`'s. An initial value the controls cannot take raises
``ValueError``.
"""

from __future__ import annotations

import dataclasses

import ipywidgets as widgets

from ...batch import Estimate, model_state_estimate
from ...config import DATA_OPTIONS, IMAGE_SIZE, OPTIMIZER_NAMES, TORCH_OPTIMIZERS, StepConfig, check_int
from ...gpus import GPU_CARDS
from ...models.presets import LANGUAGE_PRESETS, model_names
from ...models.resolve import resolve_model
from ...techniques.checkpointing import CHECKPOINT_POLICIES
from ...transformer import transformer_presets, transformer_step
from .base import StepWidget

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(StepConfig)}

#: The checkpointing choices: label -> segments.
SEGMENTS = {"off": 0, "2 segments": 2, "4 segments": 4, "8 segments": 8}


class MemoryExplorer(StepWidget):
    """Peak memory of one training step, by category, against a GPU's capacity (lesson 01b).

    Args:
        model: a model name (``"mlp"``, a torchvision classifier, a GPT-2 preset at its 1024-token context), or your
            own ``nn.Module`` or builder (listed under its name).
        checkpoint: initial checkpoint segments (0: off; 2, 4 or 8); ``amp``: the AMP toggle.
        optimizer: one of :data:`helpers.config.TORCH_OPTIMIZERS`.
        reserved: the "reserved" toggle: judge each step's replay through the allocator model
            (:func:`helpers.batch.reserved_estimate`).
        **options: other :class:`helpers.config.StepConfig` options (refused ones raise ``ValueError``); those of
            :data:`helpers.config.DATA_OPTIONS` belong to ``model`` alone.
    """

    _PLACEHOLDER = ("a batch-size slider, with menus for the model, AMP, checkpointing, the optimizer and the "
                    "GPU, and the peak memory of one training step, by category, against the GPU's memory.")

    def __init__(self, model="resnet18", batch_size: int = 128, max_batch_size: int = 1024,
                 amp: bool = False, checkpoint: int = 0, optimizer: str = "sgd-momentum",
                 capacity: str = "V100 16 GB", device: str = "auto", reserved: bool = False, **options):
        self._models = {name: name for name in model_names() if name != "llama3-8b"}
        if not isinstance(model, str):  # the learner's own model
            self._models = {resolve_model(model).name: model, **self._models}
            model = next(iter(self._models))
        if model not in self._models:
            raise ValueError(f"unknown model {model!r}; use 'mlp', a GPT-2 or Llama preset, a torchvision "
                             f"classification model, or pass your own nn.Module")
        # StepConfig checks the step's options (optimizer, amp, checkpoint, device, **options) ...
        step = StepConfig(model=self._models[model], amp=amp, checkpoint=checkpoint, optimizer=optimizer,
                          device=device, steady_state=True, **options)
        if checkpoint not in SEGMENTS.values():  # ... and the menu offers these segments
            raise ValueError(f"checkpoint must be 0, 2, 4 or 8, got {checkpoint!r}")
        self._start(device, capacity, batch_size, max_batch_size)
        self.base = step.replace(device=self.backend)
        self._data = {model: {k: v for k, v in options.items() if k in DATA_OPTIONS}}
        style = self._STYLE
        self.model = widgets.Dropdown(options=list(self._models), value=model, description="model", style=style)
        self.amp = widgets.Checkbox(amp, description="AMP (autocast)", indent=False)
        self.checkpoint = widgets.Dropdown(options=list(SEGMENTS.items()), value=checkpoint,
                                           description="checkpointing", style=style)
        self.optimizer = widgets.Dropdown(options=[(OPTIMIZER_NAMES[o], o) for o in TORCH_OPTIMIZERS],
                                          value=optimizer, description="optimizer", style=style)
        if not isinstance(reserved, bool):
            raise ValueError(f"reserved must be True or False, got {reserved!r}")
        self.reserved = widgets.Checkbox(reserved, description="reserved (simulated allocator)", indent=False)
        self._finish([widgets.HBox([self.model, self.optimizer]),
                      widgets.HBox([self.checkpoint, self.capacity, self.amp]), self.reserved],
                     [self.model, self.amp, self.checkpoint, self.optimizer, self.reserved])

    def config(self) -> StepConfig:
        """The configuration the controls show (batch size aside)."""
        data = {k: _DEFAULTS[k] for k in DATA_OPTIONS} | self._data.get(self.model.value, {})
        return self.base.replace(model=self._models[self.model.value], name=self.model.value,
                                 amp=self.amp.value, checkpoint=self.checkpoint.value,
                                 optimizer=self.optimizer.value, **data).curve_key()

    def _busy(self, key: StepConfig) -> str:
        return (f'{self.model.value} ({"AMP, " if key.amp else ""}checkpointing {key.checkpoint or "off"}, '
                f'{key.optimizer})')


#: The precisions of :class:`WillItFit`: label -> ``amp_dtype`` (None: float32, no autocast).
PRECISIONS = {"float32": None, "AMP float16": "float16", "AMP bfloat16": "bfloat16"}
#: The sizes :class:`WillItFit` offers: sequence lengths for token models, image sizes for the others.
SEQ_LENS = (128, 256, 512, 1024)
IMAGE_SIZES = (32, 64, 128, 224, 256, 384, 512)
#: The model menu's entry for a bare parameter count.
PARAMETER_COUNT = "a parameter count"


class WillItFit(StepWidget):
    """Will this training step fit on that GPU? Lesson 05b's widget.

    Args:
        model: a preset of :data:`helpers.models.LANGUAGE_PRESETS`, a torchvision classifier, or
            :data:`PARAMETER_COUNT` (model states from the count ``parameters``).
        optimizer: one of :data:`helpers.config.TORCH_OPTIMIZERS`; ``precision``: a key of :data:`PRECISIONS`.
        size: a sequence length of :data:`SEQ_LENS` or image size of :data:`IMAGE_SIZES`; None: the model's default.
    """

    UNIT = "GiB"  # lessons 05b and 08 write GiB
    _PLACEHOLDER = ("menus for the model (or a parameter count), optimizer, precision, batch, sequence or image "
                    "size and GPU, and whether a training step fits, with its memory by category.")

    def __init__(self, model: str = "gpt2", batch_size: int = 8, max_batch_size: int = 256,
                 optimizer: str = "adam", precision: str = "AMP float16", size: int | None = None,
                 parameters: int = 1_557_611_200, capacity: str = "A100 40 GB", device: str = "auto"):
        names = [*LANGUAGE_PRESETS, *(n for n in model_names() if n not in LANGUAGE_PRESETS and n != "mlp"),
                 PARAMETER_COUNT]
        if model not in names:
            raise ValueError(f"unknown model {model!r}; use a GPT-2 or Llama preset, a torchvision classification "
                             f"model, or {PARAMETER_COUNT!r}")
        StepConfig(optimizer=optimizer, device=device)  # checks them
        if precision not in PRECISIONS:
            raise ValueError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
        check_int("parameters", parameters, 1)
        self._start(device, capacity, batch_size, max_batch_size)
        style = self._STYLE
        self.model = widgets.Dropdown(options=names, value=model, description="model", style=style)
        self.optimizer = widgets.Dropdown(options=[(OPTIMIZER_NAMES[o], o) for o in TORCH_OPTIMIZERS],
                                          value=optimizer, description="optimizer", style=style)
        self.precision = widgets.Dropdown(options=list(PRECISIONS), value=precision, description="precision",
                                          style=style)
        self.size = widgets.Dropdown(options=self._sizes(model), description=self._size_name(model), style=style)
        if size is not None:
            if size not in self.size.options:
                raise ValueError(f"size must be one of {self.size.options} for {model}, got {size!r}")
            self.size.value = size
        elif self.size.options:
            self.size.value = 1024 if model in LANGUAGE_PRESETS else IMAGE_SIZE
        self.parameters = widgets.BoundedIntText(parameters, min=1, max=10**13, description="parameters", style=style)
        self.model.observe(self._on_model, names="value")
        self._show_size_or_count()
        self._finish([widgets.HBox([self.model, self.size, self.parameters]),
                      widgets.HBox([self.optimizer, self.precision, self.capacity])],
                     [self.optimizer, self.precision, self.size, self.parameters])

    @staticmethod
    def _sizes(model: str) -> tuple[int, ...]:
        return SEQ_LENS if model in LANGUAGE_PRESETS else () if model == PARAMETER_COUNT else IMAGE_SIZES

    @staticmethod
    def _size_name(model: str) -> str:
        return "sequence" if model in LANGUAGE_PRESETS else "image size"

    def _show_size_or_count(self) -> None:
        count = self.model.value == PARAMETER_COUNT
        self.size.layout.display = "none" if count else None
        self.parameters.layout.display = None if count else "none"

    def _on_model(self, change) -> None:
        """A new model: its own sizes (set quietly, then one update)."""
        self._quiet = True
        try:
            model = change["new"]
            sizes = self._sizes(model)
            if sizes != self.size.options:
                self.size.options = sizes
                if sizes:
                    self.size.value = 1024 if model in LANGUAGE_PRESETS else IMAGE_SIZE
            self.size.description = self._size_name(model)
            self._show_size_or_count()
        finally:
            self._quiet = False
        self.update()

    def config(self) -> StepConfig | None:
        """The configuration the controls show (batch size aside); None for a bare parameter count."""
        model = self.model.value
        if model == PARAMETER_COUNT:
            return None
        dtype = PRECISIONS[self.precision.value]
        size = {"seq_len": self.size.value} if model in LANGUAGE_PRESETS else {"image_size": self.size.value}
        return StepConfig(model=model, batch_size=1, optimizer=self.optimizer.value, amp=dtype is not None,
                          amp_dtype=dtype or "float16", steady_state=True, device=self.backend, **size)

    def _busy(self, key: StepConfig) -> str:
        return f"{key.model} ({self.precision.value}, {OPTIMIZER_NAMES[key.optimizer]})"

    def _without_trace(self) -> Estimate:
        return model_state_estimate(self.parameters.value, self.optimizer.value, self.batch_size.value)


class SequenceExplorer(StepWidget):
    """Lesson 08b's widget: a transformer's steady-state Adam step against a GPU, by sequence length
    (:func:`helpers.transformer.transformer_step`, simulated, traced at the batch size asked for)."""

    UNIT = "GiB"  # lessons 05b and 08 write GiB
    _PLACEHOLDER = ("menus for a transformer, the sequence length, batch, AMP, checkpointing policy, attention "
                    "kernel and GPU, and the peak of the whole training step against the GPU's memory.")
    SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
    _TRACE_ENDS = False  # each configuration is traced at the batch size asked for

    def __init__(self, model: str = "llama3-8b", seq: int = 4096, batch_size: int = 1, amp: bool = True,
                 policy: str = "none", attention: str = "flash", capacity: str = "H100 80 GB"):
        if seq not in self.SEQ_LENS:
            raise ValueError(f"seq must be one of {', '.join(map(str, self.SEQ_LENS))}, got {seq!r}")
        if capacity not in GPU_CARDS:
            raise ValueError(f"unknown capacity {capacity!r}; use one of {', '.join(GPU_CARDS)}")
        if attention not in ("math", "flash"):
            raise ValueError(f"attention must be 'math' or 'flash', got {attention!r}")
        transformer_step(model, seq, 1, amp=amp, attention=attention, policy=policy)  # checks the rest
        self._start("simulated", capacity, batch_size, 512)
        style = self._STYLE
        self.model = widgets.Dropdown(options=list(transformer_presets()), value=model, description="model",
                                      style=style)
        self.seq = widgets.Dropdown(options=list(self.SEQ_LENS), value=seq, description="sequence", style=style)
        self.amp = widgets.Checkbox(amp, description="AMP (float16)")
        self.policy = widgets.Dropdown(options=list(CHECKPOINT_POLICIES), value=policy, description="checkpointing",
                                       style=style)
        self.attention = widgets.Dropdown(options=["math", "flash"], value=attention, description="attention",
                                          style=style)
        # The batch size is typed (up to 512) in the box linked to the slider, which is not shown.
        self.batch_box.description, self.batch_box.style = "batch size", style
        self.batch_box.layout.width = "200px"  # the 110 px label and a box wide enough to show the number
        controls = [self.model, self.seq, self.amp, self.policy, self.attention]
        self._finish([widgets.HBox([self.model, self.seq, self.batch_box]),
                      widgets.HBox([self.amp, self.policy, self.attention, self.capacity])], controls, batch_row=False)

    def config(self) -> StepConfig:
        """The step the controls show (batch size aside): :func:`helpers.transformer.transformer_step`."""
        return transformer_step(self.model.value, self.seq.value, 1, amp=self.amp.value,
                                attention=self.attention.value, policy=self.policy.value).curve_key()

    def _busy(self, key: StepConfig) -> str:
        return (f"{self.model.value} at {self.seq.value:,} tokens "
                f"({'AMP, ' if self.amp.value else ''}{self.attention.value} attention, "
                f"checkpointing {self.policy.value})")
