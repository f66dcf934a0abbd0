"""The profile layer: a question about one training step in, its :class:`helpers.record.StepProfile` out.

Data flows down through it: a question (:func:`profile_step`'s arguments) becomes a :class:`helpers.config.StepConfig`;
the profiles already obtained are looked up (:data:`KEPT`); else :func:`obtain` decides, in one place, how the answer
is obtained:

* **evaluated** from a symbolic log (:mod:`helpers.evaluated`): a simulated step whose answer may be kept
  (:func:`_kept_key`) and whose sizes may be symbols (:func:`helpers.symbolic.applies`), where a log of its
  configuration without batch and sequence (:func:`helpers.symbolic.key`) is kept in the process or on disk
  (:mod:`helpers.symbolic_store`), or where the rule of :data:`helpers.evaluated.AT_POINT` says a symbolic trace now
  repays itself (the third point of a configuration; the second inside :func:`many_points`); each log is checked equal
  to a concrete answer before it is kept.  A log kept answers every question it holds for; new symbolic traces are
  made for every question where :data:`EVALUATE` is on, for those asked inside :func:`many_points` always; the other
  questions get one of the two ways below;
* **written** from two shallow traces (:mod:`helpers.depth`): a simulated step of a model of at least
  :data:`helpers.depth.MIN_BLOCKS` alike blocks, traced with 6 and 7 blocks, then its log written at full depth;
* **traced** in full: every other step, and a step whose shallow traces do not repeat block by block.

The profile's ``depth_note`` says which way was taken and, where it was not written or evaluated, why.  Each way is
one branch of :func:`obtain`, tried in order, and each is one call down: :func:`helpers.evaluated.answer` (then,
where it gives no answer, :func:`helpers.evaluated.remember` of the concrete one), :func:`helpers.depth.write`,
:func:`helpers.traced.trace`; none calls back up.  The step itself is run by :class:`helpers.step.StepRunner` (the
recipe and the loop), which talks to the engine through its meter.  :func:`time_step` runs the same step untraced
and times it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import statistics
import threading
import time
import types
from typing import Any, Hashable

import torch

from . import depth, evaluated, traced
from .config import StepConfig, check_int, step_config  # noqa: F401 (step_config: this module's name too)
from .engine.backends import collector_paused, resolve_backend
from .engine.meter import Meter
from .errors import first_line
from .hf_config import FrozenDict
from .models import ModelSpec, resolve_model
from .record import StepProfile
from .step import StepRunner
from .written import profile_of_log


class DoesNotFit(RuntimeError):
    """The step ran out of memory (``torch.OutOfMemoryError``), real or simulated.

    On a real GPU the step's tensors are released and the cache emptied first.

    Attributes:
        cuda_message: the first line of CUDA's (or the simulated) message, which also ends this error's message.
        requested: simulated only: bytes the failing allocation asked the driver for
            (:func:`helpers.allocator.rules.allocation_size`); else ``None``.
        allocated: simulated only: bytes of live tensors when it failed; else ``None``.
    """

    cuda_message: str = ""
    requested: int | None = None
    allocated: int | None = None


def profile_step(model="resnet18", batch_size: int = 128, image_size: int = 224, **options) -> StepProfile:
    """Run one training step and record its memory module by module.

    Args:
        model: a model (:func:`helpers.models.resolve_model`: a torchvision name, a preset such as ``"mlp"`` or
            ``"gpt2"``, an ``nn.Module``, a builder, a Hugging Face config), or a whole
            :class:`helpers.config.StepConfig`.
        batch_size: samples per batch, >= 1.
        image_size: height and width of image inputs (when ``input_shape`` is not given).
        **options: the other fields of :class:`helpers.config.StepConfig` (``steady_state``: one untraced step first
            creates the optimizer states).

    Returns:
        A :class:`helpers.record.StepProfile`, shared with later calls of the same simulated step
        (:data:`KEPT`): read it, do not change it.

    Raises:
        ValueError: in one line, for a bad option, an unknown model, a model that cannot be checkpointed, or an input
            or loss that does not fit the model.
        DoesNotFit: if the step runs out of memory (on a GPU, memory is released first).
    """
    config = step_config(model, batch_size, image_size, "profile_step", **options)
    if config.frozen:
        raise ValueError("frozen=True is a model served, not trained: profile_step traces a training step (see "
                         "helpers.generation.generation_memory and helpers.serving.vllm_startup)")
    key = _kept_key(config)
    with STEPS:
        kept = recall(key)
        return kept if kept is not None else keep(key, obtain(config))


# -- the one decision -------------------------------------------------------------------------------
def obtain(config: StepConfig, spec: ModelSpec | None = None, evaluate: bool = True) -> StepProfile:
    """``config``'s profile, obtained the one way that applies (the module's list, tried in its order); its
    ``depth_note`` says which.  ``evaluate=False``: never from a symbolic log (:func:`obtain_concrete`).

    Raises:
        ValueError, DoesNotFit: as :func:`profile_step`.
    """
    with STEPS:  # one step at a time in the process
        spec = spec if spec is not None else resolve_model(config.model, config.num_classes, config.name)
        evaluable = evaluate and _kept_key(config) is not None  # an answer that may be kept
        if evaluable:  # 1. evaluated: from a kept symbolic log, or one traced now where it repays
            many = _MANY[0] > 0
            answer = evaluated.answer(config, spec, many=many, new_traces=EVALUATE or many)
            if answer is not None:
                return answer
        with collector_paused():  # also while the step is written
            written, note = depth.write(config, spec)  # 2. written from two shallow traces; else the note says why not
            if written is not None:
                profile = profile_of_log(written.log, written.storages, written.markers, written.like, config=config,
                                         model=spec.name, parameter_count=written.parameter_count,
                                         paged_bytes=written.paged_bytes, depth_note=f"written exactly from its steps "
                                         f"with {depth.DEPTHS[0]} and {depth.DEPTHS[1]} blocks (helpers.depth)")
        if written is None:  # 3. traced in full
            profile = _traced(config, spec, note)
        return evaluated.remember(config, profile) if evaluable else profile


_MANY = [0]  # how many many_points() blocks are open


@contextlib.contextmanager
def many_points():
    """Within it, the caller will ask many points (batch sizes, sequence lengths) of one configuration: a search, a
    sweep, the command line given several batch sizes (a search of about four sizes is not repaid:
    :func:`helpers.batch.largest_fit`).  :func:`obtain` then makes symbolic traces whatever
    :data:`EVALUATE` says, and :func:`helpers.evaluated.answer` traces a configuration symbolically at its second
    point instead of its third (:data:`helpers.evaluated.AT_POINT_WHEN_MANY`), so that the later points are
    evaluated; nothing else changes, and an answer is the same either way (each log is checked equal to a concrete
    answer before it answers).  Lesson 09b (section 1) asks its QLoRA step at five sequence lengths inside it: one
    symbolic trace instead of four concrete ones (``benchmarks/lesson_cells.py``)."""
    _MANY[0] += 1
    try:
        yield
    finally:
        _MANY[0] -= 1


def concrete_step(config: StepConfig) -> StepProfile:
    """``config``'s profile traced or written concretely, never evaluated from a symbolic log: the kept answer
    (:data:`KEPT`) where it was obtained so, else :func:`obtain_concrete` (not kept): what confirms a search's answer.

    Raises:
        ValueError, DoesNotFit: as :func:`profile_step`.
    """
    with STEPS:
        kept = recall(_kept_key(config))
        if kept is not None and not evaluated.was_evaluated(kept):
            return kept
        return obtain_concrete(config)


def obtain_concrete(config: StepConfig, spec: ModelSpec | None = None) -> StepProfile:
    """``config``'s profile written from shallow traces or traced in full, whichever applies (the module's list),
    never evaluated from a symbolic log: what an evaluation is checked against (:func:`obtain` with
    ``evaluate=False``).

    Raises:
        ValueError, DoesNotFit: as :func:`profile_step`.
    """
    return obtain(config, spec, evaluate=False)


def _traced(config: StepConfig, spec: ModelSpec, note: str | None) -> StepProfile:
    """``config``'s step traced in full, its ``depth_note`` set to ``note``.

    Raises:
        DoesNotFit: if it runs out of memory; its tensors are freed, and on a GPU the cache emptied, first.
    """
    runner = StepRunner(config, spec=spec)
    name, meter = runner.name, runner.meter
    try:
        with meter:
            return dataclasses.replace(traced.trace(runner), depth_note=note)
    except torch.OutOfMemoryError as e:
        oom = first_line(e)
        requested, allocated = getattr(e, "requested", None), getattr(e, "allocated", None)
    # Out of memory: the exception and its frames are gone now; drop the runner
    # (the model, its optimizer) too, so that the step's tensors are freed and
    # the allocator's cache can be returned to the driver.
    del runner
    meter.release()
    error = DoesNotFit(f"{name} at batch size {config.batch_size} does not fit: {oom}")
    error.cuda_message, error.requested, error.allocated = oom, requested, allocated
    raise error


# -- the one cache of kept answers ---------------------------------------------------------------------
#: Whether :func:`obtain` may make a symbolic trace for any question (:mod:`helpers.evaluated`: at a configuration's
#: third point, or its second where a log of it is on disk); inside :func:`many_points` (the command line) it does whatever this says.  Either way a log already kept (made inside :func:`many_points`, or on disk)
#: answers every question it holds for, which costs less than a concrete answer.  Off: the evaluation is exact where it is kept (it is checked against a concrete answer first), but the
#: lessons ask few points of each configuration, and a symbolic trace costs two (a CNN) to four (an 8B written step)
#: concrete ones, so it is not repaid on a first run, when no log is on disk yet (CI's every run).  Measured by
#: ``benchmarks/evaluate_lessons.py`` (kernel CPU seconds on the shared 2-core machine, off -> on with no log on disk,
#: no compared output changed): with the rule of :data:`helpers.evaluated.AT_POINT`, lesson 09 244 -> 299 s, 01
#: 93 -> 100 s; before that rule (the symbolic trace at the second point), 09 222 -> 322 s, 01 53 -> 59 s, 08
#: 50 -> 50 s (issue 50).  Set ``helpers.profile.EVALUATE = True`` to use it everywhere.
EVALUATE = False
#: One question at a time in a process.  A widget's work after it has answered (a search's confirming traces, on a
#: thread: :mod:`helpers.teaching.widgets.background`) and the learner's next cell may ask for steps from two threads,
#: while the profile layer, the symbolic logs and the engine keep process-wide state during a step (the kept answers
#: below and in :mod:`helpers.evaluated`, autocast's and ``torch.compile``'s stand-ins, the cycle collector paused):
#: :func:`profile_step`, :func:`concrete_step`, :func:`obtain` and vLLM's profile runs (:mod:`helpers.serving`) each
#: hold this lock, and a thread that asks meanwhile waits for the step in progress.
STEPS = threading.RLock()
#: How many answers a process keeps, the least recently used dropped first (an 8B step's profile is about 20 MiB):
#: a widget's search, or a later cell, that asks for a step again gets it at once.  Keys are tuples whose first item
#: names the question: ``("profile_step", config)``, ``("vllm profile run", ...)`` (:mod:`helpers.serving`).
KEPT = 16
_KEPT: collections.OrderedDict[Hashable, Any] = collections.OrderedDict()
#: Option values that name the same step every time they are given: a Hugging Face config dict of JSON values is one
#: once :class:`helpers.config.StepConfig` has made it a read-only copy (:class:`helpers.hf_config.FrozenDict`).
_PLAIN = (str, int, float, bool, type(None), torch.dtype, FrozenDict)


def recall(key: Hashable | None) -> Any:
    """The answer kept under ``key`` (made the most recently used), or None (always None for a None key)."""
    if key is None or key not in _KEPT:
        return None
    _KEPT.move_to_end(key)
    return _KEPT[key]


def keep(key: Hashable | None, answer: Any) -> Any:
    """Keep ``answer`` under ``key`` (a None key keeps nothing), dropping the least recently used beyond
    :data:`KEPT`; return ``answer``."""
    if key is not None:
        _KEPT[key] = answer
        while len(_KEPT) > KEPT:
            _KEPT.popitem(last=False)
    return answer


def forget_kept() -> None:
    """Forget every kept answer (:data:`KEPT`): profiles and vLLM profile runs, and the symbolic logs
    (:func:`helpers.evaluated.forget_kept`); the next call of each traces again."""
    _KEPT.clear()
    evaluated.forget_kept()


def _kept_key(config: StepConfig) -> tuple[str, StepConfig] | None:
    """``("profile_step", config)``, if its profile may be kept: a simulated step whose options are plain values
    (a config dict among them, read-only: :func:`helpers.hf_config.frozen_config`), tuples of them, or functions and
    frozen dataclasses of ``helpers`` (a published setup's loss); None for a real GPU, a learner's ``nn.Module`` or
    function, a ``PretrainedConfig`` or a config dict holding other values, or a model read from a file, which may
    change between two calls."""
    def plain(value) -> bool:
        if isinstance(value, tuple):
            return all(map(plain, value))
        if isinstance(value, types.FunctionType) or (dataclasses.is_dataclass(value)
                                                      and value.__dataclass_params__.frozen):
            return value.__module__.startswith("helpers.")
        return isinstance(value, _PLAIN)

    model = config.model
    if isinstance(model, str) and (":" in model or model.endswith((".py", ".json")) or os.path.exists(model)):
        return None
    simulated = config.device == "simulated" or (config.device == "auto" and resolve_backend("auto") == "simulated")
    if not simulated or not all(plain(getattr(config, f.name)) for f in dataclasses.fields(config)):
        return None
    return "profile_step", config


# -- the step timed ---------------------------------------------------------------------------------
def time_step(model="resnet18", batch_size: int = 128, image_size: int = 224, repeats: int = 3,
              **options) -> float:
    """Wall time of one training step, untraced, in seconds: the median of ``repeats``.

    :func:`profile_step`'s step, run once to warm up, then ``repeats`` times without tracer or tracker, each between
    two ``torch.cuda.synchronize()`` on a GPU.  Simulated, it times the fake-tensor step with its storage tracker, which
    applies the CUDA rules (the simulation's speed).

    Raises:
        ValueError: as :func:`profile_step` does.
        torch.OutOfMemoryError: if the step does not fit on the GPU.
    """
    check_int("repeats", repeats, 1)
    config = step_config(model, batch_size, image_size, "time_step", **options)
    meter = Meter(config.device, config.capacity, attention=config.attention, count_storages=False,
                  workspaces=config.workspaces)
    meter.count_storages = meter.backend == "simulated"  # the simulated GPU's CUDA rules (bitsandbytes' too) run there
    runner, times = StepRunner(config, meter), []
    with meter:
        runner.place()
        for i in range(repeats + 1):
            meter.synchronize()
            start = time.perf_counter()
            runner.run()
            meter.synchronize()
            if i:  # the first is the warm-up
                times.append(time.perf_counter() - start)
    return statistics.median(times)
