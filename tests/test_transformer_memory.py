"""helpers.transformer and helpers.models.llama: a transformer block's activations, formula vs engine (lessons 08 and 08b)."""

import pytest
import torch
from torch import nn

from helpers.engine.cuda_rules import cuda_rules
from helpers.models.gpt import GPT, GPTConfig
from helpers.models.llama import LLAMA_PRESETS, Llama, LlamaConfig
from helpers.saved import forward_saved_bytes
from helpers.techniques.checkpointing import CHECKPOINT_POLICIES
from helpers.transformer import (KORTHIKANTI_TERMS, chunked_cross_entropy, gpt_block_kept, kept_bytes,
                                 korthikanti_layer_bytes, kv_cache_bytes_per_token, measure_blocks)

SHAPES = [(2, 128, 64, 4), (3, 96, 48, 6)]  # (batch, seq, hidden, heads)


def _gpt(h, a, dropout=0.0, layers=3):
    config = GPTConfig(vocab_size=500, n_positions=256, d_model=h, n_layer=layers, n_head=a, dropout=dropout)
    return lambda: GPT(config)


@pytest.mark.parametrize("b, s, h, a", SHAPES)
@pytest.mark.parametrize("amp", [False, True])
def test_math_backend_block_bytes_equal_the_term_by_term_formula(b, s, h, a, amp):
    measured = measure_blocks(_gpt(h, a), b, s, amp=amp, attention="math")
    formula = kept_bytes(gpt_block_kept(b, s, h, a, amp=amp, attention="math"))
    assert measured == [formula] * 3  # every layer the same, and equal to the formula, byte for byte


@pytest.mark.parametrize("b, s, h, a", SHAPES)
def test_flash_and_dropout_also_match(b, s, h, a):
    for attention in ("math", "flash"):
        measured = measure_blocks(_gpt(h, a, dropout=0.1, layers=2), b, s, amp=True, attention=attention)
        assert measured == [kept_bytes(gpt_block_kept(b, s, h, a, amp=True, attention=attention, dropout=True))] * 2


def test_the_s_squared_term_is_the_softmax_output_and_vanishes_with_flash():
    b, s, h, a = 2, 128, 64, 4
    math_terms = gpt_block_kept(b, s, h, a, amp=True, attention="math")
    scores = [k for k in math_terms if k.shape == (b, a, s, s)]
    assert len(scores) == 1 and scores[0].dtype == torch.float32
    assert not any(s in k.shape[2:] and k.shape.count(s) == 2 for k in gpt_block_kept(b, s, h, a, attention="flash"))


def test_engine_agrees_with_profile_step():
    from helpers import profile_step

    p = profile_step(_gpt(64, 4, layers=2), 2, seq_len=128, vocab_size=500, amp=True, attention="math",
                     device="simulated")
    delta = p.find("blocks.1", "fwd").allocated_bytes - p.find("blocks.0", "fwd").allocated_bytes
    assert delta == measure_blocks(_gpt(64, 4, layers=2), 2, 128, amp=True, attention="math")[1]


def test_korthikanti_terms_sum_to_34_and_5():
    assert sum(t[1] for t in KORTHIKANTI_TERMS) == 34 and sum(t[2] for t in KORTHIKANTI_TERMS) == 5
    assert korthikanti_layer_bytes(1024, 32, 1600, 25) == 34 * 1024 * 32 * 1600 + 5 * 25 * 1024**2 * 32
    assert korthikanti_layer_bytes(2, 1, 4, 1) == 34 * 8 + 5 * 4


def test_checkpointing_policies_keep_less():
    build = _gpt(64, 4, layers=2)
    kept = {p: measure_blocks(build, 2, 128, amp=True, attention="math", policy=p)[1] for p in CHECKPOINT_POLICIES}
    assert kept["full"] < kept["selective"] < kept["none"]
    # full: the block's float32 output, and autocast's cached 16-bit weights and biases
    assert kept["full"] == 2 * 128 * 64 * 4 + 2 * 12 * 64 * 64 + 4 * 512


def test_llama_parameter_count_and_tiny_preset():
    assert LLAMA_PRESETS["llama3-8b"].parameter_count() == 8_030_261_248
    with torch.device("meta"):
        model = Llama("llama3-8b")
    assert sum(p.numel() for p in model.parameters()) == 8_030_261_248
    tiny = Llama("llama-tiny")
    assert sum(p.numel() for p in tiny.parameters()) == LLAMA_PRESETS["llama-tiny"].parameter_count()
    out = tiny(torch.randint(0, 1000, (2, 16)))
    assert out.shape == (2, 16, 1000)
    out.float().mean().backward()
    assert all(p.grad is not None for p in tiny.parameters())


def test_llama_blocks_are_identical_and_checkpointing_works():
    kept = measure_blocks(lambda: Llama("llama-tiny"), 2, 64, amp=True, attention="flash")
    assert kept[0] == kept[1] > 0
    assert measure_blocks(lambda: Llama("llama-tiny"), 2, 64, amp=True, policy="full")[0] < kept[0]


def test_llama_grouped_query_attention_matches_repeated_heads():
    from helpers.models.llama import LlamaAttention, rotary

    torch.manual_seed(0)
    grouped_config = LLAMA_PRESETS["llama-tiny"]                                 # 4 query heads, 2 key/value heads
    full_config = LlamaConfig(**{**grouped_config.__dict__, "n_kv_head": 4})    # every head its own key and value
    grouped, full = LlamaAttention(grouped_config).double(), LlamaAttention(full_config).double()
    with torch.no_grad():
        for name in ("q", "o"):
            getattr(full, name).weight.copy_(getattr(grouped, name).weight)
        for name in ("k", "v"):  # query head j reads key/value head j // 2
            w = getattr(grouped, name).weight.view(2, 16, 64)
            getattr(full, name).weight.copy_(w.repeat_interleave(2, dim=0).reshape(64, 64))
    x = torch.randn(1, 12, 64, dtype=torch.float64)
    cos, sin = (t.double() for t in rotary(12, 16, grouped_config.rope_theta))
    assert torch.allclose(grouped(x, cos, sin), full(x, cos, sin))


def test_rms_norm_keeps_what_a_gpu_keeps():
    def build():
        return nn.Sequential(nn.RMSNorm(256), nn.Linear(256, 256, bias=False))
    for dtype in (None, torch.float16):
        cuda = forward_saved_bytes(build, (4, 64, 256), device="cuda", autocast_dtype=dtype, input_requires_grad=True)
        simulated = forward_saved_bytes(build, (4, 64, 256), device="simulated", autocast_dtype=dtype,
                                        input_requires_grad=True)
        assert simulated == cuda


def test_rms_norm_rule_gives_rms_norms_gradients():
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(8, dtype=torch.float64, requires_grad=True)
    with cuda_rules():
        assert torch.autograd.gradcheck(lambda x, w: torch.rms_norm(x, [8], w, 1e-5), (x, w))
        y = torch.rms_norm(x, [8], w, 1e-5)
    assert torch.allclose(y, torch.rms_norm(x, [8], w, 1e-5))


def test_chunked_cross_entropy_is_the_same_loss_and_gradient():
    torch.manual_seed(0)
    hidden = torch.randn(2, 10, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 50, (2, 10))
    whole = torch.nn.functional.cross_entropy(hidden.reshape(-1, 16) @ weight.T, targets.reshape(-1))
    gh, gw = torch.autograd.grad(whole, (hidden, weight))
    chunked = chunked_cross_entropy(hidden, weight, targets, 3)
    ch, cw = torch.autograd.grad(chunked, (hidden, weight))
    assert torch.allclose(whole, chunked) and torch.allclose(gh, ch) and torch.allclose(gw, cw)


def test_kv_cache_bytes_per_token():
    assert kv_cache_bytes_per_token(32, 8, 128) == 131072  # Llama-3 8B, 16-bit: 128 KiB per token
    assert kv_cache_bytes_per_token(48, 25, 64) == 307200  # GPT-2 1.5B


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(ValueError, match="attention must be 'math' or 'flash'"):
        gpt_block_kept(1, 8, 8, 2, attention="efficient")
    with pytest.raises(ValueError, match="multiple of heads"):
        gpt_block_kept(1, 8, 10, 3)
    with pytest.raises(ValueError, match="seq must be an integer"):
        korthikanti_layer_bytes(0, 1, 8, 2)
    with pytest.raises(ValueError, match="unknown checkpointing policy"):
        measure_blocks(_gpt(64, 4), 1, 8, policy="some")
    with pytest.raises(ValueError, match="unknown attention"):
        measure_blocks(_gpt(64, 4), 1, 8, attention="fast")
    with pytest.raises(ValueError, match="n_head .* multiple of n_kv_head"):
        LlamaConfig(n_head=32, n_kv_head=5)
    with pytest.raises(ValueError, match="chunks"):
        chunked_cross_entropy(torch.randn(4, 8), torch.randn(10, 8), torch.zeros(4, dtype=torch.long), 5)
    with pytest.raises(ValueError, match="unknown Llama preset"):
        Llama("llama-70b")


# -- lessons 08 and 08b's figures: a block by part, memory against the sequence length --

@pytest.mark.parametrize("amp, attention, dropout", [(False, "math", False), (True, "math", True), (True, "flash", False)])
def test_every_kept_tensor_has_a_group_and_the_groups_sum_to_the_block(amp, attention, dropout):
    from helpers.transformer import KEPT_GROUPS, kept_by_group

    kept = gpt_block_kept(2, 128, 64, 4, amp=amp, attention=attention, dropout=dropout)
    groups = kept_by_group(kept)
    assert sum(groups.values()) == kept_bytes(kept) and all(n > 0 for n in groups.values())
    assert list(groups) == [g for g in KEPT_GROUPS if g in groups]  # in KEPT_GROUPS' order
    assert ("attention scores (b·a·s·s)" in groups) == (attention == "math")
    assert ("autocast's 16-bit weight and bias copies" in groups) == amp
    # the scores are the float32 b·a·s·s tensor; the 4h-wide tensors are GELU's input and output
    if attention == "math":
        assert groups["attention scores (b·a·s·s)"] == 4 * 2 * 4 * 128 * 128
    assert groups["MLP's 4h-wide tensors"] == 2 * 2 * 128 * 4 * 64 * (2 if amp else 4)


def test_stacked_parts_figure_keeps_one_colour_per_part_and_checks_its_input():
    from helpers.teaching.plots import plot_stacked_parts

    order = ("a", "b", "c")
    fig = plot_stacked_parts({"one": {"c": 2**20, "a": 2**21}, "two": {"b": 2**20, "x": 2**20, "a": 0}}, "MiB",
                             title="t", order=order)
    ax = fig.axes[0]
    colours = {p.get_label(): tuple(p.patches[0].get_facecolor()) for p in ax.containers}
    assert list(colours) == ["a", "b", "c", "x"]  # named parts first, in order; zero-byte parts still drawn as 0
    assert len(set(colours.values())) == 4  # one colour each
    again = plot_stacked_parts({"three": {"c": 1}}, order=order).axes[0].containers[0]
    assert tuple(again.patches[0].get_facecolor()) == colours["c"]  # the same part, the same colour, in any figure
    assert ax.get_xlabel() == "memory (MiB)"
    with pytest.raises(ValueError, match="unit"):
        plot_stacked_parts({"one": {"a": 1}}, "GB")
    with pytest.raises(ValueError, match="at most 8 parts"):
        plot_stacked_parts({"one": {str(i): 1 for i in range(9)}})


def test_memory_against_sequence_figure_is_log_log_and_checks_its_input():
    from helpers.teaching.plots import plot_memory_vs_seq

    fig = plot_memory_vs_seq([512, 1024], {"math": [2**30, 4 * 2**30]}, levels={"states": 2**31}, title="t")
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log" and ax.get_ylabel() == "memory (GiB, log scale)"
    assert list(ax.lines[0].get_ydata()) == [1, 4] and list(ax.lines[1].get_ydata()) == [2, 2]
    with pytest.raises(ValueError, match="2 values for 1 sequence"):
        plot_memory_vs_seq([512], {"math": [1, 2]})
    with pytest.raises(ValueError, match="unit"):
        plot_memory_vs_seq([512], {"math": [1]}, unit="TB")


def test_what_selective_checkpointing_saves_is_counted_as_activations():
    """Tensors that SAC saves bypassed the tracer's saved-tensor hooks (PyTorch 2.14.1's default, with a
    FutureWarning), so about 1.5 GB of saved matmul outputs were counted as "other"; the peak is unchanged."""
    import dataclasses
    import warnings

    from helpers import profile_step
    from helpers.transformer import transformer_step

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no warning about bypassed hooks either
        none, full, selective = (profile_step(transformer_step("gpt2", 512, 4, policy=p))
                                 for p in ("none", "full", "selective"))
    # the logits and their loss ("other") do not depend on the policy; what the blocks keep does
    assert none.categories["other"] == full.categories["other"] == selective.categories["other"]
    assert full.categories["activations"] < selective.categories["activations"] < none.categories["activations"]
    with pytest.raises(ValueError, match="selective activation checkpointing is not simulated"):
        profile_step(dataclasses.replace(transformer_step("gpt2", 512, 4, policy="selective"), offload=True))
