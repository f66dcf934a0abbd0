"""Lesson 01's machinery: steady-state steps, the affine law, the simulated OOM, the widget."""

import re

import pytest
import torch
import torchvision

from helpers import CUDA_OVERHEAD_BYTES, DoesNotFit, GiB, MiB, PeakCurve, fit_affine, mlp, profile_step
from helpers.data import load_digits, load_mnist
from helpers.memory import Meter, cuda_size, oom_message, round_up
from helpers.training import train
from helpers.widgets import MemoryExplorer, digits_mlp


@pytest.fixture(scope="module")
def resnet_curve():
    return PeakCurve("resnet18", "simulated")


def test_steady_state_adds_exactly_the_optimizer_states():
    first = profile_step("resnet18", 128, device="simulated")
    steady = profile_step("resnet18", 128, device="simulated", steady_state=True)
    assert first.categories["optimizer_states"] == 0  # momentum is created inside optimizer.step()
    momentum = sum(round_up(p.numel() * 4) for p in torchvision.models.resnet18().parameters())
    assert steady.categories["optimizer_states"] == momentum  # one fp32 buffer per parameter
    assert steady.event_categories[0]["optimizer_states"] == momentum  # there from the start
    assert steady.peak_allocated_bytes - first.peak_allocated_bytes == momentum
    assert steady.peak_event == first.peak_event


def test_affine_law_resnet18(resnet_curve):
    sizes = [128, 256, 512]
    traces = [resnet_curve.trace(b) for b in sizes]
    fit = fit_affine(sizes, [t.peak_allocated_bytes for t in traces])
    assert fit.max_residual_bytes < 4096  # a straight line, up to 512-byte rounding
    at_peak = traces[0].categories
    model_state = at_peak["parameters"] + at_peak["gradients"] + at_peak["optimizer_states"]
    assert abs(fit.m0_bytes - model_state) < 64 * 1024  # M0: the model state alive at the peak
    per_sample = (at_peak["input"] + at_peak["activations"] + at_peak["other"]) / 128
    assert fit.per_sample_bytes == pytest.approx(per_sample, rel=1e-4)  # m: activations per sample
    # Below the straight-line regime the peak sits elsewhere and lies above the line.
    small = resnet_curve.trace(1)
    assert small.peak_allocation != traces[0].peak_allocation
    assert small.peak_allocated_bytes > fit.predict(1)


def test_largest_batch_is_where_the_simulated_gpu_runs_out(resnet_curve):
    sizes = [256, 512]
    fit = fit_affine(sizes, [resnet_curve.trace(b).peak_allocated_bytes for b in sizes])
    largest = fit.largest_batch(16 * GiB)
    assert largest > 600
    profile_step("resnet18", largest, device="simulated", steady_state=True, capacity=16 * GiB)
    with pytest.raises(DoesNotFit, match="Simulated CUDA out of memory"):
        profile_step("resnet18", largest + 1, device="simulated", steady_state=True, capacity=16 * GiB)


def test_fit_affine_refuses_bad_input():
    with pytest.raises(ValueError, match="two different"):
        fit_affine([4, 4], [1, 2])
    with pytest.raises(ValueError, match="batch sizes but"):
        fit_affine([1, 2], [1])
    assert fit_affine([1, 2, 3], [10, 12, 14]).largest_batch(100, overhead=0) == 46  # 8 + 46 * 2 = 100


def test_oom_message_fields():
    message = oom_message(3 * 2**29, 16 * GiB, 15 * GiB + 512 * MiB, 14 * GiB, 14 * GiB, simulated=False)
    assert message.startswith("CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 16.00 GiB")
    assert "of which 512.00 MiB is free" in message
    assert "this process has 15.50 GiB memory in use" in message
    assert "14.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated" in message
    assert [cuda_size(n) for n in (1024, 1025, MiB, MiB + 1, GiB + 1)] == [
        "1024 bytes", "1.00 KiB", "1024.00 KiB", "1.00 MiB", "1.00 GiB"]


def test_simulated_oom_reports_the_failing_allocation():
    with pytest.raises(torch.OutOfMemoryError) as info:
        with Meter("simulated", capacity=CUDA_OVERHEAD_BYTES + 10 * MiB) as meter:
            a = torch.empty(6 * MiB, dtype=torch.uint8, device=meter.device)
            b = torch.empty(6 * MiB, dtype=torch.uint8, device=meter.device)  # noqa: F841
    message = str(info.value)
    assert "Tried to allocate 6.00 MiB" in message
    assert "total capacity of 1.01 GiB of which 4.00 MiB is free" in message
    assert "6.00 MiB is allocated by PyTorch" in message
    del a
    with pytest.raises(ValueError, match="positive number of bytes"):
        Meter("simulated", capacity=0)


def test_peak_curve_interpolates_exactly(resnet_curve):
    resnet_curve.trace(128)
    resnet_curve.trace(1024)
    for b in (200, 777):
        estimate = resnet_curve.estimate(b)
        assert not estimate.traced
        direct = profile_step("resnet18", b, device="simulated", steady_state=True)
        assert abs(estimate.peak_bytes - direct.peak_allocated_bytes) < 4096
        for name, nbytes in direct.categories.items():
            assert abs(estimate.categories[name] - nbytes) < 4096, name
        assert estimate.where == "bwd layer4.1.relu"
    with pytest.raises(ValueError, match="batch_size"):
        resnet_curve.estimate(0)


def test_widget_shows_what_a_direct_measurement_gives():
    w = MemoryExplorer(device="simulated", batch_size=128)
    shown = [int(v) for v in re.findall(r'class="gm-peak" data-bytes="(\d+)"', w.view.value)]
    direct = profile_step("resnet18", 128, device="simulated", steady_state=True)
    assert shown == [direct.peak_allocated_bytes]
    assert w.message.startswith("fits in 16 GiB")

    w.batch_size.value = 900  # the slider moves: the view follows
    direct = profile_step("resnet18", 900, device="simulated", steady_state=True)
    shown = int(re.search(r'class="gm-peak" data-bytes="(\d+)"', w.view.value).group(1))
    assert abs(shown - direct.peak_allocated_bytes) < 4096
    assert w.result.batch_size == 900 and w.batch_box.value == 900
    for name in ("parameters", "gradients", "optimizer_states", "activations"):
        value = int(re.search(rf'data-category="{name}" data-bytes="(\d+)"', w.view.value).group(1))
        assert abs(value - direct.categories[name]) < 4096
    assert w.message.startswith("does not fit in 16 GiB")  # 900 * 21.3 MiB > 15 GiB
    w.capacity.value = "24 GiB"
    assert w.message.startswith("fits in 24 GiB")

    w.amp.value = True
    amp = profile_step("resnet18", 900, device="simulated", steady_state=True, amp=True)
    assert abs(w.result.peak_bytes - amp.peak_allocated_bytes) < 4096

    w.batch_size.value = 0  # cannot be entered: the slider clamps to its minimum
    assert w.batch_size.value == 1 and w.result.batch_size == 1

    w.model.value = "densenet121"
    w.checkpoint.value = 4  # refused clearly, not with a traceback
    assert w.result is None and "cannot run this configuration" in w.message
    assert "DenseNet" in w.view.value
    w.checkpoint.value = 0
    assert w.result is not None


def test_widget_refuses_bad_initial_values():
    with pytest.raises(ValueError, match="batch_size"):
        MemoryExplorer(device="simulated", batch_size=0)
    with pytest.raises(ValueError, match="unknown model"):
        MemoryExplorer(device="simulated", model="resnet19")
    with pytest.raises(ValueError, match="capacity"):
        MemoryExplorer(device="simulated", capacity="this GPU")


def test_digits_data_and_mlp():
    data = load_digits()
    assert [tuple(t.shape) for t in data] == [(1437, 64), (1437,), (360, 64), (360,)]
    assert 0 <= float(data.x_train.min()) and float(data.x_train.max()) <= 1
    assert sorted(set(data.y_test.tolist())) == list(range(10))
    assert sum(p.numel() for p in digits_mlp().parameters()) == 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits(test_fraction=1.0)
    with pytest.raises(ValueError, match="layer sizes"):
        mlp(64, (0,), 10)


def test_mnist_is_never_downloaded_unasked(tmp_path):
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_mnist(str(tmp_path))


def test_training_is_seeded_and_checked():
    data = load_digits()
    _, a = train(digits_mlp, data, 128, 2)
    _, b = train(digits_mlp, data, 128, 2)
    assert a.train_loss == b.train_loss and a.updates == [12, 24] and a.samples_seen == [1437, 2874]
    assert a.train_loss[1] < a.train_loss[0]
    with pytest.raises(ValueError, match="batch_size"):
        train(digits_mlp, data, 0, 1)
    with pytest.raises(ValueError, match="batch_size"):
        train(digits_mlp, data, 1438, 1)
