"""helpers.units, helpers.gpus, helpers.allocator.rules, helpers.engine.counting and helpers.engine.meter: units, cards, the size rules, the storage tracker, the meter."""

import pytest
import torch

from helpers import CUDA_OVERHEAD_BYTES, GiB, Meter, MiB, fits, fmt_bytes, round_up, tensor_bytes
from helpers.gpus import GPU_CARDS, headroom, oom_message
from helpers.allocator import replay
from helpers.allocator.rules import allocation_size, block_bytes
from helpers.units import cuda_size


@pytest.mark.parametrize("nbytes, rounded", [(0, 0), (1, 512), (511, 512), (512, 512), (513, 1024), (4 * MiB, 4 * MiB)])
def test_round_up_to_512_byte_blocks(nbytes, rounded):
    assert round_up(nbytes) == rounded


def test_round_up_rejects_negative_sizes():
    with pytest.raises(ValueError, match="nbytes >= 0"):
        round_up(-1)


def test_tensor_bytes_of_known_tensors():
    assert tensor_bytes(torch.empty(128, 64, 112, 112)) == 128 * 64 * 112 * 112 * 4  # conv1's output: 392 MiB
    assert tensor_bytes(torch.empty(3, 5, dtype=torch.float16)) == 512  # 30 bytes, one block
    assert tensor_bytes(torch.empty(1000, dtype=torch.int64)) == 8192
    big = torch.empty(1000, 1000)
    assert tensor_bytes(big[0]) == tensor_bytes(big) == 4_000_256  # a view reports its storage


def test_tensor_bytes_rejects_non_tensors():
    with pytest.raises(TypeError, match="torch.Tensor"):
        tensor_bytes([1, 2, 3])


def test_fmt_bytes_units():
    assert fmt_bytes(411041792) == "392.0 MiB"
    assert fmt_bytes(-3 * MiB, sign=True) == "-3.0 MiB"
    assert fmt_bytes(2 * MiB, "MB") == "2.1 MB"
    with pytest.raises(ValueError, match="unknown unit"):
        fmt_bytes(1, "mb")


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


def test_headroom_is_the_one_fits_rule():
    assert headroom(16 * GiB) == 15 * GiB and headroom(16 * GiB, overhead=0) == 16 * GiB
    assert fits(15 * GiB, 16 * GiB) and not fits(15 * GiB + 1, 16 * GiB)
    with pytest.raises(ValueError, match=">= 0 bytes"):
        headroom(-1)


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
            torch.empty(6 * MiB, dtype=torch.uint8, device=meter.device)
    message = str(info.value)
    assert "Tried to allocate 20.00 MiB" in message  # a 1-10 MiB request asks for a 20 MiB segment
    assert "total capacity of 1.01 GiB of which 4.00 MiB is free" in message
    assert "6.00 MiB is allocated by PyTorch" in message
    del a
    with pytest.raises(ValueError, match="capacity must be an integer >= 1"):
        Meter("simulated", capacity=0)


def test_simulated_allocation_free_and_peak():
    with Meter("simulated") as meter:
        x = torch.ones(1024, 1024, device=meter.device)
        assert meter.allocated() == 4 * MiB
        y = x * 2
        assert meter.allocated() == 8 * MiB
        del y
        assert meter.allocated() == 4 * MiB
        assert meter.peak() == 8 * MiB
        meter.reset_peak()
        assert meter.peak() == 4 * MiB
        del x
        assert meter.allocated() == 0
    assert meter.backend == "simulated"
    assert meter.peak() == 4 * MiB and meter.reserved() is None


def test_the_allocation_log_of_a_meter_replays_and_stops_at_exit():
    with Meter("simulated") as meter:
        x = torch.ones(1024, 1024, device=meter.device)  # 4 MiB
        y = x * 2
        del y
        assert [(e.serial, e.kind, e.delta) for e in meter.allocation_log()] == [
            (0, "alloc", 4 * MiB), (1, "alloc", 4 * MiB), (1, "free", -4 * MiB)]
    del x  # freed after the block: not part of the measurement
    log = meter.allocation_log()
    assert [e.kind for e in log] == ["alloc", "alloc", "free"]
    run = replay(log)
    assert run.peak_allocated == 8 * MiB and run.allocated == [4 * MiB, 8 * MiB, 4 * MiB]
    with Meter("simulated", count_storages=False) as meter:
        torch.empty(1024, device=meter.device)
    assert meter.allocation_log() == []


def test_host_side_steps_leaves_adams_step_counters_out_as_a_gpu_does():
    def step_growth(wrap: bool) -> int:
        with Meter("simulated") as meter:
            w = torch.zeros(1024, 256, device=meter.device, requires_grad=True)  # 1 MiB
            opt = torch.optim.Adam([w], foreach=True)
            if wrap:
                assert meter.host_side_steps(opt) is opt
            w.grad = torch.zeros_like(w)
            before = meter.allocated()
            opt.step()
            return meter.allocated() - before

    assert step_growth(wrap=True) == 2 * MiB           # exp_avg and exp_avg_sq
    assert step_growth(wrap=False) == 2 * MiB + 512    # + the float32 step counter, a host tensor on a GPU
    with Meter("simulated") as meter:
        sgd = torch.optim.SGD([torch.zeros(4, device=meter.device, requires_grad=True)], lr=0.1)
        assert meter.host_side_steps(sgd) is sgd


def test_a_meter_builds_and_places_a_model_as_profile_step_does():
    meter = Meter("simulated")
    model = meter.build(lambda: torch.nn.Linear(1024, 256))  # on meta: nothing allocated
    assert {p.device.type for p in model.parameters()} == {"meta"}
    with meter:
        model = meter.place(model)
        assert meter.allocated() == 1 * MiB + 1024  # weight 1024 x 256 and bias 256, float32
        assert {p.device for p in model.parameters()} == {meter.device}


def test_views_and_in_place_ops_are_not_counted_twice():
    with Meter("simulated") as meter:
        x = torch.ones(256, 256, device=meter.device)
        before = meter.allocated()
        views = [x.view(-1), x[0], x.t(), x[:, 1:3], x.reshape(256, 256)]
        x.add_(1)
        x.relu_()
        torch.relu_(views[0])
        assert meter.allocated() == before == 256 * 256 * 4
        z = x.t().contiguous()  # a copy is a new storage
        assert meter.allocated() == 2 * before
        del z, views


def test_each_small_tensor_takes_a_whole_block():
    with Meter("simulated") as meter:
        scalars = [torch.zeros(1, device=meter.device) for _ in range(100)]
        assert meter.allocated() == 100 * 512
        del scalars
        assert meter.allocated() == 0


def test_simulated_mode_does_not_allocate_huge_tensors():
    with Meter("simulated") as meter:
        x = torch.empty(100 * GiB // 4, device=meter.device)  # 100 GiB on a 24 GiB machine
        assert meter.allocated() == 100 * GiB
        del x


def test_storage_resizes_are_counted_and_logged():
    """FSDP frees a parameter with untyped_storage().resize_(0) and re-grows it later."""
    original = torch.UntypedStorage.resize_
    with Meter("simulated") as meter:
        x = torch.empty(1024, 1024, device=meter.device)  # 4 MiB
        serial = meter.serial_of(x)
        x.untyped_storage().resize_(0)
        assert meter.allocated() == 0
        assert serial not in meter.live_serials()  # alive, but holding nothing
        x.untyped_storage().resize_(8 * MiB)
        assert meter.allocated() == meter.peak() == 8 * MiB and meter.live_serials() == (serial,)
        del x
        assert meter.allocated() == 0 and meter.live_serials() == ()
    assert [(e.serial, e.kind, e.delta) for e in meter.allocation_log()] == [
        (serial, "alloc", 4 * MiB), (serial, "resize", -4 * MiB), (serial, "resize", 8 * MiB),
        (serial, "free", -8 * MiB)]
    assert meter.storages()[serial][0] == 8 * MiB  # a storage's largest size
    assert torch.UntypedStorage.resize_ is original  # unwrapped again


def test_a_paused_tracker_counts_nothing():
    from helpers.engine.simulated import SimulatedTracker

    tracker = SimulatedTracker(None)
    with Meter("simulated", tracker=tracker) as meter:
        tracker.paused = True
        host = torch.empty(1024, device=meter.device)
        tracker.paused = False
        assert meter.allocated() == 0 and meter.serial_of(host) is None
        counted = torch.empty(1024, device=meter.device)
        assert meter.allocated() == 4096 and meter.serial_of(counted) == 0


def test_capacity_must_be_a_positive_number_of_bytes():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="capacity must be an integer >= 1"):
            Meter("simulated", capacity=bad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_cuda_and_simulated_agree_on_plain_tensors():
    results = {}
    for device in ("cuda", "simulated"):
        with Meter(device) as meter:
            x = torch.ones(1000, 1000, device=meter.device)
            y = torch.zeros(3, device=meter.device)
            z = x @ x
            del z
        results[device] = (meter.allocated(), meter.peak())
        del x, y
    assert results["cuda"] == results["simulated"]


def test_a_meter_without_the_storage_tracker_counts_nothing_simulated():
    with Meter("simulated", count_storages=False) as meter:
        torch.empty(1024, 1024, device=meter.device)
        assert meter.allocated() == 0 and meter.serial_of(torch.empty(4, device=meter.device)) is None
    with Meter("simulated") as meter:
        x = torch.empty(1024, 1024, device=meter.device)
        assert meter.allocated() == 4 * MiB and meter.serial_of(x) is not None


def test_the_meter_gives_the_backends_grad_scaler():
    from helpers.engine.cuda_rules import SimulatedGradScaler

    with Meter("simulated") as meter:
        scaler = meter.grad_scaler()
        assert isinstance(scaler, SimulatedGradScaler)
        weight = torch.ones(1024, device=meter.device, requires_grad=True)
        scaler.scale(weight.sum()).backward()  # creates the scale (float32) and the growth tracker (int32)
        # the weight and its gradient, 4 KiB each, and the scaler's two one-element tensors, 512 bytes each
        assert meter.allocated() == 2 * tensor_bytes(weight) + 2 * 512 == 9216
