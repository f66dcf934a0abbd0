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
# # 01b · Out of memory: the message, allocated versus reserved, and how deep an MLP can get
#
# **Questions**
# - What happens when a batch does not fit, and what does a CUDA out-of-memory message say, field by field?
# - What is the difference between allocated and reserved memory?
# - How deep can a network of 5,000-wide layers get on a GPU, and what do formulas for model states forget?
#
# **Objectives**
# - Run the whole training set as one batch into an out-of-memory error, simulated (and real, if you have a GPU), and read the message, including the one a capped GPU prints.
# - Tell *allocated* from *reserved* memory.
# - Count the bytes per parameter of fp32 training with Adam, tell them from ZeRO's mixed-precision sum, and find by measuring the deepest MLP that fits a V100.
# - Drive the batch-size widget, by hand and from code.
#
# **Time:** about 50 minutes alone: 20 of reading, 16 of code, 1 to run all, 15 for the two exercises. **GPU:** not needed (memory is simulated); sections 2 and 3 also measure a real GPU if you have one.
#
# Read lesson 01 first: this lesson continues with its straight line M(b) = M0 + b·m for ResNet18 and the largest batches it predicts.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import functools
import re

import torch

from helpers import CUDA_OVERHEAD_BYTES, DoesNotFit, GiB, MiB, PeakCurve, fit_affine, fmt_bytes, mlp, profile_step
from helpers.teaching.data import load_digits
from helpers.gpus import GPU_CARDS, oom_message
from helpers.teaching.widgets import MemoryExplorer

_ = torch.manual_seed(0)

# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# Recomputed from lesson 01: the size of the digits' training set (`n_train`), ResNet18's straight line fitted on batches 128 to 1024 (`fit`, its section 3) and the V100's capacity (`V100`):

# %%
n_train = len(load_digits().x_train)
large = [128, 256, 512, 1024]
resnet = PeakCurve("resnet18", "simulated")
fit = fit_affine(large, [resnet.trace(b).peak_allocated_bytes for b in large])
V100 = GPU_CARDS["V100 16 GB"]
print(f"n_train = {n_train}; M0 = {fmt_bytes(fit.m0_bytes)}, m = {fmt_bytes(fit.per_sample_bytes)} per sample; "
      f"V100: {fmt_bytes(V100, 'GiB')}, largest batch {fit.largest_batch(V100)}")
assert n_train == 1437 and 21 * MiB < fit.per_sample_bytes < 22 * MiB

# %% [markdown]
# ## 1. The whole training set as one batch
#
# For our MLP, the whole training set as one batch needed less than 8 MiB (lesson 01, section 3). For an image network it is another story. Suppose we fine-tuned ResNet18 on the digits, scaled up to 224 × 224 as ImageNet models expect, and took all 1,437 images as one batch. The line predicts:

# %%
need = fit.predict(n_train)
print(f"ResNet18, batch {n_train}: about {fmt_bytes(need, 'GiB')} at the peak, plus the overhead")
assert need > V100

# %% [markdown]
# On a V100 that fails. Here is the failure, from the simulated V100 (on a real GPU, section 2 shows the real one):

# %%
try:
    profile_step("resnet18", n_train, device="simulated", steady_state=True, capacity=V100)
except DoesNotFit as e:
    oom = e.cuda_message
print(oom)


# %% [markdown]
# Read it field by field:

# %%
def size(text):
    """'1.07 GiB' -> bytes (the units CUDA's messages use)."""
    value, unit = text.split()
    return float(value) * {"bytes": 1, "KiB": 2**10, "MiB": MiB, "GiB": GiB}[unit]


FIELDS = {
    "tried to allocate": r"Tried to allocate ([\d.]+ \w+)",
    "total capacity": r"total capacity of ([\d.]+ \w+)",
    "free": r"of which ([\d.]+ \w+) is free",
    "in use by this process": r"this process has ([\d.]+ \w+) memory in use",
    "allowed (a cap)": r"([\d.]+ \w+) allowed;",
    "allocated by PyTorch": r"Of the allocated memory ([\d.]+ \w+) is allocated",
    "reserved but unallocated": r"and ([\d.]+ \w+|0 bytes) is reserved by PyTorch but unallocated",
}


def read_oom(message):
    """The fields of a CUDA out-of-memory message, in bytes; a field the message lacks is left out."""
    found = {name: re.search(pattern, message) for name, pattern in FIELDS.items()}
    return {name: size(m.group(1)) for name, m in found.items() if m}


value = read_oom(oom)
for name, v in value.items():
    print(f"{name:<25} {fmt_bytes(v, 'GiB'):>10}")

assert "allowed (a cap)" not in value
assert abs(value["free"] - (value["total capacity"] - value["in use by this process"])) < 0.01 * GiB
assert value["tried to allocate"] > value["free"]

# %% [markdown]
# * **Tried to allocate**: the one request that failed, here a single activation tensor of the forward pass, rounded up to the 2 MiB segment the allocator asked the driver for (lesson 00). It is not the total the step needs; it is the straw that broke the camel's back.
# * **Total capacity**: the GPU's memory, as the driver reports it (15.78 GiB for a "16 GB" V100).
# * **Free**: what the *driver* still had; always total minus what all processes hold, and here smaller than the request.
# * **This process has … in use**: everything this process holds on the GPU, PyTorch's tensors plus its cache plus the CUDA context (here the assumed 1 GiB overhead).
# * **Allocated by PyTorch**: the bytes in live tensors, what `torch.cuda.memory_allocated()` reports.
# * **Reserved by PyTorch but unallocated**: memory the caching allocator holds but no tensor uses (section 3). The simulation has no cache, so it is 0 here; on a real GPU it is often hundreds of MiB, and when it is large the message suggests `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`.
#
# A message can carry one more field. Section 2 runs this step on your GPU, if you have one, capped at 16 GiB with `torch.cuda.set_per_process_memory_fraction` so that every GPU fails the same way. A capped allocator fails when its own memory plus the request would pass the cap, however much the card has free, and its message then reports the card's total, the driver's free memory, and the cap as "*… allowed;*". Here is that message as the simulation gives it for an H100 capped at 16 GiB (the tensors may use the 16 GiB; the process also holds the assumed overhead):

# %%
cap16 = 16 * GiB
try:
    profile_step("resnet18", n_train, device="simulated", steady_state=True, capacity=cap16 + CUDA_OVERHEAD_BYTES)
except DoesNotFit as e:
    capped_failure = e
H100 = GPU_CARDS["H100 80 GB"]
in_use = capped_failure.allocated + CUDA_OVERHEAD_BYTES
capped = oom_message(capped_failure.requested, H100, in_use, capped_failure.allocated, capped_failure.allocated,
                     allowed=cap16)
print(capped)
print()
capped_value = read_oom(capped)
for name, v in capped_value.items():
    print(f"{name:<25} {fmt_bytes(v, 'GiB'):>10}")
assert capped_value["free"] > capped_value["tried to allocate"]   # the card had room ...
assert capped_failure.allocated + capped_failure.requested > cap16   # ... the cap did not

# %% [markdown]
# Read the capped message the other way round: *free* is now large, larger than the request, because the card has 79 GiB and the process uses a fraction of it. The binding field is **allowed**: what PyTorch already holds (allocated plus reserved-but-unallocated) plus the request would pass it. On a card without a cap, *allowed* is absent and *free* is the field to compare with the request.
#
# Older PyTorch versions printed the same facts in another order. The HSF lesson quotes this one, from a "16 GB" card that reported 15.90 GiB: *"Tried to allocate 8.74 GiB (GPU 0; 15.90 GiB total capacity; 8.84 GiB already allocated; 6.32 GiB free; 8.86 GiB reserved in total by PyTorch)"*. Its numbers say more than it seems:

# %%
total, allocated, free, reserved, tried = 15.90, 8.84, 6.32, 8.86, 8.74  # GiB, from the quoted message
print(f"reserved but unallocated: {reserved - allocated:.2f} GiB")
print(f"held outside PyTorch's allocator (CUDA context, other processes): {total - reserved - free:.2f} GiB")
print(f"the request needed {tried:.2f} GiB but only {free:.2f} GiB was free")
assert tried > free and round(total - reserved - free, 2) == 0.72

# %% [markdown]
# 0.72 GiB of the 15.90 GiB was neither free nor PyTorch's: that is the CUDA context and whatever else ran on the GPU, the "overhead" we assumed. And the failing request alone was larger than all the free memory: halving the batch size would have halved it.
#
# ## 2. On a real GPU
#
# If this notebook runs on a GPU, the next cell does the same thing for real. `profile_step` catches `torch.OutOfMemoryError`, releases the step's memory (model, tensors, allocator cache) and raises `DoesNotFit` with CUDA's own message; a 16 GiB cap is imposed with `torch.cuda.set_per_process_memory_fraction` so that the result does not depend on how big your GPU is, and its message has the "allowed" field read above (on a GPU smaller than 16 GiB, the card itself is the limit and there is no cap). Without a GPU the cell says so. (Its output is not checked: it depends on the GPU.)

# %% tags=["nbval-ignore-output"] nbval_reason="it measures this machine's GPU, and says so when there is none"
if torch.cuda.is_available():
    try:
        total = torch.cuda.get_device_properties(0).total_memory
        budget = 16 * GiB if total > 16 * GiB else None   # a smaller GPU is its own limit: no cap
        profile_step("resnet18", n_train, device="cuda", steady_state=True, capacity=budget)
        print("it fit")
    except DoesNotFit as e:
        print(e.cuda_message)
        print({name: fmt_bytes(v, "GiB") for name, v in read_oom(e.cuda_message).items()})
    print(f"after the error: {fmt_bytes(torch.cuda.memory_allocated())} allocated, "
          f"{fmt_bytes(torch.cuda.memory_reserved())} reserved")
else:
    print("no GPU: the simulated message above is the one to read")

# %% [markdown]
# ## 3. Allocated versus reserved
#
# On a GPU, PyTorch does not return freed memory to the driver. Its **caching allocator** keeps freed blocks *reserved* and hands them to the next tensors of a fitting size, because asking the driver (`cudaMalloc`, `cudaFree`) is slow and synchronises the device. So there are two numbers:
#
# * `torch.cuda.memory_allocated()`: bytes in live tensors (what this lesson's peaks are);
# * `torch.cuda.memory_reserved()`: bytes the allocator holds from the driver, allocated or cached. This is closer to what `nvidia-smi` shows, which also adds the CUDA context.
#
# **What the simulation cannot show.** Without a GPU there is no allocator and no cache: simulated memory is exactly the allocated bytes, and "reserved" has no value (`None`). The cell below shows the difference on a GPU; without one it prints nothing else. Lessons 06 and 06a study the allocator, and its fragmentation, in depth.

# %% tags=["nbval-ignore-output"] nbval_reason="it measures this machine's GPU, and says so when there is none"
if torch.cuda.is_available():
    def show(when):
        print(f"{when:<34} allocated {fmt_bytes(torch.cuda.memory_allocated()):>10}   "
              f"reserved {fmt_bytes(torch.cuda.memory_reserved()):>10}")
    show("start")
    x = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    show("after a 256 MiB tensor")
    del x
    show("after del: cached, still reserved")
    y = torch.empty(128 * MiB, dtype=torch.uint8, device="cuda")
    show("a 128 MiB tensor reuses the cache")
    del y
    torch.cuda.empty_cache()
    show("after torch.cuda.empty_cache()")
else:
    print("no GPU: reserved memory cannot be shown here (simulated memory has no cache)")

# %% [markdown]
# ## 4. How deep can an MLP get?
#
# The HSF lesson asks: *how many hidden layers of 5,000 neurons can a network have at batch size 32 before a GPU runs out of memory?*, and answers that it typically happens at about 5 layers. Let us compute it for a "16 GB" V100, with the Adam optimizer.
#
# A network with d hidden layers of 5,000 has d − 1 `Linear(5000, 5000)` layers between them, each with 5000 × 5000 weights and 5000 biases (the first and last layers, from the input and to the classes, are small). In fp32 training with Adam every parameter costs 4 bytes, its gradient 4 more, and Adam's two moment estimates 8 more: **16 bytes per parameter**. Beware: "16 bytes per parameter" is also the ZeRO paper's figure for model states, but there it is another sum, for mixed-precision training that keeps 16-bit weights and gradients and a 32-bit master copy of the weights:

# %%
conventions = {
    "fp32 training with Adam (this section)": {"weights": 4, "gradients": 4, "Adam's two moments": 8},
    "ZeRO's mixed precision (Rajbhandari et al., sec. 3)": {
        "fp16 weights": 2, "fp16 gradients": 2, "fp32 master weights": 4, "Adam's two moments": 8},
}
for name, parts in conventions.items():
    print(f"{name}:\n    {' + '.join(f'{b} ({part})' for part, b in parts.items())} = {sum(parts.values())} bytes per parameter")
assert [sum(parts.values()) for parts in conventions.values()] == [16, 16]

# %% [markdown]
# Same total, different tensors: which convention applies depends on the training loop. PyTorch's `torch.autocast` (lesson 04) keeps no master copy: its weights and gradients are fp32, so it is the first sum plus temporary 16-bit copies of the weights. Lesson 05a (section 2) sets the conventions side by side (16, 18, 20 bytes per parameter). Activations at batch 32 are small by comparison: 32 × 5000 × 4 bytes = 625 KiB per tensor.

# %%
per_layer = 5000 * 5000 + 5000
print(f"parameters per hidden layer: {per_layer:,}")
print(f"model states per layer at 16 bytes/parameter: {fmt_bytes(16 * per_layer)}")
print(f"activation of one layer at batch 32: {fmt_bytes(32 * 5000 * 4, 'KiB')}")
by_formula = 1 + int((V100 - CUDA_OVERHEAD_BYTES) // (16 * per_layer))
print(f"hidden layers that fit in a V100's {fmt_bytes(V100, 'GiB')} minus the overhead, by the formula: {by_formula}")


# %% [markdown]
# The formula forgets one thing. Measure the real step instead, and search for the deepest network that fits the simulated V100 (the input is our 64 digit features, the output 10 classes):

# %%
def deep_mlp(depth):
    builder = functools.partial(mlp, 64, (5000,) * depth, 10)
    builder.__name__ = f"mlp with {depth} hidden layers of 5000"
    return builder


def fits(depth, capacity):
    """Does a deep MLP's steady-state Adam step at batch 32 fit a simulated GPU of this capacity?"""
    try:
        profile_step(deep_mlp(depth), 32, input_shape=(64,), num_classes=10, optimizer="adam",
                     steady_state=True, device="simulated", capacity=capacity)
        return True
    except DoesNotFit:
        return False


fits_v100 = functools.partial(fits, capacity=V100)


low, high = 1, by_formula + 1  # fits, does not fit (checked below)
assert fits_v100(low) and not fits_v100(high)
while high - low > 1:
    middle = (low + high) // 2
    low, high = (middle, high) if fits_v100(middle) else (low, middle)
deepest = low
step = profile_step(deep_mlp(deepest), 32, input_shape=(64,), num_classes=10, optimizer="adam",
                    steady_state=True, device="simulated")
print(f"deepest that fits: {deepest} hidden layers, peak {fmt_bytes(step.peak_allocated_bytes, 'GiB')} "
      f"at {step.events[step.peak_event].phase}")
print(step.summary())
other = step.categories["other"]
print(f"'other' at the peak: {other:,} bytes; parameters: {step.categories['parameters']:,} bytes")
assert deepest < by_formula and deepest > 5 * 5
assert abs(other - step.categories["parameters"]) < 1024

# %% [markdown]
# The peak is not in backward but in `optimizer.step()`, and "other" holds as many bytes as the parameters. PyTorch's Adam updates all parameters at once with `torch._foreach_*` operations (the default on GPUs, because it launches far fewer kernels), and one of them, the square root of the second moments, writes a temporary tensor as big as all the parameters together. So during the step Adam costs **20 bytes per parameter**, not 16.
#
# So is "about 5 layers" right? Five such layers need:

# %%
five = profile_step(deep_mlp(5), 32, input_shape=(64,), num_classes=10, optimizer="adam",
                    steady_state=True, device="simulated")
print(f"5 hidden layers: peak {fmt_bytes(five.peak_allocated_bytes, 'GiB')}; {deepest} layers fit a V100")
assert five.peak_allocated_bytes < 2 * GiB

# %% [markdown]
# Less than 2 GiB. On a V100 the network can be more than six times deeper. For which GPU is "about 5" the answer?

# %%
for gib in (2, 3, 4):
    cap = gib * GiB
    depth = next(d for d in range(1, 50) if not fits(d, cap)) - 1
    print(f"{gib} GiB GPU: {depth} hidden layers fit")
    if gib == 3:
        assert depth == 5

# %% [markdown]
# So the usual answer fits a GPU of about 3 GiB (with our assumed overhead), or a network whose layers are much wider. The lesson to keep is not the number, it is the method: count parameters × bytes per parameter for the model states, add batch × activations, and **measure** what the formula forgets (here Adam's temporary).
#
# ## 5. The batch-size widget
#
# Everything above in one place. Move the batch-size slider (or type a value), and choose the model, AMP, activation checkpointing (lesson 04), the optimizer and the GPU size. The bar shows the peak of one steady-state training step by category, the red line the GPU's capacity, and the verdict whether it fits with the assumed overhead and the chosen card's cuBLAS workspaces (lesson 06). On a GPU each value is measured ("this GPU" compares with your card); elsewhere it is simulated, and most slider positions are interpolated exactly between traced batch sizes (the method of lesson 01, section 3), so the answer is immediate.

# %%
explorer = MemoryExplorer(model="resnet18", batch_size=128, device="simulated")
explorer

# %% [markdown]
# Widgets can be driven from code too. The widget's own traces give the straight line of lesson 01, section 3 (`explorer.curve()` is its `PeakCurve`); setting the slider to the largest batch the line allows on a V100 shows "fits", and one more sample does not:

# %%
curve = explorer.curve()
line = fit_affine([512, 1024], [curve.trace(b).peak_allocated_bytes for b in (512, 1024)])
edge = line.largest_batch(GPU_CARDS["V100 16 GB"])
explorer.batch_size.value = edge
print(explorer.message)
assert explorer.message.startswith("fits in V100 16 GB")
explorer.batch_size.value = edge + 1
print(explorer.message)
assert explorer.message.startswith("does not fit in V100 16 GB")
explorer.batch_size.value = 128

# %% [markdown]
# (To measure your own GPU with the widget, build it with `device="auto"`.)
#
#
# ## Exercises
#
# **Exercise 1: reading a message.** A learner reports: *"CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.19 GiB is free. Including non-PyTorch memory, this process has 22.45 GiB memory in use. Of the allocated memory 15.80 GiB is allocated by PyTorch, and 6.20 GiB is reserved by PyTorch but unallocated."* Would halving the batch size be the first thing to try?

# %%
# Your code here: compute what is free, cached, and outside PyTorch

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# total, free, in_use, allocated, cached = 23.65, 1.19, 22.45, 15.80, 6.20
# print(f"outside PyTorch (context, libraries): {in_use - allocated - cached:.2f} GiB")
# print(f"free plus cached: {free + cached:.2f} GiB, against a request of 2.00 GiB")
# assert free < 2.00 < cached / 3 + 0.01  # the request: more than what is free, a third of the cache
# ```
#
# No. PyTorch holds 6.20 GiB of cached, unallocated memory, three times the failing request, but none of its free blocks is large enough: the cache is **fragmented**. Try `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, as the full message advises, before giving up batch size (lesson 06a explains why it helps).
# </details>
#
# **Exercise 2: the 20 bytes on a bigger card.** Find the deepest MLP of 5,000-wide hidden layers that fits an RTX 4090 24 GB (`GPU_CARDS["RTX 4090 24 GB"]`) at batch 32 with Adam: section 4's `fits` takes a capacity. Which count predicts it, 16 bytes per parameter or 20?

# %%
# Your code here: search the depth as section 4 did, with fits(depth, capacity)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# rtx = GPU_CARDS["RTX 4090 24 GB"]
# by_bytes = {b: 1 + int((rtx - CUDA_OVERHEAD_BYTES) // (b * per_layer)) for b in (16, 20)}
# low, high = 1, by_bytes[16] + 1
# assert fits(low, rtx) and not fits(high, rtx)
# while high - low > 1:
#     middle = (low + high) // 2
#     low, high = (middle, high) if fits(middle, rtx) else (low, middle)
# print(f"deepest on an RTX 4090: {low} hidden layers; at 16 bytes per parameter {by_bytes[16]}, at 20 {by_bytes[20]}")
# assert (low, by_bytes[16], by_bytes[20]) == (50, 62, 50)
# ```
#
# 50 hidden layers, exactly what 20 bytes per parameter predict; 16 bytes promise 62. At this depth the parameters are nearly everything (the activations at batch 32 are 625 KiB a layer), so the count that includes foreach Adam's temporary, as large as the parameters, is the one that holds.
# </details>
#
# ## Key points
#
# - An out-of-memory message names one failing request, not the total need; compare it with *free* and with *reserved but unallocated* before deciding what to change.
# - A capped GPU's message adds an "allowed" field, which then decides: *free* can be large while the cap is reached.
# - `memory_allocated` counts live tensors; `memory_reserved` adds the caching allocator's cache. Simulation can show only the first.
# - Formulas for model states (16 bytes per parameter for fp32 Adam, 4 + 4 + 8; not to be confused with ZeRO's mixed-precision 2 + 2 + 12) are a floor: measure, because implementations add temporaries (20 bytes per parameter inside PyTorch's foreach Adam step).
#
# ## Further reading
#
# - HSF training, *Memory considerations* (the source of the deep-MLP challenge and the OOM example).
# - PyTorch documentation, *CUDA semantics: memory management*, https://pytorch.org/docs/stable/notes/cuda.html#memory-management
