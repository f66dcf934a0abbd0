"""Figures of one step or a few: memory over time, by category, by stage; bars of peaks, of bytes per parameter, of
gradient accumulation; inference and leaking loops (lessons 03 to 05b). ``unit``, ``title``: as :mod:`..plots` says."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...palette import CATEGORY_COLORS, GREYS, LINE_COLORS
from ...record import CATEGORIES, StepProfile
from ...units import MiB, unit_scale


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
    """Allocated memory at every event of one or more steps (overlaid), peaks marked; ``labels`` one per profile.

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
            ax.axvspan(first, last, color=GREYS["backward"], zorder=0)
        ax.text((first + last) / 2, 1.0, label, transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=9, color=GREYS["text"])
    for i, (profile, label) in enumerate(zip(profiles, labels)):
        xs = [e.index for e in profile.events]
        ys = [e.allocated_bytes / MiB for e in profile.events]
        (line,) = ax.plot(xs, ys, label=label, drawstyle="steps-post", color=LINE_COLORS[i % len(LINE_COLORS)])
        ax.plot([profile.peak_event], [profile.peak_allocated_bytes / MiB], "o", color=line.get_color())
        ax.annotate(f"peak {profile.peak_allocated_bytes / MiB:.0f} MiB",
                    (profile.peak_event, profile.peak_allocated_bytes / MiB),
                    textcoords="offset points", xytext=(6, 4), fontsize=8, color=line.get_color())
    ax.set_xlabel("event (pre / fwd / bwd of each module, in order)")
    ax.set_ylabel("allocated (MiB)")
    # Room above the highest peak for its label; the legend top left, where the forward pass has just begun.
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
    ax.stackplot(xs, stacks, labels=CATEGORIES, colors=[CATEGORY_COLORS[n] for n in CATEGORIES], step="post")
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
    bars = ax.bar(names, values, color=CATEGORY_COLORS["activations"])
    ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_ylabel("added in forward (MiB)")
    ax.set_title(title or f"{profile.model}, batch {profile.batch_size}: memory kept by each stage ({profile.backend})")
    return fig


def _stacked_peaks(ax, profiles: list[StepProfile], labels: list[str], scale: float, text, fontsize: int,
                   **bar) -> list[float]:
    """One bar per profile, stacked by category at its peak (``scale`` bytes per unit), ``text(peak)`` on top."""
    bottoms = [0.0] * len(profiles)
    for name in CATEGORIES:
        heights = [p.categories[name] / scale for p in profiles]
        ax.bar(labels, heights, bottom=bottoms, color=CATEGORY_COLORS[name], label=name.replace("_", " "),
               edgecolor="white", linewidth=0.5, **bar)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for i, p in enumerate(profiles):
        ax.annotate(text(p.peak_allocated_bytes / scale), (i, bottoms[i]), textcoords="offset points",
                    xytext=(0, 3), ha="center", fontsize=fontsize)
    return bottoms


def plot_peak_bars(profiles: list[StepProfile], labels: list[str], title: str | None = None) -> Figure:
    """One bar per profile: the memory at its peak, stacked by category (lesson 04).

    Raises:
        ValueError: if ``labels`` and ``profiles`` differ in length.
    """
    if len(labels) != len(profiles):
        raise ValueError(f"{len(labels)} labels for {len(profiles)} profiles")
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    _stacked_peaks(ax, profiles, labels, MiB, lambda peak: f"{peak:.0f} MiB", 8)
    ax.set_ylabel("allocated at the peak (MiB)")
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(fontsize=8, loc="upper right")
    if title:
        ax.set_title(title)
    return fig


def plot_bytes_per_parameter(bars: dict[str, list[tuple[str, str, float]]], title: str | None = None,
                             marks: dict[str, float] | None = None, mark_label: str = "measured") -> Figure:
    """Horizontal bars of bytes per parameter, each stacked from labelled parts (lesson 05a).

    Args:
        bars: bar label -> its parts, left to right, each ``(category, text, bytes per parameter)``.
        marks: bar label -> a measured total (bytes per parameter), a black diamond named ``mark_label``.

    Raises:
        ValueError: for an unknown category, a negative part, or a mark for no bar.
    """
    marks = marks or {}
    for label, parts in bars.items():
        for category, _, size in parts:
            if category not in CATEGORY_COLORS:
                raise ValueError(f"unknown category {category!r} in bar {label!r}; use one of "
                                 f"{', '.join(CATEGORY_COLORS)}")
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
            ax.barh(row, size, left=left, color=CATEGORY_COLORS[category], edgecolor="white", linewidth=0.8,
                    label=None if category in seen else name)
            seen.add(category)
            if size >= 1.5:
                ax.text(left + size / 2, row, f"{text} {size:g}" if text else f"{size:g}", ha="center",
                        va="center", fontsize=8)
            left += size
        ax.text(left + (0.6 if label in marks else 0.2), row, f"{left:g}", va="center", fontsize=9, fontweight="bold")
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


def plot_accumulation(profiles: list[StepProfile], labels: list[str], unit: str = "GiB",
                      title: str | None = None) -> Figure:
    """Gradient accumulation: one bar per way of splitting a batch, stacked by category at the peak (lesson 05b).

    Args:
        profiles: the steps (``accumulation_steps=k``), in bar order; ``labels``: one each, such as ``"4 × 32"``.

    Raises:
        ValueError: for no profile, labels that do not match, or another unit.
    """
    scale = unit_scale(unit)
    if not profiles or len(labels) != len(profiles):
        raise ValueError(f"{len(labels)} labels for {len(profiles)} profiles (at least one)")
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    bottoms = _stacked_peaks(ax, profiles, labels, scale, lambda peak: f"{peak:.2f}", 9, width=0.6)
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

    Args:
        forward: ``{configuration: {grad mode: bytes}}`` (``helpers.loops.forward_peak``), all with the same modes.
        loops: ``{loop: bytes after each iteration}`` (``helpers.loops.loop_memory``), one line each.

    Raises:
        ValueError: for another unit, an empty ``forward`` or ``loops``, or configurations whose grad modes differ.
    """
    scale = unit_scale(unit)
    if not forward or not loops:
        raise ValueError("forward and loops must each hold at least one entry")
    modes = list(next(iter(forward.values())))
    for config, peaks in forward.items():
        if list(peaks) != modes:
            raise ValueError(f"configuration {config!r} has grad modes {list(peaks)}, the first has {modes}")
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax, ax2 = fig.subplots(1, 2, width_ratios=(1.15, 1))
    width = 0.8 / len(modes)
    for j, (mode, colour) in enumerate(zip(modes, LINE_COLORS)):
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
                 markersize=size, color=LINE_COLORS[(k + len(modes)) % len(LINE_COLORS)], label=loop)
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

