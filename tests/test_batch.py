"""Lesson 01's machinery: steady-state steps, the affine law, the simulated OOM, the widget."""

import re

import pytest
import torch
import torchvision

from helpers import CUDA_OVERHEAD_BYTES, DoesNotFit, GiB, MiB, PeakCurve, fit_affine, mlp, profile_step
from helpers.data import load_digits, load_mnist
from helpers.memory import GPU_CARDS, Meter, allocation_size, block_bytes, cuda_size, oom_message, round_up
from helpers.training import train
from helpers.models import digits_mlp
from helpers.widgets import MemoryExplorer


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
    assert "this process has 15.50 GiB memory in use. Of the allocated memory" in message
    assert "14.00 GiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated" in message
    # Capped with set_per_process_memory_fraction: the card's total, its free memory, and the cap.
    capped = oom_message(GiB, 80 * GiB, 15 * GiB, 14 * GiB, 14 * GiB + 5 * MiB, simulated=False,
                         allowed=16 * GiB, free=64 * GiB)
    assert ("GPU 0 has a total capacity of 80.00 GiB of which 64.00 GiB is free. Including non-PyTorch memory, "
            "this process has 15.00 GiB memory in use. 16.00 GiB allowed; Of the allocated memory 14.00 GiB "
            "is allocated by PyTorch, and 5.00 MiB is reserved") in capped
    assert [cuda_size(n) for n in (1024, 1025, MiB, MiB + 1, GiB + 1)] == [
        "1024 bytes", "1.00 KiB", "1024.00 KiB", "1.00 MiB", "1.00 GiB"]


def test_simulated_oom_reports_the_failing_allocation():
    with pytest.raises(torch.OutOfMemoryError) as info:
        with Meter("simulated", capacity=CUDA_OVERHEAD_BYTES + 10 * MiB) as meter:
            a = torch.empty(6 * MiB, dtype=torch.uint8, device=meter.device)
            b = torch.empty(6 * MiB, dtype=torch.uint8, device=meter.device)  # noqa: F841
    message = str(info.value)
    assert "Tried to allocate 20.00 MiB" in message  # a 1-10 MiB request asks for a 20 MiB segment
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
        assert estimate.where == "backward of ReLU 'layer4.1.relu'"
    with pytest.raises(ValueError, match="batch_size"):
        resnet_curve.estimate(0)


def test_widget_shows_what_a_direct_measurement_gives():
    w = MemoryExplorer(device="simulated", batch_size=128)
    shown = [int(v) for v in re.findall(r'class="gm-peak" data-bytes="(\d+)"', w.view.value)]
    direct = profile_step("resnet18", 128, device="simulated", steady_state=True)
    assert shown == [direct.peak_allocated_bytes]
    assert w.message.startswith("fits in V100 16 GB")

    w.batch_size.value = 900  # the slider moves: the view follows
    direct = profile_step("resnet18", 900, device="simulated", steady_state=True)
    shown = int(re.search(r'class="gm-peak" data-bytes="(\d+)"', w.view.value).group(1))
    assert abs(shown - direct.peak_allocated_bytes) < 4096
    assert w.result.batch_size == 900 and w.batch_box.value == 900
    for name in ("parameters", "gradients", "optimizer_states", "activations"):
        value = int(re.search(rf'data-category="{name}" data-bytes="(\d+)"', w.view.value).group(1))
        assert abs(value - direct.categories[name]) < 4096
    assert w.message.startswith("does not fit in V100 16 GB")  # 900 * 21.3 MiB > 14.8 GiB
    w.capacity.value = "RTX 4090 24 GB"
    assert w.message.startswith("fits in RTX 4090 24 GB")

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


def test_allocation_and_block_sizes_follow_the_caching_allocator():
    # get_allocation_size: 2 MiB segments up to 1 MiB, 20 MiB below 10 MiB, else rounded up to 2 MiB.
    assert [allocation_size(n) for n in (1, 512, MiB, MiB + 1, 10 * MiB - 512, 10 * MiB - 1, 49 * MiB, 49 * MiB + 1)] == [
        2 * MiB, 2 * MiB, 2 * MiB, 20 * MiB, 20 * MiB, 10 * MiB, 50 * MiB, 50 * MiB]  # 10 MiB - 1 rounds up to 10 MiB
    # should_split: a large block keeps a rest of more than 1 MiB only; a small one of 512 bytes or more.
    assert block_bytes(49 * MiB) == 50 * MiB          # rest 1 MiB: not split, counted whole
    assert block_bytes(48 * MiB + 512) == 48 * MiB + 512  # rest 1.5 MiB: split off
    assert block_bytes(4) == 512 and block_bytes(MiB) == MiB
    assert block_bytes(5 * MiB) == 5 * MiB            # from a 20 MiB segment, 15 MiB split off
    assert block_bytes(392 * MiB, free_block=393 * MiB) == 393 * MiB  # a cached block 1 MiB too big
    with pytest.raises(ValueError, match="cannot hold"):
        block_bytes(2 * MiB, free_block=MiB)


def test_gpu_cards_report_less_than_their_nominal_size():
    for name, capacity in GPU_CARDS.items():
        nominal = int(name.split()[-2]) * GiB  # a "16 GB" card carries 16 GiB of memory chips
        assert 0.95 * nominal < capacity < nominal, name
