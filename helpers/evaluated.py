"""Answers from kept symbolic logs: the first question of a configuration traced concretely, the later ones evaluated
from one symbolic trace of it (:mod:`helpers.symbolic`), once that has been checked against a concrete answer.

:func:`answer` is what the profile layer asks for a simulated step whose options are plain values: it keeps, per
configuration without its batch size and sequence length (:func:`helpers.symbolic.key`), the symbolic logs traced so
far (one per regime or side of a guard), the last concrete answer, and why a configuration is refused, if it is.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable

from . import models
from .config import StepConfig
from .record import StepProfile
from .symbolic import NotSymbolic, SymbolicStep, key, trace


#: How many configurations' symbolic logs a process keeps (:func:`answer`), the least recently used dropped first.
KEPT = 8
_KEPT: collections.OrderedDict = collections.OrderedDict()


def answer(config: StepConfig, spec: models.ModelSpec, concrete: Callable[[], StepProfile],
           trace_step: Callable) -> StepProfile:
    """``config``'s profile, evaluated from a kept symbolic log of its configuration (:func:`helpers.symbolic.key`) where one holds, else
    ``concrete()`` (traced, or written from shallow traces, as without this module).

    The first question of a configuration is answered concretely, no slower than without symbolic logs.  At a later
    one outside every kept log (the first, another regime, the other side of a guard) the step is traced symbolically
    there and kept only once its evaluation equals a concrete answer in every field (:func:`differs`): the last one,
    or one at this point.  A configuration that cannot be traced so (:class:`helpers.symbolic.NotSymbolic`), or whose evaluation
    differs, is answered concretely from then on, its profile's ``depth_note`` saying why.  ``trace_step``: the
    profile layer's trace function (:func:`helpers.profile.trace`), passed to :func:`helpers.symbolic.trace`.
    """
    k = key(config)
    kept = _KEPT.pop(k, None) or {"steps": [], "checked": None, "refused": None}
    _KEPT[k] = kept
    while len(_KEPT) > KEPT:
        _KEPT.popitem(last=False)
    for step in kept["steps"]:
        if step.outside(config) is None:
            return step.evaluate(config)
    step = None
    if kept["refused"] is None and kept["checked"] is not None:
        try:
            step = trace(config, trace_step, spec)
        except NotSymbolic as e:
            kept["refused"] = str(e)
    last = kept["checked"]
    if step is not None and step.outside(last.config) is None:
        if _checked(kept, step, last):
            return step.evaluate(config)
        step = None
    profile = kept["checked"] = concrete()
    if step is not None:
        _checked(kept, step, profile)
    if kept["refused"] is not None:
        note = f"not evaluated from a symbolic log: {kept['refused']}"
        return dataclasses.replace(profile, depth_note=f"{profile.depth_note}; {note}" if profile.depth_note else note)
    return profile


def _checked(kept: dict, step: SymbolicStep, profile: StepProfile) -> bool:
    """Keep ``step`` in ``kept`` if its evaluation equals the concrete ``profile``; else refuse the configuration."""
    field = differs(step.evaluate(profile.config), profile)
    if field is None:
        kept["steps"].append(step)
    else:
        kept["refused"] = f"its evaluation differs from a concrete trace in {field}"
    return field is None


def forget_kept() -> None:
    """Forget the kept symbolic logs (:func:`answer`)."""
    _KEPT.clear()


#: The fields of a profile that :func:`differs` compares (all but ``depth_note``, which says how it was made; the
#: allocator's replay is a function of ``allocation_log``).
COMPARED = ("backend", "model", "config", "input_shape", "parameter_count", "events", "event_categories",
            "peak_allocated_bytes", "peak_event", "categories", "reserved_bytes", "params_without_grad",
            "peak_allocation", "storages", "peak_serials", "paged_bytes", "allocation_log", "cudnn_bound_bytes",
            "cudnn_missing")


def differs(evaluated: StepProfile, concrete: StepProfile) -> str | None:
    """The first field of :data:`COMPARED` in which two profiles of one step differ, or None where they are equal:
    an evaluated profile is kept only once it equals a concrete one."""
    return next((name for name in COMPARED if getattr(evaluated, name) != getattr(concrete, name)), None)
