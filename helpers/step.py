"""One training step, written once, and measured module by module.

Introduced in lesson 03 (ResNet18 layer by layer); every later lesson profiles
steps with it.

A step is what every training loop does for one mini-batch:

1. the input batch (and its targets) is allocated on the device;
2. forward pass, then the loss;
3. ``loss.backward()``;
4. ``optimizer.step()``;
5. ``optimizer.zero_grad(set_to_none=True)``.

:class:`StepRunner` is that step, written once, as a
:class:`helpers.config.StepConfig` says: it builds and places the model, makes
the optimizer, the ``GradScaler``, the autocast and offload contexts, and runs
each part of the step as a public method.  Everything that runs a step (or
part of one) composes those methods: :func:`profile_step` and
:func:`time_step` here, :mod:`helpers.loops` (inference, leaking loops),
:mod:`helpers.fsdp` (a sharded model), :mod:`helpers.transformer` (a forward
pass, block by block).

:func:`profile_step` runs it under a :class:`helpers.engine.meter.Meter` (real
GPU counters or simulated) with a :class:`helpers.engine.trace.StepTracer`, and
returns a :class:`helpers.record.StepProfile`: a steady-state profile runs the
same step twice, untraced then traced.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import statistics
import time
from dataclasses import dataclass
from itertools import chain
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from .config import StepConfig, check_int
from .engine.meter import Meter
from .engine.trace import StepTracer
from .models import ModelSpec, hf, output_logits, resolve_model, sequential_form
from .record import Allocation, StepProfile, Storage, bytes_by_category, label_storages
from .techniques import Checkpointed, StepInBackward
from .techniques.checkpointing import CheckpointedBlock

_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
_PARAM_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


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
            ``inputs``, ``loss``, ``num_classes``, ``name``, and for fine-tuning
            ``lora_rank``, ``lora_targets``, ``lora_dropout``, ``quantization``,
            ``param_dtype``, ``optimizer_offload``.  With
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
    config = step_config(model, batch_size, image_size, "profile_step", **options)
    runner = StepRunner(config)
    name, runtime = runner.name, runner.meter.runtime
    try:
        with runner.meter:
            return _profile(runner)
    except torch.OutOfMemoryError as e:
        oom = str(e).splitlines()[0]
        requested, allocated = getattr(e, "requested", None), getattr(e, "allocated", None)
    # Out of memory: the exception and its frames are gone now; drop the runner
    # (the model, its optimizer) too, so that the step's tensors are freed and
    # the allocator's cache can be returned to the driver.
    del runner
    runtime.release()
    error = DoesNotFit(f"{name} at batch size {config.batch_size} does not fit: {oom}")
    error.cuda_message, error.requested, error.allocated = oom, requested, allocated
    raise error


def time_step(model="resnet18", batch_size: int = 128, image_size: int = 224, repeats: int = 3,
              **options) -> float:
    """Wall time of one training step, untraced, in seconds: the median of ``repeats``.

    The step is the one :func:`profile_step` traces (the same :class:`StepRunner`), run once
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
    config = step_config(model, batch_size, image_size, "time_step", **options)
    meter = Meter(config.device, config.capacity, attention=config.attention, count_storages=False)
    runner = StepRunner(config, meter)
    runtime, times = meter.runtime, []
    with meter:
        runner.place()
        for i in range(repeats + 1):
            runtime.synchronize()
            start = time.perf_counter()
            runner.run()
            runtime.synchronize()
            if i:  # the first is the warm-up
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def step_config(model, batch_size: int, image_size: int, caller: str, **options) -> StepConfig:
    """The :class:`StepConfig` of a call such as ``profile_step(model, batch_size, image_size, **options)``.

    ``model`` may already be a whole :class:`StepConfig`: it is returned as it is.

    Raises:
        ValueError: for an option :class:`StepConfig` does not have (naming
            ``caller`` and the options there are), or a bad value.
    """
    if isinstance(model, StepConfig):
        return model
    known = {f.name for f in dataclasses.fields(StepConfig)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"unknown option {unknown[0]!r} for {caller}; the options are "
                         f"{', '.join(sorted(known - {'model', 'batch_size', 'image_size'}))}")
    return StepConfig(model=model, batch_size=batch_size, image_size=image_size, **options)


@dataclass(frozen=True)
class Task:
    """What the step feeds the model and how it scores the output (from a config and a model).

    Attributes:
        inputs: ``"features"`` (float samples), ``"tokens"`` (int64 ids) or
            ``"custom"`` (``StepConfig.inputs`` makes them).
        sample_shape: one sample's shape (``()`` for custom inputs).
        vocab_size: token inputs: ids are drawn below it.
        loss: ``"classification"``, ``"next_token"``, or a function of the output.
        num_classes: a classifier's classes, if known before the forward pass.
    """

    inputs: str
    sample_shape: tuple[int, ...]
    vocab_size: int | None
    loss: str | Callable
    num_classes: int | None


def _task(config: StepConfig, spec: ModelSpec) -> Task:
    if spec.vocab_size and config.input_shape is not None:
        raise ValueError(f"{spec.name} takes token ids: give their number with seq_len= (--seq-len), "
                         f"not input_shape=")
    if config.seq_len is None and config.inputs is None and isinstance(spec.build, hf.CausalLMBuilder):
        raise ValueError(f"{spec.name} is a Hugging Face causal LM: give the sequence length with seq_len= "
                         f"(--seq-len); its context, {spec.seq_len:,} tokens, is not taken by default")
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
    return Task(kind, shape, vocab, loss, config.num_classes or spec.num_classes)


@dataclass
class Batch:
    """One (micro-)batch: the model's inputs and the loss's targets.

    Attributes:
        inputs: the positional inputs of the model's forward.
        targets: the targets, or ``None`` when they can only be drawn once the
            output's shape is known; :meth:`StepRunner.forward` then sets them.
    """

    inputs: tuple
    targets: torch.Tensor | None = None

    def tensors(self) -> list[torch.Tensor]:
        """The inputs and targets that are tensors."""
        return [t for t in (*self.inputs, self.targets) if isinstance(t, torch.Tensor)]


@dataclass
class Moments:
    """What :meth:`StepRunner.run` learnt about the step's storages (the meter's serials).

    Attributes:
        inputs: the batches and their targets.
        gradients: the parameters' gradients.
        states: the optimizer's states after its step.
        missing: names of parameters that require grad and got none (lesson 04's trap).
    """

    inputs: set = dataclasses.field(default_factory=set)
    gradients: set = dataclasses.field(default_factory=set)
    states: set = dataclasses.field(default_factory=set)
    missing: list = dataclasses.field(default_factory=list)


class StepRunner:
    """One training step as a :class:`helpers.config.StepConfig` says, written once.

    It owns every part of the step, and each option is applied here and
    nowhere else:

    * the model: resolved from ``config.model`` and built by the meter's
      backend (on ``meta`` when simulating) when the runner is made, outside
      any measurement; placed on the device, counted, by :meth:`place`;
    * what the forward pass calls (:attr:`module`): the model, or the model
      in ``config.checkpoint`` checkpointed segments (``config.reentrant``);
    * the optimizer (:attr:`optimizer`: ``config.optimizer``, ``fused``,
      stepped inside backward with ``step_in_backward``, or with its states in
      host memory with ``optimizer_offload``) and the
      ``GradScaler`` (:attr:`scaler`, float16 AMP only);
    * the forward pass's contexts: autocast (``config.amp`` in
      ``config.amp_dtype``, the backend's, :meth:`autocast`) and offloading
      (``config.offload``, :meth:`offload`), made afresh for every forward pass;
    * the batch and its targets (:meth:`batch`), the loss (:meth:`forward`),
      backward (:meth:`backward`, scaled), the optimizer step (:meth:`step`),
      ``zero_grad`` (:meth:`zero_grad`, ``config.set_to_none``), and
      gradient accumulation (:meth:`run`, ``config.accumulation_steps``).

    The order of a step, :meth:`run`::

        for each of the k = accumulation_steps micro-batches:
            batch = runner.batch()          # 1. inputs and targets on the device
            loss = runner.forward(batch)    # 2. forward pass and loss, under autocast and offload
            loss = loss / k                 #    (only when accumulating)
            runner.backward(loss)           # 3. backward (through the GradScaler)
        runner.step()                       # 4. optimizer step (through the GradScaler)
        runner.zero_grad()                  # 5. zero_grad(set_to_none=config.set_to_none)

    A caller that needs only part of a step (a forward pass under
    ``torch.no_grad()``, a loop that keeps its losses) calls the parts
    itself.  Use it inside its meter::

        runner = StepRunner(config)       # the model is built here, not counted
        with runner.meter:
            runner.place()                # parameters and buffers on the device, counted
            runner.run()

    Args:
        config: the step.
        meter: the :class:`helpers.engine.meter.Meter` it runs under (default:
            a new one for ``config.device``, ``config.capacity`` and
            ``config.attention``).
        model: an already built model, used as it is (not copied); default:
            ``config.model``, built by the meter's backend.
        place: puts the model on the device inside the meter and returns it
            (default: the backend's ``place``).  A sharded model passes its own
            (:mod:`helpers.fsdp`); an already placed model passes ``lambda m: m``.

    Attributes:
        config, meter: as given.
        spec: the model's :class:`helpers.models.ModelSpec`; ``name`` is its label.
        task: the :class:`Task` (inputs and loss).
        model: the model (placed, after :meth:`place`).
        module: after :meth:`place`, what the forward pass calls: :attr:`model`,
            or a :class:`helpers.techniques.Checkpointed` around it.
        optimizer, scaler: after :meth:`place`; ``scaler`` is None but under float16 AMP.

    Raises:
        ValueError: for an unknown model, a model whose constructor fails
            (in one line), or inputs that do not fit the model.
    """

    def __init__(self, config: StepConfig, meter: Meter | None = None, *, model: nn.Module | None = None,
                 place: Callable[[nn.Module], nn.Module] | None = None):
        self.config = config
        self.spec = resolve_model(config.model, config.num_classes, config.name)
        self.name = self.spec.name
        self.task = _task(config, self.spec)
        self.meter = meter if meter is not None else Meter(config.device, config.capacity,
                                                           attention=config.attention)
        self._place = place if place is not None else self.meter.runtime.place
        if model is None:
            build = self.spec.build
            try:
                model = self.meter.runtime.build(lambda: hf.prepare(build(), config))
            except hf.Refused as e:  # already one line that names the problem
                raise ValueError(str(e)) from None
            except Exception as e:  # the learner's constructor: report it in one line, not from inside torch
                first_line = (str(e).strip() or type(e).__name__).splitlines()[0]
                raise ValueError(f"building {self.name} failed: {type(e).__name__}: {first_line}") from None
        if not isinstance(model, nn.Module):
            raise ValueError(f"the model function must return an nn.Module, got {type(model).__name__}")
        if config.offload and any(getattr(m, "policy", None) == "selective" for m in model.modules()
                                  if isinstance(m, CheckpointedBlock)):
            raise ValueError("offloading saved tensors (save_on_cpu) with selective activation checkpointing is "
                             "not simulated: PyTorch 2.14.1 lets the tensors SAC saves bypass save_on_cpu, and "
                             "announces that this will change")
        self.model: nn.Module = model
        self.module: nn.Module | None = None
        self.optimizer = None
        self.scaler = None

    # -- set up, inside the meter ------------------------------------------------------
    def place(self) -> nn.Module:
        """Put the model on the device (counted), and make what runs it: the
        (checkpointed) :attr:`module`, the :attr:`optimizer` and the :attr:`scaler`.

        Returns:
            The placed model.
        """
        config, runtime, tracker = self.config, self.meter.runtime, self.meter.tracker
        if config.quantization == "nf4":  # QLoRA: the frozen weights arrive in 4 bits, one at a time
            self.model = model = hf.quantize_nf4(self.model, self._place, self.meter.device)
            self.meter.reset_peak()  # loading and quantizing is not the step (the bf16 copies are gone)
        else:
            self.model = model = self._place(self.model)
        self.module = (Checkpointed(sequential_form(model), config.checkpoint, config.reentrant)
                       if config.checkpoint and not hf.is_hf_model(model) else model)  # HF: hf.prepare did it
        if config.step_in_backward:
            self.optimizer = StepInBackward(
                model.parameters(), lambda params: runtime.optimizer(config.optimizer, params, tracker, config.fused))
        elif config.optimizer_offload:
            self.optimizer = runtime.offloaded_optimizer(config.optimizer, model.parameters(), tracker, config.fused)
        else:
            self.optimizer = runtime.optimizer(config.optimizer, model.parameters(), tracker, config.fused)
        self.scaler = runtime.grad_scaler(_DTYPES[config.amp_dtype]) if config.amp else None
        return model

    # -- the contexts of a forward pass: a fresh one at each call ------------------------
    def autocast(self):
        """A new autocast context of the backend (``config.amp`` in
        ``config.amp_dtype``), or one that does nothing.  A context is entered
        once: take a new one for every forward pass."""
        if self.config.amp:
            return self.meter.runtime.autocast(_DTYPES[self.config.amp_dtype])
        return contextlib.nullcontext()

    def offload(self):
        """A new context in which autograd keeps saved tensors in host memory
        (``config.offload``, the backend's), or one that does nothing."""
        if self.config.offload:
            return self.meter.runtime.offload(self.meter.tracker)
        return contextlib.nullcontext()

    # -- the parts of a step -----------------------------------------------------------
    def batch(self) -> Batch:
        """The model's inputs on the device, and the targets when they can be drawn before the forward pass."""
        task, config, device = self.task, self.config, self.meter.device
        b = config.batch_size
        if task.inputs == "custom":
            made = config.inputs(b, device)
            return Batch(made if isinstance(made, tuple) else (made,))
        if task.inputs == "tokens":
            ids = torch.randint(0, task.vocab_size, (b, *task.sample_shape), device=device)
            if task.loss == "next_token":
                return Batch((ids,), torch.randint(0, task.vocab_size, (b, *task.sample_shape), device=device))
            x = ids
        else:  # float samples in the parameters' dtype (config.param_dtype), as a bf16 model is fed
            x = torch.randn(b, *task.sample_shape, device=device, dtype=_PARAM_DTYPES[config.param_dtype])
        if task.loss == "classification" and task.num_classes:
            return Batch((x,), torch.randint(0, task.num_classes, (b,), device=device))
        return Batch((x,))

    def output(self, batch: Batch) -> Any:
        """The forward pass alone: :attr:`module`'s output on ``batch``, under
        the step's autocast and offload contexts."""
        with self._explained(batch), self.autocast(), self.offload():
            return self.module(*batch.inputs)

    def forward(self, batch: Batch) -> torch.Tensor:
        """The forward pass and the loss on ``batch``, under the step's autocast and offload contexts.

        Sets ``batch.targets`` if the loss had to draw them.  Runs under
        whatever grad mode the caller has set.

        Returns:
            The loss (a scalar), not divided by ``accumulation_steps`` (:meth:`run` does that).

        Raises:
            ValueError: if the model cannot run on the batch, or its output does not fit the loss.
        """
        with self._explained(batch), self.autocast(), self.offload():
            loss, batch.targets = _loss(self.task, self.module(*batch.inputs), batch.targets)
        return loss

    def backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()``, through the GradScaler under float16 AMP."""
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def step(self) -> None:
        """The optimizer's step, through the GradScaler under float16 AMP (and its update)."""
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def zero_grad(self) -> None:
        """``optimizer.zero_grad(set_to_none=config.set_to_none)``."""
        self.optimizer.zero_grad(set_to_none=self.config.set_to_none)

    def run(self, tracer: StepTracer | None = None) -> Moments:
        """One whole training step (see the class's docstring for its order).

        With ``accumulation_steps`` k, the forward and backward passes run k
        times, each on its own batch and with the loss divided by k, before the
        one optimizer step (the gradients add up in ``.grad``).

        Args:
            tracer: records each moment of the step as an event (a step
                event for each part), and tells modules' events in backward
                from those in forward.

        Returns:
            The :class:`Moments`: which storages were the inputs, gradients
            and optimizer states, and the parameters that got no gradient.
        """
        def record(note: str, phase: str, shape=None) -> None:
            if tracer is not None:
                tracer.record(None, note, phase, shape)

        config, meter, model, opt = self.config, self.meter, self.model, self.optimizer
        moments = Moments()
        in_backward = isinstance(opt, StepInBackward)
        if in_backward:  # its hooks free each gradient as soon as it is used: note them first
            opt.start(lambda grad: moments.gradients.add(meter.serial_of(grad)))
        record("parameters, buffers, optimizer states" if config.steady_state else "parameters and buffers", "model")
        for _ in range(config.accumulation_steps):
            batch = self.batch()
            moments.inputs |= {meter.serial_of(t) for t in batch.tensors()}
            first = next((t for t in batch.inputs if isinstance(t, torch.Tensor)), None)
            record("input batch and targets", "input", tuple(first.shape) if first is not None else None)
            if tracer is not None:
                tracer.in_backward = False
            loss = self.forward(batch)
            if batch.targets is not None:
                moments.inputs.add(meter.serial_of(batch.targets))
            if config.accumulation_steps > 1:
                loss = loss / config.accumulation_steps  # the mean over all k batches
            record("cross-entropy loss" if isinstance(self.task.loss, str) else "loss", "loss", tuple(loss.shape))
            if tracer is not None:
                tracer.in_backward = True
            self.backward(loss)
            record("loss.backward() returned", "backward")
        moments.gradients |= {meter.serial_of(p.grad) for p in model.parameters() if p.grad is not None}
        got = opt.stepped if in_backward else {p for p in model.parameters() if p.grad is not None}
        moments.missing = [n for n, p in model.named_parameters() if p.requires_grad and p not in got]
        self.step()
        record("optimizer.step()", "optimizer.step")
        moments.states = {serial for state in _device_states(opt).values() for t in state.values()
                          if isinstance(t, torch.Tensor) for serial in _serials(meter, t)}
        self.zero_grad()
        record("optimizer.zero_grad()" if config.set_to_none else "optimizer.zero_grad(set_to_none=False)", "zero_grad")
        return moments

    @contextlib.contextmanager
    def _explained(self, batch: Batch):
        """A failure to run the model on ``batch`` (or to score its output) becomes one ValueError line."""
        try:
            yield
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            if isinstance(e, torch.OutOfMemoryError):
                raise
            first_line = (str(e).strip() or type(e).__name__).splitlines()[0]
            shapes = ", ".join(str(tuple(t.shape)) for t in batch.inputs if isinstance(t, torch.Tensor))
            config = self.config
            hint = ("; give the shape of one sample with input_shape= (--input-shape), or seq_len= for token ids"
                    if config.inputs is None and config.input_shape is None and not config.tokens else "")
            raise ValueError(f"{self.name} cannot run on input {shapes}: {first_line}{hint}") from None


def _loss(task: Task, output, targets: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
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


def _device_states(optimizer) -> dict:
    """The optimizer's states, by parameter; for torchao's ``CPUOffloadOptimizer`` (which has no ``state``
    of its own: the host optimizers hold theirs) the states of its GPU optimizer of small parameters."""
    if hasattr(optimizer, "state"):
        return optimizer.state
    on_device = getattr(optimizer, "d_opt", None)
    return on_device.state if on_device is not None else {}


def _serials(meter: Meter, t: torch.Tensor) -> list[int]:
    """The meter's serials of every storage of ``t``: its own, or its inner tensors' for a tensor subclass
    (an ``NF4Tensor`` keeps its codes, scales and code book in five; its constants count as parameters)."""
    if is_traceable_wrapper_subclass(t):
        return [s for name in t.__tensor_flatten__()[0] if isinstance(getattr(t, name), torch.Tensor)
                for s in _serials(meter, getattr(t, name))]
    serial = meter.serial_of(t)
    return [] if serial is None else [serial]


def _profile(runner: StepRunner) -> StepProfile:
    """The profile of one step of ``runner`` (the second, with ``steady_state``), inside its meter."""
    meter, config, task = runner.meter, runner.config, runner.task
    runtime = meter.runtime
    model = runner.place()
    parameters = {serial for t in chain(model.parameters(), model.buffers()) for serial in _serials(meter, t)}

    if config.steady_state:  # one untraced step, so that the optimizer states exist
        runner.run()
        meter.reset_peak()
    with StepTracer(meter, model, root=runner.module if config.checkpoint else None) as tracer:
        moments = runner.run(tracer)

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
        model=runner.name,
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
