"""One training step of an image classifier, measured module by module.

Introduced in lesson 03 (ResNet18 layer by layer); lesson 04 uses its AMP and
checkpointing options.

A step is what every training loop does for one mini-batch:

1. the input batch and its targets are allocated on the device;
2. forward pass, then the cross-entropy loss;
3. ``loss.backward()``;
4. ``optimizer.step()``;
5. ``optimizer.zero_grad(set_to_none=True)``.

:func:`profile_step` runs it under a :class:`helpers.memory.Meter` (real GPU
counters or simulated) with a :class:`helpers.trace.StepTracer`, and returns a
:class:`StepProfile`: the events, the peak, and memory by category.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field
from itertools import chain
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .accounting import bytes_by_category, label_storages
from .memory import MiB, Meter, fmt_bytes, resolve_backend
from .models import build_model, classification_models, output_logits, sequential_form
from .trace import Event, StepTracer

OPTIMIZERS = ("sgd", "adam")


class DoesNotFit(RuntimeError):
    """The step ran out of memory (``torch.OutOfMemoryError``), real or simulated.

    On a real GPU the step's tensors have been released and the allocator
    cache emptied before this is raised.  The message ends with CUDA's own
    first line, which is also the attribute ``cuda_message``.

    Attributes:
        cuda_message: the first line of CUDA's (or the simulated) message.
        requested: simulated only: bytes the failing allocation asked the
            driver for (:func:`helpers.memory.allocation_size`); else ``None``.
        allocated: simulated only: bytes of live tensors when it failed; else ``None``.
    """

    cuda_message: str = ""
    requested: int | None = None
    allocated: int | None = None


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    """The optimizer of a traced step.

    * ``sgd``: ``SGD(lr=0.01, momentum=0.9)``: one momentum buffer per
      parameter (4 bytes per fp32 parameter).
    * ``adam``: ``Adam(lr=1e-3)``: two moment estimates per parameter
      (8 bytes per fp32 parameter) and a step counter per tensor.

    Both use ``foreach=True``, the implementation PyTorch picks by default on
    a GPU, so that simulated and real steps allocate the same temporaries.

    Raises:
        ValueError: for a name not in :data:`OPTIMIZERS`.
    """
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=True)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-3, foreach=True)
    raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}")


@contextlib.contextmanager
def frozen_batchnorm_stats(module: nn.Module):
    """Keep BatchNorm running statistics unchanged while the block runs.

    A checkpointed segment runs its forward twice in training: once in the
    forward pass and once when backward recomputes it.  Each run of a
    training-mode BatchNorm updates ``running_mean``/``running_var`` (and
    ``num_batches_tracked``), so without this they are updated twice per step.
    Inside this block every BatchNorm's ``momentum`` is 0 (the running values
    are kept exactly) and ``num_batches_tracked`` is decremented back after.
    The batch statistics used for the output, and so the gradients, do not change.
    """
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.momentum = 0.0
    try:
        yield
    finally:
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
            if m.training and m.num_batches_tracked is not None:
                m.num_batches_tracked.sub_(1)


class Checkpointed(nn.Module):
    """Run a sequence of modules with activation checkpointing in segments.

    As ``torch.utils.checkpoint.checkpoint_sequential`` does, the sequence is
    split into ``segments`` parts of ``len(sequence) // segments`` modules, the
    last part taking the rest.  All parts but the last keep only their input
    during the forward pass and recompute their activations during backward;
    the last part runs normally, because backward needs its activations at
    once.  So ``segments=1`` checkpoints nothing.

    Args:
        sequence: modules to run in order (see :func:`helpers.models.sequential_form`).
        segments: number of segments, from 1 to ``len(sequence)``.
        reentrant: use the reentrant variant (``use_reentrant=True``), the old
            default.  It gives no gradient to the parameters of a segment whose
            inputs do not require grad (lesson 04 shows the trap).  Default:
            the non-reentrant variant PyTorch recommends.
        freeze_bn_stats: during recomputation, leave BatchNorm running
            statistics alone (see :func:`frozen_batchnorm_stats`); non-reentrant only.

    Raises:
        ValueError: if ``segments`` is out of range, or ``freeze_bn_stats``
            is asked of the reentrant variant.
    """

    def __init__(self, sequence: nn.Sequential, segments: int, reentrant: bool = False,
                 freeze_bn_stats: bool = False):
        super().__init__()
        if not 1 <= segments <= len(sequence):
            raise ValueError(
                f"checkpoint segments must be between 1 and {len(sequence)} "
                f"(the model has {len(sequence)} sequential units), got {segments}"
            )
        if reentrant and freeze_bn_stats:
            raise ValueError("freeze_bn_stats needs the non-reentrant checkpoint (context_fn)")
        self.sequence = sequence
        self.segments = segments
        self.reentrant = reentrant
        self.freeze_bn_stats = freeze_bn_stats

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        units = list(self.sequence)
        size = len(units) // self.segments
        for start in range(0, size * (self.segments - 1), size):
            part = nn.Sequential(*units[start:start + size])
            options = {"use_reentrant": self.reentrant}
            if self.freeze_bn_stats:
                options["context_fn"] = lambda part=part: (contextlib.nullcontext(), frozen_batchnorm_stats(part))
            x = checkpoint(part, x, **options)
        for unit in units[size * (self.segments - 1):]:
            x = unit(x)
        return x


@dataclass(frozen=True)
class Storage:
    """One tensor storage that the step allocated (or placed, for the model).

    Attributes:
        serial: its number in allocation order (see
            :class:`helpers.memory.StorageTracker`).
        category: one of :data:`helpers.accounting.CATEGORIES`.
        dtype, shape: of the tensor that created it.
        nbytes: bytes it occupies, rounded up to 512.
    """

    serial: int
    category: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    nbytes: int


@dataclass
class StepProfile:
    """The memory of one traced training step.  All sizes in bytes.

    Attributes:
        backend: ``"cuda"`` (measured) or ``"simulated"`` (fake tensors).
        model: model name.
        batch_size, input_shape: the batch is ``(batch_size, *input_shape)``.
        amp: autocast was on (fp16 + GradScaler on cuda, bf16 when simulated).
        checkpoint: checkpoint segments (0: off).
        optimizer: ``"sgd"`` or ``"adam"``.
        parameter_count: number of parameters (elements, not bytes).
        events: the :class:`helpers.trace.Event` list, in order.
        event_categories: bytes per category at each event.
        peak_allocated_bytes: peak allocated over the whole step.
        peak_event: index of the first event at which that peak had been
            reached (the peak happened between it and the event before).
        categories: bytes per category alive at the peak.
        reserved_bytes: ``torch.cuda.memory_reserved()`` after the step (cuda),
            ``None`` when simulated.
        params_without_grad: names of trainable parameters that got no gradient.
        steady_state: the traced step is the second one (optimizer states exist
            from the start; see :func:`profile_step`).
        peak_allocation: simulated only: the serial number of the allocation
            that reached the peak.  Two runs of one configuration at different
            batch sizes whose peaks have the same serial peaked at the same
            operation (see :class:`helpers.batch.PeakCurve`).  ``None`` on cuda.
        reentrant: checkpointing used the reentrant variant.
        offload: saved tensors were kept in host memory.
        storages: serial -> :class:`Storage`, for every storage the tracker
            counted: the model's, the traced step's, and with ``steady_state``
            the untraced first step's.
        peak_serials: serials of the storages alive at the peak.
    """

    backend: str
    model: str
    batch_size: int
    input_shape: tuple[int, ...]
    amp: bool
    checkpoint: int
    optimizer: str
    parameter_count: int
    events: list[Event]
    event_categories: list[dict[str, int]]
    peak_allocated_bytes: int
    peak_event: int
    categories: dict[str, int]
    reserved_bytes: int | None
    params_without_grad: list[str] = field(default_factory=list)
    steady_state: bool = False
    peak_allocation: int | None = None
    reentrant: bool = False
    offload: bool = False
    storages: dict[int, Storage] = field(default_factory=dict, repr=False)
    peak_serials: tuple[int, ...] = field(default=(), repr=False)

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
        lines = [f"at the peak (reached by event {self.peak_event}, {self.events[self.peak_event].label}):"]
        for name, nbytes in self.categories.items():
            lines.append(f"  {name:<17} {fmt_bytes(nbytes):>12}")
        if self.reserved_bytes is not None:
            lines.append(f"reserved by the caching allocator after the step: {fmt_bytes(self.reserved_bytes)}")
        lines.append(f"peak allocated: {fmt_bytes(self.peak_allocated_bytes)} ({self.backend})")
        return "\n".join(lines)


def _check_int(name: str, value, lowest: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ValueError(f"{name} must be an integer >= {lowest}, got {value!r}")


def profile_step(
    model: str | Callable[[], nn.Module] = "resnet18",
    batch_size: int = 128,
    image_size: int = 224,
    *,
    amp: bool = False,
    checkpoint: int = 0,
    optimizer: str = "sgd",
    device: str = "auto",
    num_classes: int = 1000,
    input_shape: tuple[int, ...] | None = None,
    steady_state: bool = False,
    capacity: int | None = None,
    reentrant: bool = False,
    offload: bool = False,
) -> StepProfile:
    """Run one training step and record its memory module by module.

    Args:
        model: a torchvision classification model name (see
            :func:`helpers.models.classification_models`), or a function
            that returns a fresh ``nn.Module`` mapping ``(batch, *input_shape)``
            to ``(batch, num_classes)`` logits.
        batch_size: samples per batch, >= 1.
        image_size: height and width of the input images (ignored when
            ``input_shape`` is given), >= 1.
        amp: run forward and loss under ``torch.autocast`` (float16 with a
            ``GradScaler`` on cuda; bfloat16 when simulated, where the scaler's
            few scalar tensors are not modelled).
        checkpoint: activation checkpointing with this many segments (0: off;
            see :class:`Checkpointed`).  Needs a model with a sequential
            form (:func:`helpers.models.sequential_form`).
        optimizer: ``"sgd"`` or ``"adam"`` (see :func:`make_optimizer`).
        device: ``"auto"``, ``"cuda"`` or ``"simulated"``.
        num_classes: number of classes; targets are drawn from ``range(num_classes)``.
        input_shape: shape of one sample, default ``(3, image_size, image_size)``.
        steady_state: trace the second step instead of the first.  One
            untraced step runs first and creates the optimizer states, which
            then stay allocated through every later step of a training loop
            (lesson 01).  The first step has none until ``optimizer.step()``.
        reentrant: with ``checkpoint``, use the reentrant variant (see
            :class:`Checkpointed`; lesson 04's trap).
        offload: keep every tensor saved for backward in host memory
            (``torch.autograd.graph.save_on_cpu(pin_memory=True)`` on cuda;
            simulated: the saved copy is not counted as device memory, and
            backward's copy back is).  Tensors saved inside checkpointed
            segments are recomputed instead, so they are not offloaded.
        capacity: run as on a GPU of this many bytes (see
            :class:`helpers.memory.Meter`); a step that needs more raises
            :class:`DoesNotFit` with CUDA's (or a CUDA-shaped) message.

    Returns:
        A :class:`StepProfile`.

    Raises:
        ValueError: for bad arguments, an unknown model, a model that cannot
            be checkpointed or cannot run on this input shape.
        DoesNotFit: if a real GPU runs out of memory (memory is released first).
    """
    _check_int("batch_size", batch_size, 1)
    _check_int("image_size", image_size, 1)
    _check_int("checkpoint", checkpoint, 0)
    _check_int("num_classes", num_classes, 1)
    if reentrant and not checkpoint:
        raise ValueError("reentrant applies to checkpointing: give checkpoint segments too")
    for flag, value in (("steady_state", steady_state), ("reentrant", reentrant), ("offload", offload),
                        ("amp", amp)):
        if not isinstance(value, bool):
            raise ValueError(f"{flag} must be True or False, got {value!r}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(OPTIMIZERS)}")
    if isinstance(model, str):
        name = model
        if name not in classification_models():
            build_model(name)  # raises the ValueError that names the problem
        builder = lambda: build_model(name, num_classes)  # noqa: E731
    elif callable(model):
        name, builder = getattr(model, "__name__", type(model).__name__), model
    else:
        raise ValueError(f"model must be a model name or a function returning an nn.Module, got {model!r}")
    sample_shape = tuple(input_shape) if input_shape is not None else (3, image_size, image_size)
    backend = resolve_backend(device)

    unplaced = _build(builder, backend)
    meter = Meter(backend, capacity)
    oom = None
    try:
        with meter:
            return _profile(meter, name, unplaced, batch_size, sample_shape, amp, checkpoint, optimizer,
                            num_classes, steady_state, reentrant, offload)
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0]
        requested, allocated = getattr(e, "requested", None), getattr(e, "allocated", None)
    # Out of memory: the exception and its frames are gone now; drop the model
    # too, so that the step's tensors are freed and the allocator's cache can be
    # returned to the driver.
    del unplaced
    gc.collect()
    torch.cuda.empty_cache()
    error = DoesNotFit(f"{name} at batch size {batch_size} does not fit: {oom}")
    error.cuda_message, error.requested, error.allocated = oom, requested, allocated
    raise error


def _build(builder: Callable[[], nn.Module], backend: str) -> nn.Module:
    """Build the model outside any measurement, without data where possible.

    For a real GPU the model is built on the CPU and moved inside the
    measurement.  For the simulation it is built on the ``meta`` device (shapes
    only, no memory, no initialisation work); a constructor that reads tensor
    values (RegNet's) falls back to a real CPU build.
    """
    model = None
    if backend == "simulated":
        try:
            with torch.device("meta"):
                model = builder()
        except (NotImplementedError, RuntimeError):
            model = None
    if model is None:
        model = builder()
    if not isinstance(model, nn.Module):
        raise ValueError(f"the model function must return an nn.Module, got {type(model).__name__}")
    return model


def _place(model: nn.Module, meter: Meter) -> nn.Module:
    """Put the model's parameters and buffers on the meter's device, counted."""
    if meter.backend == "cuda":
        return model.to(meter.device)
    # Simulated: every parameter and buffer gets a fake storage of its size.
    return model._apply(lambda t: torch.empty(t.shape, dtype=t.dtype, device=meter.device))


def offload_saved_tensors(meter: Meter):
    """A context in which autograd keeps saved tensors in host memory.

    On cuda: ``torch.autograd.graph.save_on_cpu(pin_memory=True)``.  Simulated:
    the same two hooks, where the host copy is made with the tracker paused
    (host memory is not device memory) and the copy back in backward is counted.
    """
    if meter.backend == "cuda":
        return torch.autograd.graph.save_on_cpu(pin_memory=True)
    tracker = meter.tracker

    def pack(t: torch.Tensor) -> torch.Tensor:
        tracker.paused = True
        try:
            return t.detach().clone()  # the host copy
        finally:
            tracker.paused = False

    def unpack(host: torch.Tensor) -> torch.Tensor:
        return host.clone()  # copied back to the device for backward

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def _forward_loss(runner, x, y, autocast, name, offload=None) -> torch.Tensor:
    """Forward pass and cross-entropy loss; a model that cannot take ``x`` raises ValueError."""
    try:
        with autocast, (offload or contextlib.nullcontext()):
            return F.cross_entropy(output_logits(runner(x)), y)
    except (RuntimeError, ValueError) as e:  # shape errors; BatchNorm raises ValueError on 1 value per channel
        if isinstance(e, torch.OutOfMemoryError):
            raise
        first = (str(e).strip() or type(e).__name__).splitlines()[0]
        raise ValueError(f"{name} cannot run on input {tuple(x.shape)}: {first}") from e


def _profile(meter, name, model, batch_size, sample_shape, amp, checkpoint, optimizer, num_classes,
             steady_state=False, reentrant=False, offload=False):
    tracker = meter.tracker
    dev = meter.device
    model = _place(model, meter)
    runner = Checkpointed(sequential_form(model), checkpoint, reentrant) if checkpoint else model
    opt = make_optimizer(optimizer, model.parameters())
    scaler = torch.amp.GradScaler("cuda") if amp and meter.backend == "cuda" else None
    if amp:
        autocast = torch.autocast(dev.type, dtype=torch.float16 if dev.type == "cuda" else torch.bfloat16)
    else:
        autocast = contextlib.nullcontext()
    parameters = {tracker.serial_of(t) for t in chain(model.parameters(), model.buffers())}

    if steady_state:  # one untraced step, so that the optimizer states exist
        x = torch.randn(batch_size, *sample_shape, device=dev)
        y = torch.randint(0, num_classes, (batch_size,), device=dev)
        loss = _forward_loss(runner, x, y, autocast, name, offload_saved_tensors(meter) if offload else None)
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        del x, y, loss
        meter.reset_peak()

    with StepTracer(meter, model, root=runner if checkpoint else None) as tracer:
        tracer.record(None, "parameters, buffers, optimizer states" if steady_state else "parameters and buffers", "model")
        x = torch.randn(batch_size, *sample_shape, device=dev)
        y = torch.randint(0, num_classes, (batch_size,), device=dev)
        inputs = {tracker.serial_of(x), tracker.serial_of(y)}
        tracer.record(None, "input batch and targets", "input", tuple(x.shape))
        loss = _forward_loss(runner, x, y, autocast, name, offload_saved_tensors(meter) if offload else None)
        tracer.record(None, "cross-entropy loss", "loss", tuple(loss.shape))
        tracer.in_backward = True
        (scaler.scale(loss) if scaler else loss).backward()
        tracer.record(None, "loss.backward() returned", "backward")
        gradients = {tracker.serial_of(p.grad) for p in model.parameters() if p.grad is not None}
        missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        tracer.record(None, "optimizer.step()", "optimizer.step")
        states = {
            tracker.serial_of(t)
            for state in opt.state.values()
            for t in state.values()
            if isinstance(t, torch.Tensor)
        }
        opt.zero_grad(set_to_none=True)
        tracer.record(None, "optimizer.zero_grad()", "zero_grad")

    activations = set(tracer.saved)
    for first, last in tracer.recomputed:
        activations.update(range(first, last))
    labels = label_storages(tracker.sizes, parameters, gradients, states, inputs, activations)

    def categories(serials, total: int) -> dict[str, int]:
        cats = bytes_by_category(serials, tracker.sizes, labels)
        cats["other"] += total - sum(cats.values())  # on cuda: what the tracker cannot see
        return cats

    events = tracer.events
    peak = meter.peak()
    return StepProfile(
        backend=meter.backend,
        model=name,
        batch_size=batch_size,
        input_shape=sample_shape,
        amp=amp,
        checkpoint=checkpoint,
        optimizer=optimizer,
        parameter_count=sum(p.numel() for p in model.parameters()),
        events=events,
        event_categories=[categories(e.live, e.allocated_bytes) for e in events],
        peak_allocated_bytes=peak,
        peak_event=next(e.index for e in events if e.peak_bytes == peak),
        categories=categories(tracker.peak_serials, peak),
        reserved_bytes=meter.reserved(),
        params_without_grad=missing,
        steady_state=steady_state,
        reentrant=reentrant,
        offload=offload,
        peak_allocation=tracker.peak_at if meter.backend == "simulated" else None,
        storages={serial: Storage(serial, labels[serial], tracker.dtypes[serial], tracker.shapes[serial], nbytes)
                  for serial, nbytes in tracker.sizes.items()},
        peak_serials=tuple(tracker.peak_serials),
    )

