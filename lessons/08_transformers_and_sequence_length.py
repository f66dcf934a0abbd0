# ---
# jupyter:
#   jupytext:
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
# # 08 · Transformers and sequence length, part 1: a GPT block tensor by tensor, the s² term, and GPT-2 1.5B
#
# **Questions**
# - What does one transformer block keep for backward, tensor by tensor, and how does it grow with the sequence length?
# - Which attention kernels keep the a·s² scores, and which recompute them?
# - Why do the published rules (ZeRO's "60 GB", Korthikanti's 34·s·b·h + 5·a·s²·b) disagree with each other and with what PyTorch allocates?
#
# **Objectives**
# - Derive the bytes a GPT block keeps from what each operation saves, and check the derivation against the engine, byte for byte.
# - Show the a·s² term of the attention scores appear with the math kernel and vanish with flash attention, tensor by tensor and as a polynomial in the sequence length.
# - Measure GPT-2 1.5B's blocks against ZeRO's and Korthikanti's figures, with and without checkpointing.
# - Show that a training step's memory is affine in the number of blocks, to the byte.
#
# **Time:** about 60 minutes alone: 22 of reading, 16 of code, 4 for the figures, 1 to run all, 17 for the two exercises. **GPU:** not needed (memory simulated on fake tensors).
#
# Lessons 02 (what autograd saves), 04 (AMP, checkpointing), 05a (model states) and 05b (GPT-2 1.5B against the ZeRO paper) come first. Lesson 08b continues with a Llama-shaped 8B model over sequence length, the remedies, the KV cache and the widget.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import dataclasses

import torch

from helpers import GiB, MiB, fmt_bytes
from helpers.engine.cuda_rules import cuda_rules
from helpers.models.gpt import GPT, GPT2_PRESETS, Block, GPTConfig
from helpers.saved import inspect_saved
from helpers.teaching.plots import plot_memory_vs_seq, plot_stacked_parts
from helpers.transformer import (KEPT_GROUPS, KORTHIKANTI_TERMS, gpt_block_kept, kept_by_group, kept_bytes,
                                 korthikanti_layer_bytes, measure_blocks)

_ = torch.manual_seed(0)
GB = 10**9  # decimal gigabytes, as the papers quoted here count: converted to GiB (2**30 bytes) beside them


def gpt(config, layers=2):
    """A builder of `config`'s GPT with only `layers` blocks: every block keeps the same bytes (section 1)."""
    return lambda: GPT(dataclasses.replace(config, n_layer=layers))


# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. One GPT block, tensor by tensor
#
# We take one GPT block apart, first in the simplest setting: float32 and the **math** attention kernel, the plain PyTorch composition `softmax(q kᵀ / √d) v`.
#
# A small GPT block (hidden h = 64, a = 4 heads of size d = 16), batch b = 3, sequence s = 128: every size differs, so the table prints shapes by name. Lesson 02's inspector lists what each operation saves for backward, under the simulation's CUDA rules (the weights, whose saving costs no memory, left out):

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
# - each **LayerNorm** keeps its input and two per-token statistics, the mean and the inverse standard deviation (`result1`, `result2`);
# - each **Linear** (`AddmmBackward0`) keeps its input `mat1`, flattened to (s·b, h): lesson 02's dL/dW = Gᵀ X;
# - the **attention** (under `attn.qkv`, the last module entered) is two batched matmuls and a softmax: q kᵀ keeps q and kᵀ; the softmax keeps its output, the **b·a·s·s scores**, which scores × v keeps again ("saved above") with v;
# - **GELU** keeps its input, the first MLP linear's 4h-wide output; the second MLP linear keeps GELU's output.
#
# `helpers.transformer.gpt_block_kept` writes the same list as a function of b, s, h and a, plus the block's output (the residual stream the next LayerNorm keeps). The engine then measures a forward pass of a 3-block GPT, block by block:

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
# The formula, the inspector and the engine agree **byte for byte**, and every block keeps the same, so later sections measure two blocks and multiply by the layer count. In this lesson, what "a block keeps" is what `measure_blocks` measures: every storage the block made that is still alive when it returns (what it saved for backward, its output and, under AMP, autocast's cached weight copies).
#
# In float32 with the math kernel, 8 tensors of width h (4 bytes each) and 2 of width 4h (16 bytes each) make **64 bytes per s·b·h**; the scores add 4·a·s²·b bytes and the LayerNorm statistics 16·s·b. Now under AMP, beside the formula of Korthikanti et al. (*Reducing Activation Recomputation in Large Transformer Models*, 2022, section 4.1), which assumes 16-bit activations, dropout with 1-byte masks, and attention that keeps its scores; to compare like with like, the block gets dropout (p = 0.1) before each residual sum:

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
# **44·s·b·h + 4·a·s²·b** bytes against the paper's 34 and 5. Where PyTorch differs:
#
# - **+2 twice, the LayerNorm inputs**: under `torch.autocast` the residual stream stays float32 (the parameters are), so each LayerNorm keeps 4 bytes, not 2.
# - **+6, q, k and v**: the math kernel upcasts 16-bit inputs to float32 ("keep query, key, value in high precision for accuracy", `attention.cpp`) and keeps them in 4 bytes each.
# - **4 instead of 5 a·s²·b**: the softmax output is float32, and this GPT, like GPT-2, has no dropout inside attention: no mask of the scores, no dropped copy.
# - **Not in the paper**: the LayerNorm statistics, and autocast's 16-bit copies of the weights and biases, cached for backward (2·12h² bytes per block, whatever b and s).
#
# The paper counts Megatron-LM's all-16-bit implementation; the engine counts what *this* PyTorch code keeps.
#
# ## 2. Attention kernels: the s² term appears and vanishes
#
# `torch.nn.functional.scaled_dot_product_attention` picks a kernel. The math kernel keeps the scores; the fused kernels (FlashAttention, memory-efficient attention) keep q, k, v, the output and a float32 log-sum-exp per row and head, and recompute the scores in backward. The engine runs the kernel you name (`attention=`). One block of GPT-2 124M (h = 768, a = 12), one sequence of 1024 tokens, by part:

# %%
g124 = GPT2_PRESETS["gpt2"]
H, A = g124.d_model, g124.n_head
columns = {"float32, math kernel": kept_by_group(gpt_block_kept(1, 1024, H, A, attention="math")),
           "AMP, math kernel": kept_by_group(gpt_block_kept(1, 1024, H, A, amp=True, attention="math")),
           "AMP, flash attention": kept_by_group(gpt_block_kept(1, 1024, H, A, amp=True, attention="flash"))}
assert measure_blocks(gpt(g124), 1, 1024, amp=True, attention="flash")[1] == sum(columns["AMP, flash attention"].values())
plot_stacked_parts(columns, "MiB", title="What one GPT-2 124M block keeps (b = 1, s = 1024), by part", order=KEPT_GROUPS)

# %% [markdown]
# Look at the vermillion segment: the float32 scores (4·a·s² bytes, 48 MiB) weigh about as much as everything else the block keeps at 1024 tokens, and flash attention removes them. AMP halves the linear layers' inputs and the MLP's wide tensors (orange, sky blue), not the float32 residual stream (blue) nor the math kernel's q, k and v (green), and it adds autocast's weight copies (pink, 13.5 MiB per block). Now the same block from 512 to 16k tokens, with both kernels:

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
# Look at the slopes: on log-log axes the math kernel's line bends up to slope 2 and joins the line of the scores alone (95% of it at 16k tokens); flash attention's has slope 1 at long sequences and flattens at short ones, where the weight copies are a constant part. At 16k tokens the math kernel keeps more than 25 times what flash keeps. (Beyond 1024 tokens GPT-2's position embedding is extended.)
#
# On a GPU, PyTorch 2.14.1's dispatcher (`select_sdp_backend` in `sdp_utils.cpp`) tries cuDNN attention (first only on Hopper and Blackwell with a recent cuDNN), FlashAttention, memory-efficient attention, then math, and takes the first whose checks pass. FlashAttention needs 16-bit inputs, a head size up to 256 and no explicit `attn_mask` (`is_causal=True` is fine); memory-efficient attention also accepts a mask and float32; in 2.14.1 both accept `enable_gqa=True` (memory-efficient attention since pull request #191085, 2026: in older releases it refused fewer key/value heads, and a masked grouped-query call ran the math kernel unless cuDNN took it). So on an A100 or an H100, PyTorch 2.14.1 runs masked and grouped-query calls in a fused kernel (on your GPU, `torch.backends.cuda.can_use_efficient_attention(params, debug=True)` says whether a call qualifies and why not); **the simulation** runs grouped-query calls fused too (keeping the key and value with their own, fewer heads) and sends masked ones to the math kernel, an upper bound.

# %% [markdown]
# The same two kernels, read as polynomials. `peak_polynomial` traces a whole training step once with the sequence length as a symbol S (PyTorch's `FakeTensorMode` with symbolic shapes; b = 1), so that every storage's size is an expression in S, and adds up the storages alive at the step's peak. A GPT-2 124M with two blocks less the same model with one leaves one block's bytes: a constant (its weights, their gradients and momentum, autocast's weight copies) and the terms that grow with s:

# %%
from matplotlib.figure import Figure

from helpers import OKABE_ITO, peak_polynomial

longer = dataclasses.replace(g124, n_positions=4096)  # position embeddings up to 4096 tokens
block = {}
for kernel in ("math", "flash"):
    one, two = (peak_polynomial(gpt(longer, n), 1, seq_len=1024, vocab_size=g124.vocab_size, device="simulated",
                                amp=True, attention=kernel) for n in (1, 2))
    block[kernel] = two - one
    print(f"{kernel:>5} kernel, one block: {block[kernel].expression} bytes, where {', '.join(block[kernel].guards)}")
constant = block["math"].terms()["1"]
assert block["math"].terms() == {"1": constant, "S": 42 * H, "RoundUp(4*S)": 4, "RoundUp(48*S**2)": 1}
assert block["flash"].terms() == {"1": constant, "S": 36 * H, "RoundUp(4*S)": 4, "RoundUp(48*S)": 1} and 48 == 4 * A
for s1, s2 in ((512, 1024), (1024, 4096)):  # the tensor-by-tensor list of section 1 grows by the same bytes
    for kernel, p in block.items():
        kept1, kept2 = (kept_bytes(gpt_block_kept(1, n, H, A, amp=True, attention=kernel)) for n in (s1, s2))
        assert p(1, s2) - p(1, s1) == kept2 - kept1

S4 = 4096
rows = {"engine, math kernel": (42 * S4 * H, 4 * A * S4**2, 16 * S4),
        "engine, flash attention": (36 * S4 * H, 0, 16 * S4 + 4 * A * S4),
        "Korthikanti et al. (16-bit, dropout)": (34 * S4 * H, 5 * A * S4**2, 0)}
assert sum(rows["Korthikanti et al. (16-bit, dropout)"]) == korthikanti_layer_bytes(S4, 1, H, A)
for kernel, name in (("math", "engine, math kernel"), ("flash", "engine, flash attention")):
    assert block[kernel](1, S4) - constant == sum(rows[name])
fig = Figure(figsize=(8, 3.2), layout="constrained")
ax = fig.subplots()
left = [0] * len(rows)
for i, (part, color) in enumerate((("s·b·h terms", "orange"), ("a·s²·b term (the scores)", "vermillion"),
                                   ("s·b and a·s·b terms (per-token statistics)", "blue"))):
    widths = [v[i] / MiB for v in rows.values()]
    ax.barh(list(rows), widths, left=left, color=OKABE_ITO[color], label=part)
    left = [x + w for x, w in zip(left, widths)]
ax.invert_yaxis()
ax.set(xlabel="MiB", title="One GPT-2 124M block, s = 4096, b = 1: the bytes that grow with s, by term")
fig.legend(loc="outside lower center", ncol=3, fontsize="small")
fig

# %% [markdown]
# Look at the vermillion segments: the math kernel's polynomial has an s² term, 4·a·s²·b (the float32 scores), where Korthikanti et al. count 5·a·s²·b (16-bit scores, a 1-byte dropout mask and a 16-bit dropped copy); flash attention's has none, only 4·a·s·b for its float32 log-sum-exp (with the LayerNorm statistics' 16·s·b, too thin to see at this scale). The s·b·h terms, 42 and 36 bytes against the paper's 34, differ as section 1 showed tensor by tensor. The engine read these coefficients off PyTorch's dispatch, one trace per model, not from a fit.

# %% [markdown]
# ## 3. The ZeRO paper's GPT-2 1.5B, once more
#
# Lesson 05b (section 1) measured ZeRO's example end to end (AMP, flash attention, b = 32, s = 1024) against the paper's "about 60 GB" of activations. Now per block, with the formulas beside it:

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
print(f"{L} blocks: engine, flash {L * layer['flash'] / GiB:.1f} GiB; engine, math kernel {L * layer['math'] / GiB:.1f} GiB; "
      f"Korthikanti et al. {L * korthikanti / GiB:.1f} GiB")
print(f"ZeRO's rule, 12 values x 2 bytes per s·b·h and layer: {zero / GiB:.1f} GiB (= {zero / GB:.1f} GB; paper: about 60 GB)")
assert weight_copies == 2 * 12 * Hx * Hx and bias_copies == 29_696 and layer["flash"] - bias_copies == 1_952_677_888
assert 36.07 < saved / unit < 36.08 and 37.24 < layer["flash"] / unit < 37.25
assert round(zero / GB) == 60 and layer["math"] < korthikanti and round(korthikanti / layer["flash"]) == 3

# %% [markdown]
# One block keeps **37.24 bytes per s·b·h** (asserted): 36.07 saved for backward or returned, 1.17 of 16-bit weight copies, and 29,696 bytes of bias copies, which a profile files under "other" because nothing saves them for backward. Lesson 05b measures the same block with the same helper; its 87.7 GiB for the whole forward pass are these 48 blocks' 87.3 and 0.4 GiB that the embeddings and the head keep outside them.
#
# ZeRO (Rajbhandari et al., 2019, section 3.2 and its footnote) estimates the activations as about 12 × hidden × batch × sequence × layers, with no unit: at 2 bytes each, **60.4 GB** (56.2 GiB), its "about 60 GB". The rule predates fused attention kernels (FlashAttention is from 2022): an approximation that leaves out the scores, with 24 bytes per s·b·h where PyTorch keeps 37 even with flash. Korthikanti's formula (16-bit scores, a dropout mask and a dropped copy) gives **three times** the flash figure, more than the math kernel keeps.
#
# With activation checkpointing, ZeRO says "about 8 GB". Here every block is checkpointed:

# %%
ck = measure_blocks(gpt(xl), B, S, amp=True, attention="flash", policy="full")[1]
inputs32 = 4 * B * S * Hx
print(f"per checkpointed block: {ck / MiB:,.1f} MiB = float32 input {inputs32 / MiB:,.1f} MiB + 16-bit weights and "
      f"biases {(weight_copies + bias_copies) / MiB:,.1f} MiB (autocast's cache, alive until autocast exits)")
assert abs(ck - inputs32 - weight_copies - bias_copies) < 5 * 512
assert fmt_bytes(L * ck, "GiB") == "12.1 GiB" and fmt_bytes(L * inputs32, "GiB") == "9.4 GiB"
assert round(zero / L**0.5 / GB, 1) == 8.7 and fmt_bytes(zero / L**0.5, "GiB") == "8.1 GiB"  # ZeRO's "about 8 GB"

# %% [markdown]
# Checkpointed, each block keeps its float32 input (9.4 GiB for the 48 blocks), and autocast's cache its weight copies: 12.1 GiB for the blocks (lesson 05b's 12.6 GiB adds the same 0.4 GiB outside them). The paper's "about 8 GB" assumes another schedule: checkpointing reduces the activations "by approximately the square root of the total activations", citing Chen et al. (2016). Read as the total divided by √L, that is 60.4 GB / √48 = 8.7 GB (8.1 GiB); it is a reading, which leaves out the √L segment inputs that Chen et al.'s schedule keeps too (9.4 GB with them, lesson 05b).
#
# **Memory is affine in depth.** Every block keeps the same bytes, and holds the same parameters, gradients and Adam states, so a whole training step's peak should be a straight line in the number of blocks. Here are whole steady-state steps of GPT-2 1.5B's width, batch 1 × 512 tokens, with 1 to 8 blocks, and the line through the steps with 6 and 7:

# %%
from helpers import fit_affine, profile_step
from helpers.teaching.plots import plot_peak_vs_depth

STEP_XL = dict(seq_len=512, amp=True, attention="flash", steady_state=True, device="simulated")
traced = {n: profile_step(gpt(xl, n), 1, vocab_size=xl.vocab_size, **STEP_XL).peak_allocated_bytes for n in range(1, 9)}
per_block = fit_affine([6, 7], [traced[6], traced[7]])
written = profile_step("gpt2-xl", 1, symbolic=False, **STEP_XL)  # all 48 blocks, written from two shallow traces
print(f"each block adds {fmt_bytes(per_block.per_sample_bytes)}; 48 blocks: {fmt_bytes(written.peak_allocated_bytes)}")
print(f"how the 48-block step was simulated: {written.depth_note}")
assert all(traced[n] == per_block.predict(n) for n in traced)  # every depth on the line, to the byte
assert written.peak_allocated_bytes == per_block.predict(xl.n_layer)

# %%
plot_peak_vs_depth(traced, per_block, (xl.n_layer, written.peak_allocated_bytes),
                   title="GPT-2 1.5B's width, batch 1 x 512 tokens: a steady-state step's peak against its depth")

# %% [markdown]
# Look at the dots: the eight traced steps lie on the line through the sixth and seventh, and the 48-block step (the diamond) lies on its continuation. Every traced depth is on the line to the byte, and so is the 48-block step: **memory is affine in depth**, the peak and everything under it. The engine uses this. For a model of 20 or more alike blocks, `profile_step` traces the step with 6 and 7 blocks (enough that the blocks next to the embeddings and the head, which may free their tensors otherwise than the middle ones, are in both), checks that the extra block repeats the others allocation for allocation (the same sizes, categories and lifetimes), and writes the 48-block allocation log from the two: not an estimate of the peak but the whole log, every allocation and free in order. (`symbolic=False` asks for this written step even where a symbolic log of the configuration is on disk, which would otherwise answer: the same bytes, another `depth_note`.) `full_trace=True` traces every block instead. The two must agree entirely:

# %%
full = profile_step("gpt2-xl", 1, full_trace=True, **STEP_XL)
print(f"traced in full: {full.depth_note}")
assert full.allocation_log == written.allocation_log and full.peak_event == written.peak_event
assert full.categories == written.categories and full.peak_allocated_bytes == written.peak_allocated_bytes

# %% [markdown]
# The same log, allocation for allocation, so the same peak, the same event of the peak and the same categories at it. Time both cells with `%time` if you like: the written step traces 13 blocks in all instead of 48. When the check fails (a model whose blocks differ, or a setting that makes one block depend on another), the engine traces in full and `depth_note` says why.
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
# **Exercise 2: the scores of ZeRO's example.** With the math kernel, how many GiB do the float32 scores of GPT-2 1.5B's 48 blocks take at ZeRO's b = 32 and s = 1024, what share of a math-kernel block are they, and how much more than flash does the math kernel keep once the scores are left out? Use section 3's `layer` and `gpt_block_kept`.

# %%
# Your code here: gpt_block_kept(B, S, Hx, Ax, amp=True, attention="math"), the tensors of shape (B, Ax, S, S)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# math_kept = gpt_block_kept(B, S, Hx, Ax, amp=True, attention="math")
# scores_xl = sum(k.nbytes for k in math_kept if k.shape == (B, Ax, S, S))
# beyond = layer["math"] - scores_xl - layer["flash"]  # per block
# print(f"scores: {fmt_bytes(L * scores_xl, 'GiB')} for the {L} blocks, {scores_xl / layer['math']:.0%} of a "
#       f"math-kernel block; beyond them the math kernel keeps {fmt_bytes(L * beyond, 'GiB')} more than flash")
# assert scores_xl == 4 * Ax * S * S * B and fmt_bytes(L * scores_xl, "GiB") == "150.0 GiB"
# assert round(scores_xl / layer["math"], 2) == 0.60
# assert beyond == (4 * 3 + 2 - 2 * 4) * unit - 4 * Ax * S * B and fmt_bytes(L * beyond, "GiB") == "13.9 GiB"
# ```
#
# 150 GiB of scores, 3.1 GiB in each block, 60% of what a math-kernel block keeps: more than any one card holds, for the scores alone. Beyond them the math kernel keeps 6 bytes per s·b·h more than flash: float32 q, k and v (3 × 4) and a copy of the merged heads (2), against flash's 16-bit q, k, v and output (4 × 2), less flash's float32 log-sum-exp (4·a·s·b); 13.9 GiB for the 48 blocks.
# </details>
#
# ## Key points
#
# - A transformer block keeps a few dozen bytes per token and hidden unit whatever the sequence, plus the a·s² scores only if the kernel keeps them.
# - Published formulas count someone's implementation (Korthikanti's: Megatron-LM's 16-bit GPT with kept scores; ZeRO's: no scores). PyTorch under `torch.autocast` keeps 44 + 4·a·s/h bytes per s·b·h for a GPT-2 block (math kernel, with dropout) or about 36 (flash).
# - Fused attention removes the s² term; a GPU's dispatcher picks it whenever it accepts the call.
# - Full checkpointing leaves each block's float32 input and autocast's weight copies.
# - A step's memory is affine in the number of blocks, to the byte: two shallow traces write a deep model's whole allocation log, which is how the engine simulates 7-8B models quickly (`full_trace=True` checks it).
#
# ## Further reading
#
# - V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022, arXiv:2205.05198, section 4.
# - S. Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054, section 3.
# - T. Chen et al., *Training Deep Nets with Sublinear Memory Cost*, 2016, arXiv:1604.06174.
# - T. Dao et al., *FlashAttention*, 2022, and *FlashAttention-2*, 2023.
# - PyTorch documentation: `torch.nn.functional.scaled_dot_product_attention`, `torch.nn.attention.sdpa_kernel`, `torch.utils.checkpoint`.
#
# Lesson 08b continues with a Llama-shaped 8B model from 512 to 16k tokens: what its block keeps, checkpointing and the loss's logits measured, the KV cache at inference, and the sequence-length widget.
