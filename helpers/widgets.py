"""The batch-size widget: change the batch size (and more), watch the memory.

Introduced in lesson 01 (mini-batching).  :class:`MemoryExplorer` is an
``ipywidgets.VBox``: display it as the last expression of a cell.  Its
controls choose the model, batch size, AMP, activation checkpointing,
optimizer and GPU capacity; its view shows the peak memory of one training
step as a bar stacked by category, against the capacity, with a verdict.

The widget is *returned* (the last expression of a cell) and its view is
updated through traits (``HTML.value``) in ``observe`` callbacks, never by
printing into an ``Output`` widget: that way a notebook that contains it still
passes strict nbval, which compares printed output but not widget views.

On a GPU every value is measured (an out-of-memory error is caught, shown as
"does not fit", and its memory released); elsewhere it is simulated, with
:class:`helpers.batch.PeakCurve` interpolating exactly between traced batch
sizes so that the slider answers at once.
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import torch

from .accounting import CATEGORIES, CATEGORY_COLORS as _COLORS
from .batch import Estimate, PeakCurve
from .memory import CUDA_OVERHEAD_BYTES, GPU_CARDS, MiB, resolve_backend
from .models import classification_models, mlp

#: GPUs to compare against: real cards and the memory PyTorch sees on them
#: (:data:`helpers.memory.GPU_CARDS`), in bytes.
CAPACITIES = dict(GPU_CARDS)


def digits_mlp() -> torch.nn.Module:
    """Lesson 01's small MLP for the 8x8 digits: 64 -> 256 -> 256 -> 10."""
    return mlp(64, (256, 256), 10)


#: Models that are not torchvision classifiers: name -> (builder, one sample's shape, classes).
CUSTOM_MODELS = {"mlp": (digits_mlp, (64,), 10)}


def _mib(nbytes: float) -> str:
    return f"{nbytes / MiB:,.1f} MiB"


class MemoryExplorer(widgets.VBox):
    """Peak memory of one training step, by category, against a GPU's capacity.

    Args:
        model: ``"mlp"`` (lesson 01's small MLP on 8x8 digits) or a
            torchvision classification model name.
        batch_size: initial batch size, from 1 to ``max_batch_size``.
        max_batch_size: the slider's upper end (at least 1024 is useful).
        amp: initial state of the AMP toggle.
        checkpoint: initial checkpoint segments (0: off; 2, 4 or 8).
        optimizer: ``"sgd"`` or ``"adam"``.
        capacity: a card of :data:`CAPACITIES` (``"V100 16 GB"``, ...), or
            ``"this GPU"`` (only on a GPU).
        device: ``"auto"``, ``"cuda"`` or ``"simulated"``.
        image_size: input height and width for the image models.

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

    def __init__(self, model: str = "resnet18", batch_size: int = 128, max_batch_size: int = 1024,
                 amp: bool = False, checkpoint: int = 0, optimizer: str = "sgd",
                 capacity: str = "V100 16 GB", device: str = "auto", image_size: int = 224):
        self.backend = resolve_backend(device)
        self.image_size = image_size
        capacities = dict(CAPACITIES)
        if self.backend == "cuda":
            capacities["this GPU"] = torch.cuda.get_device_properties(0).total_memory
        self.capacities = capacities
        models = list(CUSTOM_MODELS) + classification_models()
        if model not in models:
            raise ValueError(f"unknown model {model!r}; use 'mlp' or a torchvision classification model")
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= max_batch_size:
            raise ValueError(f"batch_size must be an integer from 1 to {max_batch_size}, got {batch_size!r}")
        if capacity not in capacities:
            raise ValueError(f"unknown capacity {capacity!r}; use one of {', '.join(capacities)}")
        segments = [("off", 0), ("2 segments", 2), ("4 segments", 4), ("8 segments", 8)]
        if checkpoint not in dict((v, k) for k, v in segments):
            raise ValueError(f"checkpoint must be 0, 2, 4 or 8, got {checkpoint!r}")
        if optimizer not in ("sgd", "adam"):
            raise ValueError(f"unknown optimizer {optimizer!r}; use 'sgd' or 'adam'")

        style = {"description_width": "110px"}
        # min=1: a batch size of 0 or below cannot be entered (the box clamps it).
        self.batch_size = widgets.IntSlider(batch_size, min=1, max=max_batch_size, description="batch size",
                                            continuous_update=True, style=style,
                                            layout=widgets.Layout(width="480px"))
        self.batch_box = widgets.BoundedIntText(batch_size, min=1, max=max_batch_size,
                                                layout=widgets.Layout(width="90px"))
        widgets.link((self.batch_size, "value"), (self.batch_box, "value"))
        self.model = widgets.Dropdown(options=models, value=model, description="model", style=style)
        self.amp = widgets.Checkbox(amp, description="AMP (autocast)", indent=False)
        self.checkpoint = widgets.Dropdown(options=segments, value=checkpoint, description="checkpointing",
                                           style=style)
        self.optimizer = widgets.Dropdown(options=[("SGD with momentum", "sgd"), ("Adam", "adam")],
                                          value=optimizer, description="optimizer", style=style)
        self.capacity = widgets.Dropdown(options=list(capacities), value=capacity, description="GPU",
                                         style=style)
        self.view = widgets.HTML()
        self.result: Estimate | None = None
        self.message = ""
        self._curves: dict[tuple, PeakCurve] = {}

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

    def curve(self) -> PeakCurve:
        """The :class:`helpers.batch.PeakCurve` of the configuration the controls show."""
        key = (self.model.value, self.amp.value, self.checkpoint.value, self.optimizer.value)
        if key not in self._curves:
            name = self.model.value
            if name in CUSTOM_MODELS:
                builder, shape, classes = CUSTOM_MODELS[name]
                options = {"input_shape": shape, "num_classes": classes}
            else:
                builder, options = name, {"image_size": self.image_size}
            curve = PeakCurve(builder, self.backend, amp=self.amp.value, checkpoint=self.checkpoint.value,
                              optimizer=self.optimizer.value, **options)
            if self.backend == "simulated":  # trace both ends, so most values interpolate
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
        self.view.value = self._render(self.result)

    def _render(self, r: Estimate) -> str:
        capacity = self.capacities[self.capacity.value]
        native = self.capacity.value == "this GPU"
        overhead = 0 if native else CUDA_OVERHEAD_BYTES
        if r.peak_bytes is None:
            fits = False
            self.message = f"does not fit: batch {r.batch_size} ran out of memory on this GPU ({r.error})"
        else:
            need = r.peak_bytes + overhead
            fits = need <= capacity
            verb = "fits" if fits else "does not fit"
            if native:
                self.message = f"{verb}: peak {_mib(r.peak_bytes)} measured on this GPU ({_mib(capacity)})"
            else:
                self.message = (f"{verb} in {self.capacity.value}: peak {_mib(r.peak_bytes)} + "
                                f"{_mib(overhead)} assumed overhead = {_mib(need)} "
                                f"{'<=' if fits else '>'} {_mib(capacity)}")
        head = (f'<div class="gm-verdict" data-fits="{str(fits).lower()}" '
                f'style="font-weight:bold;color:{"#1a7f37" if fits else "#b00"}">{html.escape(self.message)}</div>')
        if r.peak_bytes is None:
            return f'<div class="gm-explorer">{head}</div>'
        parts = [(name, r.categories.get(name, 0)) for name in CATEGORIES]
        if overhead:
            parts.append(("overhead (assumed)", overhead))
        total = r.peak_bytes + overhead
        scale = max(capacity, total) * 1.05
        line = (f'<div title="{html.escape(self.capacity.value)}: {_mib(capacity)}" style="position:absolute;'
                f'top:-4px;bottom:-4px;left:{100 * capacity / scale:.3f}%;border-left:3px solid #b00"></div>')
        bars = _bar(parts, scale) + line
        caption = f"against the GPU's {_mib(capacity)} (red line)"
        if r.peak_bytes < 0.2 * capacity:  # too thin to read: show the step's peak on its own scale too
            bars2 = _bar(parts[:len(CATEGORIES)], r.peak_bytes * 1.05)
            zoom = (f'<div style="color:#555;font-size:90%">the peak alone, on its own scale:</div>'
                    f'<div class="gm-zoom" style="{_BAR_STYLE}">{bars2}</div>')
        else:
            zoom = ""
        rows = []
        for name, nbytes in parts:
            swatch = (f'<span style="display:inline-block;width:10px;height:10px;margin-right:4px;'
                      f'background:{_paint(name)}"></span>')
            rows.append(f'<tr><td style="padding-right:16px">{swatch}{name.replace("_", " ")}</td>'
                        f'<td class="gm-bytes" data-category="{name}" data-bytes="{nbytes}" '
                        f'style="text-align:right">{_mib(nbytes)}</td></tr>')
        source = "traced" if r.traced else "interpolated between traced batch sizes"
        rows.append(f'<tr><td style="padding-right:16px"><b>peak allocated</b></td><td class="gm-peak" '
                    f'data-bytes="{r.peak_bytes}" style="text-align:right"><b>{_mib(r.peak_bytes)}</b></td></tr>')
        table = f'<table style="border-collapse:collapse">{"".join(rows)}</table>'
        bar = (f'<div style="color:#555;font-size:90%">{caption}:</div>'
               f'<div class="gm-bar" style="{_BAR_STYLE}">{bars}</div>{zoom}')
        note = (f'<div style="color:#555;font-size:90%">batch {r.batch_size}; peak at the '
                f'{html.escape(r.where)}; {r.backend}, {source}.</div>')
        return f'<div class="gm-explorer">{head}{bar}{table}{note}</div>'


_BAR_STYLE = "position:relative;height:26px;width:100%;max-width:640px;background:#f4f4f4;margin:6px 0"


#: The assumed overhead is not a measured category: hatched, not filled.
_HATCH = "repeating-linear-gradient(45deg,#bbbbbb 0 3px,#f4f4f4 3px 7px)"


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


def batch_size_widget(**options) -> MemoryExplorer:
    """Build the batch-size widget (see :class:`MemoryExplorer` for the options)."""
    return MemoryExplorer(**options)
