"""Figures of a profiled training step.  They only read a :class:`StepProfile`.

Introduced in lesson 03.  Each function returns a ``matplotlib.figure.Figure``
built without ``pyplot``, so no global figure state leaks between cells; a
notebook displays the returned figure as PNG.  Sizes are shown in MiB.
"""

from __future__ import annotations

import bisect

from matplotlib.figure import Figure

from ..record import CATEGORIES, CATEGORY_COLORS as _COLORS, StepProfile
from ..units import MiB


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


# -- the caching allocator (lesson 06) ------------------------------------------------

def plot_reserved(replays, labels: list[str], marks: dict[str, int] | None = None,
                  title: str | None = None) -> Figure:
    """Allocated (solid) and reserved (dashed) memory after every allocation-log entry.

    Args:
        replays: :class:`helpers.allocator.Replay` objects (e.g. one per allocator setting).
        labels: one label per replay.
        marks: vertical lines at log indices, by label (e.g. where a step starts).
        title: figure title.

    Raises:
        ValueError: if ``labels`` and ``replays`` differ in length.
    """
    if len(labels) != len(replays):
        raise ValueError(f"{len(labels)} labels for {len(replays)} replays")
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    for replay, label in zip(replays, labels):
        (line,) = ax.plot([a / MiB for a in replay.allocated], lw=1, label=f"{label}: allocated")
        ax.plot([r / MiB for r in replay.reserved], lw=1.5, ls="--", color=line.get_color(),
                label=f"{label}: reserved")
        if replay.failed_at is not None:
            ax.plot([replay.failed_at], [replay.reserved[-1] / MiB if replay.reserved else 0], "x",
                    color=line.get_color(), ms=10, mew=2)
    for text, index in (marks or {}).items():
        ax.axvline(index, color="#555555", lw=0.8, ls=":")
        ax.text(index, 1.0, f" {text}", transform=ax.get_xaxis_transform(), fontsize=8, color="#555555",
                va="bottom")
    ax.set_xlabel("allocation-log entry (each tensor allocated or freed)")
    ax.set_ylabel("MiB")
    ax.set_ylim(0, None)
    ax.legend(fontsize=8, loc="upper left")
    if title:
        fig.suptitle(title)
    return fig


def _close(open_ranges: dict, addr: int, size: int, t: int, done: list) -> None:
    """Close the parts of the open address ranges that [addr, addr + size) covers, at time t."""
    for (lo, hi), start in list(open_ranges.items()):
        if hi <= addr or lo >= addr + size:
            continue
        del open_ranges[(lo, hi)]
        done.append((max(lo, addr), min(hi, addr + size), start, t))
        if lo < addr:
            open_ranges[(lo, addr)] = start
        if hi > addr + size:
            open_ranges[(addr + size, hi)] = start


def memory_map(trace: list[dict], segments: list[dict] | None = None) -> tuple[list, list]:
    """Reserved ranges and allocated blocks over time, from an allocator trace.

    Args:
        trace: entries with ``action``, ``addr`` and ``size`` (and optionally
            ``serial``), as :attr:`helpers.allocator.CachingAllocator.trace` or
            ``torch.cuda.memory._snapshot()["device_traces"][0]`` give them.
        segments: the snapshot's ``segments`` at the end of the trace, so that
            segments and blocks that existed before recording began are shown
            from the start (a real trace only holds what happened while it was
            recorded).

    Returns:
        ``(reserved, blocks)``: ``reserved`` as ``(lo, hi, t0, t1)`` address
        ranges held from the driver between trace entries ``t0`` and ``t1``;
        ``blocks`` as ``(lo, hi, t0, t1, serial)``, one per allocation.
    """
    end = len(trace)
    held: dict = {}
    live: dict = {}
    reserved, blocks = [], []
    for t, e in enumerate(trace):
        action, addr, size = e["action"], e["addr"], e["size"]
        if action in ("segment_alloc", "segment_map"):
            held[(addr, addr + size)] = t
        elif action in ("segment_free", "segment_unmap"):
            if not any(lo < addr + size and hi > addr for lo, hi in held):
                held[(addr, addr + size)] = 0  # reserved before the trace began
            _close(held, addr, size, t, reserved)
        elif action == "alloc":
            live[addr] = (addr + size, t, e.get("serial"))
        elif action == "free_completed":
            hi, t0, serial = live.pop(addr, (addr + size, 0, e.get("serial")))
            blocks.append((addr, hi, t0, t, serial))
    for seg in segments or []:
        lo, hi = seg["address"], seg["address"] + seg["total_size"]
        if not any(a < hi and b > lo for a, b in held):
            held[(lo, hi)] = 0
        for b in seg.get("blocks", []):
            if b.get("state") == "active_allocated" and b["address"] not in live:
                live[b["address"]] = (b["address"] + b["size"], 0, b.get("serial"))
    reserved += [(lo, hi, t0, end) for (lo, hi), t0 in held.items()]
    blocks += [(lo, hi, t0, end, serial) for lo, (hi, t0, serial) in live.items()]
    return reserved, blocks


def plot_memory_map(trace: list[dict], categories: dict[int, str] | None = None,
                    segments: list[dict] | None = None, title: str | None = None) -> Figure:
    """The allocator's segments and blocks over time, like memory_viz's "Allocator State History".

    Time (trace entries) runs left to right; each segment is a band of
    addresses (gaps between segments removed, segments in address order).
    Grey: reserved but free; coloured: allocated blocks, by category when
    ``categories`` maps the trace's ``serial`` to one
    (:data:`helpers.record.CATEGORIES`).  The same function draws a
    simulated trace and a real one from ``torch.cuda.memory._snapshot()``.

    Args:
        trace: see :func:`memory_map`.
        categories: storage serial -> category (e.g. from ``StepProfile.storages``).
        segments: see :func:`memory_map`.
        title: figure title.

    Raises:
        ValueError: for a trace with nothing reserved or allocated in it.
    """
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    reserved, blocks = memory_map(trace, segments)
    ranges = sorted([(lo, hi) for lo, hi, *_ in reserved] + [(lo, hi) for lo, hi, *_ in blocks])
    if not ranges:
        raise ValueError("the trace has no segment and no allocation to draw")
    merged: list[list[int]] = []  # address ranges ever used, disjoint
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    gap = 0.03 * sum(hi - lo for lo, hi in merged) / len(merged)  # 3% of the height, in all, between segments
    offsets, y = [], 0.0
    for lo, hi in merged:
        offsets.append((lo, hi, y))
        y += hi - lo + gap
    starts = [lo for lo, _, _ in offsets]

    def place(addr: int) -> float:
        lo, _, base = offsets[bisect.bisect_right(starts, addr) - 1]
        return (base + addr - lo) / MiB

    def rect(lo, hi, t0, t1):
        y0, y1 = place(lo), place(lo) + (hi - lo) / MiB
        return [(t0, y0), (t1, y0), (t1, y1), (t0, y1)]

    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.add_subplot()
    ax.add_collection(PolyCollection([rect(*r) for r in reserved], facecolors="#f4f4f4", edgecolors="#a0a0a0",
                                     linewidths=0.3))
    names = [categories.get(s, "other") if categories else "activations" for *_, s in blocks]
    ax.add_collection(PolyCollection([rect(lo, hi, t0, t1) for lo, hi, t0, t1, _ in blocks],
                                     facecolors=[_COLORS[n] for n in names], edgecolors="none"))
    ax.set_xlim(0, max(len(trace), 1))
    ax.set_ylim(0, y / MiB)
    ax.set_xlabel("allocator event (allocations, frees, segments)")
    ax.set_ylabel("address: segments stacked (MiB)")
    shown = [n for n in CATEGORIES if n in names] if categories else []
    ax.legend(handles=[Patch(facecolor="#f4f4f4", edgecolor="#a0a0a0", label="reserved, free")] +
              [Patch(color=_COLORS[n], label=n.replace("_", " ")) for n in shown] +
              ([] if categories else [Patch(color=_COLORS["activations"], label="allocated")]),
              fontsize=8, loc="upper left")
    if title:
        ax.set_title(title)
    return fig


# -- lesson 05 --

def plot_bytes_per_parameter(bars: dict[str, list[tuple[str, str, float]]], title: str | None = None,
                             marks: dict[str, float] | None = None, mark_label: str = "measured") -> Figure:
    """Horizontal bars of bytes per parameter, each stacked from labelled parts (lesson 05).

    One bar per optimizer or per bytes-per-parameter convention, top to bottom
    in the order of ``bars``; each part is coloured by its category
    (:data:`helpers.record.CATEGORY_COLORS`) and, where it is wide enough,
    labelled inside with its text and size.  Optional marks (black diamonds)
    show a measured total beside a convention's bar.

    Args:
        bars: bar label -> its parts, left to right, each
            ``(category, text, bytes per parameter)``.
        title: figure title.
        marks: bar label -> a measured total, in bytes per parameter.
        mark_label: the legend's name for the marks.

    Returns:
        The figure (x axis: bytes per parameter).

    Raises:
        ValueError: for an unknown category, a negative part, or a mark for no bar.
    """
    marks = marks or {}
    for label, parts in bars.items():
        for category, _, size in parts:
            if category not in _COLORS:
                raise ValueError(f"unknown category {category!r} in bar {label!r}; use one of {', '.join(_COLORS)}")
            if size < 0:
                raise ValueError(f"negative part {size} in bar {label!r}")
    if set(marks) - set(bars):
        raise ValueError(f"marks for no bar: {', '.join(sorted(set(marks) - set(bars)))}")
    labels = list(bars)
    fig = Figure(figsize=(9, 0.55 * len(labels) + 1.6), layout="constrained")
    ax = fig.add_subplot()
    seen = set()
    for row, label in enumerate(labels):
        left = 0.0
        for category, text, size in bars[label]:
            name = category.replace("_", " ")
            ax.barh(row, size, left=left, color=_COLORS[category], edgecolor="white", linewidth=0.8,
                    label=None if category in seen else name)
            seen.add(category)
            if size >= 1.5:
                ax.text(left + size / 2, row, f"{text} {size:g}" if text else f"{size:g}", ha="center",
                        va="center", fontsize=8)
            left += size
        ax.text(left + (0.6 if label in marks else 0.2), row, f"{left:g}", va="center", fontsize=9,
                fontweight="bold")
    if marks:
        rows = [labels.index(label) for label in marks]
        ax.plot(list(marks.values()), rows, "D", color="black", markersize=6, label=mark_label)
    ax.set_yticks(range(len(labels)), labels, fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("bytes per parameter")
    ax.set_xlim(0, max(sum(s for *_, s in parts) for parts in bars.values()) * 1.12)
    fig.legend(fontsize=8, loc="outside lower center", ncols=5, frameon=False)
    if title:
        ax.set_title(title)
    return fig
