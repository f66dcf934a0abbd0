"""helpers.engine.backends: which backend measures, and what each does differently."""

import contextlib

import pytest
import torch

from helpers import Meter, MiB, resolve_backend
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
            hooks = meter.runtime.offload(meter.tracker) if offload else contextlib.nullcontext()
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
