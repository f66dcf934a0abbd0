"""helpers.techniques and their effect on a step: AMP, checkpointing (and its traps), offloading, optimizers."""

import copy

import pytest
import torch
import torch.nn.functional as F

from helpers import Meter, profile_step
from helpers.batch import model_state_estimate
from helpers.models import build_model, digits_cnn, sequential_form
from helpers.techniques import (STATE_BYTES, STEP_TEMPORARY_BYTES, Checkpointed, frozen_batchnorm_stats,
                                make_optimizer)


@pytest.fixture(scope="module")
def peaks():
    configs = {"baseline": {}, "amp": {"amp": True}, "ckpt": {"checkpoint": 4},
               "both": {"amp": True, "checkpoint": 4},
               "trap": {"amp": True, "checkpoint": 4, "reentrant": True},
               "offload_amp": {"amp": True, "offload": True}}
    return {k: profile_step("resnet18", 128, device="simulated", **kw) for k, kw in configs.items()}


def test_four_configurations_are_ordered_and_complete(peaks):
    p = {k: v.peak_allocated_bytes for k, v in peaks.items()}
    assert p["baseline"] > p["ckpt"] > p["amp"] > p["both"]
    for name in ("baseline", "amp", "ckpt", "both", "offload_amp"):
        assert peaks[name].params_without_grad == [], name


def test_the_reentrant_trap_is_five_times_smaller_and_wrong(peaks):
    trap = peaks["trap"]
    assert round(peaks["baseline"].peak_allocated_bytes / trap.peak_allocated_bytes) == 5
    assert len(trap.params_without_grad) == 39
    assert "conv1.weight" in trap.params_without_grad and "fc.weight" not in trap.params_without_grad
    assert peaks["baseline"].peak_allocated_bytes / peaks["both"].peak_allocated_bytes < 3


def test_offload_beats_checkpointing_but_not_the_stem_floor(peaks):
    best = peaks["offload_amp"].peak_allocated_bytes
    assert best < peaks["both"].peak_allocated_bytes
    stem_floor = 3 * 128 * 64 * 112 * 112 * 2  # three 16-bit stem tensors in bn1's backward
    assert best > stem_floor
    assert peaks["baseline"].peak_allocated_bytes / best < 5


@pytest.fixture(scope="module")
def small():
    torch.manual_seed(0)
    return build_model("resnet18", num_classes=10), torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))


def _grads(small, **options):
    reference, x, y = small
    model = copy.deepcopy(reference)
    runner = Checkpointed(sequential_form(model), **options) if options else model
    F.cross_entropy(runner(x), y).backward()
    return model


@pytest.mark.parametrize("segments", [2, 4, 10])
def test_checkpointing_gives_every_parameter_the_baseline_gradient(small, segments):
    base = _grads(small)
    ckpt = _grads(small, segments=segments, freeze_bn_stats=True)
    for (name, p), q in zip(ckpt.named_parameters(), base.parameters()):
        assert p.grad is not None, name
        assert torch.equal(p.grad, q.grad), name
    for m, n in zip(ckpt.modules(), base.modules()):
        if isinstance(m, torch.nn.BatchNorm2d):
            assert torch.equal(m.running_mean, n.running_mean) and m.num_batches_tracked == n.num_batches_tracked


def test_without_the_fix_batchnorm_counts_twice(small):
    ckpt = _grads(small, segments=4)
    assert int(ckpt.bn1.num_batches_tracked) == 2


def test_reentrant_checkpoint_of_an_input_without_grad_loses_gradients(small):
    with pytest.warns(UserWarning, match="None of the inputs have requires_grad"):
        model = _grads(small, segments=4, reentrant=True)
    assert sum(p.grad is None for p in model.parameters()) == 39


def test_amp_loss_and_gradient_direction_are_close():
    # The setting of lesson 04, section 3, and its stated tolerance.
    torch.manual_seed(0)
    reference = build_model("resnet18", num_classes=10)
    x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))
    grads = []
    losses = []
    for amp in (False, True):
        model = copy.deepcopy(reference)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        losses.append(loss.item())
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert abs(losses[1] - losses[0]) / losses[0] < 0.01
    assert F.cosine_similarity(grads[0], grads[1], dim=0) > 0.9


def test_checkpoint_options_are_checked():
    with pytest.raises(ValueError, match="non-reentrant"):
        Checkpointed(sequential_form(digits_cnn()), 2, reentrant=True, freeze_bn_stats=True)
    with pytest.raises(ValueError, match="give checkpoint segments"):
        profile_step("resnet18", 2, device="simulated", reentrant=True)
    with pytest.raises(ValueError, match="offload must be True or False"):
        profile_step("resnet18", 2, device="simulated", offload="yes")


def test_frozen_batchnorm_stats_restores_momentum_and_count():
    model = digits_cnn()
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    with frozen_batchnorm_stats(model):
        assert all(m.momentum == 0.0 for m in norms)
        model(torch.randn(4, 64))
    assert all(m.momentum == 0.1 and int(m.num_batches_tracked) == 0 for m in norms)


def test_optimizers_are_the_foreach_kinds_or_fused():
    params = [torch.nn.Parameter(torch.ones(2))]
    assert make_optimizer("sgd", params).defaults["momentum"] == 0
    assert make_optimizer("sgd-momentum", params).defaults["momentum"] == 0.9
    assert make_optimizer("adam", params).defaults["foreach"] is True
    assert isinstance(make_optimizer("adamw", params, fused=True), torch.optim.AdamW)
    assert make_optimizer("adamw", params, fused=True).defaults["fused"] is True
    with pytest.raises(ValueError, match="unknown optimizer 'lion'"):
        make_optimizer("lion", params)


#: A Hugging Face GPT-2 config dict with 2 blocks (GPT2Config's defaults otherwise: 768 wide, 50,257 tokens).
GPT2_TWO_BLOCKS = {"model_type": "gpt2", "n_layer": 2}


@pytest.mark.parametrize("name", ["sgd", "sgd-momentum", "adam", "adamw"])
@pytest.mark.parametrize("fused", [False, True])
def test_each_optimizers_bytes_per_parameter_match_its_formula(name, fused):
    """Lesson 05a, section 1: parameter 4 + gradient 4 + state + the foreach step's temporary.  The model: Hugging
    Face's GPT-2 with 2 of its 12 blocks (54 million parameters in large tensors, so that the 512-byte rounding of
    its small tensors stays under the tolerance), traced in a fraction of the whole model's time."""
    p = profile_step(GPT2_TWO_BLOCKS, 1, seq_len=16, optimizer=name, fused=fused, steady_state=True,
                     device="simulated")
    step = p.find(None, "optimizer.step")
    at = p.event_categories[step.index]
    n = p.parameter_count
    assert at["optimizer_states"] / n == pytest.approx(STATE_BYTES[name], abs=0.01)
    assert at["parameters"] / n == pytest.approx(4, abs=0.01) and at["gradients"] / n == pytest.approx(4, abs=0.01)
    temporary = p.peak_during(step) - p.events[step.index - 1].allocated_bytes
    assert temporary / n == pytest.approx(0 if fused else STEP_TEMPORARY_BYTES[name], abs=0.01)
    formula = model_state_estimate(n, name, fused=fused).peak_bytes
    assert (at["parameters"] + at["gradients"] + at["optimizer_states"] + temporary) == pytest.approx(formula, rel=1e-3)



@pytest.mark.parametrize("name", ["adam", "adamw"])
def test_fused_adams_step_counters_are_device_memory_and_counted(name):
    """Adam's ``step`` counters are host tensors on a GPU only for foreach and the
    for-loop: ``fused=True`` and ``capturable=True`` create them on the parameters'
    device (``_init_group`` in ``torch/optim/adam.py``), so the simulation counts
    them there: 512 bytes per parameter tensor (one rounded float32 scalar)."""
    foreach = profile_step("resnet18", 2, image_size=32, optimizer=name, steady_state=True, device="simulated")
    fused = profile_step("resnet18", 2, image_size=32, optimizer=name, fused=True, steady_state=True,
                         device="simulated")
    tensors = 62  # ResNet18's parameter tensors
    assert fused.event_categories[0]["optimizer_states"] - foreach.event_categories[0]["optimizer_states"] == 512 * tensors
    # capturable=True cannot step on the CPU tensors of the simulation; it is left unwrapped, as fused is
    with Meter("simulated") as meter:
        w = torch.zeros(4, device=meter.device, requires_grad=True)
        for options in ({"capturable": True}, {"fused": True}, {"foreach": True}):
            opt = meter.host_side_steps(torch.optim.Adam([w], **options))
            assert ("_init_group" in vars(opt)) == ("foreach" in options)

def test_the_optimizer_step_in_backward_frees_each_gradient_at_once():
    normal = profile_step("resnet18", 2, image_size=32, optimizer="adam", steady_state=True, device="simulated")
    fused = profile_step("resnet18", 2, image_size=32, optimizer="adam", steady_state=True, step_in_backward=True,
                         device="simulated")
    assert normal.peak.phase == "optimizer.step" and fused.peak.phase == "bwd"
    assert fused.peak_allocated_bytes < normal.peak_allocated_bytes
    assert fused.params_without_grad == []  # every parameter was stepped by its hook
    assert fused.categories["optimizer_states"] == normal.categories["optimizer_states"]
    assert fused.event_categories[fused.find(None, "backward").index]["gradients"] == 0
    with pytest.raises(ValueError, match="cannot unscale float16 gradients"):
        profile_step("resnet18", 2, amp=True, step_in_backward=True, device="simulated")
    with pytest.raises(ValueError, match="cannot accumulate"):
        profile_step("resnet18", 2, accumulation_steps=2, step_in_backward=True, device="simulated")


def test_gradient_accumulation_and_zero_grad_without_set_to_none():
    one = profile_step("resnet18", 4, image_size=32, optimizer="adam", steady_state=True, device="simulated")
    four = profile_step("resnet18", 4, image_size=32, optimizer="adam", steady_state=True, accumulation_steps=4,
                        device="simulated")
    assert [e.phase for e in four.events if e.module is None].count("backward") == 4
    assert four.peak_allocated_bytes >= one.peak_allocated_bytes and four.params_without_grad == []
    kept = profile_step("resnet18", 4, image_size=32, steady_state=True, set_to_none=False, device="simulated")
    assert kept.event_categories[0]["gradients"] > 0 and one.event_categories[0]["gradients"] == 0
    assert kept.events[-1].label == "optimizer.zero_grad(set_to_none=False)"
