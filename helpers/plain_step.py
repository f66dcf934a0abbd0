"""A checked symbolic log in plain values (:mod:`helpers.plain_log` writes it), read and evaluated without torch or
sympy: the command line's cold answer (:mod:`helpers.cli_cold`, issue 50).

:class:`helpers.symbolic.SymbolicStep` holds its log with sympy expressions and torch's dtypes, so reading it imports
both (3.8 s of a 4.7 s cold answer on the 2-core machine). Its plain form, a JSON file beside it (named by the same
hash, :func:`helpers.log_names.name`), holds each distinct size expression as the integer coefficients of a polynomial
in the batch size B, the sequence length S and the calls of :data:`FUNCTIONS` (512-byte rounding), the log, storages and
markers with those expressions numbered as :meth:`helpers.symbolic.SymbolicStep.numbered` numbers them, the dtypes by
name, the guards as polynomials compared with 0, and the profile's fields that do not depend on the sizes.
:meth:`PlainStep.evaluate` computes every expression at a point and reads the log as the symbolic step reads it
(:class:`helpers.written.NumberedLog`): the same profile, field by field, but that a storage's ``dtype`` is its name
(``"bfloat16"``) rather than a ``torch.dtype``.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass

from .allocator.rules import round_up
from .config import StepConfig
from .log_names import directories, key_text, name
from .record import StepProfile
from .written import numbered_log

#: The first field of every file: this format's name and version.
FORMAT = "gpu-memory-lessons plain symbolic log 1"
#: A guard's comparison of its polynomial with 0, by sympy's ``rel_op``.
COMPARISONS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
               "!=": operator.ne}
#: The functions a size expression may call, by their sympy name (:class:`helpers.symbolic_sizes.RoundUp`, the
#: ``FloorDiv``, ``Max``... of ``torch/utils/_sympy/functions.py``), as Python computes them on ints: a plain log's
#: calls, and the functions :func:`helpers.symbolic._compiled` compiles a symbolic log's expressions with.
FUNCTIONS = {"RoundUp": round_up, "FloorDiv": operator.floordiv, "PythonMod": operator.mod, "Mod": operator.mod,
             "CeilDiv": lambda a, b: -(-a // b), "Max": max, "Min": min}
#: The profile's fields a plain log keeps as they are (the others are the evaluation's, or their defaults).
LIKE_FIELDS = ("backend", "model", "parameter_count", "params_without_grad", "paged_bytes", "cudnn_missing")


def evaluated_note(how: str, sizes: dict[str, int]) -> str:
    """A profile's ``depth_note`` when it is evaluated from a symbolic log made ``how``, at ``sizes`` (``{"B": 4,
    "S": 2048}``): ``"...; evaluated at batch 4, sequence 2048 (helpers.symbolic)"``."""
    at = ", ".join(f"{'batch' if n == 'B' else 'sequence'} {v}" for n, v in sizes.items())
    return f"{how}; evaluated at {at} (helpers.symbolic)"


def polynomial_value(terms: list, generators: list[int]) -> int:
    """The value of the polynomial whose ``terms`` are ``[coefficient, generator, exponent, generator, exponent...]``
    (integers; a generator by its position in ``generators``, the values of the symbols then of the calls)."""
    total = 0
    for coefficient, *powers in terms:
        for g, e in zip(powers[::2], powers[1::2]):
            coefficient *= generators[g] ** e
        total += coefficient
    return total


def generators(point: list[int], calls: list) -> list[int]:
    """The values of a plain log's generators at ``point`` (the symbols' values, in order): the symbols, then each
    call ``[function name of FUNCTIONS, [argument polynomials]]``, its arguments polynomials of the generators before
    it."""
    values = list(point)
    for function, arguments in calls:
        values.append(FUNCTIONS[function](*(polynomial_value(terms, values) for terms in arguments)))
    return values


@dataclass
class PlainStep:
    """One regime of a configuration's symbolic log (:class:`helpers.symbolic.SymbolicStep`) in plain values.

    Attributes:
        fixed: the sizes fixed at 1 in this regime (``["B"]`` for batch 1); ``sizes``: every size of the step, in the
            order of :func:`helpers.symbolic.dimensions` (``["B"]`` or ``["B", "S"]``); ``symbols``: those that vary.
        ranges: symbol -> ``[low, high]`` where the log holds.
        calls: the function calls the expressions hold (:func:`generators`), each a generator after the symbols.
        guards: ``[terms, comparison]``: the log holds where each polynomial compares so with 0.
        expressions: each numbered expression, a polynomial of the generators (:func:`polynomial_value`'s ``terms``);
            ``constants``: the values numbered after them.
        log, storages, markers, negated: :func:`helpers.written.numbered_log`'s arguments (``negated`` as pairs), a
            storage's dtype by name.
        input_shape: one sample's shape, each size a polynomial; ``like``: :data:`LIKE_FIELDS`; ``how``: how the log
            was made.
    """

    fixed: list
    sizes: list
    symbols: list
    ranges: dict
    calls: list
    guards: list
    expressions: list
    constants: list
    log: list
    storages: list
    markers: list
    negated: list
    input_shape: list
    like: dict
    how: str

    def point(self, config: StepConfig) -> dict[str, int]:
        """``config``'s sizes (``{"B": batch, "S": sequence}``), as :func:`helpers.symbolic.dimensions` gives them for
        a shipped Hugging Face config (:mod:`helpers.plain_log` checks it when it writes)."""
        return {n: config.batch_size if n == "B" else config.seq_len for n in self.sizes}

    def outside(self, config: StepConfig) -> str | None:
        """Why the log does not hold at ``config``'s point, or None where it does: another regime (a size of 1), a size
        out of range, a guard false there (as :meth:`helpers.symbolic.SymbolicStep.outside`, on plain values)."""
        sizes = self.point(config)
        if any(not isinstance(v, int) for v in sizes.values()):
            return "a size is not given"
        fixed = [n for n, v in sizes.items() if v == 1]
        if fixed != self.fixed:
            return "another regime"
        for n, (low, high) in self.ranges.items():
            if not low <= sizes[n] <= high:
                return f"{n} = {sizes[n]} is outside the range [{low}, {high}] where the log holds"
        values = self._generators(sizes)
        if values is None:
            return "a call is not defined there"
        for terms, comparison in self.guards:
            if not COMPARISONS[comparison](polynomial_value(terms, values), 0):
                return "a guard that the symbolic trace recorded is false there"
        return None

    def _generators(self, sizes: dict[str, int]) -> list[int] | None:
        """:func:`generators` at ``sizes``, or None where a call raises there (``round_up`` of a negative size)."""
        try:
            return generators([sizes[n] for n in self.symbols], self.calls)
        except (ValueError, ZeroDivisionError):
            return None

    def evaluate(self, config: StepConfig) -> StepProfile | None:
        """The profile of ``config`` read from this log evaluated at its point, or None where the log does not hold
        there (:meth:`outside`) or cannot be read as sums (:func:`helpers.written.numbered_log`, a storage of 0 bytes).
        """
        if self.outside(config) is not None:
            return None
        sizes = self.point(config)
        point = self._generators(sizes)
        values = [polynomial_value(terms, point) for terms in self.expressions] + self.constants
        start = len(self.expressions)
        storages = [(category, dtype, tuple(shape), nbytes) for category, dtype, shape, nbytes in self.storages]
        read = numbered_log(self.log, storages, self.markers, {start + i: v for i, v in enumerate(self.constants)},
                            dict(map(tuple, self.negated)))
        if read is None:
            return None
        shape = tuple(polynomial_value(terms, point) for terms in self.input_shape)
        like = StepProfile(**self.like, config=config, input_shape=shape, events=[], event_categories=[],
                           peak_allocated_bytes=0, peak_event=0, categories={}, reserved_bytes=None)
        return read.profile(values, like, depth_note=evaluated_note(self.how, sizes))


def load(config: StepConfig) -> list[PlainStep]:
    """The plain logs of ``config``'s configuration on disk (each regime written), from the first directory that has a
    readable one (:func:`helpers.log_names.directories`: the user's, then the shipped logs); ``[]`` where there are
    none, logs on disk are off, or no file can be read, is of this format and names this configuration (a hash
    collision)."""
    for where in directories():
        try:
            data = json.loads((where / name(config, ".json")).read_text())
            if data.get("format") != FORMAT or data.get("key") != key_text(config):
                continue
            return [PlainStep(**step) for step in data["steps"]]
        except Exception:  # absent, unreadable, truncated, foreign: as if there were none
            continue
    return []
