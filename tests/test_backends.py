"""helpers.engine.backends: which backend measures, and what each does differently."""

import contextlib
import math

import pytest
import torch
from torch import nn

from helpers import Meter, MiB, profile_step, resolve_backend
from helpers.allocator.rules import round_up
from helpers.engine.backends import CudaBackend, SimulatedBackend, get_backend
from helpers.models import build_model


def test_backend_resolution_and_errors():
    assert resolve_backend("simulated") == "simulated"
    assert resolve_backend("auto") == ("cuda" if torch.cuda.is_available() else "simulated")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        resolve_backend("tpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without a GPU")
def test_cuda_without_gpu_is_a_clear_error():
    with pytest.raises(ValueError, match="no GPU"):
        Meter("cuda")


def test_get_backend_returns_the_object_for_the_device():
    simulated = get_backend("simulated", attention="math")
    assert isinstance(simulated, SimulatedBackend) and simulated.attention == "math"
    assert simulated.name == "simulated" and not simulated.measured and simulated.total_memory() is None
    assert simulated.reserved() is None
    if torch.cuda.is_available():
        assert isinstance(get_backend("auto"), CudaBackend) and get_backend("cuda").measured


def test_the_simulation_builds_on_meta_even_a_regnet():
    model = SimulatedBackend().build(lambda: build_model("regnet_y_400mf"))
    assert {p.device.type for p in model.parameters()} == {"meta"}


def test_simulated_offload_keeps_saved_tensors_out_of_the_count():
    def kept(offload: bool) -> int:
        with Meter("simulated") as meter:
            x = torch.ones(1024, 1024, device=meter.device, requires_grad=True)  # 4 MiB
            hooks = meter.offload() if offload else contextlib.nullcontext()
            with hooks:
                y = x.sin()
                z = y.sin()  # SinBackward saves y
            del y  # on the device only if autograd kept it there
            alive = meter.allocated()
            z.sum().backward()  # the offloaded copy comes back for backward
        return alive

    assert kept(offload=False) == 12 * MiB  # x, y (saved), z
    assert kept(offload=True) == 8 * MiB    # x, z: y's saved copy is in host memory


def test_rules_are_installed_only_inside_a_simulated_meter():
    def mask_dtype():
        x = torch.ones(64, 64, requires_grad=True)
        return torch.nn.functional.dropout(x * 1, 0.5).grad_fn.__class__.__name__

    assert mask_dtype() == "MulBackward0"  # the CPU: a multiplication by a float mask
    with Meter("simulated"):
        assert mask_dtype() == "NativeDropoutBackward0"  # as on a GPU
    assert mask_dtype() == "MulBackward0"


VOCAB, WIDTH = 1000, 64


class TiedLM(nn.Module):
    """A language model whose output head shares the token embedding's weight,
    as Hugging Face's ``tie_weights`` does (BERT, GPT-2, T5...)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.mid = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.relu(self.mid(self.embed(ids))))


SHAPES = [(VOCAB, WIDTH), (WIDTH, WIDTH), (WIDTH,)]  # the embedding (= the head), mid's weight and bias
SHARED = VOCAB * WIDTH
UNTIED = sum(math.prod(s) for s in SHAPES) + SHARED  # the head's weight counted again
PARAMETER_BYTES = sum(round_up(4 * math.prod(s)) for s in SHAPES)  # float32, in 512-byte blocks


@pytest.mark.parametrize("device", ["simulated", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="model.to('cuda') needs a GPU"))])
def test_shared_parameters_stay_shared_under_every_backend(device):
    meter = Meter(device)
    built = meter.build(TiedLM)
    assert sum(p.numel() for _, p in built.named_parameters(remove_duplicate=False)) == UNTIED
    with meter:
        placed = meter.place(built)
        assert placed.head.weight is placed.embed.weight
        assert placed.head.weight.device.type == meter.device.type
        assert sum(p.numel() for p in placed.parameters()) == UNTIED - SHARED
        assert meter.allocated() == PARAMETER_BYTES  # one storage for the shared weight


def test_a_submodule_under_two_parents_is_placed_once():
    shared = nn.Linear(64, 64)
    model = nn.Sequential(nn.Sequential(shared), nn.Sequential(shared))
    meter = Meter("simulated")
    built = meter.build(lambda: model)
    with meter:
        placed = meter.place(built)
        assert placed[0][0].weight is placed[1][0].weight
        assert meter.allocated() == round_up(4 * 64 * 64) + round_up(4 * 64)
        assert meter.peak() == meter.allocated()  # no storage made and dropped on the second visit


def test_a_tied_head_is_counted_once_in_a_profile():
    """AdamW on a tied LM: parameters, gradients and both moments of the shared weight, once each."""
    profile = profile_step(TiedLM, batch_size=2, seq_len=16, vocab_size=VOCAB, optimizer="adamw",
                           device="simulated", steady_state=True)
    assert profile.parameter_count == UNTIED - SHARED
    at_step = profile.event_categories[profile.events.index(profile.find(None, "optimizer.step"))]
    assert at_step["parameters"] == at_step["gradients"] == PARAMETER_BYTES
    assert at_step["optimizer_states"] == 2 * PARAMETER_BYTES
    assert profile.model_state_bytes == 4 * PARAMETER_BYTES


def test_a_meter_leaves_storage_resize_as_it_found_it():
    """The tracker patches ``UntypedStorage.resize_`` while it counts; re-entered inside dispatch (a composite split
    under inference mode, such as ``cross_entropy``), it must still restore the original on exit.  It once left one
    wrapper behind per split, so that a few hundred generation steps recursed past Python's limit."""
    original = torch.UntypedStorage.resize_
    with Meter("simulated") as meter, torch.inference_mode():
        scores = torch.randn(4, 8, device=meter.device)
        for _ in range(3):
            torch.nn.functional.cross_entropy(scores, torch.randint(0, 8, (4,), device=meter.device))
    assert torch.UntypedStorage.resize_ is original
