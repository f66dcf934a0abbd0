"""What CUDA kernels allocate for themselves (issue 51): reduction staging buffers by ``Reduce.cuh``'s rule, cuDNN
workspaces from the H200's table of isolated convolutions or their bound, the option that chooses, and the verdicts
and comparisons that state them."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from helpers import StepConfig, profile_step
from helpers.batch import Estimate
from helpers.engine.workspaces import CUDNN_TABLES, CudnnTable, KernelMemory, reduction_staging
from helpers.gpus import (COMPUTE_CAPABILITY, CUDNN_BOUND_RATIO, GPU_CARDS, GPU_SPECS, SIMULATED_GPU, device_card,
                          simulated_card)
from helpers.teaching.reference import REFERENCE_FILE, cublas_segment_bytes

DATA = Path(__file__).parent / "data"
MiB = 2**20
REDUCTIONS = json.loads((DATA / "h200_reductions.json").read_text())


@pytest.mark.parametrize("case", REDUCTIONS["cases"], ids=lambda c: f"{c['op']}-{'x'.join(map(str, c['shape']))}-{c['dtype']}")
def test_reduction_staging_is_the_h200s_to_the_byte(case):
    """24 reductions measured on an H200: the staging buffer and semaphores ``gpu_reduce_kernel`` asked for, or none."""
    dims = (0,) if case["op"] == "sum0" else (0, 2, 3)
    measured = tuple(n for n, kind in case["allocs"] if kind == "reduce") or (0, 0)
    sms, threads = GPU_SPECS["H200 141 GB"][:2]
    assert (sms, threads) == (REDUCTIONS["sms"], REDUCTIONS["max_threads_per_sm"])
    assert reduction_staging(case["shape"], dims, getattr(torch, case["dtype"]), sms=sms,
                             threads_per_sm=threads) == measured


def test_reduction_staging_depends_on_the_card():
    """Fewer SMs, fewer blocks per output: 16,384 rows of 4,096 summed, 32 blocks of outputs, each output's rows split
    over ceil(132 x 16 / 32) = 66 blocks on an H200 and ceil(80 x 16 / 32) = 40 on a V100 (128 threads a block, 16
    blocks an SM); a float32 per output, block and lane (32 lanes x 4 outputs a lane)."""
    assert reduction_staging((16384, 4096), (0,), torch.float32, sms=132, threads_per_sm=2048) == (4 * 4096 * 66 * 128, 128)
    assert reduction_staging((16384, 4096), (0,), torch.float32, sms=80, threads_per_sm=2048) == (4 * 4096 * 40 * 128, 128)
    with pytest.raises(ValueError, match="out of range"):
        reduction_staging((4, 4), (2,), torch.float32, sms=132, threads_per_sm=2048)
    with pytest.raises(ValueError, match="complex"):
        reduction_staging((4096, 1024), (0,), torch.complex64, sms=132, threads_per_sm=2048)


def test_the_catalogue_has_every_card_and_the_simulated_one():
    assert set(GPU_CARDS) < set(GPU_SPECS) and SIMULATED_GPU in GPU_SPECS
    assert all(GPU_SPECS[c].capability == COMPUTE_CAPABILITY[c] for c in GPU_CARDS)
    assert simulated_card() == SIMULATED_GPU == "H200 141 GB" and simulated_card(GPU_CARDS["V100 16 GB"]) == "V100 16 GB"
    assert device_card("NVIDIA H200") == "H200 141 GB" and device_card("NVIDIA A100-SXM4-80GB") is None


def test_the_table_holds_isolated_convolutions_only_and_the_bound_covers_it():
    """The shipped table: 66 convolutions run alone, none from a training step; every workspace within the bound,
    and the bound is the data's (the largest ratio just under it)."""
    data = json.loads(CUDNN_TABLES["H200 141 GB"].read_text())
    assert len(data["rows"]) == 66 and "no training step" in data["about"] and data["cudnn_allow_tf32"] is True
    ratios = [ws / (r["input_bytes"] + r["weight_bytes"] + r["output_bytes"])
              for r in data["rows"] for ws in r["workspace"].values()]
    assert len(ratios) == 181 and max(ratios) <= CUDNN_BOUND_RATIO and max(ratios) > CUDNN_BOUND_RATIO - 0.01
    table = CudnnTable("H200 141 GB")
    assert (table.cudnn, table.allow_tf32, table.benchmark) == (91900, True, False)


def test_the_option_is_checked():
    with pytest.raises(ValueError, match="workspaces"):
        StepConfig(workspaces="all")
    with pytest.raises(ValueError, match="simulated GPU"):
        StepConfig(workspaces="measured", device="cuda")
    with pytest.raises(ValueError, match="no measured cuDNN workspace table for H100 80 GB"):
        KernelMemory("measured", "H100 80 GB")
    with pytest.raises(ValueError, match="no measured cuDNN"):
        profile_step("resnet18", 2, image_size=64, device="simulated", capacity=GPU_CARDS["H100 80 GB"],
                     workspaces="measured")


def _mlp(workspaces):
    return profile_step("helpers.models:dropout_mlp", 4096, input_shape=(1, 28, 28), num_classes=10,
                        steady_state=True, name="dropout MLP", device="simulated", workspaces=workspaces)


def test_the_dropout_mlp_peaks_as_the_h200_did():
    """Lesson 02's MLP at batch 4,096: the bias gradient's sum over 4,096 rows stages 32 MiB, as on the H200, whose
    recorded peak the step then reaches to the byte; without kernels' memory, today's figure."""
    record = next(r for r in json.loads(REFERENCE_FILE.read_text())["runs"] if r["model"] == "dropout MLP")
    floor, measured = _mlp("none"), _mlp("measured")
    assert floor.peak_allocated_bytes == record["simulated_peak_bytes"] < record["cuda_peak_bytes"]
    assert measured.peak_allocated_bytes == record["cuda_peak_bytes"]
    allocs = [a.nbytes for a in measured.allocation_log if a.kind == "alloc"]
    staged = [i for i in range(len(allocs) - 1) if allocs[i:i + 2] == [32 * MiB, 512]]  # buffer, then semaphores
    assert staged and len(allocs) == len([a for a in floor.allocation_log if a.kind == "alloc"]) + 2 * len(staged)
    assert measured.cudnn_bound_bytes is None  # no convolution: no bound


def test_a_cnn_states_its_bound_and_counts_it_when_asked():
    floor, bound = (profile_step("resnet18", 4, image_size=64, device="simulated", workspaces=w)
                    for w in ("none", "bound"))
    assert floor.cudnn_bound_bytes == bound.cudnn_bound_bytes > 0
    assert floor.peak_allocated_bytes <= bound.peak_allocated_bytes <= floor.peak_allocated_bytes + floor.cudnn_bound_bytes
    passes = 20 + 19 + 20  # ResNet18's 20 convolutions forward and weight-gradient, 19 input-gradient (not conv1's)
    assert len(bound.allocation_log) == len(floor.allocation_log) + 2 * passes  # each workspace allocated, then freed
    sentence = Estimate.of(floor).verdict(GPU_CARDS["V100 16 GB"], "V100 16 GB").sentence("V100")
    assert "fits in V100" in sentence and "but cuDNN may need up to" in sentence and f"{CUDNN_BOUND_RATIO}" in sentence
    # on a card it does not fit, the bound adds to the excess: "and", not "but" (issue 51)
    small = min(GPU_CARDS.values())
    huge = dataclasses.replace(Estimate.of(floor), peak_bytes=small)  # the same step's lines, peak a whole card
    card = next(c for c, n in GPU_CARDS.items() if n == small)
    words = huge.verdict(small, card).sentence(card)
    assert words.startswith(f"does not fit in {card}:") and " > " in words
    assert f"(and cuDNN may need up to {floor.cudnn_bound_bytes / MiB:,.1f} MiB more:" in words and "(but " not in words
    assert huge.verdict(small, card).caveat.startswith("and cuDNN may need up to ")
    assert "counted at their bound" in Estimate.of(bound).verdict(GPU_CARDS["V100 16 GB"], "V100 16 GB").sentence("V100")


def test_reserved_is_compared_with_the_cublas_segment():
    assert cublas_segment_bytes(json.loads(REFERENCE_FILE.read_text())) == 64 * MiB  # recorded on an H200
