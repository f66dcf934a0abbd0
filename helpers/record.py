"""The record of one traced training step, and the questions it answers.

Introduced in lesson 03 (ResNet18 layer by layer).  A :class:`StepProfile` is
what :func:`helpers.step.profile_step` returns: the events, the peak, memory by
category, every storage with its dtype and shape, and the allocation log.  The
figures (:mod:`helpers.teaching.plots`) and the widgets only read it; each
category's colour is :data:`helpers.palette.CATEGORY_COLORS`.

The categories.  Rajbhandari et al., "ZeRO: Memory Optimizations
Toward Training Trillion Parameter Models" (2020), section 3, splits training
memory into *model states* (parameters, gradients, optimizer states) and
*residual states* (activations, temporary buffers, fragmentation).  A traced
step labels each storage it saw with one category:

* ``parameters``: the model's parameters and buffers (BatchNorm statistics);
* ``gradients``: the ``.grad`` tensors of the parameters;
* ``optimizer_states``: everything in ``optimizer.state`` (momentum, Adam's
  two moments, step counters);
* ``input``: the input batch and its targets (the data itself; conv1 also
  saves the batch for backward, but it is counted here);
* ``activations``: tensors autograd saved for backward (including tensors
  recomputed for backward under activation checkpointing);
* ``other``: everything else alive: the loss, gradients of
  activations flowing through backward, temporary buffers.  On a GPU it also
  holds what the storage tracker cannot see (cuDNN/cuBLAS workspaces).

A storage has the first category that applies, in the order above.
"""

from __future__ import annotations

import bisect
import dataclasses
import html
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from .config import StepConfig
from .engine.meter import Meter
from .engine.trace import Event
from .units import MiB, fmt_bytes


CATEGORIES = ("parameters", "gradients", "optimizer_states", "input", "activations", "other")


def label_storages(sizes: dict[int, int], roles: dict[str, set[int]], default: str = "other") -> dict[int, str]:
    """Give every storage serial in ``sizes`` one category: the first of ``roles`` that holds it.

    Args:
        sizes: serial -> bytes, as :meth:`helpers.engine.meter.Meter.storages` gives them.
        roles: category -> the serials known to belong to it, in the order of
            precedence (:data:`CATEGORIES`' order for a profile): a serial in
            several gets the first.
        default: the category of a serial in none of them.

    Returns:
        serial -> category name, in the order of ``sizes``.
    """
    labels = dict.fromkeys(sizes, default)
    for name, serials in reversed(roles.items()):  # the first role is written last: it wins
        for serial in serials:
            if serial in labels:
                labels[serial] = name
    return labels


def bytes_by_category(serials, sizes: dict[int, int], labels: dict[int, str],
                      categories: tuple[str, ...] = CATEGORIES) -> dict[str, int]:
    """Sum the bytes of ``serials`` per category.

    Args:
        serials: storage serials alive at some moment.
        sizes: serial -> bytes.
        labels: serial -> category, from :func:`label_storages`.
        categories: every category, in order (default: :data:`CATEGORIES`).

    Returns:
        A dict with every name of ``categories`` as key, bytes as value.
    """
    totals = dict.fromkeys(categories, 0)
    for serial in serials:
        totals[labels[serial]] += sizes[serial]
    return totals


def _mib(nbytes: int) -> str:
    """Bytes in MiB for a short text: one decimal, two significant digits below 1 MiB."""
    value = nbytes / MiB
    return f"{value:.1f}" if abs(value) >= 1 else f"{value:.2g}"


class Allocation(NamedTuple):
    """One entry of a step's allocation log.

    Attributes:
        serial: the storage (a key of :attr:`StepProfile.storages`).
        kind: ``"alloc"``, ``"free"`` or ``"resize"``.
        nbytes: the change in bytes (negative for a free or a shrink).
        category: the storage's category (:data:`CATEGORIES`).
        event: index of the first event recorded after it (the change happened
            between ``events[event - 1]`` and ``events[event]``).
    """

    serial: int
    kind: str
    nbytes: int
    category: str
    event: int


@dataclass(frozen=True)
class Storage:
    """One tensor storage that the step allocated (or placed, for the model).

    Attributes:
        serial: its number in allocation order (see
            :class:`helpers.engine.counting.StorageTracker`).
        category: one of :data:`CATEGORIES`.
        dtype, shape: of the tensor that created it.
        nbytes: bytes it occupies, rounded up to 512.
    """

    serial: int
    category: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    nbytes: int


@dataclass(repr=False)
class StepProfile:
    """The memory of one traced training step.  All sizes in bytes.

    ``repr(profile)`` is two lines: the model, the options that differ from
    :class:`helpers.config.StepConfig`'s defaults, the peak, the event that
    reached it, and the categories at the peak; a notebook shows the same as a
    small table.

    Attributes:
        backend: ``"cuda"`` (measured) or ``"simulated"`` (fake tensors).
        model: model name.
        config: the :class:`helpers.config.StepConfig` that was run.  The
            options below (``batch_size``, ``amp``, ``checkpoint``,
            ``optimizer``, ``steady_state``, ``reentrant``, ``offload``) are
            read from it.
        input_shape: the shape of one sample the step fed the model: the batch
            is ``(batch_size, *input_shape)``.  A field of its own, since the
            config's ``input_shape`` is often ``None``: this is then the
            model's own (the ``"mlp"`` preset's ``(64,)``), ``(seq_len,)`` for
            token ids, ``()`` for ``inputs=``, else ``(3, image_size, image_size)``.
        parameter_count: number of parameters (elements, not bytes).
        events: the :class:`helpers.engine.trace.Event` list, in order.
        event_categories: bytes per category at each event.
        peak_allocated_bytes: peak allocated over the whole step.
        peak_event: index of the first event at which that peak had been
            reached (the peak happened between it and the event before).
        categories: bytes per category alive at the peak.
        reserved_bytes: ``torch.cuda.memory_reserved()`` after the step (cuda),
            ``None`` when simulated.
        params_without_grad: names of trainable parameters that got no gradient.
        peak_allocation: simulated only: the serial number of the allocation
            that reached the peak.  Two runs of one configuration at different
            batch sizes whose peaks have the same serial peaked at the same
            operation (see :class:`helpers.batch.PeakCurve`).  ``None`` on cuda.
        storages: serial -> :class:`Storage`, for every storage the tracker
            counted: the model's, the traced step's, and with ``steady_state``
            the untraced first step's.
        peak_serials: serials of the storages alive at the peak.
        allocation_log: every :class:`Allocation` of the traced step, in order
            (the input of the allocator model, lesson 06).
        depth_note: for a model of repeated blocks, how its log was made: written
            exactly from traces of fewer blocks (:mod:`helpers.depth`), or traced
            in full and why; None for other models.
    """

    backend: str
    model: str
    config: StepConfig
    input_shape: tuple[int, ...]
    parameter_count: int
    events: list[Event]
    event_categories: list[dict[str, int]]
    peak_allocated_bytes: int
    peak_event: int
    categories: dict[str, int]
    reserved_bytes: int | None
    params_without_grad: list[str] = field(default_factory=list)
    peak_allocation: int | None = None
    storages: dict[int, Storage] = field(default_factory=dict)
    peak_serials: tuple[int, ...] = ()
    allocation_log: list[Allocation] = field(default_factory=list)
    depth_note: str | None = None

    # -- the options, as the config gives them ---------------------------------------
    @property
    def batch_size(self) -> int:
        """Samples per batch (``config.batch_size``)."""
        return self.config.batch_size

    @property
    def amp(self) -> bool:
        """Autocast was on (``config.amp``), in ``config.amp_dtype``: float16 with a
        GradScaler, as on GPUs, unless bfloat16 was asked for."""
        return self.config.amp

    @property
    def checkpoint(self) -> int:
        """Checkpoint segments (``config.checkpoint``; 0: off)."""
        return self.config.checkpoint

    @property
    def optimizer(self) -> str:
        """One of :data:`helpers.config.OPTIMIZERS` (``config.optimizer``)."""
        return self.config.optimizer

    @property
    def steady_state(self) -> bool:
        """The traced step is the second one: optimizer states exist from the
        start (``config.steady_state``; see :func:`helpers.step.profile_step`)."""
        return self.config.steady_state

    @property
    def reentrant(self) -> bool:
        """Checkpointing used the reentrant variant (``config.reentrant``)."""
        return self.config.reentrant

    @property
    def offload(self) -> bool:
        """Saved tensors were kept in host memory (``config.offload``)."""
        return self.config.offload

    # -- how a profile introduces itself ---------------------------------------------
    def _options_text(self) -> str:
        """The options of :attr:`config` that differ from :class:`StepConfig`'s
        defaults, as ``name=value`` (the model, its name and the device are
        said otherwise)."""
        defaults = StepConfig()
        changed = []
        for f in dataclasses.fields(StepConfig):
            value = getattr(self.config, f.name)
            if f.name not in ("model", "name", "device") and value != getattr(defaults, f.name):
                value = getattr(value, "__name__", value) if callable(value) else value
                changed.append(f"{f.name}={value}")
        return ", ".join(changed)

    def __repr__(self) -> str:
        options = self._options_text()
        at_peak = ", ".join(f"{name} {_mib(nbytes)}" for name, nbytes in self.categories.items() if nbytes)
        return (f"<StepProfile {self.model} ({self.backend}{', ' + options if options else ''}): "
                f"peak {_mib(self.peak_allocated_bytes)} MiB, reached by event {self.peak_event}, "
                f"{self.peak.label};\n at the peak, in MiB: {at_peak}>")

    def _repr_html_(self) -> str:
        """A small table, for notebooks."""
        left, right, options = "style='text-align:left'", "style='text-align:right'", self._options_text()
        rows = "".join(f"<tr><td {left}>&nbsp;&nbsp;{name}</td><td {right}>{_mib(nbytes)} MiB</td></tr>"
                       for name, nbytes in self.categories.items() if nbytes)
        return (f"<table><caption {left}><b>StepProfile</b> {html.escape(self.model)} ({self.backend}"
                f"{html.escape(', ' + options) if options else ''})</caption>"
                f"<tr><th {left}>peak allocated</th><th {right}>{_mib(self.peak_allocated_bytes)} MiB</th></tr>"
                f"<tr><td {left} colspan='2'>reached by event {self.peak_event}, "
                f"{html.escape(self.peak.label)}</td></tr>"
                f"<tr><td {left} colspan='2'>at the peak:</td></tr>{rows}</table>")

    @property
    def peak(self) -> Event:
        """The event at which the peak had been reached (``events[peak_event]``)."""
        return self.events[self.peak_event]

    @property
    def model_state_bytes(self) -> int:
        """Parameters + gradients + optimizer states at ``optimizer.step()``, in bytes.

        The *model states* of ZeRO (Rajbhandari et al., SC20, section 3): at
        the optimizer step all three are alive (with ``step_in_backward``
        each gradient is gone by then, and this is parameters + states).  With Adam in float32 that is
        4 + 4 + 8 = 16 bytes per parameter, with or without autocast (which
        keeps no 16-bit copy of the parameters between steps); the optimizer
        states exist at that moment in any step, first or steady.
        """
        cats = self.event_categories[self.events.index(self.find(None, "optimizer.step"))]
        return cats["parameters"] + cats["gradients"] + cats["optimizer_states"]

    def peak_during(self, event: Event) -> int:
        """The highest allocated bytes between the event before ``event`` and ``event``.

        Replays the allocation log over that interval: for the
        ``optimizer.step`` event, the height the optimizer step reached with
        its temporaries, which the events themselves (taken after the step
        returned) do not show.

        Raises:
            ValueError: for the first event (nothing happens before it).
        """
        if event.index == 0:
            raise ValueError("the first event has no interval before it")
        before = self.events[event.index - 1]
        allocated = top = before.allocated_bytes
        for entry in self.allocation_log[before.log_position:event.log_position]:
            allocated += entry.nbytes
            top = max(top, allocated)
        return top

    def at_peak(self) -> list[Storage]:
        """The storages alive at the peak, in allocation order.

        Their bytes add up to :attr:`peak_allocated_bytes` in simulated mode
        (on cuda, the counters also hold memory the tracker cannot see).
        """
        return [self.storages[s] for s in sorted(self.peak_serials)]

    def to_dict(self) -> dict:
        """A JSON-ready dict (what ``python -m helpers profile --json`` prints)."""
        return {
            "backend": self.backend,
            "model": self.model,
            "batch_size": self.batch_size,
            "input_shape": list(self.input_shape),
            "amp": self.amp,
            "checkpoint": self.checkpoint,
            "optimizer": self.optimizer,
            "steady_state": self.steady_state,
            "reentrant": self.reentrant,
            "offload": self.offload,
            "parameter_count": self.parameter_count,
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "peak_event": self.peak_event,
            "reserved_bytes": self.reserved_bytes,
            "categories": self.categories,
            "params_without_grad": self.params_without_grad,
            "config": self.config.to_dict(),
            "events": [
                {
                    "index": e.index,
                    "module": e.module,
                    "type": e.type,
                    "phase": e.phase,
                    "allocated_bytes": e.allocated_bytes,
                    "delta_bytes": e.delta_bytes,
                    "shape": list(e.shape) if e.shape is not None else None,
                    "categories": cats,
                }
                for e, cats in zip(self.events, self.event_categories)
            ],
        }

    def find(self, module: str, phase: str, nth: int = 0) -> Event:
        """The ``nth`` event (0-based) of ``module`` in ``phase``.

        Raises:
            KeyError: if there is no such event.
        """
        hits = [e for e in self.events if e.module == module and e.phase == phase]
        if nth >= len(hits):
            raise KeyError(f"no event #{nth} for module {module!r} in phase {phase!r}")
        return hits[nth]

    def stage_deltas(self, phase: str = "fwd") -> dict[str, int]:
        """Bytes each top-level stage of the model adds, summed over its events.

        A stage is the first part of a dotted module name (``conv1``,
        ``layer1``, ...).  With ``phase="fwd"`` this sums the deltas of the
        ``pre`` and ``fwd`` events of the forward pass (what the stage leaves
        allocated); with ``phase="bwd"`` the deltas of ``bwd`` events
        (what its backward frees, negative).

        Raises:
            ValueError: for another phase.
        """
        phases = {"fwd": ("pre", "fwd"), "bwd": ("bwd",)}
        if phase not in phases:
            raise ValueError(f"phase must be 'fwd' or 'bwd', got {phase!r}")
        totals: dict[str, int] = {}
        for e in self.events:
            if e.module and e.phase in phases[phase]:
                stage = e.module.split(".")[0]
                totals[stage] = totals.get(stage, 0) + e.delta_bytes
        return totals

    def table(self, phases: tuple[str, ...] | None = None, min_delta: int = 0,
              events: slice | None = None) -> str:
        """The per-module log as text, one event per line, in MiB.

        Args:
            phases: keep only module events of these phases (step events are
                always kept); all when ``None``.
            min_delta: hide module events whose change is smaller than this
                many bytes in absolute value.
            events: show only this slice of the events (e.g. ``slice(0, 40)``).
        """
        lines = [f"{'#':>4}  {'phase':<14} {'module':<40} {'type':<18} {'delta MiB':>10} {'alloc MiB':>10}  output shape"]
        for e in self.events[events or slice(None)]:
            if e.module is not None:
                if phases is not None and e.phase not in phases:
                    continue
                if abs(e.delta_bytes) < min_delta:
                    continue
                name = "  " * e.depth + (e.module.split(".")[-1] if e.module else "(model)")
            else:
                name = f"[{e.type}]"
            shape = "" if e.shape is None else "(" + ", ".join(map(str, e.shape)) + ")"
            lines.append(
                f"{e.index:>4}  {e.phase:<14} {name:<40.40} {e.type if e.module is not None else '':<18.18} "
                f"{e.delta_bytes / MiB:>+10.1f} {e.allocated_bytes / MiB:>10.1f}  {shape}"
            )
        return "\n".join(lines)

    def summary(self) -> str:
        """Memory by category at the peak, then the peak itself, as text."""
        lines = [f"at the peak (reached by event {self.peak_event}, {self.peak.label}):"]
        for name, nbytes in self.categories.items():
            lines.append(f"  {name:<17} {fmt_bytes(nbytes):>12}")
        if self.reserved_bytes is not None:
            lines.append(f"reserved by the caching allocator after the step: {fmt_bytes(self.reserved_bytes)}")
        lines.append(f"peak allocated: {fmt_bytes(self.peak_allocated_bytes)} ({self.backend})")
        return "\n".join(lines)

    def allocation_event(self, storage: Storage) -> Event:
        """The event that closes the interval in which ``storage`` was allocated.

        ``storage`` was first allocated between ``events[e.index - 1]`` and
        the returned ``e`` (the :attr:`Allocation.event` of its first entry
        in :attr:`allocation_log`).  Its :attr:`Event.label` says where: the
        output of a module that calls no submodule after it is made during
        ``"forward of Linear 'attn.q'"``; what a module's own code computes
        between two submodules, ``"before Linear 'up'"`` (the next one's
        ``pre`` event).  A storage allocated before the first event (the
        model's parameters; with ``steady_state``, the untraced first step's
        tensors) gives ``events[0]``.

        Raises:
            KeyError: if ``storage`` is not one of this step's
                :attr:`storages`.
            ValueError: if it was allocated after the last event.
        """
        if self.storages.get(storage.serial) != storage:
            raise KeyError(f"{storage} is not a storage of this step")
        index = next(a.event for a in self.allocation_log if a.serial == storage.serial)
        if index == len(self.events):
            raise ValueError(f"{storage} was allocated after the step's last event")
        return self.events[index]

    def kept_between(self, first: Event, last: Event, until: Event | None = None) -> list[Storage]:
        """The storages allocated after ``first`` and by ``last`` that are still alive at ``until``.

        "Allocated between" means that :meth:`allocation_event` lies in
        ``(first, last]``: allocated after ``first`` was recorded, no later
        than ``last`` (``find("blocks.0", "pre")`` and ``find("blocks.0",
        "fwd")`` give what block 0's forward made).  "Alive" means holding
        bytes at ``until`` (allocated, not freed, not resized to 0): in
        ``until.live``.  What the storages weigh is their ``nbytes`` (bytes,
        rounded up to 512; a storage resized in place counts its largest
        size).  Their category is not looked at: filter on
        :attr:`Storage.category` for that.

        Args:
            first, last: events of this step, ``first`` before ``last``.
            until: the moment at which they must be alive, not before
                ``last`` (default: ``last`` itself).  ``find("", "fwd")``,
                the end of the forward pass, gives what is kept for backward.

        Returns:
            The storages, in allocation order.

        Raises:
            ValueError: if an event is not one of this step's, ``last`` is not
                after ``first``, or ``until`` is before ``last``.
        """
        until = last if until is None else until
        for name, event in (("first", first), ("last", last), ("until", until)):
            if not 0 <= event.index < len(self.events) or self.events[event.index] != event:
                raise ValueError(f"{name} ({event.label}) is not an event of this step")
        if last.index <= first.index:
            raise ValueError(f"last (event {last.index}) must come after first (event {first.index})")
        if until.index < last.index:
            raise ValueError(f"until (event {until.index}) must not come before last (event {last.index})")
        alive = set(until.live)
        made: dict[int, int] = {}  # serial -> index of its allocation event
        for a in self.allocation_log:
            made.setdefault(a.serial, a.event)
        return [self.storages[s] for s in sorted(alive) if first.index < made[s] <= last.index]

    def categories_by_serial(self) -> dict[int, str]:
        """The category of every storage, by serial (:data:`CATEGORIES`).

        What :func:`helpers.teaching.plots.plot_memory_map` colours the blocks
        of a replay of :attr:`allocation_log` by: the allocator model's trace
        names each block by the serial of the storage in it.
        """
        return {serial: storage.category for serial, storage in self.storages.items()}


def record_step(meter: Meter, events: list[Event], roles: dict[str, set[int]], *, config: StepConfig, model: str,
                input_shape: tuple[int, ...], parameter_count: int, params_without_grad: list[str]) -> StepProfile:
    """The :class:`StepProfile` of a traced step, read from its meter while the step's tensors are alive.

    Every storage the meter counted gets the first category of ``roles`` that
    holds it (:func:`label_storages`), else ``other``; on cuda, what the real
    counters hold beyond the tracker's storages is ``other`` too.

    Args:
        meter: the step's :class:`helpers.engine.meter.Meter`, still inside its block.
        events: the :class:`helpers.engine.trace.Event` list of the traced step.
        roles: the serials of each category of :data:`CATEGORIES` but ``other``, in that order.
        config, model, input_shape, parameter_count, params_without_grad: as :class:`StepProfile` has them.
    """
    storages = meter.storages()
    sizes = {serial: nbytes for serial, (nbytes, _, _) in storages.items()}
    labels = label_storages(sizes, roles)

    def categories(serials, total: int) -> dict[str, int]:
        cats = bytes_by_category(serials, sizes, labels)
        cats["other"] += total - sum(cats.values())  # on cuda: what the tracker cannot see
        return cats

    peak, at_peak = meter.peak(), meter.peak_serials()
    positions = [e.log_position for e in events]
    return StepProfile(
        backend=meter.backend, model=model, config=config, input_shape=input_shape,
        parameter_count=parameter_count, events=events,
        event_categories=[categories(e.live, e.allocated_bytes) for e in events],
        peak_allocated_bytes=peak,
        peak_event=next(e.index for e in events if e.peak_bytes == peak),
        categories=categories(at_peak, peak),
        reserved_bytes=meter.reserved(),
        params_without_grad=params_without_grad,
        peak_allocation=meter.peak_allocation(),
        storages={serial: Storage(serial, labels[serial], dtype, shape, nbytes)
                  for serial, (nbytes, dtype, shape) in storages.items()},
        peak_serials=tuple(at_peak),
        allocation_log=[Allocation(entry.serial, entry.kind, entry.delta, labels[entry.serial],
                                   bisect.bisect_right(positions, i))
                        for i, entry in enumerate(meter.allocation_log())],
    )
