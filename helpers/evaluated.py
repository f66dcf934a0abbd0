"""Answers from kept symbolic logs: the first question of a configuration traced concretely, the later ones evaluated
from one symbolic trace of it (:mod:`helpers.symbolic`), once that has been checked against a concrete answer.

:func:`answer` is what the profile layer asks first for a simulated step whose options are plain values; where it
gives none, the profile layer obtains the answer concretely and hands it to :func:`remember`.  Per configuration
without its batch size and sequence length (:func:`helpers.symbolic.key`), the two keep the symbolic logs
traced so far (one per regime or side of a guard), the last concrete answer, a log traced at a point whose concrete
answer it waits for, and why a configuration is refused, if it is.
"""

from __future__ import annotations

import collections
import dataclasses
import operator
import weakref

from . import models, symbolic, symbolic_store
from .config import StepConfig
from .engine.event import Event
from .record import StepProfile
from .symbolic import NotSymbolic, SymbolicStep, key, trace
from .written import _LiveAt


#: How many configurations' symbolic logs a process keeps (:func:`answer`), the least recently used dropped first.
KEPT = 8
_KEPT: collections.OrderedDict = collections.OrderedDict()
#: The rule of when a configuration is traced symbolically (:func:`answer`), in the distinct points (batch, sequence)
#: it has been asked at, this one included.  Measured on the shared 2-core machine (CPU seconds, loaded; issue 50),
#: Llama-3.1 8B LoRA, steady state, checkpointing, at (2, 2,048): a concrete (written) step 6.7 s, its symbolic trace
#: 26.2 s (about four concrete ones; a CNN's about two), a point evaluated 0.14-0.23 s, the log read back from disk
#: 0.48 s (:mod:`helpers.symbolic_store`, 0.9 MB).  Traced at the ``k``-th point, ``n`` points cost about
#: ``(k + 3)`` concrete steps instead of ``n``: a configuration asked at few points is faster concrete, one asked at
#: many, or again in a later process (its log on disk), is faster evaluated.  So a single question is answered
#: concretely, as without symbolic logs; the trace is made at the third point, or at the second where the caller says
#: it will ask many (:func:`helpers.profile.many_points`: the command line given several batch sizes)
#: or where the configuration has a log on disk already (another regime of it).  A rule of 1 traces every
#: configuration at its first point and checks the log against that point's own concrete answer (:func:`remember`):
#: how ``tools/ship_symbolic_logs.py`` makes the logs shipped with the package.
AT_POINT, AT_POINT_WHEN_MANY = 3, 2
#: The profiles :func:`answer` evaluated, by ``id`` (:func:`was_evaluated`).
_EVALUATED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def answer(config: StepConfig, spec: models.ModelSpec, many: bool = False,
           new_traces: bool = True) -> StepProfile | None:
    """``config``'s profile evaluated from a symbolic log of its configuration (:func:`helpers.symbolic.key`)
    where one holds, kept in this process or on disk (:mod:`helpers.symbolic_store`); else None: the caller then
    obtains it concretely (traced, or written from shallow traces, as without this module) and hands it to
    :func:`remember`.

    A log on disk is loaded once per configuration and process, without tracing.  Else the first questions of a
    configuration are answered concretely, no slower than without symbolic logs; at the :data:`AT_POINT`-th distinct
    point (:data:`AT_POINT_WHEN_MANY`-th where ``many``: the caller will ask many points; or where the configuration
    has a log on disk that does not hold here) that no kept log holds (another regime, the other side of a guard) the
    step is traced symbolically here (:func:`helpers.symbolic.trace`).  Where that log holds at the last point
    answered concretely, it is checked against that answer in every field (:func:`differs`) and, equal, kept and
    evaluated here: no concrete trace is made at this point.  Else it waits for this point's concrete answer
    (:func:`remember`).  A log so checked is also written to disk.  A configuration that cannot be traced so
    (:class:`helpers.symbolic.NotSymbolic`), or whose evaluation differs, is answered concretely from then on.
    ``new_traces=False``: no symbolic trace is made, only the logs already kept (in the process or on disk) are used:
    an answer then costs what a concrete one does, or less.  A step that cannot be traced with symbolic sizes at all
    (:func:`helpers.symbolic.applies`: a real GPU, ``capacity=``, ``full_trace=``, ``workspaces=``) gets None, and
    nothing is kept of it.
    """
    if symbolic.applies(config) is not None:
        return None
    k = key(config)
    kept = _KEPT.pop(k, None) or {"steps": None, "disk": False, "checked": None, "refused": None, "points": set(),
                                  "waiting": None}
    _KEPT[k] = kept
    while len(_KEPT) > KEPT:
        _KEPT.popitem(last=False)
    if kept["steps"] is None:  # the logs on disk, read once
        kept["steps"] = symbolic_store.load(config, spec)
        kept["disk"] = bool(kept["steps"])
    step, kept["waiting"] = next((s for s in kept["steps"] if s.outside(config) is None), None), None
    if step is None:
        kept["points"].add((config.batch_size, config.seq_len))
        due = new_traces and len(kept["points"]) >= (AT_POINT_WHEN_MANY if many or kept["disk"] else AT_POINT)
        if due and kept["refused"] is None:
            try:
                step = trace(config, spec)
            except NotSymbolic as e:
                kept["refused"] = str(e)
        if step is None or kept["checked"] is None or step.outside(kept["checked"].config) is not None:
            kept["waiting"] = step  # checked against this point's concrete answer (remember)
            return None
        if not _checked(kept, step, kept["checked"]):
            return None
    profile = step.evaluate(config)
    _EVALUATED[id(profile)] = profile
    return profile


def remember(config: StepConfig, profile: StepProfile) -> StepProfile:
    """``profile``, ``config``'s concrete answer where :func:`answer` gave none, kept as its configuration's last
    concrete answer; a symbolic log traced at this point (:func:`answer`) kept if its evaluation equals it; its
    ``depth_note`` then says why the configuration is not evaluated from a symbolic log, if it is refused.  A
    configuration :func:`answer` keeps nothing of (one that cannot be traced with symbolic sizes, or dropped since:
    :data:`KEPT`) is given back as it is."""
    kept = _KEPT.get(key(config))
    if kept is None:
        return profile
    kept["checked"], step, kept["waiting"] = profile, kept["waiting"], None
    if step is not None:
        _checked(kept, step, profile)
    if kept["refused"] is not None:
        note = f"not evaluated from a symbolic log: {kept['refused']}"
        return dataclasses.replace(profile, depth_note=f"{profile.depth_note}; {note}" if profile.depth_note else note)
    return profile


def was_evaluated(profile: StepProfile) -> bool:
    """Whether :func:`answer` evaluated ``profile`` from a symbolic log (else it was traced or written concretely)."""
    return _EVALUATED.get(id(profile)) is profile


def _checked(kept: dict, step: SymbolicStep, profile: StepProfile) -> bool:
    """Keep ``step`` in ``kept`` if its evaluation equals the concrete ``profile``; else refuse the configuration."""
    field = differs(step.evaluate(profile.config), profile)
    if field is None:
        kept["steps"].append(step)
        symbolic_store.save(profile.config, kept["steps"])
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
    an evaluated profile is kept only once it equals a concrete one.  The verdict of ``!=`` on each field; the events
    compared as :func:`_same_events` compares them, which gives ``==``'s verdict faster."""
    return next((name for name in COMPARED if not (_same_events if name == "events" else operator.eq)(
        getattr(evaluated, name), getattr(concrete, name))), None)


#: An :class:`helpers.engine.event.Event`'s fields but ``live``, in the order its ``==`` compares them.
_BUT_LIVE = operator.attrgetter(*[f.name for f in dataclasses.fields(Event) if f.name != "live"])


def _same_events(a, b) -> bool:
    """``a == b`` for two lists of events, without reading a written step's live storages one by one.

    ``==`` of two :class:`helpers.engine.event.Event` compares their fields as a tuple, ``live`` among them; where
    ``live`` is a :class:`helpers.written._LiveAt` (a written or evaluated step's, worked out when read), its ``==``
    compares its tuple with ``tuple(other)``, which reads the other's storages one ``__getitem__`` at a time: 12,826
    events of some 2,000 serials took LLaMA 65B's comparison 17 s.  Here each ``live`` that is a tuple or a
    ``_LiveAt`` is read whole (``[:]``, the tuple itself), the same values ``==`` compares; the other fields are
    compared as ``==`` compares them.  Anything else (not two lists, an item not exactly an ``Event``, a ``live`` of
    another type) is compared with ``==`` itself."""
    if type(a) is not list or type(b) is not list:
        return a == b
    if len(a) != len(b):
        return False
    for e, f in zip(a, b):
        if e is f:  # as list's == does
            continue
        if type(e) is not Event or type(f) is not Event:
            if not e == f:
                return False
            continue
        x, y = e.live, f.live
        if not (type(x) in (tuple, _LiveAt) and type(y) in (tuple, _LiveAt)):
            if e != f:
                return False
            continue
        if _BUT_LIVE(e) != _BUT_LIVE(f) or not (x is y or x[:] == y[:]):
            return False
    return True
