"""A symbolic log's plain form (:mod:`helpers.plain_log` writes it, :mod:`helpers.plain_step` reads it without torch or
sympy): each size expression and guard as integer polynomials of the symbols and of the calls they hold, equal to
sympy's own value at every point tried; what has no plain form is refused; a file that is not a plain log of this
configuration is never read.  (The whole route, a traced log written and read back, is ``tests/test_cli_cold.py``'s.)
"""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import sympy

from helpers import log_names, plain_step
from helpers.config import StepConfig
from helpers.plain_log import _Generators, _guard
from helpers.symbolic_sizes import RoundUp, storage_bytes

B, S = sympy.symbols("B S", integer=True, positive=True)


def _value(terms, made: _Generators, b: int, s: int) -> int:
    return plain_step.polynomial_value(terms, plain_step.generators([b, s], made.calls))


@pytest.mark.parametrize("expression", [
    8 * B * S, 16 * B * S**2 + 4096, RoundUp(8 * B * S), -RoundUp(1152 * B * S) + 3 * B**2,
    storage_bytes(2 * B * S + 7), RoundUp(RoundUp(3 * S) * B + 1), sympy.Max(B, 2 * S) * 512,
    sympy.Integer(1536)])
def test_an_expression_is_a_polynomial_of_its_generators_with_sympys_value(expression):
    """Its plain terms, evaluated with the calls of :data:`helpers.plain_step.FUNCTIONS`, give sympy's value at random
    points of the region (B, S >= 2), and each call is its own generator."""
    made = _Generators([B, S])
    terms = made.terms(expression)
    assert terms is not None
    rng = random.Random(0)
    for b, s in [(2, 2), (3, 17), *((rng.randint(2, 4096), rng.randint(2, 131072)) for _ in range(20))]:
        assert _value(terms, made, b, s) == int(expression.subs({B: b, S: s}))


def test_what_is_not_an_integer_polynomial_has_no_plain_form():
    """A rational coefficient, a function outside :data:`helpers.plain_step.FUNCTIONS`, a power of a symbol that is
    not a whole number: None."""
    made = _Generators([B, S])
    for expression in (B / 3, sympy.sin(B), sympy.sqrt(B * S), 2**B, RoundUp(B / 2)):
        assert made.terms(expression) is None, expression
    assert _Generators([]).terms(sympy.Integer(7)) == [[7]] and _Generators([]).terms(B) is None


def test_a_guard_is_a_polynomial_compared_with_0():
    """``B < 16`` holds at 15, not at 16; an equation and a relation of calls alike; a conjunction has no plain form."""
    made = _Generators([B, S])
    for guard, holds, fails in ((B < 16, (15, 2), (16, 2)), (sympy.Eq(B * S, 8), (2, 4), (2, 5)),
                                (sympy.Ge(RoundUp(8 * S), 1024), (2, 65), (2, 64))):
        terms, comparison = _guard(guard, made)
        for (b, s), expected in ((holds, True), (fails, False)):
            assert plain_step.COMPARISONS[comparison](_value(terms, made, b, s), 0) is expected, guard
    assert _guard(sympy.And(B < 16, S > 2), made) is None


def test_only_a_plain_log_of_this_configuration_is_read(tmp_path, monkeypatch):
    """An absent file, one that is not JSON, another format's or another configuration's (its key) reads as none."""
    monkeypatch.setenv(log_names.VARIABLE, str(tmp_path))
    config = StepConfig(model="HuggingFaceTB/SmolLM2-135M", batch_size=4, seq_len=16, device="simulated")
    assert plain_step.load(config) == []
    path = tmp_path / log_names.name(config, ".json")
    assert path.name == log_names.name(config).replace(".pickle", ".json")  # beside the pickle
    for content in ("garbage", json.dumps({"format": "another", "key": log_names.key_text(config), "steps": []}),
                    json.dumps({"format": plain_step.FORMAT, "key": "another configuration", "steps": [{}]}),
                    json.dumps({"format": plain_step.FORMAT, "key": log_names.key_text(config), "steps": [{}]})):
        path.write_text(content)
        assert plain_step.load(config) == []
    path.write_text(json.dumps({"format": plain_step.FORMAT, "key": log_names.key_text(config), "steps": []}))
    assert plain_step.load(config) == []
    monkeypatch.setenv(log_names.VARIABLE, "off")
    assert plain_step.load(config) == []


def test_the_plain_route_imports_neither_torch_nor_sympy():
    """The modules the cold answer reads a plain log with import neither (nor transformers)."""
    code = ("import sys, helpers.cli_cold, helpers.plain_step, helpers.verdicts, helpers.__main__\n"
            "print(sorted(m for m in ('torch', 'sympy', 'transformers', 'numpy') if m in sys.modules))")
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=repo, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
