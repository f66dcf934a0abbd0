"""A shallow step read block by block: what :mod:`helpers.depth` learns the repeated block from.

The traced step (:func:`helpers.traced.shallow_step`) runs the same step with a few blocks, counted by a
:class:`ShallowStepTracker` and traced by a :class:`ShallowStepTracer`, which note what a profile does not keep: the
storage each new storage was made from, and where each event falls in the allocation log.  :func:`read_shallow_step`
turns that, and the storages of each parameter, buffer and optimizer state, into a :class:`ShallowStep`;
:func:`block_labels` then says which block each entry of its log belongs to (:data:`OUTSIDE`: none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from .engine.simulated import SimulatedTracker
from .engine.trace import Event, StepTracer
from .record import StepProfile

#: The label of what belongs to no block (the embedding, the head, the loss, a step event).
OUTSIDE = -1


class NotRepeated(ValueError):
    """The traced blocks do not repeat block by block (the message says where)."""


class ShallowStepTracker(SimulatedTracker):
    """The simulated GPU's tracker, noting also what makes the log readable block by block: ``parents``, serial -> the
    serial of the storage it was made from (the ``k``-th input of a ``foreach`` operation for its ``k``-th output, else
    the operation's first tensor input), and ``markers``, ``(log position, kind, payload)`` in order (``"reset"`` for
    :meth:`reset_peak`, and the events of :class:`ShallowStepTracer`)."""

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


class ShallowStepTracer(StepTracer):
    """A :class:`helpers.engine.trace.StepTracer` whose events are also markers of its meter's
    :class:`ShallowStepTracker` (``kind``: ``"event"`` for the profiled step, ``"first"`` for the untraced first step
    of a steady state: :meth:`of_first_step`)."""

    def __init__(self, meter, model, root=None, *, kind: str = "event"):
        super().__init__(meter, model, root)
        self._kind = kind

    @classmethod
    def of_first_step(cls, meter, model, root=None) -> "ShallowStepTracer":
        """The tracer of the untraced first step of a steady state (its events are markers of kind ``"first"``)."""
        return cls(meter, model, root, kind="first")

    def record(self, module, type_, phase, shape=None) -> Event:
        event = super().record(module, type_, phase, shape)
        self.meter.tracker.markers.append((event.log_position, self._kind, event))
        return event


@dataclass
class ShallowStep:
    """One shallow step of ``depth`` blocks, read block by block: its ``profile``; ``blocks``, the dotted name of the
    model's list of blocks (``"model.layers"``); its ``log``, ``storages`` and ``markers`` in the form
    :func:`helpers.depth.write_log` writes (:func:`traced_log`); ``items``, the log's entries and markers in one
    sequence (:func:`log_items`), and ``labels``, the block of each item (:func:`block_labels`)."""

    depth: int
    profile: StepProfile
    blocks: str
    log: tuple
    storages: tuple
    markers: tuple
    items: list
    labels: list


def read_shallow_step(depth: int, profile: StepProfile, tracker: ShallowStepTracker, model: torch.nn.Module,
                      owned: dict[str, list[int]], states: list[tuple[str, list[int]]]) -> ShallowStep:
    """The :class:`ShallowStep` of a step of ``depth`` blocks: its ``profile``, the ``tracker`` that counted it, its
    placed ``model``; ``owned``, the serials of the storages of each parameter and buffer by name, and ``states``,
    ``(parameter name, serials)`` of each optimizer state (``""``: a parameter of no name).

    Raises:
        NotRepeated: if the model has no list of ``depth`` alike blocks.
    """
    blocks = block_list(model, depth)
    owners = {serial: block_of(name, blocks) for name, serials in owned.items() for serial in serials}
    for name, serials in states:
        owners.update(dict.fromkeys(serials, block_of(name, blocks)))
    log, storages, markers = traced_log(profile, tracker.markers)
    items = log_items(log, markers)
    labels = block_labels(items, markers, blocks, owners, tracker.parents)
    return ShallowStep(depth, profile, blocks, log, storages, markers, items, labels)


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


def block_of(name: str, blocks: str) -> int:
    """The block a dotted module or parameter name is in (``blocks.3.attn`` -> 3), or :data:`OUTSIDE`."""
    if name.startswith(blocks + "."):
        head = name[len(blocks) + 1:].split(".", 1)[0]
        if head.isdigit():
            return int(head)
    return OUTSIDE


# -- the log as one sequence of entries and markers, each labelled with its block ---------------------------------
def traced_log(profile: StepProfile, markers: list) -> tuple[tuple, tuple, tuple]:
    """``(log, storages, markers)`` of a shallow step's ``profile`` and its tracker's ``markers``, in the form
    :func:`helpers.depth.write_log` writes: log entries ``(serial, kind, bytes)``; ``(category, dtype, shape, bytes)``
    by serial; markers ``(position, kind, payload)``, an event's payload ``(phase, module, module_type, note, shape)``."""
    log = tuple((a.serial, a.kind, a.nbytes) for a in profile.allocation_log)
    storages = tuple((s.category, s.dtype, s.shape, s.nbytes) for _, s in sorted(profile.storages.items()))
    markers = tuple((pos, kind, None if kind == "reset" else
                     (e.phase, e.module, e.module_type, e.note, e.shape)) for pos, kind, e in markers)
    return log, storages, markers


def log_items(log, markers) -> list[tuple]:
    """The log's entries and the markers in one sequence: ``("a"|"f"|"r", serial, bytes)`` for an alloc, a free or a
    resize, and ``("m", index)`` for a marker."""
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


def block_labels(items: list[tuple], markers: tuple, blocks: str, owners: dict[int, int],
                 parents: dict[int, int]) -> list[int]:
    """The block of each of :func:`log_items`, or :data:`OUTSIDE`, in a step whose list of blocks is ``blocks``;
    ``owners``, serial -> block of the parameters, buffers and optimizer states; ``parents``, as
    :class:`ShallowStepTracker` noted them.

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
                    OUTSIDE if payload[1] is None else block_of(payload[1], blocks))
        nxt[k] = ahead
    out: list[int | None] = []
    born: dict[int, int | None] = {}
    for k, item in enumerate(items):
        if item[0] == "m":
            payload = markers[item[1]][2]
            out.append(OUTSIDE if payload is None or payload[1] is None else block_of(payload[1], blocks))
        elif item[0] != "a" and nxt[k] == OUTSIDE and born.get(item[1], OUTSIDE) not in (None, OUTSIDE):
            out.append(born[item[1]])  # a block's storage freed outside the blocks (autocast's casts, on leaving)
        elif nxt[k] is not None:
            out.append(nxt[k])
        elif item[0] == "a":
            out.append(owners.get(item[1], born.get(parents.get(item[1]))))
        else:
            out.append(born.get(item[1]))
        if item[0] == "a":
            born[item[1]] = out[-1]
    return _fill_unlabelled(out, items, born)


def _fill_unlabelled(out: list, items: list, born: dict) -> list[int]:
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
