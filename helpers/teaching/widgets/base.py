"""What the widgets share: the controls of a batch size and a GPU, traced curves, and the view.

A widget's view changes through traits (``HTML.value``) in ``observe`` callbacks, never by printing, so notebooks pass
strict nbval. On a GPU every value is measured; elsewhere simulated, :class:`helpers.batch.PeakCurve` interpolating
exactly so the slider answers at once. A change that needs a trace first shows the previous figures dimmed.
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from ...batch import Estimate, PeakCurve, reserved_estimate
from ...config import StepConfig, check_int
from ...engine.backends import get_backend
from ...gpus import GPU_CARDS
from ...record import CATEGORIES
from ...units import fmt_bytes
from ..views import refused, render, working


class WatchedCurve(PeakCurve):
    """A :class:`helpers.batch.PeakCurve` that calls ``before_trace(curve, batch_size)`` before each new trace."""

    def __init__(self, config: StepConfig, before_trace):
        super().__init__(config)
        self._before_trace = before_trace

    def trace(self, batch_size: int):
        if batch_size not in self.traces:
            self._before_trace(self, batch_size)
        return super().trace(batch_size)


class StepWidget(widgets.VBox):
    """The base of every widget: a backend, the GPU cards, traced curves, and the view.

    A subclass makes its controls, calls :meth:`_start` and :meth:`_finish`, and defines :meth:`config`.

    Attributes:
        view, message: the ``ipywidgets.HTML`` that shows the result; the text of the verdict line.
        result: the :class:`helpers.batch.Estimate` on display (None while refused; :attr:`message` says why).
    """

    _STYLE = {"description_width": "110px"}

    def _repr_mimebundle_(self, **kwargs):
        """The widget, and a ``text/html`` stand-in that a stored notebook keeps, saying what the widget does."""
        data = super()._repr_mimebundle_(**kwargs)
        data["text/html"] = (f'<div style="border:1px dashed #999999; padding:8px; color:#333333">'
                             f'<b>{type(self).__name__}</b>: {html.escape(self._PLACEHOLDER)} It appears here '
                             f'when you run the notebook&rsquo;s cells from the top (Run &gt; Run All Cells).</div>')
        return data

    #: What the widget shows, for the stand-in of a notebook not yet run.
    _PLACEHOLDER = "an interactive view of a training step's memory against a GPU."
    #: The unit of its sizes: that of the lesson it belongs to (MiB for ResNets, GiB for billions of parameters).
    UNIT = "MiB"
    #: Trace batch size 1 and the slider's end of a new configuration, so that most positions interpolate.
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
        """Lay out ``rows`` (after the batch row if ``batch_row``) and the view; observe ``controls``, batch and GPU."""
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
            curve = WatchedCurve(key, self._working)
            self._curves[key] = curve
            if self._TRACE_ENDS and not self.runtime.measured:  # trace both ends, so most values interpolate
                for end in (1, self.batch_size.max):
                    try:
                        curve.trace(end)
                    except ValueError:  # e.g. BatchNorm with one value per channel at batch 1;
                        pass            # estimate() reports it for the batch sizes it concerns
        return self._curves[key]

    def _working(self, curve: PeakCurve, batch_size: int) -> None:
        """Before each new trace, during :meth:`update`: show once that the widget is working."""
        if not self._updating or self._shown_working:
            return
        self._shown_working = True
        what = self._busy(curve.config)
        if curve.traces or not self._TRACE_ENDS:  # one batch size, not the ends of a new configuration
            what += f" at batch {batch_size:,}"
        self.view.value = working(f"tracing {what}", self._figures)

    def update(self) -> None:
        """Recompute for the controls' values and redraw the view (saying first when it must trace)."""
        self._updating, self._shown_working = True, False
        self._figures = self.view.value
        try:
            self._recompute()
        except BaseException as e:  # say so rather than stay "updating" (e.g. the kernel was interrupted)
            self.result, self.message = None, f"stopped before the new figures were in ({type(e).__name__})"
            self.view.value = refused(self.message, ": change a control to try again.")
            raise
        finally:
            self._updating = False

    def _refuse(self, error: ValueError) -> None:
        """Show that the controls' configuration cannot run, and why (``error``)."""
        self.result, self.message = None, f"cannot run this configuration: {error}"
        self.view.value = refused(self.message)

    def _recompute(self) -> None:
        try:
            self.result = self.curve().estimate(self.batch_size.value) if self.config() else self._without_trace()
        except ValueError as e:
            return self._refuse(e)
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
        size = lambda nbytes: fmt_bytes(nbytes, self.UNIT, grouped=True)  # noqa: E731
        lines = [self.message]
        lines += [f"  {name.replace('_', ' '):<17} {size(self.result.categories.get(name, 0)):>14}"
                  for name in CATEGORIES]
        if self.result.reserved_bytes is not None:
            lines.append(f"  {'reserved (sim.)':<17} {size(self.result.reserved_bytes):>14}")
        gpu = self.capacity.value
        if gpu in GPU_CARDS and self.result.peak_bytes is not None:
            for name, nbytes in self.result.verdict(self.capacities[gpu], gpu).lines.items():
                shown = "not modelled" if nbytes is None else size(nbytes)
                lines.append(f"  {name:<17} {shown:>14}")
        lines.append(f"  peak of the whole step at the {self.result.where}")
        return "\n".join(lines)
