"""helpers.techniques.sharding (ZeRO's and DeepSpeed's formulas) and helpers.fsdp (FSDP2 on a fake process group)."""

import pytest
import torch
import torch.distributed as dist

from helpers.allocator.rules import round_up
from helpers.models import digits_mlp
from helpers.fsdp import fake_process_group, sharded_step
from helpers.techniques.sharding import (deepspeed_zero2_gpu_bytes, deepspeed_zero3_gpu_bytes, largest_layer_parameters,
                                         shard_numel, sharded_parameter_bytes, zero_model_state_bytes)


def test_zero_paper_table():
    """Rajbhandari et al. 2020, figure 1: 7.5B parameters, N = 64, K = 12."""
    gb = [round(zero_model_state_bytes(7_500_000_000, 64, stage) / 1e9, 1) for stage in range(4)]
    assert gb == [120.0, 31.4, 16.6, 1.9]


def test_deepspeed_estimators():
    assert deepspeed_zero2_gpu_bytes(1000, 4) == 2000 + 4500
    assert deepspeed_zero3_gpu_bytes(1000, 100, 4) == 400 + 4500
    assert largest_layer_parameters(digits_mlp()) == 256 * 256 + 256


def test_shard_numel_pads_dim0():
    assert shard_numel((10, 3), 4) == 3 * 3     # ceil(10 / 4) rows
    assert shard_numel((8,), 8) == 1
    assert shard_numel((), 2) == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_world_size(bad):
    with pytest.raises(ValueError, match="world_size"):
        zero_model_state_bytes(10, bad, 3)
    with pytest.raises(ValueError, match="world_size"):
        with fake_process_group(bad):
            pass


def test_bad_stage_and_optimizer():
    with pytest.raises(ValueError, match="stage"):
        zero_model_state_bytes(10, 2, 4)
    with pytest.raises(ValueError, match="optimizer"):
        sharded_step("mlp", 2, optimizer="lion")
    with pytest.raises(ValueError, match="no-such-model"):
        sharded_step("no-such-model", 2)
    with pytest.raises(ValueError, match="default FSDP units"):
        sharded_step("vit_b_16", 2)
    assert not dist.is_initialized()


def test_process_group_torn_down_when_body_raises():
    with pytest.raises(RuntimeError, match="inside"):
        with fake_process_group(4) as mesh:
            assert dist.is_initialized() and dist.get_world_size() == 4 and mesh.size() == 4
            raise RuntimeError("inside")
    assert not dist.is_initialized()


def test_process_group_torn_down_when_step_fails():
    with pytest.raises(Exception):
        sharded_step("gpt2", 2, batch_size=1, seq_len=4096)   # longer than GPT-2's context
    assert not dist.is_initialized()


def test_no_nested_process_group():
    with fake_process_group(2):
        with pytest.raises(ValueError, match="already initialised"):
            with fake_process_group(2):
                pass
    assert not dist.is_initialized()


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_model_states_shrink_as_the_formula_says(n):
    """Per-rank parameters and Adam states are rank 0's padded dim-0 shards, exactly
    (each storage rounded up to 512 bytes); gradients are one flat storage per FSDP unit."""
    step = sharded_step("mlp", n, batch_size=4)
    with torch.device("meta"):
        model = digits_mlp()
    params = list(model.parameters())
    assert step.parameters == sharded_parameter_bytes(model, n)
    assert step.optimizer_states == 2 * sharded_parameter_bytes(model, n)
    units = [[p for p in m.parameters()] for m in model if any(True for _ in m.parameters())]
    assert step.gradients == sum(round_up(sum(shard_numel(p.shape, n) * 4 for p in u)) for u in units)
    # and the ZeRO stage-3 formula, 16 bytes per parameter / N, up to padding and rounding
    psi = sum(p.numel() for p in params)
    assert abs(step.model_state_bytes - 16 * psi / n) <= 3 * 512 * len(params) + 16 * 4 * len(params)
    assert not dist.is_initialized()


def test_gpt2_model_states_and_transients():
    one, four = sharded_step("gpt2", 1, batch_size=1, seq_len=64), sharded_step("gpt2", 4, batch_size=1, seq_len=64)
    psi = one.parameter_count
    assert one.model_state_bytes == 16 * psi                       # no padding at N = 1; sizes are multiples of 128
    assert abs(four.model_state_bytes / (16 * psi / 4) - 1) < 1e-3
    # the root unit (embeddings, tied head) is not resharded after forward: it is the largest all-gather
    root = dict(four.units)["root"]
    assert four.after_forward["unsharded_parameters"] >= 4 * root
    assert one.largest["all_gather_buffers"] == 0                 # nothing to gather at N = 1 ...
    assert abs(one.largest["unsharded_parameters"] - four.largest["unsharded_parameters"]) < 0.001 * 4 * root  # ... but copied
    # activations are not sharded
    assert four.after_forward["other"] == sharded_step("gpt2", 2, batch_size=1, seq_len=64).after_forward["other"]
