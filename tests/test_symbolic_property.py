"""A property of every step (issue 50, item 2): traced once with symbolic sizes, it evaluates at any point inside its
region to exactly the concrete profile, over random small configurations drawn by hypothesis: MLPs and CNNs of random
widths and depths, tiny Hugging Face causal LMs (Llama, Qwen2, Mistral; random widths, depths, heads, tied
embeddings), each with a random optimizer, autocast dtype, steady state, checkpointing, gradient accumulation and LoRA
where they apply.

For each configuration: one symbolic trace at its first point, then the evaluated profile compared with a concrete
trace (:func:`helpers.profile.obtain_concrete`) at that point and at two more drawn inside the region (B, and S for
tokens, each from 2 up), field by field and in the allocator's replay (:func:`test_symbolic_equality.assert_exact`).
A point outside the region must say why (a guard or a range); a configuration that cannot be traced symbolically
must raise :class:`helpers.symbolic.NotSymbolic` with one of the documented reasons.  ``derandomize=True``: the
same examples on every run.  A small profile in ``make test``, a larger one in the slow group.

Hypothesis draws some configurations more than once (its later examples are mutations of earlier ones: of the slow
profile's 20, five repeat an earlier configuration with other points), and some points twice (two equal points, a
point equal to the configuration's own, or, without tokens, points that differ only in the S that such a step does not
have).  The same check is made once per test session: a configuration is traced symbolically once (:data:`_TRACED`, by
its repr, which names its model's function and arguments), and a point whose evaluation was compared for that
configuration (:data:`_CHECKED`) is not traced and compared again; every distinct (configuration, point) drawn is
still compared.  The traces are deterministic (FakeTensorMode, no
random state), so a repeat could only give the same answer.
"""

import functools

from hypothesis import HealthCheck, given, settings, strategies as st
from torch import nn

from helpers import symbolic
from helpers.config import StepConfig
from helpers.models.presets import mlp
from test_depth import _tiny
from test_symbolic_equality import _at, assert_exact


def small_cnn(channels: tuple[int, ...], batch_norm: bool, pool: bool, num_classes: int) -> nn.Sequential:
    """A small CNN: per width of ``channels``, ``Conv2d(3x3, padding 1)`` (then ``BatchNorm2d``) and ``ReLU``
    (then ``MaxPool2d(2)``), then global average pooling and a ``Linear`` to ``num_classes`` logits."""
    layers, previous = [], 3
    for width in channels:
        layers += [nn.Conv2d(previous, width, 3, padding=1), *([nn.BatchNorm2d(width)] if batch_norm else []),
                   nn.ReLU(), *([nn.MaxPool2d(2)] if pool else [])]
        previous = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(previous, num_classes))


_widths = st.lists(st.integers(4, 48), min_size=1, max_size=3).map(tuple)


@st.composite
def models(draw) -> tuple[object, dict, bool]:
    """A small model and the options it takes: ``(model, options, tokens)``."""
    kind = draw(st.sampled_from(["mlp", "cnn", "llama", "qwen2", "mistral"]))
    if kind == "mlp":
        features, classes = draw(st.integers(4, 64)), draw(st.integers(2, 12))
        return (functools.partial(mlp, features, draw(_widths), classes),
                dict(input_shape=(features,), num_classes=classes), False)
    if kind == "cnn":
        side, classes = draw(st.sampled_from([8, 12, 16])), draw(st.integers(2, 12))
        return (functools.partial(small_cnn, draw(_widths), draw(st.booleans()), draw(st.booleans()), classes),
                dict(input_shape=(3, side, side), num_classes=classes), False)
    heads = draw(st.sampled_from([2, 4]))
    config = _tiny(kind, layers=draw(st.integers(1, 3)), hidden=heads * draw(st.sampled_from([8, 16])), heads=heads,
                   kv_heads=draw(st.sampled_from([1, heads])), tied=draw(st.booleans()))
    options = {}
    if draw(st.booleans()):
        options["lora_rank"] = draw(st.sampled_from([2, 4]))
    if draw(st.booleans()):
        options["checkpoint"] = 1
    return config, options, True


@st.composite
def configurations(draw) -> StepConfig:
    """A random small step at its first point."""
    model, options, tokens = draw(models())
    amp = draw(st.sampled_from([None, "float16", "bfloat16"]))
    if amp is not None:
        options.update(amp=True, amp_dtype=amp)
    options["optimizer"] = draw(st.sampled_from(["sgd", "sgd-momentum", "adam", "adamw"]))
    options["steady_state"] = draw(st.booleans())
    options["accumulation_steps"] = draw(st.sampled_from([1, 1, 2]))
    seq = {"seq_len": draw(st.integers(2, 48))} if tokens else {}
    return StepConfig(model=model, batch_size=draw(st.integers(2, 12)), device="simulated", **options, **seq)


#: The reasons a symbolic trace may refuse a step (:func:`helpers.symbolic.applies`, :func:`helpers.symbolic.trace`).
REFUSALS = ("a storage is resized in place", "the symbolic trace failed: ")


#: The symbolic trace of each configuration drawn in this process (or its :class:`helpers.symbolic.NotSymbolic`), by
#: ``repr`` (a Hugging Face config dict is not hashable), and the points at which its evaluation was compared.
_TRACED: dict[str, object] = {}
_CHECKED: dict[str, set[tuple[int, int | None]]] = {}


def evaluated_equals_concrete(config: StepConfig, points: list[tuple[int, int]]) -> None:
    """``config`` traced symbolically once; at its point and at each of ``points`` (batch, sequence) inside the
    region, the evaluated profile equals the concrete one; outside, the log says why.  A configuration drawn again
    is not traced again, and a point already compared for it is not compared again (the module's docstring)."""
    key = repr(config)
    if key not in _TRACED:
        try:
            _TRACED[key] = symbolic.trace(config)
        except symbolic.NotSymbolic as e:
            _TRACED[key] = e
    step = _TRACED[key]
    if isinstance(step, symbolic.NotSymbolic):
        assert str(step).startswith(REFUSALS), str(step)
        return
    # A configuration drawn again is equal field for field and in its repr, but its model is another
    # functools.partial object (equal only to itself): the points are taken of the configuration traced, which
    # builds the same model (the same function of the same arguments, its repr).
    assert repr(step.config) == key, (repr(step.config), key)
    config = step.config
    tokens = config.seq_len is not None
    assert step.fixed == () and set(step.symbols) == ({"B", "S"} if tokens else {"B"})
    checked = _CHECKED.setdefault(key, set())
    for b, s in [(config.batch_size, config.seq_len), *points]:
        at = _at(config, b, s if tokens else None)
        why = step.outside(at)
        if why is not None:  # only a guard's or a range's reason, never another configuration's
            assert why.startswith(("the guard ", "S = ", "B = ")) and "own program" not in why, why
            continue
        if (b, s if tokens else None) not in checked:
            assert_exact(step, at, f"{config}, point {(b, s)}")
            checked.add((b, s if tokens else None))  # only once it passed: a failure is checked again


_points = st.lists(st.tuples(st.integers(2, 24), st.integers(2, 64)), min_size=2, max_size=2)
_SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)


@settings(max_examples=6, **_SETTINGS)
@given(configurations(), _points)
def test_a_small_step_evaluated_equals_its_concrete_trace(config, points):
    evaluated_equals_concrete(config, points)


@settings(max_examples=20, **_SETTINGS)
@given(configurations(), _points)
def test_many_small_steps_evaluated_equal_their_concrete_traces(config, points):
    """The larger profile (the slow group)."""
    evaluated_equals_concrete(config, points)
