"""A checked symbolic log written again in plain values (:mod:`helpers.plain_step` reads it without torch or sympy): the
file the command line's cold answer reads (:mod:`helpers.cli_cold`, issue 50).

:func:`write` is called by :func:`helpers.symbolic_store.save` once a configuration's symbolic steps are checked equal
to a concrete answer. For a shipped Hugging Face config (:func:`helpers.hf_config.shipped_json`, the only models the
cold answer resolves without ``transformers``) it writes, beside the pickle and named by the same hash, a JSON file of
every regime that has a plain form (:func:`plain`): each size expression an integer polynomial in the symbols and in the
calls it holds (512-byte rounding, :data:`helpers.plain_step.FUNCTIONS`), checked equal to the expression with
``sympy.expand``; each guard such a polynomial compared with 0; the dtypes by name. A regime without one (a step with
convolutions, whose cuDNN bound is another rule; an expression that calls another function) is left out, and the command
line answers it as before. Each regime written is checked first: its plain evaluation at the point traced equals the
symbolic step's, field by field.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import tempfile

import sympy

from . import hf_config
from .log_names import key_text, name
from .plain_step import COMPARISONS, FORMAT, FUNCTIONS, LIKE_FIELDS, PlainStep
from .record import StepProfile
from .symbolic import SymbolicStep, dimensions


class _Generators:
    """The generators of a step's polynomials: its symbols, then each call of
    :data:`helpers.plain_step.FUNCTIONS` met (:meth:`terms`), the calls inside another first."""

    def __init__(self, symbols: list):
        self.symbols = list(symbols)
        self.calls: list = []  # [function name, [argument terms]], as helpers.plain_step.generators reads them
        self._called: dict = {}  # a call (sympy) -> the symbol standing for it

    def _call(self, call) -> sympy.Symbol | None:
        """The symbol standing for ``call`` (its arguments' terms worked out first), or None where one has none."""
        if call not in self._called:
            arguments = [self.terms(a) for a in call.args]
            if None in arguments:
                return None
            self.calls.append([call.func.__name__, arguments])
            self._called[call] = sympy.Dummy(f"call{len(self.calls)}")
        return self._called[call]

    def _outer_calls(self, expression) -> list:
        """The calls of :data:`FUNCTIONS` in ``expression`` that no other call holds."""
        if expression.is_Atom:
            return []
        if expression.func.__name__ in FUNCTIONS:
            return [expression]
        return [c for a in expression.args for c in self._outer_calls(a)]

    def terms(self, expression) -> list | None:
        """``expression`` as :func:`helpers.plain_step.polynomial_value`'s terms of the generators, or None where it
        is not a polynomial with integer coefficients in them (checked: the terms expand to ``expression``)."""
        expression = sympy.sympify(expression)
        standing = {c: self._call(c) for c in self._outer_calls(expression)}
        if None in standing.values():
            return None
        gens = [*self.symbols, *self._called.values()]
        if not gens:  # both sizes fixed: a constant
            return [[int(expression)]] if expression.is_Integer else None
        try:
            pairs = sympy.Poly(expression.xreplace(standing), *gens).terms()
        except (sympy.PolynomialError, sympy.GeneratorsNeeded, TypeError, ValueError):
            return None
        if not all(c.is_Integer for _, c in pairs):
            return None
        terms = [[int(c), *(x for g, e in enumerate(monomial) if e for x in (g, int(e)))] for monomial, c in pairs]
        every = [*self.symbols, *self._called]  # the calls themselves
        rebuilt = sum((c * sympy.Mul(*(every[g] ** e for g, e in zip(powers[::2], powers[1::2])))
                       for c, *powers in terms), sympy.Integer(0))
        return terms if sympy.expand(rebuilt - expression) == 0 else None


def _guard(guard, generators: _Generators) -> list | None:
    """A guard (a sympy relation) as ``[terms of its left side less its right, comparison]``, or None."""
    comparison = getattr(guard, "rel_op", None)
    if comparison not in COMPARISONS:
        return None
    terms = generators.terms(guard.lhs - guard.rhs)
    return None if terms is None else [terms, comparison]


def _dtype_name(dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def plain(step: SymbolicStep) -> dict | None:
    """``step`` in plain values (:class:`helpers.plain_step.PlainStep`'s fields), or None where it has no plain form:
    convolutions (their cuDNN bound), a size expression or guard that is not an integer polynomial, sizes that are not
    the configuration's batch size and sequence length, or a field of its profile that the plain form does not keep."""
    sizes = dimensions(step.config, step.spec)
    if step.conv_bytes or sizes != {n: step.config.batch_size if n == "B" else step.config.seq_len for n in sizes}:
        return None
    made = _Generators(step.symbols.values())
    expressions, constants, (log, storages, markers), negated = step.numbered()
    polynomials = [made.terms(e) for e in expressions]
    guards = [_guard(g, made) for g in step.guards]
    shape = [made.terms(x) for x in step.like.input_shape]
    if None in polynomials or None in guards or None in shape:
        return None
    like = {f: getattr(step.like, f) for f in LIKE_FIELDS}
    kept = StepProfile(**like, config=step.config, input_shape=step.like.input_shape, events=[], event_categories=[],
                       peak_allocated_bytes=0, peak_event=0, categories={}, reserved_bytes=None)
    if kept != step.like:  # a field the plain form would lose
        return None
    return dict(fixed=list(step.fixed), sizes=list(sizes), symbols=list(step.symbols),
                ranges={n: list(r) for n, r in step.ranges.items()}, calls=made.calls, guards=guards,
                expressions=polynomials, constants=constants, log=log,
                storages=[(category, _dtype_name(dtype), shape, n) for category, dtype, shape, n in storages],
                markers=markers, negated=[[n, m] for n, m in negated.items() if m is not None], input_shape=shape,
                like=like, how=step.how)


def _same(step: SymbolicStep, data: dict) -> bool:
    """Whether ``data`` (:func:`plain` of ``step``, read back from JSON) evaluates at the point traced to the profile
    ``step`` evaluates there, every field, a storage's dtype by its name."""
    got, expected = PlainStep(**data).evaluate(step.config), step.evaluate(step.config)
    if got is None:
        return False
    named = {s: dataclasses.replace(v, dtype=_dtype_name(v.dtype)) for s, v in expected.storages.items()}
    return dataclasses.replace(got, storages={}) == dataclasses.replace(expected, storages={}) and got.storages == named


def write(where: pathlib.Path, config, steps: list[SymbolicStep]) -> bool:
    """Write the plain form of ``steps`` (a configuration's checked symbolic steps, :func:`plain`) beside their pickle
    in ``where``, each regime checked (:func:`_same`), replacing the file; remove it where ``config`` is not a shipped
    Hugging Face config or no regime has a plain form.  Returns whether a file was written."""
    path = where / name(config, ".json")
    kept = []
    if hf_config.shipped_json(config.model) is not None:
        for step in steps:
            data = plain(step)
            try:  # as the reader will have it; a value JSON cannot hold leaves the regime out
                data = None if data is None else json.loads(json.dumps(data))
            except (TypeError, ValueError):
                data = None
            if data is not None and _same(step, data):
                kept.append(data)
    if not kept:
        path.unlink(missing_ok=True)
        return False
    with tempfile.NamedTemporaryFile("w", dir=where, suffix=".part", delete=False) as f:
        try:
            json.dump({"format": FORMAT, "key": key_text(config), "steps": kept}, f, separators=(",", ":"))
        except BaseException:  # a full disk: no half file left behind
            f.close()
            os.unlink(f.name)
            raise
    os.replace(f.name, path)
    return True
