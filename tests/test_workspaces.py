"""The memory a GPU adds that the traced tensors do not show (issue 23): cuBLAS workspaces per card,
how many handles a step takes, and the verdicts, the command line and the widgets that show them."""

import json

import pytest

from helpers import profile_step
from helpers.__main__ import main
from helpers.batch import Estimate, card_verdicts, cublas_handles, has_convolutions
from helpers.gpus import (COMPUTE_CAPABILITY, CUBLAS_LINE, CUDA_OVERHEAD_BYTES, CUDNN_LINE, GPU_CARDS,
                          card_of, cublas_workspace_bytes, fits, headroom, judge, unseen_lines)
from helpers.teaching.views import render

MiB = 2**20


def test_every_card_has_a_compute_capability():
    assert set(COMPUTE_CAPABILITY) == set(GPU_CARDS)
    assert COMPUTE_CAPABILITY["H100 80 GB"] == (9, 0) and COMPUTE_CAPABILITY["V100 16 GB"] == (7, 0)
    assert all(isinstance(v, int) for v in GPU_CARDS.values())  # GPU_CARDS keeps its meaning: name -> bytes


@pytest.mark.parametrize("capability, expected", [
    ((9, 0), 32 * MiB), ((10, 0), 32 * MiB), ((12, 0), 32 * MiB),       # Hopper, Blackwell
    ((7, 0), 8_519_680), ((8, 0), 8_519_680), ((8, 9), 8_519_680),      # :4096:2:16:8
    ((11, 0), 8_519_680),
])
def test_default_workspace_by_compute_capability(capability, expected):
    """parseChosenWorkspaceSize in CublasHandlePool.cpp: 32 MiB on majors 9, 10 and 12, else :4096:2:16:8."""
    assert cublas_workspace_bytes(capability) == expected
    assert 8_519_680 == 4096 * 1024 * 2 + 16 * 1024 * 8


@pytest.mark.parametrize("config, expected", [
    (":4096:8", 4096 * 1024 * 8),          # the documented setting for deterministic cuBLAS: 32 MiB
    (":16:8", 16 * 1024 * 8),              # the other documented one: 128 KiB
    (":4096:2:16:8", 8_519_680),           # every :SIZE:COUNT pair adds SIZE KiB x COUNT
    ("garbage", 32 * MiB),                 # no pair: PyTorch warns and takes the default
])
def test_workspace_config_parsed_as_pytorch_does(config, expected):
    assert cublas_workspace_bytes((9, 0), config) == expected


def test_bad_capability_and_handles_refused():
    with pytest.raises(ValueError, match="capability"):
        cublas_workspace_bytes((9,))
    with pytest.raises(ValueError, match="cublas_handles"):
        unseen_lines("H100 80 GB", 3)
    with pytest.raises(ValueError, match="unknown GPU"):
        unseen_lines("TPU", 1)


def test_unseen_lines_per_card():
    assert unseen_lines("H100 80 GB", 2) == {CUBLAS_LINE: 64 * MiB}
    assert unseen_lines("V100 16 GB", 1, convolutions=True) == {CUBLAS_LINE: 8_519_680, CUDNN_LINE: None}


def test_the_verdict_adds_exactly_the_lines():
    capacity = GPU_CARDS["H100 80 GB"]
    edge = capacity - CUDA_OVERHEAD_BYTES - 64 * MiB  # the largest peak that fits with two workspaces
    assert judge(capacity, edge, card="H100 80 GB", cublas_handles=2).fits
    assert not judge(capacity, edge + 1, card="H100 80 GB", cublas_handles=2).fits
    assert judge(capacity, edge + 32 * MiB, card="H100 80 GB", cublas_handles=1).fits
    assert not judge(capacity, edge + 32 * MiB + 1, card="H100 80 GB", cublas_handles=1).fits
    v = judge(capacity, edge, card="H100 80 GB", cublas_handles=2, convolutions=True)
    assert v.need == edge + CUDA_OVERHEAD_BYTES + 64 * MiB == capacity
    assert v.lines == {CUBLAS_LINE: 64 * MiB, CUDNN_LINE: None} and "cuDNN workspaces not modelled" in v.sentence("H100")
    # a capacity of GPU_CARDS is that card (two handles unless told), whichever function judges it
    assert judge(capacity, edge).lines == {CUBLAS_LINE: 64 * MiB} and card_of(capacity) == "H100 80 GB"
    assert fits(edge, capacity) and not fits(edge + 1, capacity) and headroom(capacity) == edge
    assert fits(edge + 32 * MiB, capacity, cublas_handles=1)
    assert judge(capacity - 1, edge).lines == {} and headroom(capacity - 1) == edge + 64 * MiB - 1  # no card
    reserved = judge(capacity, peak_reserved=1000 * MiB, reserved=True, card="V100 16 GB", cublas_handles=2)
    assert reserved.need == 1000 * MiB + 512 * MiB + 2 * 8_519_680


@pytest.fixture(scope="module")
def resnet():
    return profile_step("resnet18", batch_size=2, image_size=64, steady_state=True)


@pytest.fixture(scope="module")
def mlp():
    return profile_step("mlp", batch_size=4, steady_state=True)


def test_a_training_step_takes_two_handles(resnet, mlp):
    assert cublas_handles(mlp) == 2 and not has_convolutions(mlp)
    assert cublas_handles(resnet) == 2 and has_convolutions(resnet)


def test_a_forward_only_trace_takes_one_handle(mlp):
    """A forward under no_grad runs on the Python thread only: the trace's events without the backward."""
    import dataclasses

    forward = dataclasses.replace(mlp, events=[e for e in mlp.events if e.phase not in ("bwd", "recompute")])
    assert cublas_handles(forward) == 1
    none = dataclasses.replace(mlp, events=[e for e in mlp.events if e.module_type not in ("Linear",)])
    assert cublas_handles(none) == 0


def test_card_verdicts_add_the_cards_workspaces(mlp):
    verdicts = card_verdicts(mlp)
    assert verdicts["H100 80 GB"].need - verdicts["V100 16 GB"].need == 64 * MiB - 2 * 8_519_680
    for card, v in verdicts.items():
        assert v.need == mlp.peak_allocated_bytes + CUDA_OVERHEAD_BYTES + 2 * cublas_workspace_bytes(COMPUTE_CAPABILITY[card])
    assert mlp.peak_allocated_bytes == Estimate.of(mlp).peak_bytes  # the traced peak stays the tensors'


def test_cli_shows_the_lines(capsys):
    assert main(["profile", "--model", "resnet18", "--batch-size", "2", "--image-size", "64", "--steady-state"]) == 0
    out = capsys.readouterr().out
    assert "cuBLAS workspaces: V100 16 GB 8.1 MiB" not in out  # two handles, not one
    assert "cuBLAS workspaces: V100 16 GB 16.2 MiB" in out and "H100 80 GB 64.0 MiB" in out
    assert "cuDNN workspaces: cuDNN may need up to " in out and " more: its workspaces are not counted" in out
    assert main(["profile", "--model", "mlp", "--batch-size", "4", "--steady-state", "--json"]) == 0
    fits = json.loads(capsys.readouterr().out)["fits"]
    assert fits["unseen_bytes"]["H100 80 GB"] == {CUBLAS_LINE: 64 * MiB}
    assert fits["unseen_bytes"]["A100 40 GB"] == {CUBLAS_LINE: 2 * 8_519_680} and fits["caveat"] is None


def test_widget_view_shows_the_lines(resnet):
    estimate = Estimate.of(resnet)
    message, view = render(estimate, "H100 80 GB", GPU_CARDS["H100 80 GB"])
    assert "cuBLAS workspaces" in message and "but cuDNN may need up to " in message  # the bound beside a floor
    assert f'data-line="{CUBLAS_LINE}" data-bytes="{64 * MiB}"' in view
    assert f'data-line="{CUDNN_LINE}"' in view and "not modelled" in view
    message, view = render(estimate, "V100 16 GB", GPU_CARDS["V100 16 GB"], unit="GiB")
    assert f'data-bytes="{2 * 8_519_680}"' in view
    _, view = render(estimate, "this GPU", 10 * 2**30, measured_here=True)
    assert "gm-unseen" not in view  # measured: a real GPU's workspaces are in its figures
