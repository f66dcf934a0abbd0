"""Grouped-query attention (``enable_gqa=True``) in the simulation: a fused kernel, as on a GPU.

PyTorch 2.14.1's CUDA dispatcher lets flash and memory-efficient attention take
``enable_gqa=True`` with the key and value un-expanded (``sdp_utils.cpp``:
``check_batch_size_and_num_heads_dense<supports_gqa=true>`` for both; see
:func:`helpers.engine.cuda_rules.attention_kernel`), so a grouped-query call
keeps no ``(batch, heads, seq, seq)`` scores unless the math kernel is asked for.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import profile_step, round_up
from helpers.engine.cuda_rules import attention_kernel, attention_saved_bytes, cuda_rules
from helpers.saved import forward_saved_bytes

B, HEADS, KV_HEADS, SEQ, DIM = 2, 8, 2, 256, 32


class GroupedQueryAttention(nn.Module):
    """Eight query heads share two key/value heads, passed un-expanded with ``enable_gqa=True``."""

    def forward(self, x):  # x: (B, SEQ, HEADS * DIM), requires grad
        q = x.view(B, SEQ, HEADS, DIM).transpose(1, 2)
        kv = x[..., :2 * KV_HEADS * DIM].reshape(B, SEQ, 2, KV_HEADS, DIM)
        k, v = (kv[:, :, i].transpose(1, 2) * 1 for i in range(2))  # new tensors, (B, KV_HEADS, SEQ, DIM)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def _kept(kernel: str) -> int:
    with cuda_rules(attention=kernel):
        kept = forward_saved_bytes(GroupedQueryAttention, (B, SEQ, HEADS * DIM), device="cpu",
                                   autocast_dtype=torch.float16, input_requires_grad=True)
    return sum(kept.values())


@pytest.mark.parametrize("kernel", ["auto", "flash", "efficient"])
def test_a_fused_kernel_keeps_the_un_expanded_key_and_value_and_no_scores(kernel):
    half = 2  # float16 under autocast
    q = round_up(B * HEADS * SEQ * DIM * half)  # the 16-bit copy of x, viewed as q
    k = v = round_up(B * KV_HEADS * SEQ * DIM * half)  # two heads, not eight
    out = round_up(B * HEADS * SEQ * DIM * half)
    lse = round_up(B * HEADS * SEQ * 4)  # float32, one per query row
    # CUDA's memory-efficient operator also keeps its random-number seed and offset
    # (two int64 scalars, 512 bytes each once rounded), which attention_saved_bytes leaves out
    rng = 2 * round_up(8) if kernel == "efficient" else 0
    assert _kept(kernel) == q + k + v + out + lse + rng
    if kernel != "efficient":  # its log-sum-exp is padded to 32 rows in the formula; 256 rows already are
        assert _kept(kernel) == attention_saved_bytes("flash", B, HEADS, SEQ, DIM, kv_heads=KV_HEADS)
    assert attention_saved_bytes("efficient", B, HEADS, SEQ, DIM, kv_heads=KV_HEADS) == q + k + v + out + lse
    # the same call with the key and value repeated to eight heads would keep 3 more heads' worth each
    assert _kept(kernel) < attention_saved_bytes("flash", B, HEADS, SEQ, DIM)


def test_the_formula_refuses_kv_heads_that_do_not_divide_the_heads():
    with pytest.raises(ValueError, match="kv_heads must divide heads"):
        attention_saved_bytes("flash", B, HEADS, SEQ, DIM, kv_heads=3)
    # the math kernel keeps the repeated key and value: kv_heads changes nothing
    assert (attention_saved_bytes("math", B, HEADS, SEQ, DIM, kv_heads=KV_HEADS)
            == attention_saved_bytes("math", B, HEADS, SEQ, DIM))


def test_the_math_kernel_still_keeps_the_scores_with_gqa():
    scores = B * HEADS * SEQ * SEQ * 4  # float32, as the math kernel computes 16-bit inputs
    assert _kept("math") - _kept("auto") > scores
    assert _kept("math") == attention_saved_bytes("math", B, HEADS, SEQ, DIM, kv_heads=KV_HEADS)


def test_the_rule_is_decided_in_one_place():
    for kernel in ("auto", "flash", "efficient"):
        assert attention_kernel(kernel) == "fused"
        assert attention_kernel(kernel, masked=True) == "math"  # an explicit mask: the upper bound
    assert attention_kernel("math") == "math"
    with pytest.raises(ValueError, match="unknown attention kernel 'ring'"):
        attention_kernel("ring")


def _tiny_llama(kv_heads: int) -> dict:
    return {"model_type": "llama", "vocab_size": 64, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": kv_heads}


def test_a_hugging_face_gqa_model_keeps_no_scores_at_auto():
    """Hugging Face's SDPA path passes ``enable_gqa=True``: at ``auto`` no (b, h, s, s) tensor is ever kept."""
    seq = 96  # no other width of the model
    auto = profile_step(_tiny_llama(2), batch_size=1, seq_len=seq, amp=True, amp_dtype="bfloat16",
                        device="simulated")
    math_ = profile_step(_tiny_llama(2), batch_size=1, seq_len=seq, amp=True, amp_dtype="bfloat16",
                         device="simulated", attention="math")
    def scores(profile):
        return [s for s in profile.storages.values() if len(s.shape) == 4 and tuple(s.shape[-2:]) == (seq, seq)]

    assert not scores(auto)  # no mask, no scores: on fake tensors too (helpers.models.hf.SDPA)
    assert scores(math_)
    assert auto.peak_allocated_bytes < math_.peak_allocated_bytes
