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
# # 06a · Fragmentation and reserved memory: segments over time, a real GPU, and will it fit
#
# **Questions**
# - How can a GPU run out of memory with gigabytes "reserved but unallocated", and what do `expandable_segments` and `max_split_size_mb` do about it?
# - Where in the allocator's segments do a step's tensors sit, step after step, and what keeps a segment from being given back?
# - How close is the allocator model to a real GPU's reserved memory, and what does it miss?
#
# **Objectives**
# - Produce an out-of-memory error with free memory left, in numbers, and measure what the allocator's settings change, for a toy and for a batch that grows every step.
# - Draw the segments and blocks of a step, simulated here, and from `torch.cuda.memory._snapshot()` on a GPU with the same function.
# - Compare the model's peaks with 31 steps recorded on an H200, and replay the GPU's own traces through it.
# - Judge a step by its reserved peak with the batch-size widget.
#
# **Time:** about 60 minutes alone: 23 of reading, 16 of code, 2 for the figures, 1 to run all, 17 for the two exercises. **GPU:** not needed (the allocator is simulated; on a GPU, section 3 records the real one beside it).
#
# Read lesson 06 first: this lesson continues with its model of the caching allocator (`CachingAllocator`, `replay`), its rules for segments and blocks, and its ResNet18 step replayed over two steps.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import torch
from torch import nn

from helpers import GPU_CARDS, Meter, MiB, fmt_bytes, profile_step
from helpers.allocator import (AllocatorOutOfMemory, CachingAllocator, replay, replay_on_gpu,
                               smallest_capacity)
from helpers.teaching.plots import plot_memory_map, plot_recorded_runs, recorded_excess, recorded_label
from helpers.teaching.reference import load_reference, reference_report
from helpers.teaching.widgets import MemoryExplorer

_ = torch.manual_seed(0)

# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# Recomputed from lesson 06 with `profile_step` and `replay`: the ResNet18 step of its section 2 (batch 128, SGD with momentum, a first step and the traced one: `step`), replayed through the allocator model with the default settings (`run`), and where the second step starts in the log (`second`):

# %%
step = profile_step("resnet18", 128, device="simulated", steady_state=True)
run = replay(step.allocation_log)
second = step.events[0].log_position
print(f"ResNet18, batch 128: peak allocated {fmt_bytes(run.peak_allocated)}, peak reserved {fmt_bytes(run.peak_reserved)} "
      f"({(run.peak_reserved - run.peak_allocated) / 2**30:.1f} GiB more); segments asked for: "
      f"{run.segments_opened(0, second)} in the first step, {run.segments_opened(second)} in the second")
assert run.peak_reserved == 4152 * MiB and round((run.peak_reserved - run.peak_allocated) / 2**30, 1) == 1.3
assert run.segments_opened(0, second) == 62 and run.segments_opened(second) == 0

# %% [markdown]
# ## 1. Fragmentation: out of memory with memory free
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
# 510 MiB are free, 51% of what is reserved, and a 150 MiB tensor cannot be placed: no free block is large enough, the segment cannot be given back because five live blocks pin it, and a new 150 MiB segment would take the reserved memory past the limit. The allocator tried the last resort first (it freed every cached segment with nothing in it, and retried), then raised. Every number of the message is in the figure of a real one (lesson 01b): *reserved by PyTorch but unallocated* is large, and it is in pieces.
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
# - **`expandable_segments:True` keeps reserved memory near the tensors' peak** (without a limit, 642 MiB against the defaults' gigabytes) and needs no flushes; its 20 MiB pages cost a little at the margin. `max_split_size_mb` saves memory here but flushes the cache more. If your input shapes vary, try `expandable_segments:True` first, or make the shapes constant (exercise 1).
#
# ## 2. A picture of segments and blocks over time
#
# PyTorch's memory snapshot viewer (https://pytorch.org/memory_viz) draws the allocator's state from a GPU recording. `plot_memory_map` draws the same kind of picture offline, from the model's trace of lesson 06's ResNet18 step, recomputed in the Setup (`run`): time runs left to right over both steps; each segment is a band of addresses (light grey: reserved but free); coloured bars are the tensors' blocks, by category (the first step's tensors, which the engine does not label, in sky blue). Parameters, gradients and optimizer states are drawn at least a few pixels high so that small ones can be seen; only their heights are not to scale.

# %%
plot_memory_map(run.allocator.trace, step.categories_by_serial(), first_step_until=run.trace_position(second),
                title="ResNet18, batch 128: segments and blocks over two steps (allocator model, defaults)")

# %% [markdown]
# Look at the reddish-purple bars in the upper segments: they are momentum buffers, and they pin segments that are otherwise free. Read the map from left to right. The parameters (blue, at the bottom) were placed before the first step. The first step's forward pass opens segment after segment for the activations it keeps (sky blue, rising), and its backward pass opens more, near the top: gradients of activations (grey, "other") that fit none of the blocks freed so far. The momentum buffers, created by the first `optimizer.step()`, landed in free blocks of those segments and stay there for the rest of training: long-lived tensors between short-lived ones are what pins a segment (section 1). In the second step every tensor (activations in green) finds a place in a segment the first step opened, and the top segments stay almost empty: most of the 1.3 GiB of reserved but unallocated memory at the peak (the Setup's line).
#
# ## 3. On a real GPU
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
    print("no GPU here: the real allocator cannot be recorded (section 2 shows the simulated one)")

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
# ## 4. Does it fit, with reserved memory?
#
# The batch-size widget of lesson 01b has a *reserved* toggle: with it, each step is replayed through the allocator model on the chosen card, with room left for the assumed CUDA context (lesson 06, section 1), and the verdict comes from the allocator (which flushes its cache and retries before it gives up) instead of the assumed 512 MiB cache allowance. The label of every verdict says which of the two it judged.

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
# **Exercise 1: make the shapes constant.** Section 1's growing batch needs far more reserved memory than its tensors. Replay one step at each batch size from 64 to 96 *padded to 96* (the same shape every step, as a data loader with `drop_last=True` or padded batches gives): how much is reserved without a limit, with the default settings?

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
# **Exercise 2: the smallest `max_split_size_mb`.** In the fragmentation example of section 1 (`toy`), which values of `max_split_size_mb` from 21 to 1024 let the 150 MiB tensor fit? Why does a value above 1000 not help?

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
# - Fragmentation is free memory in pieces too small for the next request, pinned between live blocks. It can raise an out-of-memory error with half the reserved memory free, and with varying shapes it makes the cache grow step after step.
# - `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` (set before the first CUDA allocation) grows one segment per pool and stream and returns free pages from anywhere in it: the first thing to try when "reserved but unallocated" is large. `max_split_size_mb` keeps large blocks whole, at the cost of more cache flushes. Constant shapes remove the cause.
# - Long-lived tensors made among short-lived ones, such as momentum buffers created by the first `optimizer.step()`, pin segments that are otherwise free: the memory map shows where reserved but unallocated memory sits.
# - Given the allocations a GPU made, the allocator model reserves what the GPU reserved, to the byte. What a simulated step lacks is the kernels' own memory (cuDNN workspaces, a reduction's staging buffer): for a convolutional network a simulated reserved figure is a floor.
# - A step judged by reserved memory is replayed on the card, with room for the CUDA context: the verdict comes from the allocator, which flushes its cache and retries before it gives up.
#
# ## References
#
# Cited in this lesson by name:
#
# - PyTorch source, `c10/cuda/CUDACachingAllocator.cpp` (the allocator's rules, and its notes, including *Expandable Segments*), version 2.14.1: https://github.com/pytorch/pytorch
# - PyTorch documentation, *CUDA semantics: memory management* and *Optimizing memory usage with `PYTORCH_CUDA_ALLOC_CONF`* (`max_split_size_mb`, `expandable_segments`, `garbage_collection_threshold`): https://pytorch.org/docs/stable/notes/cuda.html#memory-management
# - PyTorch documentation, *Understanding CUDA memory usage* (`torch.cuda.memory._record_memory_history`, `_snapshot`, https://pytorch.org/memory_viz): https://pytorch.org/docs/stable/torch_cuda_memory.html
# - S. Rajbhandari, J. Rasley, O. Ruwase, Y. He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054: section 3.2 (memory fragmentation) and section 6.3 (memory defragmentation).
#
# Further reading: Z. DeVito, *A guide to PyTorch's CUDA caching allocator* (2022).
#
# Next: lesson 06b reads a real GPU's memory snapshot, an H200's record of a large model's training step, with the allocator fresh in mind.
