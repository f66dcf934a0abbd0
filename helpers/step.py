"""One training step, measured module by module.

Introduced in lesson 03 (ResNet18 layer by layer); every later lesson profiles
steps with it.

A step is what every training loop does for one mini-batch:

1. the input batch (and its targets) is allocated on the device;
2. forward pass, then the loss;
3. ``loss.backward()``;
4. ``optimizer.step()``;
5. ``optimizer.zero_grad(set_to_none=True)``.

:func:`profile_step` runs it, as a :class:`helpers.config.StepConfig` says,
under a :class:`helpers.engine.meter.Meter` (real GPU counters or simulated) with a
:class:`helpers.engine.trace.StepTracer`, and returns a
:class:`helpers.record.StepProfile`.  The step is written once
(:func:`_step`): a steady-state profile runs it twice, untraced then traced.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import statistics
import time
from dataclasses import dataclass
from itertools import chain
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .config import StepConfig, check_int
from .engine.meter import Meter
from .engine.trace import StepTracer
from .models import ModelSpec, output_logits, resolve_model, sequential_form
from .record import Allocation, StepProfile, Storage, bytes_by_category, label_storages
from .techniques import Checkpointed, StepInBackward

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


class DoesNotFit(RuntimeError):
    """The step ran out of memory (``torch.OutOfMemoryError``), real or simulated.

    On a real GPU the step's tensors have been released and the allocator
    cache emptied before this is raised.  The message ends with CUDA's own
    first line, which is also the attribute ``cuda_message``.

    Attributes:
        cuda_message: the first line of CUDA's (or the simulated) message.
        requested: simulated only: bytes the failing allocation asked the
            driver for (:func:`helpers.allocator.rules.allocation_size`); else ``None``.
        allocated: simulated only: bytes of live tensors when it failed; else ``None``.
    """

    cuda_message: str = ""
    requested: int | None = None
    allocated: int | None = None


def profile_step(model="resnet18", batch_size: int = 128, image_size: int = 224, **options) -> StepProfile:
    """Run one training step and record its memory module by module.

    Args:
        model: a model (see :func:`helpers.models.resolve_model`: a torchvision
            name, a preset such as ``"mlp"`` or ``"gpt2"``, an ``nn.Module``, a
            builder), or a whole :class:`helpers.config.StepConfig`.
        batch_size: samples per batch, >= 1.
        image_size: height and width of image inputs (when ``input_shape`` is not given).
        **options: the other fields of :class:`helpers.config.StepConfig`:
            ``amp``, ``amp_dtype``, ``checkpoint``, ``reentrant``, ``offload``,
            ``optimizer``, ``attention``, ``steady_state``, ``device``,
            ``capacity``, ``input_shape``, ``seq_len``, ``vocab_size``,
            ``inputs``, ``loss``, ``num_classes``, ``name``.  With
            ``steady_state`` one untraced step runs first and creates the
            optimizer states, which then stay allocated through every later
            step (lesson 01).  With ``offload``, tensors saved inside
            checkpointed segments are recomputed instead, so not offloaded.

    Returns:
        A :class:`helpers.record.StepProfile`.

    Raises:
        ValueError: for a bad option, an unknown model, a model that cannot be
            checkpointed, or an input or loss that does not fit the model (one
            line naming the problem).
        DoesNotFit: if the step runs out of memory (on a GPU, memory is released first).
    """
    config = _config(model, batch_size, image_size, options, "profile_step")
    spec, task, meter, unplaced = _prepare(config)
    runtime = meter.runtime
    try:
        with meter:
            return _profile(meter, config, spec, task, unplaced)
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0]
        requested, allocated = getattr(e, "requested", None), getattr(e, "allocated", None)
    # Out of memory: the exception and its frames are gone now; drop the model
    # too, so that the step's tensors are freed and the allocator's cache can be
    # returned to the driver.
    del unplaced
    runtime.release()
    error = DoesNotFit(f"{spec.name} at batch size {config.batch_size} does not fit: {oom}")
    error.cuda_message, error.requested, error.allocated = oom, requested, allocated
    raise error


def time_step(model="resnet18", batch_size: int = 128, image_size: int = 224, repeats: int = 3,
              **options) -> float:
    """Wall time of one training step, untraced, in seconds: the median of ``repeats``.

    The step is the one :func:`profile_step` traces (the same code), run once
    to warm up (cuDNN's algorithm choice, the allocator's cache, the optimizer
    states) and then ``repeats`` times without the tracer or the storage
    tracker, each timed between two ``torch.cuda.synchronize()`` calls on a GPU.
    Simulated, it times the fake-tensor step: a figure about the simulation's
    speed, not a GPU's.

    Args:
        model, batch_size, image_size, **options: as for :func:`profile_step`.
        repeats: timed steps, >= 1.

    Raises:
        ValueError: as :func:`profile_step` does.
        torch.OutOfMemoryError: if the step does not fit on the GPU.
    """
    check_int("repeats", repeats, 1)
    config = _config(model, batch_size, image_size, options, "time_step")
    spec, task, meter, unplaced = _prepare(config, count_storages=False)
    runtime, times = meter.runtime, []
    with meter:
        model, runner, opt, scaler = _setup(meter, config, unplaced)
        for i in range(repeats + 1):
            runtime.synchronize()
            start = time.perf_counter()
            _step(meter, config, task, spec.name, model, runner, opt, scaler)
            runtime.synchronize()
            if i:  # the first is the warm-up
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def _config(model, batch_size: int, image_size: int, options: dict, caller: str) -> StepConfig:
    """The :class:`StepConfig` of a call: given whole, or made from its arguments."""
    if isinstance(model, StepConfig):
        return model
    known = {f.name for f in dataclasses.fields(StepConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} for {caller}; the options are "
                         f"{', '.join(sorted(known - {'model', 'batch_size', 'image_size'}))}")
    return StepConfig(model=model, batch_size=batch_size, image_size=image_size, **options)


def _prepare(config: StepConfig, count_storages: bool = True) -> tuple[ModelSpec, "_Task", Meter, nn.Module]:
    """The model's spec and task, a meter, and the model built by the meter's backend."""
    spec = resolve_model(config.model, config.num_classes, config.name)
    task = _task(config, spec)
    meter = Meter(config.device, config.capacity, attention=config.attention, count_storages=count_storages)
    try:
        unplaced = meter.runtime.build(spec.build)
    except Exception as e:  # the learner's constructor: report it in one line, not from inside torch
        first_line = (str(e).strip() or type(e).__name__).splitlines()[0]
        raise ValueError(f"building {spec.name} failed: {type(e).__name__}: {first_line}") from None
    if not isinstance(unplaced, nn.Module):
        raise ValueError(f"the model function must return an nn.Module, got {type(unplaced).__name__}")
    return spec, task, meter, unplaced


def _setup(meter: Meter, config: StepConfig, unplaced: nn.Module):
    """The placed model, what runs it (checkpointed or not), its optimizer and gradient scaler."""
    runtime = meter.runtime
    model = runtime.place(unplaced)
    runner = Checkpointed(sequential_form(model), config.checkpoint, config.reentrant) if config.checkpoint else model
    if config.step_in_backward:
        opt = StepInBackward(model.parameters(),
                             lambda params: runtime.optimizer(config.optimizer, params, meter.tracker, config.fused))
    else:
        opt = runtime.optimizer(config.optimizer, model.parameters(), meter.tracker, config.fused)
    scaler = runtime.grad_scaler(_DTYPES[config.amp_dtype]) if config.amp else None
    return model, runner, opt, scaler


@dataclass(frozen=True)
class _Task:
    """What the step feeds the model and how it scores the output."""

    inputs: str                 # "features", "tokens" or "custom"
    sample_shape: tuple[int, ...]
    vocab_size: int | None
    loss: str | Callable
    num_classes: int | None


def _task(config: StepConfig, spec: ModelSpec) -> _Task:
    if spec.vocab_size and config.input_shape is not None:
        raise ValueError(f"{spec.name} takes token ids: give their number with seq_len= (--seq-len), "
                         f"not input_shape=")
    seq_len = config.seq_len if config.seq_len is not None else (spec.seq_len if spec.vocab_size else None)
    if config.inputs is not None:
        kind, shape, vocab = "custom", (), None
    elif seq_len is not None:
        vocab = config.vocab_size or spec.vocab_size
        if vocab is None:
            raise ValueError("token inputs need a vocabulary: give vocab_size= (--vocab-size) with seq_len=")
        kind, shape = "tokens", (seq_len,)
    else:
        kind, shape, vocab = "features", config.input_shape or spec.input_shape or config.sample_shape, None
    loss = config.loss
    if loss == "auto":
        loss = "next_token" if kind == "tokens" else "classification"
    if loss == "next_token" and config.num_classes is not None:
        raise ValueError("num_classes applies to a classification loss; next-token loss has the vocabulary "
                         "as its classes")
    return _Task(kind, shape, vocab, loss, config.num_classes or spec.num_classes)


def _batch(task: _Task, config: StepConfig, device: torch.device) -> tuple[tuple, torch.Tensor | None]:
    """The model's inputs, and the targets when they can be drawn before the forward pass."""
    b = config.batch_size
    if task.inputs == "custom":
        made = config.inputs(b, device)
        return (made if isinstance(made, tuple) else (made,)), None
    if task.inputs == "tokens":
        ids = torch.randint(0, task.vocab_size, (b, *task.sample_shape), device=device)
        if task.loss == "next_token":
            return (ids,), torch.randint(0, task.vocab_size, (b, *task.sample_shape), device=device)
        x = ids
    else:
        x = torch.randn(b, *task.sample_shape, device=device)
    if task.loss == "classification" and task.num_classes:
        return (x,), torch.randint(0, task.num_classes, (b,), device=device)
    return (x,), None


def _loss(task: _Task, output, targets: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The loss of ``output``; also the targets if they were drawn here."""
    if callable(task.loss):
        loss = task.loss(output)
        if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
            raise ValueError(f"the loss function must return a scalar tensor, got {type(loss).__name__}"
                             + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""))
        return loss, targets
    logits = output_logits(output)
    if task.loss == "next_token":
        if logits.dim() != 3:
            raise ValueError(f"next-token loss expects (batch, seq, vocab) logits, got shape {tuple(logits.shape)}")
        if targets is None:
            targets = torch.randint(0, logits.shape[-1], logits.shape[:2], device=logits.device)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), targets
    if logits.dim() != 2:
        raise ValueError(f"classification loss expects (batch, classes) logits, got shape {tuple(logits.shape)}; "
                         f"for a language model use seq_len= (next-token loss)")
    if task.num_classes is not None and logits.shape[1] != task.num_classes:
        raise ValueError(f"the model's output has {logits.shape[1]} classes, but num_classes is {task.num_classes}")
    if targets is None:
        targets = torch.randint(0, logits.shape[1], (logits.shape[0],), device=logits.device)
    return F.cross_entropy(logits, targets), targets


@dataclass
class _Moments:
    """Storages the step knows the role of (serials), for the categories."""

    inputs: set = dataclasses.field(default_factory=set)
    gradients: set = dataclasses.field(default_factory=set)
    states: set = dataclasses.field(default_factory=set)
    missing: list = dataclasses.field(default_factory=list)


def _step(meter: Meter, config: StepConfig, task: _Task, name: str, model: nn.Module, runner: nn.Module,
          opt, scaler, tracer: StepTracer | None = None) -> _Moments:
    """One training step; with a tracer, each moment is recorded as an event.

    With ``accumulation_steps`` k, the forward and backward passes run k
    times, each on its own batch and with the loss divided by k, before the
    one optimizer step (the gradients add up in ``.grad``).
    """
    def record(note: str, phase: str, shape=None) -> None:
        if tracer is not None:
            tracer.record(None, note, phase, shape)

    runtime, moments = meter.runtime, _Moments()
    in_backward = isinstance(opt, StepInBackward)
    if in_backward:  # its hooks free each gradient as soon as it is used: note them first
        opt.start(lambda grad: moments.gradients.add(meter.serial_of(grad)))
    record("parameters, buffers, optimizer states" if config.steady_state else "parameters and buffers", "model")
    autocast = runtime.autocast(_DTYPES[config.amp_dtype]) if config.amp else contextlib.nullcontext()
    offload = runtime.offload(meter.tracker) if config.offload else contextlib.nullcontext()
    for _ in range(config.accumulation_steps):
        inputs, targets = _batch(task, config, meter.device)
        moments.inputs |= {meter.serial_of(t) for t in (*inputs, targets) if isinstance(t, torch.Tensor)}
        first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
        record("input batch and targets", "input", tuple(first.shape) if first is not None else None)
        if tracer is not None:
            tracer.in_backward = False
        try:
            with autocast, offload:
                loss, targets = _loss(task, runner(*inputs), targets)
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            if isinstance(e, torch.OutOfMemoryError):
                raise
            first_line = (str(e).strip() or type(e).__name__).splitlines()[0]
            shapes = ", ".join(str(tuple(t.shape)) for t in inputs if isinstance(t, torch.Tensor))
            hint = ("; give the shape of one sample with input_shape= (--input-shape), or seq_len= for token ids"
                    if config.inputs is None and config.input_shape is None and not config.tokens else "")
            raise ValueError(f"{name} cannot run on input {shapes}: {first_line}{hint}") from None
        if targets is not None:
            moments.inputs.add(meter.serial_of(targets))
        if config.accumulation_steps > 1:
            loss = loss / config.accumulation_steps  # the mean over all k batches
        record("cross-entropy loss" if isinstance(task.loss, str) else "loss", "loss", tuple(loss.shape))
        if tracer is not None:
            tracer.in_backward = True
        (scaler.scale(loss) if scaler else loss).backward()
        record("loss.backward() returned", "backward")
    moments.gradients |= {meter.serial_of(p.grad) for p in model.parameters() if p.grad is not None}
    got = opt.stepped if in_backward else {p for p in model.parameters() if p.grad is not None}
    moments.missing = [n for n, p in model.named_parameters() if p.requires_grad and p not in got]
    if scaler:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    record("optimizer.step()", "optimizer.step")
    moments.states = {meter.serial_of(t) for state in opt.state.values() for t in state.values()
                      if isinstance(t, torch.Tensor)}
    opt.zero_grad(set_to_none=config.set_to_none)
    record("optimizer.zero_grad()" if config.set_to_none else "optimizer.zero_grad(set_to_none=False)", "zero_grad")
    return moments


def _profile(meter: Meter, config: StepConfig, spec: ModelSpec, task: _Task, unplaced: nn.Module) -> StepProfile:
    runtime = meter.runtime
    model, runner, opt, scaler = _setup(meter, config, unplaced)
    parameters = {meter.serial_of(t) for t in chain(model.parameters(), model.buffers())}

    if config.steady_state:  # one untraced step, so that the optimizer states exist
        _step(meter, config, task, spec.name, model, runner, opt, scaler)
        meter.reset_peak()
    with StepTracer(meter, model, root=runner if config.checkpoint else None) as tracer:
        moments = _step(meter, config, task, spec.name, model, runner, opt, scaler, tracer)

    tracker = meter.tracker
    activations = set(tracer.saved)
    for first, last in tracer.recomputed:
        activations.update(range(first, last))
    labels = label_storages(tracker.sizes, parameters, moments.gradients, moments.states, moments.inputs, activations)

    def categories(serials, total: int) -> dict[str, int]:
        cats = bytes_by_category(serials, tracker.sizes, labels)
        cats["other"] += total - sum(cats.values())  # on cuda: what the tracker cannot see
        return cats

    events = tracer.events
    peak = meter.peak()
    positions = [e.log_position for e in events]
    return StepProfile(
        backend=meter.backend,
        model=spec.name,
        config=config,
        input_shape=task.sample_shape,
        parameter_count=sum(p.numel() for p in model.parameters()),
        events=events,
        event_categories=[categories(e.live, e.allocated_bytes) for e in events],
        peak_allocated_bytes=peak,
        peak_event=next(e.index for e in events if e.peak_bytes == peak),
        categories=categories(tracker.peak_serials, peak),
        reserved_bytes=meter.reserved(),
        params_without_grad=moments.missing,
        peak_allocation=tracker.peak_at if not runtime.measured else None,
        storages={serial: Storage(serial, labels[serial], tracker.dtypes[serial], tracker.shapes[serial], nbytes)
                  for serial, nbytes in tracker.sizes.items()},
        peak_serials=tuple(tracker.peak_serials),
        allocation_log=[Allocation(entry.serial, entry.kind, entry.delta, labels[entry.serial],
                                   bisect.bisect_right(positions, i))
                        for i, entry in enumerate(tracker.log)],
    )
