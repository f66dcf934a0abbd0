"""The record of one traced training step, and the questions it answers (lesson 03).

A :class:`StepProfile` is what :func:`helpers.profile.profile_step` returns: the events, the peak, memory by category,
every storage, and the allocation log; plots and widgets only read it.

Each storage gets the first category that applies, in this order (after Rajbhandari et al., "ZeRO", SC20, section 3):

* ``parameters``: the model's parameters and buffers (BatchNorm statistics);
* ``gradients``: the parameters' ``.grad`` tensors;
* ``optimizer_states``: everything in ``optimizer.state``;
* ``input``: the input batch and its targets (even where conv1 also saves the batch);
* ``activations``: tensors autograd saved for backward (and those recomputed under activation checkpointing);
* ``other``: the rest: the loss, gradients of activations, temporaries; on a GPU also what the tracker cannot see.
"""

from __future__ import annotations

import bisect
import dataclasses
import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from .config import StepConfig
from .engine.event import Event
from .units import MiB, fmt_bytes

if TYPE_CHECKING:  # annotations only: a profile is read without importing torch (helpers.cli_cold)
    import torch

    from .engine.meter import Meter


CATEGORIES = ("parameters", "gradients", "optimizer_states", "input", "activations", "other")


def label_storages(sizes: dict[int, int], roles: dict[str, set[int]], default: str = "other") -> dict[int, str]:
    """Serial -> category for each serial of ``sizes`` (serial -> bytes, :meth:`helpers.engine.meter.Meter.storages`),
    in its order: the first of ``roles`` (category -> serials, in order of precedence) holding it, else ``default``."""
    labels = dict.fromkeys(sizes, default)
    for name, serials in reversed(roles.items()):  # the first role is written last: it wins
        for serial in serials:
            if serial in labels:
                labels[serial] = name
    return labels


def bytes_by_category(serials, sizes: dict[int, int], labels: dict[int, str],
                      categories: tuple[str, ...] = CATEGORIES) -> dict[str, int]:
    """Bytes of ``serials`` per category, each name of ``categories`` a key (``labels`` from :func:`label_storages`)."""
    totals = dict.fromkeys(categories, 0)
    for serial in serials:
        totals[labels[serial]] += sizes[serial]
    return totals


def _mib(nbytes: int) -> str:
    """Bytes in MiB for a short text: one decimal, two significant digits below 1 MiB."""
    value = nbytes / MiB
    return f"{value:.1f}" if abs(value) >= 1 else f"{value:.2g}"


class Allocation(NamedTuple):
    """One entry of a step's allocation log: ``serial`` (a key of :attr:`StepProfile.storages`), ``kind`` (``"alloc"``,
    ``"free"`` or ``"resize"``), ``nbytes`` (the change; negative for a free or a shrink), the storage's ``category``
    (:data:`CATEGORIES`), and ``event``, the index of the first event recorded after it."""

    serial: int
    kind: str
    nbytes: int
    category: str
    event: int


@dataclass(frozen=True)
class Storage:
    """One tensor storage that the step allocated (or placed, for the model): ``serial``, its number in allocation order
    (:class:`helpers.engine.counting.StorageTracker`); ``category`` (:data:`CATEGORIES`); the ``dtype`` and ``shape`` of
    the tensor that created it; ``nbytes``, rounded up to 512."""

    serial: int
    category: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    nbytes: int


def _from_config(name: str, doc: str) -> property:
    """A read-only attribute of a profile that is its config's ``name``."""
    return property(lambda self: getattr(self.config, name), doc=doc)


@dataclass(repr=False)
class StepProfile:
    """The memory of one traced training step.  All sizes in bytes.

    ``repr(profile)`` is two lines: the model, the options that differ from :class:`helpers.config.StepConfig`'s
    defaults, the peak, where, and the categories at the peak (a notebook shows a small table).

    Attributes:
        backend, model: ``"cuda"`` (measured) or ``"simulated"`` (fake tensors); the model's name.
        config: the :class:`helpers.config.StepConfig` that was run (``batch_size``, ``amp``, ... are read from it).
        input_shape: one sample's shape as fed (the batch is ``(batch_size, *input_shape)``): the model's own,
            ``(seq_len,)`` for token ids, ``()`` for ``inputs=``, else ``(3, image_size, image_size)``.
        parameter_count: number of parameters (elements).
        events, event_categories: the :class:`helpers.engine.trace.Event` list, in order; bytes per category at each.
        peak_allocated_bytes: peak allocated over the whole step.
        peak_event: index of the first event by which that peak had been reached.
        categories: bytes per category alive at the peak.
        reserved_bytes: ``torch.cuda.memory_reserved()`` after the step (cuda), else ``None``.
        params_without_grad: names of trainable parameters that got no gradient.
        peak_allocation: simulated: the serial of the allocation that reached the peak (equal at two batch sizes: the
            same operation peaked, :class:`helpers.batch.PeakCurve`); ``None`` on cuda.
        storages: serial -> :class:`Storage`, every storage counted (with ``steady_state``, the first step's too).
        peak_serials: serials of the storages alive at the peak.
        allocation_log: every :class:`Allocation` of the traced step, in order.
        depth_note: for a model of repeated blocks, how its log was made: written exactly from traces of fewer blocks
            (:mod:`helpers.depth`), or traced in full and why; None for other models.
        cudnn_bound_bytes: simulated, a step with convolutions: the most cuDNN's workspaces may add to its peak
            (:attr:`helpers.engine.workspaces.KernelMemory.bound`); ``config.workspaces`` says whether any was counted.
            ``cudnn_missing``: passes the measured table did not hold (``workspaces="measured"``; none counted).
        paged_bytes: optimizer states in CUDA unified memory (a paged optimizer's), outside every figure above: the
            driver keeps them on the GPU while there is room and pages them to host memory under pressure.
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
    paged_bytes: int = 0
    cudnn_bound_bytes: int | None = None
    cudnn_missing: int = 0

    batch_size = _from_config("batch_size", "Samples per batch (``config.batch_size``).")
    amp = _from_config("amp", "Autocast was on (``config.amp``), in ``config.amp_dtype``.")
    checkpoint = _from_config("checkpoint", "Checkpoint segments (``config.checkpoint``; 0: off).")
    optimizer = _from_config("optimizer", "One of :data:`helpers.config.OPTIMIZERS` (``config.optimizer``).")
    steady_state = _from_config("steady_state", "The traced step is the second one: optimizer states exist from the "
                                "start (``config.steady_state``).")
    reentrant = _from_config("reentrant", "Checkpointing used the reentrant variant (``config.reentrant``).")
    offload = _from_config("offload", "Saved tensors were kept in host memory (``config.offload``).")

    def _options_text(self) -> str:
        """The options of :attr:`config` that differ from :class:`StepConfig`'s defaults, as ``name=value``."""
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
        """Parameters + gradients + optimizer states at ``optimizer.step()``: ZeRO's *model states* (Rajbhandari et al.,
        SC20, section 3), 4 + 4 + 8 = 16 bytes per parameter with Adam in float32, with or without autocast (with
        ``step_in_backward`` the gradients are gone by then)."""
        cats = self.event_categories[self.events.index(self.find(None, "optimizer.step"))]
        return cats["parameters"] + cats["gradients"] + cats["optimizer_states"]

    def peak_during(self, event: Event) -> int:
        """The highest allocated bytes between the event before ``event`` and ``event``, from the allocation log (for
        ``optimizer.step``: the height its temporaries reached, which the events, taken after it returned, do not show).

        Raises:
            ValueError: for the first event.
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
        """The storages alive at the peak, in allocation order (summing to the peak when simulated)."""
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
            "paged_bytes": self.paged_bytes,
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
        """Bytes each top-level stage (``conv1``, ``layer1``, ...) adds, summed over its events: ``phase="fwd"``, its
        ``pre`` and ``fwd`` deltas (what it leaves allocated); ``"bwd"``, its ``bwd`` deltas (what it frees, negative).

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
        """The per-module log as text, one event per line, in MiB: of the slice ``events``, the module events of
        ``phases`` (all when ``None``) that change allocated memory by at least ``min_delta`` bytes."""
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
        if self.paged_bytes:
            lines.append(f"paged optimizer states: {fmt_bytes(self.paged_bytes)} of unified memory, not counted by "
                         f"memory_allocated")
        return "\n".join(lines)

    def allocation_event(self, storage: Storage) -> Event:
        """The event that closes the interval in which ``storage`` was first allocated; its :attr:`Event.label` says
        where (``"forward of Linear 'attn.q'"``, or ``"before Linear 'up'"`` for a module's own code between
        submodules).  A storage from before the first event (parameters, the untraced first step) gives ``events[0]``.

        Raises:
            KeyError: if ``storage`` is not one of this step's :attr:`storages`.
            ValueError: if it was allocated after the last event.
        """
        if self.storages.get(storage.serial) != storage:
            raise KeyError(f"{storage} is not a storage of this step")
        index = next(a.event for a in self.allocation_log if a.serial == storage.serial)
        if index == len(self.events):
            raise ValueError(f"{storage} was allocated after the step's last event")
        return self.events[index]

    def kept_between(self, first: Event, last: Event, until: Event | None = None) -> list[Storage]:
        """The storages allocated after ``first`` and by ``last`` and still alive at ``until``, in allocation order.

        "Allocated between": :meth:`allocation_event` in ``(first, last]``; "alive": in ``until.live``.  Any category
        (filter on :attr:`Storage.category`); ``nbytes`` rounded up to 512 (a resized storage: its largest size).
        ``until`` defaults to ``last``; ``find("", "fwd")``, the end of forward, gives what is kept for backward.

        Raises:
            ValueError: for an event not of this step, ``last`` not after ``first``, or ``until`` before ``last``.
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
        """The category of every storage, by serial (what :func:`helpers.teaching.plots.plot_memory_map` colours a
        replay's blocks by)."""
        return {serial: storage.category for serial, storage in self.storages.items()}


def frees_in_allocation_order(log: list, cuts) -> list:
    """``log`` (entries ``(serial, kind, delta)``) with each run of frees that no other entry and no position of
    ``cuts`` (events, a reset of the peak) separates put in allocation order (by serial).

    Nothing in the program fixes the order of such frees: leaving autocast frees its cached weight casts by walking a
    hash map keyed by tensor address (``clear_autocast_cache``, ``aten/src/ATen/autocast_mode.cpp``).  Their order
    changes no figure (no allocation comes between them; the caching allocator merges freed neighbours alike in any
    order); fixed, the log of a model of repeated blocks repeats block by block (:mod:`helpers.depth`)."""
    out, cuts, j = list(log), set(cuts), 0
    while j < len(out):
        k = j + 1
        if out[j][1] == "free":
            while k < len(out) and out[k][1] == "free" and k not in cuts:
                k += 1
            out[j:k] = sorted(out[j:k], key=lambda entry: entry[0])
        j = k
    return out


def record_step(meter: Meter, events: list[Event], roles: dict[str, set[int]], *, config: StepConfig, model: str,
                input_shape: tuple[int, ...], parameter_count: int, params_without_grad: list[str],
                reset_at: int | None = None, paged_bytes: int = 0) -> StepProfile:
    """The :class:`StepProfile` of a traced step, read from its meter while the step's tensors are alive; its log is
    :func:`frees_in_allocation_order`.

    Args:
        meter: the step's :class:`helpers.engine.meter.Meter`, inside its block.
        events: the traced step's :class:`helpers.engine.trace.Event` list.
        roles: the serials of each category but ``other``, in :data:`CATEGORIES` order (:func:`label_storages`); the
            rest is ``other`` (on cuda, also what the real counters hold beyond the tracker's storages).
        config, model, input_shape, parameter_count, params_without_grad, paged_bytes: as :class:`StepProfile` has
            them.
        reset_at: the log position of the last reset of the peak (a steady state's), if any.
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
    bound, missing = meter.kernel_memory()
    return StepProfile(
        backend=meter.backend, model=model, config=config, input_shape=input_shape,
        parameter_count=parameter_count, events=events,
        event_categories=[categories(e.live, e.allocated_bytes) for e in events], peak_allocated_bytes=peak,
        peak_event=next(e.index for e in events if e.peak_bytes == peak), categories=categories(at_peak, peak),
        reserved_bytes=meter.reserved(), params_without_grad=params_without_grad, paged_bytes=paged_bytes,
        peak_allocation=meter.peak_allocation(), peak_serials=tuple(at_peak), cudnn_bound_bytes=bound,
        cudnn_missing=missing,
        storages={serial: Storage(serial, labels[serial], dtype, shape, nbytes)
                  for serial, (nbytes, dtype, shape) in storages.items()},
        allocation_log=[Allocation(entry.serial, entry.kind, entry.delta, labels[entry.serial],
                                   bisect.bisect_right(positions, i))
                        for i, entry in enumerate(frees_in_allocation_order(
                            meter.allocation_log(), [*positions, *([] if reset_at is None else [reset_at])]))],
    )
