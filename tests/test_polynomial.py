"""A step's peak as a polynomial in batch and sequence (:func:`helpers.peak_polynomial`, lessons 01 and 08): exact
where the moment it counts is the peak, below the peak elsewhere, and one-line errors for what it cannot do."""

import dataclasses
import random

import pytest

from helpers import peak_polynomial, profile_step
from helpers.models import digits_mlp
from test_depth import _tiny

MLP = dict(device="simulated", input_shape=(64,), num_classes=10)


@pytest.fixture(scope="module")
def mlp_poly():
    """Lesson 01's digits MLP, traced with a symbolic batch at batch 1024 (its peak in backward of the last ReLU)."""
    return peak_polynomial(digits_mlp, 1024, **MLP)


def test_equals_the_peak_where_its_moment_wins_and_stays_below_elsewhere(mlp_poly):
    assert set(mlp_poly.terms()) >= {"1", "B"} and mlp_poly.guards == () and mlp_poly.fixed == ()
    assert mlp_poly.ranges["B"] == (2, 2**31 - 1)
    assert mlp_poly(1024) == mlp_poly.bytes_at_config == profile_step(digits_mlp, 1024, **MLP).peak_allocated_bytes
    rng = random.Random(50)
    equal = below = 0
    for b in [2, 3, 100, 513] + [rng.randint(2, 5000) for _ in range(4)]:
        peak = profile_step(digits_mlp, b, **MLP).peak_allocated_bytes
        assert mlp_poly(b) <= peak  # the bytes of one moment never exceed the highest moment's
        equal, below = equal + (mlp_poly(b) == peak), below + (mlp_poly(b) < peak)
    assert equal and below  # both sides occur: at 2 another moment wins (lesson 01's table), at 5000 this one


def test_sequence_polynomial_of_a_token_model_and_a_block_as_a_difference():
    config = dict(seq_len=48, device="simulated")
    two, three = (peak_polynomial(_tiny(layers=n), 3, **config) for n in (2, 3))
    for s in (17, 48, 96):
        for n, p in ((2, two), (3, three)):
            peak = profile_step(_tiny(layers=n), 3, **{**config, "seq_len": s}).peak_allocated_bytes
            assert p(3, s) <= peak
    assert two(3, 48) == profile_step(_tiny(layers=2), 3, **config).peak_allocated_bytes
    block = three - two
    assert "S" in str(block.expression) and "B" in str(block.expression)
    assert block(3, 48) == three(3, 48) - two(3, 48) == block.bytes_at_config
    with pytest.raises(ValueError, match="give seq_len"):
        two(3)


def test_batch_1_is_its_own_regime_and_points_outside_are_refused():
    p = peak_polynomial(_tiny(layers=2), 1, seq_len=32, device="simulated")
    assert p.fixed == ("B",) and "B" not in str(p.expression)
    assert p(1, 32) == profile_step(_tiny(layers=2), 1, seq_len=32, device="simulated").peak_allocated_bytes
    with pytest.raises(ValueError, match="fixed at 1"):
        p(2, 32)
    with pytest.raises(ValueError, match="outside"):
        p(1, 1)
    # the same polynomial said to be traced at 40 tokens (not traced again: what __sub__ compares is the point in
    # config, the batch size, sequence length and fixed sizes, which another trace at 40 tokens would give it)
    at_40 = dataclasses.replace(p, config=dataclasses.replace(p.config, seq_len=40))
    with pytest.raises(ValueError, match=r"different points or regimes \(batch, sequence, fixed sizes\): "
                                         r"\(1, 32, \('B',\)\) and \(1, 40, \('B',\)\)"):
        p - at_40


def test_categories_and_one_line_errors(mlp_poly):
    acts = peak_polynomial(digits_mlp, 1024, categories=("activations",), **MLP)
    assert acts.bytes_at_config == profile_step(digits_mlp, 1024, **MLP).categories["activations"]
    assert acts.terms().get("1", 0) == 0 and acts.terms()["B"] > 0  # activations grow with the batch, none without
    with pytest.raises(ValueError, match="unknown category 'weights'"):
        peak_polynomial(digits_mlp, 8, categories=("weights",), **MLP)
    with pytest.raises(ValueError, match="capacity"):
        peak_polynomial(digits_mlp, 8, capacity=2**30, **MLP)
    with pytest.raises(ValueError, match="unknown option 'bogus' for peak_polynomial"):
        peak_polynomial(digits_mlp, 8, bogus=1, **MLP)
