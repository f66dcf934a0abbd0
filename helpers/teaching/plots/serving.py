"""Figures of generation and serving (lesson 10); ``unit`` and ``title`` as :mod:`..plots` says.

* :func:`plot_generation_timeline`: what a generation holds at each moment (weights, KV cache, the moment's peak);
* :func:`plot_startup_accounts`: vLLM's start-up account of a card, one stacked bar per setup;
* :func:`plot_concurrency`: requests of ``max_model_len`` tokens that fit, per card and context length;
* :func:`plot_activation_peak`: the profile run's activation peak against ``max_num_batched_tokens``;
* :func:`plot_engine_beside_logs`: published vLLM start-ups beside the engine's accounts.
"""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullFormatter

from ...palette import CATEGORY_COLORS, GREYS, OKABE_ITO, SERVING_COLORS
from ...units import unit_scale

#: The cards' colours in :func:`plot_concurrency`: none of the serving parts' (weights, activations, KV cache).
CARD_COLOURS = ("sky blue", "orange", "reddish purple", "black")


def plot_generation_timeline(profile, unit: str = "GiB", title: str | None = None) -> Figure:
    """One bar per moment of a :class:`helpers.generation.GenerationProfile` (weights, prefill, decode 1, ...):
    the weights, what stays allocated after the moment beyond them (the KV cache, the token ids), and what the
    moment held on top of that at its peak (activations, logits).

    Raises:
        ValueError: for another unit.
    """
    scale = unit_scale(unit)
    names = [name for name, _, _ in profile.timeline]
    weights = [profile.weights_bytes / scale] * len(names)
    kept = [(after - profile.weights_bytes) / scale for _, after, _ in profile.timeline]
    transient = [(peak - after) / scale for _, after, peak in profile.timeline]
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.add_subplot()
    xs = range(len(names))
    ax.bar(xs, weights, color=CATEGORY_COLORS["parameters"], label="weights", width=0.7)
    ax.bar(xs, kept, bottom=weights, color=SERVING_COLORS["kv_cache"], label="KV cache (and the token ids)",
           width=0.7)
    ax.bar(xs, transient, bottom=[w + k for w, k in zip(weights, kept)], color=CATEGORY_COLORS["activations"],
           label="held only during the moment, at its peak (activations, logits)", width=0.7)
    ax.set_xticks(list(xs), names, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel(f"allocated ({unit})")
    top = max(peak for _, _, peak in profile.timeline) / scale
    ax.set_ylim(0, top * 1.25)
    ax.legend(fontsize=8, loc="upper right")
    if title:
        ax.set_title(title)
    return fig


def plot_startup_accounts(accounts: dict, unit: str = "GiB", title: str | None = None) -> Figure:
    """vLLM's start-up accounts (:class:`helpers.serving.StartupAccount`), one horizontal bar per label: the card's
    total, stacked from the weights, the profile run's activation peak, the non-torch memory (assumed: hatched), the
    KV cache's blocks, and what is left unused (what ``gpu_memory_utilization`` keeps back, and less than a block),
    in the colours of the serving widget's bar (:data:`helpers.palette.SERVING_COLORS`).  A black tick marks
    ``total × gpu_memory_utilization``; the bar's end says how many tokens the KV cache holds, or that vLLM would not
    start.

    Raises:
        ValueError: for another unit, or no accounts.
    """
    scale = unit_scale(unit)
    if not accounts:
        raise ValueError("give at least one account")
    fig = Figure(figsize=(10, 1.6 + 0.7 * len(accounts)), layout="constrained")
    ax = fig.add_subplot()
    labels = list(accounts)[::-1]  # the first account on top
    parts = (("weights", CATEGORY_COLORS["parameters"], None),
             ("activation peak of the profile run", CATEGORY_COLORS["activations"], None),
             ("non-torch memory (assumed)", GREYS["free"], "///"),
             ("KV cache", SERVING_COLORS["kv_cache"], None),
             ("unused", SERVING_COLORS["unused"], None))
    for y, label in enumerate(labels):
        a = accounts[label]
        used = [a.weights_bytes, a.activation_peak_bytes, a.non_torch_bytes, a.kv_cache_bytes]
        sizes = [*used, max(a.total_bytes - sum(used), 0)]
        left = 0.0
        for (name, colour, hatch), nbytes in zip(parts, sizes):
            ax.barh(y, nbytes / scale, left=left, color=colour, hatch=hatch, edgecolor=GREYS["free edge"],
                    linewidth=0.5, height=0.6, label=name if y == 0 else None)
            left += nbytes / scale
        ax.plot([a.requested_bytes / scale] * 2, [y - 0.4, y + 0.4], color="black", linewidth=2)
        text = f" {a.kv_tokens:,} tokens" if a.refusal is None else " would not start"
        ax.text(left, y, text, va="center", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    right = max(max(a.total_bytes, a.non_kv_cache_bytes) for a in accounts.values()) / scale
    ax.set_xlim(0, right * 1.22)
    ax.set_xlabel(f"memory ({unit}); black tick: total x gpu_memory_utilization")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    if title:
        ax.set_title(title)
    return fig


def plot_concurrency(grid: dict[str, dict[int, float | None]], title: str | None = None) -> Figure:
    """Requests of ``max_model_len`` tokens the KV cache holds at once, grouped by context length, one bar per card
    (in :data:`CARD_COLOURS`), on a log scale, each bar labelled; ``None`` (vLLM would not start) is written where its
    bar would be.

    Args:
        grid: ``{card: {max_model_len: max concurrency or None}}``, every card with the same lengths.

    Raises:
        ValueError: for no cards, or cards with different lengths.
    """
    if not grid:
        raise ValueError("give at least one card")
    lengths = list(next(iter(grid.values())))
    if any(list(row) != lengths for row in grid.values()):
        raise ValueError("every card needs the same max_model_len values")
    fig = Figure(figsize=(9, 4.2), layout="constrained")
    ax = fig.add_subplot()
    width = 0.8 / len(grid)
    colours = [OKABE_ITO[name] for name in CARD_COLOURS]
    for i, (card, row) in enumerate(grid.items()):
        colour = colours[i % len(colours)]
        for j, n in enumerate(lengths):
            x = j - 0.4 + width * (i + 0.5)
            value = row[n]
            if value is None:
                ax.text(x, 0.12, "would not\nstart", ha="center", va="bottom", fontsize=7, color=colour, rotation=90)
                continue
            ax.bar(x, value, width=width * 0.92, color=colour)
            ax.text(x, value, f"{value:.1f}", ha="center", va="bottom", fontsize=8)
    handles = [Patch(color=colours[i % len(colours)], label=card)
               for i, card in enumerate(grid)]  # one legend entry per card, whatever bars were drawn
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    ax.axhline(1, color="black", linewidth=0.8, linestyle="--")
    ax.text(len(lengths) - 0.5, 1, "one request", va="bottom", ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylim(0.1, max(v for row in grid.values() for v in row.values() if v) * 3)
    ax.set_xticks(range(len(lengths)), [f"max_model_len {n:,}" for n in lengths])
    ax.set_xlim(-0.5, len(lengths) - 0.5)
    ax.set_ylabel("requests of max_model_len tokens at once (log scale)")
    if title:
        ax.set_title(title)
    return fig


def plot_activation_peak(peaks: dict[int, int], floor: int | None = None, unit: str = "GiB",
                         title: str | None = None) -> Figure:
    """The profile run's activation peak against ``max_num_batched_tokens``, points joined, each labelled;
    ``floor``, when given, a dashed line: the sampler's tensors (its rows of logits, one per request), which no batch
    goes under.  A point closer than 6% of the axis to the last labelled one, or labelled alike, is not labelled (the
    labels would overlap).

    Raises:
        ValueError: for another unit, or fewer than two points.
    """
    scale = unit_scale(unit)
    if len(peaks) < 2:
        raise ValueError("give at least two traced points")
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    xs = sorted(peaks)
    ax.plot(xs, [peaks[x] / scale for x in xs], "o-", color=CATEGORY_COLORS["activations"],
            label="activation peak, traced")
    last = None
    for x in xs:
        if last is not None and (x - last < 0.06 * xs[-1] or f"{peaks[x] / scale:.2f}" == f"{peaks[last] / scale:.2f}"):
            continue  # it would overlap the last label
        last = x
        ax.annotate(f"{peaks[x] / scale:.2f}", (x, peaks[x] / scale), xytext=(-6, 6), textcoords="offset points",
                    ha="right", fontsize=8)
    if floor is not None:
        ax.axhline(floor / scale, color="black", linestyle="--", linewidth=1,
                   label="the sampler's tensors alone (rows of logits, one per request)")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    ax.set_xlim(0, xs[-1] * 1.05)
    ax.set_xlabel("max_num_batched_tokens (tokens in the profile run)")
    ax.set_ylabel(f"activation peak ({unit})")
    ax.set_ylim(0, max(peaks.values()) / scale * 1.15)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    if title:
        ax.set_title(title)
    return fig


def plot_engine_beside_logs(rows, title: str | None = None) -> Figure:
    """Published vLLM start-ups beside the engine (:func:`helpers.teaching.vllm_logs.engine_beside_logs`): one row
    per log, the engine's figure over vLLM's for the weights, the profile run's activation peak and the KV cache (its
    tokens, or its blocks, where the log printed them, else its GiB; nothing where vLLM logged no cache at all), on a
    log scale around 1; a row's label says when one request did not fit, in vLLM's log and in the engine's account.

    Raises:
        ValueError: for no rows.
    """
    rows = list(rows)
    if not rows:
        raise ValueError("give at least one row")
    fig = Figure(figsize=(11, 1.4 + 0.42 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    marks = (("weights", CATEGORY_COLORS["parameters"], "o"),
             ("activation peak of the profile run", CATEGORY_COLORS["activations"], "s"),
             ("KV cache", SERVING_COLORS["kv_cache"], "D"))
    labels, drawn = [], set()
    for y, row in enumerate(rows[::-1]):  # the first row on top
        logged, engine = row.log.logged, row.engine()
        ratios = [engine["weights"] / logged["weights"], engine["activation"] / logged["activation"],
                  kv_ratio(logged, engine)]
        for (name, colour, marker), ratio in zip(marks, ratios):
            if ratio is not None:
                ax.plot([ratio], [y], marker, color=colour, markersize=7, label=None if name in drawn else name)
                drawn.add(name)
        verdict = "" if not row.log.refused else (" · no request fits (engine: none either)" if row.refusal
                                                  else " · no request fits (engine: it does)")
        labels.append(f"{row.log.name} · {row.log.gpu}{verdict}")
    ax.axvline(1, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks([0.3, 0.5, 0.8, 1, 1.25], ["0.3", "0.5", "0.8", "1", "1.25"])
    ax.set_xlim(0.3, 1.4)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlabel("the engine's figure / vLLM's logged figure (log scale; 1: the same)")
    handles, names = ax.get_legend_handles_labels()
    order = [names.index(name) for name, _, _ in marks if name in names]
    ax.legend([handles[i] for i in order], [names[i] for i in order], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.01, 1), frameon=False)
    if title:
        ax.set_title(title)
    return fig


def kv_ratio(logged: dict, engine: dict) -> float | None:
    """The engine's KV cache over vLLM's logged one: tokens where the log printed them, else blocks, else GiB; None
    where vLLM logged no cache (no block, or a negative budget)."""
    for key in ("tokens", "blocks", "kv"):
        if logged.get(key, 0) > 0:
            return engine[key] / logged[key]
    return None
