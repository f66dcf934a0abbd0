"""The batch-size widget: change the batch size (and more), watch the memory.

Introduced in lesson 01 (mini-batching).  :class:`MemoryExplorer` is an
``ipywidgets.VBox``: display it as the last expression of a cell.  Its
controls choose the model, batch size, AMP, activation checkpointing,
optimizer and GPU; its view shows the peak memory of one training step as a
bar stacked by category, against the GPU's capacity, with a verdict.

The widget is *returned* (the last expression of a cell) and its view is
updated through traits (``HTML.value``) in ``observe`` callbacks, never by
printing into an ``Output`` widget: that way a notebook that contains it still
passes strict nbval, which compares printed output but not widget views.  The
view itself is made by a pure function, :func:`render`.

On a GPU every value is measured (an out-of-memory error is caught, shown as
"does not fit", and its memory released); elsewhere it is simulated, with
:class:`helpers.batch.PeakCurve` interpolating exactly between traced batch
sizes so that the slider answers at once.  A change that needs new traces
(model, AMP, checkpointing, optimizer) first shows that it is working, so that
old figures never look current.
"""

from __future__ import annotations

import dataclasses
import html

import ipywidgets as widgets

from .accounting import CATEGORIES, CATEGORY_COLORS as _COLORS
from .backends import get_backend
from .batch import Estimate, PeakCurve
from .config import DATA_OPTIONS, OPTIMIZERS, StepConfig, check_int
from .memory import CUDA_OVERHEAD_BYTES, GPU_CARDS, MiB, fits
from .models import model_names, resolve_model

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(StepConfig)}

#: The checkpointing choices: label -> segments.
SEGMENTS = {"off": 0, "2 segments": 2, "4 segments": 4, "8 segments": 8}
#: The assumed overhead is not a measured category: hatched, not filled.
_HATCH = "repeating-linear-gradient(45deg,#bbbbbb 0 3px,#f4f4f4 3px 7px)"
_BAR_STYLE = "position:relative;height:26px;width:100%;max-width:640px;background:#f4f4f4;margin:6px 0"
_NOTE_STYLE = "color:#555;font-size:90%"


def _mib(nbytes: float) -> str:
    return f"{nbytes / MiB:,.1f} MiB"


def _paint(name: str) -> str:
    """CSS background of a category (or of the assumed overhead)."""
    return _COLORS.get(name, _HATCH)


def _bar(parts: list[tuple[str, int]], scale: float) -> str:
    """Stacked segments, one per (category, bytes), as percentages of ``scale`` bytes."""
    left, out = 0.0, []
    for name, nbytes in parts:
        width = 100 * nbytes / scale
        out.append(f'<div title="{name}: {_mib(nbytes)}" style="position:absolute;top:0;bottom:0;'
                   f'left:{left:.3f}%;width:{width:.3f}%;background:{_paint(name)}"></div>')
        left += width
    return "".join(out)


def verdict(r: Estimate, gpu: str, capacity: int, measured_here: bool) -> tuple[bool, str]:
    """Whether the step fits, and the sentence that says so.

    Args:
        r: the estimate at one batch size.
        gpu: the GPU's name (``"V100 16 GB"``, or ``"this GPU"``).
        capacity: its memory in bytes.
        measured_here: the capacity is this machine's own GPU, whose overhead
            is real (no assumed overhead is added).
    """
    if r.peak_bytes is None:
        return False, f"does not fit: batch {r.batch_size} ran out of memory on this GPU ({r.error})"
    overhead = 0 if measured_here else CUDA_OVERHEAD_BYTES
    ok = fits(r.peak_bytes, capacity, overhead)
    verb = "fits" if ok else "does not fit"
    if measured_here:
        return ok, f"{verb}: peak {_mib(r.peak_bytes)} measured on this GPU ({_mib(capacity)})"
    need = r.peak_bytes + overhead
    return ok, (f"{verb} in {gpu}: peak {_mib(r.peak_bytes)} + {_mib(overhead)} assumed overhead = "
                f"{_mib(need)} {'<=' if ok else '>'} {_mib(capacity)}")


def render(r: Estimate, gpu: str, capacity: int, measured_here: bool = False) -> tuple[str, str]:
    """The widget's view of one estimate: ``(message, html)``.

    A pure function of its arguments: the verdict (:func:`verdict`), a bar of
    the peak by category against the GPU's capacity (and, when the peak is
    under a fifth of it, a second bar on the peak's own scale), the bytes per
    category, and where the peak was reached.
    """
    ok, message = verdict(r, gpu, capacity, measured_here)
    head = (f'<div class="gm-verdict" data-fits="{str(ok).lower()}" '
            f'style="font-weight:bold;color:{"#1a7f37" if ok else "#b00"}">{html.escape(message)}</div>')
    if r.peak_bytes is None:
        return message, f'<div class="gm-explorer">{head}</div>'
    overhead = 0 if measured_here else CUDA_OVERHEAD_BYTES
    parts = [(name, r.categories.get(name, 0)) for name in CATEGORIES]
    if overhead:
        parts.append(("overhead (assumed)", overhead))
    scale = max(capacity, r.peak_bytes + overhead) * 1.05
    line = (f'<div title="{html.escape(gpu)}: {_mib(capacity)}" style="position:absolute;'
            f'top:-4px;bottom:-4px;left:{100 * capacity / scale:.3f}%;border-left:3px solid #b00"></div>')
    bar = (f'<div style="{_NOTE_STYLE}">against the GPU\'s {_mib(capacity)} (red line):</div>'
           f'<div class="gm-bar" style="{_BAR_STYLE}">{_bar(parts, scale)}{line}</div>')
    if r.peak_bytes < 0.2 * capacity:  # too thin to read: show the peak on its own scale too
        bar += (f'<div style="{_NOTE_STYLE}">the peak alone, on its own scale:</div>'
                f'<div class="gm-zoom" style="{_BAR_STYLE}">{_bar(parts[:len(CATEGORIES)], r.peak_bytes * 1.05)}</div>')
    rows = []
    for name, nbytes in parts:
        swatch = (f'<span style="display:inline-block;width:10px;height:10px;margin-right:4px;'
                  f'background:{_paint(name)}"></span>')
        rows.append(f'<tr><td style="padding-right:16px">{swatch}{name.replace("_", " ")}</td>'
                    f'<td class="gm-bytes" data-category="{name}" data-bytes="{nbytes}" '
                    f'style="text-align:right">{_mib(nbytes)}</td></tr>')
    rows.append(f'<tr><td style="padding-right:16px"><b>peak allocated</b></td><td class="gm-peak" '
                f'data-bytes="{r.peak_bytes}" style="text-align:right"><b>{_mib(r.peak_bytes)}</b></td></tr>')
    table = f'<table style="border-collapse:collapse">{"".join(rows)}</table>'
    source = "traced" if r.traced else "interpolated between traced batch sizes"
    note = (f'<div style="{_NOTE_STYLE}">batch {r.batch_size}; peak at the '
            f'{html.escape(r.where)}; {r.backend}, {source}.</div>')
    return message, f'<div class="gm-explorer">{head}{bar}{table}{note}</div>'


class MemoryExplorer(widgets.VBox):
    """Peak memory of one training step, by category, against a GPU's capacity.

    Args:
        model: a model name (``"mlp"``, lesson 01's small MLP; a torchvision
            classifier; ``"gpt2"`` and the other GPT-2 presets, at their full
            context), or your own ``nn.Module`` or builder function (listed in
            the model menu under its name).
        batch_size: initial batch size, from 1 to ``max_batch_size``.
        max_batch_size: the slider's upper end (at least 1024 is useful).
        amp: initial state of the AMP toggle.
        checkpoint: initial checkpoint segments (0: off; 2, 4 or 8).
        optimizer: ``"sgd"`` or ``"adam"``.
        capacity: a card of :data:`helpers.memory.GPU_CARDS` (``"V100 16 GB"``,
            ...), or ``"this GPU"`` (only on a GPU).
        device: ``"auto"``, ``"cuda"`` or ``"simulated"``.
        **options: other options of :class:`helpers.config.StepConfig`.
            Those that describe the data (:data:`helpers.config.DATA_OPTIONS`:
            ``image_size``, ``input_shape``, ``seq_len``, ``num_classes``, ...)
            belong to ``model``: the menu's other models keep their own.  The
            rest (``amp_dtype``, ``attention``, ...) apply to every model.

    Attributes:
        batch_size, model, amp, checkpoint, optimizer, capacity: the controls
            (change their ``value`` from code, as a learner does with the mouse).
        view: the ``ipywidgets.HTML`` that shows the result.
        result: the :class:`helpers.batch.Estimate` on display (None while a
            configuration is refused; :attr:`message` says why).
        message: the text of the verdict line.

    Raises:
        ValueError: for an initial value the controls cannot take.
    """

    def __init__(self, model="resnet18", batch_size: int = 128, max_batch_size: int = 1024,
                 amp: bool = False, checkpoint: int = 0, optimizer: str = "sgd",
                 capacity: str = "V100 16 GB", device: str = "auto", **options):
        self.runtime = get_backend(device)
        self.backend = self.runtime.name
        capacities = dict(GPU_CARDS)
        if self.runtime.total_memory() is not None:
            capacities["this GPU"] = self.runtime.total_memory()
        self.capacities = capacities
        self._models = {name: name for name in model_names()}
        if not isinstance(model, str):  # the learner's own model
            self._models = {resolve_model(model).name: model, **self._models}
            model = next(iter(self._models))
        if model not in self._models:
            raise ValueError(f"unknown model {model!r}; use 'mlp', a GPT-2 preset, a torchvision "
                             f"classification model, or pass your own nn.Module")
        check_int("max_batch_size", max_batch_size, 1)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= max_batch_size:
            raise ValueError(f"batch_size must be an integer from 1 to {max_batch_size}, got {batch_size!r}")
        if capacity not in capacities:
            raise ValueError(f"unknown capacity {capacity!r}; use one of {', '.join(capacities)}")
        if checkpoint not in SEGMENTS.values():
            raise ValueError(f"checkpoint must be 0, 2, 4 or 8, got {checkpoint!r}")
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
        self.base = StepConfig(device=self.backend, steady_state=True, **options)  # checks the options
        self._data = {model: {k: v for k, v in options.items() if k in DATA_OPTIONS}}

        style = {"description_width": "110px"}
        # min=1: a batch size of 0 or below cannot be entered (the box clamps it).
        self.batch_size = widgets.IntSlider(batch_size, min=1, max=max_batch_size, description="batch size",
                                            continuous_update=True, style=style,
                                            layout=widgets.Layout(width="480px"))
        self.batch_box = widgets.BoundedIntText(batch_size, min=1, max=max_batch_size,
                                                layout=widgets.Layout(width="90px"))
        widgets.link((self.batch_size, "value"), (self.batch_box, "value"))
        self.model = widgets.Dropdown(options=list(self._models), value=model, description="model", style=style)
        self.amp = widgets.Checkbox(amp, description="AMP (autocast)", indent=False)
        self.checkpoint = widgets.Dropdown(options=list(SEGMENTS.items()), value=checkpoint,
                                           description="checkpointing", style=style)
        self.optimizer = widgets.Dropdown(options=[("SGD with momentum", "sgd"), ("Adam", "adam")],
                                          value=optimizer, description="optimizer", style=style)
        self.capacity = widgets.Dropdown(options=list(capacities), value=capacity, description="GPU",
                                         style=style)
        self.view = widgets.HTML()
        self.result: Estimate | None = None
        self.message = ""
        self._curves: dict[StepConfig, PeakCurve] = {}

        controls = [
            widgets.HBox([self.batch_size, self.batch_box]),
            widgets.HBox([self.model, self.optimizer]),
            widgets.HBox([self.checkpoint, self.capacity, self.amp]),
        ]
        super().__init__(children=[*controls, self.view])
        for control in (self.batch_size, self.model, self.amp, self.checkpoint, self.optimizer, self.capacity):
            control.observe(self._on_change, names="value")
        self.update()

    def _on_change(self, change) -> None:
        self.update()

    def config(self) -> StepConfig:
        """The configuration the controls show (batch size aside)."""
        data = {k: _DEFAULTS[k] for k in DATA_OPTIONS} | self._data.get(self.model.value, {})
        return self.base.replace(model=self._models[self.model.value], name=self.model.value,
                                 amp=self.amp.value, checkpoint=self.checkpoint.value,
                                 optimizer=self.optimizer.value, **data).curve_key()

    def curve(self) -> PeakCurve:
        """The :class:`helpers.batch.PeakCurve` of the configuration the controls show."""
        key = self.config()
        if key not in self._curves:
            # New traces take seconds: say so at once, so that old figures never look current.
            self.view.value = (f'<div class="gm-busy" style="{_NOTE_STYLE}">tracing {html.escape(self.model.value)} '
                               f'({"AMP, " if key.amp else ""}checkpointing {key.checkpoint or "off"}, '
                               f'{key.optimizer}) ...</div>')
            curve = PeakCurve(key)
            if not self.runtime.measured:  # trace both ends, so most values interpolate
                for end in (1, self.batch_size.max):
                    try:
                        curve.trace(end)
                    except ValueError:  # e.g. BatchNorm with one value per channel at batch 1;
                        pass            # estimate() reports it for the batch sizes it concerns
            self._curves[key] = curve
        return self._curves[key]

    def update(self) -> None:
        """Recompute for the controls' values and redraw the view."""
        try:
            self.result = self.curve().estimate(self.batch_size.value)
        except ValueError as e:
            self.result = None
            self.message = f"cannot run this configuration: {e}"
            self.view.value = f'<div class="gm-refused" style="color:#a00">{html.escape(self.message)}</div>'
            return
        gpu = self.capacity.value
        self.message, self.view.value = render(self.result, gpu, self.capacities[gpu], gpu == "this GPU")
