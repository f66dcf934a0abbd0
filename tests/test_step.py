"""One traced training step: deltas computed from shapes, categories, cross-checks."""

import math

import pytest
import torch
import torchvision
from torch._subclasses.fake_tensor import FakeTensorMode

from helpers import CATEGORIES, MiB, build_model, profile_step, round_up, sequential_form
from helpers.techniques import make_optimizer


def nbytes(shape, dtype=torch.float32):
    return round_up(math.prod(shape) * dtype.itemsize)


@pytest.fixture(scope="module")
def resnet18_b128():
    return profile_step("resnet18", 128, device="simulated")


def test_published_resnet18_deltas_follow_from_shapes(resnet18_b128):
    p = resnet18_b128
    stem = (128, 64, 112, 112)
    assert p.find("conv1", "fwd").delta_bytes == nbytes(stem) == 392 * MiB
    # BatchNorm keeps its output plus per-channel mean and inverse std (64 floats each).
    assert p.find("bn1", "fwd").delta_bytes == nbytes(stem) + 2 * nbytes((64,))
    assert p.find("relu", "fwd").delta_bytes == 0  # in place
    pooled = (128, 64, 56, 56)
    assert p.find("maxpool", "fwd").delta_bytes == nbytes(pooled) + nbytes(pooled, torch.int64) == 294 * MiB
    assert p.find("layer1.0.conv1", "fwd").delta_bytes == nbytes(pooled) == 98 * MiB
    assert p.find("layer1.0.conv2", "fwd").delta_bytes == 98 * MiB
    assert p.find("layer1.0.relu", "fwd", nth=1).delta_bytes == 0


def test_events_are_consistent(resnet18_b128):
    p = resnet18_b128
    previous = 0
    for event, cats in zip(p.events, p.event_categories):
        assert event.allocated_bytes == previous + event.delta_bytes
        assert sum(cats.values()) == event.allocated_bytes
        assert set(cats) == set(CATEGORIES)
        previous = event.allocated_bytes
    assert sum(p.categories.values()) == p.peak_allocated_bytes
    assert max(e.allocated_bytes for e in p.events) <= p.peak_allocated_bytes
    assert [e.phase for e in p.events if e.module is None] == [
        "model", "input", "loss", "backward", "optimizer.step", "zero_grad"]
    names = {n for n, _ in torchvision.models.resnet18().named_modules()}
    module_events = [e for e in p.events if e.module is not None]
    assert {e.module for e in module_events} == names
    for name in names:  # every module has a pre, fwd and bwd event
        phases = {e.phase for e in module_events if e.module == name}
        assert phases == {"pre", "fwd", "bwd"}, name


def test_categories_at_known_moments(resnet18_b128):
    p = resnet18_b128
    model = torchvision.models.resnet18()
    param_bytes = sum(round_up(t.numel() * t.element_size()) for t in model.parameters())
    buffer_bytes = sum(round_up(t.numel() * t.element_size()) for t in model.buffers())
    assert p.categories["parameters"] == param_bytes + buffer_bytes
    assert p.categories["input"] == nbytes((128, 3, 224, 224)) + nbytes((128,), torch.int64)
    assert p.categories["activations"] > 0.9 * p.peak_allocated_bytes
    end = p.event_categories[-1]
    assert end["gradients"] == 0  # zero_grad(set_to_none=True)
    assert end["optimizer_states"] == param_bytes  # one momentum buffer per parameter
    assert end["activations"] == 0
    after_backward = p.event_categories[p.find(None, "backward").index]
    assert after_backward["gradients"] == param_bytes


def test_peak_agrees_with_memtracker(resnet18_b128):
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        model = torchvision.models.resnet18()
        optimizer = make_optimizer("sgd", model.parameters())
        tracker = MemTracker()
        tracker.track_external(model, optimizer)
        with tracker:
            x = torch.randn(128, 3, 224, 224)
            y = torch.randint(0, 1000, (128,))
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    reference = sum(snapshot["Total"] for snapshot in tracker.get_tracker_snapshot("peak").values())
    # MemTracker counts exact storage bytes, we round each up to 512 (README: within 0.01%).
    assert abs(resnet18_b128.peak_allocated_bytes - reference) / reference < 1e-4


def test_adam_keeps_two_states_per_parameter():
    p = profile_step("resnet18", 2, image_size=64, optimizer="adam", device="simulated")
    param_bytes = sum(round_up(t.numel() * 4) for t in torchvision.models.resnet18().parameters())
    # Adam's step counters are host tensors on a GPU (not fused, not capturable): not counted.
    assert p.event_categories[-1]["optimizer_states"] == 2 * param_bytes


def test_amp_and_checkpointing_lower_the_peak_and_keep_every_gradient(resnet18_b128):
    base = resnet18_b128.peak_allocated_bytes
    amp = profile_step("resnet18", 128, amp=True, device="simulated")
    ckpt = profile_step("resnet18", 128, checkpoint=4, device="simulated")
    both = profile_step("resnet18", 128, amp=True, checkpoint=4, device="simulated")
    assert both.peak_allocated_bytes < amp.peak_allocated_bytes < base
    assert both.peak_allocated_bytes < ckpt.peak_allocated_bytes < base
    for p in (amp, ckpt, both):
        assert p.params_without_grad == []
    assert any(e.phase == "recompute" for e in ckpt.events)
    # AMP (bfloat16 when simulated): conv1 keeps a half-size output, plus the
    # low-precision copies of its input batch and weight that autocast makes.
    half = torch.bfloat16
    assert amp.find("conv1", "fwd").delta_bytes == (
        nbytes((128, 64, 112, 112), half) + nbytes((128, 3, 224, 224), half) + nbytes((64, 3, 7, 7), half))


def test_huge_batch_is_simulated_without_allocating():
    p = profile_step("resnet18", 4096, device="simulated")
    assert p.find("conv1", "fwd").delta_bytes == nbytes((4096, 64, 112, 112))  # 12.25 GiB
    assert p.peak_allocated_bytes > 80 * 2**30  # far beyond this machine's RAM


@pytest.mark.parametrize("name", ["resnet18", "alexnet", "vgg11", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0"])
def test_sequential_form_computes_the_same_function(name):
    torch.manual_seed(0)
    model = build_model(name).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(sequential_form(model)(x), model(x), atol=1e-5)


def test_any_classification_model_and_a_custom_one():
    assert profile_step("mobilenet_v3_small", 4, image_size=96, device="simulated").peak_allocated_bytes > 0

    def mlp():
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

    p = profile_step(mlp, 16, input_shape=(64,), num_classes=10, device="simulated")
    assert p.model == "mlp"
    assert p.find("1", "fwd").delta_bytes == nbytes((16, 32))


@pytest.mark.parametrize("kwargs, message", [
    (dict(batch_size=0), "batch_size must be an integer >= 1"),
    (dict(batch_size=-3), "batch_size must be"),
    (dict(model="resnet-18"), "unknown model 'resnet-18'"),
    (dict(optimizer="lion"), "unknown optimizer 'lion'"),
    (dict(model="densenet121", checkpoint=2), "DenseNet is not one"),
    (dict(checkpoint=11), "between 1 and 10"),
    (dict(batch_size=1, image_size=32), "cannot run on input .*1 value per channel"),
    (dict(model="vgg11", image_size=8), "vgg11 cannot run on input"),
])
def test_bad_input_gives_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        profile_step(**{"device": "simulated", **kwargs})


def test_out_of_memory_is_reported_as_does_not_fit(resnet18_b128):
    """Running out of memory (a simulated 1.5 GiB GPU) becomes DoesNotFit, with CUDA's first line."""
    from helpers import DoesNotFit, GiB

    with pytest.raises(DoesNotFit) as info:
        profile_step("resnet18", 128, device="simulated", capacity=3 * GiB // 2)
    # 1.5 GiB - 1 GiB of assumed overhead: conv1's 392 MiB output fits, bn1's does not.
    assert str(info.value).startswith("resnet18 at batch size 128 does not fit: Simulated CUDA out of memory. "
                                      "Tried to allocate 392.00 MiB. GPU 0 has a total capacity of 1.50 GiB")
    assert info.value.cuda_message == str(info.value).split(" does not fit: ")[1]
    assert "\n" not in info.value.cuda_message
    assert info.value.requested == 392 * MiB
    assert info.value.allocated == resnet18_b128.find("conv1", "fwd").allocated_bytes


def test_storages_at_the_peak_add_up_and_carry_dtypes(resnet18_b128):
    p = resnet18_b128
    at_peak = p.at_peak()
    assert sum(s.nbytes for s in at_peak) == p.peak_allocated_bytes
    by_category = {}
    for s in at_peak:
        by_category[s.category] = by_category.get(s.category, 0) + s.nbytes
    assert by_category == {k: v for k, v in p.categories.items() if v}
    # MaxPool's int64 indices: the only int64 activation, 196 MiB at batch 128.
    indices = [s for s in at_peak if s.category == "activations" and s.dtype == torch.int64]
    assert [(s.shape, s.nbytes) for s in indices] == [((128, 64, 56, 56), 196 * MiB)]


def test_event_labels_say_what_happened(resnet18_b128):
    p = resnet18_b128
    assert p.find("layer4.1.relu", "bwd").label == "backward of ReLU 'layer4.1.relu'"
    assert p.find("", "pre").label == "before the model (ResNet)"
    assert p.find(None, "optimizer.step").label == "optimizer.step()"
    assert p.summary().splitlines()[0] == "at the peak (reached by event 157, backward of ReLU 'layer4.1.relu'):"