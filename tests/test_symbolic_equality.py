"""A step's profile evaluated from one symbolic trace (:meth:`helpers.symbolic.SymbolicStep.evaluate`) equals the
concrete one (:func:`helpers.profile.obtain_concrete`) at points drawn at random inside the region where its log holds,
for configurations across the course: every field of :data:`helpers.evaluated.COMPARED`, what a learner reads of a
profile (its table, summary and JSON), and the caching allocator's replay of its log (reserved bytes after the step,
peak reserved, segments asked from the driver, the allocator's whole trace), with the default settings and with
expandable segments (issue 50, item 2).  The evaluated log is asserted equal to the concrete one entry for entry, every
field of the same type, and the replay reads nothing but its log: the evaluated log is replayed under both settings,
and the concrete log, the same input, is not replayed.  Each comparison is made once (:func:`assert_exact`).

Each configuration is traced once at its first point with B (and S) symbolic; its points are drawn with
``random.Random(f"{SEED}:{name}")`` (the seed is in each test's id) until they fall inside the region
(:meth:`~helpers.symbolic.SymbolicStep.outside` is None).  Batch 1 is its own regime, traced with B fixed at 1 and S
symbolic; for Llama-3.1 8B LoRA and QLoRA, whose configurations are shipped with the package
(``helpers/symbolic_logs/``), batch 1's log is the shipped one (checked current, that is what today's code traces, by
``tests/test_shipped_logs.py``), evaluated at a drawn point and compared with a concrete trace; where the shipped
file also holds the batch > 1 regime (QLoRA), that log is the one compared, at its first point and a drawn one, not a
second one traced here from scratch (28 s of CPU): LoRA's batch > 1 regime, which is not shipped, is still traced
from scratch here (an 8B step written from symbolic 6- and 7-block traces), bitsandbytes' NF4 step from scratch in
the cheap tiny QLoRA case, and a shipped log is made again, and checked against a concrete answer, whenever the code
that traces changes (``tools/ship_symbolic_logs.py``; ``tests/test_shipped_logs.py`` fails until then).  The
guards each trace records are asserted as they are, so that a change in what the trace meets fails here; where the
region is narrower than the bounds (GPT-2's 1,024 learned positions, the Llama preset's 131,072, bitsandbytes' row
rule, the chunked loss), the guards say which points it leaves out, and the chunked loss's region is asserted point
by point; what is refused a symbolic trace is asserted by its message.  At batch 1 a batch > 1 log refuses to be
evaluated.  ResNet18's log has no guard (its points lie on both sides of the CPU kernels' batch rule) and GPT-2's
guard bounds its region: asserted on the cases' own traces (each configuration is traced once per session,
:func:`traced`), not on second traces of the same configurations in ``tests/test_symbolic.py``, as they were.

The cheap configurations (one-block Hugging Face configs, ResNet18 and AlexNet) run in ``make test``; MobileNetV2,
GPT-2, the Llama preset, SmolLM2, Qwen2.5 7B and Llama-3.1 8B in the slow group (``tests/conftest.py``).  A full-size
configuration is compared at its first point and one or two drawn points per regime: the evaluation at many points of
one regime is what ``tests/test_symbolic_property.py`` checks, over many small configurations.
"""

import random

import pytest
import sympy
import torch

from helpers import log_names, symbolic, symbolic_store
from helpers.allocator import replay
from helpers.config import StepConfig
from helpers.evaluated import answer, differs, forget_kept, remember
from helpers.models import OUTPUT_CHUNKS, resolve_model
from helpers.profile import obtain_concrete
from test_depth import _tiny

#: The seed of every draw of points (with the configuration's name).
SEED = 50
#: The allocator settings a replay is compared under: PyTorch's default, and expandable segments (lesson 06).
SETTINGS = (None, "expandable_segments:True")
_8B = "meta-llama/Llama-3.1-8B"
#: Llama-3.1 8B's LoRA step of lessons 09 and 09b (their STEP), shipped with the package (``helpers/symbolic_logs/``),
#: its batch 1 regime read from there (:func:`shipped`); with ``quantization="nf4", double_quant=True``, its QLoRA
#: step, both regimes.
_STEADY_CKPT = dict(amp=True, amp_dtype="bfloat16", param_dtype="bfloat16", lora_rank=16, checkpoint=1,
                    steady_state=True, optimizer="adamw", loss="next_token")
#: The guards of the chunked loss (:func:`helpers.models.chunked_output_loss`), as the trace at (3, 40) records them:
#: ``x.chunk(8, dim=1)`` of a symbolic sequence, whose chunk is ``ceil(S / 8)`` long; the log holds where the
#: sequence makes exactly 8 chunks, the last at least 2 long (:func:`_eight_chunks`).
CHUNKED_GUARDS = [
    "Eq(((S + (((S + 7)//8)) - 1)//(((S + 7)//8))), 8)", "S - 7*(((S + 7)//8)) >= 0", "Ne(((S + 7)//8), 1)",
    "Ne(64*S, 64*(((S + 7)//8)))", "Ne(64*S, 64*Max(1, ((S + 7)//8)))", "64 < 64*(((S + 7)//8))",
    "Ne(B*(((S + 7)//8)), B)", "Ne(Mod(B, B*(((S + 7)//8))), 0)", "Ne(64*B*S - 448*B*(((S + 7)//8)), 0)",
    "Ne(S - 7*(((S + 7)//8)), 1)", "Ne(64*S, 64*Max(1, S - 7*(((S + 7)//8))))", "Ne(B*S - 7*B*(((S + 7)//8)), -1)",
    "B*S - 7*B*(((S + 7)//8)) > -1", "1 < 64*S - 448*(((S + 7)//8))", "64 < 64*S - 448*(((S + 7)//8))",
    "Ne(64*B*S - 448*B*(((S + 7)//8)), 64*S - 448*(((S + 7)//8)))", "B*S - 7*B*(((S + 7)//8)) >= 0",
    "64*B*S - 448*B*(((S + 7)//8)) >= 2", "Eq(64*Max(1, S - 7*(((S + 7)//8))), 64*S - 448*(((S + 7)//8)))",
    "Ne(B*S - 7*B*(((S + 7)//8)), B)", "Ne(PythonMod(B, B*S - 7*B*(((S + 7)//8))), 0)",
    "Ne(S - 7*(((S + 7)//8)), 0)", "Ne(B*S - 7*B*(((S + 7)//8)), 1)", "Ne(S - 7*(((S + 7)//8)), -1)",
    "96*B*S - 672*B*(((S + 7)//8)) >= 2", "B*S - 7*B*(((S + 7)//8)) >= 2"]


class Case:
    """One configuration: its model and options, the first point (where it is traced), the ranges points are drawn
    from, how many (batch > 1, and batch 1 where it has a sequence), the guards its trace records (batch > 1 and batch
    1), how its log is made (a prefix of ``how``), and whether batch 1's log is the shipped one (``shipped_1``)."""

    def __init__(self, model, first: tuple, options: dict | None = None, *, batch=(2, 40), seq=(2, 160), points=3,
                 points_at_1: int = 2, guards=(), guards_at_1=None, how="traced once with symbolic sizes",
                 one: bool = True, shipped_1: bool = False):
        self.model, self.first, self.options, self.batch, self.seq = model, first, options or {}, batch, seq
        self.points, self.points_at_1, self.guards, self.how, self.one = points, points_at_1, list(guards), how, one
        self.guards_at_1 = self.guards if guards_at_1 is None else list(guards_at_1)
        self.shipped_1 = shipped_1

    def config(self, batch_size: int, seq_len: int | None) -> StepConfig:
        return StepConfig(model=self.model, batch_size=batch_size, device="simulated", **self.options,
                          **({} if seq_len is None else {"seq_len": seq_len}))


_WRITTEN = "written exactly from its steps with 6 and 7 blocks (helpers.depth), traced once with symbolic sizes"
#: Cheap configurations (``make test``): each a few seconds, one or two drawn points.
CHEAP = {
    # traced at 8, drawn from 16 up: both sides of oneDNN's batch rule (helpers.symbolic_sizes.no_cpu_kernel_choice)
    "ResNet18 by batch, SGD with momentum": Case("resnet18", (8, None), batch=(16, 200), points=2),
    "AlexNet by batch, AMP float16": Case("alexnet", (4, None), dict(amp=True), points=1, one=False),
    "tiny Llama, AMP float16 (GradScaler), AdamW, steady state": Case(
        _tiny(layers=1), (3, 40), dict(amp=True, optimizer="adamw", steady_state=True), points=1, one=False),
    "tiny Llama with tied embeddings (as SmolLM2), AMP bfloat16, gradient accumulation": Case(
        _tiny(layers=1, tied=True), (3, 40), dict(amp=True, amp_dtype="bfloat16", accumulation_steps=2), points=1,
        one=False),
    "tiny Qwen2, LoRA, checkpointing, bfloat16 parameters": Case(
        _tiny("qwen2", layers=1, kv_heads=4), (3, 40), dict(param_dtype="bfloat16", lora_rank=4, checkpoint=1),
        points=1, one=False),
    "tiny Llama, checkpoints offloaded to the CPU": Case(_tiny(layers=1), (3, 40), dict(checkpoint=1, offload=True),
                                                        points=1, one=False),
    "tiny Llama, the chunked loss": Case(_tiny(layers=1), (3, 40), dict(loss="chunked"), guards=CHUNKED_GUARDS,
                                         points=1, one=False),
    "tiny Llama, QLoRA (bitsandbytes' NF4)": Case(
        _tiny(layers=1), (3, 40), dict(amp=True, amp_dtype="bfloat16", quantization="nf4", lora_rank=4),
        guards=["B*S > 4"], guards_at_1=["S > 4"], points=1),
}
#: Full-size configurations (the slow group): the 7-8B steps written from shallow symbolic traces.  One drawn point in
#: batch 1's regime; Llama-3.1 8B's, two points in all per regime, its batch 1 log the shipped one (the module's text).
FULL = {
    "MobileNetV2 by batch, AMP float16": Case("mobilenet_v2", (4, None), dict(amp=True), one=False),
    "GPT-2 124M, batch and sequence": Case("gpt2", (4, 128), guards=["S <= 1024"], seq=(2, 1100), points_at_1=1),
    "the Llama preset (Llama-3 8B in plain PyTorch), bfloat16 parameters and autocast": Case(
        "llama3-8b", (2, 256), dict(amp=True, amp_dtype="bfloat16", param_dtype="bfloat16"),
        batch=(2, 4), seq=(16, 2048), points=2, points_at_1=1, how=_WRITTEN,
        guards=["S <= 131072"]),  # Llama.forward refuses longer
    # written since canonical() decides Max(1, ...) (test_equal_sizes_are_written_alike_...); traced in full before
    "SmolLM2-135M (tied embeddings), AdamW": Case("HuggingFaceTB/SmolLM2-135M", (2, 128), dict(optimizer="adamw"),
                                                  batch=(2, 8), seq=(16, 2048), points=2, points_at_1=1, how=_WRITTEN),
    "Qwen2.5 7B, bfloat16 parameters and autocast, AdamW": Case(
        "Qwen/Qwen2.5-7B", (2, 256), dict(amp=True, amp_dtype="bfloat16", param_dtype="bfloat16", optimizer="adamw"),
        batch=(2, 4), seq=(16, 2048), points=2, points_at_1=1, how=_WRITTEN),
    "Llama-3.1 8B LoRA, checkpointing, steady state": Case(
        _8B, (2, 512), _STEADY_CKPT, batch=(2, 4), seq=(16, 4096), points=1, points_at_1=1, how=_WRITTEN,
        shipped_1=True),
    "Llama-3.1 8B QLoRA (NF4, double quantization), checkpointing, steady state": Case(
        _8B, (2, 512), dict(_STEADY_CKPT, quantization="nf4", double_quant=True), batch=(2, 4), seq=(16, 4096),
        points=1, points_at_1=1, guards=["B*S > 4"], guards_at_1=["S > 4"], how=_WRITTEN, shipped_1=True),
}


def _at(config: StepConfig, batch_size: int, seq_len: int | None) -> StepConfig:
    return config.replace(batch_size=batch_size, **({} if seq_len is None else {"seq_len": seq_len}))


def draw(step: symbolic.SymbolicStep, rng: random.Random, n: int, batch: tuple, seq: tuple) -> list[tuple]:
    """``n`` distinct points (batch, sequence or None) drawn from ``batch`` x ``seq`` (the symbols', a fixed size
    as traced) until each is inside ``step``'s region."""
    config, points = step.config, []
    for _ in range(100 * n):
        b = rng.randint(*batch) if "B" in step.symbols else config.batch_size
        s = rng.randint(*seq) if "S" in step.symbols else config.seq_len
        if step.outside(_at(config, b, s)) is None and (b, s) not in points:
            points.append((b, s))
        if len(points) == n:
            return points
    raise AssertionError(f"fewer than {n} points inside the region of {step.config}: {points}")


def learner_sees(profile, replayed: bool = True) -> dict:
    """What a learner reads of a profile: its JSON, table, summary and what is live at its peak; ``replayed``, its log
    replayed by the caching allocator under each of :data:`SETTINGS` too: memory reserved after the step, peak reserved
    and allocated, segments asked from the driver, the whole trace."""
    seen = {"to_dict": profile.to_dict(), "table": profile.table(), "summary": profile.summary(),
            "at_peak": profile.at_peak()}
    for settings in SETTINGS if replayed else ():
        run = replay(profile.allocation_log, settings=settings)
        seen[settings] = (run.error, run.reserved[-1], run.peak_reserved, run.peak_allocated, run.segments_opened(),
                          run.allocator.trace)
    return seen


def assert_exact(step: symbolic.SymbolicStep, config: StepConfig, where: str) -> None:
    """At ``config``'s point: the evaluated profile equals the concrete one in every compared field, field by field,
    and in what a learner sees of it (:func:`learner_sees`).

    Each claim is asserted once.  :func:`helpers.evaluated.differs` compares every field of
    :data:`helpers.evaluated.COMPARED` (``==``'s verdict; the events faster, ``tests/test_symbolic.py`` checks it
    against ``!=`` field by field): ``test_depth.FIELDS``, the configuration itself, and the logs, equal lists of
    :class:`helpers.record.Allocation` entry for entry; each entry's fields are of the same type (an int, never a sympy
    or numpy number equal to it).  What a reader of the events' live storages gets
    (:meth:`~helpers.record.StepProfile.kept_between`) is compared, and what a learner sees.
    :func:`helpers.allocator.replay` reads nothing but its log: the evaluated log's replays under :data:`SETTINGS`
    are what the concrete log's would be, so only the evaluated one is replayed (and must run to the end, its peak
    reserved at least the peak allocated).  (``test_depth.assert_same`` is not called here: it compares the same
    fields again, and replays the log under the default settings a third time.)"""
    assert step.outside(config) is None, (where, step.outside(config))
    evaluated, concrete = step.evaluate(config), obtain_concrete(config)
    assert evaluated.depth_note.endswith("(helpers.symbolic)"), evaluated.depth_note
    field = differs(evaluated, concrete)
    assert field is None, (where, field)
    assert type(evaluated.allocation_log) is list and type(concrete.allocation_log) is list
    assert [tuple(map(type, e)) for e in evaluated.allocation_log] == [tuple(map(type, e))
                                                                       for e in concrete.allocation_log], where
    middle = len(concrete.events) // 2  # what a reader of the events' live storages gets (evaluated: worked out)
    assert evaluated.kept_between(evaluated.events[0], evaluated.events[middle]) == concrete.kept_between(
        concrete.events[0], concrete.events[middle]), where
    a, b = learner_sees(evaluated), learner_sees(concrete, replayed=False)
    assert all(a[settings][0] is None for settings in SETTINGS), where
    assert a[None][2] >= concrete.peak_allocated_bytes, where  # peak reserved, peak allocated
    assert set(a) == set(b) | set(SETTINGS)
    for name in b:
        assert a[name] == b[name], (where, name)


_TRACED: dict = {}


def traced(config: StepConfig) -> symbolic.SymbolicStep:
    """``config``'s step traced with symbolic sizes, once per test session (the chunked loss's, ResNet18's and GPT-2's
    are asked twice)."""
    if repr(config) not in _TRACED:  # a Hugging Face config dict: not hashable
        _TRACED[repr(config)] = symbolic.trace(config)
    return _TRACED[repr(config)]


def shipped(config: StepConfig) -> list[symbolic.SymbolicStep]:
    """The symbolic steps of ``config``'s configuration shipped with the package (``helpers/symbolic_logs/``, read
    alone: no other directory), each regime met."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(log_names.VARIABLE, str(log_names.SHIPPED))
        steps = symbolic_store.load(config, resolve_model(config.model))
    assert steps, f"no shipped log of {config}: run `make symbolic-logs` (tools/ship_symbolic_logs.py)"
    return steps


def check_case(name: str, case: Case) -> None:
    """Trace ``case`` once at its first point (B symbolic, and S for tokens), or (``shipped_1``, where the shipped file
    holds that regime) read its shipped log, assert its guards, region and how its log is made, and compare evaluated
    and concrete profiles at its first point and at drawn points; then the same in batch 1's regime (S symbolic), its
    log traced or (``shipped_1``) the shipped one."""
    rng = random.Random(f"{SEED}:{name}")
    first = case.config(*case.first)
    logs = shipped(_at(first, 1, case.first[1])) if case.shipped_1 else []
    step = next((s for s in logs if not s.fixed), None) or traced(first)  # shipped: the lesson's (QLoRA's)
    tokens = first.seq_len is not None
    assert step.how.startswith(case.how), step.how
    assert step.fixed == () and set(step.symbols) == ({"B", "S"} if tokens else {"B"})
    assert step.guards_named() == case.guards
    drawn = draw(step, rng, case.points, case.batch, case.seq if tokens else None)
    for point in [case.first, *drawn]:
        assert_exact(step, _at(first, *point), f"{name}, seed {SEED}, point {point} of {drawn}")
    if case.one:
        at_1 = _at(first, 1, case.first[1])
        assert step.outside(at_1) == "B = 1 is its own program (another regime)"
        with pytest.raises(symbolic.NotSymbolic, match="own program"):
            step.evaluate(at_1)
        if case.shipped_1:
            (one,) = [s for s in logs if s.fixed]
        else:
            one = symbolic.trace(at_1)
        assert one.how.startswith(case.how), one.how
        assert one.fixed == ("B",) and set(one.symbols) == ({"S"} if tokens else set())
        assert one.guards_named() == case.guards_at_1
        drawn = draw(one, rng, case.points_at_1 if tokens else 1, (1, 1), case.seq)
        for point in drawn:
            assert_exact(one, _at(first, *point), f"{name}, batch 1, seed {SEED}, point {point} of {drawn}")


@pytest.mark.parametrize("name", CHEAP, ids=[f"{n}, seed {SEED}" for n in CHEAP])
def test_a_cheap_step_evaluated_equals_its_concrete_trace(name):
    check_case(name, CHEAP[name])


@pytest.mark.parametrize("name", FULL, ids=[f"{n}, seed {SEED}" for n in FULL])
def test_a_full_size_step_evaluated_equals_its_concrete_trace(name):
    check_case(name, FULL[name])


def test_resnet18s_log_has_no_guard_and_a_bound_per_convolution_pass():
    """ResNet18 by batch (the cheap case's trace): no guard, the oneDNN rule ``B >= 16`` kept out of the trace (the
    case's points, traced at 8 and drawn from 16 up, are exact on both sides of it); B's whole range; one cuDNN
    workspace bound per convolution and pass; storages whose bytes are polynomials in B."""
    case = CHEAP["ResNet18 by batch, SGD with momentum"]
    step = traced(case.config(*case.first))
    assert step.guards == () and step.fixed == () and set(step.symbols) == {"B"}
    assert step.ranges == {"B": (symbolic.LOW, symbolic.HIGH)} == {"B": (2, 2**31 - 1)}
    assert len(step.conv_bytes) == 3 * 20 - 1  # 20 convolutions, 3 passes each (the stem's input: no gradient)
    assert any(isinstance(s[3], sympy.Expr) and step.symbols["B"] in s[3].free_symbols for s in step.storages)


def test_a_guard_bounds_the_region():
    """GPT-2's learned positions stop at 1,024 (the full-size case's trace): the trace records ``S <= 1024``, which
    narrows S's range, and a longer sequence is outside."""
    case = FULL["GPT-2 124M, batch and sequence"]
    step = traced(case.config(*case.first))
    assert step.guards_named() == ["S <= 1024"]
    assert step.ranges["S"] == (symbolic.LOW, 1024)
    assert step.outside(_at(step.config, 2, 1025)) == "S = 1025 is outside the range [2, 1024] where the log holds"
    assert step.outside(_at(step.config, 2, 1024)) is None
    assert step.outside(step.config.replace(amp=True)) == "another configuration than the one traced"


def _eight_chunks(seq_len: int) -> bool:
    """``x.chunk(8, dim=1)`` of a sequence this long gives 8 chunks, the last at least 2 long."""
    chunks = torch.empty(seq_len, device="meta").chunk(OUTPUT_CHUNKS)
    return len(chunks) == OUTPUT_CHUNKS and chunks[-1].numel() >= 2


def test_the_chunked_loss_holds_where_the_sequence_makes_eight_chunks():
    """The chunked loss's region, exactly: its 26 guards and S's range [9, 2**31 - 1] hold at a point just where the
    sequence splits into 8 chunks whose last is at least 2 long (from S = 16; every S from 58 up), whatever the batch:
    elsewhere the log's number of chunks would differ, a chunk of 1 is specialized, and the log says which guard
    fails there and refuses to be evaluated."""
    case = CHEAP["tiny Llama, the chunked loss"]
    step = traced(case.config(*case.first))
    assert step.guards_named() == CHUNKED_GUARDS and step.ranges == {"B": (2, symbolic.HIGH), "S": (9, symbolic.HIGH)}
    inside = [s for s in range(2, 400) if step.outside(case.config(3, s)) is None]
    assert inside == [s for s in range(2, 400) if _eight_chunks(s)] and inside[:3] == [16, 23, 24]
    assert [s for s in range(2, 400) if s not in inside] == [*range(2, 16), *range(17, 23), *range(25, 30), 33, 34,
                                                              35, 36, 41, 42, 43, 49, 50, 57]
    for b in (2, 64):
        assert [s for s in range(2, 100) if step.outside(case.config(b, s)) is None] == [s for s in inside if s < 100]
    assert step.outside(case.config(3, 8)) == "S = 8 is outside the range [9, 2147483647] where the log holds"
    assert step.outside(case.config(3, 17)) == ("the guard Eq(((S + (((S + 7)//8)) - 1)//(((S + 7)//8))), 8) that "
                                                "the symbolic trace recorded is false there")  # 6 chunks of 3
    with pytest.raises(symbolic.NotSymbolic, match="the guard .* is false there"):
        step.evaluate(case.config(3, 57))  # 8 chunks, the last of 1


def test_what_is_refused_a_symbolic_trace_says_why_and_is_answered_concretely(tmp_path):
    """Each option whose step cannot be traced with symbolic sizes, and its one-line reason; the profile layer's
    answer for it is the concrete one, its note saying why."""
    refused = {
        "a simulated capacity (capacity=) stops the step where it runs out, a comparison of sizes": dict(
            capacity=8 * 2**30),
        "a full trace was asked for (full_trace=True)": dict(full_trace=True),
        "kernels' own bytes (workspaces=) follow rules that compare sizes": dict(workspaces="bound"),
        "its inputs are made by a function (inputs=), not by a batch size": dict(
            inputs=_images, loss=_summed),
    }
    for why, options in refused.items():
        config = StepConfig(model="resnet18", batch_size=4, device="simulated", **options)
        with pytest.raises(symbolic.NotSymbolic) as caught:
            symbolic.trace(config)
        assert str(caught.value) == why
    forget_kept()
    spec, config = resolve_model("resnet18"), StepConfig(model="resnet18", batch_size=4, device="simulated",
                                                         inputs=_images, loss=_summed)
    for batch_size in (4, 6):  # many points: the second is due a symbolic trace (evaluated.AT_POINT_WHEN_MANY);
        config = config.replace(batch_size=batch_size)  # it is refused, so the answer is concrete, with the reason
        concrete = obtain_concrete(config)
        got = answer(config, spec, many=True)  # None: the profile layer's concrete answer, then remember()
        got = got if got is not None else remember(config, obtain_concrete(config))
        assert differs(got, concrete) is None and (got.depth_note is None) == (batch_size == 4)
    assert got.depth_note == ("not evaluated from a symbolic log: its inputs are made by a function (inputs=), not "
                              "by a batch size")
    forget_kept()


def _images(batch_size: int, device):
    """A learner's ``inputs=``: ``batch_size`` 32x32 images."""
    return torch.zeros(batch_size, 3, 32, 32, device=device)


def _summed(output: torch.Tensor) -> torch.Tensor:
    """A learner's ``loss=``: the output summed."""
    return output.sum()



def test_equal_sizes_are_written_alike_where_the_range_decides_max_and_min():
    """The regression of SmolLM2's symbolic trace, which found two middle blocks different and traced all 30 blocks:
    the memory-efficient attention's log-sum-exp (batch, 9 heads, ``32 * ceil(S / 32)``) float32 is
    ``36*B*Max(1, 32*c) - 4*Max(1, 32*c) + 128*c`` bytes in one block and ``1152*B*c`` in the next, equal at every
    point; :func:`helpers.symbolic_sizes.canonical` now writes both as the second.  A ``Max`` or ``Min`` that the
    range [2, 2**31 - 1] does not decide is kept."""
    from torch.utils._sympy.functions import CeilToInt, IntTrueDiv, Max, Min

    from helpers.symbolic_sizes import canonical

    b, s = (sympy.Symbol(name, positive=True, integer=True) for name in ("s0", "s1"))
    c = CeilToInt(IntTrueDiv(s, 32))
    assert canonical(36 * b * Max(1, 32 * c) - 4 * Max(1, 32 * c) + 128 * c) == canonical(1152 * b * c) == 1152 * b * c
    assert canonical(Max(1, s - 1) + Min(2, b)) == s + 1 and canonical(Max(s - 3, 0)) == Max(s - 3, 0)
    assert canonical(Max(b, s)) == Max(b, s) and canonical(sympy.Max(1, b * s)) == b * s
    point = {b: 3, s: 70}
    for expr in (36 * b * Max(1, 32 * c) - 4 * Max(1, 32 * c) + 128 * c, Max(1, s - 1) + Min(2, b)):
        assert int(canonical(expr).xreplace(point)) == int(expr.xreplace(point))
