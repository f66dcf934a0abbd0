"""The traced step: the step runner's step run once under a tracer, and read as a profile.

Every way of answering a question ends here, below the decision of which way applies (:mod:`helpers.profile`): a
step traced in full, the two shallow steps a deep one is written from (:mod:`helpers.depth`), and a step traced once
with symbolic sizes (:mod:`helpers.symbolic`).  :func:`trace` is the step as it is measured: the model placed on the
device (counted), one untraced first step under ``steady_state`` (the optimizer's states made), then the step under
its tracer (:class:`helpers.engine.trace.StepTracer`), read by :func:`helpers.record.record_step`, which names what
each storage is: the parameters and buffers, the input, the gradients and the optimizer states (what the runner's
loop returns, :class:`helpers.step.StepRoles`), and the activations (the tensors autograd saved for backward, and
those checkpointing recomputed).

:func:`shallow_step` and :func:`symbolic_step` make the meter, the tracker and the runner of a shallow or symbolic
step themselves, from what sits below them (:mod:`helpers.shallow`, :mod:`helpers.symbolic_sizes`): the modules
above call them and are never called back.
"""

from __future__ import annotations

import contextlib
import dataclasses
from itertools import chain
from typing import Callable

from .config import StepConfig
from .engine.meter import Meter
from .engine.trace import StepTracer
from .models import ModelSpec
from .record import StepProfile, record_step
from .shallow import ShallowStep, ShallowStepTracer, ShallowStepTracker, read_shallow_step
from .step import StepRunner, owned_storages, storage_serials
from .symbolic_sizes import SymbolicRecord, SymbolicTracker, Symbols, canonical, no_cpu_kernel_choice, \
    record_symbolic_step
from .techniques import optimizers, quantization


def trace(runner: StepRunner, make_tracer: Callable[..., StepTracer] = StepTracer,
          first_tracer: Callable[..., StepTracer] | None = None, record: Callable = record_step) -> StepProfile:
    """The profile of one step of ``runner`` (the second, with ``steady_state``), inside its meter.

    ``make_tracer(meter, model, root=...)`` makes the step's tracer; ``first_tracer``, if given, one for the untraced
    first step of ``steady_state`` (:mod:`helpers.depth` reads both; the events of the first are not the profile's).
    ``record``: reads the traced step as :func:`helpers.record.record_step` does, with its arguments
    (:func:`symbolic_step` keeps a :class:`helpers.symbolic_sizes.SymbolicRecord` instead).
    """
    meter, config = runner.meter, runner.config
    model = runner.place()
    parameters = {serial for t in chain(model.parameters(), model.buffers()) for serial in storage_serials(meter, t)}
    root = runner.module if config.checkpoint else None
    if config.steady_state:  # one untraced step, so that the optimizer states exist
        with first_tracer(meter, model, root=root) if first_tracer else contextlib.nullcontext() as first:
            runner.run(first)
        meter.reset_peak()
    reset_at = meter.log_length() if config.steady_state else None
    with make_tracer(meter, model, root=root) as tracer:
        roles = runner.run(tracer)
    activations = set(tracer.saved)
    for first, last in tracer.recomputed:
        activations.update(range(first, last))
    return record(
        meter, tracer.events,
        {"parameters": parameters, "gradients": roles.gradients, "optimizer_states": roles.optimizer_states,
         "input": roles.inputs, "activations": activations},
        config=config, model=runner.name, input_shape=runner.task.sample_shape,
        parameter_count=sum(map(quantization.weights, model.parameters())),
        params_without_grad=roles.params_without_grad, reset_at=reset_at,
        paged_bytes=optimizers.paged_bytes(runner.optimizer))


def shallow_step(config: StepConfig, spec: ModelSpec, blocks: int, symbols: Symbols | None = None) -> ShallowStep:
    """The step of ``config`` and ``spec``, a model of ``blocks`` blocks (:func:`helpers.depth.shallow` makes them),
    traced with a :class:`helpers.shallow.ShallowStepTracker` (with ``symbols``, a
    :class:`helpers.symbolic_sizes.SymbolicTracker`, its sizes those symbols), and read block by block with the
    storages of each parameter, buffer and optimizer state (:func:`helpers.shallow.read_shallow_step`)."""
    return _traced(config, spec, symbols, blocks)


def symbolic_step(config: StepConfig, spec: ModelSpec, symbols: Symbols) -> tuple[SymbolicRecord, SymbolicTracker]:
    """``config``'s whole step traced once with ``symbols`` as its batch's sizes: its record
    (:func:`helpers.symbolic_sizes.record_symbolic_step`) and its tracker (whose markers say where each event falls
    in the log).

    Raises:
        NotSymbolic: for a storage resized in place; whatever an operation that needs concrete sizes raises.
    """
    return _traced(config, spec, symbols, None)


def _traced(config: StepConfig, spec: ModelSpec, symbols: Symbols | None, blocks: int | None):
    """:func:`shallow_step` (``blocks`` given) or :func:`symbolic_step` (``blocks`` None, ``symbols`` given).

    A symbolic step's CPU convolutions choose their kernel without the sizes
    (:func:`helpers.symbolic_sizes.no_cpu_kernel_choice`), its events' shapes and its convolutions' bytes are made
    canonical (:func:`helpers.symbolic_sizes.canonical`).
    """
    fake_mode = None
    if symbols is not None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        fake_mode = FakeTensorMode(shape_env=symbols.env)
    tracker = ShallowStepTracker() if symbols is None else SymbolicTracker()
    meter = Meter(config.device, attention=config.attention, tracker=tracker, fake_mode=fake_mode)
    runner = StepRunner(config, meter, spec=spec, sizes=None if symbols is None else symbols.sizes)
    with no_cpu_kernel_choice() if symbols is not None else contextlib.nullcontext(), meter:
        if symbols is None:
            rec = trace(runner, ShallowStepTracer, ShallowStepTracer.of_first_step)
        else:
            rec = trace(runner, ShallowStepTracer, ShallowStepTracer.of_first_step, record=record_symbolic_step)
            tracker.markers[:] = [(pos, kind, e if e is None or e.shape is None else
                                   dataclasses.replace(e, shape=tuple(map(canonical, e.shape))))
                                  for pos, kind, e in tracker.markers]
            rec.conv_bytes = tuple(canonical(p.input_bytes + p.weight_bytes + p.output_bytes)
                                   for p in tracker.kernels.passes)
        if blocks is None:
            return rec, tracker
        return read_shallow_step(blocks, rec, tracker, runner.model, *owned_storages(runner))
