"""A step traced once with symbolic batch and sequence (:mod:`helpers.symbolic`), evaluated at points drawn at random
inside the region where its log holds, equals the concrete step there: every field of the profile, the allocation log
entry for entry, and the allocator's replay (reserved memory) byte for byte (issue 50).  Here: what is refused a
symbolic trace, how the profile layer asks for one (:mod:`helpers.evaluated`: concrete first, then evaluated once
checked; logs on disk), and :func:`helpers.evaluated.differs`, which gives the verdict of ``!=`` field by field.

Every configuration's trace compared with concrete traces at drawn points is ``tests/test_symbolic_equality.py``'s,
where each is traced once per session: ResNet18 by batch, both sides of the CPU kernels' batch rule (traced at 8,
drawn from 16 up), its batch 1 regime (its own program, refused by the batch > 1 log), and the log's own facts (no
guard, B's whole range, one workspace bound per convolution pass), which were asserted here on a second trace of the
same configuration; GPT-2's guard ``S <= 1024``, which bounds the region, likewise (its slow full-size case's trace);
the full-size steps (Llama-3.1 8B LoRA and QLoRA, batch 1 included).  A LoRA step with checkpointing in steady state
written from its shallow symbolic traces (:mod:`helpers.depth`) is its Llama-3.1 8B LoRA case, the same options
(bfloat16 autocast and parameters) at full size: the tiny one that was here (8 blocks written from the same 6- and
7-block symbolic traces, half a minute) asserted nothing that case does not.
"""

import dataclasses

import pytest

from helpers import symbolic
from helpers.config import StepConfig
from helpers.profile import forget_kept, obtain_concrete, profile_step
from test_depth import assert_same


def _config(model, batch_size: int, seq_len: int | None, **options) -> StepConfig:
    return StepConfig(model=model, batch_size=batch_size, device="simulated",
                      **({} if seq_len is None else {"seq_len": seq_len}), **options)


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


def test_differs_gives_the_verdict_of_the_plain_comparison():
    """:func:`helpers.evaluated.differs` names the first field of :data:`helpers.evaluated.COMPARED` where ``!=``
    holds (None where none does), as the plain comparison does, for profiles equal and perturbed: an evaluated
    profile (its events' live storages worked out when read, :class:`helpers.written._LiveAt`) against a concrete one
    (tuples), either way round, against another evaluation whose live storages are new objects, and with one event's
    live storages, another field of an event, the list of events, or another field of the profile changed, each live
    storage as a tuple, a ``_LiveAt`` or a list (which a ``_LiveAt`` equals and a tuple does not)."""
    from helpers import evaluated as module
    from helpers.written import _LiveAt

    def plain(a, b):
        return next((name for name in module.COMPARED if getattr(a, name) != getattr(b, name)), None)

    config = _config("mlp", 4, None)
    step = symbolic.trace(config)
    ev, co = step.evaluate(config.replace(batch_size=6)), obtain_concrete(config.replace(batch_size=6))
    assert type(ev.events[1].live) is _LiveAt and type(co.events[1].live) is tuple and len(co.events[1].live) > 1

    def anew(live, k):  # a _LiveAt of its own holding ``live``'s serials
        return _LiveAt([None, None, {k: tuple(live)}], k)

    other = dataclasses.replace(ev, events=[dataclasses.replace(e, live=anew(e.live, e.index)) for e in ev.events])
    pairs = [(ev, co), (co, ev), (ev, other), (other, co), (co, co), (ev, ev)]
    k = next(i for i, e in enumerate(co.events) if len(e.live) > 1)
    for base in (ev, co, other):
        live = tuple(base.events[k].live)
        changed = (live[:-1] + (live[-1] + 1,), live[:-1], list(live), live)
        for to in [*changed, *(anew(c, k) for c in changed[:2])]:
            events = [*base.events[:k], dataclasses.replace(base.events[k], live=to), *base.events[k + 1:]]
            pairs += [(dataclasses.replace(base, events=events), p) for p in (ev, co)]
        for events in (base.events[:-1], base.events[::-1], [*base.events[:k], dataclasses.replace(
                base.events[k], allocated_bytes=base.events[k].allocated_bytes + 512), *base.events[k + 1:]],
                       tuple(base.events)):
            pairs += [(dataclasses.replace(base, events=events), p) for p in (ev, co)]
        pairs += [(dataclasses.replace(base, peak_allocated_bytes=base.peak_allocated_bytes + 512), co),
                  (dataclasses.replace(base, allocation_log=base.allocation_log[:-1]), co),
                  (dataclasses.replace(base, config=base.config.replace(amp=True)), co),
                  (dataclasses.replace(base, depth_note="another"), co)]
    verdicts = [(module.differs(a, b), plain(a, b)) for a, b in pairs]
    assert all(got == want for got, want in verdicts), verdicts
    assert {want for _, want in verdicts} == {None, "events", "config", "peak_allocated_bytes", "allocation_log"}
