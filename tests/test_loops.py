"""helpers.loops: inference memory, and the loops that leak."""

import math

import pytest
import torch

from helpers import round_up
from helpers.loops import GRAD_MODES, LOOPS, forward_peak, loop_memory
from helpers.models.gpt import GPT2_PRESETS


def nbytes(shape, dtype=torch.float32):
    return round_up(math.prod(shape) * dtype.itemsize)


def test_inference_keeps_nothing_for_backward():
    peak = {mode: forward_peak("resnet18", 32, grad_mode=mode, device="simulated") for mode in GRAD_MODES}
    assert peak["enabled"] > 2 * peak["no_grad"] and peak["no_grad"] == peak["inference_mode"]
    with pytest.raises(ValueError, match="grad_mode must be one of"):
        forward_peak("resnet18", 8, grad_mode="eval", device="simulated")


def test_inference_mode_counts_what_composite_operations_allocate():
    """Under inference_mode cross_entropy reaches the tracker whole; its log-softmax must still be counted."""
    no_grad = forward_peak("gpt2", 1, seq_len=64, grad_mode="no_grad", device="simulated")
    inference = forward_peak("gpt2", 1, seq_len=64, grad_mode="inference_mode", device="simulated")
    assert inference == no_grad


def test_under_autocast_no_grad_keeps_the_weight_cache_and_inference_mode_does_not():
    # At the peak (the loss), no_grad still holds every cached 16-bit weight copy: 2 bytes per parameter.
    no_grad = forward_peak("gpt2", 8, seq_len=1024, amp=True, grad_mode="no_grad", device="simulated")
    inference = forward_peak("gpt2", 8, seq_len=1024, amp=True, grad_mode="inference_mode", device="simulated")
    assert abs((no_grad - inference) - 2 * GPT2_PRESETS["gpt2"].parameter_count()) < 0.05 * 2 * 124_439_808


def test_the_leak_grows_and_the_fixes_do_not():
    after = {loop: loop_memory(loop, "mlp", 256, steps=4, device="simulated") for loop in LOOPS}
    leak = after["eval, total_loss += loss"]
    growth = [b - a for a, b in zip(leak, leak[1:])]
    assert growth[0] > 0 and growth == [growth[0]] * 3
    for loop, values in after.items():
        if loop != "eval, total_loss += loss":
            assert values == [values[0]] * 4, loop
    with pytest.raises(ValueError, match="unknown loop"):
        loop_memory("train, total += loss", device="simulated")
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        loop_memory("eval, total_loss += loss", steps=0, device="simulated")


@pytest.mark.parametrize("amp_dtype", ["float16", "bfloat16"])
def test_a_leaking_loop_under_amp_keeps_16_bit_graphs(amp_dtype):
    """loop_memory(amp=True) runs the forward pass under autocast, as the step does (it used to ignore amp).

    Each iteration of the leaking loop keeps its whole graph: what the MLP's
    (64 -> 256 -> 256 -> 10, batch 256) operations saved for backward.
    """
    def growth(**options):
        after = loop_memory("eval, total_loss += loss", "mlp", 256, steps=3, device="simulated", **options)
        grown = {b - a for a, b in zip(after, after[1:])}
        assert len(grown) == 1
        return grown.pop()

    half = torch.float16 if amp_dtype == "float16" else torch.bfloat16
    targets, total_weight = nbytes((256,), torch.int64), nbytes(())  # nll_loss saves both
    # float32: the input (the first Linear's, for its weight's gradient), both ReLU outputs (each
    # ReLU's and the next Linear's), the log-probabilities (log_softmax's and nll_loss's).
    full = nbytes((256, 64)) + 2 * nbytes((256, 256)) + nbytes((256, 10)) + targets + total_weight
    # Autocast: the Linears run in 16 bits and save their 16-bit inputs (the float32 input is freed)
    # and, where the input needs a gradient (2nd and 3rd), their 16-bit weight copies; cross_entropy's
    # log_softmax runs in its input's type (16 bits) and nll_loss on a float32 copy, both saved.
    amp = (nbytes((256, 64), half) + 2 * nbytes((256, 256), half) + nbytes((256, 256), half) + nbytes((10, 256), half)
           + nbytes((256, 10), half) + nbytes((256, 10)) + targets + total_weight)
    assert growth() == full == 602624
    assert growth(amp=True, amp_dtype=amp_dtype) == amp == 449024

