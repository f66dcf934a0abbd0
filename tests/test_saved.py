"""The saved-tensor inspector (lesson 02) and the mask ReLUs."""

import functools

import pytest
import torch
from torch import nn

from helpers import build_model, profile_step
from helpers.saved import inspect_saved
from helpers.masks import BitMaskReLU, BoolMaskReLU, pack_bits, replace_relu, unpack_bits


def saved_as(report):
    return [(s.node, s.attribute, s.same_as) for s in report.saved]


def test_linear_saves_its_input_and_weight():
    r = inspect_saved(nn.Linear(8, 4), torch.randn(3, 8))
    assert saved_as(r) == [("AddmmBackward0", "mat1", "input"), ("AddmmBackward0", "mat2", "parameter weight")]
    assert r.extra_bytes == 0 and r.input_bytes == 3 * 8 * 4 and r.output_bytes == 3 * 4 * 4
    assert r.saved[0].shape == (3, 8) and r.saved[0].dtype == torch.float32


@pytest.mark.parametrize("layer, saved, extra", [
    (nn.ReLU(), [("ReluBackward0", "result", "output")], 0),
    (nn.ReLU(inplace=True), [("ReluBackward0", "result", "input = output (in place)")], 0),
    (nn.Sigmoid(), [("SigmoidBackward0", "result", "output")], 0),
    (nn.Tanh(), [("TanhBackward0", "result", "output")], 0),
    (nn.GELU(), [("GeluBackward0", "self", "input")], 0),
    (BoolMaskReLU(), [("_BoolMaskReLUBackward", "saved_tensors", "new")], 16 * 32),
    (BitMaskReLU(), [("_BitMaskReLUBackward", "saved_tensors", "new")], 16 * 32 // 8),
])
def test_activations(layer, saved, extra):
    r = inspect_saved(layer, torch.randn(16, 32))
    assert saved_as(r) == saved
    assert r.extra_bytes == extra


def test_pooling_norm_conv_dropout():
    images = torch.randn(2, 3, 8, 8)
    pool = inspect_saved(nn.MaxPool2d(2), images)
    assert {(s.attribute, s.same_as, s.dtype) for s in pool.saved} == {
        ("self", "input", torch.float32), ("result1", "new", torch.int64)}
    assert pool.extra_bytes == 2 * 3 * 4 * 4 * 8
    norm = inspect_saved(nn.BatchNorm2d(3), images)
    assert norm.extra_bytes == 2 * 3 * 4  # batch mean and inverse std per channel
    assert ("input", "input") in {(s.attribute, s.same_as) for s in norm.saved}
    conv = inspect_saved(nn.Conv2d(3, 5, 3), images)
    assert {(s.attribute, s.same_as) for s in conv.saved} == {("input", "input"), ("weight", "parameter weight")}
    drop = inspect_saved(nn.Dropout(0.5), torch.randn(16, 32))
    assert drop.extra_bytes == drop.output_bytes  # on the CPU, a float mask as large as the output


def test_each_storage_is_counted_once():
    # Both the ReLU and the second Linear save the ReLU's output: one storage, counted once.
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    r = inspect_saved(net, torch.randn(5, 8))
    kinds = [s.same_as for s in r.saved if s.shape == (5, 16)]
    assert sorted(kinds) == ["new", "saved above"]
    assert r.extra_bytes == 5 * 16 * 4
    assert {s.module for s in r.saved} == {"0", "1", "2"}


def test_inspector_refuses_what_it_cannot_inspect():
    with pytest.raises(ValueError, match="input tensors"):
        inspect_saved(nn.ReLU())
    class ArgMax(nn.Module):
        def forward(self, x):
            return x.argmax(dim=1)

    with pytest.raises(ValueError, match="saved nothing"):
        inspect_saved(ArgMax(), torch.randn(2, 3))
    assert inspect_saved(nn.Identity(), torch.randn(2)).saved == []  # differentiable, keeps nothing


def test_mask_relus_give_relus_gradients():
    x = torch.randn(64, 100)
    x[:, :3] = 0.0
    g = torch.randn(64, 100)
    ref = x.clone().requires_grad_()
    nn.ReLU()(ref).backward(g)
    for make in (BoolMaskReLU, BitMaskReLU):
        mine = x.clone().requires_grad_()
        out = make()(mine)
        out.backward(g)
        assert torch.equal(out, torch.relu(x)) and torch.equal(mine.grad, ref.grad)


@pytest.mark.parametrize("shape", [(1,), (7,), (8,), (3, 5, 9)])
def test_bit_packing_round_trips(shape):
    mask = torch.rand(shape) > 0.5
    packed = pack_bits(mask)
    assert packed.dtype == torch.uint8 and packed.numel() == -(-mask.numel() // 8)
    assert torch.equal(unpack_bits(packed, mask.shape), mask)


def test_mask_relus_save_memory_only_where_nothing_else_keeps_the_output():
    def mlp(relu):
        return nn.Sequential(nn.Linear(64, 256), relu(), nn.Dropout(0.5), nn.Linear(256, 10))

    def peak(builder, batch, **kw):
        builder.__name__ = "net"
        return profile_step(builder, batch, device="simulated", steady_state=True, **kw).peak_allocated_bytes

    base = peak(functools.partial(mlp, nn.ReLU), 1024, input_shape=(64,), num_classes=10)
    bit = peak(functools.partial(mlp, BitMaskReLU), 1024, input_shape=(64,), num_classes=10)
    assert base - bit == 1024 * 256 * 4 * 31 // 32
    resnet = peak(lambda: build_model("resnet18"), 8)
    masked = peak(lambda: replace_relu(build_model("resnet18"), BitMaskReLU), 8)
    assert masked > resnet


def test_forward_saved_bytes_shows_where_cpu_and_cuda_kernels_differ():
    from helpers.saved import forward_saved_bytes

    dropout = {dev: forward_saved_bytes(lambda: nn.Dropout(0.5), (64, 512), device=dev, input_requires_grad=True)
               for dev in ("cpu", "cuda")}
    assert dropout == {"cpu": {torch.float32: 64 * 512 * 4}, "cuda": {torch.bool: 64 * 512}}
    # CUDA autocast keeps softmax in fp32, CPU autocast does not; float16 and bfloat16 save the same bytes.
    attention = lambda: nn.Sequential(nn.Linear(512, 512), nn.Softmax(dim=-1))  # noqa: E731
    cpu = forward_saved_bytes(attention, (64, 512), device="cpu", autocast_dtype=torch.bfloat16)
    fp16 = forward_saved_bytes(attention, (64, 512), device="cuda", autocast_dtype=torch.float16)
    bf16 = forward_saved_bytes(attention, (64, 512), device="cuda", autocast_dtype=torch.bfloat16)
    # The input does not require grad, so Linear keeps only its (16-bit) input, not the weight copy.
    assert cpu == {torch.bfloat16: 2 * 64 * 512 * 2}  # input copy and softmax output, both bf16
    assert fp16[torch.float32] == 64 * 512 * 4 and sum(fp16.values()) == sum(bf16.values())
    assert not torch.is_autocast_enabled("cuda")  # switched back off
    with pytest.raises(ValueError, match="'cpu', 'cuda' or 'simulated'"):
        forward_saved_bytes(attention, (1, 512), device="mps")
