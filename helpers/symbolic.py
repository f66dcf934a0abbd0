"""Trace once, answer every batch and sequence length: a training step as a symbolic allocation log.

The order of a step's allocation log does not depend on the batch size B or the sequence length S, and its sizes are
polynomials in them.  So the step is traced once with B (and, for token inputs, S) as symbolic sizes: a
``FakeTensorMode`` with a ``ShapeEnv(duck_shape=False)`` (``torch/fx/experimental/symbolic_shapes.py``), each size a
symbol made with ``ShapeEnv.create_symbol`` and bounded to ``[2, 2**31 - 1]`` with ``constrain_symbol_range``, fed to
the one step runner as its batch's sizes (:class:`helpers.step.StepRunner`'s ``sizes``), and traced as every step is
(:mod:`helpers.traced`; a deep model written from two shallow steps, :func:`helpers.depth.write`).  Every storage's
``untyped_storage().nbytes()`` is then an expression such as ``16*B*S**2``;
:class:`helpers.symbolic_sizes.SymbolicTracker` logs each change as ``(serial, kind, expression)`` and compares no
sizes (a comparison of symbolic sizes records a guard).

:meth:`SymbolicStep.evaluate` substitutes a concrete (B, S) into the log and reads it as a written step is read
(:func:`helpers.written.profile_of_log`'s replay, done as sums by a :class:`helpers.written.NumberedLog` made once per
log): the peak, its event and allocation, the categories, the events and every storage are what a concrete trace
gives (``tests/test_symbolic.py`` and ``tests/test_symbolic_equality.py`` check it field by field).

Where the log holds (:meth:`SymbolicStep.outside`): each symbol in its range, and every guard that the trace recorded
true at the point.  Python or C++ code that branches on a size records a guard (``ShapeEnv.guards``), so a point where
the guards hold takes the traced branches.  Code that branches without a guard (``applySlice`` in
``ATen/TensorIndexing.h`` keeps identity slices of an unbounded size; a size of 1 is specialized) is kept out by the
bounds: B = 1 (or S = 1) is its own program, traced as its own regime with that size fixed.  Canonical expressions
(``sympy.expand``) make equal sizes equal, as :mod:`helpers.depth` needs to write a deep model from shallow logs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from dataclasses import dataclass

import sympy

from . import depth, models, traced
from .config import StepConfig
from .engine.backends import collector_paused
from .engine.workspaces import workspace_bound
from .errors import first_line
from .plain_step import FUNCTIONS, evaluated_note
from .record import StepProfile
from .shallow import traced_log
from .symbolic_scope import applies, key
from .symbolic_sizes import HIGH, LOW, NotSymbolic, SymbolicRecord, Symbols
from .written import NumberedLog, numbered_log, profile_of_log

__all__ = ["HIGH", "LOW", "NotSymbolic", "SymbolicStep", "applies", "dimensions", "key", "trace"]


def dimensions(config: StepConfig, spec: models.ModelSpec) -> dict[str, int]:
    """The sizes a symbolic trace makes symbols of, at ``config``'s point: ``{"B": batch}``, and ``"S"``, the
    sequence length, for token inputs.

    Raises:
        NotSymbolic: for inputs made by a function (``inputs=``), whose sizes are the learner's.
    """
    task = models.resolve_task(config, spec)
    if task.inputs == "custom":
        raise NotSymbolic("its inputs are made by a function (inputs=), not by a batch size")
    sizes = {"B": config.batch_size}
    if task.inputs == "tokens":
        sizes["S"] = task.sample_shape[0]
    return sizes


@dataclass
class SymbolicStep:
    """One step traced with symbolic sizes (:func:`trace`), evaluated at any point where its log holds.

    Attributes:
        config, spec: the step traced (at the point of its hints) and its model.
        fixed: the sizes fixed at 1 in this regime (``("B",)`` for batch 1), the others symbols.
        symbols: name (``"B"``, ``"S"``) -> the ``ShapeEnv``'s sympy symbol.
        ranges: name -> ``(low, high)``, each symbol's range after the trace (``ShapeEnv.var_to_range``: the bounds
            given, narrowed by what the guards imply).
        log, storages, markers: :func:`helpers.written.profile_of_log`'s input, bytes and shapes as expressions.
        like: a profile holding the fields that do not depend on the sizes.
        guards: the guards the trace recorded (sympy relations): the log holds where all are true.
        how: how the log was made (the profile's ``depth_note`` says it).
        conv_bytes: each 2-D convolution pass's input + weight + output bytes (:class:`SymbolicRecord`).
    """

    config: StepConfig
    spec: models.ModelSpec
    fixed: tuple[str, ...]
    symbols: dict
    ranges: dict
    log: tuple
    storages: tuple
    markers: tuple
    like: StepProfile
    guards: tuple
    how: str
    conv_bytes: tuple = ()
    _index: dict | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _constants: list = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _numbered: tuple = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _negated: dict = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _read: NumberedLog | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _function: object = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _checked: bool = dataclasses.field(default=False, init=False, repr=False, compare=False)

    def _named(self, expr):
        """``expr`` with its symbols named B and S."""
        return expr.xreplace({sym: sympy.Symbol(name) for name, sym in self.symbols.items()})

    def guards_named(self) -> list[str]:
        """The guards, their symbols named B and S (``["B < 16"]``)."""
        return [str(self._named(g)) for g in self.guards]

    def _prepare(self) -> None:
        """Number every expression of the log, the storages, the events, the input shape and the convolutions once
        (:attr:`_index`), then every int of the log, the storages and the events (:attr:`_constants`, their values),
        so that a point's values are read by position: the log, storages and markers so numbered (:attr:`_numbered`),
        read as a :class:`helpers.written.NumberedLog` where they are one (:attr:`_read`); compile the expressions
        into one function (:func:`_compiled`)."""
        index, ints = {}, {}
        for x in (*(d for _, _, d in self.log), *(x for _, _, shape, nbytes in self.storages for x in (nbytes, *shape)),
                  *self.like.input_shape, *self.conv_bytes,
                  *(x for _, _, p in self.markers if p is not None and p[4] is not None for x in p[4])):
            if type(x) is not int:
                index.setdefault(x, len(index))

        def number(x) -> int:
            return ints.setdefault(x, len(index) + len(ints)) if type(x) is int else index[x]

        log = [(serial, kind, number(delta)) for serial, kind, delta in self.log]
        storages = [(category, dtype, tuple(map(number, shape)), number(nbytes))
                    for category, dtype, shape, nbytes in self.storages]
        markers = tuple((pos, kind, p if p is None or p[4] is None else (*p[:4], tuple(map(number, p[4]))))
                        for pos, kind, p in self.markers)
        every = [*index, *ints]
        negated = {n: (ints if type(every[n]) is int else index).get(-every[n]) for _, _, _, n in storages}
        self._index, self._constants, self._numbered = index, list(ints), (log, storages, markers)
        self._negated = negated
        self._read = numbered_log(log, storages, markers, {n: v for v, n in ints.items()}, negated)
        self._function = _compiled(list(index), list(self.symbols.values()))

    def numbered(self) -> tuple[list, list, tuple, dict]:
        """The log by numbers (:meth:`_prepare`): the expressions, each numbered by its position; the constants' values,
        numbered after them; the numbered ``(log, storages, markers)``; and the number of each storage's bytes -> the
        number of their negation (None where it has none).  What :mod:`helpers.plain_log` writes in plain values."""
        if self._index is None:
            self._prepare()
        return list(self._index), list(self._constants), self._numbered, dict(self._negated)

    def _values(self, point: tuple) -> list[int]:
        """Every expression's int value at ``point`` (the symbols' values, in :attr:`symbols`' order), by its number
        (:meth:`_prepare`): the compiled function, checked against sympy's own substitution at its first point; else
        each expression substituted."""
        if self._index is None:
            self._prepare()
        by_name = dict(zip(self.symbols.values(), point))
        exact = None
        if self._function is not None:
            try:
                got = [int(v) for v in self._function(*point)]
            except (NameError, TypeError, ValueError):
                got = None
            if got is not None and not self._checked:
                exact = [int(e.xreplace(by_name)) for e in self._index]
                self._checked = got == exact
            if got is not None and self._checked:
                return got
            self._function = None
        return exact or [int(e.xreplace(by_name)) for e in self._index]

    def outside(self, config: StepConfig) -> str | None:
        """Why the log does not hold at ``config``'s point, or None where it does: another configuration, another
        regime (a size of 1), a size out of range, or a guard false there."""
        if key(config) != key(self.config):
            return "another configuration than the one traced"
        sizes = dimensions(config, self.spec)
        fixed = tuple(name for name, v in sizes.items() if v == 1)
        if fixed != self.fixed:
            return f"{' and '.join(fixed or self.fixed)} = 1 is its own program (another regime)"
        for name, (low, high) in self.ranges.items():
            if not low <= sizes[name] <= high:
                return f"{name} = {sizes[name]} is outside the range [{low}, {high}] where the log holds"
        point = {self.symbols[n]: v for n, v in sizes.items() if n in self.symbols}
        for guard in self.guards:
            if not bool(guard.xreplace(point)):
                return f"the guard {self._named(guard)} that the symbolic trace recorded is false there"
        return None

    def evaluate(self, config: StepConfig) -> StepProfile:
        """The :class:`helpers.record.StepProfile` of ``config`` (this step at another batch and sequence length),
        read from the log evaluated there: what a concrete trace gives.

        Raises:
            NotSymbolic: where the log does not hold (:meth:`outside`).
        """
        why = self.outside(config)
        if why is not None:
            raise NotSymbolic(why)
        with _not_collecting():
            return self._evaluated(config)

    def _evaluated(self, config: StepConfig) -> StepProfile:
        """:meth:`evaluate` at a point where the log holds: the numbered log read there (:attr:`_read`), else each
        value put in and the log replayed (:func:`helpers.written.profile_of_log`)."""
        sizes = dimensions(config, self.spec)
        values = self._values(tuple(sizes[n] for n in self.symbols)) + self._constants
        index = self._index

        def value(x):
            return x if type(x) is int else values[index[x]]

        like = dataclasses.replace(self.like, config=config, input_shape=tuple(map(value, self.like.input_shape)),
                                   cudnn_bound_bytes=max((workspace_bound(value(n)) for n in self.conv_bytes),
                                                         default=None))
        note = evaluated_note(self.how, sizes)
        profile = None if self._read is None else self._read.profile(values, like, depth_note=note)
        if profile is not None:
            return profile
        log, storages, markers = self._numbered
        at_point = values.__getitem__
        return profile_of_log([(serial, kind, values[n]) for serial, kind, n in log],
                              [(category, dtype, tuple(map(at_point, shape)), values[n])
                               for category, dtype, shape, n in storages],
                              [(pos, kind, p if p is None or p[4] is None else (*p[:4], tuple(map(at_point, p[4]))))
                               for pos, kind, p in markers], like, depth_note=note)


@contextlib.contextmanager
def _not_collecting():
    """Python's cyclic garbage collector off, then as it was: an evaluation makes some 100,000 objects, none in a
    cycle, and each full collection it triggers walks every object of the process (a symbolic 8B step's log among
    them), which made one point in three take 0.7 s instead of 0.17 s (``gc`` in Python's documentation)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _compiled(expressions: list, symbols: list):
    """One Python function of the symbols' values giving every expression's value (``sympy.lambdify``), or None where
    an expression has a coefficient that is not an integer (Python's ``/`` would make it a float)."""
    if any(not r.is_Integer for e in expressions for r in e.atoms(sympy.Rational)):
        return None
    try:
        return sympy.lambdify(symbols, expressions, modules=[dict(FUNCTIONS), "math"])
    except (TypeError, NameError, SyntaxError):
        return None


def trace(config: StepConfig, spec: models.ModelSpec | None = None) -> SymbolicStep:
    """``config``'s step traced once with its batch size (and sequence length) as symbols, in the regime of its point
    (a size of 1 fixed); a model of alike blocks written from two shallow symbolic traces (:func:`helpers.depth.write`),
    any other traced whole (:func:`helpers.traced.symbolic_step`).

    Raises:
        NotSymbolic: where it cannot be (:func:`applies`, :func:`dimensions`), or the trace fails (a resize in place,
            an operation that needs concrete sizes); the message says why.
    """
    from torch._dynamo.source import ConstantSource
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    why = applies(config)
    if why is not None:
        raise NotSymbolic(why)
    spec = spec if spec is not None else models.resolve_model(config.model, config.num_classes, config.name)
    sizes = dimensions(config, spec)
    env, symbols, values = ShapeEnv(duck_shape=False), {}, []
    for name, hint in sizes.items():
        if hint == 1:
            values.append(1)
            continue
        symbols[name] = env.create_symbol(hint, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC)
        env.constrain_symbol_range(symbols[name], LOW, HIGH)
        values.append(env.create_symintnode(symbols[name], hint=hint))
    try:
        with collector_paused():
            triple, like, how, conv_bytes = _traced(config, spec, Symbols(env, tuple(values)))
    except NotSymbolic:
        raise
    except Exception as e:  # an operation that needs concrete sizes: say which, in one line
        raise NotSymbolic(f"the symbolic trace failed: {type(e).__name__}: {first_line(e)}") from None
    fixed = tuple(name for name, v in sizes.items() if v == 1)
    guards = tuple(dict.fromkeys(sympy.expand(g.expr) for g in env.guards))
    ranges = {name: (int(env.var_to_range[sym].lower), int(env.var_to_range[sym].upper))
              for name, sym in symbols.items()}
    return SymbolicStep(config, spec, fixed, symbols, ranges, *triple, like, guards, how, conv_bytes)


def _traced(config: StepConfig, spec: models.ModelSpec, symbols: Symbols) -> tuple[tuple, StepProfile, str, tuple]:
    """``(log, storages, markers)`` of the symbolic step, a profile holding its other fields, how it was made, and its
    convolution passes' bytes (:attr:`helpers.symbolic_sizes.SymbolicRecord.conv_bytes`)."""
    written, note = depth.write(config, spec, symbols)
    if written is not None:
        like = _like(written.like, spec.name, parameter_count=written.parameter_count,
                     paged_bytes=written.paged_bytes)
        return (written.log, written.storages, written.markers), like, (
            f"written exactly from its steps with {depth.DEPTHS[0]} and {depth.DEPTHS[1]} blocks "
            f"(helpers.depth), traced once with symbolic sizes"), written.like.conv_bytes
    rec, tracker = traced.symbolic_step(config, spec, symbols)
    how = "traced once with symbolic sizes" + (f" ({note})" if note else "")
    return traced_log(rec, tracker.markers), _like(rec, spec.name), how, rec.conv_bytes


def _like(rec: SymbolicRecord, model: str, **fields) -> StepProfile:
    """A profile holding what ``rec`` knows that does not depend on the sizes (the rest is the replay's)."""
    values = dict(backend="simulated", model=model, config=rec.config, input_shape=rec.input_shape,
                  parameter_count=rec.parameter_count, events=[], event_categories=[], peak_allocated_bytes=0,
                  peak_event=0, categories={}, reserved_bytes=None, params_without_grad=list(rec.params_without_grad),
                  paged_bytes=rec.paged_bytes)
    values.update(fields)
    return StepProfile(**values)
