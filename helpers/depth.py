"""Exact depth extrapolation: the step of a model of L alike blocks, written from two shallow copies.

A transformer is one block repeated L times, and its training step allocates block by block: the embedding's tensors,
each block's forward, the head and the loss, each block's backward in reverse order, then the optimizer, whose
``foreach`` operations make one tensor per parameter, block after block.  So the step's allocation log
(:class:`helpers.record.Allocation`), and every figure a profile reports, is a few stretches that do not depend on L
and stretches repeated once per block.  This module:

1. traces the same step with each of :data:`DEPTHS` blocks and labels every log entry with its block (:func:`labels`);
2. cuts each log into stretches outside the blocks and sweeps over the blocks (:func:`parts`), and learns one template
   from both (:func:`learn`, :func:`join`): the stretches outside, the :data:`EDGE` blocks at each end of every sweep,
   and one middle block, every free written as "the storage made at this place of the block k before, or at this
   fixed place";
3. checks that the template writes both traced logs again, entry for entry, with their events and storages (the blocks
   repeat: same operations, sizes, dtypes, categories, lifetimes), and only then writes the log of L blocks
   (:func:`extrapolate`), read as a traced log is (:func:`helpers.record.profile_of_log`).

Where the check fails, or the model is not built of alike blocks, :func:`helpers.step.profile_step` traces every block,
and the profile's ``depth_note`` says why.  ``tests/test_depth.py`` checks written profiles against full traces.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from .config import StepConfig
from .engine.backends import resolve_backend
from .engine.simulated import SimulatedTracker
from .engine.trace import StepTracer
from .models import ModelSpec
from .record import StepProfile

#: The blocks at each end that may run unlike the others (a Hugging Face model keeps the first block's
#: input, ``inputs_embeds``, to the end of its forward pass: the next blocks each free the one before's).
EDGE = 2
#: The depths traced: :data:`EDGE` blocks at each end and two or three between, enough that a block
#: freeing what the block two before it made (a layer's input) is seen with both in the middle.
DEPTHS = (2 * EDGE + 2, 2 * EDGE + 3)
#: Below this many blocks a full trace costs about what the two shallow ones do.
MIN_BLOCKS = 20
#: The label of what belongs to no block.
OUTSIDE = -1


class NotRepeated(ValueError):
    """The traced blocks do not repeat as the template says (the message says where)."""


def applies(config: StepConfig, spec: ModelSpec) -> tuple[bool, str | None]:
    """Whether :func:`helpers.step.profile_step` writes ``config``'s step from shallow traces, and if not, the profile's
    ``depth_note`` (None for a model not built of repeated blocks, or a real GPU's step).  It does for the simulated
    step of a model of at least :data:`MIN_BLOCKS` alike blocks (``spec.blocks``), unless ``full_trace`` is asked for,
    a ``capacity`` may stop the step, ``workspaces`` are asked for, or checkpointing by segments (not per block) puts blocks in different segments."""
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
    if config.checkpoint and not _hf(spec) and config.checkpoint != spec.blocks + 2:
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


# -- probing a shallow step ------------------------------------------------------------------------
class ProbeTracker(SimulatedTracker):
    """The simulated GPU's tracker, noting also what makes the log readable block by block: ``parents``, serial -> the
    serial of the storage it was made from (the ``k``-th input of a ``foreach`` operation for its ``k``-th output, else
    the operation's first tensor input), and ``markers``, ``(log position, kind, payload)`` in order (``"reset"`` for
    :meth:`reset_peak`, and the events of :class:`ProbeTracer`)."""

    def __init__(self):
        super().__init__(None)
        self.parents: dict[int, int] = {}
        self.markers: list[tuple[int, str, Any]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        first = len(self.sizes)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if len(self.sizes) > first and not self.paused:
            outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
            listed = args[0] if args and isinstance(args[0], (list, tuple)) and len(args[0]) == len(outs) else None
            source = next((t for t in tree_leaves(args) if isinstance(t, torch.Tensor)), None)
            for k, t in enumerate(outs):
                serial, src = self.serial_of(t), listed[k] if listed is not None else source
                parent = self.serial_of(src) if isinstance(src, torch.Tensor) else None
                if serial is not None and serial >= first and parent is not None and parent < first:
                    self.parents.setdefault(serial, parent)
        return out

    def reset_peak(self) -> None:
        super().reset_peak()
        self.markers.append((len(self.log), "reset", None))


class ProbeTracer(StepTracer):
    """A :class:`helpers.engine.trace.StepTracer` whose events are also markers of a :class:`ProbeTracker`
    (``kind``: ``"event"`` for the profiled step, ``"first"`` for the untraced first step of a steady state)."""

    def __init__(self, meter, model, root=None, *, kind: str = "event"):
        super().__init__(meter, model, root)
        self._kind = kind

    def record(self, module, type_, phase, shape=None) -> Event:
        event = super().record(module, type_, phase, shape)
        self.meter._tracker.markers.append((event.log_position, self._kind, event))
        return event


@dataclass
class Probed:
    """One shallow step of ``depth`` blocks, probed: its ``profile``; ``markers`` and ``parents`` as
    :class:`ProbeTracker` noted them; ``owners``, serial -> block (or :data:`OUTSIDE`) of the parameters, buffers and
    optimizer states; ``blocks``, the dotted name of the model's list of blocks (``"model.layers"``)."""

    depth: int
    profile: StepProfile
    markers: list
    parents: dict[int, int]
    owners: dict[int, int]
    blocks: str


def probed(depth: int, profile: StepProfile, tracker: ProbeTracker, model: torch.nn.Module, optimizer,
           serials) -> Probed:
    """The :class:`Probed` of a shallow step of ``depth`` blocks, read while its tensors are alive: its ``profile``, the
    ``tracker`` that counted it, its placed ``model``, its ``optimizer`` (or None), and ``serials``, ``tensor ->
    [serial, ...]``, the storages a tensor is made of."""
    blocks = block_list(model, depth)
    owners, of_param = {}, {}
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        block = block_of(name, blocks)
        of_param[id(t)] = block
        owners.update(dict.fromkeys(serials(t), block))
    for param, state in (optimizer.state.items() if optimizer is not None else ()):
        for t in state.values():
            if isinstance(t, torch.Tensor):
                owners.update(dict.fromkeys(serials(t), of_param.get(id(param), OUTSIDE)))
    return Probed(depth, profile, tracker.markers, tracker.parents, owners, blocks)


def block_list(model: torch.nn.Module, depth: int) -> str:
    """The dotted name of ``model``'s list of ``depth`` blocks: of its ``nn.ModuleList`` of that length whose modules
    are of one type, the one holding most parameters.

    Raises:
        NotRepeated: if there is none.
    """
    found = [(sum(p.numel() for p in m.parameters()), name) for name, m in model.named_modules()
             if isinstance(m, torch.nn.ModuleList) and len(m) == depth and len({type(c) for c in m}) == 1]
    if not found:
        raise NotRepeated(f"no list of {depth} alike blocks in the model")
    return max(found)[1]


def virtual(block: int, depth: int) -> int:
    """The block of a step of ``depth`` blocks as the template sees it: the :data:`EDGE` blocks at each end
    as one end block, those between shifted down (a step of :func:`virtual_depth` blocks)."""
    return block if block == OUTSIDE else min(max(block - (EDGE - 1), 0), virtual_depth(depth) - 1)


def virtual_depth(depth: int) -> int:
    """The blocks of a step of ``depth`` blocks as the template sees them (:func:`virtual`)."""
    return depth - 2 * (EDGE - 1)


def block_of(name: str, blocks: str) -> int:
    """The block a dotted module or parameter name is in (``blocks.3.attn`` -> 3), or :data:`OUTSIDE`."""
    if name.startswith(blocks + "."):
        head = name[len(blocks) + 1:].split(".", 1)[0]
        if head.isdigit():
            return int(head)
    return OUTSIDE


# -- the log as labelled items ---------------------------------------------------------------------
def concrete(p: Probed) -> tuple[tuple, tuple, tuple]:
    """``(log, storages, markers)`` of a probed step, in the form :func:`render` writes:
    log entries ``(serial, kind, bytes)``; ``(category, dtype, shape, bytes)`` by serial; markers
    ``(position, kind, payload)``, an event's payload ``(phase, module, module_type, note, shape)``."""
    log = tuple((a.serial, a.kind, a.nbytes) for a in p.profile.allocation_log)
    storages = tuple((s.category, s.dtype, s.shape, s.nbytes) for _, s in sorted(p.profile.storages.items()))
    markers = tuple((pos, kind, None if kind == "reset" else
                     (e.phase, e.module, e.module_type, e.note, e.shape)) for pos, kind, e in p.markers)
    return log, storages, markers


def _items(log, markers) -> list[tuple]:
    """The log's entries and the markers in one sequence: ``("a"|"f"|"r", serial, bytes)`` and ``("m", index)``."""
    items, m = [], 0
    for j in range(len(log) + 1):
        while m < len(markers) and markers[m][0] == j:
            items.append(("m", m))
            m += 1
        if j < len(log):
            serial, kind, nbytes = log[j]
            items.append((kind[0], serial, nbytes))
    return items


#: The step events before which no module runs: what happens there is labelled by storage.
_UNMARKED = ("model", "optimizer.step", "zero_grad")


def labels(p: Probed, items: list[tuple], markers: tuple) -> list[int]:
    """The block of each item, or :data:`OUTSIDE`.

    An event's block is its module's.  A log entry followed by a module event (or by the input, loss and backward step
    events) is in that event's block, but a free (or resize) there of a block's storage is in that block (the weight
    casts autocast frees on leaving, one run per block).  Elsewhere (placing, the optimizer step, ``zero_grad``, after
    the last event) a new storage is in its owner's block (a parameter's, or the parameter's of an optimizer state),
    else in the block of the storage it was made from, else in the block of the next item that has one in that
    stretch; a free or resize is in its storage's block."""
    n = len(items)
    nxt: list[int | None] = [None] * n  # the next event's block, None where no event says it
    ahead = None
    for k in range(n - 1, -1, -1):
        if items[k][0] == "m":
            kind, payload = markers[items[k][1]][1:]
            if kind != "reset":
                ahead = None if payload[1] is None and payload[0] in _UNMARKED else (
                    OUTSIDE if payload[1] is None else block_of(payload[1], p.blocks))
        nxt[k] = ahead
    out: list[int | None] = []
    born: dict[int, int | None] = {}
    for k, item in enumerate(items):
        if item[0] == "m":
            payload = markers[item[1]][2]
            out.append(OUTSIDE if payload is None or payload[1] is None else block_of(payload[1], p.blocks))
        elif item[0] != "a" and nxt[k] == OUTSIDE and born.get(item[1], OUTSIDE) not in (None, OUTSIDE):
            out.append(born[item[1]])  # a block's storage freed outside the blocks (autocast's casts, on leaving)
        elif nxt[k] is not None:
            out.append(nxt[k])
        elif item[0] == "a":
            out.append(p.owners.get(item[1], born.get(p.parents.get(item[1]))))
        else:
            out.append(born.get(item[1]))
        if item[0] == "a":
            born[item[1]] = out[-1]
    return _fill(out, items, born)


def _fill(out: list, items: list, born: dict) -> list[int]:
    """Give each unlabelled new storage the label of the next labelled item of its stretch (else the previous, else
    :data:`OUTSIDE`), and each free of one its storage's."""
    n, k = len(out), 0
    while k < n:
        if out[k] is not None:
            k += 1
            continue
        end = k
        while end < n and out[end] is None:
            end += 1
        fill = out[end] if end < n else (out[k - 1] if k else OUTSIDE)
        for i in range(k, end):
            if items[i][0] == "a":
                born[items[i][1]] = out[i] = fill
            else:
                out[i] = born.get(items[i][1])
                out[i] = fill if out[i] is None else out[i]
        k = end
    return out


# -- sweeps over the blocks -----------------------------------------------------------------------
@dataclass
class _Part:
    """A stretch of items outside the blocks (``ends`` holds its one range), or a zigzag over the blocks:
    its end stretches (blocks 0 or d-1, alternately: ``low`` says which comes first) and, between each
    two, the middle stretches of one sweep, in its order."""

    zigzag: bool
    low: bool
    ends: list[tuple[int, int]]
    mids: list[list[tuple[int, int]]]

    def end_label(self, e: int, depth: int) -> int:
        """The block of end stretch ``e`` in a step of ``depth`` blocks."""
        return 0 if (e % 2 == 0) == self.low else depth - 1


def parts(labels: list[int], depth: int) -> list[_Part]:
    """The items as stretches outside the blocks and zigzags over the blocks 0..depth-1.

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
            out.append(_Part(False, False, [(a, b)], []))
            continue
        if label not in (0, depth - 1):
            raise NotRepeated(f"a sweep over the blocks starts at block {label} of {depth}")
        part, at = _Part(True, label == 0, [(a, b)], []), label
        while k < len(runs) and runs[k][0] == at + (1 if at == 0 else -1):
            step, other = (1, depth - 1) if at == 0 else (-1, 0)
            sweep = []
            for expected in [*range(at + step, other, step), other]:
                if k >= len(runs) or runs[k][0] != expected:
                    raise NotRepeated(f"a sweep over the blocks skips block {expected} of {depth}")
                sweep.append(runs[k][1:])
                k += 1
            part.mids.append(sweep[:-1])
            part.ends.append(sweep[-1])
            at = other
        out.append(part)
    return out


def _where(parts_: list[_Part], depth: int) -> dict[int, tuple]:
    """Item index -> ``(part, "g", offset)``, ``(part, "end", e, offset)`` or ``(part, "mid", sweep, block, offset)``."""
    where = {}
    for P, part in enumerate(parts_):
        if not part.zigzag:
            a, b = part.ends[0]
            where.update({k: (P, "g", k - a) for k in range(a, b)})
            continue
        for e, (a, b) in enumerate(part.ends):
            where.update({k: (P, "end", e, k - a) for k in range(a, b)})
        for s, sweep in enumerate(part.mids):
            step = 1 if part.end_label(s, depth) == 0 else -1
            for n, (a, b) in enumerate(sweep):
                where.update({k: (P, "mid", s, part.end_label(s, depth) + step * (n + 1), k - a)
                              for k in range(a, b)})
    return where


# -- the template: outside stretches, end blocks, one middle block ---------------------------------
@dataclass
class Template:
    """What :func:`learn` reads from a probed step, and :func:`render` writes at any depth: ``parts``, the shape of the
    step (:func:`parts`); ``items``, per part, its items with serials replaced by places (outside, ``[items]``; a
    zigzag, ``(ends, sweeps)``: the items of each end stretch and of one middle block of each sweep); ``blocks``, the
    dotted name of the list of blocks, for the events' module names."""

    parts: list[_Part]
    items: list
    blocks: str


def _edge(j: int, depth: int) -> int:
    """The key of block ``j`` of ``depth`` among the end blocks: ``j`` at the start, ``j - depth`` at the end."""
    return j if j < EDGE else j - depth


def _target(loc: tuple, i: int, j: int, depth: int) -> tuple:
    """Where a free or resize in block ``i`` finds its storage, made in block ``j`` at ``loc`` (a step of ``depth``
    blocks; real blocks, not :func:`virtual`): ``("g", part, offset)``, or ``("z", part, rule, ends, mid)``: the block
    by ``rule`` (``("rel", j - i)``, ``("start", j)`` or ``("fromend", depth - 1 - j)``), then
    ``ends = {_edge(j): (e, offset)}`` if that block is at an end of the zigzag, else ``mid = (sweep, offset)``."""
    P = loc[0]
    if loc[1] == "g":
        return ("g", P, loc[2])
    rule = ("rel", j - i) if i != OUTSIDE else (("start", j) if 2 * j < depth else ("fromend", depth - 1 - j))
    if loc[1] == "end":
        return ("z", P, rule, {_edge(j, depth): loc[2:4]}, None)
    return ("z", P, rule, None, (loc[2], loc[4]))


def _merge(a: list, b: list) -> list:
    """Two middle blocks' items as one: equal, the places of their frees' storages joined."""
    if len(a) != len(b):
        raise NotRepeated(f"two middle blocks differ: {len(a)} and {len(b)} entries")
    out = []
    for x, y in zip(a, b):
        if x[0] not in ("f", "r") or x[2][0] == "g" or x[:2] != y[:2] or y[2][0] == "g" or x[3] != y[3]:
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


def learn(p: Probed) -> Template:
    """The :class:`Template` of a probed step (:data:`DEPTHS`' deeper one).

    Raises:
        NotRepeated: if its log is not made of sweeps over the blocks, or two middle blocks differ.
    """
    log, storages, markers = concrete(p)
    items = _items(log, markers)
    real = labels(p, items, markers)
    depth = virtual_depth(p.depth)
    labs = [virtual(b, p.depth) for b in real]
    shape = parts(labs, depth)
    where = _where(shape, depth)
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
                    payload = (payload[0], ("block", payload[1][len(f"{p.blocks}.{real[k]}"):], real[k] - i),
                               *payload[2:])
                out.append(("m", kind, payload))
            else:
                loc, j = born[item[1]]
                out.append((item[0], item[2], _target(loc, real[k], j, p.depth), 0 if i == OUTSIDE else real[k] - i))
        return out

    items_ = []
    for part in shape:
        ends = [titems(*r) for r in part.ends]
        if not part.zigzag:
            items_.append(ends[0])
            continue
        sweeps = []
        for sweep in part.mids:
            merged = titems(*sweep[0])
            for r in sweep[1:]:
                merged = _merge(merged, titems(*r))
            sweeps.append(merged)
        items_.append((ends, sweeps))
    return Template(shape, items_, p.blocks)


def join(a: Template, b: Template) -> Template:
    """Two probed steps' templates as one: the same stretches, the places of their frees' storages joined
    (a free near an end names a middle block at one depth and an end block at the other).

    Raises:
        NotRepeated: if the two steps are not made of the same stretches.
    """
    shape = [(p.zigzag, p.low, len(p.ends), len(p.mids)) for p in a.parts]
    if shape != [(p.zigzag, p.low, len(p.ends), len(p.mids)) for p in b.parts] or a.blocks != b.blocks:
        raise NotRepeated("the two shallow steps are not made of the same stretches")
    items = []
    for part, x, y in zip(a.parts, a.items, b.items):
        if not part.zigzag:
            items.append(_merge(x, y))
        else:
            items.append(([_merge(*e) for e in zip(x[0], y[0])], [_merge(*s) for s in zip(x[1], y[1])]))
    return Template(a.parts, items, a.blocks)


_KINDS = {"a": "alloc", "f": "free", "r": "resize"}


def render(t: Template, depth: int) -> tuple[tuple, tuple, tuple]:
    """The ``(log, storages, markers)`` of the template's step with ``depth`` blocks (:func:`concrete`'s form).

    Raises:
        NotRepeated: where a free's storage is not where the template says at this depth.
    """
    log, storages, markers, places = [], [], [], {}
    real, depth = depth, virtual_depth(depth)

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
                    serial = places[_place(t, item[2], block + item[3] if block != OUTSIDE else OUTSIDE, real)]
                except KeyError:
                    raise NotRepeated(f"a storage freed in block {block + item[3]} of {real} was not made where "
                                      "the template says") from None
                log.append((serial, _KINDS[item[0]], item[1]))

    for P, (part, items) in enumerate(zip(t.parts, t.items)):
        if not part.zigzag:
            emit(items, (P, "g"), OUTSIDE)
            continue
        ends, sweeps = items
        emit(ends[0], (P, "end", 0), part.end_label(0, depth))
        for s, sweep in enumerate(sweeps):
            first = part.end_label(s, depth)
            step = 1 if first == 0 else -1
            for j in range(first + step, part.end_label(s + 1, depth), step):
                emit(sweep, (P, "mid", s, j), j)
            emit(ends[s + 1], (P, "end", s + 1), part.end_label(s + 1, depth))
    return tuple(log), tuple(storages), tuple(markers)


def _place(t: Template, target: tuple, block: int, depth: int) -> tuple:
    """The place of the storage a free in (real) ``block`` names (:func:`_target`), at ``depth`` blocks.

    Raises:
        KeyError: where the template has no such place.
    """
    if target[0] == "g":
        return (target[1], "g", target[2])
    _, P, (rule, k), ends, mid = target
    j = block + k if rule == "rel" else (k if rule == "start" else depth - 1 - k)
    last, v = virtual_depth(depth) - 1, virtual(j, depth)
    if not 0 <= j < depth:
        raise KeyError(j)
    if v in (0, last) and ends and _edge(j, depth) in ends:
        e, offset = ends[_edge(j, depth)]
        if t.parts[P].end_label(e, last + 1) == v:
            return (P, "end", e, offset)
    if 0 < v < last and mid is not None:
        return (P, "mid", mid[0], v, mid[1])
    raise KeyError(j)


def extrapolate(shallow: Probed, deep: Probed, depth: int) -> tuple[tuple, tuple, tuple]:
    """The ``(log, storages, markers)`` of the step with ``depth`` blocks, from two probed shallower ones: the template
    learned from both (:func:`join`) must first write both again, exactly.

    Raises:
        NotRepeated: where it does not (the message says what differs first).
    """
    if shallow.blocks != deep.blocks:
        raise NotRepeated(f"the lists of blocks differ: {shallow.blocks} and {deep.blocks}")
    template = join(learn(deep), learn(shallow))
    for p in (shallow, deep):
        got, want = render(template, p.depth), concrete(p)
        for name, g, w in zip(("log entry", "storage", "event"), got, want):
            if g != w:
                k = next((k for k, (x, y) in enumerate(zip(g, w)) if x != y), min(len(g), len(w)))
                raise NotRepeated(f"the template does not write the {p.depth}-block step again: "
                                  f"{name} {k} differs")
    return render(template, depth)
