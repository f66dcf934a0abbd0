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
# # 06 · The caching allocator: allocated, reserved, and what a step keeps
#
# **Questions**
# - Why is `torch.cuda.memory_reserved()` larger than `memory_allocated()`, and `nvidia-smi` larger still?
# - Why does the memory curve of a training loop climb during the first step and then stay up, instead of rising and falling with every step? What do `del` and `torch.cuda.empty_cache()` change?
#
# **Objectives**
# - Apply the rules of PyTorch's CUDA caching allocator (rounding, pools, segments, best fit, splitting, merging) to a sequence of tensors, and check the result with a model of the allocator.
# - Say what `nvidia-smi` adds to reserved memory (the CUDA context), what goes through the allocator without being a tensor of your code (cuBLAS workspaces), and what no simulation sees.
# - Replay a whole training step through that model: peak allocated, peak reserved and the segments asked for, for ResNet18 and GPT-2.
# - Measure what `del` and `empty_cache()` change in a training loop, and what emptying the cache costs.
#
# **Time:** about 50 minutes alone: 23 of reading, 10 of code, 2 for the figures, 1 to run all, 15 for the two exercises. **GPU:** not needed (the allocator is simulated; lesson 06a, section 3, shows a real one beside it).
#
# Lessons 01 (allocated versus reserved, the out-of-memory message) and 03 (one step, event by event) come first.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import torch

from helpers import CUDA_CONTEXT_BYTES, CUDA_OVERHEAD_BYTES, MiB, fmt_bytes, profile_step
from helpers.gpus import CACHE_ALLOWANCE_BYTES, COMPUTE_CAPABILITY, cublas_workspace_bytes, unseen_lines
from helpers.allocator import CachingAllocator, replay
from helpers.teaching.plots import plot_reserved, plot_reserved_bars
from helpers.teaching.reference import load_reference

_ = torch.manual_seed(0)

# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. Three numbers: allocated, reserved, and what `nvidia-smi` shows
#
# Asking the GPU's driver for memory (`cudaMalloc`) and giving it back (`cudaFree`) is slow, and `cudaFree` waits for the whole device to finish its work. So PyTorch asks for memory in large pieces, **segments**, cuts them into **blocks** for tensors, and when a tensor dies it keeps the block in a cache for the next tensor instead of giving it back. That is the **caching allocator** (`c10/cuda/CUDACachingAllocator.cpp`), and it is why a GPU has three numbers:
#
# | number | what it counts | how to read it |
# |---|---|---|
# | **allocated** | bytes in blocks that hold live tensors | `torch.cuda.memory_allocated()` |
# | **reserved** | bytes of all segments, in use or cached | `torch.cuda.memory_reserved()` |
# | **used on the GPU** | reserved, plus the CUDA context and anything outside PyTorch's allocator | `nvidia-smi`, `torch.cuda.mem_get_info()` |
#
# `helpers.allocator.CachingAllocator` is a model of that allocator, small enough to read: each of its rules is a function of the C++ file, named in its docstring. The rules that decide sizes:
#
# 1. every request is rounded up to a multiple of **512 bytes**;
# 2. requests of at most **1 MiB** go to a *small pool*, whose segments are **2 MiB**;
# 3. a larger request that no cached block can take opens a segment of **20 MiB** if it is under 10 MiB, else of its own size **rounded up to 2 MiB**;
# 4. a block larger than the request is **split** if the rest is worth keeping: in the large pool only if the rest is **more than 1 MiB**. An unsplit rest stays inside the tensor's block, and `memory_allocated()` counts it.
#
# Three tensors on an empty GPU: 3 MiB, 49 MiB and 100 bytes.

# %%
gpu = CachingAllocator()
x = gpu.malloc(3 * MiB)
w = gpu.malloc(49 * MiB)
b = gpu.malloc(100)
print(gpu.describe())
print(f"tensors: {fmt_bytes(gpu.requested)}; allocated: {fmt_bytes(gpu.allocated)}; reserved: {fmt_bytes(gpu.reserved)}")
assert (gpu.requested, gpu.allocated, gpu.reserved) == (52 * MiB + 512, 53 * MiB + 512, 72 * MiB)

# %% [markdown]
# The 3 MiB tensor opened a 20 MiB segment and took 3 MiB of it; the rest is a free block, cached for later requests between 1 and 17 MiB. The 49 MiB tensor got a 50 MiB segment, and the 1 MiB rest was not split off: `memory_allocated()` counts 50 MiB for it. The 100 bytes took 512 bytes of a 2 MiB small segment. So a GPU would report 53 MiB allocated and 72 MiB reserved for 52 MiB of tensors.
#
# Now `del x`, and then `torch.cuda.empty_cache()`:

# %%
gpu.free(x)
print(f"after del x:       allocated {fmt_bytes(gpu.allocated)}, reserved {fmt_bytes(gpu.reserved)}")
released = gpu.empty_cache()
print(f"after empty_cache: allocated {fmt_bytes(gpu.allocated)}, reserved {fmt_bytes(gpu.reserved)} "
      f"({fmt_bytes(released)} given back)")
print(gpu.describe())
assert gpu.allocated == 50 * MiB + 512 and released == 20 * MiB and gpu.reserved == 52 * MiB

# %% [markdown]
# `del` lowered *allocated* and left *reserved* alone: the 20 MiB segment stayed, cached. `empty_cache()` gave back every segment with nothing allocated in it, and only those: a segment with one live block, however small, stays whole.
#
# **What `nvidia-smi` adds.** A process that uses CUDA also holds memory outside PyTorch's allocator, and the simulation cannot measure it: the **CUDA context** (the driver's state and the kernels loaded so far). Published measurements are a few hundred MiB, and yours will differ with the GPU, the driver and the CUDA version. The pull request that made lazy kernel loading PyTorch's default (pytorch/pytorch #86509, PyTorch 1.13) measured the GPU memory in use after creating one tensor of 20 × 16 × 50 × 100 `float32` values: 287,047,680 bytes, and 666,632,192 bytes with eager loading. Both figures include the segment that the allocator reserved for that tensor, and its rules say how large that segment is:

# %%
probe = CachingAllocator()
probe.malloc(20 * 16 * 50 * 100 * 4)  # the pull request's tensor: 6.1 MiB, so a 20 MiB segment (rule 3)
measured = {"lazy loading (the default)": 287_047_680, "eager loading": 666_632_192}
for loading, in_use in measured.items():
    print(f"{loading}: {fmt_bytes(in_use)} in use = {fmt_bytes(probe.reserved)} segment "
          f"+ {fmt_bytes(in_use - probe.reserved)} CUDA context")
assert probe.reserved == 20 * MiB and measured["lazy loading (the default)"] - probe.reserved == 266_076_160

# %% [markdown]
# So the context itself was about 254 MiB there. Later reports give "around 400 MB" (381 MiB) with CUDA 11.7 or later (pytorch/pytorch #109888) and 426 MiB in `nvidia-smi` for PyTorch 2.10 with CUDA 13.0 (unslothai/unsloth-zoo #1053).
#
# **cuBLAS workspaces** are different: PyTorch allocates them *through* the caching allocator, one per cuBLAS handle and stream, at the first matrix multiplication, and keeps them. Handles belong to threads, and a training step uses two: the forward pass runs on your Python thread, the backward pass on autograd's own thread for the GPU (a forward pass under `torch.no_grad()` uses only the first). In PyTorch 2.14.1 a workspace is 32 MiB on GPUs of compute capability 9, 10 and 12 (Hopper, such as the H100 the widgets pick by default and the H200 this course was recorded on, and Blackwell) and 8,519,680 bytes (`CUBLAS_WORKSPACE_CONFIG=:4096:2:16:8`) on older ones (`parseChosenWorkspaceSize` in `aten/src/ATen/cuda/CublasHandlePool.cpp`; setting `CUBLAS_WORKSPACE_CONFIG` yourself, each `:SIZE:COUNT` pair adds SIZE KiB × COUNT). cuBLASLt, the library behind many of PyTorch's matrix multiplications, shares that workspace by default in 2.14.1: it works in the cuBLAS workspace of the same handle and stream and allocates nothing of its own, unless `TORCH_CUBLASLT_UNIFIED_WORKSPACE=0` is set. Older releases gave cuBLASLt separate workspaces, so sizes quoted for them no longer apply. `helpers.gpus` knows each card's compute capability and applies that rule:

# %%
workspace = {card: cublas_workspace_bytes(COMPUTE_CAPABILITY[card]) for card in ("V100 16 GB", "H100 80 GB")}
for card, size in workspace.items():
    major, minor = COMPUTE_CAPABILITY[card]
    print(f"{card} (compute capability {major}.{minor}): one cuBLAS workspace {fmt_bytes(size)}, "
          f"a training step's two (forward and backward threads) {fmt_bytes(2 * size)}")
assert workspace["H100 80 GB"] == 32 * MiB and workspace["V100 16 GB"] == 4096 * 1024 * 2 + 16 * 1024 * 8 == 8_519_680

# %% [markdown]
# On a GPU these 64 MiB (on an H100) are part of `memory_allocated()` and `memory_reserved()`, but no tensor of your code holds them, so the traced peak leaves them out. Every "does it fit?" of the course (the widgets, `python -m helpers profile`) adds them for the card you pick, as a line of their own, beside one assumed overhead model: a CUDA context, and, when the step is judged by its *allocated* peak, an allowance for the allocator's cache. Judged by the simulated *reserved* peak (lesson 06a, section 4), the allocator model replaces the allowance, and the workspaces are added beside the replayed peak.
#
# What stays unseen: **cuDNN workspaces**, the scratch memory of a convolution, whose size depends on the algorithm cuDNN picks. With the default `torch.backends.cudnn.benchmark = False`, PyTorch takes the algorithms in the order cuDNN's heuristics rank them and runs the first whose workspace it can allocate, trying the next when that allocation fails (`run_single_conv` and `try_configs` in `aten/src/ATen/native/cudnn/Conv_v8.cpp`): the workspace is what the heuristics pick for that GPU, cuDNN version, data type and shape, and free memory matters only when it runs short. With `benchmark = True`, PyTorch first times every algorithm whose workspace fits the larger of the GPU's free memory and the largest free block in the allocator's cache (`get_available_workspace` in `Conv_v8.cpp`, `getMaxWorkspaceSize` in `Conv_v7.cpp`, both asking `cacheInfo` in `CUDACachingAllocator.cpp`, which starts from the free bytes that `cudaMemGetInfo` reports), and that search can take far more than the chosen algorithm. Either way no formula gives a workspace: it is measured on a GPU or not known, and the verdict of a step with convolutions says that its margin does not cover it. Neither are the copies a kernel makes of an operand it cannot read in place: cuBLAS needs each matrix dense along one of its two dimensions, so a gradient expanded from a scalar (the backward of a `.sum()` loss has strides of 0) is copied to a full matrix for as long as the multiplication runs (`prepare_matrix_for_cublas` in `ATen/native/cuda/cuBlasCommonArgs.h`, a header the pinned wheel ships). NCCL's buffers (several GPUs, lesson 07) are not modelled either, and the CUDA context is assumed, not measured:

# %%
for card in ("V100 16 GB", "H100 80 GB"):
    lines = unseen_lines(card, cublas_handles=2, convolutions=True)  # a training step of a convolutional network
    print(f"{card}: " + "; ".join(f"{name} {'not modelled' if n is None else fmt_bytes(n)}" for name, n in lines.items()))
print(f"assumed CUDA context: {fmt_bytes(CUDA_CONTEXT_BYTES)}; "
      f"with the allocator's cache allowance: {fmt_bytes(CUDA_OVERHEAD_BYTES)}")
assert unseen_lines("H100 80 GB", 2)["cuBLAS workspaces"] == 64 * MiB
assert CUDA_OVERHEAD_BYTES == CUDA_CONTEXT_BYTES + CACHE_ALLOWANCE_BYTES

# %% [markdown]
# ## 2. One training step, replayed through the allocator
#
# The engine records every storage a step allocates and frees, in order: the *allocation log* (`StepProfile.allocation_log`). Replaying it through the allocator model gives what a GPU's allocator would do with the same tensors. `steady_state=True` records two steps: a first one, and the traced one after it (lesson 01).

# %%
step = profile_step("resnet18", 128, device="simulated", steady_state=True)
run = replay(step.allocation_log)
second = step.events[0].log_position  # where the traced (second) step starts in the log
print(f"ResNet18, batch 128, SGD with momentum: {len(step.allocation_log)} allocations and frees")
print(f"  tensors at the peak (the engine):         {fmt_bytes(step.peak_allocated_bytes)}")
print(f"  peak allocated, unsplit rests included:   {fmt_bytes(run.peak_allocated)}")
print(f"  peak reserved:                            {fmt_bytes(run.peak_reserved)}")
print(f"  segments asked from the driver: {run.segments_opened(0, second)} in the first step, "
      f"{run.segments_opened(second)} in the second")
print(f"  at the end: {fmt_bytes(run.allocated[-1])} allocated, {fmt_bytes(run.reserved[-1])} reserved")
print(f"  recorded on a GPU for this course: {'not yet' if load_reference() is None else 'yes, see lesson 06a, section 3'}")
assert max(run.requested) == step.peak_allocated_bytes
assert run.peak_allocated - step.peak_allocated_bytes == 10_928_128  # 10.4 MiB of unsplit rests
assert run.segments_opened(0, second) == 62 and run.segments_opened(second) == 0
assert run.reserved[second - 1] == run.reserved[-1] == run.peak_reserved

# %% [markdown]
# The first step asked the driver for 62 segments; the second asked for none: every tensor of the second step found a cached block. In this replay, reserved memory climbs during the first step and then stays flat at its peak, even between steps, when only the model states are allocated. These are the allocator model's figures, not a measurement: the cell's last line says whether a GPU has recorded this step for the course (lesson 06a, section 3, shows the record beside the model). On a GPU, `torch.cuda.memory_reserved()` follows the same rules, and `nvidia-smi` shows it plus the CUDA context. It is not a leak, and it is not there "to avoid fragmentation", as a note among this course's sources claims (*Why the memory of GPU increase dramatically while training the deep learning model?*, see References): it is the cache, kept because handing it back and asking for it again at every step would be slow.

# %%
expandable = replay(step.allocation_log, settings="expandable_segments:True")
plot_reserved([run, expandable], ["default", "expandable_segments:True"], marks={"second step": second},
              title="ResNet18, batch 128: allocated and reserved over two steps (allocator model)")

# %% [markdown]
# Look at the dashed blue line: with the default settings, reserved memory climbs through the first step and stays at its peak through the second, while allocated memory (solid) rises and falls with each step. The vermillion lines are the same log with `expandable_segments:True` (lesson 06a, section 1): reserved climbs only to just above allocated's peak and then stays there, flat, while allocated falls and rises again: the pages it mapped stay mapped until `empty_cache()`, or until an allocation fails and the allocator frees its cache to retry.
#
# Why 1.3 GiB more reserved than allocated at the peak with the defaults? Freed blocks are reused by tensors of other sizes: a block is split, a smaller tensor takes part of it, and its rest can only serve smaller requests. When a large request finds no block large enough, a new segment is opened even though the free blocks add up to more.
#
# The same replay for lesson 04's configurations and for GPT-2 124M (sequence 1024, batch 8, Adam, float32):

# %%
configs = {"ResNet18 b128": ("resnet18", 128, {}),
           "ResNet18 b128 AMP": ("resnet18", 128, {"amp": True}),
           "ResNet18 b128 checkpoint 4": ("resnet18", 128, {"checkpoint": 4}),
           "GPT-2 124M b8 Adam": ("gpt2", 8, {"seq_len": 1024, "optimizer": "adam"})}
labels, tensors, default, expandable = [], [], [], []
for label, (model, batch, options) in configs.items():
    p = step if label == "ResNet18 b128" else profile_step(model, batch, device="simulated", steady_state=True,
                                                            **options)
    labels.append(label)
    tensors.append(p.peak_allocated_bytes)
    default.append(replay(p.allocation_log))
    expandable.append(replay(p.allocation_log, settings="expandable_segments:True"))
ratios = [round(r.peak_reserved / r.peak_allocated, 2) for r in default]
assert all(t <= d.peak_allocated <= d.peak_reserved and t <= e.peak_reserved
           for t, d, e in zip(tensors, default, expandable))
assert ratios == [1.47, 1.28, 1.60, 1.06]
assert round((run.peak_reserved - run.peak_allocated) / 2**30, 1) == 1.3
assert default[0].peak_reserved == 4152 * MiB and default[3].peak_reserved == 11480 * MiB
plot_reserved_bars(labels, tensors, default, expandable,
                   title="Peak allocated and reserved per step (allocator model, simulated)")

# %% [markdown]
# Look at the dark blue bars and the ratios beside them: with the default settings, peak reserved is 6% (GPT-2) to 60% (ResNet18 with checkpointing) above peak allocated, while the grey and sky-blue bars, the tensors and what the allocator counts for them, hardly differ. With `expandable_segments:True` (vermillion) peak reserved stays close to peak allocated. The ratio depends on the sizes and the order of the tensors, not on a rule of thumb: a fixed "add 1 GiB" (lessons 01 to 05b) is too much for a small step and too little for a large one. These are the allocator model's figures, replayed from simulated steps: they hold for the tensors the engine sees, in the order it sees them, and no GPU has checked them unless lesson 06a, section 3, shows a record. A GPU adds cuDNN and cuBLAS workspaces, which are allocated through the same allocator and can change its choices.
#
# ## 3. What `del` and `empty_cache()` change, and what they cost
#
# After the second step, only the model states are alive. Empty the cache there, and ask what the next step costs:

# %%
after_two = replay(step.allocation_log)
released = after_two.allocator.empty_cache()
print(f"after step 2: {fmt_bytes(after_two.allocated[-1])} allocated, {fmt_bytes(after_two.reserved[-1])} reserved")
print(f"after empty_cache(): {fmt_bytes(after_two.allocator.reserved)} reserved "
      f"({fmt_bytes(released)} given back, {after_two.allocator.num_device_free} segments)")

end = len(step.allocation_log)
log_three = list(step.allocation_log) + list(step.allocation_log[second:end])  # a third step like the second
kept = replay(log_three)
emptied = replay(log_three, empty_cache_at=[end])  # torch.cuda.empty_cache() between steps 2 and 3
print(f"step 3: {kept.segments_opened(end)} segments asked for with the cache, {emptied.segments_opened(end)} "
      f"after empty_cache(); peak reserved {fmt_bytes(max(kept.reserved[end:]))} and "
      f"{fmt_bytes(max(emptied.reserved[end:]))}")
assert after_two.allocator.reserved < 0.1 * after_two.reserved[-1]
assert kept.segments_opened(end) == 0 and emptied.segments_opened(end) > 40
assert max(emptied.reserved[end:]) >= max(kept.reserved[end:]) == run.peak_reserved  # the peak comes back


# %% [markdown]
# `empty_cache()` gives the cache back, so `nvidia-smi` shows less for a moment, and the next step asks for it all again: dozens of `cudaMalloc` calls, each of them slow, for a peak as high as before (here even a little higher, because the segments are laid out anew around the ones that stayed). Call it when memory must go to *another* process or library, not inside a training loop. `del` of a tensor never lowers *reserved*; it lowers *allocated*, which is what makes room for the next tensors of your own process.
#
# ## Exercises
#
# **Exercise 1: predict, then check.** On an empty GPU, tensors of 512 KiB, 512 KiB, 5 MiB and 30 MiB are allocated, in that order. Predict *allocated* and *reserved*, then the same after the 5 MiB one is freed and a 12 MiB one is allocated. Check with `CachingAllocator`.

# %%
# Your code here: gpu = CachingAllocator(); gpu.malloc(...); print(gpu.describe())

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# gpu = CachingAllocator()
# a, b, c, d = (gpu.malloc(n) for n in (512 * 1024, 512 * 1024, 5 * MiB, 30 * MiB))
# print(gpu.describe())
# assert (gpu.allocated, gpu.reserved) == (36 * MiB, 52 * MiB)
# gpu.free(c)
# e = gpu.malloc(12 * MiB)
# print(gpu.describe())
# assert (gpu.allocated, gpu.reserved) == (43 * MiB, 52 * MiB)
# ```
#
# The two small tensors share one 2 MiB small segment (1 MiB allocated). 5 MiB is under 10 MiB, so it opens a 20 MiB segment and takes 5 MiB of it; 30 MiB finds no free block that large and opens a segment of exactly 30 MiB: 36 MiB allocated, 52 MiB reserved. Freeing the 5 MiB block merges it with the 15 MiB rest into one free 20 MiB block. The 12 MiB tensor takes that block (the smallest free block of the large pool that fits), which is split: the 8 MiB rest is more than 1 MiB. 43 MiB allocated, and reserved does not move.
# </details>
#
# **Exercise 2: `empty_cache()` after every step.** Some training scripts call `torch.cuda.empty_cache()` at the end of each step, to "free memory". Replay section 3's three steps (`log_three`) with the cache emptied after the first step and after the second (`empty_cache_at=[second, end]`). How many segments does each step ask the driver for, how many are given back in all, and how high does reserved memory go, against `kept`, the same three steps with the cache kept?

# %%
# Your code here: every = replay(log_three, empty_cache_at=[...]); every.segments_opened(...); every.allocator.num_device_free

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# every = replay(log_three, empty_cache_at=[second, end])
# opened = [every.segments_opened(0, second), every.segments_opened(second, end), every.segments_opened(end)]
# print(f"segments asked for in steps 1, 2 and 3: {opened}; given back: {every.allocator.num_device_free}")
# print(f"peak reserved {fmt_bytes(every.peak_reserved)}; with the cache kept {fmt_bytes(kept.peak_reserved)}")
# assert opened == [62, 53, 53] and kept.segments_opened(second) == 0
# assert every.allocator.num_device_alloc - kept.allocator.num_device_alloc == 106 and every.allocator.num_device_free == 102
# assert every.peak_reserved == 4208 * MiB and kept.peak_reserved == run.peak_reserved == 4152 * MiB
# ```
#
# Steps 2 and 3 each ask the driver for 53 segments again, 106 `cudaMalloc` calls where the kept cache needed none, and the two `empty_cache()` calls give back 102 segments, each `cudaFree` waiting for the GPU to finish its work. Nothing is saved at the peak: reserved memory reaches 4208 MiB, 56 MiB *more* than the 4152 MiB of the kept cache, because the segments are laid out anew around those that the model states pin. Between steps `nvidia-smi` shows less, which is all `empty_cache()` buys: worth it only when that memory goes to another process.
# </details>
#
# ## Key points
#
# - `memory_allocated()` counts the blocks of live tensors (each request rounded up to 512 bytes, plus unsplit rests of up to 1 MiB in the large pool); `memory_reserved()` counts whole segments, in use or cached; `nvidia-smi` adds the CUDA context (a few hundred MiB) and anything outside PyTorch's allocator. cuBLAS workspaces (32 MiB per handle and stream on an H100, two in a training step) go through the allocator; cuDNN's workspaces and NCCL's buffers are not modelled.
# - The caching allocator keeps freed blocks because `cudaMalloc` and `cudaFree` are slow and synchronise: memory climbs during the first step and stays up. It is the cache, not a leak.
# - Reserved memory is a function of the sizes *and order* of a step's tensors: 6% to 60% above peak allocated for the steps replayed here. Replay the step instead of adding a fixed margin.
# - `del` lowers allocated, never reserved; `empty_cache()` gives back only segments with nothing alive in them, and the next step asks for them again, for a peak as high as before.
#
# ## References
#
# Cited in this lesson by name:
#
# - PyTorch source, `c10/cuda/CUDACachingAllocator.cpp` (the allocator's rules) and `aten/src/ATen/cuda/CublasHandlePool.cpp` (cuBLAS and cuBLASLt workspaces), version 2.14.1; `aten/src/ATen/native/cudnn/Conv_v8.cpp` and `Conv_v7.cpp` (how cuDNN's workspace is chosen); `ATen/native/cuda/cuBlasCommonArgs.h` (operand copies): https://github.com/pytorch/pytorch
# - PyTorch documentation, *CUDA semantics: memory management* (`memory_allocated`, `memory_reserved`, `empty_cache`): https://pytorch.org/docs/stable/notes/cuda.html#memory-management
# - pytorch/pytorch pull request #86509, *Sets CUDA_MODULE_LOADING to LAZY when not set by the user* (the context measurements of section 1); pytorch/pytorch issue #109888; unslothai/unsloth-zoo pull request #1053.
# - HSF Training, *Machine Learning on GPU*, episode *Memory considerations* (allocated versus reserved memory, the out-of-memory message; lesson 01b): https://hsf-training.github.io/hsf-training-ml-gpu-webpage/
# - *Why the memory of GPU increase dramatically while training the deep learning model?*, an anonymous note among the documents this course was started from, whose claim that memory stays up "to avoid fragmentation" section 2 corrects.
#
# Further reading: Z. DeVito, *A guide to PyTorch's CUDA caching allocator* (2022).
#
# Next: lesson 06a continues with fragmentation (an out-of-memory error with half the reserved memory free, and what `max_split_size_mb` and `expandable_segments` change), this step's segments and blocks over time, a real GPU's record beside the allocator model, and the batch-size widget judged by reserved memory.
