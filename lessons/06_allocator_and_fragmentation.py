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
# # 06 · The caching allocator: reserved memory and fragmentation
#
# **Questions**
# - Why is `torch.cuda.memory_reserved()` larger than `memory_allocated()`, and `nvidia-smi` larger still?
# - Why does the memory curve of a training loop climb during the first step and then stay up, instead of rising and falling with every step? What do `del` and `torch.cuda.empty_cache()` change?
# - How can a GPU run out of memory with gigabytes "reserved but unallocated", and what do `expandable_segments` and `max_split_size_mb` do about it?
#
# **Objectives**
# - Apply the rules of PyTorch's CUDA caching allocator (rounding, pools, segments, best fit, splitting, merging) to a sequence of tensors, and check the result with a model of the allocator.
# - Replay a whole training step through that model: peak allocated, peak reserved, segments and blocks over time, for ResNet18 and GPT-2.
# - Produce an out-of-memory error with free memory left, in numbers, and measure what the allocator's settings change.
# - Draw the segments and blocks of a step, simulated here, and from `torch.cuda.memory._snapshot()` on a GPU with the same function.
#
# **Time:** about 95 minutes alone: 40 of reading, 24 of code, 4 for the figures, 1 to run all, 25 for the three exercises. **GPU:** not needed (the allocator is simulated; on a GPU, section 6 shows the real one beside it).
#
# Lessons 01 (allocated versus reserved, the out-of-memory message) and 03 (one step, event by event) come first.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import torch
from torch import nn

from helpers import CUDA_CONTEXT_BYTES, CUDA_OVERHEAD_BYTES, GPU_CARDS, Meter, MiB, fmt_bytes, profile_step
from helpers.gpus import CACHE_ALLOWANCE_BYTES, COMPUTE_CAPABILITY, cublas_workspace_bytes, unseen_lines
from helpers.allocator import (AllocatorOutOfMemory, CachingAllocator, replay, replay_on_gpu,
                               smallest_capacity)
from helpers.teaching.plots import (plot_memory_map, plot_recorded_runs, plot_reserved, plot_reserved_bars,
                                    recorded_excess, recorded_label)
from helpers.teaching.reference import load_reference, reference_report
from helpers.teaching.widgets import MemoryExplorer

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
# On a GPU these 64 MiB (on an H100) are part of `memory_allocated()` and `memory_reserved()`, but no tensor of your code holds them, so the traced peak leaves them out. Every "does it fit?" of the course (the widgets, `python -m helpers profile`) adds them for the card you pick, as a line of their own, beside one assumed overhead model: a CUDA context, and, when the step is judged by its *allocated* peak, an allowance for the allocator's cache. Judged by the simulated *reserved* peak (section 7), the allocator model replaces the allowance, and the workspaces are added beside the replayed peak.
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
print(f"  recorded on a GPU for this course: {'not yet' if load_reference() is None else 'yes, see section 6'}")
assert max(run.requested) == step.peak_allocated_bytes
assert run.peak_allocated - step.peak_allocated_bytes == 10_928_128  # 10.4 MiB of unsplit rests
assert run.segments_opened(0, second) == 62 and run.segments_opened(second) == 0
assert run.reserved[second - 1] == run.reserved[-1] == run.peak_reserved

# %% [markdown]
# The first step asked the driver for 62 segments; the second asked for none: every tensor of the second step found a cached block. In this replay, reserved memory climbs during the first step and then stays flat at its peak, even between steps, when only the model states are allocated. These are the allocator model's figures, not a measurement: the cell's last line says whether a GPU has recorded this step for the course (section 6 shows the record beside the model). On a GPU, `torch.cuda.memory_reserved()` follows the same rules, and `nvidia-smi` shows it plus the CUDA context. It is not a leak, and it is not there "to avoid fragmentation", as a note among this course's sources claims (*Why the memory of GPU increase dramatically while training the deep learning model?*, see References): it is the cache, kept because handing it back and asking for it again at every step would be slow.

# %%
expandable = replay(step.allocation_log, settings="expandable_segments:True")
plot_reserved([run, expandable], ["default", "expandable_segments:True"], marks={"second step": second},
              title="ResNet18, batch 128: allocated and reserved over two steps (allocator model)")

# %% [markdown]
# Look at the dashed blue line: with the default settings, reserved memory climbs through the first step and stays at its peak through the second, while allocated memory (solid) rises and falls with each step. The vermillion lines are the same log with `expandable_segments:True` (section 4): reserved climbs only to just above allocated's peak and then stays there, flat, while allocated falls and rises again: the pages it mapped stay mapped until `empty_cache()`, or until an allocation fails and the allocator frees its cache to retry.
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
# Look at the dark blue bars and the ratios beside them: with the default settings, peak reserved is 6% (GPT-2) to 60% (ResNet18 with checkpointing) above peak allocated, while the grey and sky-blue bars, the tensors and what the allocator counts for them, hardly differ. With `expandable_segments:True` (vermillion) peak reserved stays close to peak allocated. The ratio depends on the sizes and the order of the tensors, not on a rule of thumb: a fixed "add 1 GiB" (lessons 01 to 05b) is too much for a small step and too little for a large one. These are the allocator model's figures, replayed from simulated steps: they hold for the tensors the engine sees, in the order it sees them, and no GPU has checked them unless section 6 shows a record. A GPU adds cuDNN and cuBLAS workspaces, which are allocated through the same allocator and can change its choices.
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
# ## 4. Fragmentation: out of memory with memory free
#
# The ZeRO paper (Rajbhandari et al., section 3.2) reports "significant memory fragmentation when training very large models", with out-of-memory errors "with over 30% of memory still available in some extreme cases"; its section 6.3 traces it to short-lived tensors interleaved with long-lived ones (discarded and checkpointed activations in the forward pass, activation and parameter gradients in the backward pass). The allocator's rules are enough to produce such an error. A GPU on which the allocator may reserve 1024 MiB: one 1000 MiB tensor is allocated and freed (its segment stays cached), then ten tensors of 98 MiB take consecutive blocks of that segment, and every second one is freed. Then a 150 MiB tensor is asked for.

# %%
def toy(settings=None):
    """The fragmentation example on an allocator that may reserve 1024 MiB; returns it and the error."""
    gpu = CachingAllocator(capacity=1024 * MiB, settings=settings)
    gpu.free(gpu.malloc(1000 * MiB))
    parts = [gpu.malloc(98 * MiB) for _ in range(10)]
    for part in parts[::2]:
        gpu.free(part)
    try:
        gpu.malloc(150 * MiB)
    except AllocatorOutOfMemory as error:
        return gpu, error
    return gpu, None


gpu, error = toy()
print(error)
print(f"reserved {fmt_bytes(error.reserved)}, allocated {fmt_bytes(error.allocated)}: "
      f"{(error.reserved - error.allocated) / error.reserved:.0%} of the reserved memory is free, "
      f"in blocks of at most {fmt_bytes(error.largest_free)}")
assert (error.reserved, error.allocated, error.largest_free) == (1000 * MiB, 490 * MiB, 98 * MiB)

# %% [markdown]
# 510 MiB are free, 51% of what is reserved, and a 150 MiB tensor cannot be placed: no free block is large enough, the segment cannot be given back because five live blocks pin it, and a new 150 MiB segment would take the reserved memory past the limit. The allocator tried the last resort first (it freed every cached segment with nothing in it, and retried), then raised. Every number of the message is in the figure of a real one (lesson 01): *reserved by PyTorch but unallocated* is large, and it is in pieces.
#
# Two settings of `PYTORCH_CUDA_ALLOC_CONF` change this:
#
# - **`max_split_size_mb:N`**: blocks of N MiB or more are never split, and a smaller request never takes one. A large cached segment then cannot be cut up by small tensors; when memory runs short, such oversize blocks are given back first.
# - **`expandable_segments:True`**: instead of one segment per large request, one segment per pool and stream grows by mapping pages of physical memory (20 MiB in the large pool) at its end. Pages in the middle that hold no live tensor can be unmapped and mapped again at the end, so the free pieces are no longer stuck between live blocks.

# %%
for settings in ("max_split_size_mb:512", "expandable_segments:True"):
    fixed, failure = toy(settings)
    print(f"{settings:<25} {'out of memory' if failure else 'the 150 MiB tensor fits'}: "
          f"reserved {fmt_bytes(fixed.reserved)}, allocated {fmt_bytes(fixed.allocated)}, "
          f"{fixed.num_alloc_retries} retry after freeing the cache")
    assert failure is None and fixed.allocated == 5 * 98 * MiB + 150 * MiB


# %% [markdown]
# With `max_split_size_mb:512` the 98 MiB tensors could not cut the 1000 MiB block: it was given back and each of them got its own segment, so the five freed ones could go back to the driver too. With `expandable_segments:True` the free pages between the live tensors were unmapped and mapped again at the end. PyTorch's own out-of-memory message now suggests the second one when "reserved but unallocated" is large.
#
# **A real pattern: a batch that grows by one each step.** The allocator's source describes it in its note on expandable segments: inference or training whose batch size changes a little from step to step. Each step's tensors are slightly larger than the cached blocks of the step before, so they do not fit the blocks they would have fitted, or fit into larger ones and split them. A small CNN on 64 x 64 images, trained one step at each batch size from 64 to 96:

# %%
def small_cnn(device):
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1, device=device), nn.BatchNorm2d(64, device=device), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding=1, device=device), nn.BatchNorm2d(64, device=device), nn.ReLU(),
        nn.MaxPool2d(2), nn.Conv2d(64, 128, 3, padding=1, device=device), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10, device=device))


def training_log(batch_sizes):
    """The allocation log of one training step at each batch size, in one process; and its peak."""
    with Meter("simulated") as meter:
        model = small_cnn(meter.device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for b in batch_sizes:
            x = torch.randn(b, 3, 64, 64, device=meter.device)
            y = torch.randint(0, 10, (b,), device=meter.device)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            del x, y
    return meter.allocation_log(), meter.peak()


growing, floor = training_log(range(64, 97))
print(f"{len(growing)} allocations and frees; the largest step's tensors peak at {fmt_bytes(floor)}")
need = {}
for settings in ("", "max_split_size_mb:24", "expandable_segments:True"):
    uncapped = replay(growing, settings=settings)
    need[settings] = smallest_capacity(growing, settings, start=-(-floor // (2 * MiB)) * 2 * MiB)
    at_need = replay(growing, capacity=need[settings], settings=settings)
    print(f"{settings or 'defaults':<25} reserved without a limit: {fmt_bytes(uncapped.peak_reserved):>11}; "
          f"smallest GPU it runs on: {fmt_bytes(need[settings])} "
          f"(+{(need[settings] - floor) / floor:.1%}), with {at_need.allocator.num_alloc_retries} cache flushes")
assert replay(growing).peak_reserved > 10 * floor
assert replay(growing, settings="expandable_segments:True").peak_reserved == 642 * MiB
assert need[""] > need["expandable_segments:True"] > floor and need["max_split_size_mb:24"] < need[""]

# %% [markdown]
# Three lessons in these lines:
#
# - **Without memory pressure the cache only grows.** With the default settings, the model's reserved memory climbs to over ten times what the tensors ever need, because each step's slightly larger tensors open new segments and the old ones are kept. On a GPU the same rules fill the card: the allocator gives cached memory back only when a `cudaMalloc` fails.
# - **Under pressure it costs time, then memory.** On a GPU just large enough, the allocator runs out, empties its cache (a device synchronisation) and retries: the *cache flushes* above, `num_alloc_retries` in `torch.cuda.memory_stats()`. Below that size, fragmentation turns into an out-of-memory error although the tensors alone would fit.
# - **`expandable_segments:True` keeps reserved memory near the tensors' peak** (without a limit, 642 MiB against the defaults' gigabytes) and needs no flushes; its 20 MiB pages cost a little at the margin. `max_split_size_mb` saves memory here but flushes the cache more. If your input shapes vary, try `expandable_segments:True` first, or make the shapes constant (exercise 2).
#
# ## 5. A picture of segments and blocks over time
#
# PyTorch's memory snapshot viewer (https://pytorch.org/memory_viz) draws the allocator's state from a GPU recording. `plot_memory_map` draws the same kind of picture offline, from the model's trace of the ResNet18 step of section 2: time runs left to right over both steps; each segment is a band of addresses (light grey: reserved but free); coloured bars are the tensors' blocks, by category (the first step's tensors, which the engine does not label, in sky blue). Parameters, gradients and optimizer states are drawn at least a few pixels high so that small ones can be seen; only their heights are not to scale.

# %%
plot_memory_map(run.allocator.trace, step.categories_by_serial(), first_step_until=run.trace_position(second),
                title="ResNet18, batch 128: segments and blocks over two steps (allocator model, defaults)")

# %% [markdown]
# Look at the reddish-purple bars in the upper segments: they are momentum buffers, and they pin segments that are otherwise free. Read the map from left to right. The parameters (blue, at the bottom) were placed before the first step. The first step's forward pass opens segment after segment for the activations it keeps (sky blue, rising), and its backward pass opens more, near the top: gradients of activations (grey, "other") that fit none of the blocks freed so far. The momentum buffers, created by the first `optimizer.step()`, landed in free blocks of those segments and stay there for the rest of training: long-lived tensors between short-lived ones are what pins a segment (section 4). In the second step every tensor (activations in green) finds a place in a segment the first step opened, and the top segments stay almost empty: most of section 2's 1.3 GiB of reserved but unallocated memory.
#
# ## 6. On a real GPU
#
# On a GPU, the next cell records the real allocator's history for the same step (`torch.cuda.memory._record_memory_history()`), draws its `_snapshot()` with the same function, and replays the allocation log of that very run through the model to compare the peaks. Without a GPU it says so and does nothing; its output is not checked (it depends on the GPU).

# %% tags=["nbval-ignore-output"] nbval_reason="runs only on a GPU, whose figures depend on the card"
if torch.cuda.is_available():
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    try:
        real = profile_step("resnet18", 128, device="cuda", steady_state=True)
        snap = torch.cuda.memory._snapshot()
        real_reserved = torch.cuda.max_memory_reserved()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    model_of_it = replay(real.allocation_log)
    print(f"{torch.cuda.get_device_name(0)}: max_memory_allocated {fmt_bytes(real.peak_allocated_bytes)}, "
          f"max_memory_reserved {fmt_bytes(real_reserved)}")
    print(f"the same run's tensors through the model: peak allocated {fmt_bytes(model_of_it.peak_allocated)}, "
          f"peak reserved {fmt_bytes(model_of_it.peak_reserved)} "
          f"({(model_of_it.peak_reserved - real_reserved) / real_reserved:+.1%})")
    display(plot_memory_map(snap["device_traces"][0], segments=snap["segments"],
                            title=f"ResNet18, batch 128, on {torch.cuda.get_device_name(0)} (recorded)"))
else:
    print("no GPU here: the real allocator cannot be recorded (section 5 shows the simulated one)")

# %% [markdown]
# This course's recording on a GPU (`make gpu-reference`, lesson 00): each step's peaks on the GPU, allocated and reserved, beside the simulated ones. A simulated reserved figure is a claim about a GPU: this is where it is checked, over every recorded step.

# %%
recorded = load_reference()
runs = [] if recorded is None else [r for r in recorded["runs"] if not r.get("error")]
if not runs:
    print(reference_report())  # says how to record them
else:
    excess = {recorded_label(r): recorded_excess(r) for r in runs}
    allocated = [e["peak allocated"] for e in excess.values()]
    reserved = {r["model"].split("/")[-1]: [] for r in runs}
    for r, e in zip(runs, excess.values()):
        reserved[r["model"].split("/")[-1]].append(e["peak reserved"])
    language = reserved["gpt2"] + reserved["Llama-3.1-8B"]
    print(f"{len(runs)} steps recorded on an {recorded['device']} (torch {recorded['torch']}), "
          f"simulated with torch {recorded['simulated_torch']}")
    print(f"the GPU against the simulation, peak allocated: {min(allocated):+.1%} to {max(allocated):+.1%}; "
          f"peak reserved: GPT-2 and Llama-3.1 8B {min(language):+.1%} to {max(language):+.1%}, "
          f"ResNet18 {min(reserved['resnet18']):+.0%} to {max(reserved['resnet18']):+.0%}, "
          f"the dropout MLP {reserved['dropout MLP'][0]:+.0%}")
    assert len(runs) == 31 and all(a > -0.001 for a in allocated)
    assert all(abs(v) < 0.05 for v in language) and min(reserved["resnet18"]) > 0.05 and max(reserved["resnet18"]) > 0.5

# %%
if runs:
    display(plot_recorded_runs(runs, title=f"{len(runs)} steps on an {recorded['device']}: the GPU against the simulation"))

# %% [markdown]
# Look at the blue dots first: peak allocated, the tensors and what the allocator rounds them to, is the GPU's figure or a little under it for every step, a few percent under for the convolutional networks. Then the vermillion diamonds, peak reserved, which is where the simulation is weakest. For the language models at the bottom the GPU reserved what the model says to within a few percent, above or below. Every network with convolutions reserved more on the GPU, ResNet18 up to two thirds more: a cuDNN workspace is a large block that no tensor asked for, so the allocator finds a free block for it or opens a segment, and once the kernel is done that segment stays in the cache. The dropout MLP does the same with a reduction's staging buffer. Read a simulated reserved figure as a floor for a convolutional network, and the reserved verdict of the next section with it.

# %% [markdown]
# Is the allocator model wrong about convolutional networks, or is it missing allocations? Each recorded run also kept a memory snapshot of its step on the GPU, recorded from an emptied cache (`recorded_snapshot`; lesson 06b reads one). Its trace lists every block the GPU's caching allocator handed out and took back, cuDNN's workspaces included. Replay that trace, instead of the simulated log, through the same model, each segment at the address where the driver put it (the address decides between two free blocks of the same size):

# %%
from helpers.snapshot import load_snapshot, trace_log
from helpers.teaching.reference import recorded_snapshot

if recorded is not None:
    traced = []
    for r in recorded["runs"]:
        path = recorded_snapshot(r["model"], r["batch_size"], r["config"])
        if path is not None:
            snapshot = load_snapshot(path)
            log, addresses, _ = trace_log(snapshot["device_traces"][0], snapshot["segments"])
            traced.append((r, sum(s["total_size"] for s in snapshot["segments"]),
                           replay(log, segment_addresses=addresses).peak_reserved))
    exact = sum(gpu == model for _, gpu, model in traced)
    print(f"{exact} of {len(traced)} recorded steps: the GPU's own trace, replayed, ends at its reserved memory to the byte")
    unmatched = [(r["explained"]["allocations"] - r["explained"]["aligned"], r["explained"]["allocations"])
                 for r, _, _ in traced if r["model"] == "resnet18"]
    print(f"ResNet18 (15 steps): {min(n for n, _ in unmatched)} to {max(n for n, _ in unmatched)} of each step's "
          f"allocations on the GPU have no simulated twin")
    for r, _, _ in traced:
        if r["model"] == "resnet18":
            assert "backward of Conv2d" in r["explained"]["gpu_only"][0]["where"]  # the largest group of them
    assert exact == len(traced) == 31 and len(unmatched) == 15 and min(n for n, _ in unmatched) >= 100

# %% [markdown]
# Every one of them, to the byte: given the allocations the GPU made, the model reserves what the GPU reserved, cuDNN's workspaces and all. What the simulated column lacks is in the log, not in the allocator. A hundred or more of each ResNet18 step's allocations on the GPU have no twin among the simulated step's tensors, and the largest of them are made in a convolution's backward pass, where cuDNN asks for workspace. The simulation cannot know their sizes (cuDNN picks an algorithm, and with it a workspace, on the GPU at run time), so for convolutional networks a simulated reserved figure stays a floor.\n#
# The transformers' kernels take memory of their own too. The GPU-only allocations of the Llama-3.1 8B step, and those the vision transformers make near their attention's backward pass:

# %%
if runs:
    (llama,) = [r for r in runs if r["config"] == "LoRA r16"]
    (layers,) = [g for g in llama["explained"]["gpu_only"] if g["count"] == 32]
    per_layer = layers["bytes"] // layers["count"]
    print(f"Llama-3.1 8B, LoRA r16: {layers['count']} GPU-only blocks of {per_layer / MiB:.2f} MiB, "
          f"one in each decoder layer's backward pass")
    for r in runs:
        if r["model"] in ("vit_b_16", "swin_t"):
            near = max((g for g in r["explained"]["gpu_only"] if "Attention" in g["where"] and "backward" in g["where"]),
                       key=lambda g: g["bytes"])
            print(f"{recorded_label(r)}: {near['count']} GPU-only allocations near an attention module's backward, "
                  f"{fmt_bytes(near['bytes'])} in all")
    assert per_layer == 67_371_264 and layers["bytes"] == 32 * per_layer

# %% [markdown]
# The Llama step's attention backward takes a 64.25 MiB block in each of its 32 layers (lesson 06b names the kernel), and the vision transformers' attention backward makes allocations that no simulated tensor matches, hundreds of MiB of them. Yet GPT-2's and Llama's peak reserved is the simulated figure to within a few percent, and Llama's is below it: those blocks found room in blocks the cache already held, so reserved memory did not grow for them. A kernel's own memory raises reserved memory only when it finds no free block large enough, as a convolution's workspace often does; and on a fuller card it is memory the margin must cover.

# %% [markdown]
# ## 7. Does it fit, with reserved memory?
#
# The batch-size widget of lesson 01b has a *reserved* toggle: with it, each step is replayed through the allocator model on the chosen card, with room left for the assumed CUDA context (section 1), and the verdict comes from the allocator (which flushes its cache and retries before it gives up) instead of the assumed 512 MiB cache allowance. The label of every verdict says which of the two it judged.

# %%
explorer = MemoryExplorer("resnet18", batch_size=128, max_batch_size=256, reserved=True, device="simulated")
print(explorer.summary())
check = replay_on_gpu(step.allocation_log, GPU_CARDS["V100 16 GB"])
assert explorer.result.reserved_bytes == check.peak_reserved == run.peak_reserved
explorer

# %% [markdown]
# Move the batch size, the GPU or the checkpointing and watch *peak reserved* against *peak allocated*; each change is traced exactly (about a second). From a terminal: `python -m helpers profile --model resnet18 --batch-size 128 --steady-state --reserved`, with `--alloc-conf expandable_segments:True` to try a setting.
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
# **Exercise 2: make the shapes constant.** Section 4's growing batch needs far more reserved memory than its tensors. Replay one step at each batch size from 64 to 96 *padded to 96* (the same shape every step, as a data loader with `drop_last=True` or padded batches gives): how much is reserved without a limit, with the default settings?

# %%
# Your code here: training_log([96] * 8), then replay(...)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# padded, padded_floor = training_log([96] * 8)
# constant = replay(padded)
# print(f"reserved {fmt_bytes(constant.peak_reserved)} for a {fmt_bytes(padded_floor)} peak "
#       f"(growing batch: {fmt_bytes(replay(growing).peak_reserved)})")
# assert padded_floor == floor and constant.peak_reserved == 742 * MiB < replay(growing).peak_reserved
# assert round(constant.peak_reserved / padded_floor - 1, 2) == 0.23   # 23% above the tensors' peak
# assert constant.segments_opened(len(padded) // 2) == 0  # nothing new after the first steps
# ```
#
# With one shape, every step after the first finds its blocks in the cache: reserved stays at 742 MiB, 23% above the tensors' peak, instead of growing step after step. Padding costs compute on the padded samples; bucketing batches by size (a few fixed shapes) is the usual middle way for sequences.
# </details>
#
# **Exercise 3: the smallest `max_split_size_mb`.** In the fragmentation example of section 4 (`toy`), which values of `max_split_size_mb` from 21 to 1024 let the 150 MiB tensor fit? Why does a value above 1000 not help?

# %%
# Your code here: for mb in (...): toy(f"max_split_size_mb:{mb}")

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# works = [mb for mb in (21, 64, 98, 99, 150, 500, 1000, 1001, 1024) if toy(f"max_split_size_mb:{mb}")[1] is None]
# print("fits with max_split_size_mb in", works)
# assert works == [21, 64, 98, 99, 150, 500, 1000]
# ```
#
# Any value up to 1000 MiB keeps the 1000 MiB block whole (it is at least the limit) and so away from the 98 MiB tensors, which get segments of their own that can be given back. Above 1000 MiB the block is no longer oversize: the 98 MiB tensors split it as with the default settings, and the 150 MiB tensor fails again.
# </details>
#
# ## Key points
#
# - `memory_allocated()` counts the blocks of live tensors (each request rounded up to 512 bytes, plus unsplit rests of up to 1 MiB in the large pool); `memory_reserved()` counts whole segments, in use or cached; `nvidia-smi` adds the CUDA context (a few hundred MiB) and anything outside PyTorch's allocator. cuBLAS workspaces (32 MiB per handle and stream on an H100, two in a training step) go through the allocator.
# - The caching allocator keeps freed blocks because `cudaMalloc` and `cudaFree` are slow and synchronise: memory climbs during the first step and stays up. `del` lowers allocated, never reserved; `empty_cache()` gives back only segments with nothing alive in them, and the next step asks for them again.
# - Fragmentation is free memory in pieces too small for the next request, pinned between live blocks. It can raise an out-of-memory error with half the reserved memory free, and with varying shapes it makes the cache grow step after step.
# - `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (set before the first CUDA allocation) grows one segment per pool and stream and returns free pages from anywhere in it: the first thing to try when "reserved but unallocated" is large. Constant shapes remove the cause.
# - Reserved memory is a function of the sizes *and order* of a step's tensors: replay the step instead of adding a fixed margin. Simulated figures cover the tensors the engine sees; a GPU adds cuDNN and cuBLAS workspaces.
#
# ## References
#
# Cited in this lesson by name:
#
# - PyTorch source, `c10/cuda/CUDACachingAllocator.cpp` (the allocator's rules, and its notes, including *Expandable Segments*) and `aten/src/ATen/cuda/CublasHandlePool.cpp` (cuBLAS and cuBLASLt workspaces), version 2.14.1: https://github.com/pytorch/pytorch
# - PyTorch documentation, *CUDA semantics: memory management* and *Optimizing memory usage with `PYTORCH_CUDA_ALLOC_CONF`* (`max_split_size_mb`, `expandable_segments`, `garbage_collection_threshold`): https://pytorch.org/docs/stable/notes/cuda.html#memory-management
# - PyTorch documentation, *Understanding CUDA memory usage* (`torch.cuda.memory._record_memory_history`, `_snapshot`, https://pytorch.org/memory_viz): https://pytorch.org/docs/stable/torch_cuda_memory.html
# - S. Rajbhandari, J. Rasley, O. Ruwase, Y. He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054: section 3.2 (memory fragmentation) and section 6.3 (memory defragmentation).
# - pytorch/pytorch pull request #86509, *Sets CUDA_MODULE_LOADING to LAZY when not set by the user* (the context measurements of section 1); pytorch/pytorch issue #109888; unslothai/unsloth-zoo pull request #1053.
# - HSF Training, *Machine Learning on GPU*, episode *Memory considerations* (allocated versus reserved memory, the out-of-memory message; lesson 01b): https://hsf-training.github.io/hsf-training-ml-gpu-webpage/
# - *Why the memory of GPU increase dramatically while training the deep learning model?*, an anonymous note among the documents this course was started from, whose claim that memory stays up "to avoid fragmentation" section 2 corrects.
#
# Further reading: Z. DeVito, *A guide to PyTorch's CUDA caching allocator* (2022).
