"""Figures of what a real GPU recorded beside the simulation: every recorded step's peaks, and the bytes a recorded
snapshot holds that its simulated twin does not (lessons 06 and 06b)."""

from __future__ import annotations

from collections import Counter

from matplotlib.figure import Figure

from ...allocator import round_size
from ...palette import GREYS, OKABE_ITO, SNAPSHOT_COLORS
from ...snapshot import SnapshotReport
from ...units import MiB

#: The two comparisons of :func:`plot_recorded_runs`: (label, the run's GPU field, its simulated field, colour, marker).
RECORDED_PEAKS = (("peak allocated", "cuda_peak_bytes", "simulated_allocated_bytes", OKABE_ITO["blue"], "o"),
                  ("peak reserved", "cuda_reserved_bytes", "simulated_reserved_bytes", OKABE_ITO["vermillion"], "D"))


def recorded_label(run: dict) -> str:
    """A recorded run's row label: ``"resnet18 b128 AMP"``, a Hub model without its owner (``"Llama-3.1-8B b1 LoRA r16"``)."""
    return f"{run['model'].split('/')[-1]} b{run['batch_size']} {run['config']}"


def recorded_excess(run: dict) -> dict[str, float]:
    """How far the GPU's peaks of one recorded run are above the simulated ones, as fractions (0.05: 5% above):
    ``{"peak allocated": ..., "peak reserved": ...}`` (``max_memory_allocated`` against the allocator model's peak
    allocated, ``max_memory_reserved`` against its peak reserved; the fields of ``lessons/data/gpu_reference.json``,
    described in :mod:`helpers.teaching.reference`).

    Raises:
        ValueError: if the run has an ``error`` or lacks one of the four figures.
    """
    if run.get("error"):
        raise ValueError(f"{recorded_label(run)} has no figures: {run['error']}")
    missing = [f for _, *fields, _, _ in RECORDED_PEAKS for f in fields if not run.get(f)]
    if missing:
        raise ValueError(f"{recorded_label(run)} lacks {', '.join(missing)}")
    return {name: run[gpu] / run[sim] - 1 for name, gpu, sim, _, _ in RECORDED_PEAKS}


def plot_recorded_runs(runs: list[dict], title: str | None = None) -> Figure:
    """Every recorded run, one row each: how far the GPU's peak allocated and peak reserved are above the
    simulated ones (:func:`recorded_excess`, in percent), a vertical line where they agree. Runs with an ``error``
    are left out; rows keep the order of ``runs``, a thin line between two models.

    Raises:
        ValueError: if no run has figures.
    """
    rows = [(recorded_label(r), recorded_excess(r), r["model"]) for r in runs if not r.get("error")]
    if not rows:
        raise ValueError("no recorded run with figures to draw")
    fig = Figure(figsize=(8.5, 1.6 + 0.24 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    ys = range(len(rows))
    for name, _, _, colour, marker in RECORDED_PEAKS:
        ax.plot([100 * excess[name] for _, excess, _ in rows], ys, marker, color=colour, ms=6, ls="none",
                label=f"{name}: GPU above the simulation")
    for y, ((_, _, model), (_, _, after)) in enumerate(zip(rows, rows[1:])):
        if model != after:
            ax.axhline(y + 0.5, color=GREYS["free edge"], lw=0.5)
    ax.axvline(0, color=OKABE_ITO["black"], lw=0.8)
    ax.set_yticks(list(ys), [label for label, _, _ in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # the first run on top
    ax.set_xlabel("GPU figure above the simulated one (%)")
    ax.grid(axis="x", color=GREYS["backward"])
    fig.legend(fontsize=8, loc="outside lower center", ncols=2)
    if title:
        ax.set_title(title)
    return fig


def gpu_only_bytes(report: SnapshotReport) -> tuple[list[int], list[int]]:
    """Per trace entry of a snapshot explained beside its simulated step (``explain_snapshot(..., step=...)``),
    the bytes live then that the simulated step has no tensor for: those allocated before the recording began (in the
    course's recordings, cuBLAS workspaces), and those allocated during it (kernels' own buffers). Two lists of
    ``report.entries`` values each, in bytes (requested sizes, as the trace gives them).

    An allocation the alignment left unpaired (``report.twin.extra``) is not counted when a simulated allocation of
    the same size, rounded to 512 bytes, was left unpaired too (``report.twin.missing``, taken in order): the two are
    most likely one tensor that the alignment did not match, not memory only the GPU took.

    Raises:
        ValueError: if the report has no simulated twin.
    """
    if report.twin is None:
        raise ValueError("this report has no simulated twin: explain_snapshot(path, step=profile) makes one")
    unpaired = Counter(round_size(report.twin.profile.allocation_log[i].nbytes) for i in report.twin.missing)
    made = []
    for b in report.twin.extra:
        if b.allocated is None:
            continue
        if unpaired[round_size(b.size)]:
            unpaired[round_size(b.size)] -= 1
        else:
            made.append(b)
    before, during = [0] * (report.entries + 1), [0] * (report.entries + 1)
    for b in [b for b in report.blocks if b.allocated is None] + made:
        series = before if b.allocated is None else during
        series[0 if b.allocated is None else b.allocated] += b.size
        if b.freed is not None:
            series[b.freed] -= b.size
    for series in (before, during):
        for i in range(1, len(series)):
            series[i] += series[i - 1]
    return before[:-1], during[:-1]


def plot_gpu_only(report: SnapshotReport, title: str | None = None) -> Figure:
    """What a GPU held that the simulated twin of its step does not (:func:`gpu_only_bytes`), over the snapshot's
    trace, in MiB: the blocks made before the recording, and above them the GPU-only allocations of the recording;
    a dotted line where the measured step begins (``report.twin.measured``).

    Raises:
        ValueError: if the report has no simulated twin.
    """
    import numpy as np

    before, during = (np.asarray(s) / MiB for s in gpu_only_bytes(report))
    xs = np.arange(len(before))
    fig = Figure(figsize=(9.5, 3.4), layout="constrained")
    ax = fig.add_subplot()
    ax.fill_between(xs, before, step="post", color=SNAPSHOT_COLORS["before_recording"],
                    label="allocated before the recording")
    ax.plot(xs, before + during, drawstyle="steps-post", color=OKABE_ITO["orange"], lw=1.0, antialiased=False,
            label="and the GPU-only allocations of the recording")  # a line: a block held for one entry still shows
    # (not antialiased: over the band, its edge pixels would blend orange with vermillion, a colour of neither)
    ax.axvline(report.twin.measured, color=OKABE_ITO["black"], lw=0.8, ls=":")
    ax.annotate("measured step", (report.twin.measured, 0), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlim(0, max(len(xs) - 1, 1))
    ax.set_ylim(0, 1.15 * max(float((before + during).max()), 1.0))
    ax.set_xlabel("trace entry (allocations, frees, segments)")
    ax.set_ylabel("MiB")
    fig.legend(fontsize=8, loc="outside lower center", ncols=2)
    if title:
        ax.set_title(title)
    return fig
