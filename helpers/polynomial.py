"""A step's bytes as a polynomial in its batch size ``B`` (and sequence length ``S``), derived once from PyTorch's own
dispatch, not fitted (lessons 01 and 08; issue 50).

:func:`peak_polynomial` traces one training step with its batch size (and, for token inputs, its sequence length) as
symbols (:func:`helpers.symbolic.trace`: PyTorch's ``FakeTensorMode`` with a ``ShapeEnv``, so that every storage's
``untyped_storage().nbytes()`` is an expression such as ``16*B*S**2``), and adds up the storages alive at the moment
of the step's peak.  The result is exact at every point of the region where the symbolic log holds: it is the bytes
alive *at that moment*, which is the peak wherever that moment stays the highest (at small batches another moment of
the step can win, lesson 01).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from . import symbolic
from .config import StepConfig
from .profile import step_config


@dataclass(frozen=True)
class BytesPolynomial:
    """Bytes as an expression in ``B`` (batch size) and ``S`` (sequence length), each a ``sympy.Symbol``.

    Attributes:
        expression: the bytes, expanded (``sympy.expand``); a term ``RoundUp(n)`` is ``n`` bytes rounded up to a
            multiple of 512, as PyTorch's caching allocator rounds a storage (``c10/cuda/CUDACachingAllocator.cpp``,
            ``round_size``).
        config: the step it was traced at (its point: the batch size and sequence length whose peak moment is counted).
        bytes_at_config: the expression's value at ``config``'s point (bytes).
        fixed: the sizes fixed at 1 in this trace (``("B",)`` for batch 1: its own program, so ``B`` is no symbol).
        ranges: ``{"B": (low, high), ...}``: where each symbol may lie for the expression to hold.
        guards: the conditions (``"B < 16"``) PyTorch's trace recorded; the expression holds where all are true.
    """

    expression: sympy.Expr
    config: StepConfig
    bytes_at_config: int
    fixed: tuple[str, ...]
    ranges: dict
    guards: tuple[str, ...]

    def __call__(self, batch_size: int, seq_len: int | None = None) -> int:
        """The bytes at ``batch_size`` (and ``seq_len``), an int.

        Raises:
            ValueError: for a point outside :attr:`ranges`, a size fixed at 1 given another value, or ``seq_len``
                missing where the expression has ``S``.
        """
        point = {"B": batch_size, "S": seq_len}
        values = {}
        for sym in self.expression.free_symbols:
            v = point[sym.name]
            if v is None:
                raise ValueError("this polynomial has the sequence length S: give seq_len")
            low, high = self.ranges[sym.name]
            if not low <= v <= high:
                raise ValueError(f"{sym.name} = {v} is outside [{low}, {high}], where this polynomial holds")
            values[sym] = v
        for name in self.fixed:
            if point[name] not in (None, 1):
                raise ValueError(f"{name} is fixed at 1 in this polynomial (traced at {name} = 1), got {point[name]}")
        return int(self.expression.xreplace(values))

    def __sub__(self, other: BytesPolynomial) -> BytesPolynomial:
        """The bytes of ``self`` less ``other``'s, traced at the same point in the same regime: e.g. a model with two
        blocks less the same model with one, one block's bytes.  The result keeps ``self``'s :attr:`config`; its
        ranges are the two ranges' intersection and its guards both polynomials' guards.

        Raises:
            ValueError: for polynomials traced at different points or in different regimes.
        """
        if not isinstance(other, BytesPolynomial):
            return NotImplemented
        here, there = ((p.config.batch_size, p.config.seq_len, p.fixed) for p in (self, other))
        if here != there:
            raise ValueError(f"polynomials traced at different points or regimes (batch, sequence, fixed sizes): "
                             f"{here} and {there}")
        ranges = {n: (max(low, other.ranges[n][0]), min(high, other.ranges[n][1]))
                  for n, (low, high) in self.ranges.items()}
        return BytesPolynomial(sympy.expand(self.expression - other.expression), self.config,
                               self.bytes_at_config - other.bytes_at_config, self.fixed, ranges,
                               tuple(dict.fromkeys(self.guards + other.guards)))

    def terms(self) -> dict[str, int]:
        """Each term of :attr:`expression` and its coefficient in bytes: ``{"1": M0, "B": m, "B*S**2": ...}``; a
        rounded size counts once under its own name (``{"RoundUp(8*B)": 1}``)."""
        return {("1" if term == 1 else str(term)): int(c) for term, c in self.expression.as_coefficients_dict().items()}


def peak_polynomial(model="resnet18", batch_size: int = 128, image_size: int = 224, *,
                    categories: tuple[str, ...] | None = None, **options) -> BytesPolynomial:
    """The bytes alive at the peak of a simulated training step, as a polynomial in its batch size ``B`` (and
    sequence length ``S`` for token inputs), derived from one symbolic trace of PyTorch's dispatch.

    Args:
        model, batch_size, image_size, **options: as :func:`helpers.profile.profile_step` (``device`` must be
            ``"simulated"``).  The point given chooses the moment counted: the step's peak there.  A batch size of 1
            traces batch 1's own program, with only ``S`` a symbol.
        categories: count only the storages of these categories (:data:`helpers.record.CATEGORIES`, e.g.
            ``("activations",)``); None: every storage alive at the peak.

    Returns:
        A :class:`BytesPolynomial`; checked at the point given against the concrete trace's peak (or its categories).

    Raises:
        ValueError: in one line, for a bad option or model, a step that cannot be traced with symbolic sizes (a real
            GPU, ``capacity=``, ``full_trace=``, ``workspaces=``, ``inputs=``: :class:`helpers.symbolic.NotSymbolic`),
            an unknown category, or a polynomial that does not equal the concrete trace at the point given.
    """
    from .record import CATEGORIES
    from .profile import obtain_concrete

    config = step_config(model, batch_size, image_size, "peak_polynomial", **options)
    unknown = sorted(set(categories or ()) - set(CATEGORIES))
    if unknown:
        raise ValueError(f"unknown category {unknown[0]!r}; the categories are {', '.join(CATEGORIES)}")
    step = symbolic.trace(config)
    profile = step.evaluate(config)
    alive = [s for s in profile.peak_serials if categories is None or step.storages[s][0] in categories]
    named = {sym: sympy.Symbol(name) for name, sym in step.symbols.items()}
    expression = sympy.expand(sum((step.storages[s][3] for s in alive), sympy.Integer(0))).xreplace(named)
    concrete = obtain_concrete(config)
    expected = (concrete.peak_allocated_bytes if categories is None
                else sum(concrete.categories[c] for c in categories))
    poly = BytesPolynomial(expression, config, expected, step.fixed, dict(step.ranges), tuple(step.guards_named()))
    sizes = symbolic.dimensions(config, step.spec)
    got = poly(sizes["B"], sizes.get("S"))
    if got != expected:
        raise ValueError(f"the polynomial gives {got:,} bytes at the point traced, "
                         f"the concrete trace {expected:,}: a storage resized in place is not a storage's size")
    return poly
