"""helpers.sharding (ZeRO's and DeepSpeed's formulas) and helpers.fsdp (FSDP2 on a fake process group)."""

import pytest
import torch
import torch.distributed as dist

from helpers.allocator.rules import round_up
from helpers.models import digits_mlp
from helpers.fsdp import fake_process_group, sharded_step
from helpers.sharding import (deepspeed_zero2_gpu_bytes, deepspeed_zero3_gpu_bytes, largest_layer_parameters,
                                         shard_numel, sharded_parameter_bytes, zero_model_state_bytes)


@pytest.fixture(scope="module")
def mlp_steps():
    """The MLP's sharded step at 4 samples on 1, 2, 4 and 8 ranks, measured once for the tests that read them."""
    return {n: sharded_step("mlp", n, batch_size=4) for n in (1, 2, 4, 8)}


class _GPT2TwoBlocks:
    """GPT-2 124M with 2 of its 12 blocks (``ModelSpec.at_depth``, as :mod:`helpers.depth` builds it): the same
    embeddings, tied head, widths and context, 53.6M parameters.  What the tests below assert is about the root (the
    embeddings and head), the sharding of each unit and the activations, none of which depends on how many blocks
    there are; a step of it costs 0.6 to 0.8 s of CPU where the 12-block one costs 2 to 6.5 s.  Lesson 07 asserts its
    own claims on the 12 blocks (model states against 16Ψ/N, the root gathered after forward, the embeddings and head
    as one unit resharded after forward)."""

    def model_spec(self):
        from helpers.models.presets import PRESETS

        return PRESETS["gpt2"]().at_depth(2)

    def __call__(self):
        return self.model_spec().build()


GPT2_TWO_BLOCKS = _GPT2TwoBlocks()


@pytest.fixture(scope="module")
def gpt2_steps():
    """GPT-2's sharded step (1 sample of 16 tokens; 2 blocks, :class:`_GPT2TwoBlocks`) on 1 and 4 ranks, with FSDP2's
    default units, measured once."""
    return {n: sharded_step(GPT2_TWO_BLOCKS, n, batch_size=1, seq_len=16) for n in (1, 4)}


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
    with pytest.raises(ValueError, match="first_step"):
        sharded_step("mlp", 2, first_step="none")
    assert not dist.is_initialized()


def test_process_group_torn_down_when_body_raises():
    with pytest.raises(RuntimeError, match="inside"):
        with fake_process_group(4) as mesh:
            assert dist.is_initialized() and dist.get_world_size() == 4 and mesh.size() == 4
            raise RuntimeError("inside")
    assert not dist.is_initialized()


def test_process_group_torn_down_when_step_fails():
    """The step fails in its forward (4,096 tokens, longer than GPT-2's context of 1,024; 2 of its blocks, which
    have the same context: the optimizer's first step, made before the measured one, costs less)."""
    with pytest.raises(ValueError, match="longer than the model.s context"):
        sharded_step(GPT2_TWO_BLOCKS, 2, batch_size=1, seq_len=4096)
    assert not dist.is_initialized()


def test_no_nested_process_group():
    with fake_process_group(2):
        with pytest.raises(ValueError, match="already initialised"):
            with fake_process_group(2):
                pass
    assert not dist.is_initialized()


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_model_states_shrink_as_the_formula_says(n, mlp_steps):
    """Per-rank parameters and Adam states are rank 0's padded dim-0 shards, exactly
    (each storage rounded up to 512 bytes); gradients are one flat storage per FSDP unit."""
    step = mlp_steps[n]
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


def test_gpt2_model_states_and_transients(gpt2_steps):
    one, four = gpt2_steps[1], gpt2_steps[4]
    psi = one.parameter_count
    assert [name for name, _ in one.units] == ["Block", "Block", "root"]
    assert one.model_state_bytes == 16 * psi                       # no padding at N = 1; sizes are multiples of 128
    assert abs(four.model_state_bytes / (16 * psi / 4) - 1) < 1e-3
    # the root unit (embeddings, tied head) is not resharded after forward: it is the largest all-gather
    root = dict(four.units)["root"]
    assert four.after_forward["unsharded_parameters"] >= 4 * root
    assert one.largest["all_gather_buffers"] == 0                 # nothing to gather at N = 1 ...
    assert abs(one.largest["unsharded_parameters"] - four.largest["unsharded_parameters"]) < 0.001 * 4 * root  # ... but copied
    # activations are not sharded
    assert four.after_forward["other"] == one.after_forward["other"]


def test_other_ranks_pad_parameters_and_gradients_but_not_adam_states(mlp_steps):
    """FSDP2 (_fsdp_param.py) gives every rank a parameter storage of rank 0's padded size and reduce-scatters
    into an equal flat gradient buffer per unit; Adam's states are zeros_like the unpadded local view, so only
    they are smaller on ranks with fewer (or no) rows.  The MLP's 10-row output layer on 8 ranks: chunks of 2 rows,
    ranks 5 to 7 hold none of it."""
    first, last = mlp_steps[8], sharded_step("mlp", 8, batch_size=4, rank=7)
    assert (last.parameters, last.gradients) == (first.parameters, first.gradients)
    with torch.device("meta"):
        model = digits_mlp()

    def adam_bytes(rank):
        rows = [torch.empty(p.shape, device="meta").chunk(8)[rank:rank + 1] for p in model.parameters()]
        return 2 * sum(round_up(r[0].numel() * 4) if r and r[0].numel() else 0 for r in rows)

    assert first.optimizer_states == adam_bytes(0) and last.optimizer_states == adam_bytes(7)
    assert last.optimizer_states < first.optimizer_states
    with pytest.raises(ValueError, match="rank"):
        sharded_step("mlp", 2, rank=2)


def test_hsdp_shards_within_a_group_only(mlp_steps):
    """HSDP: a (replicas, world_size // replicas) mesh; the model states are those of FSDP on one group."""
    hsdp = sharded_step("mlp", 4, batch_size=4, replicas=2)
    assert hsdp.model_state_bytes == mlp_steps[2].model_state_bytes > mlp_steps[4].model_state_bytes
    with pytest.raises(ValueError, match="replicas"):
        sharded_step("mlp", 4, replicas=3)
    assert not dist.is_initialized()


@pytest.fixture(scope="module")
def resnet_step():
    """ResNet18's sharded step (2 images of 32 x 32) on 4 ranks with FSDP2's defaults, measured once."""
    return sharded_step("resnet18", 4, batch_size=2, image_size=32)


def test_deeper_prefetch_holds_more_all_gather_buffers(resnet_step):
    default = resnet_step
    assert sharded_step("resnet18", 4, batch_size=2, image_size=32, prefetch=1).largest == default.largest
    deeper = sharded_step("resnet18", 4, batch_size=2, image_size=32, prefetch=2)
    assert deeper.largest["all_gather_buffers"] > default.largest["all_gather_buffers"]
    with pytest.raises(ValueError, match="prefetch"):
        sharded_step("mlp", 2, prefetch=0)


def test_embeddings_and_head_as_their_own_unit(gpt2_steps):
    """fully_shard([embeddings, head]): the tied weight in one unit of its own, resharded after forward,
    so nothing stays gathered between forward and backward (the root holds no parameters)."""
    grouped = sharded_step(GPT2_TWO_BLOCKS, 4, batch_size=1, seq_len=16,
                           units=lambda m: [[m.embeddings, m.head], *m.blocks])
    default = gpt2_steps[4]
    assert grouped.units[0] == ("Embeddings+Head", 50257 * 768 + 1024 * 768 + 2 * 768)
    assert grouped.units[-1] == ("root", 0)
    assert grouped.after_forward["unsharded_parameters"] == 0 < default.after_forward["unsharded_parameters"]
    assert grouped.model_state_bytes == default.model_state_bytes


_GROUPED = (lambda m: [[m.embeddings, m.head], *m.blocks])


@pytest.mark.parametrize("case", ["mlp", "gpt2", "gpt2 options", "resnet18"])
def test_a_primed_first_step_measures_what_a_trained_one_does(case, mlp_steps, gpt2_steps, resnet_step):
    """sharded_step makes the state its measured step starts from without a first forward and backward
    (first_step="primed", helpers.fsdp._prime): every field of the result, the timeline included, is the one a whole
    first training step gives, on each path the lesson takes: world size 1 (FSDP copies, not gathers); the last rank
    (smaller Adam states, here SGD's momentum) with reshard_after_forward=True; the default units; HSDP, the embeddings
    and head as one unit, deeper prefetch, checkpointing, the bf16 policy and reshard_after_forward=False together; a
    ResNet (BatchNorm buffers, 20 units).  Small configurations (2 of GPT-2's 12 blocks at 1 x 16 tokens, ResNet18 on
    32 x 32 images): the state depends on the parameters and units, not on the batch; lesson 07's 45 calls at full
    size were compared field by field when the primed step was introduced."""
    if case == "mlp":
        assert sharded_step("mlp", 1, batch_size=4, first_step="trained") == mlp_steps[1]
        options = dict(batch_size=4, rank=7, reshard_after_forward=True, optimizer="sgd-momentum")
        primed, trained = (sharded_step("mlp", 8, **options, first_step=f) for f in ("primed", "trained"))
    elif case == "gpt2":
        primed, trained = gpt2_steps[4], sharded_step(GPT2_TWO_BLOCKS, 4, batch_size=1, seq_len=16,
                                                      first_step="trained")
    elif case == "resnet18":
        primed, trained = resnet_step, sharded_step("resnet18", 4, batch_size=2, image_size=32, first_step="trained")
    else:
        options = dict(batch_size=1, seq_len=16, replicas=2, units=_GROUPED, prefetch=2, checkpoint=True,
                       mixed_precision=True, reshard_after_forward=False)
        primed, trained = (sharded_step(GPT2_TWO_BLOCKS, 4, **options, first_step=f) for f in ("primed", "trained"))
    assert primed.timeline and primed.optimizer_states > 0
    assert primed == trained
    assert not dist.is_initialized()


def test_the_sharded_figures_draw_what_the_step_measured(mlp_steps):
    from helpers import MiB
    from helpers.teaching.plots import plot_sharded_peaks, plot_sharded_timeline, plot_sharded_world_sizes

    steps = {n: mlp_steps[n] for n in (1, 2)}
    fig = plot_sharded_world_sizes(steps, {"16Ψ/N": {n: 16 * steps[1].parameter_count / n for n in steps}})
    ax = fig.axes[0]
    tops = {}
    for bar in ax.patches:   # stacked segments: the top of each N's bar
        x = round(bar.get_x() + bar.get_width() / 2)
        tops[x] = max(tops.get(x, 0), bar.get_y() + bar.get_height())
    for n, s in steps.items():
        gathered = max(u + b for _, _, u, b in s.timeline)
        assert tops[n] == pytest.approx((s.model_state_bytes + gathered) / MiB)
    assert [line.get_label() for line in ax.get_lines()] == ["16Ψ/N"]
    assert len(plot_sharded_timeline([steps[2]], ["N = 2"]).axes) == 1
    peaks = plot_sharded_peaks(list(steps.values()), ["N = 1", "N = 2"])
    assert [t.get_text() for t in peaks.axes[0].texts] == [f"{s.peak_bytes / MiB:,.0f} MiB" for s in steps.values()]
    for plot in (plot_sharded_timeline, plot_sharded_peaks):
        with pytest.raises(ValueError, match="labels"):
            plot([steps[1]], ["a", "b"])
