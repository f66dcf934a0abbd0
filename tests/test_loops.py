"""helpers.loops: inference memory, and the loops that leak."""

import pytest

from helpers.loops import GRAD_MODES, LOOPS, forward_peak, loop_memory
from helpers.models.gpt import GPT2_PRESETS


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
