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
# # 00 · Setup check: what will measure your memory?
#
# **Questions**
# - Which device will the lessons use on this machine, and what does "simulated" mean?
# - How can a laptop without a GPU tell how many bytes a GPU would need?
#
# **Objectives**
# - Run the environment check and read which backend (`cuda` or `simulated`) the lessons will use.
# - Measure the bytes of a few tensors with `helpers.Meter`, and explain the 512-byte rounding.
# - Say what the simulation counts exactly and what it cannot see.
#
# **Time:** 10 minutes teaching, 5 minutes exercises. **GPU:** not needed; used if present.

# %% [markdown]
# ## Setup
#
# Every lesson imports from `helpers`, the small package in this repository (installed by the README's commands).

# %%
import platform

import torch
import torchvision

from helpers import GiB, Meter, MiB, fmt_bytes, profile_step, resolve_backend, round_up, tensor_bytes

_ = torch.manual_seed(0)

# %% [markdown]
# ## Your environment
#
# This cell's output depends on your machine (it is not checked by the tests). Look at the last line: it is the backend every lesson will use when it says `device="auto"`.

# %%
# NBVAL_IGNORE_OUTPUT
print(f"python       {platform.python_version()}")
print(f"torch        {torch.__version__}")
print(f"torchvision  {torchvision.__version__}")
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    print(f"GPU          {props.name}, {fmt_bytes(props.total_memory, 'GiB')}")
else:
    print("GPU          none visible to PyTorch")
print(f"backend      {resolve_backend('auto')}")

# %% [markdown]
# ## 1. Two backends, one question
#
# The question every lesson asks is: *how many bytes of GPU memory are allocated right now, and what was the peak?*
#
# * On a machine with an NVIDIA GPU, the **`cuda`** backend reads PyTorch's own counters, `torch.cuda.memory_allocated()` and `torch.cuda.max_memory_allocated()`.
# * Everywhere else, the **`simulated`** backend runs the same code on *fake tensors* (`torch._subclasses.fake_tensor.FakeTensorMode`). A fake tensor has a shape, a dtype and a lifetime, but no data. Every operation still produces its outputs, so the helper can count each new storage when it is created and subtract it when it is freed.
#
# `Meter` is the one interface to both. Here it is in simulated mode, so the numbers are identical on every machine:

# %%
with Meter("simulated") as meter:
    x = torch.ones(1024, 1024, device=meter.device)  # 1024 * 1024 float32 values
    after_x = meter.allocated()
    y = x * 2  # a new tensor of the same size
    after_y = meter.allocated()
    del y  # freed at once: nothing refers to it any more
    after_del = meter.allocated()

print(f"backend: {meter.backend}")
print(f"after x = ones(1024, 1024): {fmt_bytes(after_x)}")
print(f"after y = x * 2:            {fmt_bytes(after_y)}")
print(f"after del y:                {fmt_bytes(after_del)}")
print(f"peak:                       {fmt_bytes(meter.peak())}")
assert after_x == 1024 * 1024 * 4 and after_y == 2 * after_x and after_del == after_x
assert meter.peak() == 8 * MiB

# %% [markdown]
# A float32 number takes 4 bytes, so a 1024 × 1024 tensor takes 4 MiB: **1 MiB is 2²⁰ = 1,048,576 bytes**, the unit PyTorch and `nvidia-smi` use. (A "MB" is 10⁶ bytes; the two differ by almost 5%, and the sources of these lessons often write MB when they mean MiB.)
#
# The peak is 8 MiB even though only 4 MiB is left: **the peak is what has to fit on the GPU**, not what is left at the end.

# %% [markdown]
# ## 2. Why a single number costs 512 bytes
#
# The CUDA caching allocator hands out memory in blocks that are multiples of 512 bytes. A 4-byte tensor therefore occupies 512 bytes of `memory_allocated()`, and the simulation rounds the same way:

# %%
examples = {
    "one float32 number": torch.empty(1),
    "3 x 5 float16": torch.empty(3, 5, dtype=torch.float16),
    "1000 float32": torch.empty(1000),
    "conv1 output of ResNet18, batch 128": torch.empty(128, 64, 112, 112),
}
for label, t in examples.items():
    raw = t.numel() * t.element_size()
    print(f"{label:<38} {raw:>11,} bytes of data -> {tensor_bytes(t):>11,} bytes allocated")
assert tensor_bytes(torch.empty(1)) == 512 and round_up(4000) == 4096

# %% [markdown]
# Rounding matters for the many tiny tensors of a model (BatchNorm statistics, step counters), and not at all for the big activations, whose sizes are already multiples of 512.

# %% [markdown]
# ## 3. Fake tensors have no values
#
# Inside a simulated `Meter`, a tensor can be as large as you like, because nothing is allocated. The price is that it has no values: anything that needs one (printing it, `.item()`, an `if` on its contents) is refused.

# %%
with Meter("simulated") as meter:
    huge = torch.empty(100 * GiB // 4, device=meter.device)  # 100 GiB of float32
    allocated = meter.allocated()
    print(f"a {fmt_bytes(huge.numel() * 4, 'GiB')} tensor on a laptop: allocated {fmt_bytes(allocated, 'GiB')}")
    try:
        huge.sum().item()
    except Exception as error:
        print(f"reading a value: refused ({type(error).__name__})")
    del huge
assert allocated == 100 * GiB

# %% [markdown]
# This is why the lessons can show ResNet18 at batch 4096, or a model that needs 80 GiB, on a machine with neither.

# %% [markdown]
# ## 4. What the simulation counts, and what it cannot see
#
# | | simulated | real GPU (`cuda`) |
# |---|---|---|
# | parameters, gradients, optimizer states | exact | exact |
# | activations and every other tensor, with their lifetimes | exact | exact |
# | 512-byte rounding of each allocation | modelled | real |
# | cuDNN / cuBLAS workspaces (scratch memory inside a kernel) | **not seen** | included |
# | the CUDA context (a few hundred MiB per process, outside PyTorch's counters) | not seen | not in `memory_allocated` either; visible in `nvidia-smi` |
# | memory *reserved* by the caching allocator but not in use | **not modelled** | `torch.cuda.memory_reserved()` |
# | out-of-memory errors | only against a capacity you choose | real |
#
# So a simulated peak is what `torch.cuda.max_memory_allocated()` would report for the tensors of your code; on a real GPU expect a little more (workspaces), and plan for the reserved pool and the context on top. Lesson 06 is about the allocator; the lessons that show both backends say where they differ.

# %% [markdown]
# ## 5. A first training step
#
# The rest of the package measures whole training steps. This one runs ResNet18 on a batch of 128 images of 224 × 224 pixels: forward, loss, backward, optimizer step. Simulated, so the result is the same everywhere:

# %%
step = profile_step("resnet18", batch_size=128, device="simulated")
print(f"ResNet18: {step.parameter_count:,} parameters = {fmt_bytes(step.categories['parameters'])} (with BatchNorm buffers)")
print(f"one training step at batch 128: peak {fmt_bytes(step.peak_allocated_bytes)} ({step.backend})")
print(f"peak / parameters: {step.peak_allocated_bytes / step.categories['parameters']:.0f}x")
assert step.peak_allocated_bytes > 60 * step.categories["parameters"]

# %% [markdown]
# Training needs about **62 times** the memory of the parameters. Finding out where the other 98% goes is what the lessons are for.
#
# If you have a GPU, this cell measures the same step for real (on a machine without one it says so):

# %%
# NBVAL_IGNORE_OUTPUT
if torch.cuda.is_available():
    real = profile_step("resnet18", batch_size=128, device="cuda")
    print(f"measured on {torch.cuda.get_device_name(0)}: peak {fmt_bytes(real.peak_allocated_bytes)}, "
          f"reserved {fmt_bytes(real.reserved_bytes)}")
    print(f"simulated: peak {fmt_bytes(step.peak_allocated_bytes)}")
else:
    print("no GPU here: the lessons will use the simulated backend")

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** How many bytes does a batch of 64 RGB images of 256 × 256 pixels take in float32? And in float16? Predict, then check with `tensor_bytes`.

# %%
prediction_float32 = None  # your answer, in bytes
batch = torch.empty(64, 3, 256, 256)
print(f"float32: {tensor_bytes(batch):,} bytes; you predicted {prediction_float32}")

# %% [markdown]
# <details><summary>Solution</summary>
#
# 64 × 3 × 256 × 256 = 12,582,912 numbers. At 4 bytes each that is 50,331,648 bytes = 48 MiB; in float16 (2 bytes) 24 MiB. Both are multiples of 512, so no rounding:
#
# ```python
# assert tensor_bytes(torch.empty(64, 3, 256, 256)) == 48 * MiB
# assert tensor_bytes(torch.empty(64, 3, 256, 256, dtype=torch.float16)) == 24 * MiB
# ```
# </details>
#
# **Exercise 2.** Inside a simulated `Meter`, make 1000 tensors of one float each and keep them in a list. How much is allocated? How much data do they hold?

# %%
with Meter("simulated") as meter:
    tiny = [torch.zeros(1, device=meter.device) for _ in range(1000)]
    print(f"allocated: {fmt_bytes(meter.allocated(), 'KiB')} for {len(tiny) * 4} bytes of data")

# %% [markdown]
# <details><summary>Solution</summary>
#
# 500 KiB (1000 × 512 bytes) for 4000 bytes of data: each tensor occupies a whole 512-byte block. This is one reason why optimizers that keep one small tensor per parameter (a step counter, for example) cost more than their values suggest, and why frameworks group small tensors together.
# </details>
#
# ## Key points
#
# - The lessons measure one thing, bytes allocated (now and at peak), with one interface: `Meter`, `profile_step`.
# - On a GPU the numbers are PyTorch's own counters (`cuda` backend); elsewhere they are **simulated** on fake tensors, exact for the tensors of your code.
# - Every allocation is rounded up to 512 bytes, as the CUDA caching allocator does.
# - The simulation cannot see kernel workspaces, the CUDA context or the allocator's reserved pool: plan a margin for them.
# - 1 MiB = 2²⁰ bytes; 1 MB = 10⁶ bytes.
#
# ## Further reading
#
# - PyTorch documentation, *CUDA semantics: memory management* (`torch.cuda.memory_allocated`, `memory_reserved`): https://pytorch.org/docs/stable/notes/cuda.html#cuda-memory-management
# - PyTorch documentation, *Fake tensor*: https://pytorch.org/docs/stable/torch.compiler_fake_tensor.html
# - Next: lesson 03, ResNet18 layer by layer.
