"""Published real-GPU memory figures, set beside the engine's (lesson 09b, section 3).

The figures are data, one row per figure, in ``published.json`` beside this module (source, URL, setup as stated, the
:class:`helpers.config.StepConfig` options that reproduce it, measure, value, unit, card, tolerance, the gap explained).
:func:`finetune_comparison` profiles each row's step, simulated; ``benchmarks/published_figures.py`` prints the table.
What is measured matters (:data:`MEASURES`): ``max_memory_allocated`` counts tensors and cuBLAS workspaces,
``max_memory_reserved`` adds the cache, and "fits a 48 GB GPU" is judged by :func:`helpers.gpus.judge`.  Units are the
sources' own ("GB" = 10**9 bytes where the source divides by 1e9).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import gpus
from ..allocator import replay
from ..config import StepConfig
from ..profile import profile_step
from ..units import unit_scale
from .setups import OBJECTS

_DATA = json.loads((Path(__file__).parent / "published.json").read_text(encoding="utf-8"))

#: What a published figure measures, in words.  ``"card"``: a claim that the
#: step fits (or just fits) a card of ``published`` bytes.
MEASURES: dict[str, str] = _DATA["measures"]
#: Where the engine's figure is expected, against the published one: within the row's tolerance, or below (``"under"``)
#: or above (``"over"``) it by more than the tolerance, for the reason the row's ``gap`` states.
EXPECTED = ("within", "under", "over")


@dataclass(frozen=True)
class Published:
    """One published real-GPU memory figure and the step that reproduces it (a row of ``published.json``).

    Attributes:
        key: a short unique name (``"torchtune-qlora"``).
        source, url: who published it, where.
        setup: the setup as the source states it, anything assumed marked.
        options: the :class:`helpers.config.StepConfig` options, sorted ``(name, value)`` pairs.
        published: the published figure, bytes.
        measured: a key of :data:`MEASURES`.
        card: a key of :data:`helpers.gpus.GPU_CARDS`, or None (no workspace line).
        gap: the engine's difference from it, explained.
        tolerance: how far the engine may be from it, a fraction (0.10: 10%).
        expected: a value of :data:`EXPECTED`.
        slow: left to the benchmark by the tests.
    """

    key: str
    source: str
    url: str
    setup: str
    options: tuple[tuple[str, Any], ...]
    published: int
    measured: str
    card: str | None
    gap: str
    tolerance: float
    expected: str = "within"
    slow: bool = True

    def config(self) -> StepConfig:
        """This row's step: ``StepConfig(**options, device="simulated")`` (ValueError as :class:`StepConfig` raises)."""
        return StepConfig(**dict(self.options), device="simulated")


def _frozen(value):
    """JSON made hashable: lists as tuples, objects as sorted ``(key, value)`` pairs."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


def _option(value):
    """An option's value: ``{"python": name, "args": [...]}`` resolved from :data:`helpers.teaching.setups.OBJECTS`."""
    if not (isinstance(value, dict) and "python" in value):
        return _frozen(value)
    if value["python"] not in OBJECTS:
        raise ValueError(f"published.json names {value['python']!r}; helpers.teaching.setups has {', '.join(OBJECTS)}")
    named = OBJECTS[value["python"]]
    return named(*map(_frozen, value["args"])) if "args" in value else named


class _Texts(dict):
    """A row's options and computed values, and the shared texts of ``published.json``, formatted on demand."""

    def __missing__(self, name: str) -> str:
        return _DATA["text"][name].format_map(self)


def _row(data: dict) -> Published:
    """One row of ``published.json`` as a :class:`Published` row; texts formatted (see its ``about``)."""
    options = {name: _option(value) for name, value in data["options"].items()}
    values = _Texts(options)
    inputs = options.get("inputs")
    if hasattr(inputs, "seq_len"):  # token ids: the tokens of the batch and their float16 logits
        values["tokens"] = options["batch_size"] * inputs.seq_len
        values["logits_mb"] = f"{values['tokens'] * inputs.vocab_size * 2 / 1e6:,.1f}"
    if data["unit"] == "card":
        published = gpus.GPU_CARDS[data["card"]]
    else:
        published = round(data["value"] * unit_scale(data["unit"], ("B", "MB", "GB", "MiB", "GiB")))
    if data["measured"] not in MEASURES or data["expected"] not in EXPECTED:
        raise ValueError(f"published.json, row {data['key']}: measured {data['measured']!r}, "
                         f"expected {data['expected']!r}")
    return Published(
        key=data["key"], source=data["source"], url=data["url"].format_map(values),
        setup=data["setup"].format_map(values), options=tuple(sorted(options.items())), published=published,
        measured=data["measured"], card=data["card"], gap=data["gap"].format_map(values),
        tolerance=data["tolerance"], expected=data["expected"], slow=data["slow"])


#: Fine-tuning 7B to 65B models on one GPU: torchtune's QLoRA tutorial, torchtune against PEFT on an
#: RTX 4090, PEFT's README table, the QLoRA paper's 65B model on a 48 GB card, Unsloth's context lengths.
PUBLISHED: tuple[Published, ...] = tuple(_row(r) for r in _DATA["published"])
#: Figures to reproduce within 5%: PyTorch's optimizer-step-in-backward tutorial (ViT-L/16) and the
#: memory table of transformers #28802 (BERT, eager against SDPA attention, on an A100).
ENGINE_CHECKS: tuple[Published, ...] = tuple(_row(r) for r in _DATA["engine_checks"])
#: Every row, by key.
ROWS: dict[str, Published] = {row.key: row for row in (*PUBLISHED, *ENGINE_CHECKS)}


@dataclass(frozen=True)
class Comparison:
    """One row's published figure beside the engine's.  Bytes.

    Attributes:
        row: the :class:`Published` row.
        allocated: the engine's whole-step peak allocated bytes.
        reserved: for a reserved-memory row, the peak reserved bytes of the step
            replayed through :func:`helpers.allocator.replay`; else None.
        workspaces: two cuBLAS workspaces on the row's card (:func:`helpers.gpus.unseen_lines`), 0 without a card.
        verdict: for a ``"card"`` row, :func:`helpers.gpus.judge` of the
            allocated peak on a card of ``row.published`` bytes; else None.
    """

    row: Published
    allocated: int
    reserved: int | None
    workspaces: int
    verdict: gpus.Verdict | None

    @property
    def before(self) -> int:
        """The engine's figure for what the row measures, tensors only (reserved replay, peak + assumed overhead for a card, or the allocated peak)."""
        if self.row.measured == "reserved" and self.reserved is not None:
            return self.reserved
        if self.row.measured == "card":
            return self.verdict.peak + self.verdict.overhead
        return self.allocated

    @property
    def after(self) -> int:
        """:attr:`before` plus the cuBLAS workspaces (the figure a GPU would show)."""
        return self.before + self.workspaces

    @property
    def ratio(self) -> float:
        """``after / published``: 1.0 is exact, 0.9 is 10% under."""
        return self.after / self.row.published

    @property
    def agrees(self) -> bool:
        """The engine is where the row expects it (:data:`EXPECTED`): within the tolerance, or beyond it on the explained side."""
        off, tol = self.ratio - 1, self.row.tolerance
        if self.row.expected == "under":
            return off < -tol
        if self.row.expected == "over":
            return off > tol
        return abs(off) <= tol


def _workspaces(card: str | None) -> int:
    """Two cuBLAS workspaces on ``card`` (a training step's two threads), 0 for no card."""
    return 0 if card is None else gpus.unseen_lines(card, 2).get(gpus.CUBLAS_LINE) or 0


@functools.lru_cache(maxsize=None)
def compare(row: Published) -> Comparison:
    """The engine's figures for ``row``: its step profiled, simulated (cached per row in this process).

    Raises:
        ValueError: as :func:`helpers.profile.profile_step` does.
    """
    profile = profile_step(row.config())
    reserved = None
    if row.measured == "reserved":
        result = replay(profile.allocation_log)
        reserved = max(result.reserved) if result.reserved else 0
    verdict = None
    if row.measured == "card":  # the verdict of every widget, with the card's workspace lines when it is named
        verdict = gpus.judge(row.published, profile.peak_allocated_bytes, card=row.card,
                             cublas_handles=2 if row.card else 0)
    return Comparison(row, profile.peak_allocated_bytes, reserved, _workspaces(row.card), verdict)


def finetune_comparison(rows: tuple[Published, ...] | list[Published] = PUBLISHED) -> list[Comparison]:
    """The engine's :class:`Comparison` beside each published figure of ``rows`` (default :data:`PUBLISHED`), in order.

    Each step is profiled once per process (:func:`compare`), from about a second (BERT, ViT) to a minute (the 65B row).

    Raises:
        ValueError: for something that is not a :class:`Published` row, or as :func:`helpers.profile.profile_step` does.
    """
    rows = list(rows)
    for row in rows:
        if not isinstance(row, Published):
            raise ValueError(f"rows must be Published rows (helpers.teaching.published), got {type(row).__name__}")
    return [compare(row) for row in rows]


def comparison_table(comparisons: list[Comparison]) -> str:
    """A Markdown table of the comparisons (GB of 10**9 bytes): source, measure, published, engine, ratio."""
    lines = ["| source | measured | published (GB) | engine, tensors (GB) | engine + cuBLAS workspaces (GB) "
             "| engine / published | expected |", "|---|---|---:|---:|---:|---:|---|"]
    for c in comparisons:
        r = c.row
        lines.append(f"| {r.source} | {r.measured} | {r.published / 1e9:.3f} | {c.before / 1e9:.3f} | "
                     f"{c.after / 1e9:.3f} | {c.ratio:.3f} | {r.expected} (tol. {r.tolerance:.0%}) |")
    return "\n".join(lines)
