"""Figures of a profiled training step.  They only read a :class:`StepProfile`.

Introduced in lesson 03.  Each function returns a ``matplotlib.figure.Figure``
built without ``pyplot``, so no global figure state leaks between cells; a
notebook displays the returned figure as PNG.  Sizes are shown in MiB.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from .accounting import CATEGORIES, CATEGORY_COLORS as _COLORS
from .memory import MiB
from .record import StepProfile


def _phase_spans(profile: StepProfile) -> list[tuple[str, int, int]]:
    """(label, first, last) event indices of the forward, backward, optimizer parts."""
    index = {e.phase: e.index for e in profile.events if e.module is None}
    return [
        ("forward", index["input"], index["loss"]),
        ("backward", index["loss"], index["backward"]),
        ("optimizer", index["backward"], index["zero_grad"]),
    ]


def plot_timeline(profiles: StepProfile | list[StepProfile], labels: list[str] | None = None,
                  title: str | None = None) -> Figure:
    """Allocated memory at every event of one or more steps, peaks marked.

    Args:
        profiles: one profile, or several to overlay (e.g. baseline vs AMP).
        labels: legend labels, one per profile (default: model and backend).
        title: figure title.

    Raises:
        ValueError: if ``labels`` and ``profiles`` differ in length.
    """
    profiles = [profiles] if isinstance(profiles, StepProfile) else list(profiles)
    labels = labels or [f"{p.model}, batch {p.batch_size} ({p.backend})" for p in profiles]
    if len(labels) != len(profiles):
        raise ValueError(f"{len(labels)} labels for {len(profiles)} profiles")
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    for label, first, last in _phase_spans(profiles[0]):
        if label == "backward":
            ax.axvspan(first, last, color="#f0f0f0", zorder=0)
        ax.text((first + last) / 2, 1.0, label, transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=9, color="#555555")
    for profile, label in zip(profiles, labels):
        xs = [e.index for e in profile.events]
        ys = [e.allocated_bytes / MiB for e in profile.events]
        (line,) = ax.plot(xs, ys, label=label, drawstyle="steps-post")
        ax.plot([profile.peak_event], [profile.peak_allocated_bytes / MiB], "o", color=line.get_color())
        ax.annotate(f"peak {profile.peak_allocated_bytes / MiB:.0f} MiB",
                    (profile.peak_event, profile.peak_allocated_bytes / MiB),
                    textcoords="offset points", xytext=(6, 4), fontsize=8, color=line.get_color())
    ax.set_xlabel("event (pre / fwd / bwd of each module, in order)")
    ax.set_ylabel("allocated (MiB)")
    # Room above the highest peak for its label; the legend goes top left, where
    # a step's memory is still low (the forward pass has just begun).
    ax.set_ylim(0, 1.15 * max(p.peak_allocated_bytes for p in profiles) / MiB)
    ax.legend(loc="upper left", fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def plot_categories(profile: StepProfile, title: str | None = None) -> Figure:
    """Allocated memory over the step, stacked by category (parameters, ...)."""
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    xs = [e.index for e in profile.events]
    stacks = [[c[name] / MiB for c in profile.event_categories] for name in CATEGORIES]
    ax.stackplot(xs, stacks, labels=CATEGORIES, colors=[_COLORS[n] for n in CATEGORIES], step="post")
    ax.axvline(profile.peak_event, color="black", lw=0.8, ls="--")
    ax.set_xlabel("event")
    ax.set_ylabel("allocated (MiB)")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or f"{profile.model}, batch {profile.batch_size}: memory by category ({profile.backend})")
    return fig


def plot_stages(profile: StepProfile, title: str | None = None) -> Figure:
    """Bar chart: bytes each top-level stage leaves allocated after its forward."""
    stages = profile.stage_deltas("fwd")
    fig = Figure(figsize=(9, 3.5), layout="constrained")
    ax = fig.add_subplot()
    names = list(stages)
    values = [stages[n] / MiB for n in names]
    bars = ax.bar(names, values, color=_COLORS["activations"])
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_ylabel("added in forward (MiB)")
    ax.set_title(title or f"{profile.model}, batch {profile.batch_size}: memory kept by each stage ({profile.backend})")
    return fig


def plot_peak_bars(profiles: list[StepProfile], labels: list[str], title: str | None = None) -> Figure:
    """One bar per profile: the memory at its peak, stacked by category (lesson 04).

    Args:
        profiles: the steps to compare (e.g. baseline, AMP, checkpointing).
        labels: one label per profile.
        title: figure title.

    Raises:
        ValueError: if ``labels`` and ``profiles`` differ in length.
    """
    if len(labels) != len(profiles):
        raise ValueError(f"{len(labels)} labels for {len(profiles)} profiles")
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    bottoms = [0.0] * len(profiles)
    for name in CATEGORIES:
        heights = [p.categories[name] / MiB for p in profiles]
        ax.bar(labels, heights, bottom=bottoms, color=_COLORS[name], label=name.replace("_", " "))
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for i, p in enumerate(profiles):
        ax.annotate(f"{p.peak_allocated_bytes / MiB:.0f} MiB", (i, bottoms[i]), textcoords="offset points",
                    xytext=(0, 3), ha="center", fontsize=8)
    ax.set_ylabel("allocated at the peak (MiB)")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(fontsize=8, loc="upper right")
    if title:
        ax.set_title(title)
    return fig
