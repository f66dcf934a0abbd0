"""One training step, written once: the recipe that prepares a model, and the loop that trains it.

:class:`StepRunner` prepares a model as :data:`RECIPE` says (an ordered list of named steps, each in the module of its
technique), then runs what every training loop does for one mini-batch (:meth:`StepRunner.run`), talking to the engine
through its :class:`helpers.engine.meter.Meter` only.  It decides nothing about how a question is answered: the traced
step (:mod:`helpers.traced`, below the profile layer's :func:`~helpers.profile.profile_step`) runs it traced,
:func:`~helpers.profile.time_step` untraced; :mod:`helpers.loops`, :mod:`helpers.fsdp`, :mod:`helpers.transformer`,
:mod:`helpers.serving` and :mod:`helpers.generation` run parts of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from itertools import chain
from typing import Any, Callable

import torch
from torch import nn
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from . import models
from .config import StepConfig
from .engine.meter import Meter
from .engine.trace import StepTracer
from .errors import Refused, first_line
from .models import Batch, resolve_model, resolve_task
from .techniques import checkpointing, lora, optimizers, precision, quantization
from .techniques.optimizers import StepInBackward


def place_on_device(runner: "StepRunner") -> None:
    """The recipe's placing step: the model's parameters and buffers on the device, counted
    (:meth:`helpers.engine.meter.Meter.place`, or the ``place`` the runner was given)."""
    runner.model = runner.place_model(runner.model)


#: How a model is prepared for a step, in order: (name, step).  A step is a
#: function of the :class:`StepRunner` that reads the options of its technique
#: in ``runner.config`` and changes the runner's model (or adds what runs it).
#: The steps before "place on the device" run when the runner is made, outside
#: any measurement (on the ``meta`` device when simulating); the others run in
#: :meth:`StepRunner.place`, counted.
RECIPE: tuple[tuple[str, Callable[["StepRunner"], None]], ...] = (
    ("build", models.build),                                    # config.model
    ("parameter dtype", precision.set_parameter_dtype),         # param_dtype
    ("k-bit preparation", quantization.prepare_kbit),           # prepare_kbit (peft's, QLoRA with bitsandbytes)
    ("activation checkpointing", checkpointing.enable),         # checkpoint, reentrant
    ("LoRA adapters", lora.add_adapters),                       # lora_rank, lora_targets, lora_dropout
    ("embeddings back to bfloat16", quantization.cast_embeddings_to_bf16),  # bf16_embeddings (TRL's cast)
    ("hold back weights to quantize", quantization.hold_back),  # quantization (QLoRA)
    ("place on the device", place_on_device),                   # counted from here on
    ("quantize", quantization.quantize),                        # quantization: one weight at a time
    ("optimizer", optimizers.add_optimizer),                    # optimizer, fused, step_in_backward, optimizer_offload
    ("GradScaler", precision.add_grad_scaler),                  # amp, amp_dtype
)
_PLACE = [name for name, _ in RECIPE].index("place on the device")


@dataclass
class StepRoles:
    """What :meth:`StepRunner.run` learns: the meter's serials of each role, and the parameters without gradient.

    Attributes:
        inputs: the batches and their targets.
        gradients: the parameters' gradients.
        optimizer_states: the optimizer's states after its step.
        params_without_grad: names of parameters that require grad and got none.
    """

    inputs: set = dataclasses.field(default_factory=set)
    gradients: set = dataclasses.field(default_factory=set)
    optimizer_states: set = dataclasses.field(default_factory=set)
    params_without_grad: list = dataclasses.field(default_factory=list)


class StepRunner:
    """One training step as a :class:`helpers.config.StepConfig` says, written once.

    Made, it resolves the model and what it eats (:func:`helpers.models.resolve_model`,
    :func:`helpers.models.resolve_task`) and runs :data:`RECIPE` up to placing; :meth:`place` runs the rest inside the
    meter.  :meth:`run` is the loop::

        for each of the k = accumulation_steps micro-batches:
            batch = runner.batch()          # 1. inputs and targets on the device
            loss = runner.forward(batch)    # 2. forward pass and loss, under autocast and offload
            loss = loss / k                 #    (only when accumulating)
            runner.backward(loss)           # 3. backward (through the GradScaler)
        runner.step()                       # 4. optimizer step (through the GradScaler)
        runner.zero_grad()                  # 5. zero_grad(set_to_none=config.set_to_none)

    A caller that needs only part of a step calls the parts itself::

        runner = StepRunner(config)       # the model is built here, not counted
        with runner.meter:
            runner.place()                # parameters and buffers on the device, counted
            runner.run()

    Args:
        config: the step.
        meter: the :class:`helpers.engine.meter.Meter` (default: a new one for
            ``config.device``, ``config.capacity`` and ``config.attention``).
        place: puts the model on the device inside the meter and returns it
            (default :meth:`~helpers.engine.meter.Meter.place`; :mod:`helpers.fsdp` shards).
        spec: the :class:`helpers.models.ModelSpec` to build instead of
            ``config.model``'s (a shallow step has a copy with fewer blocks: :func:`helpers.depth.shallow`).
        sizes: the batch's sizes instead of ``config``'s: ``(batch,)``, or ``(batch, seq)`` for token inputs, as
            ``SymInt`` (:mod:`helpers.symbolic` traces the step once for every batch and sequence length).

    Attributes:
        config, meter: as given.
        batch_size: samples per batch fed (``config.batch_size``, or ``sizes[0]``).
        spec: the model's :class:`helpers.models.ModelSpec`; ``name`` is its label.
        task: the :class:`helpers.models.Task` (inputs and loss).
        model: the model (placed, after :meth:`place`).
        segments: the :class:`helpers.techniques.Checkpointed` segments, or None.
        held_back: weights kept off the device until after placing (QLoRA's), as ``(parent, attribute, layer, weight)``.
        caches: device tensors a library keeps in a module-level cache (bitsandbytes' code book), alive with the
            runner as they would be with the process.
        optimizer, scaler: after :meth:`place`; ``scaler`` only under float16 AMP.

    Raises:
        ValueError: in one line, for an unknown model, a constructor that fails, or inputs that do not fit the model.
    """

    def __init__(self, config: StepConfig, meter: Meter | None = None, *,
                 place: Callable[[nn.Module], nn.Module] | None = None, spec: models.ModelSpec | None = None,
                 sizes: tuple | None = None):
        self.config = config
        self.spec = spec if spec is not None else resolve_model(config.model, config.num_classes, config.name)
        self.name = self.spec.name
        self.task = resolve_task(config, self.spec)
        self.batch_size = config.batch_size
        if sizes is not None:  # symbolic sizes (helpers.symbolic): the batch, and the sequence of token inputs
            self.batch_size = sizes[0]
            if len(sizes) > 1:
                self.task = dataclasses.replace(self.task, sample_shape=tuple(sizes[1:]))
        self.meter = meter if meter is not None else Meter(config.device, config.capacity, attention=config.attention,
                                                           workspaces=config.workspaces)
        self.place_model = place if place is not None else self.meter.place
        self.model: nn.Module | None = None
        self.segments: nn.Module | None = None
        self.held_back: list = []
        self.caches: list = []
        self.optimizer = self.scaler = None
        try:
            self.model = self.meter.build(lambda: self._prepare(RECIPE[:_PLACE]))
            if self.task.loss == "chunked":
                models.check_chunked(self.model)
        except Refused as e:  # already one line that names the problem
            raise ValueError(str(e)) from None
        except Exception as e:  # the learner's constructor: report it in one line, not from inside torch
            raise ValueError(f"building {self.name} failed: {type(e).__name__}: {first_line(e)}") from None

    def _prepare(self, steps) -> nn.Module:
        """Run ``steps`` of :data:`RECIPE`, in order; return the model."""
        for _, step in steps:
            step(self)
        return self.model

    def place(self) -> nn.Module:
        """The rest of :data:`RECIPE`, inside the meter: the model on the device (counted), quantized
        (QLoRA), the :attr:`optimizer` and the :attr:`scaler`.

        Returns:
            The placed model.
        """
        return self._prepare(RECIPE[_PLACE:])

    @property
    def module(self) -> nn.Module:
        """What the forward pass calls: the :attr:`segments` around the model, or the model."""
        return self.segments if self.segments is not None else self.model

    # -- the contexts of a forward pass: a fresh one at each call ------------------------
    def autocast(self):
        """A new autocast context (``config.amp`` in ``config.amp_dtype``), or a null one; enter each once."""
        return precision.autocast(self.config, self.meter)

    def offload(self):
        """A new context keeping saved tensors in host memory (``config.offload``), or a null one."""
        return self.meter.offload() if self.config.offload else contextlib.nullcontext()

    # -- the parts of a step -----------------------------------------------------------
    def batch(self) -> Batch:
        """The model's inputs on the device, and the targets when they can be drawn before the forward pass."""
        return self.task.batch(self.batch_size, self.meter.device)

    def output(self, batch: Batch) -> Any:
        """The forward pass alone: :attr:`module`'s output on ``batch``, under autocast and offload."""
        with self._explained(batch), self.autocast(), self.offload():
            return self.module(*batch.inputs)

    def forward(self, batch: Batch) -> torch.Tensor:
        """The forward pass and the loss on ``batch``, under autocast and offload, in the caller's grad mode.

        Sets ``batch.targets`` if the loss drew them.

        Returns:
            The loss (a scalar), not divided by ``accumulation_steps``.

        Raises:
            ValueError: if the model cannot run on the batch, or its output does not fit the loss.
        """
        with self._explained(batch), self.autocast(), self.offload():
            loss, batch.targets = self.task.forward(self.module, batch.inputs, batch.targets)
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

    def run(self, tracer: StepTracer | None = None, *, free_batch: bool = False) -> StepRoles:
        """One whole training step (the class's loop); k accumulation steps add their gradients in ``.grad``.

        Args:
            tracer: records each moment as a step event (placed, batch, loss, backward, optimizer step, ``zero_grad``),
                and tells backward's module events from forward's.
            free_batch: drop the batch and loss once backward has run; by default they stay alive through the
                optimizer step, as a loop's variables do.

        Returns:
            The :class:`StepRoles`.
        """
        def record(note: str, phase: str, shape=None) -> None:
            if tracer is not None:
                tracer.record(None, note, phase, shape)

        config, meter, model, opt = self.config, self.meter, self.model, self.optimizer
        roles = StepRoles()
        in_backward = isinstance(opt, StepInBackward)
        if in_backward:  # its hooks free each gradient as soon as it is used: note them first
            opt.start(lambda grad: roles.gradients.add(meter.serial_of(grad)))
        record("parameters, buffers, optimizer states" if config.steady_state else "parameters and buffers", "model")
        for _ in range(config.accumulation_steps):
            batch = self.batch()
            roles.inputs |= {meter.serial_of(t) for t in batch.tensors()}
            first = next((t for t in batch.inputs if isinstance(t, torch.Tensor)), None)  # the batch's (its shape)
            record("input batch and targets", "input", tuple(first.shape) if first is not None else None)
            if tracer is not None:
                tracer.in_backward = False
            loss = self.forward(batch)
            if batch.targets is not None:
                roles.inputs.add(meter.serial_of(batch.targets))
            if config.accumulation_steps > 1:
                loss = loss / config.accumulation_steps  # the mean over all k batches
            record("cross-entropy loss" if isinstance(self.task.loss, str) else "loss", "loss", tuple(loss.shape))
            if tracer is not None:
                tracer.in_backward = True
            self.backward(loss)
            if free_batch:  # the loss, then the batch's inputs, then its targets
                del loss, first, batch
            record("loss.backward() returned", "backward")
        roles.gradients |= {meter.serial_of(p.grad) for p in model.parameters() if p.grad is not None}
        got = opt.stepped if in_backward else {p for p in model.parameters() if p.grad is not None}
        roles.params_without_grad = [n for n, p in model.named_parameters() if p.requires_grad and p not in got]
        self.step()
        record("optimizer.step()", "optimizer.step")
        roles.optimizer_states = {serial for state in optimizers.device_states(opt).values() for t in state.values()
                                  if isinstance(t, torch.Tensor) for serial in storage_serials(meter, t)}
        self.zero_grad()
        record("optimizer.zero_grad()" if config.set_to_none else "optimizer.zero_grad(set_to_none=False)", "zero_grad")
        return roles

    @contextlib.contextmanager
    def _explained(self, batch: Batch):
        """A failure to run the model on ``batch`` (or to score its output) becomes one ValueError line."""
        try:
            yield
        except (RuntimeError, ValueError, TypeError, IndexError) as e:
            if isinstance(e, torch.OutOfMemoryError):
                raise
            shapes = ", ".join(str(tuple(t.shape)) for t in batch.inputs if isinstance(t, torch.Tensor))
            config = self.config
            hint = ("; give the shape of one sample with input_shape= (--input-shape), or seq_len= for token ids"
                    if config.inputs is None and config.input_shape is None and not config.tokens else "")
            raise ValueError(f"{self.name} cannot run on input {shapes}: {first_line(e)}{hint}") from None


def storage_serials(meter: Meter, t: torch.Tensor) -> list[int]:
    """The meter's serials of every storage of ``t``: its own, or its inner tensors' for a tensor subclass
    (an ``NF4Tensor`` keeps its codes, scales and code book in five; its constants count as parameters), and those of
    the ``quant_state`` a bitsandbytes 4-bit weight carries (:func:`helpers.techniques.quantization.state_tensors`)."""
    if is_traceable_wrapper_subclass(t):
        return [s for name in t.__tensor_flatten__()[0] if isinstance(getattr(t, name), torch.Tensor)
                for s in storage_serials(meter, getattr(t, name))]
    serial = meter.serial_of(t)
    own = [] if serial is None else [serial]
    return own + [s for part in quantization.state_tensors(t) for s in storage_serials(meter, part)]


def owned_storages(runner: StepRunner) -> tuple[dict[str, list[int]], list[tuple[str, list[int]]]]:
    """The storages of a placed ``runner``'s model and optimizer, as :func:`helpers.shallow.read_shallow_step` reads
    them: the serials of each parameter and buffer by name (:func:`storage_serials`), and ``(parameter name,
    serials)`` of each optimizer state (``""``: a parameter of no name)."""
    meter, model, optimizer = runner.meter, runner.model, runner.optimizer
    owned = {name: storage_serials(meter, t) for name, t in chain(model.named_parameters(), model.named_buffers())}
    names = {id(p): name for name, p in model.named_parameters()}
    states = [(names.get(id(p), ""), storage_serials(meter, t))
              for p, state in (optimizer.state.items() if optimizer is not None else ())
              for t in state.values() if isinstance(t, torch.Tensor)]
    return owned, states
