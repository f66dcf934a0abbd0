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
# - Measure full and selective activation checkpointing, what the loss keeps of the logits, and a chunked cross-entropy.
# - Compute the KV cache per token, and an upper bound on the context that fits on a card.
#
# **Time:** 45 minutes teaching (reading, running, the figures), 20 minutes exercises. **GPU:** not needed (memory simulated on fake tensors: nothing is downloaded, nothing of an 8-billion-parameter model is allocated).
#
# Lessons 02 (what autograd saves), 04 (AMP, checkpointing), 05a (model states) and 05b (GPT-2 1.5B against the ZeRO paper) come first.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import dataclasses

import torch
import torch.nn.functional as F

from helpers import CUDA_OVERHEAD_BYTES, GPU_CARDS, GiB, Meter, MiB, fmt_bytes
from helpers.engine.cuda_rules import cuda_rules
from helpers.models.gpt import GPT, GPT2_PRESETS, Block, GPTConfig
from helpers.models.llama import LLAMA_PRESETS, Llama
from helpers.saved import inspect_saved
from helpers.teaching.plots import plot_memory_vs_seq, plot_stacked_parts
from helpers.teaching.widgets import SequenceExplorer
from helpers.techniques.checkpointing import CHECKPOINT_POLICIES
from helpers.transformer import (KEPT_GROUPS, KORTHIKANTI_TERMS, chunked_cross_entropy, gpt_block_kept,
                                 kept_by_group, kept_bytes, korthikanti_layer_bytes, kv_cache_bytes_per_token,
                                 measure_blocks)

_ = torch.manual_seed(0)
GB = 10**9  # decimal gigabytes, as the papers quoted here count: converted to GiB (2**30 bytes) beside them


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
# Lesson 05b (section 1) found that a block of GPT-2 1.5B keeps about 37 bytes per token, hidden unit and layer under AMP with flash attention. Here we take one block apart completely, in the simplest setting first: float32, and the **math** attention kernel, the plain PyTorch composition `softmax(q kᵀ / √d) v` that every GPU can run.
#
# A small GPT (hidden h = 64, a = 4 heads of size d = 16, 3 blocks), batch b = 3, sequence s = 128. Lesson 02's inspector lists what each operation of one block saves for backward (on real CPU tensors, under the simulation's CUDA rules with the math kernel). The sizes are chosen so that every dimension has one name, and the table prints shapes in those names; the weights, which a Linear also saves, cost no extra memory and are left out:

# %%
b, s, h, a = 3, 128, 64, 4
block = Block(GPTConfig(d_model=h, n_head=a))
x = torch.randn(b, s, h)
with cuda_rules("math"):
    report = inspect_saved(block, x)
size_names = {1: "1", b: "b", s: "s", h: "h", a: "a", h // a: "d", b * a: "b·a", s * b: "s·b", 3 * h: "3h", 4 * h: "4h"}
assert len(size_names) == 10  # no two sizes alike
print(f"{'saved by':<36} {'module':<9} {'shape':<15} {'dtype':<8} storage")
for t in report.saved:
    if not t.same_as.startswith("parameter"):
        shape = "(" + ", ".join(size_names[n] for n in t.shape) + ")"
        print(f"{t.node + '.' + t.attribute:<36} {t.module:<9} {shape:<15} {str(t.dtype)[6:]:<8} {t.same_as}")

# %% [markdown]
# Read it from the bottom (the graph is walked from the output back):
#
# - each **LayerNorm** (`NativeLayerNormBackward0`) keeps its input and two per-token statistics, the mean and the inverse standard deviation (`result1`, `result2`, shape (b, s, 1));
# - each **Linear** (`AddmmBackward0`) keeps its input `mat1`, flattened to (s·b, h) (and its weight, a parameter: no extra memory). Lesson 02's rule, dL/dW = Gᵀ X;
# - the **attention** is two batched matmuls (`BmmBackward0`) and a softmax. The first, q kᵀ, keeps both operands: q (b·a matrices of s × d) and kᵀ. The softmax keeps its output, the **b·a·s·s scores**, and the second matmul, scores × v, keeps the scores again (the same storage: "saved above") and v. The module column names the last module entered; the attention runs inside `attn`, after `attn.qkv`;
# - **GELU** keeps its input, the 4h-wide output of the first MLP linear; the second MLP linear keeps GELU's output.
#
# `helpers.transformer.gpt_block_kept` writes the same list as a function of b, s, h and a, including what the inspector counts as the block's input and output: the residual stream that the next block's first LayerNorm keeps (Korthikanti et al. count it as that LayerNorm's input). The engine then measures a whole forward pass of the 3-block GPT: each block's figure is the growth of allocated memory while it runs.

# %%
kept = gpt_block_kept(b, s, h, a, attention="math")
sbh = s * b * h
small = GPTConfig(vocab_size=1000, n_positions=1024, d_model=h, n_head=a, n_layer=3)
measured = measure_blocks(gpt(small, 3), b, s, attention="math")
assert measured == [kept_bytes(kept)] * 3
assert measured == [report.extra_bytes + report.output_bytes] * 3  # the inspector's extra bytes + the block's output
print(f"one block keeps {kept_bytes(kept):,} bytes: gpt_block_kept's {len(kept)} tensors, the inspector's, "
      f"and the engine's blocks 0, 1 and 2 agree")
assert sum(k.nbytes for k in kept if k.shape[-1] != 1 and k.shape != (b, a, s, s)) == 64 * sbh  # see below

# %% [markdown]
# The formula, the inspector and the engine agree **byte for byte**, and every block keeps the same (so later sections measure a model with two blocks and multiply by the layer count). What "a block keeps" means, here and in the rest of the lesson, is what `measure_blocks` measures: the growth of allocated memory from the moment the block starts to the moment it returns, every storage it made and still alive: what it saved for backward, its output, and (under AMP) autocast's cached weight copies.
#
# Per s·b·h, float32 with the math kernel: 8 tensors of width h (4 bytes each) and 2 of width 4h (16 bytes each) make **64 bytes**; the scores add **4·a·s²·b** bytes (a float32 b × a × s × s tensor), and the four LayerNorm statistics 16·s·b. Under AMP the matmuls return float16 and the figure changes; here is that block beside the formula of Korthikanti et al. (*Reducing Activation Recomputation in Large Transformer Models*, 2022, section 4.1), which assumes 16-bit activations, dropout with 1-byte masks, and attention that keeps its scores. To compare like with like, the block gets dropout (p = 0.1) before each residual sum:

# %%
amp_kept = gpt_block_kept(b, s, h, a, amp=True, attention="math", dropout=True)
dropped = GPTConfig(vocab_size=1000, n_positions=1024, d_model=h, n_head=a, n_layer=2, dropout=0.1)
assert measure_blocks(gpt(dropped), b, s, amp=True, attention="math") == [kept_bytes(amp_kept)] * 2
scores = b * a * s * s
print(f"{'Korthikanti et al. term':<40} {'paper':>8}   {'engine, AMP, math kernel':>24}")
engine_sbh = engine_s2 = 0
agree = []
for name, c_sbh, c_s2 in KORTHIKANTI_TERMS:
    mine = [k for k in amp_kept if k.paper == name]
    m_s2 = sum(k.nbytes for k in mine if k.shape == (b, a, s, s)) / scores
    m_sbh = sum(k.nbytes for k in mine if k.shape != (b, a, s, s)) / sbh
    engine_sbh, engine_s2 = engine_sbh + m_sbh, engine_s2 + m_s2
    if (m_sbh, m_s2) == (c_sbh, c_s2):
        agree.append(name)
        continue  # only the terms where PyTorch differs are printed
    paper = f"{c_sbh} sbh" if c_sbh else f"{c_s2} as²b"
    engine = (f"{m_sbh:g} sbh" if m_sbh else "") + (f"{m_s2:g} as²b" if m_s2 else "") or "-"
    print(f"{name:<40} {paper:>8}   {engine:>24}")
print(f"{'total':<40} {'34 sbh + 5 as²b':>8}   {f'{engine_sbh:g} sbh + {engine_s2:g} as²b':>24}")
print(f"the other {len(agree)} terms agree: " + ", ".join(agree))
print("not in the paper: " + ", ".join(sorted({k.name for k in amp_kept if not k.paper})))
assert (engine_sbh, engine_s2) == (44, 4) and len(agree) == 7

# %% [markdown]
# **44·s·b·h + 4·a·s²·b** bytes against the paper's 34 and 5. Term by term, where PyTorch keeps more or less than the paper assumes:
#
# - **+2 twice, the LayerNorm inputs**: `torch.autocast` leaves the residual stream in float32 (the parameters are float32, so the embeddings and every residual sum are), and each LayerNorm keeps that float32 input: 4 bytes, not 2.
# - **+6, q, k and v**: the math kernel upcasts 16-bit inputs to float32 before its matmuls ("keep query, key, value in high precision for accuracy", `attention.cpp`), so q, kᵀ and v are kept in 4 bytes each. (The flash kernel keeps them in 16 bits: section 2.)
# - **4 instead of 5 a·s²·b**: the softmax output is float32 (4 bytes, not 2), and this GPT, like GPT-2, has no dropout *inside* attention: no 1-byte mask of the scores and no dropped copy of them (−1 and −2).
# - **Not in the paper**: the LayerNorm statistics (16·s·b, 0.25 byte per s·b·h here), and autocast's 16-bit copies of the weights and biases, cached for backward (2 bytes per parameter: 2·12h² per block, independent of b and s).
#
# So 34 + 2 + 2 + 6 = 44. The paper is not wrong: it counts a Megatron-LM implementation in which everything is 16-bit; the engine counts what *this* PyTorch code keeps.
#
# ## 2. Attention kernels: the s² term appears and vanishes
#
# `torch.nn.functional.scaled_dot_product_attention` picks a kernel. The math kernel keeps the a·s² scores; the fused kernels (FlashAttention, memory-efficient attention) never materialise them: they keep q, k, v, the output, and one float32 log-sum-exp per row and head, and recompute the scores block by block in backward. The engine runs the kernel you name (`attention=`). First one block of GPT-2 124M (h = 768, a = 12) at its full context, one sequence of 1024 tokens, by part (`gpt_block_kept`, grouped with `kept_by_group`):

# %%
g124 = GPT2_PRESETS["gpt2"]
H, A = g124.d_model, g124.n_head
columns = {"float32, math kernel": kept_by_group(gpt_block_kept(1, 1024, H, A, attention="math")),
           "AMP, math kernel": kept_by_group(gpt_block_kept(1, 1024, H, A, amp=True, attention="math")),
           "AMP, flash attention": kept_by_group(gpt_block_kept(1, 1024, H, A, amp=True, attention="flash"))}
assert measure_blocks(gpt(g124), 1, 1024, amp=True, attention="flash")[1] == sum(columns["AMP, flash attention"].values())
plot_stacked_parts(columns, "MiB", title="What one GPT-2 124M block keeps (b = 1, s = 1024), by part", order=KEPT_GROUPS)

# %% [markdown]
# Look at the vermillion segment: the float32 scores (4·a·s² bytes, 48 MiB) weigh about as much as everything else the block keeps at 1024 tokens, and under AMP they stay float32, because the math kernel computes in float32. Flash attention removes the segment entirely. AMP halves the linear layers' inputs and the MLP's wide tensors (orange, sky blue), not the float32 residual stream (blue) nor, in the math kernel, q, k and v (green), and it adds autocast's 16-bit weight copies (pink, 13.5 MiB per block whatever b and s). Now the same block from 512 to 16k tokens, per layer, with both kernels:

# %%
SEQS = (512, 1024, 2048, 4096, 8192, 16384)
per_layer = {}
for seq in SEQS:
    config = dataclasses.replace(g124, n_positions=seq)
    m, f = (measure_blocks(gpt(config), 1, seq, amp=True, attention=k)[1] for k in ("math", "flash"))
    per_layer[seq] = m, f
    assert m == kept_bytes(gpt_block_kept(1, seq, H, A, amp=True, attention="math"))
    assert f == kept_bytes(gpt_block_kept(1, seq, H, A, amp=True, attention="flash"))
assert 3.8 < per_layer[16384][0] / per_layer[8192][0] < 4 and 1.9 < per_layer[16384][1] / per_layer[8192][1] < 2
assert per_layer[16384][0] / per_layer[16384][1] > 25 and 4 * A * 16384**2 > 0.95 * per_layer[16384][0]
plot_memory_vs_seq(SEQS, {"math kernel (engine)": [m for m, _ in per_layer.values()],
                          "flash attention (engine)": [f for _, f in per_layer.values()],
                          "the scores alone, 4·a·s²·b": [4 * A * seq * seq for seq in SEQS]},
                   unit="MiB", title="GPT-2 124M, one layer, b = 1, AMP")

# %% [markdown]
# Look at the slopes: on log-log axes the math kernel's line bends up to slope 2 and joins the line of the scores alone (95% of it at 16k tokens); flash attention's line has slope 1 at long sequences and flattens at short ones, where the 13.5 MiB of weight copies are a constant part. At 16k tokens the math kernel keeps more than 25 times what flash keeps. This is why users who measure with fused attention "see no s² term at all". (Beyond GPT-2's 1024 positions its position embedding is extended; nothing else changes.)
#
# Which kernel runs is decided at each call by the GPU's dispatcher. In PyTorch 2.14.1 (`select_sdp_backend`, `aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`) it tries cuDNN attention (first only on Hopper and Blackwell with a recent cuDNN), FlashAttention, memory-efficient attention, then the math kernel, and takes the first whose checks pass. FlashAttention needs 16-bit inputs, a head size up to 256 and no explicit `attn_mask` (`is_causal=True` is fine), and accepts `enable_gqa=True`; memory-efficient attention accepts a mask, `enable_gqa=True` and float32. So on an H100 a masked or grouped-query call runs a fused kernel and keeps no scores; the math kernel is the last resort, or what `torch.nn.attention.sdpa_kernel(SDPBackend.MATH)` asks for. **The simulation is coarser**: it sends every call with an `attn_mask` or `enable_gqa=True` to the math kernel, so its figures for those calls are an upper bound on a GPU's.
#
# ## 3. The ZeRO paper's GPT-2 1.5B, once more
#
# Lesson 05b (section 1) measured ZeRO's example end to end (AMP, flash attention, b = 32, s = 1024), against the paper's "about 60 GB" (55.9 GiB) of activations. Now per block, with the formulas beside it; a block's figure is what it keeps, as defined in section 1 (`measure_blocks`):

# %%
xl = GPT2_PRESETS["gpt2-xl"]
B, S, L, Hx, Ax = 32, 1024, xl.n_layer, xl.d_model, xl.n_head
layer = {k: measure_blocks(gpt(xl), B, S, amp=True, attention=k)[1] for k in ("flash", "math")}
flash_kept = gpt_block_kept(B, S, Hx, Ax, amp=True, attention="flash")
assert layer["flash"] == kept_bytes(flash_kept)
assert layer["math"] == kept_bytes(gpt_block_kept(B, S, Hx, Ax, amp=True, attention="math"))
unit = B * S * Hx  # s·b·h
weight_copies = sum(k.nbytes for k in flash_kept if "weight copy" in k.name)
bias_copies = sum(k.nbytes for k in flash_kept if "bias copy" in k.name)
saved = layer["flash"] - weight_copies - bias_copies  # the tensors saved for backward, and the output
korthikanti, zero = korthikanti_layer_bytes(S, B, Hx, Ax), 12 * 2 * Hx * B * S * L
print(f"one block, flash: {layer['flash']:,} B = {layer['flash'] / unit:.2f} B per s·b·h = "
      f"{saved / unit:.2f} saved and output + {weight_copies / unit:.2f} weight copies "
      f"+ {bias_copies:,} B of bias copies")
print(f"{L} blocks: engine, flash {L * layer['flash'] / GiB:.1f} GiB; engine, math kernel {L * layer['math'] / GiB:.1f} GiB; "
      f"Korthikanti et al. {L * korthikanti / GiB:.1f} GiB")
print(f"ZeRO's rule, 12 values x 2 bytes per s·b·h and layer: {zero / GiB:.1f} GiB (= {zero / GB:.1f} GB; paper: about 60 GB)")
assert weight_copies == 2 * 12 * Hx * Hx and bias_copies == 29_696 and layer["flash"] - bias_copies == 1_952_677_888
assert 36.07 < saved / unit < 36.08 and 37.24 < layer["flash"] / unit < 37.25
assert round(zero / GB) == 60 and layer["math"] < korthikanti and round(korthikanti / layer["flash"]) == 3

# %% [markdown]
# One block keeps **37.24 bytes per s·b·h**: 36.07 of tensors saved for backward and its output, 1.17 of 16-bit weight copies (2·12h² bytes), and four 16-bit bias copies, 29,696 bytes. Lesson 05b measures the same block with the same helper. Counting only the storages a profile files under "activations" gives the same bytes less the bias copies, which autocast caches but nothing saves for backward, so they are filed under "other" (1,952,677,888 bytes, asserted above).
#
# ZeRO (Rajbhandari et al., 2019, section 3.2 and its footnote) estimates a GPT-2-like model's activations as about 12 × hidden × batch × sequence × layers values: in 16 bits, **60.4 GB** (56.2 GiB), its "about 60 GB". The rule predates fused attention kernels (FlashAttention is from 2022); it is an approximation that leaves the a·s² scores out, and even with a fused kernel, which keeps no scores, PyTorch keeps 37 bytes per s·b·h where it counts 24. Korthikanti's formula, written for attention that keeps its scores, gives **three times** the engine's flash figure, and more than even the math kernel keeps (16-bit scores plus a dropout mask and a dropped copy, against one float32 copy).
#
# With activation checkpointing, ZeRO says "about 8 GB" (7.5 GiB). Here every block is checkpointed:

# %%
ck = measure_blocks(gpt(xl), B, S, amp=True, attention="flash", policy="full")[1]
inputs32 = 4 * B * S * Hx
print(f"per checkpointed block: {ck / MiB:,.1f} MiB = float32 input {inputs32 / MiB:,.1f} MiB + 16-bit weights and "
      f"biases {(weight_copies + bias_copies) / MiB:,.1f} MiB (autocast's cache, alive until autocast exits)")
print(f"{L} blocks: {L * ck / GiB:.1f} GiB; ZeRO's 60.4 GB / sqrt({L}) = {zero / L**0.5 / GB:.1f} GB "
      f"(= {zero / L**0.5 / GiB:.1f} GiB)")
assert abs(ck - inputs32 - weight_copies - bias_copies) < 5 * 512 and round(zero / L**0.5 / GB, 1) == 8.7

# %% [markdown]
# Checkpointed, each block keeps its float32 input (the residual stream), and autocast's cache keeps its 16-bit weight copies whether or not the block saved anything: 12.1 GiB, against ZeRO's "about 8 GB". The paper says where its figure comes from: checkpointing reduces the activation memory "by approximately the square root of the total activations", citing Chen et al. (2016), whose schedule keeps about √L segment boundaries instead of every layer's tensors: 60.4 GB / √48 = 8.7 GB (8.1 GiB), its "about 8 GB". Checkpointing every block is a different schedule: it keeps all 48 block inputs (float32, 9.4 GiB) and the weight copies; Chen et al.'s keeps fewer inputs, but holds a whole segment's activations while it recomputes that segment in backward.
#
# ## 4. A Llama-shaped 8B model over sequence length
#
# Llama-3 8B differs from GPT-2 in every part that keeps memory: RMSNorm instead of LayerNorm, a SwiGLU MLP (three matrices, inner width 14336 = 3.5 h), grouped-query attention (32 query heads share 8 key/value heads), rotary position embeddings, no biases, no dropout, and a 128,256-token vocabulary. `helpers.models.llama` builds it in plain PyTorch, on the meta device:

# %%
l8 = LLAMA_PRESETS["llama3-8b"]
with torch.device("meta"):
    whole = Llama(l8)
P8 = sum(p.numel() for p in whole.parameters())
print(f"Llama-3 8B shape: {P8:,} parameters")
assert P8 == l8.parameter_count() == 8_030_261_248
assert (l8.d_model, l8.n_layer, l8.n_head, l8.n_kv_head, l8.intermediate, l8.vocab_size) == (
    4096, 32, 32, 8, 14336, 128_256)  # h, layers, heads, KV heads, the MLP's width, the vocabulary
tiny = measure_blocks(lambda: Llama("llama-tiny"), 2, 64, amp=True, attention="flash")
assert tiny[0] == tiny[1]  # every block the same: measure two, multiply by 32

# %% [markdown]
# What does one Llama block keep? The engine's allocation log of a training step of a 2-block copy (b = 1, s = 2048, AMP, flash): every storage made in block 1 and alive at the end of the forward pass, as in lesson 05b, grouped by the part of the block it belongs to (the log says which module made it). Llama has no biases, so this is exactly `measure_blocks`' figure (asserted):

# %%
from helpers import profile_step

S4 = 2048
p = profile_step(llama(l8), 1, seq_len=S4, vocab_size=l8.vocab_size, amp=True, attention="flash", device="simulated")
start, end = p.find("blocks.1", "pre"), p.find("blocks.1", "fwd")  # block 1's forward pass
block1 = [st for st in p.kept_between(start, end, until=p.find("", "fwd")) if st.category == "activations"]
weight_shapes = {tuple(w.shape) for w in whole.blocks[0].parameters()}
hsz = (1, S4, l8.d_model)


def part(st):
    """The part of a Llama block a kept storage belongs to."""
    if st.shape in weight_shapes and st.dtype == torch.float16:
        return "16-bit weight copies (autocast cache)"
    if st.shape[-1] == l8.intermediate:
        return "MLP: four 3.5h-wide tensors"
    if st.shape == hsz:
        return "residual stream (float32)" if st.dtype == torch.float32 else "16-bit casts of the normalised input"
    if len(st.shape) >= 4:
        return "attention: q, repeated k and v, output"
    return "small: rotary tables, log-sum-exp, RMSNorm statistics"


parts = {}
for st in block1:
    parts[part(st)] = parts.get(part(st), 0) + st.nbytes
unit = S4 * l8.d_model
print(f"{'one Llama block keeps':<56} {'bytes / s·b·h':>13}")
for name, nbytes in sorted(parts.items(), key=lambda kv: -kv[1]):
    print(f"{name:<56} {nbytes / unit:>13.2f}")
copies = parts.pop("16-bit weight copies (autocast cache)")
assert sum(parts.values()) + copies == measure_blocks(llama(l8), 1, S4, amp=True, attention="flash")[1]
assert [round(parts[k] / unit, 2) for k in ("MLP: four 3.5h-wide tensors", "16-bit casts of the normalised input",
        "attention: q, repeated k and v, output", "residual stream (float32)")] == [28, 10, 8, 8]
assert 54 < sum(parts.values()) / unit < 54.5

# %% [markdown]
# Grouped by where they come from (16-bit activations are 2 bytes per element):
#
# - **the MLP keeps four tensors 3.5h wide**: the gate's output (kept by SiLU), SiLU's output and the up projection's output (kept by the product), and the product (kept by the down projection): 4 × 3.5 × 2 = **28**, where GPT-2's MLP keeps 16;
# - **the normalised input is cast once per projection**: RMSNorm returns float32 under autocast, and `q`, `k`, `v`, `gate` and `up` each cast it to 16 bits and keep their copy (5 × 2 = 10): autocast caches casts of weights, not of activations;
# - **grouped-query attention saves nothing here**: the keys and values are repeated to 32 heads before the kernel (as Hugging Face's `repeat_kv` does), and the kernel keeps the repeated copies (2 + 2) beside q and the output (2 + 2);
# - the float32 residual stream twice (4 + 4), and small ones: RMSNorm's per-row statistics, the rotary tables cast to 16 bits, the log-sum-exp.
#
# 28 + 10 + 8 + 8 = **54** bytes per s·b·h, plus the 16-bit weight copies (2 bytes per parameter of the block, 0.41 GiB, whatever s and b). The 54 is **this implementation's** figure, not Llama's: the casts and the float32 residual stream come from float32 weights under `torch.autocast` (a model held in bfloat16 casts nothing and keeps a 16-bit residual stream), the repeated keys and values from `repeat_kv` (with `enable_gqa=True` a fused kernel keeps the 8 heads), and fused RMSNorm or SwiGLU kernels keep fewer tensors than PyTorch's composition of them.
#
# Now the sweep. The Ultra-Scale Playbook (Hugging Face, 2025) plots Llama 8B's activation memory at batch 1 against the sequence length with Korthikanti's formula times the layers, m_act = L·s·b·h·(34 + 5·a·s/h); its curve is that formula, so its values are computed here from it (**quoted formula**, not measured). Beside it, the engine with each kernel, and the model states (16 bytes per parameter for AMP with Adam, lesson 05a):

# %%
states = 16 * P8
sweep = {}
for seq in SEQS:
    formula = l8.n_layer * korthikanti_layer_bytes(seq, 1, l8.d_model, l8.n_head)
    m, f = (l8.n_layer * measure_blocks(llama(l8), 1, seq, amp=True, attention=k)[1] for k in ("math", "flash"))
    sweep[seq] = formula, m, f
takeover = {k: min((seq for seq, v in sweep.items() if v[i] > states), default=None) for i, k in ((1, "math"), (2, "flash"))}
print(f"model states {states / GiB:.1f} GiB; the activations pass them from s = {takeover['math']} (math kernel), "
      f"s = {takeover['flash']} (flash)")
assert takeover == {"math": 8192, "flash": 16384}
assert sweep[16384][2] < sweep[16384][0] / 10 and sweep[512][2] > 4 * sweep[512][0]
plot_memory_vs_seq(SEQS, {"Playbook: Korthikanti's formula x 32 layers (quoted)": [v[0] for v in sweep.values()],
                          "engine, math kernel": [v[1] for v in sweep.values()],
                          "engine, flash attention": [v[2] for v in sweep.values()]},
                   unit="GiB", levels={"model states, 16 bytes per parameter": states},
                   title="Llama-3 8B, activations of the 32 blocks, b = 1, AMP")

# %% [markdown]
# Look at where each line crosses the dashed one. The formula's line (quoted, not measured) is steeper than the engine's with the math kernel and far above flash attention's at long sequences; at 512 tokens it is below both. With the math kernel the activations pass the model states at 8k tokens, with flash only at 16k.
#
# And over the batch size, for the four GPT-2 sizes at their 1024-token context (AMP, flash attention): at which batch do the activations of all blocks pass the model states (16 bytes per parameter)?

# %%
BATCHES = (1, 4, 16, 64)
batch_takeover = {}
for name, c in GPT2_PRESETS.items():
    per = {bb: measure_blocks(gpt(c), bb, 1024, amp=True, attention="flash")[1] for bb in BATCHES}
    cached = sum(k.nbytes for k in gpt_block_kept(1, 1024, c.d_model, c.n_head, amp=True, attention="flash")
                 if "copy" in k.name)  # autocast's weight copies: the same at every batch size
    assert all(per[bb] - cached == bb * (per[1] - cached) for bb in BATCHES)  # the rest is linear in b
    batch_takeover[name] = (16 * c.parameter_count() // c.n_layer - cached) // (per[1] - cached) + 1  # exactly
print("activations pass the model states from batch " + ", ".join(f"{n}: {bb}" for n, bb in batch_takeover.items()))
assert all(4 < bb < 16 for bb in batch_takeover.values())

# %% [markdown]
# Beyond the autocast weight copies, activations are exactly linear in the batch (asserted above for b = 1, 4, 16 and 64), so the batch at which they pass the model states follows exactly from two numbers: for every GPT-2 size it is between 4 and 16 sequences of 1024 tokens: from there on, batch size and sequence length, not the parameter count, decide the memory.
#
# Back to Llama and the Playbook's formula:
#
# - **At short sequences the engine keeps more than the formula.** This Llama block keeps 54 bytes per s·b·h, not a GPT block's 34, and its weight copies (0.41 GiB per layer) weigh most when s is small.
# - **At long sequences the formula keeps far more.** Its 5·a·s/h term is the scores, a dropout mask and a dropped copy; Llama has no attention dropout, the math kernel keeps one float32 copy, flash attention none: at 16k tokens flash needs less than a tenth of the formula (asserted).
# - **Where activations take over**: the model states are 119.7 GiB whatever the sequence; at batch 1 and 8k tokens one 80 GB GPU holds neither. This is why long-context training shards the model states (lesson 07) *and* checkpoints.
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
weights16 = 2 * (P8 - 2 * l8.vocab_size * l8.d_model - l8.d_model)  # the 32 blocks' weights, 2 bytes each
inputs8 = l8.n_layer * 4 * S8 * l8.d_model  # each block's output = the next block's input, float32
ckpt, bars = {}, {}
for policy in CHECKPOINT_POLICIES:
    for k in ("math", "flash"):
        kept8 = l8.n_layer * measure_blocks(llama(l8), 1, S8, amp=True, attention=k, policy=policy)[1]
        ckpt[policy, k] = kept8
        bars[f"{policy}, {k}"] = {KEPT_GROUPS[0]: inputs8, KEPT_GROUPS[5]: weights16,  # as in the first figure
                                  "everything else the blocks keep": kept8 - weights16 - inputs8}
for k in ("math", "flash"):
    assert ckpt["full", k] < ckpt["selective", k] < ckpt["none", k]
    assert abs(ckpt["full", k] - weights16 - inputs8) < 0.01 * GiB
assert ckpt["selective", "math"] > 4 * ckpt["none", "flash"]
rest_second = (KEPT_GROUPS[0], "everything else the blocks keep", *KEPT_GROUPS[2:])  # colours as in the first figure
plot_stacked_parts(bars, "GiB", title="Llama-3 8B, 32 blocks, s = 8192, b = 1, AMP: checkpointing per block",
                   order=rest_second)


# %% [markdown]
# Look at the bars in pairs (math, flash). **Full** checkpointing (the two shortest) removes the orange part and leaves each block's float32 input (blue, 4 GiB for the 32 blocks) and autocast's 16-bit weight copies (pink, 13 GiB, which checkpointing does not touch): 17 GiB with either kernel, since the scores are recomputed too. Of what the forward pass leaves, the copies are then the larger part; of the step's peak they are a small one, beside 120 GiB of model states (16 bytes per parameter against their 2). Weights held in 16 bits, or `torch.autocast(..., cache_enabled=False)`, remove them from checkpointed blocks. The price of full checkpointing is a second forward pass of every block in backward (about a third more compute).
#
# **Selective** with this policy keeps the matmuls' outputs. With flash attention it is the obvious middle: the projections and the attention output are kept, SiLU and the product recomputed. With the **math** kernel it keeps the s² term, because q kᵀ is a matmul. Korthikanti et al.'s "selective recomputation" is the opposite choice: recompute exactly the attention core and keep the linear layers' inputs. The right policy depends on the kernel.
#
# **The logits.** The head turns s·b hidden states into s·b·vocab logits: with Llama's 128,256-token vocabulary, at 8k tokens a billion values, larger than any tensor inside a block. Under autocast the head returns 16-bit logits, and `F.cross_entropy` has no entry in CUDA's autocast lists: it is made of `log_softmax`, which runs in its input's 16 bits, and `nll_loss`, which autocast runs on a float32 copy of the log-softmax; backward needs both. Hugging Face's `LlamaForCausalLM` upcasts the logits first (`.float()`): then `log_softmax` runs in float32 and no copy is made. Measured on the head and the loss alone (the logits held, as a model's output is), then with `helpers.transformer.chunked_cross_entropy`, which computes the loss 1024 tokens at a time under `torch.utils.checkpoint` so that one chunk's logits exist at a time:

# %%
def head_and_loss(chunks, upcast=False):
    """Bytes the head and its loss keep after the forward pass, and their peak over forward and backward."""
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
                logits = F.linear(hidden, weight)  # 16-bit
                loss = F.cross_entropy((logits.float() if upcast else logits).flatten(0, 1), targets.flatten())
        kept = meter.allocated() - before
        loss.backward()
    return kept, meter.peak() - before


n_logits = S8 * l8.vocab_size
head = 2 * l8.vocab_size * l8.d_model + 2 * S8 * l8.d_model  # the linear keeps 16-bit copies of its weight and input
losses = {"16-bit logits": head_and_loss(0), "logits upcast to float32": head_and_loss(0, upcast=True),
          "8 chunks of 1024 tokens": head_and_loss(8)}
for label, (kept, peak) in losses.items():
    print(f"{label:<25} kept after forward {kept / GiB:5.2f} GiB, peak of forward + backward {peak / GiB:5.2f} GiB")
scalars = 2 * 512  # the loss and nll_loss's total weight: one 512-byte block each
assert losses["16-bit logits"][0] - head - scalars == (2 + 2 + 4) * n_logits  # logits, log-softmax, its float32 copy
assert losses["logits upcast to float32"][0] - head - scalars == (2 + 4) * n_logits  # logits, float32 log-softmax
assert losses["8 chunks of 1024 tokens"][1] < losses["logits upcast to float32"][1] / 3
assert losses["8 chunks of 1024 tokens"][0] < 512 * 2**10

# %% [markdown]
# With 16-bit logits the loss keeps **8 bytes per logit** (asserted): the logits (2), their 16-bit log-softmax (2) and its float32 copy for `nll_loss` (4), 7.8 GiB here, beside the 16-bit copies of the head's weight and input that the linear layer keeps; lesson 05b (section 1) finds the same three in GPT-2's step. Upcast first, it keeps 6: the 16-bit logits (which the model returned) and a float32 log-softmax, no copy. Backward then adds the float32 gradient of the logits and its 16-bit cast. Chunked, the forward pass keeps nothing (each chunk's logits and log-softmax are recomputed in backward, one chunk at a time), and the peak falls by more than three times, to about the head's own float32 gradient and 16-bit weight copy plus one chunk. The same idea, fused into one kernel, is in Liger Kernel and in torchtune's chunked losses. The logits grow with the batch and the sequence like the activations, but they are one tensor: often the largest of a training step.
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
print(f"{'model':<11} {'KV cache per token':>19} {'16-bit weights':>15} {'at most, tokens on an H100 80 GB':>33}")
fit_tokens = {}
for name, nbytes in per_token.items():
    params = P8 if name == "llama3-8b" else GPT2_PRESETS[name].parameter_count()
    fit_tokens[name] = (card - CUDA_OVERHEAD_BYTES - 2 * params) // nbytes  # an upper bound: see below
    if name in ("gpt2-xl", "llama3-8b"):
        print(f"{name:<11} {fmt_bytes(nbytes, 'KiB'):>19} {fmt_bytes(2 * params, 'GiB'):>15} {fit_tokens[name]:>33,}")
print(f"a 128k-token context of Llama-3 8B: {fmt_bytes(128 * 1024 * per_token['llama3-8b'], 'GiB')} of cache")
assert per_token["llama3-8b"] == 128 * 1024 and fit_tokens["llama3-8b"] > fit_tokens["gpt2-xl"]

# %% [markdown]
# 128 KiB per token for Llama-3 8B: a 128k-token context needs 16 GiB of cache per sequence, and an H100 holds **at most** about half a million tokens beside the weights (with the assumed 1 GiB of CUDA context and workspaces), shared by all the sequences of a batch. That is an upper bound: it leaves out what the forward pass needs while generating (the logits and activations of the first pass over a long prompt) and the cache's granularity (fixed pages, or one buffer per sequence at its maximum length); a serving engine reserves room for those. GPT-2 1.5B, five times smaller, holds fewer tokens: 300 KiB each, because every one of its 25 heads has its own keys and values. Without grouped-query attention Llama would need 512 KiB per token (exercise 3).
#
# ## 7. The widget: sequence length against a GPU
#
# Model, sequence length, batch, AMP, checkpointing policy, attention kernel and GPU. The bar shows the peak of the whole steady-state training step with Adam, traced by `profile_step` (the configuration is `transformer_step(model, seq, batch, ...)`): at short sequences the peak is at `optimizer.step()`, where parameters, gradients, Adam's two states and `foreach`'s temporaries coexist (20 bytes per parameter, lesson 05a); at long ones it moves to the start of backward, where the activations and the logits (8 bytes per logit, section 5) sit beside the parameters and Adam's states (12 bytes per parameter). The verdict adds the assumed overhead and says what it judged. Each change traces the step anew (a few seconds; the view says "tracing ..." meanwhile). First as text, for Llama 8B at 4k tokens on an H100:

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
# Llama 8B does not fit one H100 for training at any sequence length (its parameters and Adam states alone are 89.7 GiB); GPT-2 1.5B fits at 4k tokens without checkpointing, with flash attention. Try the math kernel, then 16k tokens, then checkpointing.
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
# **Exercise 2: the longest sequence.** GPT-2 1.5B at batch 1, AMP, no checkpointing, Adam: which is the longest sequence of `SequenceExplorer.SEQ_LENS` whose whole training step fits an A100 40 GB (with the assumed 1 GiB), with the math kernel, and with flash? (`from helpers import fits, profile_step` and `from helpers.transformer import transformer_step`.)

# %%
# Your code here: profile_step(transformer_step("gpt2-xl", seq, 1, attention=...)).peak_allocated_bytes

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# from helpers import fits, profile_step
# from helpers.transformer import transformer_step
# longest, steps = {}, {}
# for kernel in ("math", "flash"):
#     for seq in SequenceExplorer.SEQ_LENS:
#         steps[kernel, seq] = profile_step(transformer_step("gpt2-xl", seq, 1, attention=kernel))
#         if not fits(steps[kernel, seq].peak_allocated_bytes, GPU_CARDS["A100 40 GB"]):
#             break
#         longest[kernel] = seq
# print(longest)
# assert longest == {"math": 1024, "flash": 4096}
# assert steps["flash", 2048].peak.label == "optimizer.step()"
# assert [round(steps[k].peak_allocated_bytes / GiB, 1) for k in [("flash", 2048), ("math", 2048), ("flash", 8192)]] == [29.0, 46.2, 45.5]
# ```
#
# 1k tokens with the math kernel, 4k with flash. Up to 2k tokens with flash, the step peaks at `optimizer.step()` at 29.0 GiB whatever the sequence: 20 bytes per parameter of model states with `foreach` Adam (lesson 05a). Longer, the peak moves to the start of backward, where Adam's states and the parameters (12 bytes per parameter, 17.4 GiB) sit beside the activations and the logits: with the math kernel the scores, 25 heads × s² × 4 bytes in each of 48 layers, take 18.75 GiB at 2k tokens, and the step needs 46.2 GiB; with flash the activations grow linearly, and 8k tokens need 45.5 GiB. Of the card's 39.6 GiB, 1 GiB is left for the assumed overhead.
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
# - The published formulas count someone's implementation: Korthikanti's 34·s·b·h + 5·a·s²·b is Megatron-LM's 16-bit GPT with dropout and scores kept; ZeRO's 12 values per s·b·h, which predates fused kernels, leaves the scores out. PyTorch with `torch.autocast` keeps 42 + 4·a·s/h (math kernel; 44 with dropout) or 36 (flash) bytes per s·b·h for a GPT-2 block, plus its 16-bit weight copies; this lesson's Llama block keeps 54 (SwiGLU's four wide tensors, per-projection casts, repeated keys and values), a figure of its implementation, not of Llama.
# - Flash and memory-efficient attention remove the s² term: Llama 8B at 16k tokens keeps less than a tenth of what the formula says. On a GPU, PyTorch's dispatcher picks a fused kernel whenever one accepts the call (masks and grouped-query attention included); measure with the kernel your GPU runs.
# - Full checkpointing per block leaves the block inputs (and, under autocast, 2 bytes per parameter of weight copies); a selective policy keeps what is costly to recompute, and must match the kernel: "save the matmuls" keeps the math kernel's scores.
# - The logits (s·b·vocab) can be the largest tensor of a step, and the loss keeps more of them: 8 bytes per logit for 16-bit logits under autocast (logits, 16-bit log-softmax, its float32 copy), 6 when they are upcast first; a chunked cross-entropy never holds them all. At inference the KV cache, 2·layers·KV heads·head size·2 bytes per token, decides the context: 128 KiB per token for Llama-3 8B, and the tokens that fit beside the weights are an upper bound.
#
# ## Further reading
#
# - V. Korthikanti, J. Casper, S. Lym, L. McAfee, M. Andersch, M. Shoeybi, B. Catanzaro, *Reducing Activation Recomputation in Large Transformer Models*, 2022, arXiv:2205.05198, section 4.
# - S. Rajbhandari, J. Rasley, O. Ruwase, Y. He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054, section 3.
# - N. Tazi et al., *The Ultra-Scale Playbook: Training LLMs on GPU Clusters*, Hugging Face, 2025 (activation memory and recomputation).
# - T. Dao et al., *FlashAttention*, NeurIPS 2022, and *FlashAttention-2*, 2023; M. Rabe and C. Staats, *Self-attention Does Not Need O(n²) Memory*, 2021.
# - J. Ainslie et al., *GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints*, 2023; A. Grattafiori et al., *The Llama 3 Herd of Models*, 2024.
# - PyTorch documentation: `torch.nn.functional.scaled_dot_product_attention`, `torch.nn.attention.sdpa_kernel`, `torch.utils.checkpoint` (selective activation checkpointing); the PyTorch blog, *Current and New Activation Checkpointing Techniques in PyTorch* (2025).
