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
# # 07 · When one GPU is not enough: sharding the model states with FSDP
#
# **Questions**
# - How much memory does each GPU need when N GPUs train one model together, and what do ZeRO's three stages change?
# - What does PyTorch's own engine for this, FSDP2 (`fully_shard`), actually allocate on each GPU, and why is it more than "the model states divided by N"?
# - What does sharding not shrink?
#
# **Objectives**
# - Compute the model states per GPU for ZeRO stages 1, 2 and 3 and for DeepSpeed's estimators, and reproduce the ZeRO paper's 7.5-billion-parameter table.
# - Measure, on a laptop, rank 0 of an FSDP2 job of 1 to 8 ranks for an MLP, ResNet18 and GPT-2 124M: its sharded parameters, gradients and optimizer states, and the all-gather and reduce-scatter buffers that come and go.
# - Explain each gap between formula and measurement: padding, the 512-byte blocks, the root unit that is not resharded after forward, the buffers kept for prefetching, the largest unit's all-gather.
# - Combine sharding with activation checkpointing and mixed precision (lesson 04), and read a `torchrun` script that runs the same code on real GPUs.
#
# **Time:** 45 minutes teaching, 15 minutes exercises. **GPU:** not needed (one process plays rank 0 of N on a fake process group; memory simulated).
#
# Lesson 05 (model states, bytes per parameter, the ZeRO paper's conventions) comes first; lesson 04 introduced AMP and checkpointing.

# %% [markdown]
# ## Setup

# %%
import torch
import torch.distributed as dist

from helpers import GPU_CARDS, build_model, fmt_bytes, fits
from helpers.models import digits_mlp
from helpers.models.gpt import GPT, GPT2_PRESETS
from helpers.fsdp import fake_process_group, sharded_step
from helpers.techniques.sharding import (ZERO_STAGES, deepspeed_zero2_gpu_bytes, deepspeed_zero3_gpu_bytes,
                                         largest_layer_parameters, shard_numel, sharded_parameter_bytes,
                                         zero_model_state_bytes)

_ = torch.manual_seed(0)

# %%
# NBVAL_IGNORE_OUTPUT
# (why: versions and devices differ between machines)
print(f"torch {torch.__version__}, torch.distributed available: {dist.is_available()}, "
      f"GPUs: {torch.cuda.device_count()}")

# %% [markdown]
# ## 1. ZeRO's three stages, as formulas
#
# In plain data parallelism every GPU holds a full copy of the model states and trains on its own slice of the batch; after backward the GPUs average their gradients (an *all-reduce*) and each takes the same optimizer step. N GPUs then hold N identical copies. The ZeRO paper (Rajbhandari et al., SC20, arXiv:1910.02054) removes the copies in three stages, each *sharding* one more model state, so that each of the N GPUs (the *ranks*) keeps 1/N of it:
#
# - **stage 1, P_os**: the optimizer states; each rank updates only its 1/N of the parameters;
# - **stage 2, P_os+g**: also the gradients; each rank receives only the sum of its 1/N (a *reduce-scatter* instead of an all-reduce);
# - **stage 3, P_os+g+p**: also the parameters; before a layer runs, its full parameters are collected from all ranks (an *all-gather*) and dropped again after use.
#
# With the paper's mixed-precision Adam (lesson 05: 2 bytes of 16-bit parameter, 2 of 16-bit gradient, K = 12 of fp32 master weights and Adam states per parameter), Ψ parameters and N ranks, the model states per rank are (the paper's section 5 and figure 1):
#
# | stage | per rank |
# |---|---|
# | baseline | (2 + 2 + K) Ψ |
# | P_os | 2Ψ + 2Ψ + KΨ/N |
# | P_os+g | 2Ψ + (2 + K)Ψ/N |
# | P_os+g+p | (2 + 2 + K)Ψ/N |
#
# The paper's figure 1 evaluates them for a 7.5-billion-parameter model on 64 GPUs. Computed from the formulas, beside the figures the paper prints (quoted):

# %%
PAPER_PSI, PAPER_N = 7_500_000_000, 64
PAPER_GB = {0: 120, 1: 31.4, 2: 16.6, 3: 1.9}  # quoted: Rajbhandari et al. 2020, figure 1 (GB = 10**9 bytes)
print(f"{'ZeRO stage':<28} {'computed':>10} {'paper (quoted)':>15}")
for stage, name in ZERO_STAGES.items():
    gb = zero_model_state_bytes(PAPER_PSI, PAPER_N, stage) / 1e9
    print(f"{name:<28} {gb:>7.2f} GB {PAPER_GB[stage]:>12} GB")
    assert round(gb, 1) == PAPER_GB[stage]

# %% [markdown]
# All four agree, to the paper's rounding. Stage 3 divides everything by N: 1.9 GB per GPU instead of 120. Stages 1 and 2 leave the 16-bit parameters (and, in stage 1, the gradients) whole on every rank, so they cannot go below 2Ψ or 4Ψ however many GPUs there are.
#
# DeepSpeed, the library that implements ZeRO, ships estimators of the same quantity (`estimate_zero2_model_states_mem_needs_all_live` in `deepspeed/runtime/zero/stage_1_and_2.py`, `estimate_zero3_model_states_mem_needs_all_live` in `deepspeed/runtime/zero/stage3.py`). Their formulas, without offloading, rewritten here from that source (DeepSpeed itself is not needed):
#
# - ZeRO-2: `2Ψ + 18Ψ/N`: the 16-bit parameters whole, and 18 bytes per parameter sharded (16-bit gradient 2, fp32 gradient 4, fp32 parameter 4, Adam's two moments 8: DeepSpeed keeps an fp32 copy of the gradients that the paper's K = 12 does not count);
# - ZeRO-3: `4 × largest layer + 18Ψ/N`: everything sharded, plus room for gathering the largest layer (the most parameters any one module holds itself).
#
# For GPT-2 124M, whose largest layer is the token embedding (50,257 × 768), on 1 to 8 GPUs:

# %%
with torch.device("meta"):
    gpt2 = GPT("gpt2")  # shapes only: nothing is allocated
P124 = sum(p.numel() for p in gpt2.parameters())
LARGEST = largest_layer_parameters(gpt2)
assert P124 == GPT2_PRESETS["gpt2"].parameter_count() and LARGEST == 50257 * 768
print(f"GPT-2 124M: {P124:,} parameters, largest layer {LARGEST:,} (the token embedding)")
print(f"{'N':>2} {'paper P_os+g':>13} {'DeepSpeed Z2':>13} {'paper P_os+g+p':>15} {'DeepSpeed Z3':>13}   (MB = 10**6 bytes)")
for n in range(1, 9):
    print(f"{n:>2} {zero_model_state_bytes(P124, n, 2) / 1e6:>10.0f} MB {deepspeed_zero2_gpu_bytes(P124, n) / 1e6:>10.0f} MB "
          f"{zero_model_state_bytes(P124, n, 3) / 1e6:>12.0f} MB {deepspeed_zero3_gpu_bytes(P124, LARGEST, n) / 1e6:>10.0f} MB")
ratio8 = deepspeed_zero3_gpu_bytes(P124, LARGEST, 8) / zero_model_state_bytes(P124, 8, 3)
print(f"at N = 8, DeepSpeed's ZeRO-3 estimate is {ratio8:.2f} times the paper's stage 3")
assert round(ratio8, 2) == 1.75

# %% [markdown]
# The estimators count more than the paper: 18 bytes per parameter instead of 16, and, for ZeRO-3, the largest layer gathered whole. For GPT-2 that layer is 31% of the model, so at 8 GPUs DeepSpeed's ZeRO-3 estimate is 1.75 times the paper's: the layer that must be gathered does not shrink with N. Which of the two describes PyTorch? Measure it.
#
# ## 2. FSDP2 on a fake process group, in one process
#
# PyTorch's implementation of ZeRO stage 3 is *Fully Sharded Data Parallel*; its current version, FSDP2, is one function, `torch.distributed.fsdp.fully_shard`. Applied to a module, it replaces each parameter by a `DTensor` that holds only this rank's shard (a slice of dim 0), and registers hooks that all-gather the module's parameters before its forward and backward, and reduce-scatter its gradients after backward. Each module wrapped this way is one *unit*: the unit of gathering. Models are wrapped block by block, then the root:
#
# ```python
# for block in model.blocks:
#     fully_shard(block)
# fully_shard(model)        # the root: the embeddings and the head
# ```
#
# Running this needs a process group of N ranks. PyTorch's tests have a *fake* one: `torch.distributed.init_process_group("fake", store=FakeStore(), rank=0, world_size=N)` makes this single process rank 0 of N. Collectives return at once without moving any data; every tensor still has the shape it has on a real rank 0. Under the simulated backend (fake tensors, lesson 00) the values do not matter anyway: what is counted is the bytes rank 0 allocates. `fake_process_group` does this, builds the `DeviceMesh` that `fully_shard` takes, and always destroys the process group on the way out, even when the body fails. (Two details make FSDP2 run under fake tensors: the mesh is built before the fake-tensor mode starts, because its constructor reads tensor values; and the storage tracker counts a `DTensor` by the local shard it wraps, since the `DTensor` itself owns no memory.)

# %%
try:
    with fake_process_group(4) as mesh:
        print(f"inside: rank {dist.get_rank()} of {dist.get_world_size()}, mesh {mesh}")
        raise RuntimeError("a cell that fails")
except RuntimeError as e:
    print(f"the error reaches us ({e}), and the process group is gone: initialized = {dist.is_initialized()}")
assert not dist.is_initialized()

# %% [markdown]
# `sharded_step` does the rest, as a real job does for a model too large for one GPU: it builds the model on the `meta` device (shapes only), wraps it unit by unit, and only then gives the *sharded* parameters storage, so that no rank ever holds the whole model. It runs two training steps with Adam (`foreach`, lesson 05), the first to create the optimizer states, and measures the second by category: this rank's sharded parameters, gradients and optimizer states; the unsharded (all-gathered) parameters; the flat all-gather buffers; the unsharded gradients and the reduce-scatter buffers; and everything else (activations, the loss, temporaries). FSDP2's collectives are PyTorch operators of their own (`torch.ops.fsdp.all_gather_copy_in`, `split_with_sizes_copy`, `chunk_cat`), so the storage tracker sees which storages they fill.
#
# Start with lesson 01's MLP (85,002 parameters, each `Linear` one unit) on 1 to 8 ranks. Everything here is fp32 Adam, 4 + 4 + 8 = 16 bytes per parameter (lesson 05), the same total as the paper's 2 + 2 + 12, so ZeRO-3's formula is 16Ψ/N:

# %%
mlp = {n: sharded_step("mlp", n, batch_size=32) for n in range(1, 9)}
P_MLP = mlp[1].parameter_count
with torch.device("meta"):
    mlp_model = digits_mlp()
print(f"MLP, {P_MLP:,} parameters; bytes per rank (rank 0)")
print(f"{'N':>2} {'parameters':>11} {'gradients':>10} {'Adam states':>12} {'sum':>9} {'16Ψ/N':>9} {'ratio':>6}"
      f" {'padded, 512-B rule':>19}")
for n, s in mlp.items():
    formula = 16 * P_MLP / n
    exact = sharded_parameter_bytes(mlp_model, n)
    print(f"{n:>2} {s.parameters:>11,} {s.gradients:>10,} {s.optimizer_states:>12,} {s.model_state_bytes:>9,} "
          f"{formula:>9,.0f} {s.model_state_bytes / formula:>6.3f} {exact:>19,}")
    assert s.parameters == exact and s.optimizer_states == 2 * exact
assert [round(mlp[n].model_state_bytes / (16 * P_MLP / n), 2) for n in (1, 2, 4, 8)] == [1.0, 1.0, 1.02, 1.05]

# %% [markdown]
# The model states per rank fall as 1/N, and the gap to 16Ψ/N, up to 5% at N = 8, is exactly accounted for by two rules (the last column reproduces the parameters byte for byte, and the Adam states are twice it):
#
# - **padding**: FSDP2 splits dim 0 of each parameter into N pieces of ⌈rows/N⌉ rows (as `torch.chunk` does) and pads the smaller pieces to that size, so that the all-gather moves equal pieces. The output layer's 10 rows on 8 ranks are 2 rows each: rank 0 holds 2/10 of it, not 1/8. Rank 0 always holds a full piece, so it is the rank to measure;
# - **512-byte blocks**: each shard is its own storage, rounded up to 512 bytes by the caching allocator (lesson 00); the MLP's six tensors are small, so their shards are too. The gradients of a unit share one flat storage (FSDP2 reduce-scatters a unit's gradients in one buffer), so they are rounded once per unit.
#
# For a large model both rules vanish into the fourth digit, as the next section shows.
#
# ## 3. ResNet18 and GPT-2 124M, rank by rank
#
# ResNet18 (each residual block one unit; the stem and the classifier in the root), at batch 8 per rank, and GPT-2 124M (each transformer block one unit; the embeddings, the final LayerNorm and the head, which shares the token embedding, in the root), at batch 8 and sequence 512 per rank, on 1 to 8 ranks. The column "padded" is the parameters by the two rules of section 2, computed from the model's shapes:

# %%
with torch.device("meta"):
    shapes = {"resnet18": build_model("resnet18"), "gpt2": GPT(GPT2_PRESETS["gpt2"])}
largest = {"resnet18": largest_layer_parameters(shapes["resnet18"]), "gpt2": LARGEST}
runs = {("resnet18", n): sharded_step("resnet18", n, batch_size=8) for n in range(1, 9)}
runs.update({("gpt2", n): sharded_step("gpt2", n, batch_size=8, seq_len=512) for n in range(1, 9)})
print(f"{'model':<9} {'N':>2} {'model states':>13} {'16Ψ/N':>11} {'ratio':>6} {'padded':>11} {'DS ZeRO-3':>11} "
      f"{'unsharded':>10} {'AG buffers':>11} {'RS buffers':>11} {'peak':>11}")
for (name, n), s in runs.items():
    formula = 16 * s.parameter_count / n
    padded = sharded_parameter_bytes(shapes[name], n)
    print(f"{name:<9} {n:>2} {fmt_bytes(s.model_state_bytes):>13} {fmt_bytes(formula):>11} "
          f"{s.model_state_bytes / formula:>6.4f} {fmt_bytes(padded):>11} "
          f"{fmt_bytes(deepspeed_zero3_gpu_bytes(s.parameter_count, largest[name], n)):>11} "
          f"{fmt_bytes(s.largest['unsharded_parameters']):>10} {fmt_bytes(s.largest['all_gather_buffers']):>11} "
          f"{fmt_bytes(s.largest['reduce_scatter_buffers']):>11} {fmt_bytes(s.peak_bytes):>11}")
    assert s.parameters == padded and s.optimizer_states == 2 * padded  # the two rules, byte for byte
    assert abs(s.model_state_bytes / formula - 1) < (0.016 if name == "resnet18" else 0.0015)
for name in ("resnet18", "gpt2"):  # powers of two divide the channel and hidden sizes: closest to 16Ψ/N
    worst = max((n for n in range(1, 9)), key=lambda n: runs[name, n].model_state_bytes * n)
    assert worst == 7 and all(abs(runs[name, n].model_state_bytes * n / (16 * runs[name, n].parameter_count) - 1)
                              < (0.003 if name == "resnet18" else 0.0005) for n in (1, 2, 4, 8))
assert largest["resnet18"] == 512 * 512 * 9
print("(unsharded, AG and RS buffers: the most bytes each held at any moment of the step)")

# %% [markdown]
# The model states follow 16Ψ/N, and the "padded" column reproduces rank 0's parameters byte for byte at every N (its Adam states are twice that): ZeRO stage 3, as the paper wrote it, plus section 2's two rules. When N is a power of two, which divides every channel count and hidden size, the gap stays within 0.05% for GPT-2 and 0.3% for ResNet18 (whose 62 parameter tensors, many of them small BatchNorm vectors, each round up to 512 bytes). Other world sizes pad: at N = 7, a 64-channel convolution is cut into pieces of 10 rows, so rank 0 holds 10/64 of it instead of 1/7, and ResNet18's model states are 1.5% above 16Ψ/N; GPT-2's 768-wide matrices pad to 770 rows (0.15%). (For ResNet18 the DeepSpeed column's largest layer is a 3 × 3 convolution of the last stage, 512 × 512 × 9 weights.) But the peak does not fall as 1/N, and the last four columns say why. Take GPT-2 apart at N = 4, unit by unit:

# %%
g4 = runs["gpt2", 4]
units = dict(g4.units)
block, root = g4.units[0][1], units["root"]
print(f"GPT-2's FSDP units: {len(g4.units) - 1} blocks of {block:,} parameters ({fmt_bytes(4 * block)} in fp32), "
      f"and the root, {root:,} ({fmt_bytes(4 * root)})")
print(f"after forward, unsharded parameters still allocated: {fmt_bytes(g4.after_forward['unsharded_parameters'])}")
print(f"most unsharded parameters at once:  {fmt_bytes(g4.largest['unsharded_parameters'])} "
      f"= root + one block: {fmt_bytes(4 * (root + block))}")
print(f"most all-gather buffers at once:    {fmt_bytes(g4.largest['all_gather_buffers'])}")
print(f"most reduce-scatter buffers at once: {fmt_bytes(g4.largest['reduce_scatter_buffers'])}")
both = max(unsharded + buffers for _, _, unsharded, buffers in g4.timeline)
print(f"most gathered parameters and all-gather buffers together: {fmt_bytes(both)} "
      f"= 2 x (root + one block): {fmt_bytes(2 * 4 * (root + block))}")
assert abs(both - 8 * (root + block)) < 0.001 * 8 * (root + block) and both > runs["gpt2", 8].model_state_bytes
assert abs(g4.after_forward["unsharded_parameters"] - 4 * root) < 0.001 * 4 * root
assert abs(g4.largest["unsharded_parameters"] - 4 * (root + block)) < 0.001 * 4 * (root + block)
assert abs(g4.largest["all_gather_buffers"] - 4 * (root + block)) < 0.001 * 4 * (root + block)
assert abs(g4.largest["reduce_scatter_buffers"] - 4 * root) < 0.001 * 4 * root
r4 = runs["resnet18", 4]
r_units = [n for _, n in r4.units]   # layer1.0 ... layer4.1, then the root
print(f"ResNet18, N = 4: root {fmt_bytes(4 * r_units[-1])}, last two blocks {fmt_bytes(4 * r_units[-3])} and "
      f"{fmt_bytes(4 * r_units[-2])}; most unsharded {fmt_bytes(r4.largest['unsharded_parameters'])}, "
      f"most all-gather buffers {fmt_bytes(r4.largest['all_gather_buffers'])}")
assert abs(r4.largest["unsharded_parameters"] - 4 * (r_units[-1] + r_units[-2])) < 0.001 * r4.largest["unsharded_parameters"]
assert abs(r4.largest["all_gather_buffers"] - 4 * (r_units[-3] + r_units[-2])) < 0.001 * r4.largest["all_gather_buffers"]

# %% [markdown]
# Every transient is a unit's parameters in fp32, whole, and none of them shrinks with N:
#
# - **The root is not resharded after forward.** `fully_shard`'s default, `reshard_after_forward=None`, frees each block's gathered parameters when the block's forward ends (and gathers them again for its backward), but keeps the root's, since backward starts with the head and would gather them at once. The root holds the token embedding: 150 MiB that stay gathered from the start of forward to the end of backward.
# - **The largest unit's all-gather.** The root is GPT-2's largest unit by far (39.4 million parameters against 7.1 million per block). Gathering it needs a flat buffer of its size *and* the unsharded parameters copied out of it: two copies of the embedding. DeepSpeed's estimator allows for such a moment with its "4 × largest layer" term; here, in fp32, the gathered root and its buffer alone are 2 × 4 bytes per parameter of the root.
# - **Prefetching.** To overlap communication with computation, FSDP2 keeps the previous unit's all-gather buffer in forward until the next unit's gather has started, and in backward gathers the next unit while the current one computes: two units' buffers at once (here the root's and a block's: 177.3 MiB). At the start of forward both effects meet: the root and the first block are each there twice, buffer and gathered parameters, 354.6 MiB, more than rank 0's model states at N = 8.
# - **Reduce-scatter.** A unit's unsharded gradients are copied into one flat buffer, and reduce-scattered from it; for the root, 150 MiB again.
#
# ResNet18 follows the same rules with smaller units: its root (the stem and the classifier, 2.0 MiB) stays gathered, its largest unit is the last residual block (18.0 MiB), and two consecutive blocks' buffers (14.0 + 18.0 MiB) coexist. Shard a model into units of similar size and the transient is a few units, whatever N. GPT-2's vocabulary makes that impossible: its embedding is a third of the model, and its unit, gathered, does not shrink with N. The `reshard_after_forward` option trades memory for communication; compare the three settings at N = 4:

# %%
reshard = {None: g4}
for option in (True, False):
    reshard[option] = sharded_step("gpt2", 4, batch_size=8, seq_len=512, reshard_after_forward=option)
for option, s in reshard.items():
    print(f"reshard_after_forward={option!s:<5}  unsharded parameters after forward {fmt_bytes(s.after_forward['unsharded_parameters']):>10}"
          f"   peak {fmt_bytes(s.peak_bytes):>11}")
assert reshard[True].after_forward["unsharded_parameters"] == 0
assert abs(reshard[False].after_forward["unsharded_parameters"] - 4 * P124) < 0.001 * 4 * P124
assert reshard[True].peak_bytes < reshard[None].peak_bytes < reshard[False].peak_bytes

# %% [markdown]
# `True` (reshard the root too) frees everything after forward and gathers the root again in backward: the lowest peak, one more all-gather. `False` keeps every unit gathered from its forward to its backward: the whole model in fp32, 474.7 MiB, on every rank. That is ZeRO stage 2 for the parameters, with stage 3's communication.
#
# ## 4. What sharding does not shard, and how it combines with lesson 04
#
# Each rank runs the forward and backward pass of its own slice of the batch, whole. Its activations are those of one GPU at that batch size, whatever N:

# %%
acts = {n: runs["gpt2", n].after_forward["other"] for n in range(1, 9)}
print("GPT-2, batch 8 x 512 per rank, allocated at the end of forward besides the model states and gathered parameters:")
print("   " + "   ".join(f"N={n}: {fmt_bytes(b)}" for n, b in acts.items()))
assert len(set(acts.values())) == 1
peak_states = {n: runs["gpt2", n].model_state_bytes / runs["gpt2", n].peak_bytes for n in (1, 8)}
print(f"model states are {peak_states[1]:.0%} of the peak at N = 1 and {peak_states[8]:.0%} at N = 8")

# %% [markdown]
# The activations (with the logits, lesson 05) do not move: sharding divides the model states, and once they are divided the activations are most of the peak. For them, lesson 04's techniques are still the tools, and they combine with FSDP2:
#
# - **activation checkpointing** of every unit (`torch.utils.checkpoint`, non-reentrant, inside the unit's `fully_shard`: when the unit's backward recomputes its forward, its parameters have already been gathered for the backward);
# - **mixed precision** through FSDP2's `MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)`: the all-gather casts each shard to bfloat16 and gathers 16-bit parameters, the forward and backward compute in bfloat16, and the gradients are reduce-scattered in fp32 into fp32 shards. The sharded parameters and Adam states stay fp32: this is the paper's 2 + 2 + 12 with the 16-bit copies only ever whole for the unit being computed.

# %%
combos = {"FSDP2": g4,
          "+ checkpointing": sharded_step("gpt2", 4, batch_size=8, seq_len=512, checkpoint=True),
          "+ MixedPrecisionPolicy(bf16)": sharded_step("gpt2", 4, batch_size=8, seq_len=512, mixed_precision=True)}
print(f"GPT-2, N = 4, batch 8 x 512 per rank {'model states':>14} {'unsharded':>10} {'activations etc.':>17} {'peak':>11}")
for name, s in combos.items():
    print(f"{name:<37} {fmt_bytes(s.model_state_bytes):>14} {fmt_bytes(s.largest['unsharded_parameters']):>10} "
          f"{fmt_bytes(s.after_forward['other']):>17} {fmt_bytes(s.peak_bytes):>11}")
mp = combos["+ MixedPrecisionPolicy(bf16)"]
assert combos["+ checkpointing"].gradients == g4.gradients   # every unit still gets its gradient shards
assert mp.model_state_bytes == g4.model_state_bytes
assert abs(mp.largest["unsharded_parameters"] / g4.largest["unsharded_parameters"] - 0.5) < 0.001
assert combos["+ checkpointing"].after_forward["other"] < g4.after_forward["other"] / 3
assert mp.peak_bytes < combos["+ checkpointing"].peak_bytes < g4.peak_bytes

# %% [markdown]
# The three work on different terms. Checkpointing keeps only each block's input until backward (953.4 MiB instead of 3116.4 MiB at the end of forward) and leaves the model states alone. The mixed-precision policy leaves the model states at 16 bytes per parameter over N, halves every gathered parameter (177.3 MiB at most become 88.6 MiB), and halves most activations, since the computation runs in bfloat16. Together with sharding, they are how models far larger than one GPU are trained.
#
# ## 5. The same code on real GPUs: `torchrun`
#
# On a machine with 4 GPUs, the script below is started once per GPU by `torchrun --standalone --nproc-per-node 4 train_fsdp.py`. `torchrun` sets `RANK`, `LOCAL_RANK` and `WORLD_SIZE` in each process's environment; `init_process_group("nccl")` reads them. (Not run here: this machine has no GPU, and the CI that tests these lessons has none either.)
#
# ```python
# # train_fsdp.py: run with  torchrun --standalone --nproc-per-node 4 train_fsdp.py
# import os
# import torch
# import torch.distributed as dist
# import torch.nn.functional as F
# from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
# from helpers.models.gpt import GPT
#
# dist.init_process_group("nccl")                       # one process per GPU
# rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
# torch.cuda.set_device(local_rank)
#
# with torch.device("meta"):                            # no rank ever holds the whole model
#     model = GPT("gpt2")
# policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
# for block in model.blocks:
#     fully_shard(block, mp_policy=policy)
# fully_shard(model, mp_policy=policy)
# model.to_empty(device="cuda")                         # storage for this rank's shards only
# for module in model.modules():                        # then initialise them
#     if hasattr(module, "reset_parameters"):
#         module.reset_parameters()
# optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
#
# for step in range(10):
#     ids = torch.randint(0, 50257, (8, 512), device="cuda")   # each rank: its own batch of 8
#     logits = model(ids[:, :-1])
#     loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
#     loss.backward()                                   # reduce-scatters the gradients unit by unit
#     optimizer.step()                                  # each rank updates its shards
#     optimizer.zero_grad()
# print(f"rank {rank}: peak allocated {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
# dist.destroy_process_group()
# ```
#
# What differs from the fake process group:
#
# - The collectives move data over NVLink or the network (NCCL), and run on their own CUDA streams, overlapping with computation; this is why FSDP2 keeps the buffers of section 3 a little longer than a single stream would need. NCCL also allocates its own buffers, outside PyTorch's caching allocator, like the CUDA context: `memory_allocated()` does not see them, `nvidia-smi` does.
# - Every rank prints its own peak. Ranks other than 0 hold the same or slightly smaller shards (padding, section 2) and the same activations, so rank 0's figure is the one to plan for.
# - On one GPU the same script needs no changes: `torchrun --nproc-per-node 1` gives a world of one, where FSDP2 shards nothing but still gathers (here, copies) each unit's parameters, as the N = 1 rows of section 3 show.
#
# ## Exercises
#
# **Exercise 1: how many GPUs for the paper's 7.5B model?** How many A100 40 GB cards does the 7.5-billion-parameter model need before its model states fit in what PyTorch sees of each card (with the 1 GiB of CUDA overhead that lesson 05 assumes), with ZeRO stage 1, 2 or 3 as the paper counts them, and with DeepSpeed's ZeRO-2 and ZeRO-3 estimates (say its largest layer has 400 million parameters)?

# %%
# Your code here: zero_model_state_bytes(PAPER_PSI, n, stage), deepspeed_zero2_gpu_bytes(...), deepspeed_zero3_gpu_bytes(...),
# fits(..., GPU_CARDS["A100 40 GB"])

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# card = GPU_CARDS["A100 40 GB"]
# def fewest(per_rank):
#     return min((n for n in range(1, 65) if fits(per_rank(n), card)), default=None)
# need = {f"paper, stage {stage}": fewest(lambda n, stage=stage: zero_model_state_bytes(PAPER_PSI, n, stage))
#         for stage in (1, 2, 3)}
# need["DeepSpeed ZeRO-2"] = fewest(lambda n: deepspeed_zero2_gpu_bytes(PAPER_PSI, n))
# need["DeepSpeed ZeRO-3"] = fewest(lambda n: deepspeed_zero3_gpu_bytes(PAPER_PSI, 400_000_000, n))
# print(need)
# assert need == {"paper, stage 1": 8, "paper, stage 2": 4, "paper, stage 3": 3,
#                 "DeepSpeed ZeRO-2": 6, "DeepSpeed ZeRO-3": 4}
# ```
#
# Stage 3 needs 3 cards (40 GB each of the 120), stage 2 needs 4 and stage 1 needs 8, because their unsharded 16-bit parameters (15 GB) and gradients (15 GB more in stage 1) sit on every card. DeepSpeed's estimates ask for more: its 18 bytes per parameter (an fp32 copy of the gradients), and for ZeRO-3 the largest layer gathered whole (1.6 GB), which pushes 3 cards to 4. These are model states only: the activations, which sharding does not divide, decide how many more cards (or how much checkpointing) the batch needs.
# </details>
#
# **Exercise 2: SGD instead of Adam.** Predict rank 0's model states for ResNet18 with SGD with momentum (lesson 05: 4 + 4 + 4 bytes per parameter) on 4 ranks, then measure them with `sharded_step(..., optimizer="sgd-momentum")`. Do the transient all-gather buffers change?

# %%
# Your code here: sharded_step("resnet18", 4, batch_size=8, optimizer="sgd-momentum")

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# sgd = sharded_step("resnet18", 4, batch_size=8, optimizer="sgd-momentum")
# adam = runs["resnet18", 4]
# predicted = 12 * sgd.parameter_count / 4
# print(f"model states {fmt_bytes(sgd.model_state_bytes)}, predicted 12Ψ/4 = {fmt_bytes(predicted)}; "
#       f"momentum {fmt_bytes(sgd.optimizer_states)} vs Adam's {fmt_bytes(adam.optimizer_states)}")
# print(f"largest all-gather buffers: {fmt_bytes(sgd.largest['all_gather_buffers'])} (Adam: {fmt_bytes(adam.largest['all_gather_buffers'])})")
# assert abs(sgd.model_state_bytes / predicted - 1) < 0.001
# assert sgd.optimizer_states * 2 == adam.optimizer_states
# assert sgd.largest["all_gather_buffers"] == adam.largest["all_gather_buffers"]
# ```
#
# 12 bytes per parameter over 4 ranks, to within 0.1%; the momentum buffers are half of Adam's two moments. The gathers do not change: they move parameters, whatever the optimizer keeps.
# </details>
#
# ## Key points
#
# - ZeRO shards the model states across N data-parallel ranks in three stages: optimizer states (P_os), + gradients (P_os+g), + parameters (P_os+g+p). Per rank: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N bytes; 120, 31.4, 16.6 and 1.9 GB for 7.5B parameters on 64 GPUs. DeepSpeed's estimators count 18 bytes per parameter, and for stage 3 add 4 bytes per parameter of the largest layer.
# - PyTorch's FSDP2 (`fully_shard`) is stage 3. Measured on rank 0 of a fake process group, its sharded parameters, gradients and Adam states follow 16Ψ/N within 0.3% for ResNet18 and 0.05% for GPT-2 when N is a power of two (1.5% and 0.15% at N = 7); the rest is padding of dim 0 to N equal pieces and 512-byte blocks, byte for byte.
# - What does not shrink with N: the gathered units (the root, unless `reshard_after_forward=True`; the largest unit, twice while it is gathered; two units' buffers for prefetching), the reduce-scatter buffer of a unit, and the activations of each rank's batch.
# - Sharding combines with activation checkpointing (activations) and `MixedPrecisionPolicy` (16-bit gathers and compute, fp32 shards); `torchrun --nproc-per-node N` runs the same code on N real GPUs, where NCCL's own buffers come on top.
#
# ## Further reading
#
# - S. Rajbhandari, J. Rasley, O. Ruwase, Y. He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054, sections 5 and 7, figure 1.
# - PyTorch documentation: `torch.distributed.fsdp.fully_shard` (FSDP2), and the tutorial *Getting Started with Fully Sharded Data Parallel (FSDP2)*; `torchrun` (Elastic Launch).
# - DeepSpeed documentation, *Memory Requirements* (the ZeRO-2 and ZeRO-3 estimators), and their source, `deepspeed/runtime/zero/stage_1_and_2.py` and `stage3.py`.
# - Y. Zhao et al., *PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel*, VLDB 2023, arXiv:2304.11277.
# - Hugging Face, *The Ultra-Scale Playbook* (2025), its chapters on data parallelism and ZeRO.
