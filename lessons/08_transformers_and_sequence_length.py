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
# **Time:** about 100 minutes alone: 35 of reading, 31 of code, 6 for the figures, 1 to run all, 27 for the three exercises. **GPU:** not needed (memory simulated on fake tensors).
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
# ## 4. A Llama-shaped 8B model over sequence length
#
# Llama-3 8B differs from GPT-2 in every part that keeps memory: RMSNorm, a SwiGLU MLP (three matrices, inner width 14336 = 3.5 h), grouped-query attention (32 query heads share 8 key/value heads), rotary position embeddings, no biases, no dropout, and a 128,256-token vocabulary. `helpers.models.llama` builds it in plain PyTorch, on the meta device:

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
# What does one Llama block keep? A profiled training step of a 2-block copy (b = 1, s = 2048, AMP, flash) lists every storage block 1 made that is still alive at the end of the forward pass, as in lesson 05b; here grouped by part. Llama has no biases, so the total is `measure_blocks`' figure (asserted):

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
# Where they come from:
#
# - **the MLP keeps four 3.5h-wide tensors** (the gate's output, SiLU's output, the up projection's output and their product): 4 × 3.5 × 2 = **28**, where GPT-2's MLP keeps 16;
# - **the normalised input is cast once per projection**: RMSNorm returns float32 under autocast, and `q`, `k`, `v`, `gate` and `up` each keep their own 16-bit cast (5 × 2 = 10);
# - **grouped-query attention saves nothing here**: the keys and values are repeated to 32 heads before the kernel (as Hugging Face's `repeat_kv` does), and the kernel keeps the copies (2 + 2) beside q and the output (2 + 2);
# - the float32 residual stream twice (4 + 4), and small tensors.
#
# 28 + 10 + 8 + 8 = **54** bytes per s·b·h, plus the weight copies. The 54 is **this implementation's** figure, not Llama's: a model held in bfloat16 casts nothing and keeps a 16-bit residual stream, with `enable_gqa=True` a fused kernel keeps only the 8 heads, and fused RMSNorm or SwiGLU kernels keep fewer tensors.
#
# The Ultra-Scale Playbook (Hugging Face, 2025) plots Llama 8B's activations at batch 1 against the sequence length with Korthikanti's formula times the layers, L·s·b·h·(34 + 5·a·s/h): **quoted**, computed here from the formula, not measured. Beside it, the engine with each kernel, and the model states (16 bytes per parameter for AMP with Adam, lesson 05a):

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
# Look at where each line crosses the dashed one: with the math kernel the activations pass the model states at 8k tokens, with flash at 16k. The formula (quoted) is below both engine lines at 512 tokens: this Llama block keeps 54 bytes per s·b·h, not 34, and weight copies that weigh most when s is small. At long sequences it is far above them: its 5·a·s/h term counts the scores, a dropout mask and a dropped copy; Llama has no attention dropout, the math kernel keeps one float32 copy, flash none (at 16k tokens flash needs less than a tenth of the formula, asserted). The model states alone, 119.7 GiB, are more than one 80 GB card holds: long-context training shards them (lesson 07) *and* checkpoints.
#
# And over the batch size, for the four GPT-2 sizes at 1024 tokens (AMP, flash attention): at which batch do the activations pass the model states?

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
# Beyond the weight copies, activations are exactly linear in the batch (asserted), so for every GPT-2 size they pass the model states between 4 and 16 sequences of 1024 tokens: from there on, batch and sequence length, not the parameter count, decide the memory.
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
# (`helpers.techniques.checkpointing.CheckpointedBlock`.) Matmuls are expensive to recompute; norms, activations and the softmax are cheap. Llama 8B at 8k tokens, batch 1, AMP, 32 layers:

# %%
S8 = 8192
weights16 = 2 * (P8 - 2 * l8.vocab_size * l8.d_model - l8.d_model)  # the 32 blocks' weights, 2 bytes each
inputs8 = l8.n_layer * 4 * S8 * l8.d_model  # each block's output = the next block's input, float32
ckpt, bars = {}, {}
for policy in CHECKPOINT_POLICIES:
    for k in ("math", "flash"):
        kept8 = l8.n_layer * measure_blocks(llama(l8), 1, S8, amp=True, attention=k, policy=policy)[1]
        ckpt[policy, k] = kept8
        bars[f"{policy}, {k}"] = {"block inputs (float32)": inputs8, KEPT_GROUPS[5]: weights16,  # colours as in
                                  "everything else the blocks keep": kept8 - weights16 - inputs8}  # the first figure
for k in ("math", "flash"):
    assert ckpt["full", k] < ckpt["selective", k] < ckpt["none", k]
    assert abs(ckpt["full", k] - weights16 - inputs8) < 0.01 * GiB
assert ckpt["selective", "math"] > 4 * ckpt["none", "flash"]
rest_second = ("block inputs (float32)", "everything else the blocks keep", *KEPT_GROUPS[2:])
plot_stacked_parts(bars, "GiB", title="Llama-3 8B, 32 blocks, s = 8192, b = 1, AMP: checkpointing per block",
                   order=rest_second)


# %% [markdown]
# Look at the bars in pairs (math, flash). **Full** checkpointing (the two shortest) leaves each block's float32 input (blue, 4 GiB for the 32 blocks) and autocast's weight copies (pink, 13 GiB, untouched by checkpointing): 17 GiB with either kernel. The copies are then the larger part of what the forward pass leaves, but a small part of the step's peak, beside 120 GiB of model states. Weights held in 16 bits, or `torch.autocast(..., cache_enabled=False)`, remove them. The price: a second forward pass of every block in backward (about a third more compute).
#
# **Selective** with this policy keeps the matmuls' outputs: with flash, the obvious middle; with the **math** kernel it keeps the s² term, because q kᵀ is a matmul. Korthikanti et al.'s "selective recomputation" does the opposite: it recomputes exactly the attention core. The policy must match the kernel.
#
# **The logits.** The head turns s·b hidden states into s·b·vocab logits: at 8k tokens and Llama's 128,256-token vocabulary, a billion values, often the largest tensor of a training step. Under autocast the head returns 16-bit logits, and `F.cross_entropy` has no entry in CUDA's autocast lists: it calls `log_softmax` with its input's dtype named (`cross_entropy_loss` in `aten/src/ATen/native/LossNLL.cpp`), and autocast keeps a dtype that a call names, so this log-softmax is 16-bit (a bare `F.log_softmax` under autocast runs in float32); then `nll_loss`, on the float32 list, which autocast runs on a float32 copy of the log-softmax. Backward needs both. Hugging Face's `LlamaForCausalLM` upcasts the logits first (`.float()`): then `log_softmax` runs in float32 and no copy is made. Measured on the head and loss alone, then with `helpers.transformer.chunked_cross_entropy`, which computes the loss 1024 tokens at a time under `torch.utils.checkpoint`:

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
# With 16-bit logits the loss keeps **8 bytes per logit** (asserted): the logits (2), their 16-bit log-softmax (2) and its float32 copy for `nll_loss` (4), beside the head's 16-bit weight and input; lesson 05b (section 1) finds the same three in GPT-2's step. Upcast first, it keeps 6: the 16-bit logits and a float32 log-softmax. Chunked, the forward pass keeps nothing (each chunk is recomputed in backward) and the peak falls by more than three times.
#
# ## 6. Inference: the KV cache
#
# Generating token by token, a model keeps every earlier token's keys and values in every layer: **2 · layers · KV heads · head size · bytes per value** per token. Grouped-query attention shrinks it: Llama-3 8B's 32 query heads share 8 key/value heads. Checked against what the key and value projections of the 16-bit Llama-3 8B (on meta) produce for 16 tokens:

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
# 128 KiB per token for Llama-3 8B: a 128k-token context needs 16 GiB of cache per sequence, and an H100 holds **at most** about half a million tokens beside the weights and the assumed 1 GiB of overhead, shared by a batch's sequences. An upper bound: it leaves out the forward pass's activations and logits, and the cache's granularity (pages, or a buffer per sequence at its maximum length). GPT-2 1.5B, five times smaller, holds fewer tokens: 300 KiB each, as each of its 25 heads has its own keys and values.
#
# ## 7. The widget: sequence length against a GPU
#
# The widget's bar shows the peak of the whole training step with Adam, traced by `profile_step` (`transformer_step(model, seq, batch, ...)`): at short sequences it is at `optimizer.step()` (20 bytes per parameter with `foreach` Adam, lesson 05a); at long ones, at the start of backward, where the activations and logits sit beside the parameters and Adam's states. The verdict adds the assumed overhead and the card's cuBLAS workspaces. Each change traces the step anew (a few seconds). First as text, Llama 8B at 4k tokens on an H100:

# %%
explorer = SequenceExplorer(model="llama3-8b", seq=4096, batch_size=1, amp=True, policy="full", attention="flash")
print(explorer.message)
states = explorer.result.categories
assert explorer.message.startswith("does not fit") and explorer.result.where == "optimizer.step()"
assert fmt_bytes(states["parameters"] + states["optimizer_states"], "GiB") == "89.7 GiB"
explorer.model.value = "gpt2-xl"
explorer.policy.value = "none"
print(explorer.message)
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
# - A transformer block keeps a few dozen bytes per token and hidden unit whatever the sequence, plus the a·s² scores only if the kernel keeps them.
# - Published formulas count someone's implementation (Korthikanti's: Megatron-LM's 16-bit GPT with kept scores; ZeRO's: no scores). PyTorch under `torch.autocast` keeps 44 + 4·a·s/h bytes per s·b·h for a GPT-2 block (math kernel, with dropout) or about 36 (flash); this lesson's Llama block keeps 54, a figure of its implementation.
# - Fused attention removes the s² term; a GPU's dispatcher picks it whenever it accepts the call.
# - A step's memory is affine in the number of blocks, to the byte: two shallow traces write a deep model's whole allocation log, which is how the engine simulates 7-8B models quickly (`full_trace=True` checks it).
# - Full checkpointing leaves the block inputs and autocast's weight copies; a selective policy must match the kernel.
# - The loss keeps 8 bytes per 16-bit logit under autocast, 6 if upcast first; chunking never holds them all. At inference the KV cache decides the context, and the tokens that fit are an upper bound.
#
# ## Further reading
#
# - V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022, arXiv:2205.05198, section 4.
# - S. Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054, section 3.
# - N. Tazi et al., *The Ultra-Scale Playbook: Training LLMs on GPU Clusters*, Hugging Face, 2025.
# - T. Dao et al., *FlashAttention*, 2022, and *FlashAttention-2*, 2023; J. Ainslie et al., *GQA*, 2023; A. Grattafiori et al., *The Llama 3 Herd of Models*, 2024.
# - Chunked cross-entropy fused into one kernel: Liger Kernel; torchtune's chunked losses.
# - PyTorch documentation: `torch.nn.functional.scaled_dot_product_attention`, `torch.nn.attention.sdpa_kernel`, `torch.utils.checkpoint`.
