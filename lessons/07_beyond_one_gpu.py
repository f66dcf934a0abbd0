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
# # 07 · When one GPU is not enough: sharding the model states with FSDP
#
# **Questions**
# - How much memory does each GPU need when N GPUs train one model together?
# - What does PyTorch's FSDP2 (`fully_shard`) allocate on each GPU, and why is it more than "the model states divided by N"?
# - What does sharding not shrink, and which options shrink the rest?
#
# **Objectives**
# - Compute the model states per GPU for ZeRO stages 1, 2 and 3 and for DeepSpeed's estimators, and reproduce the ZeRO paper's 7.5-billion-parameter table.
# - Measure, on a laptop, one rank of an FSDP2 job of 1 to 8 ranks for an MLP, ResNet18 and GPT-2 124M: its sharded parameters, gradients and optimizer states, and the all-gather and reduce-scatter buffers that come and go.
# - Explain each gap between formula and measurement: padding, the 512-byte blocks, the root unit that is not resharded after forward, the buffers kept for prefetching, the largest unit's all-gather.
# - Choose among FSDP2's remedies (`reshard_after_forward`, how the model is cut into units, prefetching, HSDP, CPU offload) and combine sharding with activation checkpointing and mixed precision (lesson 04); read a `torchrun` script that runs the same code on real GPUs.
#
# **Time:** about 60 minutes alone: 26 of reading, 14 of code, 3 for the figures, 2 to run all, 18 for the two exercises. **GPU:** not needed (one process plays one rank of N on a fake process group; memory simulated).
#
# Before this: lesson 05a (model states, bytes per parameter), lesson 04 (AMP, checkpointing), lesson 06 (reserved memory).

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import torch
import torch.distributed as dist

from helpers import GPU_CARDS, MiB, build_model, fmt_bytes, fits
from helpers.models import digits_mlp
from helpers.models.gpt import GPT, GPT2_PRESETS
from helpers.fsdp import fake_process_group, sharded_step
from helpers.teaching.plots import plot_sharded_peaks, plot_sharded_timeline, plot_sharded_world_sizes
from helpers.sharding import (ZERO_STAGES, deepspeed_zero2_gpu_bytes, deepspeed_zero3_gpu_bytes,
                              largest_layer_parameters, sharded_parameter_bytes, zero_model_state_bytes)

_ = torch.manual_seed(0)

# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, torch.distributed available: {dist.is_available()}, "
      f"GPUs: {torch.cuda.device_count()}")

# %% [markdown]
# ## 1. ZeRO's three stages, as formulas
#
# In plain data parallelism each GPU holds a full copy of the model states, trains on its own slice of the batch, averages the gradients with the others (an *all-reduce*) and takes the same optimizer step. The ZeRO paper (Rajbhandari et al., 2020) removes these N copies in three stages, each *sharding* one more model state so that each GPU (*rank*) keeps 1/N of it:
#
# - **stage 1, P_os**: the optimizer states; each rank updates only its 1/N of the parameters;
# - **stage 2, P_os+g**: also the gradients; each rank receives only the sum of its 1/N (a *reduce-scatter* instead of an all-reduce);
# - **stage 3, P_os+g+p**: also the parameters; before a layer runs, its full parameters are collected from all ranks (an *all-gather*) and dropped after use.
#
# With the paper's mixed-precision Adam (lesson 05a, section 2: 2 bytes of 16-bit parameter, 2 of 16-bit gradient, K = 12 of fp32 master weights and Adam states), Ψ parameters and N ranks, the model states per rank are (section 5, figure 1):
#
# | stage | per rank |
# |---|---|
# | baseline | (2 + 2 + K) Ψ |
# | P_os | 2Ψ + 2Ψ + KΨ/N |
# | P_os+g | 2Ψ + (2 + K)Ψ/N |
# | P_os+g+p | (2 + 2 + K)Ψ/N |
#
# The price is communication (section 7): stages 1 and 2 move 2Ψ per rank and step, as data parallelism does; stage 3 moves 3Ψ, 1.5 times as much, because each unit's parameters are all-gathered twice, for its forward and again for its backward. Section 3 shows the option that removes the second gather.
#
# Figure 1 evaluates the formulas for 7.5 billion parameters on 64 GPUs; computed, beside the paper's figures (GB = 10⁹ bytes; 120 GB = 111.8 GiB):

# %%
PAPER_PSI, PAPER_N = 7_500_000_000, 64
PAPER_GB = {0: 120, 1: 31.4, 2: 16.6, 3: 1.9}  # quoted: Rajbhandari et al. 2020, figure 1 (GB = 10**9 bytes)
for stage, name in ZERO_STAGES.items():
    gb = zero_model_state_bytes(PAPER_PSI, PAPER_N, stage) / 1e9
    print(f"{name:<28} computed {gb:6.2f} GB   paper {PAPER_GB[stage]:>5} GB")
    assert round(gb, 1) == PAPER_GB[stage]
assert round(zero_model_state_bytes(PAPER_PSI, PAPER_N, 0) / 2**30, 1) == 111.8

# %% [markdown]
# All four agree, to the paper's rounding. Stages 1 and 2 keep the 16-bit parameters (and, in stage 1, the gradients) whole on every rank, so they never go below 2Ψ or 4Ψ.
#
# DeepSpeed, which implements ZeRO, ships estimators of the same quantity (`estimate_zero2_model_states_mem_needs` in `deepspeed/runtime/zero/stage_1_and_2.py`, `estimate_zero3_model_states_mem_needs` in `stage3.py`; without offloading):
#
# - **ZeRO-2: `2Ψ + 18Ψ/N`**: the 16-bit parameters whole, and 18 bytes per parameter sharded (16-bit gradient 2, fp32 gradient 4, fp32 parameter 4, Adam's moments 8: an fp32 copy of the gradients that the paper's K = 12 does not count). Its documentation page *Memory Requirements* still gives `4Ψ + 16Ψ/N`, the code's formula until pull request #5099 (June 2024) counted the 16-bit parameters and gradients as 2 bytes, not 4. The lesson uses the code's.
# - **ZeRO-3: `4 × largest layer + 18Ψ/N`**: everything sharded, plus the largest layer (the most parameters one module holds itself) whole: its 16-bit parameters gathered (2 bytes) and its 16-bit gradients computed (2 bytes), as the same page explains.
#
# For GPT-2 124M, whose largest layer is the token embedding (50,257 × 768), on 8 GPUs:

# %%
with torch.device("meta"):
    gpt2 = GPT("gpt2")  # shapes only: nothing is allocated
P124 = sum(p.numel() for p in gpt2.parameters())
LARGEST = largest_layer_parameters(gpt2)
assert P124 == GPT2_PRESETS["gpt2"].parameter_count() and LARGEST == 50257 * 768
ds_docs_zero2 = 4 * P124 + 16 * P124 / 8                      # DeepSpeed's documentation page
ratio2, ratio3 = (ds_docs_zero2 / deepspeed_zero2_gpu_bytes(P124, 8),
                  deepspeed_zero3_gpu_bytes(P124, LARGEST, 8) / zero_model_state_bytes(P124, 8, 3))
print(f"GPT-2 124M: {P124:,} parameters, the largest layer {LARGEST / P124:.0%} of them (the token embedding)")
print(f"N = 8: DeepSpeed ZeRO-2, documented / coded: {ratio2:.2f};  DeepSpeed ZeRO-3 / the paper's stage 3: {ratio3:.2f}")
assert round(ratio2, 2) == 1.41 and round(ratio3, 2) == 1.75

# %% [markdown]
# The documented ZeRO-2 formula asks 41% more than the code at N = 8, and DeepSpeed's ZeRO-3 estimate is 1.75 times the paper's stage 3: the embedding, a third of GPT-2, is gathered whole whatever N. Which describes PyTorch? Measure it.
#
# ## 2. FSDP2 on a fake process group, in one process
#
# PyTorch's ZeRO stage 3 is *Fully Sharded Data Parallel*; its current version, FSDP2, is `torch.distributed.fsdp.fully_shard`. Applied to a module, it replaces each parameter by a `DTensor` holding only this rank's shard (a slice of dim 0), and registers hooks that all-gather the module's parameters before its forward and backward and reduce-scatter its gradients after backward. Each wrapped module is one *unit* of gathering. Models are wrapped block by block, then the root:
#
# ```python
# for block in model.blocks:
#     fully_shard(block)
# fully_shard(model)        # the root: the embeddings and the head
# ```
#
# Running this needs N ranks. PyTorch's tests use a *fake* process group, `torch.distributed.init_process_group("fake", store=FakeStore(), rank=0, world_size=N)`: this process becomes rank 0 of N, collectives return at once without moving data, and every tensor has its shape on a real rank 0. `fake_process_group` does this, builds the `DeviceMesh` that `fully_shard` takes, and destroys the process group on the way out, even when the body fails:

# %%
try:
    with fake_process_group(4) as mesh:
        print(f"inside: rank {dist.get_rank()} of {dist.get_world_size()}, mesh {mesh}")
        raise RuntimeError("a cell that fails")
except RuntimeError as e:
    print(f"the error reaches us ({e}), and the process group is gone: initialized = {dist.is_initialized()}")
assert not dist.is_initialized()

# %% [markdown]
# `sharded_step` does the rest as a real job would: it builds the model on the `meta` device (shapes only), wraps it unit by unit, and only then gives the *sharded* parameters storage. It measures the second Adam step (`foreach`, lesson 05a) by category: this rank's sharded parameters, gradients and optimizer states; gathered parameters and all-gather buffers; reduce-scatter buffers; everything else. To save time it does not run the first step, only makes what that step leaves behind (FSDP2's initialisation, each unit gathered once, Adam's states); `first_step="trained"` runs it, with the same result.
#
# Start with lesson 01's MLP (85,002 parameters, each `Linear` one unit) on 1 to 8 ranks. Everything here is fp32 Adam, 4 + 4 + 8 = 16 bytes per parameter, the same total as the paper's 2 + 2 + 12, so ZeRO-3's formula is 16Ψ/N:

# %%
mlp = {n: sharded_step("mlp", n, batch_size=32) for n in range(1, 9)}
P_MLP = mlp[1].parameter_count
with torch.device("meta"):
    mlp_model = digits_mlp()
for n, s in mlp.items():   # parameters: the two rules below, byte for byte; Adam's states: twice that
    assert s.parameters == sharded_parameter_bytes(mlp_model, n) and s.optimizer_states == 2 * s.parameters
over = [round(mlp[n].model_state_bytes / (16 * P_MLP / n), 2) for n in (1, 2, 4, 8)]
print(f"MLP, {P_MLP:,} parameters: rank 0's model states / (16Ψ/N) at N = 1, 2, 4, 8: {over}")
assert over == [1.0, 1.0, 1.02, 1.05]

# %% [markdown]
# The model states fall as 1/N, and the gap to 16Ψ/N, 5% at N = 8, comes from exactly two rules (`sharded_parameter_bytes` reproduces rank 0's parameters byte for byte at every N; Adam's states are twice that):
#
# - **padding**: FSDP2 splits dim 0 of each parameter into N pieces of ⌈rows/N⌉ rows (as `torch.chunk` does) and gives every rank a storage of that size, so the all-gather moves equal pieces (`_fsdp_param.py`: "0th always padded"). The output layer's 10 rows on 8 ranks are 2 rows each: rank 0 holds 2/10 of it, not 1/8;
# - **512-byte blocks**: each shard is its own storage, rounded up to 512 bytes by the caching allocator (lesson 00); a unit's gradients share one flat storage (the reduce-scatter's output), so they are rounded once per unit.
#
# Is rank 0 the one to plan for? Rank 7 of 8 holds none of the output layer's 10 rows (5 pieces of 2 cover them). `sharded_step(..., rank=7)` measures it:

# %%
last = sharded_step("mlp", 8, batch_size=32, rank=7)
print(f"rank 7 of 8 minus rank 0, in bytes: parameters {last.parameters - mlp[8].parameters:+,}, "
      f"gradients {last.gradients - mlp[8].gradients:+,}, Adam states {last.optimizer_states - mlp[8].optimizer_states:+,}")
assert (last.parameters, last.gradients) == (mlp[8].parameters, mlp[8].gradients)
assert last.optimizer_states < mlp[8].optimizer_states

# %% [markdown]
# Parameters and gradients are padded on *every* rank: each keeps a storage of rank 0's size (its local tensor a view of the first rows, or of none). Only Adam's states are smaller on the last ranks: `torch.optim.Adam` makes them with `zeros_like` of the local, unpadded view. Rank 0 holds the largest shards of every kind: it is the rank to measure.
#
# ## 3. ResNet18 and GPT-2 124M, rank by rank
#
# ResNet18 (each residual block a unit; the stem and classifier in the root) at batch 8 per rank, and GPT-2 124M (each transformer block a unit; the embeddings, final LayerNorm and tied head in the root) at batch 8 × 512 tokens per rank, on 1 to 8 ranks:

# %%
with torch.device("meta"):
    shapes = {"resnet18": build_model("resnet18"), "gpt2": GPT(GPT2_PRESETS["gpt2"])}
runs = {("resnet18", n): sharded_step("resnet18", n, batch_size=8) for n in range(1, 9)}
runs.update({("gpt2", n): sharded_step("gpt2", n, batch_size=8, seq_len=512) for n in range(1, 9)})
for (name, n), s in runs.items():
    padded = sharded_parameter_bytes(shapes[name], n)
    assert s.parameters == padded and s.optimizer_states == 2 * padded  # the two rules, byte for byte
    assert abs(s.model_state_bytes / (16 * s.parameter_count / n) - 1) < (0.016 if name == "resnet18" else 0.0015)
for name in ("resnet18", "gpt2"):  # powers of two divide the channel and hidden sizes: closest to 16Ψ/N
    worst = max((n for n in range(1, 9)), key=lambda n: runs[name, n].model_state_bytes * n)
    assert worst == 7 and all(abs(runs[name, n].model_state_bytes * n / (16 * runs[name, n].parameter_count) - 1)
                              < (0.003 if name == "resnet18" else 0.0005) for n in (1, 2, 4, 8))
gpt_runs = {n: runs["gpt2", n] for n in range(1, 9)}
fig = plot_sharded_world_sizes(
    gpt_runs, {"16Ψ/N (ZeRO stage 3)": {n: 16 * P124 / n for n in gpt_runs},
               "DeepSpeed ZeRO-3 estimate": {n: deepspeed_zero3_gpu_bytes(P124, LARGEST, n) for n in gpt_runs}},
    title="GPT-2 124M under FSDP2: rank 0's memory without activations, against the world size")
fig

# %% [markdown]
# Look at the solid bars and the solid line: rank 0's sharded parameters, gradients and Adam states sit on 16Ψ/N, off only by the two rules (asserted byte for byte): within 0.05% for GPT-2 and 0.3% for ResNet18 (many small BatchNorm vectors, each rounded up to 512 bytes) when N is a power of two, which divides every channel and hidden size. At N = 7 a 64-channel convolution is cut into pieces of 10 rows: up to 1.5% for ResNet18, 0.15% for GPT-2.
#
# Now look at the hatched tops, the gathered parameters and their buffers at their most: they do not shrink with N, and from N = 4 on they are about as large as all the model states. The dashed DeepSpeed estimate bends away for a similar reason, a layer gathered whole. What is gathered, and when? GPT-2 at N = 4, over one step:

# %%
g4 = gpt_runs[4]
block, root = g4.units[0][1], dict(g4.units)["root"]
print(f"GPT-2's FSDP units: {len(g4.units) - 1} blocks of {fmt_bytes(4 * block)} in fp32, the root {fmt_bytes(4 * root)}")
both = max(unsharded + buffers for _, _, unsharded, buffers in g4.timeline)
assert abs(both - 8 * (root + block)) < 0.001 * 8 * (root + block) and both > gpt_runs[8].model_state_bytes
assert abs(g4.after_forward["unsharded_parameters"] - 4 * root) < 0.001 * 4 * root
assert abs(g4.largest["unsharded_parameters"] - 4 * (root + block)) < 0.001 * 4 * (root + block)
assert abs(g4.largest["all_gather_buffers"] - 4 * (root + block)) < 0.001 * 4 * (root + block)
assert abs(g4.largest["reduce_scatter_buffers"] - 4 * root) < 0.001 * 4 * root
r4 = runs["resnet18", 4]
r_units = [n for _, n in r4.units]   # layer1.0 ... layer4.1, then the root
assert abs(r4.largest["unsharded_parameters"] - 4 * (r_units[-1] + r_units[-2])) < 0.001 * r4.largest["unsharded_parameters"]
assert abs(r4.largest["all_gather_buffers"] - 4 * (r_units[-3] + r_units[-2])) < 0.001 * r4.largest["all_gather_buffers"]
reshard = {None: g4}
for option in (True, False):
    reshard[option] = sharded_step("gpt2", 4, batch_size=8, seq_len=512, reshard_after_forward=option)
assert reshard[True].after_forward["unsharded_parameters"] == 0
assert abs(reshard[False].after_forward["unsharded_parameters"] - 4 * P124) < 0.001 * 4 * P124
fig = plot_sharded_timeline([reshard[None], reshard[True], reshard[False]],
                            ["reshard_after_forward=None (the default)", "reshard_after_forward=True",
                             "reshard_after_forward=False"],
                            title="GPT-2 124M, N = 4: what FSDP2 holds gathered, over one training step")
turn = {option: [t[0] for t in reshard[option].timeline].index("backward") for option in (None, True)}
held = {option: sum(reshard[option].timeline[turn[option]][2:]) for option in (None, True)}  # gathered + buffers
regather = max(sum(t[2:]) for t in reshard[True].timeline[turn[True]:turn[True] + 20])
assert abs(held[None] - 4 * root) < 0.001 * 4 * root and held[True] == 0   # where the top two panels differ
assert regather > 1.9 * 4 * root           # the root gathered again for backward: its buffer and its parameters
arrow = dict(arrowstyle="->", lw=0.8)
fig.axes[0].annotate(f"the root stays gathered into backward: {held[None] / MiB:.0f} MiB",
                     xy=(turn[None], held[None] / MiB), xytext=(turn[None] + 150, 480), fontsize=8, arrowprops=arrow)
fig.axes[1].annotate(f"then gathered again for backward: {regather / MiB:.0f} MiB", xy=(turn[True] + 8, regather / MiB),
                     xytext=(turn[True] + 150, 540), fontsize=8, arrowprops=arrow)
fig.axes[1].annotate("the root resharded after forward: nothing gathered", xy=(turn[True], 0),
                     xytext=(turn[True] + 150, 400), fontsize=8, arrowprops=arrow)
fig

# %% [markdown]
# Look at the top panel, the default. Every transient is a unit's fp32 parameters, whole, whatever N:
#
# - **The root stays gathered** (the band from forward to the end of backward). The default, `reshard_after_forward=None`, frees each block's gathered parameters after its forward and gathers them again for backward, but keeps the root's, which backward needs first (the head). The root holds the token embedding: 150 MiB.
# - **The largest unit's all-gather** (the spike at the start): the root, GPT-2's largest unit (150 MiB against 27 MiB per block), needs a flat buffer *and* the parameters copied out of it: 8 bytes per parameter of the root. DeepSpeed's "4 × largest layer" counts something else: 16-bit parameters gathered plus 16-bit gradients computed, for the largest *module*.
# - **Prefetching** (the teeth on the band): to overlap communication with computation, FSDP2 keeps the previous unit's buffer in forward until the next gather has started, and in backward gathers the next unit while the current one computes: two units' buffers at once. At the start of forward the root and first block are each there twice: more than rank 0's model states at N = 8 (asserted).
# - **Reduce-scatter** (not drawn): a unit's gradients are copied into one flat buffer and reduce-scattered from it: 150 MiB again for the root.
#
# ResNet18 follows the same rules (asserted): its root stays gathered, its last residual block is its largest unit, two consecutive blocks' buffers coexist. Units of similar size keep the transient to a few units, whatever N; GPT-2's embedding, a third of the model, prevents that.
#
# The other two panels set `reshard_after_forward`, trading memory for communication. `True` reshards the root too: the band drops to zero between forward and backward, and backward starts by gathering the root again, its buffer and its parameters (the arrows mark where the top two panels differ; elsewhere they are alike). `False` keeps every unit gathered from its forward to its backward, so by the end of forward the whole model is there in fp32, 474.7 MiB, on every rank; in exchange the backward all-gathers are gone (`fully_shard`'s docstring): stage 2's traffic, 2Ψ, not stage 3's 3Ψ (section 1). (An integer, e.g. the GPUs per node, reshards to that smaller group, keeping the backward gather inside a node.)
#
# ## 4. What sharding does not shard, and the other remedies
#
# Each rank runs forward and backward on its own slice of the batch, whole: its activations are one GPU's at that batch size, whatever N:

# %%
acts = {n: gpt_runs[n].after_forward["other"] for n in range(1, 9)}
assert len(set(acts.values())) == 1
peak_states = {n: gpt_runs[n].model_state_bytes / gpt_runs[n].peak_bytes for n in (1, 8)}
print(f"GPT-2, batch 8 x 512 per rank: activations at the end of forward {fmt_bytes(acts[1])} at every N; "
      f"model states {peak_states[1]:.0%} of the peak at N = 1, {peak_states[8]:.0%} at N = 8")
assert (round(peak_states[1], 2), round(peak_states[8], 2)) == (0.3, 0.05)

# %% [markdown]
# The activations (with the logits, lesson 05b, section 1) do not move: once the model states are divided, the activations are most of the peak, and lesson 04's techniques combine with FSDP2. The options, each measured on rank 0 (GPT-2, batch 8 × 512 per rank, N = 4 unless named):
#
# - **`reshard_after_forward=True`** (section 3).
# - **The embeddings and the head as their own unit**, `fully_shard([model.embeddings, model.head])` before the root's `fully_shard`: resharded after forward like any block. GPT-2's head shares the embedding's weight, so the two must be one unit; Llama's untied head can be its own.
# - **Deeper prefetching**, `set_modules_to_forward_prefetch` and `set_modules_to_backward_prefetch` with the next two units. These only prefetch *more* than the default's one unit in backward (`_fsdp_state.py`, `_pre_backward`); FSDP1's `limit_all_gathers` has no FSDP2 counterpart.
# - **HSDP**, a 2-dimensional mesh `init_device_mesh("cuda", (nodes, gpus_per_node))`: sharded within a node, replicated across nodes. Measured at N = 8 as 2 × 4.
# - **Activation checkpointing** of every unit (`torch.utils.checkpoint`, non-reentrant, inside the unit's `fully_shard`, so the recomputation finds the parameters already gathered).
# - **`MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)`**: bfloat16 gathers and compute, gradients reduce-scattered in fp32 into fp32 shards.

# %%
own_unit = lambda m: [[m.embeddings, m.head], *m.blocks]   # noqa: E731  (the tied embedding and head: one unit)
variants = {
    "FSDP2, N = 4 (defaults)": g4,
    "reshard_after_forward=True": reshard[True],
    "embeddings + head: one unit": sharded_step("gpt2", 4, batch_size=8, seq_len=512, units=own_unit),
    "... and prefetch 2 units": sharded_step("gpt2", 4, batch_size=8, seq_len=512, units=own_unit, prefetch=2),
    "HSDP, N = 8 as 2 x 4": sharded_step("gpt2", 8, batch_size=8, seq_len=512, replicas=2),
    "checkpointing": sharded_step("gpt2", 4, batch_size=8, seq_len=512, checkpoint=True),
    "MixedPrecisionPolicy(bf16)": sharded_step("gpt2", 4, batch_size=8, seq_len=512, mixed_precision=True),
}

# %%
v = variants
own, deeper, hsdp = v["embeddings + head: one unit"], v["... and prefetch 2 units"], v["HSDP, N = 8 as 2 x 4"]
mp, ckpt = v["MixedPrecisionPolicy(bf16)"], v["checkpointing"]
assert v["reshard_after_forward=True"].peak_bytes < g4.peak_bytes < reshard[False].peak_bytes
assert own.after_forward["unsharded_parameters"] == 0 and own.peak_bytes == v["reshard_after_forward=True"].peak_bytes
extra = deeper.largest["all_gather_buffers"] - own.largest["all_gather_buffers"]
assert abs(extra - 4 * block) < 0.001 * 4 * block and deeper.peak_bytes == own.peak_bytes  # one block more, not at the peak
assert hsdp.model_state_bytes == g4.model_state_bytes                  # sharded over 4, as FSDP on 4 ranks
assert ckpt.gradients == g4.gradients and ckpt.after_forward["other"] < g4.after_forward["other"] / 3
assert mp.model_state_bytes == g4.model_state_bytes
assert abs(mp.largest["unsharded_parameters"] / g4.largest["unsharded_parameters"] - 0.5) < 0.001
assert mp.peak_bytes < ckpt.peak_bytes < g4.peak_bytes
print(f"against the defaults' peak: root resharded {fmt_bytes(own.peak_bytes - g4.peak_bytes, sign=True)}, "
      f"checkpointing {fmt_bytes(ckpt.peak_bytes - g4.peak_bytes, sign=True)}, "
      f"bf16 policy {fmt_bytes(mp.peak_bytes - g4.peak_bytes, sign=True)}")
fig = plot_sharded_peaks(list(variants.values()), list(variants),
                         title="GPT-2 124M, batch 8 x 512 per rank: rank 0 at its peak")
fig

# %% [markdown]
# Look at the green ends of the bars first: only checkpointing (which keeps each block's input: under a third of the activations) and the bfloat16 policy (which halves most activations) shorten them, by gigabytes. The remedies for FSDP's own transients shrink the hatched parts, on a smaller scale:
#
# - resharding the root, or giving the embeddings and head their own unit, saves the root's 150 MiB at the peak (the same both ways: the peak comes at the start of backward, before the head is gathered again);
# - prefetching two units holds one more block's buffer (27 MiB) in forward, away from this peak (it would count on a model whose peak falls in forward);
# - HSDP on 8 GPUs keeps exactly the memory of FSDP on 4, with collectives inside a node (plus an all-reduce of the gradient shards across nodes);
# - the bfloat16 policy halves the gathered parameters but not the model states: FSDP2 keeps fp32 parameter and gradient shards beside Adam's states (4 + 4 + 8 over N), and 16-bit parameters only whole, for the unit being computed. The paper's 2 + 2 + 12 cuts the same 16 bytes differently.
#
# **`CPUOffloadPolicy`** (`fully_shard(..., offload_policy=CPUOffloadPolicy())`) cannot be measured here, where the simulation counts one device. It keeps the sharded parameters, gradients and optimizer states in (pinned) host memory, copies shards to the GPU for each all-gather and gradient shards back after each reduce-scatter, and runs the optimizer step on the CPU. The GPU keeps the hatched and green parts of the bars, not the solid ones; the price is time.
#
# ## 5. The same code on real GPUs: `torchrun`
#
# On a machine with 4 GPUs, `torchrun --standalone --nproc-per-node 4 train_fsdp.py` starts the script below once per GPU, setting `RANK`, `LOCAL_RANK` and `WORLD_SIZE`, which `init_process_group("nccl")` reads. (Not run here: no GPU.)
#
# ```python
# # train_fsdp.py
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
# - The collectives move data over NVLink or the network (NCCL) on their own CUDA streams, overlapping with computation. FSDP2 allocates its buffers on those streams (`_fsdp_collectives.py`), and the caching allocator reuses freed memory only on the stream that allocated it (the `Tensor.record_stream` docstring), so `memory_reserved()` (lesson 06) can stand further above `memory_allocated()` than on one stream. NCCL's own buffers, like the CUDA context, sit outside the caching allocator: `nvidia-smi` sees them, `memory_allocated()` does not.
# - Every rank prints its own peak; rank 0's is the one to plan for (section 2).
# - With `--nproc-per-node 1` the script runs in a world of one, where FSDP2 shards nothing but still gathers (copies) each unit: the N = 1 bar of section 3.
#
# ## Exercises
#
# **Exercise 1: how many GPUs for the paper's 7.5B model?** How many A100 40 GB cards does it need before its model states fit (`fits`, with lesson 05b's 1 GiB of CUDA overhead) under ZeRO stages 1, 2 and 3, DeepSpeed's ZeRO-2 estimate as coded and as documented, and its ZeRO-3 estimate (say the largest layer has 400 million parameters)?

# %%
# Your code here: zero_model_state_bytes(PAPER_PSI, n, stage), deepspeed_zero2_gpu_bytes(...), 4 * PAPER_PSI + 16 * PAPER_PSI // n,
# deepspeed_zero3_gpu_bytes(...), fits(..., GPU_CARDS["A100 40 GB"])

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# card = GPU_CARDS["A100 40 GB"]
# def fewest(per_rank):
#     return min((n for n in range(1, 65) if fits(per_rank(n), card)), default=None)
# need = {f"paper, stage {stage}": fewest(lambda n, stage=stage: zero_model_state_bytes(PAPER_PSI, n, stage))
#         for stage in (1, 2, 3)}
# need["DeepSpeed ZeRO-2, code"] = fewest(lambda n: deepspeed_zero2_gpu_bytes(PAPER_PSI, n))
# need["DeepSpeed ZeRO-2, docs"] = fewest(lambda n: 4 * PAPER_PSI + 16 * PAPER_PSI // n)
# need["DeepSpeed ZeRO-3"] = fewest(lambda n: deepspeed_zero3_gpu_bytes(PAPER_PSI, 400_000_000, n))
# print(need)
# assert need == {"paper, stage 1": 8, "paper, stage 2": 4, "paper, stage 3": 3,
#                 "DeepSpeed ZeRO-2, code": 6, "DeepSpeed ZeRO-2, docs": 11, "DeepSpeed ZeRO-3": 4}
# ```
#
# Stage 3 needs 3 cards (40 GB each of the 120), stage 2 needs 4 and stage 1 needs 8, because their unsharded 16-bit parameters (15 GB) and gradients (15 GB more in stage 1) sit on every card. DeepSpeed's code asks for more: its 18 bytes per parameter (an fp32 copy of the gradients) make 6 cards for ZeRO-2, and for ZeRO-3 the largest layer gathered whole (1.6 GB) pushes 3 cards to 4. Its documentation's ZeRO-2 formula, older than the code, counts 4 bytes for each unsharded parameter where a 16-bit one takes 2, and asks for 11 cards: check an estimate against the code that computes it. These are model states only: the activations, which sharding does not divide, decide how many more cards (or how much checkpointing) the batch needs.
# </details>
#
# **Exercise 2: SGD instead of Adam.** Predict rank 0's model states for ResNet18 with SGD with momentum (lesson 05a, section 1: 4 + 4 + 4 bytes per parameter) on 4 ranks, then measure them with `sharded_step(..., optimizer="sgd-momentum")`. Do the transient all-gather buffers change?

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
# - ZeRO shards optimizer states, then gradients, then parameters across N ranks: per rank 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N bytes. Stage 3 communicates 1.5 times as much: each unit is gathered for forward and again for backward.
# - DeepSpeed's code counts 18 bytes per sharded parameter (ZeRO-2: 2Ψ + 18Ψ/N; its documentation still says 4Ψ + 16Ψ/N); ZeRO-3 adds 4 bytes per parameter of the largest layer (16-bit parameters gathered, 16-bit gradients computed).
# - FSDP2 (`fully_shard`) is stage 3: rank 0's model states are 16Ψ/N plus padding of dim 0 and 512-byte blocks, byte for byte; only Adam's states are smaller on the last ranks.
# - Sharding does not shrink the gathered units (the root, the largest unit twice, two units' buffers for prefetching), the reduce-scatter buffers, or the activations.
# - Remedies: `reshard_after_forward=True` or the embeddings and head as their own unit (the root's 150 MiB); deeper prefetch; HSDP; `CPUOffloadPolicy`; for the activations, checkpointing and `MixedPrecisionPolicy` (fp32 shards: 4 + 4 + 8, not 2 + 2 + 12). `False` keeps the whole model gathered, for stage 2's traffic. On real GPUs, NCCL's buffers and FSDP2's streams come on top.
#
# ## Further reading
#
# - S. Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054, sections 5 and 7, figure 1.
# - PyTorch documentation: `torch.distributed.fsdp.fully_shard` (FSDP2), and the tutorial *Getting Started with Fully Sharded Data Parallel (FSDP2)*; `torchrun` (Elastic Launch).
# - DeepSpeed documentation, *Memory Requirements* (the ZeRO-2 and ZeRO-3 estimators), and their source, `deepspeed/runtime/zero/stage_1_and_2.py` and `stage3.py`.
# - Y. Zhao et al., *PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel*, VLDB 2023, arXiv:2304.11277.
# - Hugging Face, *The Ultra-Scale Playbook* (2025), its chapters on data parallelism and ZeRO.
