"""Figures of transformers (lessons 08 and 08b) and fine-tuning (lessons 09 and 09b); ``unit`` and ``title`` as :mod:`..plots` says."""

from __future__ import annotations

from matplotlib.figure import Figure

from ...gpus import CUDA_OVERHEAD_BYTES
from ...palette import CATEGORY_COLORS, LINE_COLORS, OKABE_ITO, PART_COLORS
from ...record import CATEGORIES, StepProfile
from ...units import unit_scale


def plot_stacked_parts(columns: dict[str, dict[str, int]], unit: str = "MiB", title: str | None = None,
                       order: tuple[str, ...] = ()) -> Figure:
    """Horizontal bars, one per column, each stacked from its parts, its total at its end.

    Args:
        columns: ``{bar label: {part name: bytes}}`` (zero parts left out).
        order: part names in stacking order; the i-th gets the palette's i-th colour (others follow, in order of
            appearance, with the colours left).

    Raises:
        ValueError: for another unit, or more parts than the palette's 8 colours.
    """
    scale = unit_scale(unit)
    present = {p for c in columns.values() for p, n in c.items() if n}
    parts = [p for p in order if p in present]
    parts += [p for p in dict.fromkeys(p for c in columns.values() for p in c) if p in present and p not in parts]
    if len(parts) > len(PART_COLORS) or len(order) > len(PART_COLORS):
        raise ValueError(f"at most {len(PART_COLORS)} parts, got {max(len(parts), len(order))}")
    colours = {p: PART_COLORS[i] for i, p in enumerate(order)}
    spare = iter(c for c in PART_COLORS if c not in colours.values())
    colours.update({p: next(spare) for p in parts if p not in colours})
    fig = Figure(figsize=(10, max(1.4 + 0.55 * len(columns), 0.5 + 0.25 * len(parts))), layout="constrained")
    ax = fig.add_subplot()
    labels = list(columns)[::-1]  # the first column on top
    totals = [sum(columns[c].values()) / scale for c in labels]
    for part in parts:
        colour = colours[part]
        left = [sum(n for p, n in columns[c].items() if p in parts[:parts.index(part)]) / scale for c in labels]
        ax.barh(labels, [columns[c].get(part, 0) / scale for c in labels], left=left, color=colour,
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
    """Memory against sequence length, log-log: slope 1 is linear in the sequence, slope 2 its square.

    Args:
        seqs: the sequence lengths (tokens), the x axis; ``series``: ``{label: bytes at each of seqs}``, one line each.
        levels: ``{label: bytes}`` drawn as dashed horizontal lines.

    Raises:
        ValueError: for another unit, or a series whose length is not ``len(seqs)``.
    """
    scale = unit_scale(unit)
    fig = Figure(figsize=(7.5, 4.5), layout="constrained")
    ax = fig.add_subplot()
    for (label, values), colour in zip(series.items(), PART_COLORS):
        if len(values) != len(seqs):
            raise ValueError(f"series {label!r} has {len(values)} values for {len(seqs)} sequence lengths")
        ax.plot(seqs, [v / scale for v in values], marker="o", color=colour, label=label)
    for (label, value), colour in zip((levels or {}).items(), PART_COLORS[::-1]):
        ax.axhline(value / scale, color=colour, linestyle="--", label=label)
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


def plot_finetune_peaks(profiles: dict[str, StepProfile], cards: dict[str, int], unit: str = "GiB",
                        title: str | None = None) -> Figure:
    """One bar per fine-tuning setup (``{label: StepProfile}``, the first on top): its peak stacked by category.

    Each card of ``cards`` (``{name: bytes}``) is a dashed line at its memory less
    :data:`helpers.gpus.CUDA_OVERHEAD_BYTES` (a bar left of it fits, as :func:`helpers.gpus.judge` says).

    Raises:
        ValueError: for another unit, no profiles, or more than four cards.
    """
    scale = unit_scale(unit)
    if not profiles:
        raise ValueError("give at least one profile")
    if len(cards) > 4:
        raise ValueError(f"at most 4 cards, got {len(cards)}")
    labels = list(profiles)[::-1]  # the first on top
    fig = Figure(figsize=(11, 1.9 + 0.55 * len(labels)), layout="constrained")
    ax = fig.add_subplot()
    for category in CATEGORIES:
        left = [sum(profiles[k].categories.get(c, 0) for c in CATEGORIES[:CATEGORIES.index(category)]) / scale
                for k in labels]
        values = [profiles[k].categories.get(category, 0) / scale for k in labels]
        if any(values):
            ax.barh(labels, values, left=left, color=CATEGORY_COLORS[category], height=0.6,
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
    """A step's peak against its token count: the traced points, their fitted line, and cards.

    Args:
        peaks, line: ``{tokens: peak allocated bytes}`` of traced steps; the :class:`helpers.batch.AffineFit` of two.
        cards: ``{card name: bytes}``, dashed lines at memory less :data:`helpers.gpus.CUDA_OVERHEAD_BYTES`.
        answers: ``{card name: tokens}``, the longest sequence that fits, marked.

    Raises:
        ValueError: for another unit, or fewer than two points.
    """
    scale = unit_scale(unit)
    if len(peaks) < 2:
        raise ValueError("give at least two traced points")
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    right = max(*peaks, *answers.values()) * 1.08
    ax.plot([0, right], [line.predict(0) / scale, line.predict(right) / scale], color=LINE_COLORS[0], linewidth=1.2,
            label="the line through the first two traces")
    xs = sorted(peaks)
    ax.plot(xs, [peaks[x] / scale for x in xs], "o", color=LINE_COLORS[0], markersize=7, label="traced steps")
    for (name, capacity), colour in zip(cards.items(), LINE_COLORS[1:]):
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
    return _peak_against(fig, ax, "tokens in the batch (batch x sequence length)", unit, title)


def plot_peak_vs_depth(traced: dict[int, int], line, written: tuple[int, int], unit: str = "GiB",
                       title: str | None = None) -> Figure:
    """A step's peak against its number of blocks: traced points, the line through two of them, a written step.

    Args:
        traced, line: ``{blocks: peak allocated bytes}`` of steps traced in full; the ``AffineFit`` of two of them.
        written: ``(blocks, peak bytes)`` of the full-depth step written from two shallow ones (:mod:`helpers.depth`).

    Raises:
        ValueError: for another unit, or fewer than two traced points.
    """
    scale = unit_scale(unit)
    if len(traced) < 2:
        raise ValueError("give at least two traced points")
    fig = Figure(figsize=(8, 4.5), layout="constrained")
    ax = fig.add_subplot()
    right = max(*traced, written[0]) * 1.05
    ax.plot([0, right], [line.predict(0) / scale, line.predict(right) / scale], color=LINE_COLORS[0], linewidth=1.2,
            label="the line through two of the traced steps")
    xs = sorted(traced)
    ax.plot(xs, [traced[x] / scale for x in xs], "o", color=LINE_COLORS[0], markersize=6, label="steps traced in full")
    ax.plot([written[0]], [written[1] / scale], "D", color=LINE_COLORS[1], markersize=8,
            label=f"{written[0]} blocks, written from two shallow traces")
    ax.set_xlim(0, right)
    ax.set_ylim(0, max(written[1], *traced.values()) / scale * 1.08)
    return _peak_against(fig, ax, "number of blocks", unit, title)


def _peak_against(fig: Figure, ax, xlabel: str, unit: str, title: str | None) -> Figure:
    """The axes' labels, grid, legend and title of a figure of the peak against ``xlabel``."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"peak allocated ({unit})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    if title:
        ax.set_title(title)
    return fig


def plot_published_comparison(comparisons, title: str | None = None) -> Figure:
    """Published real-GPU figures beside the engine's: two bars per row, in GB (10**9 bytes).

    Per :class:`helpers.teaching.published.Comparison`: the published figure (a card's size hatched) and the engine's
    ``after``, with the engine's ratio at the bar's end.

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
