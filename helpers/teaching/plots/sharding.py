"""Figures of FSDP's sharded steps: rank 0's memory by world size, gathered parameters in time, peaks (lesson 07)."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...palette import CATEGORY_COLORS
from ...units import MiB

#: How a sharded step's categories (:data:`helpers.fsdp.SHARDED_CATEGORIES`) are drawn: what FSDP gathers or reduces
#: in the colour of what it is (parameters, gradients), hatched.
_SHARDED_STYLE = {
    "parameters": ("parameters", None, "parameters (shard)"),
    "gradients": ("gradients", None, "gradients (shard)"),
    "optimizer_states": ("optimizer_states", None, "optimizer states (shard)"),
    "unsharded_parameters": ("parameters", "///", "gathered parameters"),
    "all_gather_buffers": ("parameters", "...", "all-gather buffers"),
    "unsharded_gradients": ("gradients", "///", "unsharded gradients"),
    "reduce_scatter_buffers": ("gradients", "...", "reduce-scatter buffers"),
    "other": ("activations", None, "activations and the rest"),
}


def _sharded_bar(ax, x, values: dict[str, int], horizontal: bool, labelled: set[str], **kw) -> float:
    """Stack one bar of a sharded step's categories (bytes) at ``x``; returns its top in MiB."""
    bottom = 0.0
    for name, (colour, hatch, label) in _SHARDED_STYLE.items():
        height = values.get(name, 0) / MiB
        if height <= 0:
            continue
        style = dict(color=CATEGORY_COLORS[colour], hatch=hatch, edgecolor="white" if hatch else None,
                     label=None if label in labelled else label, **kw)
        if horizontal:
            ax.barh(x, height, left=bottom, **style)
        else:
            ax.bar(x, height, bottom=bottom, **style)
        labelled.add(label)
        bottom += height
    return bottom


def plot_sharded_world_sizes(steps: dict, lines: dict[str, dict[int, float]] | None = None,
                             title: str | None = None) -> Figure:
    """Rank 0's memory against the world size N, one stacked bar per N (``{N: ShardedStep}``): sharded model states,
    and on top the gathered parameters and all-gather buffers at their most; ``lines``: ``{label: {N: bytes}}``."""
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    labelled: set[str] = set()
    for n, s in steps.items():
        _, _, gathered, buffers = max(s.timeline, key=lambda t: t[2] + t[3])  # the moment they are most
        _sharded_bar(ax, n, {"parameters": s.parameters, "gradients": s.gradients, "optimizer_states":
                             s.optimizer_states, "unsharded_parameters": gathered, "all_gather_buffers": buffers},
                     False, labelled, width=0.7)
    styles = iter(["-", "--", ":", "-."])
    for label, values in (lines or {}).items():
        xs = sorted(values)
        ax.plot(xs, [values[x] / MiB for x in xs], next(styles), color="black", marker="o", markersize=3, label=label)
    ax.set_xlabel("world size N (ranks)")
    ax.set_ylabel("rank 0, MiB")
    ax.set_xticks(list(steps))
    ax.legend(fontsize=8, loc="upper right")
    if title:
        ax.set_title(title)
    return fig


def plot_sharded_timeline(steps: list, labels: list[str], title: str | None = None) -> Figure:
    """One panel per sharded step: gathered parameters and all-gather buffers after each event, backward shaded.
    Raises ``ValueError`` if ``labels`` and ``steps`` differ in length.
    """
    if len(labels) != len(steps):
        raise ValueError(f"{len(labels)} labels for {len(steps)} steps")
    fig = Figure(figsize=(9, 0.8 + 1.7 * len(steps)), layout="constrained")
    axes = fig.subplots(len(steps), 1, squeeze=False)[:, 0]
    top = max(t[2] + t[3] for s in steps for t in s.timeline) / MiB * 1.3
    for ax, s, label in zip(axes, steps, labels):
        x = range(len(s.timeline))
        ax.stackplot(x, [t[2] / MiB for t in s.timeline], [t[3] / MiB for t in s.timeline],
                     colors=[CATEGORY_COLORS["parameters"]] * 2, hatch=["///", "..."], edgecolor="white",
                     labels=["gathered parameters", "all-gather buffers"])
        start, phases = 0, [t[0] for t in s.timeline]
        for i in range(1, len(phases) + 1):
            if i == len(phases) or phases[i] != phases[start]:
                if phases[start] == "backward":
                    ax.axvspan(start, i - 1, color="0.9", zorder=0)
                ax.text((start + i - 1) / 2, 0.97, phases[start], transform=ax.get_xaxis_transform(),
                        ha="center", va="top", fontsize=8)
                start = i
        ax.set_xlim(0, len(s.timeline) - 1)
        ax.set_ylim(0, top)
        ax.set_ylabel("MiB")
        ax.set_title(label, fontsize=9, loc="left")
    axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[-1].set_xlabel("allocations and frees of the measured step, in order")
    if title:
        fig.suptitle(title)
    return fig


def plot_sharded_peaks(steps: list, labels: list[str], title: str | None = None) -> Figure:
    """One bar per sharded step: rank 0's memory at its peak by :data:`helpers.fsdp.SHARDED_CATEGORIES`.
    Raises ``ValueError`` if ``labels`` and ``steps`` differ in length.
    """
    if len(labels) != len(steps):
        raise ValueError(f"{len(labels)} labels for {len(steps)} steps")
    fig = Figure(figsize=(9, 1.2 + 0.45 * len(steps)), layout="constrained")
    ax = fig.add_subplot()
    labelled: set[str] = set()
    for i, s in enumerate(steps):
        top = _sharded_bar(ax, i, s.at_peak, True, labelled, height=0.65)
        ax.annotate(f"{s.peak_bytes / MiB:,.0f} MiB", (top, i), textcoords="offset points", xytext=(4, 0),
                    va="center", fontsize=8)
    ax.set_yticks(range(len(steps)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("rank 0, allocated at the peak (MiB)")
    ax.set_xlim(0, max(s.peak_bytes for s in steps) / MiB * 1.12)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if title:
        ax.set_title(title)
    return fig
