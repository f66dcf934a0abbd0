"""helpers.vllm_sampler: vLLM v0.19.0's sampler pass of the profile run, on the simulated GPU."""

import pytest
import torch

from helpers.allocator.rules import round_up
from helpers.engine.meter import Meter
from helpers.gpus import CARD_48GB, GPU_CARDS
from helpers.serving import sm_count, vllm_startup
from helpers.vllm_sampler import sampler_pass, triton_buffer_rows


@pytest.mark.parametrize("reqs, sms, rows", [(1024, 132, 132), (132, 132, 132), (100, 132, 128), (40, 132, 64),
                                             (8, 132, 8), (9, 108, 16), (1024, 108, 108)])
def test_the_triton_buffer_has_a_row_per_program_rounded_to_a_power_of_two_at_most_the_sms(reqs, sms, rows):
    assert triton_buffer_rows(reqs, sms) == rows


def test_a_count_below_one_is_refused():
    with pytest.raises(ValueError, match="num_reqs and num_sm must be >= 1"):
        triton_buffer_rows(0, 132)


def _peak_above_logits(reqs: int, vocab: int, dtype: torch.dtype, num_sm: int = 132) -> tuple[int, torch.Size]:
    with Meter("simulated") as meter:
        logits = torch.empty(reqs, vocab, dtype=dtype, device=meter.device)
        before = meter.allocated()
        meter.reset_peak()
        sampled = sampler_pass(logits, num_sm)
        peak = meter.peak() - before
    return peak, sampled.shape


def test_alive_at_the_peak_float32_logits_buffer_probabilities_and_noise():
    """Llama-3.1's vocabulary, 1,024 requests, an H100: the float32 copy, the Triton buffer (132 rows), the
    probabilities and the exponential noise are alive together beside the bfloat16 logits; the rest (the dummy
    metadata, argmaxes, tables, top-k counts) is a few KiB a request row."""
    reqs, vocab = 1024, 128_256
    big = 3 * round_up(reqs * vocab * 4) + round_up(132 * vocab * 4)
    peak, shape = _peak_above_logits(reqs, vocab, torch.bfloat16)
    assert shape == (reqs,)
    assert big <= peak < big + 64 * 1024


def test_float32_logits_are_not_copied():
    """``logits.to(torch.float32)`` of float32 logits is the same tensor: one [R, V] fewer."""
    reqs, vocab = 1024, 128_256
    peak16, _ = _peak_above_logits(reqs, vocab, torch.bfloat16)
    peak32, _ = _peak_above_logits(reqs, vocab, torch.float32)
    assert peak16 - peak32 == round_up(reqs * vocab * 4)


def test_below_eight_rows_pytorch_sorts():
    """Below 8 rows, ``apply_top_k_top_p_pytorch``: the sorted values (float32) and their int64 indices are alive with
    the float32 logits, more than three float32 copies; no Triton buffer."""
    reqs, vocab = 4, 128_256
    row = reqs * vocab
    peak, _ = _peak_above_logits(reqs, vocab, torch.bfloat16)
    assert peak >= round_up(row * 4) * 2 + round_up(row * 8)
    assert peak < round_up(row * 4) * 6 + round_up(row * 8)


def test_logits_that_are_not_two_dimensional_are_refused():
    with pytest.raises(ValueError, match=r"\[num_reqs, vocab\] logits"):
        sampler_pass(torch.empty(2, 3, 4), 132)


def test_a_card_given_by_its_total_gets_its_own_sms():
    """vllm_startup's card, by name or by its CUDA total (lesson 10 gives the RTX A6000 by its total), sets the
    sampler's Triton buffer: 84 rows on an A6000, not the simulated H200's 132."""
    a6000 = CARD_48GB["RTX A6000 48 GB"]
    assert sm_count("a GPU of 47.54 GiB", a6000) == 84 and sm_count("RTX A6000 48 GB", 0) == 84
    assert sm_count("RTX 4090 24 GB", 0) == 128 and sm_count("a GPU", GPU_CARDS["A100 80 GB"]) == 108
    assert sm_count("a GPU of 47.00 GiB", 47 * 2**30) == 132  # no card of that total: the simulated H200
    options = dict(max_model_len=4096, max_num_batched_tokens=2048, max_num_seqs=256)
    on_a6000 = vllm_startup("meta-llama/Llama-3.1-8B", gpu=a6000, **options)
    assert on_a6000.gpu == "a GPU of 47.54 GiB"
    # the same run on an unknown card of the same size but one byte: 132 rows of the 128,256-token vocabulary in
    # float32 where the A6000 has 84 (256 requests: min(next power of two of 84, 84) rows)
    other = vllm_startup("meta-llama/Llama-3.1-8B", gpu=a6000 + 1, **options)
    assert other.activation_peak_bytes - on_a6000.activation_peak_bytes == (132 - 84) * 128_256 * 4
    assert (on_a6000.activation_peak_bytes, on_a6000.kv_tokens) == (521_652_736, 222_640)
