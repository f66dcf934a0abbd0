"""Figures of a profiled training step.  They only read a :class:`StepProfile`.

Introduced in lesson 03.  Each function returns a ``matplotlib.figure.Figure``
built without ``pyplot``, so no global figure state leaks between cells; a
notebook displays the returned figure as PNG.  Sizes are shown in MiB.
"""

from __future__ import annotations

import bisect

from matplotlib.figure import Figure

from ..record import CATEGORIES, CATEGORY_COLORS as _COLORS, OKABE_ITO, StepProfile
from ..units import MiB

#: Line colours, in order, for figures that overlay several steps or settings
#: (Okabe-Ito, as the categories' colours).
_LINES = [OKABE_ITO[name] for name in ("blue", "vermillion", "bluish green", "reddish purple", "orange",
                                       "sky blue", "black")]


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
    for i, (profile, label) in enumerate(zip(profiles, labels)):
        xs = [e.index for e in profile.events]
        ys = [e.allocated_bytes / MiB for e in profile.events]
        (line,) = ax.plot(xs, ys, label=label, drawstyle="steps-post", color=_LINES[i % len(_LINES)])
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
        ax.bar(labels, heights, bottom=bottoms, color=_COLORS[name], label=name.replace("_", " "),
               edgecolor="white", linewidth=0.5)  # a thin white line between neighbours
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
    for i, (replay, label) in enumerate(zip(replays, labels)):
        (line,) = ax.plot([a / MiB for a in replay.allocated], lw=1, label=f"{label}: allocated",
                          color=_LINES[i % len(_LINES)])
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


#: Blocks that the engine did not label: the untraced first step's tensors.
FIRST_STEP = "first step"
_MAP_COLORS = {**_COLORS, FIRST_STEP: OKABE_ITO["sky blue"]}
#: Categories that live the whole step (or training): drawn at least
#: ``min_height`` high in :func:`plot_memory_map`, so that they can be seen.
_LONG_LIVED = ("parameters", "gradients", "optimizer_states")


def plot_memory_map(trace: list[dict], categories: dict[int, str] | None = None,
                    segments: list[dict] | None = None, title: str | None = None,
                    first_step_until: int | None = None, min_height: float = 0.008) -> Figure:
    """The allocator's segments and blocks over time, like memory_viz's "Allocator State History".

    Time (trace entries) runs left to right; each segment is a band of
    addresses (gaps between segments removed, segments in address order).
    Grey: reserved but free; coloured: allocated blocks, by category when
    ``categories`` maps the trace's ``serial`` to one
    (:data:`helpers.record.CATEGORIES`).  The same function draws a
    simulated trace and a real one from ``torch.cuda.memory._snapshot()``.

    Blocks of the long-lived categories (parameters, gradients, optimizer
    states) are drawn at least ``min_height`` of the axis high, so that a
    momentum buffer of a few MiB in a map of GiB is a visible bar, not a
    one-pixel line: those blocks' heights are not to scale (their positions
    are).

    Args:
        trace: see :func:`memory_map`.
        categories: storage serial -> category (e.g. from ``StepProfile.storages``).
        segments: see :func:`memory_map`.
        title: figure title.
        first_step_until: trace position (:meth:`helpers.allocator.Replay.trace_position`)
            where the traced step begins; blocks allocated before it that
            ``categories`` calls "other" are the untraced first step's
            tensors, and are drawn in their own colour ("first step").
        min_height: the smallest height of a long-lived block, as a fraction
            of the axis (0 draws every block to scale).

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
    if first_step_until is not None:
        names = [FIRST_STEP if n == "other" and b[2] < first_step_until else n for n, b in zip(names, blocks)]
    floor = min_height * y
    short = [(rect(*b[:4]), n) for b, n in zip(blocks, names) if n not in _LONG_LIVED]
    long_lived = [(rect(lo, max(hi, lo + floor), t0, t1), n)
                  for (lo, hi, t0, t1, _), n in zip(blocks, names) if n in _LONG_LIVED]
    for group in (short, long_lived):  # long-lived blocks on top, where they widen
        if group:
            ax.add_collection(PolyCollection([r for r, _ in group], facecolors=[_MAP_COLORS[n] for _, n in group],
                                             edgecolors="none"))
    ax.set_xlim(0, max(len(trace), 1))
    ax.set_ylim(0, y / MiB)
    ax.set_xlabel("allocator event (allocations, frees, segments)")
    ax.set_ylabel("address: segments stacked (MiB)")
    shown = [n for n in (FIRST_STEP, *CATEGORIES) if n in names] if categories else []
    ax.legend(handles=[Patch(facecolor="#f4f4f4", edgecolor="#a0a0a0", label="reserved, free")] +
              [Patch(color=_MAP_COLORS[n], label=n.replace("_", " ")) for n in shown] +
              ([] if categories else [Patch(color=_COLORS["activations"], label="allocated")]),
              fontsize=8, loc="upper left")
    if title:
        ax.set_title(title)
    return fig


# -- lesson 05a --

def plot_bytes_per_parameter(bars: dict[str, list[tuple[str, str, float]]], title: str | None = None,
                             marks: dict[str, float] | None = None, mark_label: str = "measured") -> Figure:
    """Horizontal bars of bytes per parameter, each stacked from labelled parts (lesson 05a).

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


# -- lesson 06 --

def plot_reserved_bars(labels: list[str], tensors: list[int], default, expandable,
                       title: str | None = None) -> Figure:
    """Per step: its tensors' peak, and peak allocated and reserved under two allocator settings.

    One group of horizontal bars per step, in MiB: the tensors at the peak
    (what the engine counts, ``StepProfile.peak_allocated_bytes``), peak
    allocated (unsplit rests included) and peak reserved of the allocator
    model with the default settings, and peak reserved with
    ``expandable_segments:True``.  Each default reserved bar is labelled with
    its ratio to peak allocated.

    Args:
        labels: one label per step.
        tensors: bytes of tensors at each step's peak.
        default, expandable: one :class:`helpers.allocator.Replay` per step
            (default settings, then ``expandable_segments:True``).
        title: figure title.

    Raises:
        ValueError: if the four lists differ in length.
    """
    if not len(labels) == len(tensors) == len(default) == len(expandable):
        raise ValueError(f"{len(labels)} labels, {len(tensors)} peaks, {len(default)} and "
                         f"{len(expandable)} replays: give one of each per step")
    bars = [("tensors at the peak", [t / MiB for t in tensors], OKABE_ITO["grey"]),
            ("peak allocated", [r.peak_allocated / MiB for r in default], OKABE_ITO["sky blue"]),
            ("peak reserved (defaults)", [r.peak_reserved / MiB for r in default], OKABE_ITO["blue"]),
            ("peak reserved (expandable_segments)", [r.peak_reserved / MiB for r in expandable],
             OKABE_ITO["vermillion"])]
    fig = Figure(figsize=(9, 1.0 + 1.1 * len(labels)), layout="constrained")
    ax = fig.add_subplot()
    height = 0.8 / len(bars)
    for k, (name, values, colour) in enumerate(bars):
        ys = [i + (k - (len(bars) - 1) / 2) * height for i in range(len(labels))]
        ax.barh(ys, values, height=height, color=colour, label=name)
        if name == "peak reserved (defaults)":
            for y, value, r in zip(ys, values, default):
                ax.annotate(f"×{r.peak_reserved / r.peak_allocated:.2f}", (value, y), textcoords="offset points",
                            xytext=(3, 0), va="center", fontsize=8)
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()  # the first step on top
    ax.set_xlabel("MiB")
    ax.set_xlim(0, 1.1 * max(max(v) for _, v, _ in bars))
    fig.legend(fontsize=8, loc="outside lower center", ncols=4)  # below the axis: no bar hidden
    if title:
        ax.set_title(title)
    return fig


# -- lesson 07 --

#: How a sharded step's categories (:data:`helpers.fsdp.SHARDED_CATEGORIES`) are drawn: the model
#: states and the rest in their :data:`helpers.record.CATEGORY_COLORS` colour; what FSDP gathers or
#: reduces in the colour of what it is (parameters, gradients), hatched.
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
        style = dict(color=_COLORS[colour], hatch=hatch, edgecolor="white" if hatch else None,
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
    """Memory of rank 0 against the world size N, one stacked bar per N (lesson 07).

    Each bar stacks the rank's sharded parameters, gradients and optimizer states
    and, on top, the gathered parameters and all-gather buffers at the moment of
    the step when together they are most (from ``ShardedStep.timeline``);
    activations are left out.  Sizes
    in MiB.

    Args:
        steps: ``{N: ShardedStep}`` (:func:`helpers.fsdp.sharded_step` results).
        lines: formulas to draw over the bars, ``{label: {N: bytes}}``.
        title: figure title.
    """
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
        ax.plot(xs, [values[x] / MiB for x in xs], next(styles), color="black", marker="o", markersize=3,
                label=label)
    ax.set_xlabel("world size N (ranks)")
    ax.set_ylabel("rank 0, MiB")
    ax.set_xticks(list(steps))
    ax.legend(fontsize=8, loc="upper right")
    if title:
        ax.set_title(title)
    return fig


def plot_sharded_timeline(steps: list, labels: list[str], title: str | None = None) -> Figure:
    """The FSDP timeline of sharded steps (lesson 07): one panel per step, the
    gathered (unsharded) parameters and the all-gather buffers, stacked, after
    each allocation or free of the measured step (``ShardedStep.timeline``), the
    backward pass shaded and the phases named.  Sizes in MiB.

    Args:
        steps: :class:`helpers.fsdp.ShardedStep` results to compare.
        labels: one label per step.
        title: figure title.

    Raises:
        ValueError: if ``labels`` and ``steps`` differ in length.
    """
    if len(labels) != len(steps):
        raise ValueError(f"{len(labels)} labels for {len(steps)} steps")
    fig = Figure(figsize=(9, 0.8 + 1.7 * len(steps)), layout="constrained")
    axes = fig.subplots(len(steps), 1, squeeze=False)[:, 0]
    top = max(t[2] + t[3] for s in steps for t in s.timeline) / MiB * 1.3
    for ax, s, label in zip(axes, steps, labels):
        x = range(len(s.timeline))
        ax.stackplot(x, [t[2] / MiB for t in s.timeline], [t[3] / MiB for t in s.timeline],
                     colors=[_COLORS["parameters"]] * 2, hatch=["///", "..."], edgecolor="white",
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
    """One horizontal bar per sharded step: rank 0's memory at its peak, stacked by
    the categories of :data:`helpers.fsdp.SHARDED_CATEGORIES` (``ShardedStep.at_peak``),
    the peak written at the end (lesson 07).  Sizes in MiB.

    Args:
        steps: :class:`helpers.fsdp.ShardedStep` results to compare.
        labels: one label per step.
        title: figure title.

    Raises:
        ValueError: if ``labels`` and ``steps`` differ in length.
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


# -- lesson 08 --

#: The parts of a transformer block, which are not the step's categories, take
#: the Okabe-Ito colours (:data:`helpers.record.OKABE_ITO`) in this order.
_OKABE_ITO = tuple(OKABE_ITO[name] for name in ("blue", "orange", "bluish green", "vermillion", "sky blue",
                                                "reddish purple", "yellow", "black"))
_UNITS = {"MiB": MiB, "GiB": 2**30}


def plot_stacked_parts(columns: dict[str, dict[str, int]], unit: str = "MiB", title: str | None = None,
                       order: tuple[str, ...] = ()) -> Figure:
    """Horizontal bars, one per column, each stacked from its parts.

    Args:
        columns: ``{bar label: {part name: bytes}}``; a part has one colour in
            every bar (Okabe-Ito); parts of zero bytes are left out.
        unit: ``"MiB"`` or ``"GiB"`` (2**20 or 2**30 bytes), the x axis.
        title: the figure's title.
        order: part names in the order to stack them; the i-th name gets the
            palette's i-th colour, so that figures drawn with the same ``order``
            colour a part alike.  Parts not named come after, in the order they
            first appear, with the colours no named part took.

    Returns:
        A ``matplotlib.figure.Figure``; the total of each bar is written at its end.

    Raises:
        ValueError: for another unit, or more parts than the palette's 8 colours.
    """
    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {', '.join(_UNITS)}, got {unit!r}")
    present = {p for c in columns.values() for p, n in c.items() if n}
    parts = [p for p in order if p in present]
    parts += [p for p in dict.fromkeys(p for c in columns.values() for p in c) if p in present and p not in parts]
    if len(parts) > len(_OKABE_ITO) or len(order) > len(_OKABE_ITO):
        raise ValueError(f"at most {len(_OKABE_ITO)} parts, got {max(len(parts), len(order))}")
    colours = {p: _OKABE_ITO[i] for i, p in enumerate(order)}
    spare = iter(c for c in _OKABE_ITO if c not in colours.values())
    colours.update({p: next(spare) for p in parts if p not in colours})
    fig = Figure(figsize=(10, max(1.4 + 0.55 * len(columns), 0.5 + 0.25 * len(parts))), layout="constrained")
    ax = fig.add_subplot()
    labels = list(columns)[::-1]  # the first column on top
    totals = [sum(columns[c].values()) / _UNITS[unit] for c in labels]
    for part in parts:
        colour = colours[part]
        left = [sum(n for p, n in columns[c].items() if p in parts[:parts.index(part)]) / _UNITS[unit] for c in labels]
        ax.barh(labels, [columns[c].get(part, 0) / _UNITS[unit] for c in labels], left=left, color=colour,
                label=part, height=0.6)
    for y, total in enumerate(totals):
        ax.text(total, y, f" {total:,.1f}", va="center", fontsize=9)
    ax.set_xlim(0, max(totals) * 1.12)
    ax.set_xlabel(f"memory ({unit})")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    if title:
        ax.set_title(title)
    return fig


def plot_memory_vs_seq(seqs: list[int], series: dict[str, list[int]], unit: str = "GiB",
                       levels: dict[str, int] | None = None, title: str | None = None) -> Figure:
    """Memory against sequence length, both axes logarithmic.

    A line of slope 1 grows linearly with the sequence, one of slope 2 with its
    square (the attention scores).

    Args:
        seqs: the sequence lengths (tokens), the x axis.
        series: ``{label: bytes at each of seqs}``, one line with markers each.
        unit: ``"MiB"`` or ``"GiB"`` (2**20 or 2**30 bytes), the y axis.
        levels: ``{label: bytes}`` drawn as dashed horizontal lines (a figure
            that does not depend on the sequence, such as the model states).
        title: the figure's title.

    Returns:
        A ``matplotlib.figure.Figure``.

    Raises:
        ValueError: for another unit, or a series whose length is not ``len(seqs)``.
    """
    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {', '.join(_UNITS)}, got {unit!r}")
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for (label, values), colour in zip(series.items(), _OKABE_ITO):
        if len(values) != len(seqs):
            raise ValueError(f"series {label!r} has {len(values)} values for {len(seqs)} sequence lengths")
        ax.plot(seqs, [v / _UNITS[unit] for v in values], marker="o", color=colour, label=label)
    for (label, value), colour in zip((levels or {}).items(), _OKABE_ITO[::-1]):
        ax.axhline(value / _UNITS[unit], color=colour, linestyle="--", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(seqs, [f"{s // 1024}k" if s >= 1024 else str(s) for s in seqs])
    ax.set_xlabel("sequence length s (tokens, log scale)")
    ax.set_ylabel(f"memory ({unit}, log scale)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return fig


# -- lesson 05b --

def plot_accumulation(profiles: list[StepProfile], labels: list[str], unit: str = "GiB",
                      title: str | None = None) -> Figure:
    """Gradient accumulation: one bar per way of splitting a batch, stacked by category at the peak.

    Each bar is one step (e.g. ``profile_step(..., accumulation_steps=k)`` with
    micro-batches of b), stacked by the categories of
    :data:`helpers.record.CATEGORIES` in their colours, its total written on
    top.  Read left to right, the activations shrink with the micro-batch while
    the parameters and the optimizer states stay, and from two micro-batches on
    the whole gradient buffer is allocated at the peak (lesson 05b).

    Args:
        profiles: the steps, in the order of the bars.
        labels: one label per profile, such as ``"4 × 32"``.
        unit: ``"MiB"`` or ``"GiB"`` (2**20 or 2**30 bytes), the y axis.
        title: figure title.

    Returns:
        The figure.

    Raises:
        ValueError: for no profile, labels that do not match the profiles, or another unit.
    """
    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {', '.join(_UNITS)}, got {unit!r}")
    if not profiles or len(labels) != len(profiles):
        raise ValueError(f"{len(labels)} labels for {len(profiles)} profiles (at least one)")
    scale = _UNITS[unit]
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    bottoms = [0.0] * len(profiles)
    for name in CATEGORIES:
        heights = [p.categories[name] / scale for p in profiles]
        ax.bar(labels, heights, bottom=bottoms, color=_COLORS[name], label=name.replace("_", " "),
               edgecolor="white", linewidth=0.5, width=0.6)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for i, p in enumerate(profiles):
        ax.annotate(f"{p.peak_allocated_bytes / scale:.2f}", (i, bottoms[i]), textcoords="offset points",
                    xytext=(0, 3), ha="center", fontsize=9)
    ax.set_ylim(0, 1.1 * max(bottoms))
    ax.set_ylabel(f"allocated at the step's peak ({unit})")
    ax.set_xlabel("micro-batches × samples each")
    ax.legend(fontsize=8, loc="upper right", frameon=False)
    if title:
        ax.set_title(title)
    return fig


def plot_inference_and_leaks(forward: dict[str, dict[str, int]], loops: dict[str, list[int]],
                             unit: str = "GiB", title: str | None = None) -> Figure:
    """Two panels (lesson 05b): a forward pass's peak per grad mode, and loops that leak or not.

    Left, grouped bars: for each configuration, the peak of one forward pass
    and its loss under each grad mode (``helpers.loops.forward_peak``), its
    value written on the bar.  Right, one line per loop: the bytes still
    allocated after each iteration (``helpers.loops.loop_memory``); a loop that
    keeps a graph climbs, the others stay flat.  Lines that coincide are told
    apart by their markers and dashes; their colours (Okabe-Ito) are not the
    bars' colours, as a loop is not a grad mode.

    Args:
        forward: ``{configuration: {grad mode: bytes}}``, every configuration
            with the same grad modes, in the same order.
        loops: ``{loop: bytes after each iteration}``.
        unit: ``"MiB"`` or ``"GiB"`` (2**20 or 2**30 bytes), both y axes.
        title: figure title.

    Returns:
        The figure, with two axes.

    Raises:
        ValueError: for another unit, an empty ``forward`` or ``loops``, or
            configurations whose grad modes differ.
    """
    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {', '.join(_UNITS)}, got {unit!r}")
    if not forward or not loops:
        raise ValueError("forward and loops must each hold at least one entry")
    modes = list(next(iter(forward.values())))
    for config, peaks in forward.items():
        if list(peaks) != modes:
            raise ValueError(f"configuration {config!r} has grad modes {list(peaks)}, the first has {modes}")
    scale = _UNITS[unit]
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax, ax2 = fig.subplots(1, 2, width_ratios=(1.15, 1))
    width = 0.8 / len(modes)
    for j, (mode, colour) in enumerate(zip(modes, _LINES)):
        xs = [i + (j - (len(modes) - 1) / 2) * width for i in range(len(forward))]
        values = [peaks[mode] / scale for peaks in forward.values()]
        bars = ax.bar(xs, values, width=width, color=colour, label=mode, edgecolor="white", linewidth=0.5)
        ax.bar_label(bars, fmt="%.2f", fontsize=7, padding=2)
    ax.set_xticks(range(len(forward)), list(forward), fontsize=8)
    ax.set_ylabel(f"peak of the forward pass and loss ({unit})")
    ax.set_ylim(0, 1.15 * max(v for peaks in forward.values() for v in peaks.values()) / scale)
    ax.legend(fontsize=8, loc="upper left", frameon=False)
    ax.set_title("one forward pass: training vs inference", fontsize=10)
    styles = [("o", "-", 9), ("s", "--", 6), ("D", "-", 8), ("^", ":", 5), ("v", "--", 4)]
    for k, (loop, after) in enumerate(loops.items()):
        marker, dash, size = styles[k % len(styles)]
        ax2.plot(range(1, len(after) + 1), [b / scale for b in after], marker=marker, linestyle=dash,
                 markersize=size, color=_LINES[(k + len(modes)) % len(_LINES)], label=loop)
    longest = max(len(after) for after in loops.values())
    ax2.set_xticks(range(1, longest + 1))
    ax2.set_xlabel("iteration")
    ax2.set_ylabel(f"still allocated after the iteration ({unit})")
    ax2.set_ylim(0, 1.1 * max(max(after) for after in loops.values()) / scale)
    ax2.legend(fontsize=8, loc="upper left", frameon=False)
    ax2.set_title("a loop, iteration after iteration", fontsize=10)
    if title:
        fig.suptitle(title)
    return fig


# -- lesson 09 --

def plot_finetune_peaks(profiles: dict[str, StepProfile], cards: dict[str, int], unit: str = "GiB",
                        title: str | None = None) -> Figure:
    """One horizontal bar per fine-tuning setup: its step's peak, stacked by category, against GPU cards.

    Each bar is a step's peak allocated memory by category (the colours of
    every lesson, :data:`helpers.record.CATEGORY_COLORS`), with its total and
    where the peak is ("at optimizer.step()" or "in backward") at its end.
    Each card is a dashed vertical line at its memory less the assumed 1 GiB
    overhead (:data:`helpers.gpus.CUDA_OVERHEAD_BYTES`): a bar that ends left of
    a line fits that card by the rule of every widget (:func:`helpers.gpus.judge`).

    Args:
        profiles: ``{label: StepProfile}``, the first drawn on top.
        cards: ``{card name: bytes}``, e.g. a selection of :data:`helpers.gpus.GPU_CARDS`.
        unit: ``"MiB"`` or ``"GiB"`` (2**20 or 2**30 bytes), the x axis.
        title: the figure's title.

    Returns:
        A ``matplotlib.figure.Figure``.

    Raises:
        ValueError: for another unit, no profiles, or more than four cards.
    """
    from ..gpus import CUDA_OVERHEAD_BYTES

    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {', '.join(_UNITS)}, got {unit!r}")
    if not profiles:
        raise ValueError("give at least one profile")
    if len(cards) > 4:
        raise ValueError(f"at most 4 cards, got {len(cards)}")
    scale = _UNITS[unit]
    labels = list(profiles)[::-1]  # the first on top
    fig = Figure(figsize=(11, 1.9 + 0.55 * len(labels)), layout="constrained")
    ax = fig.add_subplot()
    for category in CATEGORIES:
        left = [sum(profiles[k].categories.get(c, 0) for c in CATEGORIES[:CATEGORIES.index(category)]) / scale
                for k in labels]
        values = [profiles[k].categories.get(category, 0) / scale for k in labels]
        if any(values):
            ax.barh(labels, values, left=left, color=_COLORS[category], height=0.6,
                    label=category.replace("_", " "))
    for y, k in enumerate(labels):
        p = profiles[k]
        where = "at optimizer.step()" if p.peak.label == "optimizer.step()" else "in backward" \
            if "backward" in p.peak.label else f"at {p.peak.label}"
        ax.text(p.peak_allocated_bytes / scale, y, f" {p.peak_allocated_bytes / scale:,.1f} {where}", va="center",
                fontsize=8)
    top = max(max(p.peak_allocated_bytes for p in profiles.values()), *cards.values()) / scale
    for i, ((name, capacity), style) in enumerate(zip(cards.items(), ("--", "-.", ":", (0, (5, 1))))):
        x = (capacity - CUDA_OVERHEAD_BYTES) / scale
        ax.axvline(x, color=OKABE_ITO["black"], linestyle=style, linewidth=1)
        maker, _, size = name.rpartition(" ")[0].rpartition(" ")
        ax.annotate(f"{maker}\n{size} {name.rpartition(' ')[2]}", xy=(x, 1), xycoords=("data", "axes fraction"),
                    xytext=(0, 2 + 22 * (i % 2)), textcoords="offset points", ha="center", va="bottom",
                    fontsize=7.5)  # every other label higher: neighbouring cards' labels do not overlap
    ax.set_xlim(0, top * 1.45)
    ax.set_ylim(-0.6, len(labels) - 0.4)
    ax.set_xlabel(f"peak allocated ({unit}); dashed lines: each card's memory less the assumed 1 GiB overhead")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    if title:
        ax.set_title(title, pad=52)
    return fig


def plot_peak_vs_tokens(peaks: dict[int, int], line, cards: dict[str, int], answers: dict[str, int],
                        unit: str = "GiB", title: str | None = None) -> Figure:
    """A step's peak against its token count (linear axes): the traced points, their fitted line, and cards.

    Args:
        peaks: ``{tokens: peak allocated bytes}`` of traced steps.
        line: the :class:`helpers.batch.AffineFit` through two of them (bytes against tokens).
        cards: ``{card name: bytes}``; each is a dashed horizontal line at its
            memory less the assumed 1 GiB overhead (:data:`helpers.gpus.CUDA_OVERHEAD_BYTES`).
        answers: ``{card name: tokens}``, the longest sequence that fits each
            card, marked on its line.
        unit: ``"MiB"`` or ``"GiB"``, the y axis.
        title: the figure's title.

    Returns:
        A ``matplotlib.figure.Figure``.

    Raises:
        ValueError: for another unit, or fewer than two points.
    """
    from ..gpus import CUDA_OVERHEAD_BYTES

    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {', '.join(_UNITS)}, got {unit!r}")
    if len(peaks) < 2:
        raise ValueError("give at least two traced points")
    scale = _UNITS[unit]
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    right = max(*peaks, *answers.values()) * 1.08
    ax.plot([0, right], [line.predict(0) / scale, line.predict(right) / scale], color=_LINES[0], linewidth=1.2,
            label="the line through the first two traces")
    xs = sorted(peaks)
    ax.plot(xs, [peaks[x] / scale for x in xs], "o", color=_LINES[0], markersize=7, label="traced steps")
    for (name, capacity), colour in zip(cards.items(), _LINES[1:]):
        y = (capacity - CUDA_OVERHEAD_BYTES) / scale
        ax.axhline(y, color=colour, linestyle="--", linewidth=1)
        ax.text(0.01 * right, y, f"{name} less 1 GiB", va="bottom", fontsize=8, color="black")
        if name in answers:
            ax.plot([answers[name]], [peaks.get(answers[name], line.predict(answers[name])) / scale], "D",
                    color=colour, markersize=8)
            ax.annotate(f"{answers[name]:,} tokens", (answers[name], y), xytext=(-4, -14),
                        textcoords="offset points", ha="right", fontsize=8)
    ax.set_xlim(0, right)
    ax.set_ylim(0, max(max(cards.values()) / scale, max(peaks.values()) / scale) * 1.08)
    ax.set_xlabel("tokens in the batch (batch x sequence length)")
    ax.set_ylabel(f"peak allocated ({unit})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    if title:
        ax.set_title(title)
    return fig


# -- lesson 09 (published figures) --

def plot_published_comparison(comparisons, title: str | None = None) -> Figure:
    """Published real-GPU figures beside the engine's: two bars per row, in GB (10**9 bytes).

    Args:
        comparisons: :class:`helpers.teaching.published.Comparison` objects
            (what ``finetune_comparison`` returns): each gives its row's
            ``source``, ``published`` bytes and ``measured``, and the engine's
            ``after`` (tensors and cuBLAS workspaces; for a card, the judged
            need).
        title: the figure's title.

    Returns:
        A ``matplotlib.figure.Figure``: per row, the published figure (blue)
        and the engine's (vermillion: the whole step's peak plus the card's
        cuBLAS workspaces; for a card, plus the assumed overhead), the
        engine's ratio to it written at the bar's end.
        A card's size (a claim that the step fits it) is drawn hatched.

    Raises:
        ValueError: for no comparisons.
    """
    comparisons = list(comparisons)
    if not comparisons:
        raise ValueError("no comparisons to draw")
    blue, red = OKABE_ITO["blue"], OKABE_ITO["vermillion"]
    fig = Figure(figsize=(10, 1.2 + 0.62 * len(comparisons)), layout="constrained")
    ax = fig.add_subplot()
    rows = comparisons[::-1]  # the first row on top
    ys = range(len(rows))
    height = 0.38
    labelled = set()
    for y, c in zip(ys, rows):
        card = c.row.measured == "card"
        label = "published: the card (a claim)" if card else "published"
        ax.barh(y + height / 2, c.row.published / 1e9, height=height, color="white" if card else blue,
                edgecolor=blue, hatch="//" if card else None, label=None if label in labelled else label)
        labelled.add(label)
        label = "engine"
        ax.barh(y - height / 2, c.after / 1e9, height=height, color=red, label=None if label in labelled else label)
        labelled.add(label)
        ax.text(c.after / 1e9, y - height / 2, f"  {c.ratio:.2f}x", va="center", fontsize=8)
    ax.set_yticks(list(ys), [c.row.source for c in rows], fontsize=8)
    ax.set_xlim(0, max(max(c.row.published, c.after) for c in rows) / 1e9 * 1.15)
    ax.set_xlabel("memory (GB = 10\u2079 bytes)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    if title:
        ax.set_title(title)
    return fig
