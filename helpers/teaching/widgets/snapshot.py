"""A widget that explains a memory snapshot: one shipped with the course, or a learner's own file (lesson 06b)."""

from __future__ import annotations

import html
import io
from pathlib import Path

import ipywidgets as widgets

from ...snapshot import SnapshotError, explain_snapshot
from ..plots import plot_memory_map, plot_snapshot
from ..views import refused, working
from .base import StepWidget

_DATA = Path(__file__).resolve().parents[3] / "lessons" / "data"
#: The snapshots the widget offers before a file is uploaded: real GPUs' (``make gpu-reference`` on an H200).
SHIPPED = {
    "Llama-3.1 8B, LoRA r16 (H200)": _DATA / "h200_2026-11-26" / "llama_lora.pickle.gz",
    "ResNet18, batch 128 (H200)": _DATA / "gpu_snapshot_resnet18_b128.pickle",
    "ResNet18, checkpointed, C++ stacks (H200)": _DATA / "h200_2026-11-26" / "ckpt4_all.pickle.gz",
    "dropout MLP, C++ stacks (H200)": _DATA / "h200_2026-11-26" / "mlp.pickle.gz",
}


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


class SnapshotExplorer(StepWidget):
    """Pick a shipped snapshot or upload one (``torch.cuda.memory._dump_snapshot``'s file, gzipped or not) and see it
    explained (:func:`helpers.snapshot.explain_snapshot`): the report, the live tensors by category over time and the
    segments and blocks (lesson 06a's map).  A file that is not a snapshot is refused in one line, and nothing else
    is shown: no figure, and the menu names no snapshot once a file is uploaded.

    Attributes:
        choice, upload: the menu of :data:`SHIPPED` snapshots and the ``FileUpload``.
        report: the :class:`helpers.snapshot.SnapshotReport` on display (None while refused; ``message`` says why).
        view, timeline, memory_map: the report as HTML (``.gm-snapshot``: ``data-name``, ``data-peak``,
            ``data-reserved``, ``data-entries``), and the two figures as PNG images.
    """

    _PLACEHOLDER = "a memory snapshot explained: a shipped one, or your own file, with its figures."

    def __init__(self, shipped: dict[str, Path] | None = None):
        self.shipped = dict(SHIPPED if shipped is None else shipped)
        self.choice = widgets.Dropdown(options=list(self.shipped), description="snapshot", style=self._STYLE,
                                       layout=widgets.Layout(width="480px"))
        self.upload = widgets.FileUpload(accept=".pickle,.gz,.pkl", multiple=False,
                                         description="your own file")
        self.view, self.message, self.report, self.result = widgets.HTML(), "", None, None
        self.timeline, self.memory_map = widgets.Image(format="png"), widgets.Image(format="png")
        widgets.VBox.__init__(self, children=[widgets.HBox([self.choice, self.upload]), self.view, self.timeline,
                                              self.memory_map])
        self.choice.observe(self._chosen, names="value")
        self.upload.observe(self._uploaded, names="value")
        self.show(self.shipped[self.choice.value], self.choice.value)

    def _chosen(self, change) -> None:
        if change["new"] is not None:  # None: the menu cleared for an uploaded file
            self.show(self.shipped[change["new"]], change["new"])

    def _uploaded(self, change) -> None:
        if change["new"]:
            (file,) = change["new"]
            self.choice.index = None  # the menu no longer names the snapshot on display
            self.show(bytes(file["content"]), file["name"])

    def _figures(self, *pngs: bytes) -> None:
        """Show the two figures, or hide them when there are none (an empty image is a broken-image icon).

        Each change reaches the browser as its own message, in the order it is made: an image is hidden before its
        picture is emptied, and given its new picture before it is shown, so that no step between shows a broken icon.
        """
        for image, png in zip((self.timeline, self.memory_map), pngs):
            if png:
                image.value, image.layout.display = png, None
            else:
                image.layout.display, image.value = "none", png

    def show(self, source: Path | bytes, name: str) -> None:
        """Explain ``source`` (a path or a file's bytes) and show it under ``name``."""
        self.view.value = working(f"reading {name}", self.view.value)
        # The figures change before the text that names them: the browser applies the messages in order, so the
        # refusal, or the new snapshot's name, never shows beside the figures of the snapshot before it.
        try:
            report = explain_snapshot(source)
        except SnapshotError as e:
            self.report, self.message = None, str(e).replace("the snapshot", name, 1)
            self._figures(b"", b"")
            self.view.value = refused(self.message)
            return
        try:
            trace, categories = report.memory_map()
            pngs = (_png(plot_snapshot(report, title=name)),
                    _png(plot_memory_map(trace, categories, report.segments, title=name)))
        except ValueError:  # nothing to draw (a trace without segments or tensors): the report alone
            pngs = (b"", b"")
        self.report, self.message = report, f"{name}: {report.lines()[0]}"
        self._figures(*pngs)
        self.view.value = (f'<div class="gm-snapshot" data-name="{html.escape(name)}" data-peak="{report.peak_bytes}" '
                           f'data-reserved="{max(report.reserved)}" data-entries="{report.entries}">'
                           f'<b>{html.escape(name)}</b><pre style="font-size:85%;line-height:1.3">'
                           f'{html.escape(chr(10).join(report.lines()))}</pre></div>')

    def summary(self) -> str:
        """The report on display, as text (or why there is none)."""
        return self.message if self.report is None else "\n".join([self.message, *self.report.lines()[1:]])

