"""The simulated backend counts exactly the bytes CUDA's caching allocator would."""

import pytest
import torch

from helpers import GiB, Meter, MiB, fmt_bytes, resolve_backend, round_up, tensor_bytes


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


def test_backend_resolution_and_errors():
    assert resolve_backend("simulated") == "simulated"
    assert resolve_backend("auto") == ("cuda" if torch.cuda.is_available() else "simulated")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        resolve_backend("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without a GPU")
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no GPU"):
        Meter("cuda")


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


def test_peak_bars_figure_checks_its_labels():
    from helpers.plots import plot_peak_bars

    p = profile_step_small()
    fig = plot_peak_bars([p], ["one"])
    assert len(fig.axes[0].patches) == 6  # one bar segment per category
    with pytest.raises(ValueError, match="labels"):
        plot_peak_bars([p], ["a", "b"])


def profile_step_small():
    from helpers import profile_step

    return profile_step("resnet18", 2, image_size=32, num_classes=10, device="simulated")
