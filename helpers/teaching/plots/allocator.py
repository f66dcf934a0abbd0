"""Figures of the caching allocator: allocated against reserved, under two settings (lesson 06); its memory map over
time (lesson 06a)."""

from __future__ import annotations

import bisect

from matplotlib.figure import Figure

from ...palette import CATEGORY_COLORS, GREYS, LINE_COLORS, OKABE_ITO, SNAPSHOT_COLORS
from ...record import CATEGORIES
from ...snapshot import SNAPSHOT_CATEGORIES, SnapshotReport
from ...units import MiB


def plot_reserved(replays, labels: list[str], marks: dict[str, int] | None = None,
                  title: str | None = None) -> Figure:
    """Allocated (solid) and reserved (dashed) memory after every log entry of each :class:`helpers.allocator.Replay`;
    ``marks``: vertical lines at log indices, by label.

    Raises:
        ValueError: if ``labels`` and ``replays`` differ in length.
    """
    if len(labels) != len(replays):
        raise ValueError(f"{len(labels)} labels for {len(replays)} replays")
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    for i, (replay, label) in enumerate(zip(replays, labels)):
        (line,) = ax.plot([a / MiB for a in replay.allocated], lw=1, label=f"{label}: allocated",
                          color=LINE_COLORS[i % len(LINE_COLORS)])
        ax.plot([r / MiB for r in replay.reserved], lw=1.5, ls="--", color=line.get_color(), label=f"{label}: reserved")
        if replay.failed_at is not None:
            ax.plot([replay.failed_at], [replay.reserved[-1] / MiB if replay.reserved else 0], "x",
                    color=line.get_color(), ms=10, mew=2)
    for text, index in (marks or {}).items():
        ax.axvline(index, color=GREYS["text"], lw=0.8, ls=":")
        ax.text(index, 1.0, f" {text}", transform=ax.get_xaxis_transform(), fontsize=8, color=GREYS["text"],
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
        trace: entries with ``action``, ``addr``, ``size`` (and ``serial``), as
            :attr:`helpers.allocator.CachingAllocator.trace` or ``torch.cuda.memory._snapshot()["device_traces"][0]``.
        segments: the snapshot's ``segments`` at the trace's end (what existed before recording began).

    Returns:
        ``(reserved, blocks)``: ``(lo, hi, t0, t1)`` ranges held from the driver between entries ``t0`` and ``t1``;
        ``(lo, hi, t0, t1, serial)`` per allocation.
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
#: Categories that live the whole step: drawn at least ``min_height`` high in :func:`plot_memory_map`.
_LONG_LIVED = ("parameters", "gradients", "optimizer_states")


def _stacked_addresses(ranges: list[tuple[int, int]]):
    """Address ranges as bands, gaps removed: ``(rect, height bytes)``, ``rect(lo, hi, t0, t1)`` corners (y in MiB)."""
    merged: list[list[int]] = []  # address ranges ever used, disjoint
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    gap = 0.03 * sum(hi - lo for lo, hi in merged) / len(merged)
    offsets, y = [], 0.0
    for lo, hi in merged:
        offsets.append((lo, hi, y))
        y += hi - lo + gap
    starts = [lo for lo, _, _ in offsets]

    def rect(lo, hi, t0, t1):
        first, _, base = offsets[bisect.bisect_right(starts, lo) - 1]
        y0 = (base + lo - first) / MiB
        y1 = y0 + (hi - lo) / MiB
        return [(t0, y0), (t1, y0), (t1, y1), (t0, y1)]

    return rect, y


def plot_memory_map(trace: list[dict], categories: dict[int, str] | None = None,
                    segments: list[dict] | None = None, title: str | None = None,
                    first_step_until: int | None = None, min_height: float = 0.008) -> Figure:
    """The allocator's segments and blocks over time, like memory_viz's "Allocator State History".

    Time (trace entries) left to right, each segment a band of addresses (gaps removed); grey is reserved but free,
    blocks coloured by ``categories`` of their ``serial``.

    Args:
        trace, segments: see :func:`memory_map`.
        categories: storage serial -> category.
        first_step_until: trace position where the traced step begins; "other" blocks before it are :data:`FIRST_STEP`.
        min_height: long-lived blocks' least height, a fraction of the axis (0: all to scale).

    Raises:
        ValueError: for a trace with nothing reserved or allocated in it.
    """
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    reserved, blocks = memory_map(trace, segments)
    ranges = [(lo, hi) for lo, hi, *_ in reserved] + [(lo, hi) for lo, hi, *_ in blocks]
    if not ranges:
        raise ValueError("the trace has no segment and no allocation to draw")
    rect, y = _stacked_addresses(ranges)
    colours = {**CATEGORY_COLORS, **SNAPSHOT_COLORS, FIRST_STEP: OKABE_ITO["sky blue"]}
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.add_subplot()
    ax.add_collection(PolyCollection([rect(*r) for r in reserved], facecolors=GREYS["free"],
                                     edgecolors=GREYS["free edge"], linewidths=0.3))
    names = [categories.get(s, "other") if categories else "activations" for *_, s in blocks]
    if first_step_until is not None:
        names = [FIRST_STEP if n == "other" and b[2] < first_step_until else n for n, b in zip(names, blocks)]
    floor = min_height * y
    short = [(rect(*b[:4]), n) for b, n in zip(blocks, names) if n not in _LONG_LIVED]
    long_lived = [(rect(lo, max(hi, lo + floor), t0, t1), n)
                  for (lo, hi, t0, t1, _), n in zip(blocks, names) if n in _LONG_LIVED]
    for group in (short, long_lived):  # long-lived blocks on top, where they widen
        if group:
            ax.add_collection(PolyCollection([r for r, _ in group], facecolors=[colours[n] for _, n in group],
                                             edgecolors="none"))
    ax.set_xlim(0, max(len(trace), 1))
    ax.set_ylim(0, y / MiB)
    ax.set_xlabel("allocator event (allocations, frees, segments)")
    ax.set_ylabel("address: segments stacked (MiB)")
    shown = [n for n in (FIRST_STEP, *SNAPSHOT_CATEGORIES) if n in names] if categories else []
    ax.legend(handles=[Patch(facecolor=GREYS["free"], edgecolor=GREYS["free edge"], label="reserved, free")] +
              [Patch(color=colours[n], label=n.replace("_", " ")) for n in shown] +
              ([] if categories else [Patch(color=CATEGORY_COLORS["activations"], label="allocated")]),
              fontsize=8, loc="upper left")
    if title:
        ax.set_title(title)
    return fig


def plot_reserved_bars(labels: list[str], tensors: list[int], default, expandable,
                       title: str | None = None) -> Figure:
    """Per step: its tensors' peak, and peak allocated and reserved under two allocator settings, in MiB.

    Args:
        labels: one per step; ``tensors``: bytes of tensors at each step's peak.
        default, expandable: one :class:`helpers.allocator.Replay` per step (defaults, ``expandable_segments:True``).

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


def plot_snapshot(report: SnapshotReport, title: str | None = None) -> Figure:
    """A real snapshot explained (:func:`helpers.snapshot.explain_snapshot`): the live tensors by category over the
    trace, stacked, reserved memory as a dashed line and the peak marked; beside it, what was live at the peak as one
    stacked bar."""
    import numpy as np

    n = report.entries
    stacks = {c: np.zeros(n + 1) for c in SNAPSHOT_CATEGORIES}
    for b in report.blocks:
        stacks[b.category][0 if b.allocated is None else b.allocated] += b.size
        if b.freed is not None:
            stacks[b.category][b.freed] -= b.size
    shown = [c for c in (*SNAPSHOT_CATEGORIES[len(CATEGORIES):], *CATEGORIES) if stacks[c].any()]  # long-lived below
    colours = {**CATEGORY_COLORS, **SNAPSHOT_COLORS}
    fig = Figure(figsize=(9.5, 4.2), layout="constrained")
    ax, bar = fig.subplots(1, 2, width_ratios=[6, 1], sharey=True)
    xs = np.arange(n)
    if shown:  # a trace of segments alone, or of frees alone, has no tensor to stack
        ax.stackplot(xs, *[np.cumsum(stacks[c])[:n] / MiB for c in shown], colors=[colours[c] for c in shown],
                     labels=[c.replace("_", " ") for c in shown], step="post")
    ax.plot(xs, np.asarray(report.reserved) / MiB, color=OKABE_ITO["black"], lw=1.2, ls="--", label="reserved")
    ax.plot([report.peak], [report.peak_bytes / MiB], "v", color=OKABE_ITO["black"])
    ax.annotate(f"peak {report.peak_bytes / MiB:,.0f} MiB", (report.peak, report.peak_bytes / MiB),
                textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax.set_xlim(0, max(n - 1, 1))
    ax.set_ylim(0, 1.12 * max(max(report.reserved), report.peak_bytes, MiB) / MiB)
    ax.set_xlabel("trace entry (allocations, frees, segments)")
    ax.set_ylabel("MiB")
    fig.legend(fontsize=8, loc="outside lower center", ncols=len(shown) + 1)
    bottom = 0.0
    for c in shown:
        height = report.by_category[c] / MiB
        bar.bar(0, height, bottom=bottom, color=colours[c], width=0.6)
        bottom += height
    bar.set_xticks([0], ["at the peak"])
    bar.set_xlim(-0.6, 0.6)
    if title:
        fig.suptitle(title)
    return fig
