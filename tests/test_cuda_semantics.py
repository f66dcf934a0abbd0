"""helpers.engine.cuda_rules and helpers.engine.autocast: the simulation keeps what a CUDA GPU keeps.

The reference is a forward pass on fake CUDA tensors, which runs without a GPU
(backward does not: the autograd engine asks the CUDA runtime for device 0).
"""

import pathlib
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import Meter, StepRunner, profile_step, round_up
from helpers.config import StepConfig
from helpers.engine.autocast import CUDA_AUTOCAST, NOT_EMULATED, SAME_ON_BOTH, cuda_autocast_policy
from helpers.engine.counting import StorageTracker
from helpers.engine.cuda_rules import SimulatedGradScaler, attention_saved_bytes, cuda_rules
from helpers.engine.simulated import SimulatedTracker
from helpers.saved import forward_saved_bytes


def _registered(key: str) -> set[str]:
    return {name.removeprefix("aten::") for name in torch._C._dispatch_get_all_op_names()
            if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, key)}


def test_the_cuda_lists_are_the_pinned_torchs():
    """Every op with an AutocastCUDA kernel in this torch has a policy here, and nothing else does."""
    listed = {name for names in CUDA_AUTOCAST.values() for name in names}
    assert _registered("AutocastCUDA") == listed | set(NOT_EMULATED)
    header = pathlib.Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if header.exists():  # the wheel ships the header: compare with its lists, name by name
        text = header.read_text()
        for macro, policy in (("AT_FORALL_FP32", "fp32"), ("AT_FORALL_FP32_SET_OPT_DTYPE", "fp32_set_opt_dtype"),
                              ("AT_FORALL_PROMOTE", "promote"), ("AT_FORALL_LOWER_PRECISION_FP", "lower_precision_fp")):
            body = text.split(f"#define {macro}(_)")[1].split("\n\n")[0]
            names = {".".join(filter(None, (a.strip(), b.strip()))) for a, b in re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", body)}
            assert names <= set(CUDA_AUTOCAST[policy]), (macro, names - set(CUDA_AUTOCAST[policy]))


def test_ops_both_devices_run_in_16_bits_stay_the_cpus():
    assert SAME_ON_BOTH <= set(CUDA_AUTOCAST["lower_precision_fp"]) and SAME_ON_BOTH <= _registered("AutocastCPU")
    with torch.autocast("cpu", dtype=torch.float16):
        assert F.linear(torch.ones(2, 4), torch.ones(3, 4)).dtype == torch.float16
        assert torch.mm(torch.ones(2, 4), torch.ones(4, 3)).dtype == torch.float16
    policy = cuda_autocast_policy()
    assert not SAME_ON_BOTH & set(policy) and policy["softmax.int"] == "fp32_set_opt_dtype"
    assert policy["cross_entropy_loss"] == "passthrough"  # on the CPU's fp32 list only


@pytest.mark.parametrize("model, batch", [("resnet18", 8), ("efficientnet_b0", 8), ("convnext_tiny", 8),
                                          ("swin_t", 8)])
def test_float16_forward_keeps_what_a_gpu_keeps(model, batch):
    shape = (batch, 3, 224, 224)
    cuda = sum(forward_saved_bytes(model, shape, device="cuda", autocast_dtype=torch.float16, num_classes=1000).values())
    simulated = sum(forward_saved_bytes(model, shape, device="simulated", autocast_dtype=torch.float16,
                                        num_classes=1000).values())
    cpu = sum(forward_saved_bytes(model, shape, device="cpu", autocast_dtype=torch.float16, num_classes=1000).values())
    assert abs(simulated - cuda) < 0.001 * cuda, (simulated, cuda)
    if model in ("convnext_tiny", "swin_t"):
        assert cuda - cpu > 0.05 * cuda  # the CPU's own lists would be well off


def test_attention_with_the_math_kernel_keeps_what_a_gpu_keeps():
    """Without a GPU, fake CUDA tensors make SDPA take the math kernel: compare with math on both sides."""
    shape = (4, 3, 224, 224)
    cuda = forward_saved_bytes("vit_b_16", shape, device="cuda", autocast_dtype=torch.float16, num_classes=1000)
    with cuda_rules(attention="math"):
        simulated = forward_saved_bytes("vit_b_16", shape, device="cpu", autocast_dtype=torch.float16,
                                        num_classes=1000)
    assert abs(sum(simulated.values()) - sum(cuda.values())) < 0.001 * sum(cuda.values())


def test_dropout_keeps_a_bool_mask_in_float32_training():
    def dropout_mlp():
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Dropout(0.5), nn.Linear(1024, 10))

    cuda = forward_saved_bytes(dropout_mlp, (64, 1, 28, 28), device="cuda", num_classes=10)
    assert forward_saved_bytes(dropout_mlp, (64, 1, 28, 28), device="simulated", num_classes=10) == cuda
    assert cuda[torch.bool] == 64 * 1024


@pytest.mark.parametrize("train", [True, False])
def test_dropout_allocates_its_mask_before_its_output_as_cuda_does(train):
    """``dropout_cuda`` (``aten/src/ATen/native/cuda/Dropout.cu``) makes the mask, then the output; the short-cut out of
    training makes the output first. The simulated GPU's log (what the allocator model replays) follows the kernel,
    not the order ``native_dropout`` returns them in; the counting core keeps the returned order."""
    fake = torch._subclasses.FakeTensorMode()
    with fake:
        x = torch.empty(64, 512)
    mask, output = 64 * 512, 64 * 512 * 4
    for tracker, order in ((SimulatedTracker(), [mask, output] if train else [output, mask]),
                           (StorageTracker(), [output, mask])):
        with fake, tracker:
            result = torch.ops.aten.native_dropout(x, 0.5, train)
        assert [e.delta for e in tracker.log] == order
        assert [tracker.serial_of(t) for t in result] == ([1, 0] if order[0] == mask else [0, 1])


class Attention(nn.Module):
    def forward(self, x):
        q = x.view(2, 256, 4, 32).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q * 1, q * 2, is_causal=True)


@pytest.mark.parametrize("kernel", ["flash", "math"])
def test_attention_kernels_keep_what_their_derivatives_say(kernel):
    with cuda_rules(attention=kernel):
        kept = forward_saved_bytes(Attention, (2, 256, 128), device="cpu", autocast_dtype=torch.float16,
                                   input_requires_grad=True)
    # the input's 16-bit copy is q itself (the view's storage); k and v are new tensors
    assert sum(kept.values()) == attention_saved_bytes(kernel, 2, 4, 256, 32)
    # memory-efficient attention pads its log-sum-exp to a multiple of 32 rows
    assert (attention_saved_bytes("efficient", 2, 4, 250, 32) - attention_saved_bytes("flash", 2, 4, 250, 32)
            == round_up(2 * 4 * 256 * 4) - round_up(2 * 4 * 250 * 4))
    # the math kernel keeps the sequence x sequence scores, in float32 even for 16-bit inputs
    assert attention_saved_bytes("math", 2, 4, 256, 32) - attention_saved_bytes("flash", 2, 4, 256, 32) > 2 * 4 * 256 * 256 * 2
    with pytest.raises(ValueError, match="unknown attention kernel"):
        attention_saved_bytes("ring", 1, 1, 1, 1)


def test_rules_are_removed_on_exit_and_bce_is_refused_under_them():
    x = torch.rand(4, 4)
    with cuda_rules(), torch.autocast("cpu", dtype=torch.float16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(x, x)
    with torch.autocast("cpu", dtype=torch.float16):
        F.binary_cross_entropy(x, x)  # the CPU's own policy again: runs in float32


def test_adam_step_counters_live_on_the_host(resnet18_b128):
    sgd = profile_step("resnet18", 2, image_size=32, optimizer="sgd-momentum", device="simulated", steady_state=True)
    adam = profile_step("resnet18", 2, image_size=32, optimizer="adam", device="simulated", steady_state=True)
    # two moments per parameter, counted exactly; 62 step counters not counted
    assert adam.categories["optimizer_states"] == 2 * sgd.categories["optimizer_states"]


def test_float16_amp_uses_a_grad_scaler_whose_scale_autograd_keeps():
    step = profile_step("resnet18", 2, image_size=32, amp=True, device="simulated")
    scalars = [s for s in step.at_peak() if s.shape == () and s.dtype == torch.float32]
    assert scalars, "the scaled loss keeps the scale"
    bf16 = profile_step("resnet18", 2, image_size=32, amp=True, amp_dtype="bfloat16", device="simulated")
    assert bf16.peak_allocated_bytes <= step.peak_allocated_bytes
    assert isinstance(Meter("simulated").grad_scaler(), SimulatedGradScaler)
    for amp_dtype, scaled in (("float16", True), ("bfloat16", False)):  # bfloat16 needs no scaler
        runner = StepRunner(StepConfig(model="mlp", batch_size=2, amp=True, amp_dtype=amp_dtype, device="simulated"))
        with runner.meter:
            runner.place()
        assert isinstance(runner.scaler, SimulatedGradScaler) is scaled and (runner.scaler is None) is not scaled


def _loss_storages(device: str, grad_mode) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """Shapes and dtypes of the storages a float16 cross-entropy allocates under autocast."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from helpers.engine.counting import StorageTracker
    from helpers.engine.autocast import simulated_autocast
    from helpers.engine.simulated import SimulatedTracker

    with FakeTensorMode(allow_non_fake_inputs=True), (cuda_rules() if device == "cpu" else torch.no_grad()):
        logits = torch.randn(64, 5000, device=device, dtype=torch.float16, requires_grad=True)
        targets = torch.randint(0, 5000, (64,), device=device)
        tracker = StorageTracker() if device == "cuda" else SimulatedTracker()
        if device == "cuda":  # torch.autocast("cuda") switches itself off without a GPU
            previous = torch.is_autocast_enabled("cuda")
            torch.set_autocast_enabled("cuda", True)
            autocast = torch.autocast("cpu", enabled=False)
        else:
            autocast = simulated_autocast(torch.float16)
        try:
            with grad_mode(), autocast, tracker:
                F.cross_entropy(logits, targets)
        finally:
            if device == "cuda":
                torch.set_autocast_enabled("cuda", previous)
    return sorted(((tracker.shapes[s], tracker.dtypes[s]) for s in tracker.sizes), key=str)


@pytest.mark.parametrize("grad_mode", [torch.enable_grad, torch.no_grad, torch.inference_mode])
def test_cross_entropy_under_autocast_allocates_what_cuda_does(grad_mode):
    """A composite without a CUDA autocast kernel is split, and autocast meets its parts:
    float16 log-probabilities, then nll_loss's float32 copy of them (5000 x 64 x 4 bytes)."""
    cuda = _loss_storages("cuda", grad_mode if grad_mode is not torch.inference_mode else torch.no_grad)
    assert ((64, 5000), torch.float32) in cuda and ((64, 5000), torch.float16) in cuda
    assert _loss_storages("cpu", grad_mode) == cuda
