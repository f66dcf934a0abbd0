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

Every widget judges "does it fit?" as the command line does, by
:meth:`helpers.batch.Estimate.verdict` (:func:`helpers.gpus.judge`): the peak
of the whole steady-state step (through ``optimizer.step()``) plus the assumed
1 GiB overhead (CUDA context and allocator cache), or, with the "reserved"
view, the step replayed through the allocator model on the card plus the
assumed 512 MiB CUDA context; the verdict says which.  On a card of the list
it adds the card's cuBLAS workspaces (:func:`helpers.gpus.unseen_lines`), shown
as a line of the breakdown, and for a step with convolutions says that the
cuDNN workspaces are not modelled.

On a GPU every value is measured (an out-of-memory error is caught, shown as
"does not fit", and its memory released); elsewhere it is simulated, with
:class:`helpers.batch.PeakCurve` interpolating exactly between traced batch
sizes so that the slider answers at once.  A change that needs a new trace
(a new model, AMP, checkpointing or optimizer; a batch size that cannot be
interpolated; each batch size in the "reserved" view, which replays the exact
trace) first shows that it is working (:func:`working`: the previous figures
dimmed under "updating..."), so that old figures never look current.

The view carries its figures as data for programs (the browser test reads
them): ``.gm-explorer`` has ``data-batch``, ``data-gpu`` and ``data-capacity``;
``.gm-verdict`` ``data-fits`` and ``data-tight`` (it fits with too little to spare,
:attr:`helpers.gpus.Verdict.tight`: amber, not green); ``.gm-bytes`` ``data-category`` and
``data-bytes``; ``.gm-peak`` and ``.gm-reserved`` ``data-bytes``.  While
``.gm-busy`` is shown, the figures inside it are the previous ones.
"""

from __future__ import annotations

import dataclasses
import html

import ipywidgets as widgets

from ..batch import Estimate, PeakCurve, fit_affine, model_state_estimate, reserved_estimate
from ..config import DATA_OPTIONS, IMAGE_SIZE, OPTIMIZER_NAMES, TORCH_OPTIMIZERS, StepConfig, check_int
from ..engine.backends import get_backend
from ..gpus import CACHE_ALLOWANCE_BYTES, CUBLAS_LINE, CUDA_CONTEXT_BYTES, CUDA_OVERHEAD_BYTES, GPU_CARDS
from ..models import LANGUAGE_PRESETS, hf, model_names, resolve_model
from ..record import CATEGORIES, CATEGORY_COLORS as _COLORS, OKABE_ITO
from ..techniques.checkpointing import CHECKPOINT_POLICIES
from ..transformer import transformer_presets, transformer_step
from ..units import fmt_bytes

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(StepConfig)}

#: The checkpointing choices: label -> segments.
SEGMENTS = {"off": 0, "2 segments": 2, "4 segments": 4, "8 segments": 8}
#: The assumed overhead is not a measured category: hatched, not filled.
_HATCH = "repeating-linear-gradient(45deg,#bbbbbb 0 3px,#f4f4f4 3px 7px)"
_BAR_STYLE = "position:relative;height:26px;width:100%;max-width:640px;background:#f4f4f4;margin:6px 0"
_NOTE_STYLE = "color:#555;font-size:90%"


def _paint(name: str) -> str:
    """CSS background of a category, of cached free memory, of the cuBLAS workspaces, or of an assumed overhead."""
    if name == CUBLAS_LINE:
        return OKABE_ITO["sky blue"]
    return _COLORS.get(name, "#dcdcdc" if name == "reserved, free" else _HATCH)


def _size(nbytes: float, unit: str) -> str:
    """Bytes in the widget's unit, thousands grouped: ``'16,160.0 MiB'`` or ``'15.8 GiB'``."""
    return fmt_bytes(nbytes, unit, grouped=True)


def _bar(parts: list[tuple[str, int]], scale: float, unit: str = "MiB") -> str:
    """Stacked segments, one per (category, bytes), as percentages of ``scale`` bytes."""
    left, out = 0.0, []
    for name, nbytes in parts:
        width = 100 * nbytes / scale
        out.append(f'<div title="{name}: {_size(nbytes, unit)}" style="position:absolute;top:0;bottom:0;'
                   f'left:{left:.3f}%;width:{width:.3f}%;background:{_paint(name)}"></div>')
        left += width
    return "".join(out)


def verdict(r: Estimate, gpu: str, capacity: int, measured_here: bool, unit: str = "MiB") -> tuple[bool, str]:
    """Whether the step fits, and the sentence that says so (and what it judged).

    On a card of the list: :meth:`helpers.batch.Estimate.verdict`, the rule of
    :func:`helpers.gpus.judge` that the command line applies too, in its words
    (:meth:`helpers.gpus.Verdict.sentence`).  On this machine's own GPU
    (``measured_here``): the step ran, with the real overhead, or ran out of
    memory.  For a bare parameter count (backend ``"formula"``): the model
    states alone are judged, and a verdict of "fits" says so, since the
    activations are not counted.

    Args:
        r: the estimate at one batch size.
        gpu: the GPU's name (``"V100 16 GB"``, or ``"this GPU"``).
        capacity: its memory in bytes.
        measured_here: the capacity is this machine's own GPU, whose overhead
            is real (no assumed overhead is added).
        unit: ``"MiB"`` or ``"GiB"``: the unit of the lesson the widget is in.
    """
    if unit not in ("MiB", "GiB"):
        raise ValueError(f"unit must be 'MiB' or 'GiB', got {unit!r}")
    scale = 2**20 if unit == "MiB" else 2**30
    if r.peak_bytes is None:
        return False, f"does not fit: batch {r.batch_size} ran out of memory on this GPU ({r.error})"
    if measured_here:
        return True, (f"fits on this GPU: the whole step ran, peak allocated {_size(r.peak_bytes, unit)} measured "
                      f"({_size(capacity, unit)})")
    v = r.verdict(capacity, gpu if gpu in GPU_CARDS else None)
    if r.backend == "formula":
        sums = (f"{r.peak_bytes / scale:,.1f} + {v.overhead / scale:,.1f} + "
                f"{v.unseen / scale:,.{1 if v.unseen >= scale / 10 else 2}f} = "
                f"{_size(v.need, unit)} {'<=' if v.fits else '>'} {_size(capacity, unit)}")
        if v.fits:
            tight = f" ({v.tight_note(unit)})" if v.tight else ""
            return True, (f"model states fit in {gpu}, activations not counted: model states at optimizer.step() + "
                          f"{_size(v.overhead, unit)} assumed overhead + cuBLAS workspaces = {sums}{tight}")
        return False, (f"does not fit in {gpu}: model states alone at optimizer.step() + {_size(v.overhead, unit)} "
                       f"assumed overhead + cuBLAS workspaces = {sums}")
    return v.fits, v.sentence(gpu, r.allocator_error or "", unit=unit)


def render(r: Estimate, gpu: str, capacity: int, measured_here: bool = False, unit: str = "MiB") -> tuple[str, str]:
    """The widget's view of one estimate: ``(message, html)``.

    A pure function of its arguments: the verdict (:func:`verdict`), a bar of
    the peak by category against the GPU's capacity (and, when the peak is
    under a fifth of it, a second bar on the peak's own scale), the bytes per
    category, what the card adds that the tensors do not show (the lines of
    :func:`helpers.gpus.unseen_lines`: the cuBLAS workspaces; the cuDNN
    workspaces, "not modelled"), and where the peak was reached; sizes in
    ``unit`` (``"MiB"`` or ``"GiB"``), exact bytes in the view's
    ``data-bytes`` attributes (``.gm-unseen`` rows have ``data-line``, and
    ``data-bytes`` unless not modelled).
    """
    ok, message = verdict(r, gpu, capacity, measured_here, unit)
    tight = (not measured_here and r.peak_bytes is not None  # too close to call: amber (helpers.gpus.Verdict.tight)
             and r.verdict(capacity, gpu if gpu in GPU_CARDS else None).tight)
    head = (f'<div class="gm-verdict" data-fits="{str(ok).lower()}" data-tight="{str(tight).lower()}" '
            f'style="font-weight:bold;color:{"#9a6700" if tight else "#1a7f37" if ok else "#b00"}">'
            f'{html.escape(message)}</div>')
    top = (f'<div class="gm-explorer" data-batch="{r.batch_size}" data-gpu="{html.escape(gpu)}" '
           f'data-capacity="{capacity}">')
    if r.peak_bytes is None:
        return message, f'{top}{head}</div>'
    parts = [(name, r.categories.get(name, 0)) for name in CATEGORIES]
    if r.reserved_bytes is not None:  # the replayed cache instead of the assumed allowance
        overhead = max(r.reserved_bytes - r.peak_bytes, 0) + CUDA_CONTEXT_BYTES
        parts += [("reserved, free", overhead - CUDA_CONTEXT_BYTES), ("CUDA context (assumed)", CUDA_CONTEXT_BYTES)]
    elif measured_here:
        overhead = 0
    else:
        overhead = CUDA_OVERHEAD_BYTES
        parts += [("CUDA context (assumed)", CUDA_CONTEXT_BYTES), ("allocator cache (assumed)", CACHE_ALLOWANCE_BYTES)]
    lines = r.verdict(capacity, gpu).lines if gpu in GPU_CARDS and not measured_here else {}
    for name, nbytes in lines.items():  # what the card adds that the traced tensors do not show
        if nbytes:
            parts.append((name, nbytes))
            overhead += nbytes
    scale = max(capacity, r.peak_bytes + overhead) * 1.05
    line = (f'<div title="{html.escape(gpu)}: {_size(capacity, unit)}" style="position:absolute;'
            f'top:-4px;bottom:-4px;left:{100 * capacity / scale:.3f}%;border-left:3px solid #b00"></div>')
    bar = (f'<div style="{_NOTE_STYLE}">against the GPU\'s {_size(capacity, unit)} (red line):</div>'
           f'<div class="gm-bar" style="{_BAR_STYLE}">{_bar(parts, scale, unit)}{line}</div>')
    if r.peak_bytes < 0.2 * capacity:  # too thin to read: show the peak on its own scale too
        bar += (f'<div style="{_NOTE_STYLE}">the peak alone, on its own scale:</div>'
                f'<div class="gm-zoom" style="{_BAR_STYLE}">{_bar(parts[:len(CATEGORIES)], r.peak_bytes * 1.05, unit)}</div>')
    rows = []
    for name, nbytes in parts:
        swatch = (f'<span style="display:inline-block;width:10px;height:10px;margin-right:4px;'
                  f'background:{_paint(name)}"></span>')
        cell = (f'class="gm-unseen" data-line="{name}" data-bytes="{nbytes}"' if name in lines else
                f'class="gm-bytes" data-category="{name}" data-bytes="{nbytes}"')
        rows.append(f'<tr><td style="padding-right:16px">{swatch}{name.replace("_", " ")}</td>'
                    f'<td {cell} style="text-align:right">{_size(nbytes, unit)}</td></tr>')
    for name, nbytes in lines.items():
        if nbytes is None:
            rows.append(f'<tr><td style="padding-right:16px">{name}</td><td class="gm-unseen" data-line="{name}" '
                        f'style="text-align:right">not modelled</td></tr>')
    rows.append(f'<tr><td style="padding-right:16px"><b>peak allocated (whole step)</b></td><td class="gm-peak" '
                f'data-bytes="{r.peak_bytes}" style="text-align:right"><b>{_size(r.peak_bytes, unit)}</b></td></tr>')
    if r.reserved_bytes is not None:
        rows.append(f'<tr><td style="padding-right:16px"><b>peak reserved (simulated)</b></td><td '
                    f'class="gm-reserved" data-bytes="{r.reserved_bytes}" style="text-align:right">'
                    f'<b>{_size(r.reserved_bytes, unit)}</b></td></tr>')
    table = f'<table style="border-collapse:collapse">{"".join(rows)}</table>'
    source = ("from the parameter count" if r.backend == "formula" else
              "traced" if r.traced else "interpolated between traced batch sizes")
    note = (f'<div style="{_NOTE_STYLE}">batch {r.batch_size}; peak of the whole step at the '
            f'{html.escape(r.where)}; {r.backend}, {source}.</div>')
    return message, f'{top}{head}{bar}{table}{note}</div>'


def working(note: str, previous: str = "") -> str:
    """The view while a result is being computed: ``note`` in bold, over the ``previous`` view dimmed.

    The previous figures stay in place (the layout does not jump) but greyed,
    so that they never look current; the next result replaces the whole view.

    Args:
        note: what is being done (``"tracing resnet18 ... at batch 200"``), as plain text.
        previous: the view's HTML before the change ("" for none).
    """
    stale = (f'<div class="gm-stale" style="opacity:0.35;filter:grayscale(100%)">{previous}</div>'
             if previous else "")
    return (f'<div class="gm-busy" aria-busy="true"><div class="gm-updating" style="font-weight:bold;color:#555">'
            f'updating&hellip; {html.escape(note)}</div>{stale}</div>')


class _WatchedCurve(PeakCurve):
    """A :class:`helpers.batch.PeakCurve` that calls ``before_trace(curve, batch_size)`` before each new trace."""

    def __init__(self, config: StepConfig, before_trace):
        super().__init__(config)
        self._before_trace = before_trace

    def trace(self, batch_size: int):
        if batch_size not in self.traces:
            self._before_trace(self, batch_size)
        return super().trace(batch_size)


class _StepWidget(widgets.VBox):
    """What the widgets share: a backend, the GPU cards, traced curves, and the view.

    A subclass makes its controls, calls :meth:`_start` and :meth:`_finish`,
    and says which configuration its controls show (:meth:`config`).
    """

    _STYLE = {"description_width": "110px"}

    def _repr_mimebundle_(self, **kwargs):
        """The widget, and a readable stand-in for where no widget can be shown.

        JupyterLab shows the live widget (its view has the highest rank).  A
        notebook opened before it is run has no widget models: the stored
        notebooks keep only this ``text/html`` stand-in (``make
        refresh-notebooks`` drops the stored widget views, which cannot be
        displayed without the kernel that made them), so a learner sees what
        the widget does and how to get it instead of "Error displaying widget".
        """
        data = super()._repr_mimebundle_(**kwargs)
        data["text/html"] = (f'<div style="border:1px dashed #999999; padding:8px; color:#333333">'
                             f'<b>{type(self).__name__}</b>: {html.escape(self._PLACEHOLDER)} It appears here '
                             f'when you run the notebook&rsquo;s cells from the top (Run &gt; Run All Cells).</div>')
        return data

    #: What the widget shows, for the stand-in of a notebook not yet run.
    _PLACEHOLDER = "an interactive view of a training step's memory against a GPU."
    #: The unit of its sizes: that of the lesson it belongs to (MiB for ResNets, GiB for billions of parameters).
    UNIT = "MiB"
    #: Trace batch size 1 and the slider's end of a new configuration, so that
    #: most slider positions interpolate (False: trace each batch size asked for).
    _TRACE_ENDS = True

    def _start(self, device: str, capacity: str, batch_size: int, max_batch_size: int) -> None:
        self.runtime = get_backend(device)
        self.backend = self.runtime.name
        self.capacities = dict(GPU_CARDS)
        if self.runtime.total_memory() is not None:
            self.capacities["this GPU"] = self.runtime.total_memory()
        check_int("max_batch_size", max_batch_size, 1)
        check_int("batch_size", batch_size, 1, max_batch_size)
        if capacity not in self.capacities:
            raise ValueError(f"unknown capacity {capacity!r}; use one of {', '.join(self.capacities)}")
        # min=1: a batch size of 0 or below cannot be entered (the box clamps it).
        self.batch_size = widgets.IntSlider(batch_size, min=1, max=max_batch_size, description="batch size",
                                            continuous_update=True, style=self._STYLE,
                                            layout=widgets.Layout(width="480px"))
        self.batch_box = widgets.BoundedIntText(batch_size, min=1, max=max_batch_size,
                                                layout=widgets.Layout(width="90px"))
        widgets.link((self.batch_size, "value"), (self.batch_box, "value"))
        self.capacity = widgets.Dropdown(options=list(self.capacities), value=capacity, description="GPU",
                                         style=self._STYLE)
        self.view = widgets.HTML()
        self.result: Estimate | None = None
        self.message = ""
        self._curves: dict[StepConfig, PeakCurve] = {}
        self._quiet = False
        self._updating = self._shown_working = False
        self._figures = ""  # the view's last result, dimmed while the next one is computed

    def _finish(self, rows: list, controls: list, batch_row: bool = True) -> None:
        """Lay out ``rows`` of controls (after the batch-size row, unless ``batch_row`` is False) and the view,
        observe ``controls`` (and the batch size and GPU), and show the first result."""
        batch = [widgets.HBox([self.batch_size, self.batch_box])] if batch_row else []
        super().__init__(children=[*batch, *rows, self.view])
        for control in (self.batch_size, self.capacity, *controls):
            control.observe(self._on_change, names="value")
        self.update()

    def _on_change(self, change) -> None:
        if not self._quiet:
            self.update()

    def config(self) -> StepConfig | None:
        """The configuration the controls show (batch size aside)."""
        raise NotImplementedError

    def _busy(self, key: StepConfig) -> str:
        return key.label

    def _without_trace(self) -> Estimate:
        raise NotImplementedError

    def curve(self) -> PeakCurve:
        """The :class:`helpers.batch.PeakCurve` of the configuration the controls show."""
        key = self.config()
        if key not in self._curves:
            curve = _WatchedCurve(key, self._working)
            self._curves[key] = curve
            if self._TRACE_ENDS and not self.runtime.measured:  # trace both ends, so most values interpolate
                for end in (1, self.batch_size.max):
                    try:
                        curve.trace(end)
                    except ValueError:  # e.g. BatchNorm with one value per channel at batch 1;
                        pass            # estimate() reports it for the batch sizes it concerns
        return self._curves[key]

    def _working(self, curve: PeakCurve, batch_size: int) -> None:
        """Called before each new trace (a fraction of a second to seconds): during :meth:`update`, show
        once that the widget is working (:func:`working`), over the figures on display, dimmed."""
        if not self._updating or self._shown_working:
            return
        self._shown_working = True
        what = self._busy(curve.config)
        if curve.traces or not self._TRACE_ENDS:  # one batch size, not the ends of a new configuration
            what += f" at batch {batch_size:,}"
        self.view.value = working(f"tracing {what}", self._figures)

    def update(self) -> None:
        """Recompute for the controls' values and redraw the view.

        When that needs a new trace, the view first says so (:func:`working`) and shows the previous
        figures dimmed until the new ones replace them.
        """
        self._updating, self._shown_working = True, False
        self._figures = self.view.value
        try:
            self._recompute()
        except BaseException as e:  # say so rather than stay "updating" (e.g. the kernel was interrupted)
            self.result, self.message = None, f"stopped before the new figures were in ({type(e).__name__})"
            self.view.value = (f'<div class="gm-refused" style="color:#a00">{html.escape(self.message)}: change a '
                               f'control to try again.</div>')
            raise
        finally:
            self._updating = False

    def _recompute(self) -> None:
        try:
            self.result = self.curve().estimate(self.batch_size.value) if self.config() else self._without_trace()
        except ValueError as e:
            self.result = None
            self.message = f"cannot run this configuration: {e}"
            self.view.value = f'<div class="gm-refused" style="color:#a00">{html.escape(self.message)}</div>'
            return
        gpu = self.capacity.value
        reserved = getattr(self, "reserved", None)
        if (reserved is not None and reserved.value and gpu != "this GPU" and self.config() is not None
                and self.result.peak_bytes is not None):
            # the exact trace at this batch size, replayed through the allocator model on the card
            self.result = reserved_estimate(self.curve().trace(self.result.batch_size), self.capacities[gpu])
        self.message, self.view.value = render(self.result, gpu, self.capacities[gpu], gpu == "this GPU", self.UNIT)

    def summary(self) -> str:
        """The figures on display, as text: the verdict, then bytes by category."""
        if self.result is None:
            return self.message
        lines = [self.message]
        lines += [f"  {name.replace('_', ' '):<17} {_size(self.result.categories.get(name, 0), self.UNIT):>14}"
                  for name in CATEGORIES]
        if self.result.reserved_bytes is not None:
            lines.append(f"  {'reserved (sim.)':<17} {_size(self.result.reserved_bytes, self.UNIT):>14}")
        gpu = self.capacity.value
        if gpu in GPU_CARDS and self.result.peak_bytes is not None:
            for name, nbytes in self.result.verdict(self.capacities[gpu], gpu).lines.items():
                shown = "not modelled" if nbytes is None else _size(nbytes, self.UNIT)
                lines.append(f"  {name:<17} {shown:>14}")
        lines.append(f"  peak of the whole step at the {self.result.where}")
        return "\n".join(lines)


class MemoryExplorer(_StepWidget):
    """Peak memory of one training step, by category, against a GPU's capacity.

    Args:
        model: a model name (``"mlp"``, lesson 01's small MLP; a torchvision
            classifier; ``"gpt2"`` and the other GPT-2 presets, at their full
            context of 1024 tokens), or your own ``nn.Module`` or builder
            function (listed in the model menu under its name).  Llama-3 8B is
            not in the menu: at its 131,072-token context no card of the menu
            holds one sample; :class:`WillItFit` and :class:`SequenceExplorer`
            offer it with a sequence length.
        batch_size: initial batch size, from 1 to ``max_batch_size``.
        max_batch_size: the slider's upper end (at least 1024 is useful).
        amp: initial state of the AMP toggle.
        checkpoint: initial checkpoint segments (0: off; 2, 4 or 8).
        optimizer: one of :data:`helpers.config.TORCH_OPTIMIZERS`.
        capacity: a card of :data:`helpers.gpus.GPU_CARDS` (``"V100 16 GB"``,
            ...), or ``"this GPU"`` (only on a GPU).
        device: ``"auto"``, ``"cuda"`` or ``"simulated"``.
        reserved: initial state of the "reserved" toggle: replay each step
            through the caching-allocator model (lesson 06) on the chosen card
            (:func:`helpers.batch.reserved_estimate`), and judge the fit by its
            peak reserved memory plus the assumed CUDA context
            (:data:`helpers.gpus.CUDA_CONTEXT_BYTES`): the replay takes the place
            of the assumed allowance for the allocator's cache
            (:data:`helpers.gpus.CACHE_ALLOWANCE_BYTES`) in the 1 GiB overhead
            used otherwise.  Each batch size is then traced exactly (about a
            second for ResNet18 at batch 128), not interpolated.
        **options: other options of :class:`helpers.config.StepConfig`.
            Those that describe the data (:data:`helpers.config.DATA_OPTIONS`:
            ``image_size``, ``input_shape``, ``seq_len``, ``num_classes``, ...)
            belong to ``model``: the menu's other models keep their own.  The
            rest (``amp_dtype``, ``attention``, ...) apply to every model.

    Attributes:
        batch_size, model, amp, checkpoint, optimizer, capacity, reserved: the controls
            (change their ``value`` from code, as a learner does with the mouse).
        view: the ``ipywidgets.HTML`` that shows the result.
        result: the :class:`helpers.batch.Estimate` on display (None while a
            configuration is refused; :attr:`message` says why).
        message: the text of the verdict line.

    Raises:
        ValueError: for an initial value the controls cannot take, or options
            :class:`helpers.config.StepConfig` refuses (with its message).
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


class WillItFit(_StepWidget):
    """Will this training step fit on that GPU?  Lesson 05b's widget (section 4).

    Like :class:`MemoryExplorer`, a steady-state training step (the optimizer
    states exist) simulated or measured, by category, against a GPU, with a
    verdict; its controls are those that decide the model states and the
    activations: the model (a language preset of
    :data:`helpers.models.LANGUAGE_PRESETS`: GPT-2's sizes and Llama-3 8B, or a
    torchvision classifier, or :data:`PARAMETER_COUNT`: then only the model
    states, computed from the count, since activations depend on the
    architecture), the optimizer, the precision, the batch size, and the
    sequence length (language models) or image size.

    Args:
        model: a GPT-2 or Llama preset, a torchvision classification model name, or
            :data:`PARAMETER_COUNT`.
        batch_size, max_batch_size: the slider's start and upper end.
        optimizer: one of :data:`helpers.config.TORCH_OPTIMIZERS`.
        precision: a key of :data:`PRECISIONS`.
        size: the sequence length (one of :data:`SEQ_LENS`) or image size (one
            of :data:`IMAGE_SIZES`); None: the model's default (1024, 224).
        parameters: the count for :data:`PARAMETER_COUNT`, in parameters.
        capacity: a card of :data:`helpers.gpus.GPU_CARDS`, or ``"this GPU"``.
        device: ``"auto"``, ``"cuda"`` or ``"simulated"``.

    Attributes:
        batch_size, model, optimizer, precision, size, parameters, capacity:
            the controls; view, result, message: as in :class:`MemoryExplorer`.

    Raises:
        ValueError: for an initial value the controls cannot take.
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
        self.parameters = widgets.BoundedIntText(parameters, min=1, max=10**13, description="parameters",
                                                 style=style)
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


class SequenceExplorer(_StepWidget):
    """Lesson 08's widget: a transformer's training step against a GPU, by sequence length.

    Controls: the model (:func:`transformer_presets`), sequence length, batch
    size, AMP, the checkpointing policy, the attention kernel and the GPU.  The
    view (made by :func:`render`, as for the other widgets) shows the peak of
    the whole steady-state training step with Adam (forward, next-token loss,
    backward, ``optimizer.step()``; :func:`helpers.transformer.transformer_step`
    traced by :func:`helpers.step.profile_step`, simulated) as a bar stacked
    by category against the GPU's memory, where the peak is, and whether it
    fits by the rule every widget and the command line apply
    (:meth:`helpers.batch.Estimate.verdict`).  A new configuration is traced
    once (seconds: GPT-2 1.5B or Llama-3 8B at 4,096 tokens about 5 s) and
    kept; the view first says that it is working.  Like the other widgets it
    is an ``ipywidgets.VBox``: display it as the last expression of a cell;
    ``explorer.summary()`` gives the same figures as text.

    Attributes:
        model, seq, batch_size, amp, policy, attention, capacity: the controls;
            view, result, message: as in :class:`MemoryExplorer`.

    Raises:
        ValueError: for an unknown model, sequence length, kernel, policy or GPU.
    """

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
        # The batch size is typed (up to 512), in the first row: the box is linked to the slider, which is not shown.
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


# -- lesson 09 --

#: The fine-tuning widget's models: the shipped 7-8B Hugging Face configs (:data:`helpers.models.hf.SHIPPED`).
FINETUNE_MODELS = ("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B", "mistralai/Mistral-7B-v0.3")
#: Its methods: label -> what they set (LoRA's rank comes from the rank menu).
FINETUNE_METHODS = {"full fine-tuning": {}, "LoRA": {"lora": True},
                    "QLoRA (NF4 base)": {"lora": True, "quantization": "nf4"}}
#: Its optimizers: label -> :class:`helpers.config.StepConfig` options.
FINETUNE_OPTIMIZERS = {"AdamW": {"optimizer": "adamw"}, "8-bit AdamW": {"optimizer": "adamw8bit"},
                       "AdamW, states in host memory": {"optimizer": "adamw", "optimizer_offload": True}}
#: The questions it answers.
QUESTIONS = ("does it fit?", "largest batch", "longest sequence")
#: LoRA ranks in its menu.
LORA_RANKS = (8, 16, 32, 64, 128)
#: The longest sequence is searched in steps of this many tokens.
SEQ_STEP = 256
#: A 48 GB card beside :data:`helpers.gpus.GPU_CARDS`' 24 and 80 GB ones: the ``total_memory`` that
#: ``torch.cuda.get_device_properties`` printed for an NVIDIA RTX A6000, 48676 MiB (pytorch/ao,
#: ``torchao/prototype/hqq/README.md``, "GPU details").  It is not a card of ``GPU_CARDS`` (nor of
#: :data:`helpers.gpus.COMPUTE_CAPABILITY`): judged as a bare capacity, its verdicts add no cuBLAS
#: workspace line (two of about 8 MiB on that card: a hair of its 47.5 GiB).
CARD_48GB = {"RTX A6000 48 GB": 48676 * 2**20}


def largest_fit(estimate_at, lowest: int, highest: int, capacity: int,
                card: str | None = None) -> tuple[int, dict[int, Estimate]]:
    """The largest ``n`` from ``lowest`` to ``highest`` whose step fits ``capacity``, each candidate traced.

    ``n`` is a batch size, or a sequence length in units of :data:`SEQ_STEP`
    tokens.  A step's peak is the maximum of affine functions of its token
    count (lesson 01: each moment's memory is affine in the batch, and with
    flash attention in the sequence too), so the line through two traced
    points (:func:`helpers.batch.fit_affine`) predicts the answer; each
    prediction is traced and judged (:meth:`helpers.batch.Estimate.verdict`,
    the rule of every widget), and the next line goes through the last two
    points, or the search halves the interval where a line makes no progress.
    When the peak is affine near the answer, four traces settle it: two for
    the line, the answer (which fits) and one more (which does not); two
    more where the smallest steps peak elsewhere (at ``optimizer.step()``).

    Args:
        estimate_at: ``n -> Estimate`` of a direct trace (judged by its
            reserved peak when it has one).
        lowest, highest: the range searched, ``1 <= lowest <= highest``.
        capacity: the GPU's memory in bytes.
        card: the card's name when it is one of :data:`helpers.gpus.GPU_CARDS`:
            its verdicts then add the lines it adds (the cuBLAS workspaces), as
            the widgets' do; None for a bare capacity.

    Returns:
        ``(n, estimates)``: the answer (0 when not even ``lowest`` fits) and
        every estimate judged, by ``n``; ``estimates[n + 1]`` exists unless
        ``n`` is ``highest`` or 0.

    Raises:
        ValueError: for a bad range, or as ``estimate_at`` does.
    """
    check_int("lowest", lowest, 1)
    check_int("highest", highest, lowest)
    seen: dict[int, Estimate] = {}
    order: list[int] = []

    def fits(n: int) -> bool:
        if n not in seen:
            seen[n] = estimate_at(n)
            order.append(n)
        return seen[n].verdict(capacity, card).fits

    if not fits(lowest):
        return 0, seen
    lo, hi = lowest, highest + 1  # lo fits; hi does not (or lies beyond the range)
    n = min(highest, 4 * lowest)
    for _ in range(4 * highest.bit_length() + 8):
        if n != lo:
            if fits(n):
                lo = max(lo, n)
            else:
                hi = min(hi, n)
        if hi - lo <= 1:
            return lo, seen
        same = [m for m in order if seen[m].where == seen[order[-1]].where]  # the same moment peaks
        x1, x2 = same[-2:] if len(same) > 1 else order[-2:]
        e1, e2 = seen[x1], seen[x2]
        y1, y2 = (e.reserved_bytes if e.reserved_bytes is not None else e.peak_bytes for e in (e1, e2))
        try:
            v = e2.verdict(capacity, card)  # its overhead; headroom() leaves out a listed card's cuBLAS workspaces
            guess = fit_affine([x1, x2], [y1, y2]).largest_batch(capacity, v.overhead)
        except ValueError:  # flat: the peak does not grow here (the optimizer step's, say): look further
            guess = 4 * max(x1, x2)
        guess = min(max(guess, lo + 1), hi - 1)
        if guess in seen:  # no progress along the line: halve the interval
            guess = (lo + hi) // 2
        n = guess
    return lo, seen  # not reached for a peak that does not fall as n grows


class FineTuneFit(_StepWidget):
    """Lesson 09's widget: will this fine-tuning of a 7-8B model fit this GPU, and how far can it go?

    The step: one steady-state training step (forward, next-token loss,
    backward, ``optimizer.step()``) of a Hugging Face causal LM built from a
    shipped config (:data:`FINETUNE_MODELS`), under bfloat16 autocast, traced
    by :func:`helpers.step.profile_step` on the simulated GPU.  Controls: the
    model; the method (full fine-tuning, LoRA of a rank on peft's default
    targets, QLoRA: the same LoRA over a 4-bit NF4 base); the optimizer (AdamW,
    8-bit AdamW, AdamW with its states in host memory); the weights' dtype;
    Hugging Face's gradient checkpointing; the sequence length and batch; the
    GPU (:data:`helpers.gpus.GPU_CARDS` and a 48 GB card, :data:`CARD_48GB`);
    the question; and the "reserved" view (the step replayed through the
    allocator model on the card, as in :class:`MemoryExplorer`).

    The questions (:data:`QUESTIONS`): "does it fit?" (the view at the batch
    and sequence shown); "largest batch" at the sequence shown, and "longest
    sequence" at the batch shown, in steps of :data:`SEQ_STEP` tokens, found by
    :func:`largest_fit` (an affine fit of two traces, then traces that confirm
    the answer and that one more does not fit).  The answer is put into its
    control, and the view shows its traced step: every verdict is the rule of
    every widget (:meth:`helpers.batch.Estimate.verdict`), sizes in GiB.  Each
    trace of an 8B model takes seconds; the view says "updating..." meanwhile.

    Args:
        model: one of :data:`FINETUNE_MODELS`.
        method: a key of :data:`FINETUNE_METHODS`.
        lora_rank: LoRA's rank, one of :data:`LORA_RANKS` (ignored for full fine-tuning).
        optimizer: a key of :data:`FINETUNE_OPTIMIZERS`.
        weights: ``"float32"`` or ``"bfloat16"``: the dtype of the weights
            that are not quantized (``param_dtype``).
        checkpointing: Hugging Face's gradient checkpointing, each decoder layer a segment.
        seq, batch_size: the sequence length (tokens) and the batch.
        capacity: a card of :data:`helpers.gpus.GPU_CARDS` or :data:`CARD_48GB`.
        question: one of :data:`QUESTIONS`.
        reserved: judge by the simulated allocator's reserved peak.
        models: the model menu: names of :data:`helpers.models.hf.SHIPPED`
            (default :data:`FINETUNE_MODELS`; the tests offer SmolLM2-135M, which traces fast).

    Attributes:
        model, method, lora_rank, optimizer, weights, checkpointing, seq,
            batch_box, capacity, question, reserved: the controls;
            view, result, message: as in :class:`MemoryExplorer`.
        answer: the answer to "largest batch" or "longest sequence" in words
            ("" for "does it fit?"); largest: the number (0: not even the
            smallest fits; None for "does it fit?").

    Raises:
        ValueError: for an initial value the controls cannot take, or a step
            :class:`helpers.config.StepConfig` refuses.
    """

    UNIT = "GiB"
    _PLACEHOLDER = ("menus for a 7-8B model, the method (full fine-tuning, LoRA, QLoRA), optimizer, weights, "
                    "checkpointing, sequence, batch and GPU, and whether the training step fits, or the largest "
                    "batch or longest sequence that does.")
    _TRACE_ENDS = False  # each configuration is traced at the batch size asked for
    MAX_BATCH = 512

    def __init__(self, model: str = FINETUNE_MODELS[0], method: str = "LoRA", lora_rank: int = 16,
                 optimizer: str = "AdamW", weights: str = "bfloat16", checkpointing: bool = True,
                 seq: int = 2048, batch_size: int = 1, capacity: str = "RTX 4090 24 GB",
                 question: str = QUESTIONS[0], reserved: bool = False,
                 models: tuple[str, ...] = FINETUNE_MODELS):
        if not models or any(m not in hf.SHIPPED for m in models):
            raise ValueError(f"models must be shipped configs ({', '.join(hf.SHIPPED)}), got {models!r}")
        for name, value, choices in (("model", model, models), ("method", method, FINETUNE_METHODS),
                                     ("lora_rank", lora_rank, LORA_RANKS), ("optimizer", optimizer, FINETUNE_OPTIMIZERS),
                                     ("weights", weights, ("float32", "bfloat16")), ("question", question, QUESTIONS),
                                     ("capacity", capacity, (*GPU_CARDS, *CARD_48GB))):
            if value not in choices:
                raise ValueError(f"unknown {name} {value!r}; use one of {', '.join(map(str, choices))}")
        for name, value in (("checkpointing", checkpointing), ("reserved", reserved)):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be True or False, got {value!r}")
        self._max_seq = {m: hf.load_config(m).max_position_embeddings for m in models}
        check_int("seq", seq, 1, self._max_seq[model])
        self._start("simulated", next(iter(GPU_CARDS)), batch_size, self.MAX_BATCH)
        self.capacities.update(CARD_48GB)
        self.capacity.options = sorted(self.capacities, key=self.capacities.get)
        self.capacity.value = capacity
        style = self._STYLE
        self.model = widgets.Dropdown(options=list(models), value=model, description="model", style=style,
                                      layout=widgets.Layout(width="400px"))
        self.method = widgets.Dropdown(options=list(FINETUNE_METHODS), value=method, description="method",
                                       style=style)
        self.lora_rank = widgets.Dropdown(options=LORA_RANKS, value=lora_rank, description="LoRA rank", style=style)
        self.optimizer = widgets.Dropdown(options=list(FINETUNE_OPTIMIZERS), value=optimizer,
                                          description="optimizer", style=style, layout=widgets.Layout(width="400px"))
        self.weights = widgets.Dropdown(options=["float32", "bfloat16"], value=weights, description="weights",
                                        style=style)
        self.checkpointing = widgets.Checkbox(checkpointing, description="gradient checkpointing", indent=False)
        self.seq = widgets.BoundedIntText(seq, min=1, max=self._max_seq[model], description="sequence",
                                          style=style, layout=widgets.Layout(width="220px"))
        self.batch_box.description, self.batch_box.style = "batch size", style
        self.batch_box.layout.width = "200px"  # the 110 px label and a box wide enough to show the number
        self.question = widgets.Dropdown(options=QUESTIONS, value=question, description="question", style=style)
        self.reserved = widgets.Checkbox(reserved, description="reserved (simulated allocator)", indent=False)
        self.answer, self.largest = "", None
        self.config()  # StepConfig checks the initial step
        controls = [self.model, self.method, self.lora_rank, self.optimizer, self.weights, self.checkpointing,
                    self.seq, self.question, self.reserved]
        self._finish([widgets.HBox([self.model, self.method, self.lora_rank]),
                      widgets.HBox([self.optimizer, self.weights, self.checkpointing]),
                      widgets.HBox([self.seq, self.batch_box, self.capacity]),
                      widgets.HBox([self.question, self.reserved])], controls, batch_row=False)

    def config(self, seq: int | None = None) -> StepConfig:
        """The step the controls show (batch size aside), at ``seq`` tokens if given."""
        method = FINETUNE_METHODS[self.method.value]
        options = dict(FINETUNE_OPTIMIZERS[self.optimizer.value])
        if method.get("quantization"):
            options["quantization"] = method["quantization"]
        if self.weights.value != "float32":
            options["param_dtype"] = self.weights.value
        return StepConfig(model=self.model.value, batch_size=1, seq_len=seq or self.seq.value, amp=True,
                          amp_dtype="bfloat16", checkpoint=1 if self.checkpointing.value else 0,
                          lora_rank=self.lora_rank.value if method.get("lora") else 0, steady_state=True,
                          device=self.backend, **options).curve_key()

    def _busy(self, key: StepConfig) -> str:
        rank = f" r{key.lora_rank}" if key.lora_rank else ""
        what = {"largest batch": ", searching the largest batch",
                "longest sequence": ", searching the longest sequence"}.get(self.question.value, "")
        return (f"{key.label}, {self.method.value}{rank}, {self.optimizer.value}, at {key.seq_len:,} tokens"
                f"{what}")

    def estimate_at(self, seq: int, batch_size: int) -> Estimate:
        """The traced step at ``seq`` tokens and ``batch_size`` (cached), judged as the view judges it:
        with the reserved view, replayed through the allocator model on the card."""
        key = self.config(seq)
        if key not in self._curves:
            self._curves[key] = _WatchedCurve(key, self._working)
        profile = self._curves[key].trace(batch_size)
        gpu = self.capacity.value
        if self.reserved.value:
            return reserved_estimate(profile, self.capacities[gpu])
        return Estimate.of(profile)

    def largest_batch(self) -> tuple[int, dict[int, Estimate]]:
        """The largest batch at the sequence shown, and the estimates judged (:func:`largest_fit`)."""
        seq = self.seq.value
        gpu = self.capacity.value
        return largest_fit(lambda b: self.estimate_at(seq, b), 1, self.MAX_BATCH, self.capacities[gpu],
                           gpu if gpu in GPU_CARDS else None)

    def longest_sequence(self) -> tuple[int, dict[int, Estimate]]:
        """The longest sequence at the batch shown, in tokens (a multiple of :data:`SEQ_STEP`), and the
        estimates judged by sequence length (:func:`largest_fit`)."""
        batch = self.batch_box.value
        gpu = self.capacity.value
        steps, seen = largest_fit(lambda n: self.estimate_at(n * SEQ_STEP, batch), 1,
                                  self._max_seq[self.model.value] // SEQ_STEP, self.capacities[gpu],
                                  gpu if gpu in GPU_CARDS else None)
        return steps * SEQ_STEP, {n * SEQ_STEP: e for n, e in seen.items()}

    def _recompute(self) -> None:
        question = self.question.value
        self.batch_box.disabled = question == "largest batch"
        self.seq.disabled = question == "longest sequence"
        self.seq.max = self._max_seq[self.model.value]
        self.answer, self.largest = "", None
        gpu = self.capacity.value
        if question == QUESTIONS[0]:
            super()._recompute()
            return
        try:
            if question == "largest batch":
                found, seen = self.largest_batch()
                lowest, step, what = 1, 1, f"largest batch at {self.seq.value:,} tokens"
            else:
                found, seen = self.longest_sequence()
                lowest, step, what = SEQ_STEP, SEQ_STEP, f"longest sequence at batch {self.batch_box.value}"
        except ValueError as e:
            self.result = None
            self.message = f"cannot run this configuration: {e}"
            self.view.value = f'<div class="gm-refused" style="color:#a00">{html.escape(self.message)}</div>'
            return
        self.largest = found
        shown = found or lowest
        capacity = self.capacities[gpu]
        if found:
            self.answer = f"{what} that fits {gpu}: {found:,}"
            if question == "longest sequence" and found == self._max_seq[self.model.value] // SEQ_STEP * SEQ_STEP:
                self.answer += " (the model's whole context)"
            elif question == "largest batch" and found == self.MAX_BATCH:
                self.answer += f" (the end of the menu, {self.MAX_BATCH})"
            if found + step in seen:
                need = seen[found + step].verdict(capacity, gpu if gpu in GPU_CARDS else None).need
                self.answer += (f" ({found + step:,} does not fit: it needs "
                                f"{'more than the card' if need is None else _size(need, self.UNIT)})")
        else:
            self.answer = (f"no batch fits {gpu} at {self.seq.value:,} tokens: not even batch 1"
                           if question == "largest batch" else
                           f"no sequence fits {gpu} at batch {self.batch_box.value}: not even {SEQ_STEP} tokens")
        self._quiet = True
        try:  # the controls show the step on display
            if question == "largest batch":
                self.batch_box.value = shown
            else:
                self.seq.value = shown
        finally:
            self._quiet = False
        self.result = seen[shown]
        self.message, view = render(self.result, gpu, capacity, False, self.UNIT)
        head = (f'<div class="gm-answer" data-question="{html.escape(question)}" data-answer="{found}" '
                f'style="font-weight:bold;margin-bottom:4px">{html.escape(self.answer)}</div>')
        self.view.value = head + view

    def summary(self) -> str:
        """The answer (if a search was asked), the verdict, then bytes by category, as text."""
        text = super().summary()
        return f"{self.answer}\n{text}" if self.answer else text
