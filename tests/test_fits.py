"""One meaning of "fits" (issue 22): every widget, the command line and profile_step agree.

helpers.gpus.judge is the rule; the widgets (MemoryExplorer, WillItFit,
SequenceExplorer) and ``python -m helpers profile`` (helpers.batch.card_verdicts)
must give its verdict on the whole steady-state step that profile_step traces.
"""

import json
import random

import pytest

from helpers import profile_step
from helpers.__main__ import main
from helpers.batch import card_verdicts
from helpers.batch import Estimate, reserved_estimate
from helpers.gpus import (BASIS, CACHE_ALLOWANCE_BYTES, CUDA_CONTEXT_BYTES, CUDA_OVERHEAD_BYTES, GPU_CARDS, fits,
                          judge)
from helpers.teaching.widgets import PRECISIONS, MemoryExplorer, SequenceExplorer, WillItFit
from helpers.transformer import transformer_step
from helpers.units import GiB, MiB


def test_one_overhead_model_named_in_one_place():
    assert CUDA_OVERHEAD_BYTES == CUDA_CONTEXT_BYTES + CACHE_ALLOWANCE_BYTES == 1 * GiB
    by_allocated = judge(16 * GiB, 15 * GiB)
    assert by_allocated.fits and by_allocated.need == 16 * GiB and by_allocated.judged == BASIS["allocated"]
    assert not judge(16 * GiB, 15 * GiB + 1).fits and fits(15 * GiB, 16 * GiB) and not fits(15 * GiB + 1, 16 * GiB)
    by_reserved = judge(16 * GiB, 10 * GiB, peak_reserved=15 * GiB + 512 * MiB, reserved=True)
    assert by_reserved.fits and by_reserved.need == 16 * GiB and by_reserved.overhead == CUDA_CONTEXT_BYTES
    assert BASIS == {"allocated": "peak allocated of the whole step + 1,024.0 MiB assumed overhead",
                     "reserved": "peak reserved of the whole step (simulated allocator) + 512.0 MiB assumed "
                                 "CUDA context"}
    ran_out = judge(16 * GiB, 10 * GiB, peak_reserved=None, reserved=True)  # the replay ran out of memory
    assert not ran_out.fits and ran_out.need is None
    assert ran_out.sentence("V100 16 GB", "tried to allocate 2.0 MiB") == (
        "does not fit in V100 16 GB: peak reserved of the whole step (simulated allocator) + 512.0 MiB assumed "
        "CUDA context: the simulated allocator ran out of memory within 16,384.0 - 512.0 = 15,872.0 MiB (tried to "
        "allocate 2.0 MiB)")  # issue 52.17: the room it had, in numbers, not a formula without them
    on_card = judge(GPU_CARDS["RTX 4090 24 GB"], 10 * GiB, peak_reserved=None, reserved=True)
    assert on_card.sentence("RTX 4090 24 GB", unit="GiB").endswith(
        f"ran out of memory within {GPU_CARDS['RTX 4090 24 GB'] / GiB:,.1f} - 0.5 = "
        f"{(GPU_CARDS['RTX 4090 24 GB'] - CUDA_CONTEXT_BYTES) / GiB:,.1f} GiB, before the 0.02 GiB of cuBLAS workspaces")
    with pytest.raises(ValueError, match="needs peak_allocated"):
        judge(16 * GiB)
    with pytest.raises(ValueError, match="a peak must be >= 0 bytes, got -1"):
        judge(16 * GiB, -1)


def _draw(rng: random.Random) -> dict:
    """One random configuration of one widget, with the options of profile_step and of the CLI that match it."""
    card = rng.choice(list(GPU_CARDS))
    kind = rng.choice(["memory", "memory", "will", "sequence", "sequence"])
    amp = rng.random() < 0.6
    if kind == "memory":
        model = rng.choice(["resnet18", "gpt2"])
        top = {"resnet18": 1024, "gpt2": 48}[model]
        batch = rng.randint(1, top)
        checkpoint = rng.choice([0, 0, 2, 4]) if model == "resnet18" else 0  # segments: sequential models only
        optimizer, reserved = rng.choice(["sgd-momentum", "adam"]), rng.random() < 0.3
        make = lambda: MemoryExplorer(model=model, batch_size=batch, max_batch_size=top, amp=amp,  # noqa: E731
                                      checkpoint=checkpoint, optimizer=optimizer, capacity=card,
                                      device="simulated", reserved=reserved)
        step = dict(model=model, batch_size=batch, amp=amp, checkpoint=checkpoint, optimizer=optimizer)
        cli = ["--model", model, "--batch-size", str(batch), "--checkpoint", str(checkpoint), "--optimizer",
               optimizer, *(["--amp"] if amp else []), *(["--reserved"] if reserved else [])]
    elif kind == "will":
        model = rng.choice(["gpt2", "resnet18"])
        size = rng.choice([128, 256, 512, 1024] if model == "gpt2" else [64, 128, 224])
        top = 32 if model == "gpt2" else 512
        batch, optimizer = rng.randint(1, top), rng.choice(["sgd", "adam", "adamw"])
        precision = rng.choice(list(PRECISIONS))
        dtype, reserved = PRECISIONS[precision], False
        make = lambda: WillItFit(model=model, batch_size=batch, max_batch_size=top, optimizer=optimizer,  # noqa: E731
                                 precision=precision, size=size, capacity=card, device="simulated")
        sized = {"seq_len": size} if model == "gpt2" else {"image_size": size}
        step = dict(model=model, batch_size=batch, optimizer=optimizer, amp=dtype is not None,
                    amp_dtype=dtype or "float16", **sized)
        cli = ["--model", model, "--batch-size", str(batch), "--optimizer", optimizer,
               "--seq-len" if model == "gpt2" else "--image-size", str(size),
               *(["--amp", "--amp-dtype", dtype] if dtype else [])]
    else:
        seq, batch = rng.choice([512, 1024, 2048, 4096, 8192]), rng.randint(1, 32)
        policy, attention = rng.choice(["none", "none", "full", "selective"]), rng.choice(["math", "flash"])
        reserved = False
        make = lambda: SequenceExplorer(model="gpt2", seq=seq, batch_size=batch, amp=amp, policy=policy,  # noqa: E731
                                        attention=attention, capacity=card)
        step = transformer_step("gpt2", seq, batch, amp=amp, attention=attention, policy=policy)
        # the command line has no checkpointing policy, and GPT-2's context is 1024 tokens there
        cli = (["--model", "gpt2", "--batch-size", str(batch), "--seq-len", str(seq), "--attention", attention,
                "--optimizer", "adam", *(["--amp"] if amp else [])] if policy == "none" and seq <= 1024 else None)
    return dict(kind=kind, card=card, make=make, step=step, cli=cli, reserved=reserved)


#: What the random configurations must have covered between them: each widget with each of its models, the command
#: line beside each widget, the memory explorer with checkpointing and Will it fit? with AMP, both bases of a verdict
#: (the simulated allocator's peak reserved, the peak allocated) and both answers.
COVERED = {("memory", "gpt2"), ("memory", "resnet18"), ("will", "gpt2"), ("will", "resnet18"), ("sequence", "gpt2"),
           ("command line", "memory"), ("command line", "will"), ("command line", "sequence"),
           ("memory", "checkpointing"), ("will", "AMP"), "reserved", "allocated", "fits", "does not fit"}


def test_every_widget_judges_as_profile_step_and_the_command_line(capsys):
    """Random configurations, each judged by its widget, by profile_step and by the command line, drawn until they
    have covered :data:`COVERED` (at most 16 draws).  Its seed, 146, covers it in 5 draws: seed 22's 16 covered it
    too, each draw after the first dozen repeating a kind of configuration already checked, at 3 to 9 s of CPU each
    (58 s in all; :data:`COVERED` is what the claim needs, not a count)."""
    rng = random.Random(146)
    seen, draws = set(), 0
    while draws < 16 and not COVERED <= seen:
        draw = _draw(rng)
        draws += 1
        card, capacity = draw["card"], GPU_CARDS[draw["card"]]
        step = draw["step"]
        profile = (profile_step(step) if not isinstance(step, dict) else
                   profile_step(**step, steady_state=True, device="simulated"))
        truth = (reserved_estimate(profile, capacity) if draw["reserved"] else Estimate.of(profile)).verdict(capacity, card)
        widget = draw["make"]()
        shown = widget.result.verdict(capacity, card)
        where = (draw["kind"], card, step)
        assert shown.fits == truth.fits and shown.basis == truth.basis, where
        assert (shown.need is None) == (truth.need is None), where
        if truth.need is not None:  # interpolated between traced batch sizes: each tensor's 512-byte rounding
            assert abs(shown.need - truth.need) <= 4096, where
        # the same sentence as the command line's, in the widget's unit (GiB for lessons 05b and 08)
        assert widget.message == truth.sentence(card, widget.result.allocator_error or "", unit=widget.UNIT) or (
            widget.result.traced is False and widget.message.split(" = ")[0] == truth.sentence(
                card, unit=widget.UNIT).split(" = ")[0]), where
        assert f'data-fits="{str(truth.fits).lower()}"' in widget.view.value
        # the command line's verdict function, on the same step
        assert card_verdicts(profile, draw["reserved"])[card] == truth, where
        if draw["cli"] is not None:  # and the command line itself, run in-process
            assert main(["profile", "--device", "simulated", "--steady-state", "--json", *draw["cli"]]) == 0
            out = json.loads(capsys.readouterr().out)
            assert out["peak_allocated_bytes"] == profile.peak_allocated_bytes, where
            assert out["fits"]["cards"][card] == truth.fits and out["fits"]["judged"] == truth.judged, where
            seen.add(("command line", draw["kind"]))
        options = step if isinstance(step, dict) else {"model": "gpt2"}  # the sequence widget's GPT-2
        seen |= {(draw["kind"], options["model"]), truth.basis, "fits" if truth.fits else "does not fit"}
        if options.get("checkpoint"):
            seen.add((draw["kind"], "checkpointing"))
        if options.get("amp"):
            seen.add((draw["kind"], "AMP"))
    assert COVERED <= seen, f"{draws} draws left {COVERED - seen} unchecked"


def test_a_verdict_in_gib_says_the_same_in_another_unit():
    from helpers.gpus import GPU_CARDS, judge

    v = judge(GPU_CARDS["H100 80 GB"], 153_165 * 2**20)
    # a capacity of GPU_CARDS is that card: its two cuBLAS workspaces are a line of the verdict
    assert v.sentence("H100 80 GB") == ("does not fit in H100 80 GB: peak allocated of the whole step + 1,024.0 MiB "
                                        "assumed overhead + cuBLAS workspaces = 153,165.0 + 1,024.0 + 64.0 = "
                                        "154,253.0 MiB > 81,089.0 MiB")
    assert v.sentence("H100 80 GB", unit="GiB") == ("does not fit in H100 80 GB: peak allocated of the whole step + "
                                                    "1.0 GiB assumed overhead + cuBLAS workspaces = 149.6 + 1.0 + 0.06 "
                                                    "= 150.6 GiB > 79.2 GiB")
    with pytest.raises(ValueError, match="unit must be 'MiB' or 'GiB'"):
        v.sentence("H100 80 GB", unit="GB")


def test_a_verdict_with_almost_no_margin_is_tight():
    """One rule beside "fits" (helpers.gpus.TIGHT_FRACTION): under 5% of the card to spare is "fits, tight",
    said with what is spare and why it is too little, in the sentence every widget shows and in the CLI."""
    from helpers.__main__ import _fits_lines
    from helpers.gpus import TIGHT_FRACTION, TIGHT_REASON

    v100 = GPU_CARDS["V100 16 GB"]
    workspaces = 2 * 8_519_680  # two cuBLAS handles on a V100
    issue = judge(v100, round(16_070.7 * MiB) - CUDA_OVERHEAD_BYTES - workspaces)  # issue 34's 16,070.7 <= 16,160
    assert issue.fits and issue.tight and issue.answer == "fits, tight"
    assert issue.sentence("V100 16 GB") == (
        "fits in V100 16 GB, tight: peak allocated of the whole step + 1,024.0 MiB assumed overhead + cuBLAS "
        "workspaces = 15,030.4 + 1,024.0 + 16.2 = 16,070.7 MiB <= 16,160.0 MiB (tight: 89.3 MiB to spare, under "
        f"5% of the card; {TIGHT_REASON})")
    edge = judge(v100, v100 - CUDA_OVERHEAD_BYTES - workspaces)  # nothing to spare: still fits, tightly
    assert edge.fits and edge.tight and edge.spare == 0
    room = TIGHT_FRACTION * v100
    at_margin = judge(v100, v100 - CUDA_OVERHEAD_BYTES - workspaces - int(room) - 1)
    assert at_margin.fits and not at_margin.tight and at_margin.answer == "fits" and at_margin.tight_note() == ""
    just_under = judge(v100, v100 - CUDA_OVERHEAD_BYTES - workspaces - int(room) + 1)
    assert just_under.tight
    over = judge(v100, v100)
    assert not over.fits and not over.tight and over.answer == "does not fit" and over.spare < 0
    assert not judge(v100, 10 * GiB, peak_reserved=None, reserved=True).tight  # ran out: no fit, so not tight
    lines = _fits_lines({"V100 16 GB": issue, "A100 40 GB": judge(GPU_CARDS["A100 40 GB"], 15 * GiB)})
    assert lines[1].split()[3:6] == ["fits,", "tight", "needs"] and lines[1].endswith(": 89.3 MiB to spare")
    assert lines[2].split()[3:5] == ["fits", "needs"] and "spare" not in lines[2]
    assert lines[-1] == f"  tight: under 5% of the card to spare, too close to call ({TIGHT_REASON})"


def test_a_widget_shows_a_tight_verdict_in_amber():
    """The widgets' view (helpers.teaching.widgets.render) says "tight" and marks it, by the same rule."""
    from helpers.teaching.views import render

    v100 = GPU_CARDS["V100 16 GB"]
    cats = {"parameters": 1 * GiB}
    tight = Estimate(256, round(15_030.4 * MiB), cats)
    message, view = render(tight, "V100 16 GB", v100)
    spare = judge(v100, tight.peak_bytes).spare
    assert message.startswith("fits in V100 16 GB, tight: ") and f"{spare / MiB:,.1f} MiB to spare" in message
    assert 'data-fits="true" data-tight="true"' in view and "color:#9a6700" in view
    message, view = render(Estimate(128, 8 * GiB, cats), "V100 16 GB", v100)
    assert message.startswith("fits in V100 16 GB: ") and 'data-fits="true" data-tight="false"' in view
    assert "color:#1a7f37" in view
    message, view = render(Estimate(512, 16 * GiB, cats), "V100 16 GB", v100)
    assert message.startswith("does not fit") and 'data-fits="false" data-tight="false"' in view
    # a parameter count (model states only): the same rule, in its own sentence
    message, view = render(Estimate(1, round(15_030.4 * MiB), cats, backend="formula"), "V100 16 GB", v100)
    assert message.startswith("model states fit in V100 16 GB") and f"(tight: {spare / MiB:,.1f} MiB to spare" in message
