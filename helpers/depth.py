"""Exact depth extrapolation: the step of a model of L alike blocks, written from the same step traced with fewer.

A transformer is one block repeated L times, and its training step allocates block by block.  Take a model of 3
blocks.  Its step's allocation log (:class:`helpers.record.Allocation`), labelled with the block each entry belongs
to, reads::

    outside    the batch, the embedding's output                    (the same at any depth)
    sweep up   block 0 forward | block 1 forward | block 2 forward  (forward: one sweep over the blocks)
    outside    the head, the loss
    sweep down block 2 backward | block 1 backward | block 0 backward
    outside    the embedding's gradient
    sweep up   the optimizer's foreach operations, block 0's, 1's, then 2's parameters

Blocks 0 and 2 are the *edge blocks* (the first and last of a sweep may run unlike the others: a Hugging Face model
keeps the first block's input to the end of its forward pass); block 1 is the *middle block*, whose stretch of each
sweep is the *repeated block's events*.  The *template* (:class:`Template`) keeps the stretches outside, the edge
blocks' stretches and one middle block's, with every free or resize written not as a serial but as a place: "the
storage made at offset 12 of the middle block one before this one", or "at offset 3 of the stretch outside".  Written
with L blocks (:func:`write_log`), each sweep's middle block is repeated L - 2 times and every free finds its storage
again: the *written log*, read as a traced step's is (:func:`helpers.written.profile_of_log`).

In practice :data:`EDGE` blocks at each end count as edge blocks (a block may free what the block two before it made),
so the same step is traced with 6 and 7 blocks (:data:`DEPTHS`).  :func:`write`, this module's entry point, which the
profile layer (:mod:`helpers.profile`) and a symbolic trace (:mod:`helpers.symbolic`) each call once, says whether
the step is written (:func:`applies`), traces both shallow steps itself (:func:`helpers.traced.shallow_step`, each
read block by block: :mod:`helpers.shallow`), and hands them to :func:`write_step`, which learns one template from
both, checks that it writes both traced logs again entry for entry (events, storages, sizes, dtypes, categories,
lifetimes), and only then writes the log of L blocks.

**Checked result** (``tests/test_depth.py``): the written step equals the full trace in every field a lesson, a widget
or the command line reads, its allocation log entry for entry and the allocator's replay byte for byte, for tiny
configurations of Llama, Qwen2, Mistral and BLOOM (LoRA, autocast, checkpointing, accumulation, steady state, the
chunked loss) and, in the slow group, for Llama-3.1 8B (LoRA, QLoRA with bitsandbytes' NF4) and Qwen2.5 7B at their
full depth, and GPT-2 1.5B, the Llama preset, Llama-3.1 8B's QLoRA in torchao's NF4 and SmolLM2's steps at 8 of their
blocks.  The written Llama-3.1 8B step is about 1.9 times faster than its full trace
(``benchmarks/finetune_step.py``).

**Where it does not apply** (:func:`applies`; the profile's ``depth_note`` says why, and every block is traced): a
real GPU's step (measured, not counted); a model not built of alike blocks (its ``layer_types`` differ, or no list of
blocks is known); ``full_trace=True``; fewer than :data:`MIN_BLOCKS` blocks (two shallow traces cost about what a full
one does); a simulated ``capacity`` (the step stops where it runs out, which a written log cannot say); checkpointing
by segments that do not each hold one block.  It also gives up (:class:`NotRepeated`) where a trainable parameter gets
no gradient, or where the two shallow logs do not repeat block by block as the template says.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from . import traced
from .config import StepConfig
from .engine.backends import resolve_backend
from .models import ModelSpec
from .shallow import OUTSIDE, NotRepeated, ShallowStep
from .symbolic_sizes import Symbols

__all__ = ["DEPTHS", "EDGE", "MIN_BLOCKS", "NotRepeated", "WrittenStep", "applies", "shallow", "write", "write_step"]

#: The blocks at each end that may run unlike the others (a Hugging Face model keeps the first block's
#: input, ``inputs_embeds``, to the end of its forward pass: the next blocks each free the one before's).
EDGE = 2
#: The depths traced: :data:`EDGE` blocks at each end and two or three between, enough that a block
#: freeing what the block two before it made (a layer's input) is seen with both in the middle.
DEPTHS = (2 * EDGE + 2, 2 * EDGE + 3)
#: Below this many blocks a full trace costs about what the two shallow ones do.
MIN_BLOCKS = 20


def write(config: StepConfig, spec: ModelSpec, symbols: Symbols | None = None) -> tuple[WrittenStep | None, str | None]:
    """``config``'s step written from the same step traced with each of :data:`DEPTHS` blocks (traced here:
    :func:`helpers.traced.shallow_step`, with ``symbols`` as its sizes where given), or ``None`` where it is not
    written; and the profile's ``depth_note``, why not (None where it was written, or the question does not arise:
    :func:`applies`).  A step whose shallow traces do not repeat block by block (:class:`NotRepeated`) is not
    written, its note says where they differ.
    """
    written, note = applies(config, spec)
    if not written:
        return None, note
    try:
        low, high = (traced.shallow_step(*shallow(config, spec, n), n, symbols) for n in DEPTHS)
        return write_step(low, high, spec.blocks), None
    except NotRepeated as e:
        return None, f"every one of its {spec.blocks} blocks traced: {e}"


def applies(config: StepConfig, spec: ModelSpec) -> tuple[bool, str | None]:
    """Whether ``config``'s step is written from shallow traces, and if not, the profile's ``depth_note`` (None for a
    model not built of repeated blocks, or a real GPU's step).  It is for the simulated step of a model of at least
    :data:`MIN_BLOCKS` alike blocks (``spec.blocks``), unless ``full_trace`` is asked for, a ``capacity`` may stop the
    step, ``workspaces`` are asked for, or checkpointing by segments (not per block) puts blocks in different
    segments."""
    per_layer = _hf(spec)  # checkpointed per layer
    if spec.blocks is None or resolve_backend(config.device) != "simulated":
        return False, None
    full = f"every one of its {spec.blocks} blocks traced: "
    if spec.at_depth is None:
        return False, full + spec.blocks_differ
    if config.full_trace:
        return False, full + "asked for (full_trace=True)"
    if spec.blocks < MIN_BLOCKS:
        return False, full + f"below {MIN_BLOCKS} blocks, two shallow traces cost as much"
    if config.capacity is not None:
        return False, full + "a simulated capacity (capacity=) stops the step where it runs out"
    if config.workspaces != "none":
        return False, full + f"its kernels' own memory (workspaces={config.workspaces!r}) is traced, not written"
    if config.checkpoint and not per_layer and config.checkpoint != spec.blocks + 2:
        return False, full + (f"checkpointing by {config.checkpoint} segments puts blocks in different segments "
                              f"(checkpoint={spec.blocks + 2} makes each block one)")
    return True, None


def _hf(spec: ModelSpec) -> bool:
    """Whether ``spec`` builds a Hugging Face causal LM (checkpointed per layer); imports no transformers."""
    hf = sys.modules.get("helpers.models.hf")
    return hf is not None and isinstance(spec.build, hf.CausalLMBuilder)


def shallow(config: StepConfig, spec: ModelSpec, depth: int) -> tuple[StepConfig, ModelSpec]:
    """The step of the same model with ``depth`` blocks: its config (one checkpointed segment per block
    where there was one) and its model."""
    if config.checkpoint and not _hf(spec):
        config = config.replace(checkpoint=depth + 2)
    return config, spec.at_depth(depth)


@dataclass(frozen=True)
class WrittenStep:
    """The written log of a step of many blocks (:func:`write_step`): ``log`` entries ``(serial, kind, bytes)``,
    ``storages`` ``(category, dtype, shape, bytes)`` by serial, ``markers`` ``(log position, kind, payload)`` (the
    form :func:`helpers.written.profile_of_log` reads), the counts that grow by the same amount with each block:
    ``parameter_count`` (weights) and ``paged_bytes`` (a paged optimizer's states), and ``like``, the deeper shallow
    step's profile (a :class:`helpers.symbolic_sizes.SymbolicRecord` where traced with symbols): the fields that do not
    change with the depth."""

    log: tuple
    storages: tuple
    markers: tuple
    parameter_count: int
    paged_bytes: int
    like: Any


def write_step(shallow: ShallowStep, deeper: ShallowStep, depth: int) -> WrittenStep:
    """The step with ``depth`` blocks, written from the same step traced with two fewer (:data:`DEPTHS`), each read
    block by block (:class:`helpers.shallow.ShallowStep`): the template learned from both must first write both
    again, exactly.

    Raises:
        NotRepeated: where a trainable parameter gets no gradient, or the template does not write a traced step again
            (the message says what differs first).
    """
    if any(s.profile.params_without_grad for s in (shallow, deeper)):
        raise NotRepeated("some trainable parameters get no gradient")
    if shallow.blocks != deeper.blocks:
        raise NotRepeated(f"the lists of blocks differ: {shallow.blocks} and {deeper.blocks}")
    template = merge_templates(template_of(deeper), template_of(shallow))
    for s in (shallow, deeper):
        got, want = write_log(template, s.depth), (s.log, s.storages, s.markers)
        for name, g, w in zip(("log entry", "storage", "event"), got, want):
            if g != w:
                k = next((k for k, (x, y) in enumerate(zip(g, w)) if x != y), min(len(g), len(w)))
                raise NotRepeated(f"the template does not write the {s.depth}-block step again: {name} {k} differs")

    def at_depth(field: str) -> int:  # a count that grows by the same amount with each block
        low, high = (getattr(s.profile, field) for s in (shallow, deeper))
        return high + (high - low) * (depth - deeper.depth)

    return WrittenStep(*write_log(template, depth), at_depth("parameter_count"), at_depth("paged_bytes"),
                       deeper.profile)


def template_block(block: int, depth: int) -> int:
    """The block of a step of ``depth`` blocks as the template sees it: the :data:`EDGE` blocks at each end
    as one edge block, those between shifted down (a step of :func:`template_depth` blocks)."""
    return block if block == OUTSIDE else min(max(block - (EDGE - 1), 0), template_depth(depth) - 1)


def template_depth(depth: int) -> int:
    """The blocks of a step of ``depth`` blocks as the template sees them (:func:`template_block`)."""
    return depth - 2 * (EDGE - 1)


# -- the stretches of a log: outside the blocks, or sweeps over them -----------------------------------
@dataclass
class Stretch:
    """Items of the log outside the blocks (``over_blocks`` False: ``edges`` holds its one range), or sweeps over the
    blocks: the stretches of the edge block where each sweep turns (block 0 or d-1 of a template's d, alternately:
    ``from_first`` says which comes first), and, between two of them, the middle blocks' stretches of that sweep, in
    its order (``middles``, one list per sweep).  A forward pass is one sweep from block 0 up; backward, one back down;
    the optimizer's ``foreach`` operations, one more each."""

    over_blocks: bool
    from_first: bool
    edges: list[tuple[int, int]]
    middles: list[list[tuple[int, int]]]

    def edge_block(self, e: int, depth: int) -> int:
        """The block of edge stretch ``e`` in a step of ``depth`` (template) blocks."""
        return 0 if (e % 2 == 0) == self.from_first else depth - 1


def stretches(labels: list[int], depth: int) -> list[Stretch]:
    """The items, labelled with their (template) blocks, as stretches outside the blocks and sweeps over the blocks
    0..depth-1.

    Raises:
        NotRepeated: where the blocks' stretches do not sweep from one end to the other.
    """
    runs, start = [], 0
    for k in range(1, len(labels) + 1):
        if k == len(labels) or labels[k] != labels[start]:
            runs.append((labels[start], start, k))
            start = k
    out, k = [], 0
    while k < len(runs):
        label, a, b = runs[k]
        k += 1
        if label == OUTSIDE:
            out.append(Stretch(False, False, [(a, b)], []))
            continue
        if label not in (0, depth - 1):
            raise NotRepeated(f"a sweep over the blocks starts at block {label} of {depth}")
        stretch, at = Stretch(True, label == 0, [(a, b)], []), label
        while k < len(runs) and runs[k][0] == at + (1 if at == 0 else -1):
            step, other = (1, depth - 1) if at == 0 else (-1, 0)
            sweep = []
            for expected in [*range(at + step, other, step), other]:
                if k >= len(runs) or runs[k][0] != expected:
                    raise NotRepeated(f"a sweep over the blocks skips block {expected} of {depth}")
                sweep.append(runs[k][1:])
                k += 1
            stretch.middles.append(sweep[:-1])
            stretch.edges.append(sweep[-1])
            at = other
        out.append(stretch)
    return out


def _places(stretches_: list[Stretch], depth: int) -> dict[int, tuple]:
    """Item index -> its place: ``(stretch, "outside", offset)``, ``(stretch, "edge", e, offset)`` or
    ``(stretch, "middle", sweep, block, offset)``."""
    where = {}
    for P, stretch in enumerate(stretches_):
        if not stretch.over_blocks:
            a, b = stretch.edges[0]
            where.update({k: (P, "outside", k - a) for k in range(a, b)})
            continue
        for e, (a, b) in enumerate(stretch.edges):
            where.update({k: (P, "edge", e, k - a) for k in range(a, b)})
        for s, sweep in enumerate(stretch.middles):
            step = 1 if stretch.edge_block(s, depth) == 0 else -1
            for n, (a, b) in enumerate(sweep):
                where.update({k: (P, "middle", s, stretch.edge_block(s, depth) + step * (n + 1), k - a)
                              for k in range(a, b)})
    return where


# -- the template: the stretches outside, the edge blocks, one middle block ------------------------------
@dataclass
class Template:
    """What :func:`template_of` reads from a shallow step, and :func:`write_log` writes at any depth: ``stretches``,
    the shape of the step (:func:`stretches`); ``items``, per stretch, its items with serials replaced by places
    (outside the blocks, ``[items]``; over the blocks, ``(edges, middles)``: the items of each edge stretch and of one
    middle block of each sweep, the repeated block's events); ``blocks``, the dotted name of the list of blocks, for
    the events' module names."""

    stretches: list[Stretch]
    items: list
    blocks: str


def _edge_key(j: int, depth: int) -> int:
    """The key of block ``j`` of ``depth`` among the edge blocks: ``j`` at the start, ``j - depth`` at the end."""
    return j if j < EDGE else j - depth


def _origin(loc: tuple, i: int, j: int, depth: int) -> tuple:
    """Where a free or resize in block ``i`` finds its storage, made in block ``j`` at ``loc`` (a step of ``depth``
    blocks; real blocks, not :func:`template_block`): ``("outside", stretch, offset)``, or ``("blocks", stretch, rule,
    edges, middle)``: the block by ``rule`` (``("before", j - i)``, ``("from_first", j)`` or ``("from_last",
    depth - 1 - j)``), then ``edges = {_edge_key(j): (e, offset)}`` if that block is an edge block of the sweeps,
    else ``middle = (sweep, offset)``."""
    P = loc[0]
    if loc[1] == "outside":
        return ("outside", P, loc[2])
    rule = ("before", j - i) if i != OUTSIDE else (("from_first", j) if 2 * j < depth else ("from_last", depth - 1 - j))
    if loc[1] == "edge":
        return ("blocks", P, rule, {_edge_key(j, depth): loc[2:4]}, None)
    return ("blocks", P, rule, None, (loc[2], loc[4]))


def _merge_alike(a: list, b: list) -> list:
    """Two middle blocks' items as one: equal, the places of their frees' storages joined."""
    if len(a) != len(b):
        raise NotRepeated(f"two middle blocks differ: {len(a)} and {len(b)} entries")
    out = []
    for x, y in zip(a, b):
        if x[0] not in ("f", "r") or x[2][0] == "outside" or x[:2] != y[:2] or y[2][0] == "outside" or x[3] != y[3]:
            if x != y:
                raise NotRepeated("two middle blocks differ in what they allocate or free")
            out.append(x)
            continue
        dx, dy = x[2], y[2]
        ex, ey = dx[3] or {}, dy[3] or {}
        if dx[:3] != dy[:3] or any(ex[k] != v for k, v in ey.items() if k in ex) or (
                dx[4] and dy[4] and dx[4] != dy[4]):
            raise NotRepeated("two middle blocks free storages made in different places")
        out.append((*x[:2], (*dx[:3], {**ex, **ey} or None, dx[4] or dy[4]), x[3]))
    return out


def template_of(step: ShallowStep) -> Template:
    """The :class:`Template` of a shallow step.

    Raises:
        NotRepeated: if its log is not made of sweeps over the blocks, or two middle blocks differ.
    """
    storages, markers, items, real = step.storages, step.markers, step.items, step.labels
    depth = template_depth(step.depth)
    labs = [template_block(b, step.depth) for b in real]
    shape = stretches(labs, depth)
    where = _places(shape, depth)
    born = {item[1]: (where[k], real[k]) for k, item in enumerate(items) if item[0] == "a"}

    def titems(a: int, b: int) -> list:
        out = []
        for k in range(a, b):
            item, i = items[k], labs[k]
            if item[0] == "a":
                out.append(("a", item[2], storages[item[1]]))
            elif item[0] == "m":
                _, kind, payload = markers[item[1]]
                if payload is not None and i != OUTSIDE:  # the module's name, less its block: real[k] - i on
                    payload = (payload[0], ("block", payload[1][len(f"{step.blocks}.{real[k]}"):], real[k] - i),
                               *payload[2:])
                out.append(("m", kind, payload))
            else:
                loc, j = born[item[1]]
                out.append((item[0], item[2], _origin(loc, real[k], j, step.depth), 0 if i == OUTSIDE else real[k] - i))
        return out

    items_ = []
    for stretch in shape:
        edges = [titems(*r) for r in stretch.edges]
        if not stretch.over_blocks:
            items_.append(edges[0])
            continue
        middles = []
        for sweep in stretch.middles:
            merged = titems(*sweep[0])
            for r in sweep[1:]:
                merged = _merge_alike(merged, titems(*r))
            middles.append(merged)
        items_.append((edges, middles))
    return Template(shape, items_, step.blocks)


def merge_templates(a: Template, b: Template) -> Template:
    """Two shallow steps' templates as one: the same stretches, the places of their frees' storages joined
    (a free near an edge names a middle block at one depth and an edge block at the other).

    Raises:
        NotRepeated: if the two steps are not made of the same stretches.
    """
    shape = [(s.over_blocks, s.from_first, len(s.edges), len(s.middles)) for s in a.stretches]
    if shape != [(s.over_blocks, s.from_first, len(s.edges), len(s.middles)) for s in b.stretches] or (
            a.blocks != b.blocks):
        raise NotRepeated("the two shallow steps are not made of the same stretches")
    items = []
    for stretch, x, y in zip(a.stretches, a.items, b.items):
        if not stretch.over_blocks:
            items.append(_merge_alike(x, y))
        else:
            items.append(([_merge_alike(*e) for e in zip(x[0], y[0])], [_merge_alike(*s) for s in zip(x[1], y[1])]))
    return Template(a.stretches, items, a.blocks)


_KINDS = {"a": "alloc", "f": "free", "r": "resize"}


def write_log(t: Template, depth: int) -> tuple[tuple, tuple, tuple]:
    """The ``(log, storages, markers)`` of the template's step with ``depth`` blocks
    (:func:`helpers.shallow.traced_log`'s form): each sweep's middle block written once per middle block.

    Raises:
        NotRepeated: where a free's storage is not where the template says at this depth.
    """
    log, storages, markers, places = [], [], [], {}
    real, depth = depth, template_depth(depth)

    def emit(titems: list, place: tuple, block: int) -> None:
        for o, item in enumerate(titems):
            if item[0] == "a":
                places[(*place, o)] = len(storages)
                log.append((len(storages), "alloc", item[1]))
                storages.append(item[2])
            elif item[0] == "m":
                payload = item[2]
                if payload is not None and isinstance(payload[1], tuple):
                    payload = (payload[0], f"{t.blocks}.{block + payload[1][2]}{payload[1][1]}", *payload[2:])
                markers.append((len(log), item[1], payload))
            else:
                try:
                    serial = places[_place_at(t, item[2], block + item[3] if block != OUTSIDE else OUTSIDE, real)]
                except KeyError:
                    raise NotRepeated(f"a storage freed in block {block + item[3]} of {real} was not made where "
                                      "the template says") from None
                log.append((serial, _KINDS[item[0]], item[1]))

    for P, (stretch, items) in enumerate(zip(t.stretches, t.items)):
        if not stretch.over_blocks:
            emit(items, (P, "outside"), OUTSIDE)
            continue
        edges, middles = items
        emit(edges[0], (P, "edge", 0), stretch.edge_block(0, depth))
        for s, middle in enumerate(middles):
            first = stretch.edge_block(s, depth)
            step = 1 if first == 0 else -1
            for j in range(first + step, stretch.edge_block(s + 1, depth), step):
                emit(middle, (P, "middle", s, j), j)
            emit(edges[s + 1], (P, "edge", s + 1), stretch.edge_block(s + 1, depth))
    return tuple(log), tuple(storages), tuple(markers)


def _place_at(t: Template, origin: tuple, block: int, depth: int) -> tuple:
    """The place of the storage a free in (real) ``block`` names (:func:`_origin`), at ``depth`` blocks.

    Raises:
        KeyError: where the template has no such place.
    """
    if origin[0] == "outside":
        return (origin[1], "outside", origin[2])
    _, P, (rule, k), edges, middle = origin
    j = block + k if rule == "before" else (k if rule == "from_first" else depth - 1 - k)
    last, v = template_depth(depth) - 1, template_block(j, depth)
    if not 0 <= j < depth:
        raise KeyError(j)
    if v in (0, last) and edges and _edge_key(j, depth) in edges:
        e, offset = edges[_edge_key(j, depth)]
        if t.stretches[P].edge_block(e, last + 1) == v:
            return (P, "edge", e, offset)
    if 0 < v < last and middle is not None:
        return (P, "middle", middle[0], v, middle[1])
    raise KeyError(j)
