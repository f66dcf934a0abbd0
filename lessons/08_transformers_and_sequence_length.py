# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Transformers and sequence length: the activation memory of a GPT, formula vs measured
#
# **Questions**
# - What does one transformer block keep for backward, tensor by tensor, and how does it grow with the sequence length?
# - Why do the published rules (ZeRO's "60 GB", Korthikanti's 34·s·b·h + 5·a·s²·b) disagree with each other and with what PyTorch allocates?
# - When do a model's activations, rather than its model states, decide whether training fits, and what removes them?
# - How many tokens of context fit on a GPU at inference?
#
# **Objectives**
# - Derive the bytes a GPT block keeps from what each operation saves, and check the derivation against the engine, byte for byte.
# - Show the a·s² term of the attention scores appear with the math kernel and vanish with flash attention.
# - Measure a Llama-shaped 8B model from 512 to 16k tokens, and set the Ultra-Scale Playbook's formula beside the measurement.
# - Measure full and selective activation checkpointing, and the logits with a chunked cross-entropy.
# - Compute the KV cache per token, and the context that fits on a card.
#
# **Time:** 50 minutes teaching, 20 minutes exercises. **GPU:** not needed (memory simulated on fake tensors: nothing is downloaded, nothing of an 8-billion-parameter model is allocated).
#
# Lessons 02 (what autograd saves), 04 (AMP, checkpointing) and 05 (model states; GPT-2 1.5B against the ZeRO paper) come first.

# %% [markdown]
# ## Setup

# %%
import dataclasses

import torch
import torch.nn.functional as F

from helpers import CUDA_OVERHEAD_BYTES, GPU_CARDS, Meter, fmt_bytes
from helpers.engine.cuda_rules import cuda_rules
from helpers.models.gpt import GPT, GPT2_PRESETS, Block, GPTConfig
from helpers.models.llama import LLAMA_PRESETS, Llama
from helpers.saved import inspect_saved
from helpers.teaching.widgets import SequenceExplorer
from helpers.techniques.checkpointing import CHECKPOINT_POLICIES
from helpers.transformer import (KORTHIKANTI_TERMS, chunked_cross_entropy, end_of_forward, gpt_block_kept, kept_bytes,
                                 korthikanti_layer_bytes, kv_cache_bytes_per_token, measure_blocks)

_ = torch.manual_seed(0)
GB = 10**9  # decimal gigabytes, as the papers quoted here use them


def gpt(config, layers=2):
    """A builder of `config`'s GPT with only `layers` blocks: every block keeps the same bytes (section 1)."""
    return lambda: GPT(dataclasses.replace(config, n_layer=layers))


def llama(config, layers=2):
    return lambda: Llama(dataclasses.replace(config, n_layer=layers))


# %%
# NBVAL_IGNORE_OUTPUT
# (why: versions and devices differ between machines)
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. One GPT block, tensor by tensor
#
# Lesson 05 found that GPT-2 1.5B keeps 36 bytes per token, hidden unit and layer under AMP with flash attention. Here we take one block apart completely, in the simplest setting first: float32, and the **math** attention kernel, the plain PyTorch composition `softmax(q kᵀ / √d) v` that every GPU can run.
#
# A small GPT (hidden h = 64, a = 4 heads, 3 blocks), batch b = 2, sequence s = 128. Lesson 02's inspector lists what each operation of one block saves for backward (on real CPU tensors, under the simulation's CUDA rules with the math kernel):

# %%
b, s, h, a = 2, 128, 64, 4
block = Block(GPTConfig(d_model=h, n_head=a))
x = torch.randn(b, s, h)
with cuda_rules("math"):
    report = inspect_saved(block, x)
print(report.table())

# %% [markdown]
# Read it from the bottom (the graph is walked from the output back):
#
# - each **LayerNorm** (`NativeLayerNormBackward0`) keeps its input and two per-token statistics, the mean and the inverse standard deviation (`result1`, `result2`, shape (b, s, 1));
# - each **Linear** (`AddmmBackward0`) keeps its input `mat1` (and its weight, a parameter: no extra memory). Lesson 02's rule, dL/dW = Gᵀ X;
# - the **attention** is two batched matmuls (`BmmBackward0`) and a softmax. The first, q kᵀ, keeps both operands: q (8 = b·a matrices of s × d) and kᵀ. The softmax keeps its output, the **b·a·s·s scores**, and the second matmul, scores × v, keeps the scores again (the same storage: "saved above") and v. The module column names the last module entered; the attention runs inside `attn`, after `attn.qkv`;
# - **GELU** keeps its input, the 4h-wide output of the first MLP linear; the second MLP linear keeps GELU's output.
#
# `helpers.transformer.gpt_block_kept` writes the same list as a function of b, s, h and a, including what the inspector counts as the block's input and output: the residual stream that the next block's first LayerNorm keeps (Korthikanti et al. count it as that LayerNorm's input). The engine then measures a whole forward pass of the 3-block GPT: each block's figure is the growth of allocated memory while it runs.

# %%
kept = gpt_block_kept(b, s, h, a, attention="math")
sbh = s * b * h
print(f"{'tensor kept by one block':<52} {'shape':<18} {'dtype':<8} {'bytes':>9} {'/ s·b·h':>8}")
for k in kept:
    print(f"{k.name:<52} {str(k.shape):<18} {str(k.dtype)[6:]:<8} {k.nbytes:>9,} {k.nbytes / sbh:>8.3f}")
small = GPTConfig(vocab_size=1000, n_positions=1024, d_model=h, n_head=a, n_layer=3)
measured = measure_blocks(gpt(small, 3), b, s, attention="math")
print(f"{'formula (sum)':<80} {kept_bytes(kept):>9,}")
print(f"engine, blocks 0, 1, 2: {', '.join(f'{m:,}' for m in measured)}")
assert measured == [kept_bytes(kept)] * 3
assert measured == [report.extra_bytes + report.output_bytes] * 3  # the inspector's extra bytes + the block's output

# %% [markdown]
# The formula and the engine agree **byte for byte**, and every block keeps the same (so later sections measure a model with two blocks and multiply by the layer count). The tests (`tests/test_transformer_memory.py`) check the same equality at two shapes, in float32 and under AMP, with both attention kernels, and with dropout.
#
# Per s·b·h, float32 with the math kernel: 8 tensors of width h (4 bytes each) and 2 of width 4h (16 bytes each) make **64 bytes**; the scores add **4·a·s²·b** bytes (a float32 b × a × s × s tensor), and the four LayerNorm statistics 16·s·b. Under AMP the matmuls return float16 and the figure changes; here is that block beside the formula of Korthikanti et al. (*Reducing Activation Recomputation in Large Transformer Models*, 2022, section 4.1), which assumes 16-bit activations, dropout with 1-byte masks, and attention that keeps its scores. To compare like with like, the block gets dropout (p = 0.1) before each residual sum:

# %%
amp_kept = gpt_block_kept(b, s, h, a, amp=True, attention="math", dropout=True)
dropped = GPTConfig(vocab_size=1000, n_positions=1024, d_model=h, n_head=a, n_layer=2, dropout=0.1)
assert measure_blocks(gpt(dropped), b, s, amp=True, attention="math") == [kept_bytes(amp_kept)] * 2
scores = b * a * s * s
print(f"{'Korthikanti et al. term':<40} {'paper':>12}   {'engine, AMP, math kernel':>26}")
engine_sbh = engine_s2 = 0
for name, c_sbh, c_s2 in KORTHIKANTI_TERMS:
    mine = [k for k in amp_kept if k.paper == name]
    m_s2 = sum(k.nbytes for k in mine if k.shape == (b, a, s, s)) / scores
    m_sbh = sum(k.nbytes for k in mine if k.shape != (b, a, s, s)) / sbh
    engine_sbh, engine_s2 = engine_sbh + m_sbh, engine_s2 + m_s2
    paper = f"{c_sbh} sbh" if c_sbh else f"{c_s2} as²b"
    engine = (f"{m_sbh:g} sbh" if m_sbh else "") + (f"{m_s2:g} as²b" if m_s2 else "") or "-"
    print(f"{name:<40} {paper:>12}   {engine:>26}")
others = [k for k in amp_kept if not k.paper]
print(f"{'total':<40} {'34 sbh + 5 as²b':>12}   {f'{engine_sbh:g} sbh + {engine_s2:g} as²b':>26}")
print("not in the paper: " + ", ".join(sorted({k.name for k in others})))
assert (engine_sbh, engine_s2) == (44, 4)

# %% [markdown]
# **44·s·b·h + 4·a·s²·b** bytes against the paper's 34 and 5. Term by term, where PyTorch keeps more or less than the paper assumes:
#
# - **+2 twice, the LayerNorm inputs**: `torch.autocast` leaves the residual stream in float32 (the parameters are float32, so the embeddings and every residual sum are), and each LayerNorm keeps that float32 input: 4 bytes, not 2.
# - **+6, q, k and v**: the math kernel upcasts 16-bit inputs to float32 before its matmuls ("keep query, key, value in high precision for accuracy", `attention.cpp`), so q, kᵀ and v are kept in 4 bytes each. (The flash kernel keeps them in 16 bits: section 2.)
# - **4 instead of 5 a·s²·b**: the softmax output is float32 (4 bytes, not 2), and this GPT, like GPT-2, has no dropout *inside* attention: no 1-byte mask of the scores and no dropped copy of them (−1 and −2).
# - **Not in the paper**: the LayerNorm statistics (16·s·b, 0.25 byte per s·b·h here), and autocast's 16-bit copies of the weights and biases, cached for backward (2 bytes per parameter: 2·12h² per block, independent of b and s).
#
# So 34 + 2 + 2 + 6 = 44. The paper's count is not wrong: it counts a Megatron-LM implementation in which everything is 16-bit. The engine counts what *this* PyTorch code keeps.
#
# ## 2. Attention kernels: the s² term appears and vanishes
#
# `torch.nn.functional.scaled_dot_product_attention` picks a kernel. The math kernel keeps the a·s² scores; the fused kernels (FlashAttention, memory-efficient attention) never materialise them: they keep q, k, v, the output, and one float32 log-sum-exp per row and head, and recompute the scores block by block in backward. The engine runs the kernel you name (`attention=`). GPT-2 124M (h = 768, a = 12), one sequence, AMP, per layer:

# %%
g124 = GPT2_PRESETS["gpt2"]
H, A = g124.d_model, g124.n_head
print(f"{'sequence':>8} {'math kernel':>12} {'flash':>10} {'scores (4·a·s²·b)':>18} {'math / flash':>12}")
per_layer = {}
for seq in (512, 1024, 2048, 4096, 8192, 16384):
    config = dataclasses.replace(g124, n_positions=seq)
    m, f = (measure_blocks(gpt(config), 1, seq, amp=True, attention=k)[1] for k in ("math", "flash"))
    per_layer[seq] = m, f
    assert m == kept_bytes(gpt_block_kept(1, seq, H, A, amp=True, attention="math"))
    assert f == kept_bytes(gpt_block_kept(1, seq, H, A, amp=True, attention="flash"))
    print(f"{seq:>8} {fmt_bytes(m):>12} {fmt_bytes(f):>10} {fmt_bytes(4 * A * seq * seq):>18} {m / f:>12.1f}")

# %% [markdown]
# With the math kernel, memory per layer grows with s²: from 8k to 16k tokens it is multiplied by about 4, and the scores are almost all of it. With flash attention it grows linearly (the weight copies are the constant part), and the ratio between the two is the whole s² term. This is why users who measure with fused attention "see no s² term at all", and why Korthikanti's 5·a·s²·b overstates any run with a fused kernel by that much. (For sequences beyond GPT-2's 1024 positions its learned position embedding is extended; nothing else changes.)
#
# Which kernel runs is the GPU's decision, not yours: flash needs 16-bit inputs, a supported head size and GPU; an explicit attention mask, or `enable_gqa=True` on a kernel that lacks it, sends the call to memory-efficient attention or to the math kernel. `torch.nn.attention.sdpa_kernel(...)` restricts the choice; on a GPU, check which ran with the profiler. (The simulation sends every masked call to the math kernel.)
#
# ## 3. The ZeRO paper's GPT-2 1.5B, once more
#
# Lesson 05 measured ZeRO's example end to end: 94 GB of activations at the end of the forward pass (AMP, flash attention, b = 32, s = 1024), against the paper's "about 60 GB". Now per layer, with the formulas beside it:

# %%
xl = GPT2_PRESETS["gpt2-xl"]
B, S, L, Hx, Ax = 32, 1024, xl.n_layer, xl.d_model, xl.n_head
layer = {k: measure_blocks(gpt(xl), B, S, amp=True, attention=k)[1] for k in ("flash", "math")}
for k, v in layer.items():
    assert v == kept_bytes(gpt_block_kept(B, S, Hx, Ax, amp=True, attention=k))
print(f"GPT-2 1.5B, b={B}, s={S}, {L} layers; activations of the blocks (GB = 10^9 bytes):")
print(f"  engine, flash attention: {L} x {layer['flash'] / GB:.2f} GB = {L * layer['flash'] / GB:6.1f} GB"
      f"   ({layer['flash'] / (B * S * Hx):.2f} bytes per s·b·h, 16-bit weight copies included)")
print(f"  engine, math kernel:     {L} x {layer['math'] / GB:.2f} GB = {L * layer['math'] / GB:6.1f} GB")
print(f"  Korthikanti et al.:      {L} x {korthikanti_layer_bytes(S, B, Hx, Ax) / GB:.2f} GB = "
      f"{L * korthikanti_layer_bytes(S, B, Hx, Ax) / GB:6.1f} GB")
print(f"  ZeRO's rule, 12 values of 2 bytes per h·b·s·layer: {12 * 2 * Hx * B * S * L / GB:.1f} GB   (paper: about 60 GB)")
assert round(L * layer["flash"] / GB) == 94 and round(12 * 2 * Hx * B * S * L / GB) == 60
assert round(layer["flash"] / (B * S * Hx)) == 37 and layer["math"] < korthikanti_layer_bytes(S, B, Hx, Ax)
assert round(korthikanti_layer_bytes(S, B, Hx, Ax) / layer["flash"]) == 3

# %% [markdown]
# ZeRO's section 3.2 estimates GPT-2-like activations as about 12 × hidden × batch × sequence × layers values (quoted): in 16 bits, **60.4 GB**, its figure. That rule has no s² term: it describes fused attention, and counts 24 bytes per s·b·h where PyTorch keeps 37 (lesson 05 took the 36 apart; the rest is the 16-bit weight copies, 2·12h² bytes per layer). Korthikanti's formula, written for attention that keeps its scores, gives **three times** the engine's flash figure, and more than even the math kernel keeps (it counts 16-bit scores plus a dropout mask and a dropped copy; the math kernel keeps one float32 copy).
#
# With activation checkpointing of every block (ZeRO: "about 8 GB"):

# %%
ck = measure_blocks(gpt(xl), B, S, amp=True, attention="flash", policy="full")[1]
inputs32, copies = 4 * B * S * Hx, 2 * (12 * Hx * Hx + 9 * Hx)
print(f"per checkpointed block: {ck / GB:.3f} GB = float32 input {inputs32 / GB:.3f} GB + 16-bit weights and biases "
      f"{copies / GB:.3f} GB (autocast's cache, alive until autocast exits)")
print(f"{L} blocks: {L * ck / GB:.1f} GB; with 16-bit block inputs and no weight cache it would be "
      f"{L * inputs32 / 2 / GB:.1f} GB; ZeRO's 60.4 GB / sqrt({L}) = {12 * 2 * Hx * B * S * L / L**0.5 / GB:.1f} GB")
assert abs(ck - inputs32 - copies) < 5 * 512

# %% [markdown]
# Checkpointed, each block keeps its float32 input (the residual stream) and, under `torch.autocast`, its 16-bit weight copies stay in autocast's cache whether or not the block saved anything (lesson 05 found them in the "other" category of its checkpointed step). 13 GB, against ZeRO's "about 8 GB". The paper does not show its count; 16-bit block inputs alone would give 5 GB, and the square-root rule of Chen et al. (2016) applied to its own 60 GB gives 8.7 GB: a reading of ours, not the paper's.
#
# ## 4. A Llama-shaped 8B model over sequence length
#
# Llama-3 8B differs from GPT-2 in every part that keeps memory: RMSNorm instead of LayerNorm, a SwiGLU MLP (three matrices, inner width 14336 = 3.5 h), grouped-query attention (32 query heads share 8 key/value heads), rotary position embeddings, no biases, no dropout, and a 128,256-token vocabulary. `helpers.models.llama` builds it in plain PyTorch, on the meta device:

# %%
l8 = LLAMA_PRESETS["llama3-8b"]
with torch.device("meta"):
    whole = Llama(l8)
P8 = sum(p.numel() for p in whole.parameters())
print(f"Llama-3 8B shape: {P8:,} parameters, h={l8.d_model}, {l8.n_layer} layers, {l8.n_head} heads, "
      f"{l8.n_kv_head} KV heads, MLP {l8.intermediate}, vocabulary {l8.vocab_size:,}")
assert P8 == l8.parameter_count() == 8_030_261_248
tiny = measure_blocks(lambda: Llama("llama-tiny"), 2, 64, amp=True, attention="flash")
assert tiny[0] == tiny[1]  # every block the same: measure two, multiply by 32

# %% [markdown]
# What does one Llama block keep? The engine's allocation log of a training step of a 2-block copy (b = 1, s = 4096, AMP, flash), every storage made in block 1 and alive at the end of the forward pass, as in lesson 05:

# %%
from helpers import profile_step

S4 = 2048
p = profile_step(llama(l8), 1, seq_len=S4, vocab_size=l8.vocab_size, amp=True, attention="flash", device="simulated")
start, end = p.find("blocks.1", "pre"), p.find("blocks.1", "fwd")  # block 1's forward pass
block1 = [st for st in p.kept_between(start, end, until=p.find("", "fwd")) if st.category == "activations"]
weight_shapes = {tuple(w.shape) for w in whole.blocks[0].parameters()}
rows, copies = {}, 0
for st in block1:
    if st.shape in weight_shapes and st.dtype == torch.float16:
        copies += st.nbytes
    else:
        key = (str(st.dtype).removeprefix("torch."), st.shape, p.allocation_event(st).label.replace("blocks.1.", ""))
        rows[key] = rows.get(key, 0) + st.nbytes
unit = S4 * l8.d_model
print(f"{'dtype':<8} {'shape':<22} {'made during':<34} {'bytes / s·b·h':>13}")
for (dtype, shape, where), nbytes in sorted(rows.items(), key=lambda kv: -kv[1]):
    print(f"{dtype:<8} {str(shape):<22} {where:<34.34} {nbytes / unit:>13.3f}")
print(f"{'total activations':<66} {sum(rows.values()) / unit:>13.3f}")
print(f"{'+ 16-bit weight copies (autocast cache)':<66} {copies / unit:>13.3f}   ({copies / GB:.2f} GB)")
assert sum(rows.values()) + copies == measure_blocks(llama(l8), 1, S4, amp=True, attention="flash")[1]
assert 54 < sum(rows.values()) / unit < 54.5

# %% [markdown]
# Grouped by where they come from (16-bit activations are 2 bytes per element):
#
# - **the MLP keeps four tensors 3.5h wide**: the gate's output (kept by SiLU), SiLU's output and the up projection's output (kept by the product), and the product (kept by the down projection): 4 × 3.5 × 2 = **28** bytes per s·b·h, where GPT-2's MLP keeps 16;
# - **the normalised input is cast once per projection**: RMSNorm returns float32 under autocast, and `q`, `k`, `v` each cast it to 16 bits and keep their copy (3 × 2), as `gate` and `up` do (2 × 2): autocast caches casts of weights, not of activations;
# - **grouped-query attention saves nothing here**: the keys and values are repeated to 32 heads before the attention kernel (as Hugging Face's `repeat_kv` does) and the kernel keeps the repeated copies, 2 + 2, beside q and the output (2 + 2). A kernel that takes the 8 heads directly would keep a quarter of that;
# - the float32 residual stream twice (4 + 4): the input of the MLP's RMSNorm, and the block's output;
# - small ones: RMSNorm's per-row inverse RMS (on a GPU its fused kernel keeps the input and this, nothing else), the rotary cosines and sines cast to 16 bits, the log-sum-exp.
#
# 28 + 10 + 8 + 8 = **54** bytes per s·b·h, plus the 16-bit weight copies (2 bytes per parameter of the block).
#
# Now the sweep. The Ultra-Scale Playbook (Hugging Face, 2025) plots Llama 8B's activation memory at batch 1 against the sequence length with Korthikanti's formula times the layers, m_act = L·s·b·h·(34 + 5·a·s/h); its curve is that formula, so its values are computed here from it (**quoted formula**, not measured). Beside it, the engine with each kernel, and the model states (16 bytes per parameter for AMP with Adam, lesson 05):

# %%
states = 16 * P8
sweep = {}
print(f"{'sequence':>8} {'Playbook formula':>17} {'engine, math':>13} {'engine, flash':>14} {'model states':>13}   (GB)")
for seq in (512, 1024, 2048, 4096, 8192, 16384):
    formula = l8.n_layer * korthikanti_layer_bytes(seq, 1, l8.d_model, l8.n_head)
    m, f = (l8.n_layer * measure_blocks(llama(l8), 1, seq, amp=True, attention=k)[1] for k in ("math", "flash"))
    sweep[seq] = formula, m, f
    print(f"{seq:>8} {formula / GB:>17.1f} {m / GB:>13.1f} {f / GB:>14.1f} {states / GB:>13.1f}")
takeover = {k: min((seq for seq, v in sweep.items() if v[i] > states), default=None) for i, k in ((1, "math"), (2, "flash"))}
print(f"activations exceed the model states from s = {takeover['math']} (math kernel), s = {takeover['flash']} (flash)")
assert takeover == {"math": 8192, "flash": 16384}
assert sweep[16384][2] < sweep[16384][0] / 10 and sweep[512][2] > 4 * sweep[512][0]

# %% [markdown]
# And over the batch size, for the four GPT-2 sizes at their 1024-token context (AMP, flash attention): activations of all blocks against the model states (16 bytes per parameter), in GB:

# %%
BATCHES = (1, 4, 16, 64)
print(f"{'model':<12} {'model states':>12} " + "".join(f"{f'b={bb}':>9}" for bb in BATCHES) + "   activations > states from")
batch_takeover = {}
for name, c in GPT2_PRESETS.items():
    per = {bb: measure_blocks(gpt(c), bb, 1024, amp=True, attention="flash")[1] for bb in BATCHES}
    cached = sum(k.nbytes for k in gpt_block_kept(1, 1024, c.d_model, c.n_head, amp=True, attention="flash")
                 if "copy" in k.name)  # autocast's weight copies: the same at every batch size
    assert all(per[bb] - cached == bb * (per[1] - cached) for bb in BATCHES)  # the rest is linear in b
    gpt_states = 16 * c.parameter_count()
    batch_takeover[name] = (gpt_states // c.n_layer - cached) // (per[1] - cached) + 1  # the first b above, exactly
    print(f"{name:<12} {gpt_states / GB:>12.1f} " + "".join(f"{c.n_layer * per[bb] / GB:>9.1f}" for bb in BATCHES)
          + f"   b = {batch_takeover[name]}")
assert all(4 < bb < 16 for bb in batch_takeover.values())

# %% [markdown]
# Beyond the autocast weight copies, activations are exactly linear in the batch (asserted above), so the batch at which they pass the model states follows exactly from two numbers: for every GPT-2 size it is between 4 and 16 sequences of 1024 tokens (last column): from there on, batch size and sequence length, not the parameter count, decide the memory.
#
# Back to Llama and the Playbook. The gap, row by row:
#
# - **At short sequences the engine keeps more than the formula.** Llama's block is not GPT-2's: its MLP keeps 28 bytes per s·b·h instead of 16, the casts and the float32 residual stream add more, and the 16-bit weight copies (0.4 GB per layer) weigh most when s is small. The 34 was derived for GPT-style blocks with a 4h MLP.
# - **At long sequences the formula keeps far more.** Its 5·a·s/h term is the scores, a dropout mask and a dropped copy; Llama has no attention dropout, the math kernel keeps one float32 copy (4·a·s/h), and flash attention keeps none. At 16k tokens the formula's 1.4 TB is the scores; flash needs about a tenth.
# - **Where activations take over**: model states are 128.5 GB whatever the sequence. With the math kernel the activations pass them at 8k tokens; with flash only at 16k. Either way, at batch 1 and 8k tokens one 80 GB GPU holds neither: this is why long-context training shards the model states (lesson 07) *and* checkpoints.
#
# ## 5. Remedies, measured
#
# **Activation checkpointing per block**, full or selective. Full: `torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)` keeps the block's input and recomputes the block in backward. Selective: the same call with a policy that decides, operation by operation, what to keep:
#
# ```python
# from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
# def save_matmuls(ctx, op, *args, **kwargs):
#     return CheckpointPolicy.MUST_SAVE if op in MATMULS_AND_ATTENTION else CheckpointPolicy.PREFER_RECOMPUTE
# checkpoint(block, x, use_reentrant=False,
#            context_fn=functools.partial(create_selective_checkpoint_contexts, save_matmuls))
# ```
#
# (`helpers.techniques.checkpointing.CheckpointedBlock`.) Matmuls are expensive to recompute and their outputs are what the next cheap operation needs; norms, activations, products and the softmax are cheap. Llama 8B at 8k tokens, batch 1, AMP, all 32 layers:

# %%
S8 = 8192
print(f"{'checkpointing':<14} {'math kernel':>12} {'flash':>10}   (GB, 32 layers)")
ckpt = {}
for policy in CHECKPOINT_POLICIES:
    ckpt[policy] = {k: l8.n_layer * measure_blocks(llama(l8), 1, S8, amp=True, attention=k, policy=policy)[1]
                    for k in ("math", "flash")}
    print(f"{policy:<14} {ckpt[policy]['math'] / GB:>12.1f} {ckpt[policy]['flash'] / GB:>10.1f}")
for k in ("math", "flash"):
    assert ckpt["full"][k] < ckpt["selective"][k] < ckpt["none"][k]
weights16 = 2 * (P8 - 2 * l8.vocab_size * l8.d_model - l8.d_model)
inputs8 = l8.n_layer * 4 * S8 * l8.d_model
print(f"in every row, 16-bit weight copies: {weights16 / GB:.1f} GB; full = those + float32 block inputs "
      f"{inputs8 / GB:.1f} GB")
assert abs(ckpt["full"]["flash"] - weights16 - inputs8) < 0.01 * GB
assert ckpt["selective"]["math"] > 4 * ckpt["none"]["flash"]


# %% [markdown]
# - **Full** checkpointing leaves each block's float32 input (4 bytes per s·h, 4.3 GB for the 32 blocks) and autocast's 16-bit weight copies (14.0 GB, which checkpointing does not touch): 18.3 GB, the same with either kernel, since the scores are recomputed too. The weight copies are now most of it; training with 16-bit parameters (or `torch.autocast` caching disabled) removes them. The price is a second forward pass of every block in backward (about a third more compute).
# - **Selective** with this policy keeps the matmuls' outputs. With flash attention it is the obvious middle: the attention output and the projections are kept, the 3.5h-wide SiLU and product are recomputed. With the **math** kernel it keeps the s² term: q kᵀ is a matmul, so its b·a·s·s output is saved, float32. Korthikanti et al.'s "selective recomputation" is the opposite choice: recompute exactly the attention core (the s² part) and keep the linear layers' inputs. A policy is a decision about operations, and the right one depends on the kernel.
#
# **The logits.** The head turns s·b hidden states into s·b·vocab logits: with Llama's 128,256-token vocabulary, at 8k tokens that is a billion values, larger than any tensor inside a block. Training code upcasts them to float32 for the loss (Hugging Face's `LlamaForCausalLM` does), and cross-entropy keeps the float32 log-softmax. Measured on the head and the loss alone (the head's weight and a batch of hidden states exist before), then with `helpers.transformer.chunked_cross_entropy`, which computes the loss 1024 tokens at a time under `torch.utils.checkpoint` so that one chunk's logits exist at a time:

# %%
def head_and_loss(chunks):
    with Meter("simulated") as meter:
        weight = torch.nn.Parameter(torch.empty(l8.vocab_size, l8.d_model, device=meter.device))
        hidden = torch.randn(1, S8, l8.d_model, device=meter.device, requires_grad=True).clone()
        targets = torch.randint(0, l8.vocab_size, (1, S8), device=meter.device)
        before = meter.allocated()
        meter.reset_peak()
        with torch.autocast("cpu", dtype=torch.float16):  # the simulation applies CUDA's autocast lists
            if chunks:
                loss = chunked_cross_entropy(hidden, weight, targets, chunks)
            else:
                loss = F.cross_entropy(F.linear(hidden, weight).float().flatten(0, 1), targets.flatten())
        kept = meter.allocated() - before
        loss.backward()
    return kept, meter.peak() - before


logits = {chunks: head_and_loss(chunks) for chunks in (0, S8 // 1024)}
print(f"s·b·vocab = {S8 * l8.vocab_size:,} logits: {S8 * l8.vocab_size * 2 / GB:.2f} GB in 16 bits, "
      f"{S8 * l8.vocab_size * 4 / GB:.2f} GB in float32")
for chunks, (kept, peak) in logits.items():
    label = "one piece" if not chunks else f"{chunks} chunks of 1024 tokens"
    print(f"  {label:<24} kept after forward {kept / GB:5.2f} GB, peak of forward + backward {peak / GB:5.2f} GB")
assert logits[8][1] < logits[0][1] / 3 and logits[8][0] < 512 * 2**10

# %% [markdown]
# In one piece the loss keeps the float32 log-softmax (4.2 GB) and the 16-bit weight copy of the head, and backward adds the float32 gradient of the logits and its 16-bit cast. Chunked, the forward pass keeps nothing (each chunk's logits and log-softmax are recomputed in backward, one chunk at a time), and the peak falls by more than three times, to about the head's own float32 gradient and 16-bit weight copy plus one chunk. The same idea, fused into one kernel, is in Liger Kernel and in torchtune's chunked losses. The logits grow with the batch and the sequence like the activations, but they are one tensor: often the largest of a training step.
#
# ## 6. Inference: the KV cache
#
# Generating token by token, a model keeps every earlier token's keys and values, for every layer: **2 · layers · KV heads · head size · bytes per value** per token. Grouped-query attention was designed for this: Llama-3 8B stores 8 key/value heads where GPT-2 1.5B stores 25. Checked against the engine: the keys and values the projections of the 16-bit Llama-3 8B (on meta, nothing allocated) produce for 16 tokens:

# %%
seen = []
with torch.device("meta"):
    model16 = Llama(l8).half()
hooks = [getattr(blk.attn, n).register_forward_hook(lambda m, i, o: seen.append(o.nbytes))
         for blk in model16.blocks for n in ("k", "v")]
with torch.inference_mode():
    model16(torch.zeros(1, 16, dtype=torch.long, device="meta"))
per_token = {"llama3-8b": kv_cache_bytes_per_token(l8.n_layer, l8.n_kv_head, l8.head_dim)}
assert sum(seen) // 16 == per_token["llama3-8b"]
for name in GPT2_PRESETS:
    c = GPT2_PRESETS[name]
    per_token[name] = kv_cache_bytes_per_token(c.n_layer, c.n_head, c.d_model // c.n_head)
card = GPU_CARDS["H100 80 GB"]
print(f"{'model':<11} {'KV cache per token':>19} {'16-bit weights':>15} {'tokens that fit on an H100 80 GB':>33}")
fit_tokens = {}
for name, nbytes in per_token.items():
    params = P8 if name == "llama3-8b" else GPT2_PRESETS[name].parameter_count()
    fit_tokens[name] = (card - CUDA_OVERHEAD_BYTES - 2 * params) // nbytes
    print(f"{name:<11} {fmt_bytes(nbytes, 'KiB'):>19} {2 * params / GB:>12.1f} GB {fit_tokens[name]:>33,}")
print(f"a 128k-token context of Llama-3 8B: {fmt_bytes(128 * 1024 * per_token['llama3-8b'], 'GiB')} of cache")
assert per_token["llama3-8b"] == 128 * 1024 and fit_tokens["llama3-8b"] > fit_tokens["gpt2-xl"]

# %% [markdown]
# 128 KiB per token for Llama-3 8B: a 128k-token context needs 16 GiB of cache per sequence, and an H100 holds about half a million tokens beside the weights (with the assumed 1 GiB of CUDA context and workspaces), shared between all the sequences of a batch. GPT-2 1.5B, five times smaller, holds fewer tokens: 300 KiB each, because every one of its 25 heads has its own keys and values. Without grouped-query attention (32 KV heads) Llama would need 512 KiB per token (exercise 3).
#
# ## 7. The widget: sequence length against a GPU
#
# Model, sequence length, batch, AMP, checkpointing policy, attention kernel and GPU. The bar shows the memory at the end of the forward pass of a steady-state step with Adam (the moment the activations peak): parameters and Adam states (12 bytes per parameter; gradients arrive in backward, 4 more), the activations (the layer count times one block, measured by the engine as above), the logits and their float32 log-softmax. First as text, for Llama 8B at 4k tokens on an H100:

# %%
explorer = SequenceExplorer(model="llama3-8b", seq=4096, batch_size=1, amp=True, policy="full", attention="flash")
print(explorer.summary())
assert explorer.message.startswith("does not fit")
explorer.model.value = "gpt2-xl"
explorer.policy.value = "none"
print(explorer.summary())
assert explorer.message.startswith("fits")

# %%
explorer

# %% [markdown]
# Llama 8B does not fit one H100 for training at any sequence length (its parameters and Adam states alone are 96 GB); GPT-2 1.5B fits at 4k tokens without checkpointing, with flash attention. Try the math kernel, then 16k tokens, then checkpointing.
#
# ## Exercises
#
# **Exercise 1: the float32 formula.** For float32 training (no AMP) with the math kernel, write the bytes a GPT block keeps as c₁·s·b·h + c₂·a·s²·b (plus the LayerNorm statistics), from `gpt_block_kept`, and check it with the engine at b = 4, s = 256, h = 128, a = 8.

# %%
# Your code here: gpt_block_kept(4, 256, 128, 8, attention="math") and measure_blocks(...)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# b1, s1, h1, a1 = 4, 256, 128, 8
# terms = gpt_block_kept(b1, s1, h1, a1, attention="math")
# c1 = sum(k.nbytes for k in terms if k.shape[-1] != 1 and k.shape != (b1, a1, s1, s1)) / (s1 * b1 * h1)
# c2 = sum(k.nbytes for k in terms if k.shape == (b1, a1, s1, s1)) / (a1 * s1 * s1 * b1)
# cfg = GPTConfig(vocab_size=1000, n_positions=1024, d_model=h1, n_head=a1, n_layer=2)
# engine = measure_blocks(gpt(cfg), b1, s1, attention="math")[1]
# print(f"{c1:g}·s·b·h + {c2:g}·a·s²·b + 16·s·b = {engine:,} bytes")
# assert (c1, c2) == (64, 4) and engine == c1 * s1 * b1 * h1 + c2 * a1 * s1 * s1 * b1 + 16 * s1 * b1
# ```
#
# 64·s·b·h + 4·a·s²·b: in float32 every kept tensor is 4 bytes, the LayerNorm outputs are kept too (the linear layers' inputs), and q, k, v, the scores and the merged heads are each one tensor.
# </details>
#
# **Exercise 2: the longest sequence.** GPT-2 1.5B at batch 1, AMP, no checkpointing: which is the longest sequence of `SequenceExplorer.SEQ_LENS` whose end-of-forward memory fits an A100 40 GB (with the assumed 1 GiB), with the math kernel, and with flash? (`from helpers import fits`.)

# %%
# Your code here: end_of_forward("gpt2-xl", seq, 1, attention=...)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# from helpers import fits
# longest = {}
# for kernel in ("math", "flash"):
#     ok = [seq for seq in SequenceExplorer.SEQ_LENS
#           if fits(end_of_forward("gpt2-xl", seq, 1, attention=kernel).peak_bytes, GPU_CARDS["A100 40 GB"])]
#     longest[kernel] = max(ok)
# print(longest)
# assert longest == {"math": 1024, "flash": 4096}
# ```
#
# 1k tokens with the math kernel, 4k with flash. Of the 40 GB, the model states take 18.7 (12 bytes per parameter at this moment); with the math kernel the scores, 25 heads × s² × 4 bytes in each of 48 layers, take 20 GB at 2k tokens; with flash the activations grow linearly, and the logits with their float32 log-softmax (6 bytes × s × 50,257) come on top.
# </details>
#
# **Exercise 3: the KV cache without grouped-query attention.** If Llama-3 8B had 32 key/value heads, how many bytes per token would its 16-bit KV cache take, and how many tokens would fit on an H100 80 GB beside the weights?

# %%
# Your code here: kv_cache_bytes_per_token(layers, kv_heads, head_dim)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# mha = kv_cache_bytes_per_token(l8.n_layer, l8.n_head, l8.head_dim)
# tokens = (GPU_CARDS["H100 80 GB"] - CUDA_OVERHEAD_BYTES - 2 * P8) // mha
# print(f"{fmt_bytes(mha, 'KiB')} per token; {tokens:,} tokens fit")
# assert mha == 4 * per_token["llama3-8b"] and tokens == fit_tokens["llama3-8b"] // 4
# ```
#
# 512 KiB per token, four times as much, and a quarter of the tokens: grouped-query attention with 4 query heads per key/value head divides the cache by 4.
# </details>
#
# ## Key points
#
# - A transformer block keeps, per token and hidden unit, a few dozen bytes that do not depend on the sequence (the inputs of its linear layers and norms, the MLP's wide tensors, the residual stream), plus the attention scores, a·s² per sequence, only if the kernel keeps them.
# - The published formulas count someone's implementation: Korthikanti's 34·s·b·h + 5·a·s²·b is Megatron-LM's 16-bit GPT with dropout and scores kept; ZeRO's 12 values per s·b·h has no s² at all. PyTorch with `torch.autocast` keeps 42 + 4·a·s/h (math kernel; 44 with dropout) or 36 (flash) bytes per s·b·h for a GPT-2 block, plus its 16-bit weight copies, and Llama's block keeps more (SwiGLU's four wide tensors, per-projection casts, repeated keys and values).
# - Flash and memory-efficient attention remove the s² term: Llama 8B at 16k tokens keeps a tenth of what the formula says. Measure with the kernel your GPU runs.
# - Full checkpointing per block leaves the block inputs (and, under autocast, 2 bytes per parameter of weight copies); a selective policy keeps what is costly to recompute, and must match the kernel: "save the matmuls" keeps the math kernel's scores.
# - The logits (s·b·vocab, float32 for the loss) can be the largest tensor of a step; a chunked cross-entropy never holds them all. At inference the KV cache, 2·layers·KV heads·head size·2 bytes per token, decides the context: 128 KiB per token for Llama-3 8B.
#
# ## Further reading
#
# - V. Korthikanti, J. Casper, S. Lym, L. McAfee, M. Andersch, M. Shoeybi, B. Catanzaro, *Reducing Activation Recomputation in Large Transformer Models*, 2022, arXiv:2205.05198, section 4.
# - S. Rajbhandari, J. Rasley, O. Ruwase, Y. He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054, section 3.
# - N. Tazi et al., *The Ultra-Scale Playbook: Training LLMs on GPU Clusters*, Hugging Face, 2025 (activation memory and recomputation).
# - T. Dao et al., *FlashAttention*, NeurIPS 2022, and *FlashAttention-2*, 2023; M. Rabe and C. Staats, *Self-attention Does Not Need O(n²) Memory*, 2021.
# - J. Ainslie et al., *GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints*, 2023; A. Grattafiori et al., *The Llama 3 Herd of Models*, 2024.
# - PyTorch documentation: `torch.nn.functional.scaled_dot_product_attention`, `torch.nn.attention.sdpa_kernel`, `torch.utils.checkpoint` (selective activation checkpointing); the PyTorch blog, *Current and New Activation Checkpointing Techniques in PyTorch* (2025).
