"""A step traced once with symbolic batch and sequence (:mod:`helpers.symbolic`), evaluated at points drawn at random
inside the region where its log holds, equals the concrete step there: every field of the profile, the allocation log
entry for entry, and the allocator's replay (reserved memory) byte for byte (issue 50).

Batch 1 is its own regime (the batch fixed, the sequence a symbol).  The cheap configurations run in ``make test``;
GPT-2's guard in the slow group (``tests/conftest.py``); the full-size steps (Llama-3.1 8B LoRA and QLoRA, batch 1
included) are ``tests/test_symbolic_equality.py``'s.  A LoRA step with checkpointing in steady state written from
its shallow symbolic traces (:mod:`helpers.depth`) is its Llama-3.1 8B LoRA case, the same options (bfloat16
autocast and parameters) at full size: the tiny one that was here (8 blocks written from the same 6- and 7-block
symbolic traces, half a minute) asserted nothing that case does not.
"""

import random

import pytest
import sympy

from helpers import symbolic
from helpers.config import StepConfig
from helpers.profile import forget_kept, obtain_concrete, profile_step
from test_depth import assert_same


def _config(model, batch_size: int, seq_len: int | None, **options) -> StepConfig:
    return StepConfig(model=model, batch_size=batch_size, device="simulated",
                      **({} if seq_len is None else {"seq_len": seq_len}), **options)


def assert_evaluated_exactly(model, points: list, step: symbolic.SymbolicStep | None = None,
                             **options) -> symbolic.SymbolicStep:
    """Trace once at the first point (or take ``step``); at every point, the evaluated profile equals
    ``profile_step``'s."""
    first = _config(model, *points[0], **options)
    step = step if step is not None else symbolic.trace(first)
    for batch_size, seq_len in points:
        config = first.replace(batch_size=batch_size, **({} if seq_len is None else {"seq_len": seq_len}))
        assert step.outside(config) is None, (config, step.outside(config))
        evaluated = step.evaluate(config)
        assert evaluated.depth_note.endswith("(helpers.symbolic)"), evaluated.depth_note
        concrete = obtain_concrete(config)
        assert_same(evaluated, concrete)
        assert (evaluated.cudnn_bound_bytes, evaluated.cudnn_missing) == (concrete.cudnn_bound_bytes,
                                                                          concrete.cudnn_missing)
    return step


@pytest.fixture(scope="module")
def resnet18():
    """ResNet18's step traced once with a symbolic batch (at batch 8)."""
    return symbolic.trace(_config("resnet18", 8, None))


def test_resnet18_by_batch_both_sides_of_the_cpu_kernels_batch_rule(resnet18):
    """No guard (the oneDNN rule ``B >= 16`` is kept out of the trace): points on both sides of 16 are exact."""
    rng = random.Random(50)
    points = [(8, None), (rng.randint(2, 15), None), (rng.randint(16, 200), None)]
    step = assert_evaluated_exactly("resnet18", points, step=resnet18)
    assert step.guards == () and step.fixed == () and set(step.symbols) == {"B"}
    assert step.ranges == {"B": (symbolic.LOW, symbolic.HIGH)} == {"B": (2, 2**31 - 1)}
    assert len(step.conv_bytes) == 3 * 20 - 1  # 20 convolutions, 3 passes each (the stem's input: no gradient)
    bytes_ = [s[3] for s in step.storages]
    assert any(isinstance(n, sympy.Expr) and step.symbols["B"] in n.free_symbols for n in bytes_)


def test_batch_1_is_its_own_regime(resnet18):
    step = resnet18
    one = _config("resnet18", 1, None)
    assert step.outside(one) == "B = 1 is its own program (another regime)"
    with pytest.raises(symbolic.NotSymbolic, match="own program"):
        step.evaluate(one)
    fixed = symbolic.trace(one)
    assert fixed.fixed == ("B",) and fixed.symbols == {}
    assert_same(fixed.evaluate(one), obtain_concrete(one))


def test_a_guard_bounds_the_region():
    """GPT-2's learned positions stop at 1,024: the trace records ``S <= 1024``, which narrows S's range, and a longer
    sequence is outside."""
    step = symbolic.trace(_config("gpt2", 2, 64))
    assert step.guards_named() == ["S <= 1024"]
    assert step.ranges["S"] == (symbolic.LOW, 1024)
    longer = _config("gpt2", 2, 1025)
    assert step.outside(longer) == "S = 1025 is outside the range [2, 1024] where the log holds"
    assert step.outside(_config("gpt2", 2, 1024)) is None
    assert step.outside(_config("gpt2", 2, 64, amp=True)) == "another configuration than the one traced"


def test_what_cannot_be_traced_symbolically_says_why():
    with pytest.raises(symbolic.NotSymbolic, match="capacity"):
        symbolic.trace(_config("resnet18", 8, None, capacity=8 * 2**30))
    with pytest.raises(symbolic.NotSymbolic, match="workspaces"):
        symbolic.trace(_config("resnet18", 8, None, workspaces="bound"))
    with pytest.raises(symbolic.NotSymbolic, match="full_trace"):
        symbolic.trace(_config("resnet18", 8, None, full_trace=True))


def _answer(config: StepConfig, spec, asked: list, **options):
    """As the profile layer asks (:func:`helpers.profile.obtain`): :func:`helpers.evaluated.answer`, else a concrete
    answer (its batch size noted in ``asked``) handed to :func:`helpers.evaluated.remember`."""
    from helpers import evaluated

    got = evaluated.answer(config, spec, **options)
    if got is None:
        asked.append(config.batch_size)
        got = evaluated.remember(config, obtain_concrete(config))
    return got


def test_answers_are_concrete_first_then_evaluated_once_checked(symbolic_logs):
    """:func:`helpers.evaluated.answer` for a caller that asks many points: the first question traced, the second
    evaluated from a symbolic log checked against the first answer, batch 1 (another regime) checked against its own
    concrete answer."""
    from helpers import evaluated, models

    spec, asked = models.resolve_model("resnet18"), []

    def ask(batch_size: int):
        config = _config("resnet18", batch_size, None)
        return _answer(config, spec, asked, many=True)

    first = ask(8)
    assert asked == [8] and first.depth_note is None and not evaluated.was_evaluated(first)
    second = ask(20)
    assert asked == [8] and second.depth_note.endswith("(helpers.symbolic)") and evaluated.was_evaluated(second)
    assert_same(second, obtain_concrete(_config("resnet18", 20, None)))
    assert ask(3).peak_allocated_bytes == obtain_concrete(_config("resnet18", 3, None)).peak_allocated_bytes
    assert asked == [8]
    one = ask(1)
    assert asked == [8, 1] and one.depth_note is None
    assert ask(1).depth_note.endswith("(helpers.symbolic)") and asked == [8, 1]


def test_a_single_question_is_concrete_and_the_third_point_evaluated(symbolic_logs):
    """Without ``many``: the first two points of a configuration concrete, the symbolic trace at the third (checked
    against the second answer), the fourth evaluated: :data:`helpers.evaluated.AT_POINT`."""
    from helpers import evaluated, models

    spec, asked = models.resolve_model("resnet18"), []

    def ask(batch_size: int):
        config = _config("resnet18", batch_size, None, image_size=32)  # 32 × 32 images: the rule, traced quickly
        return _answer(config, spec, asked)

    assert evaluated.AT_POINT == 3
    assert not evaluated.was_evaluated(ask(4)) and not evaluated.was_evaluated(ask(6)) and asked == [4, 6]
    third, fourth = ask(9), ask(13)
    assert asked == [4, 6] and evaluated.was_evaluated(third) and evaluated.was_evaluated(fourth)
    assert_same(fourth, obtain_concrete(_config("resnet18", 13, None, image_size=32)))


def test_a_checked_log_is_kept_on_disk_and_loaded_without_tracing(symbolic_logs, monkeypatch):
    """A log checked equal to a concrete answer is written to ``$GPU_MEMORY_SYMBOLIC_CACHE``; a new process (the
    logs in memory forgotten) answers its first question from it, no trace at all, equal to a concrete trace; a
    corrupt, foreign or truncated file is ignored and rewritten at the next checked log."""
    import pickle

    from helpers import evaluated, models, symbolic_store

    spec, asked = models.resolve_model("resnet18"), []

    def ask(batch_size: int):
        config = _config("resnet18", batch_size, None)
        return _answer(config, spec, asked, many=True)

    ask(8), ask(20)
    files = list(symbolic_logs.iterdir())
    assert [f.name for f in files] == [symbolic_store.name(_config("resnet18", 8, None))]
    evaluated.forget_kept()
    with monkeypatch.context() as patched:
        patched.setattr(evaluated, "trace", lambda *a, **k: pytest.fail("traced again"))
        loaded = ask(40)
    assert asked == [8] and evaluated.was_evaluated(loaded)
    assert_same(loaded, obtain_concrete(_config("resnet18", 40, None)))
    foreign = pickle.dumps(["not a log"])
    for content in (b"garbage", symbolic_store.MAGIC + b"\x80\x05trunc", symbolic_store.MAGIC + foreign,
                    symbolic_store.MAGIC + pickle.dumps(print)):
        files[0].write_bytes(content)
        evaluated.forget_kept()
        asked.clear()
        assert not evaluated.was_evaluated(ask(8)) and asked == [8]  # ignored, no traceback
    assert evaluated.was_evaluated(ask(20)) and files[0].read_bytes() != content  # the checked log rewritten
    evaluated.forget_kept()
    asked.clear()
    assert evaluated.was_evaluated(ask(12)) and asked == []


def test_logs_on_disk_can_be_moved_or_turned_off(monkeypatch, tmp_path):
    """``$GPU_MEMORY_SYMBOLIC_CACHE`` moves the directory or (``off``, ``0``) turns it off; unset, it is the user's
    cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``); the name depends on the configuration without batch and
    sequence, and on the package's code."""
    import os
    import pathlib

    from conftest import SYMBOLIC_LOGS
    from helpers import symbolic_store

    assert SYMBOLIC_LOGS == symbolic_store.VARIABLE  # the session's own directory (tests/conftest.py): hermetic
    assert pathlib.Path(os.environ[SYMBOLIC_LOGS]).name.startswith("symbolic-logs-")
    monkeypatch.setenv(symbolic_store.VARIABLE, str(tmp_path / "x"))
    assert symbolic_store.directory() == tmp_path / "x"
    for off in ("off", "0", ""):
        monkeypatch.setenv(symbolic_store.VARIABLE, off)
        assert symbolic_store.directory() is None
        assert symbolic_store.load(_config("resnet18", 8, None), None) == []
    monkeypatch.delenv(symbolic_store.VARIABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert symbolic_store.directory() == tmp_path / "cache" / "gpu-memory-lessons" / "symbolic"
    a, b = _config("gpt2", 2, 64), _config("gpt2", 7, 300)
    assert symbolic_store.name(a) == symbolic_store.name(b) != symbolic_store.name(a.replace(amp=True))
    assert len(symbolic_store.code_hash()) == 64


def test_profile_step_evaluates_a_later_batch_when_asked_to(monkeypatch):
    """With ``helpers.profile.EVALUATE`` on, :func:`helpers.profile.profile_step` asks
    :func:`helpers.evaluated.answer`: the first batch of a configuration concrete, a later one evaluated (and equal
    to a concrete trace); ``full_trace=True`` and ``workspaces=`` concrete."""
    import helpers.profile

    monkeypatch.setattr(helpers.profile, "EVALUATE", True)
    monkeypatch.setenv("GPU_MEMORY_SYMBOLIC_CACHE", "off")
    forget_kept()
    small = dict(image_size=32, device="simulated")  # ResNet18 on 32 × 32 images: convolutions, traced quickly
    first = profile_step("resnet18", 4, **small)
    assert first.depth_note is None
    with helpers.profile.many_points():
        later = profile_step("resnet18", 24, **small)
    assert later.depth_note == "traced once with symbolic sizes; evaluated at batch 24 (helpers.symbolic)"
    concrete = obtain_concrete(later.config)
    assert_same(later, concrete)
    assert later.cudnn_bound_bytes == concrete.cudnn_bound_bytes is not None
    full = profile_step("resnet18", 24, full_trace=True, **small)
    assert full.depth_note is None and full.peak_allocated_bytes == concrete.peak_allocated_bytes
    for batch_size in (4, 24):  # kernels' own bytes follow rules that compare sizes: a later batch traced too
        bound = profile_step("resnet18", batch_size, workspaces="bound", **small)
        assert bound.depth_note is None and bound.config.workspaces == "bound"
    assert bound.peak_allocated_bytes >= concrete.peak_allocated_bytes
    forget_kept()


def test_without_evaluate_a_kept_log_answers_and_no_new_trace_is_made(symbolic_logs, monkeypatch):
    """``helpers.profile.EVALUATE`` off (the default): plain questions make no symbolic trace, however many points;
    inside ``many_points`` one is made (checked against the last concrete answer); from then on, inside or not, the
    configuration's answers are evaluated from it, equal to concrete traces."""
    import helpers.profile
    from helpers import evaluated

    traces = []
    real = evaluated.trace
    monkeypatch.setattr(evaluated, "trace", lambda *a, **k: traces.append(a[0].batch_size) or real(*a, **k))
    assert helpers.profile.EVALUATE is False

    def ask(batch_size: int):
        return profile_step("resnet18", batch_size, image_size=32, device="simulated")

    plain = [ask(b) for b in (2, 3, 5)]
    assert traces == [] and not any(map(evaluated.was_evaluated, plain))
    with helpers.profile.many_points():
        searched = ask(7)
    assert traces == [7] and evaluated.was_evaluated(searched)
    later = ask(11)
    assert traces == [7] and evaluated.was_evaluated(later)
    assert_same(later, obtain_concrete(later.config))
