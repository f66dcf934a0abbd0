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
# # 08b · Transformers and sequence length, part 2: a Llama-shaped 8B over sequence length, the remedies, and the KV cache
#
# **Questions**
# - What does a Llama block keep, and from which sequence length do a Llama-shaped 8B model's activations, rather than its model states, decide whether training fits?
# - What do full and selective checkpointing, the loss's logits and a chunked cross-entropy change?
# - How many tokens of context fit on a GPU at inference?
#
# **Objectives**
# - Take a Llama block apart by part, and measure a Llama-shaped 8B model from 512 to 16k tokens beside the Ultra-Scale Playbook's formula.
# - Measure full and selective activation checkpointing, what the loss keeps of the logits, and a chunked cross-entropy.
# - Compute the KV cache per token, and an upper bound on the context that fits on a card.
# - Judge a whole training step against a card with the sequence-length widget.
#
# **Time:** about 55 minutes alone: 17 of reading, 16 of code, 2 for the figures, 1 to run all, 18 for the two exercises. **GPU:** not needed (memory simulated on fake tensors).
#
# Read lesson 08 first: this lesson continues with its measure of what a block keeps (`measure_blocks`, every block alike, so two are measured and multiplied by the layer count), its attention kernels (math and flash) and its sequence lengths from 512 to 16k tokens.

# %% [markdown]
# ## Setup
#
# From lesson 08 this lesson uses builders of a model's two-block copy, for GPT-2 and now Llama (every block keeps the same bytes: `measure_blocks` checks it below), and its sequence lengths.

# %%
# %matplotlib inline
import dataclasses

import torch
import torch.nn.functional as F

from helpers import CUDA_OVERHEAD_BYTES, GPU_CARDS, GiB, Meter, fmt_bytes
from helpers.models.gpt import GPT, GPT2_PRESETS
from helpers.models.llama import LLAMA_PRESETS, Llama
from helpers.teaching.plots import plot_memory_vs_seq, plot_stacked_parts
from helpers.teaching.widgets import SequenceExplorer
from helpers.techniques.checkpointing import CHECKPOINT_POLICIES
from helpers.transformer import (KEPT_GROUPS, chunked_cross_entropy, gpt_block_kept, korthikanti_layer_bytes,
                                 kv_cache_bytes_per_token, measure_blocks)

_ = torch.manual_seed(0)
SEQS = (512, 1024, 2048, 4096, 8192, 16384)  # lesson 08's sequence lengths


def gpt(config, layers=2):
    """A builder of `config`'s GPT with only `layers` blocks: every block keeps the same bytes (lesson 08)."""
    return lambda: GPT(dataclasses.replace(config, n_layer=layers))


def llama(config, layers=2):
    """A builder of `config`'s Llama with only `layers` blocks."""
    return lambda: Llama(dataclasses.replace(config, n_layer=layers))


# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. A Llama-shaped 8B model over sequence length
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
# ## 2. Remedies, measured
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
                                  "everything else the blocks keep": kept8 - weights16 - inputs8}  # lesson 08's first figure
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
# ## 3. Inference: the KV cache
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
# ## 4. The widget: sequence length against a GPU
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
# **Exercise 1: the longest sequence.** GPT-2 1.5B at batch 1, AMP, no checkpointing, Adam: which is the longest sequence of `SequenceExplorer.SEQ_LENS` whose whole training step fits an A100 40 GB (with the assumed 1 GiB), with the math kernel, and with flash? (`from helpers import fits, profile_step` and `from helpers.transformer import transformer_step`.)

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
# **Exercise 2: the KV cache without grouped-query attention.** If Llama-3 8B had 32 key/value heads, how many bytes per token would its 16-bit KV cache take, and how many tokens would fit on an H100 80 GB beside the weights?

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
# - This lesson's Llama block keeps 54 bytes per s·b·h under autocast, plus the weight copies: a figure of its implementation (casts, repeated keys and values, unfused norms), not of Llama.
# - With the math kernel a Llama-shaped 8B model's activations pass its model states at 8k tokens, with flash at 16k; beyond the weight copies, activations are linear in the batch.
# - Full checkpointing leaves the block inputs and autocast's weight copies; a selective policy must match the kernel.
# - The loss keeps 8 bytes per 16-bit logit under autocast, 6 if upcast first; chunking never holds them all.
# - At inference the KV cache decides the context, and the tokens that fit are an upper bound.
#
# ## Further reading
#
# - N. Tazi et al., *The Ultra-Scale Playbook: Training LLMs on GPU Clusters*, Hugging Face, 2025.
# - V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022, arXiv:2205.05198: its selective activation recomputation.
# - J. Ainslie et al., *GQA*, 2023; A. Grattafiori et al., *The Llama 3 Herd of Models*, 2024.
# - Chunked cross-entropy fused into one kernel: Liger Kernel; torchtune's chunked losses.
# - PyTorch documentation: `torch.utils.checkpoint` (`create_selective_checkpoint_contexts`), `torch.nn.functional.cross_entropy`, `torch.autocast`.
