"""A size of a step traced with symbolic sizes (:mod:`helpers.symbolic`) as one sympy expression per value: the
symbols' range, a storage's bytes rounded up to 512 without comparing, and every expression written one way
(canonical), so that equal sizes compare equal, as :mod:`helpers.depth` needs to write a deep model from shallow
logs.
"""

from __future__ import annotations

import sympy
import torch
from torch.utils._sympy.functions import Max, Min
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from .allocator.rules import K_MIN_BLOCK, round_up

#: The range of every symbolic size: bounded (unbounded, ``applySlice`` keeps identity slices), and above 1 (a
#: size of 1 is its own program).
LOW, HIGH = 2, 2**31 - 1
#: The lattice functions a size may hold (PyTorch's and sympy's): :func:`_lattice_decided` decides them.
_LATTICE = (Max, Min, sympy.Max, sympy.Min)


class RoundUp(sympy.Function):
    """``round_up(n)``: ``n`` bytes rounded up to a multiple of 512 (:func:`helpers.allocator.rules.round_up`), kept
    unevaluated while ``n`` is symbolic."""

    is_integer = True

    @classmethod
    def eval(cls, n):
        if n.is_Integer:
            return sympy.Integer(round_up(int(n)))
        return None


def canonical(value):
    """``value`` (an int, a ``SymInt`` or a sympy expression) as an int if it is one, else its expression expanded
    (``sympy.expand``) and its ``Max`` and ``Min`` decided where the symbols' range decides them
    (:func:`_lattice_decided`): equal sizes written alike (``8*s*(b - 1) + 8*s`` and ``8*b*s``)."""
    if isinstance(value, torch.SymInt):
        value = value.node.expr
    if isinstance(value, int):
        return value
    value = sympy.expand(value)
    if value.has(*_LATTICE):
        value = sympy.expand(_lattice_decided(value))
    return int(value) if value.is_Integer else value


def _lattice_decided(expr):
    """``expr`` with every ``Max`` or ``Min`` that equals one of its arguments wherever the symbols lie in
    ``[LOW, HIGH]`` replaced by that argument (``bound_sympy``, ``torch/utils/_sympy/value_ranges.py``), until none
    is left that the bounds decide.

    A storage's bytes worked out from its strides keep ``Max(1, stride)``, which sympy cannot decide alone: the
    memory-efficient attention's log-sum-exp in one block is ``36*B*Max(1, 32*c) - 4*Max(1, 32*c) + 128*c`` bytes and
    ``1152*B*c`` in the next (``c = CeilToInt(IntTrueDiv(S, 32))``), equal at every point, so :mod:`helpers.depth`
    found the blocks different and traced SmolLM2's 30 blocks in full.
    """
    ranges = {sym: ValueRanges(LOW, HIGH) for sym in expr.free_symbols}
    while True:
        decided = {}
        for node in expr.atoms(*_LATTICE):
            bounds = [bound_sympy(a, ranges) for a in node.args]
            for i, r in enumerate(bounds):
                others = bounds[:i] + bounds[i + 1:]
                if isinstance(node, (Max, sympy.Max)) and all(r.lower >= o.upper for o in others) or (
                        isinstance(node, (Min, sympy.Min)) and all(r.upper <= o.lower for o in others)):
                    decided[node] = node.args[i]
                    break
        if not decided:
            return expr
        expr = expr.xreplace(decided)


def storage_bytes(nbytes):
    """A storage's ``nbytes`` rounded up to 512 (:func:`helpers.allocator.rules.round_up`), comparing nothing: an
    int; an expression whose every coefficient is a multiple of 512 (a multiple of 512 at every integer point) as it
    is; else :class:`RoundUp` of it."""
    nbytes = canonical(nbytes)
    if isinstance(nbytes, int):
        return round_up(nbytes)
    coefficients = nbytes.as_coefficients_dict().values()
    if all(c.is_Integer and int(c) % K_MIN_BLOCK == 0 for c in coefficients):
        return nbytes
    return RoundUp(nbytes)
