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
# # 00 · Setup check: what will measure your memory?
#
# **Questions**
# - Which device will the lessons use on this machine, and what does "simulated" mean?
# - How can a laptop without a GPU tell how many bytes a GPU would need?
#
# **Objectives**
# - Run the environment check and read which backend (`cuda` or `simulated`) the lessons will use.
# - Measure the bytes of a few tensors with `helpers.Meter`, and explain the 512-byte rounding.
# - Say what the simulation counts exactly, where a GPU's kernels and allocator differ from it, and what it cannot see.
# - Read the 25 lines of PyTorch that count a training step's memory, and check them against `profile_step`.
#
# **Time:** 15 minutes teaching, 5 minutes exercises. **GPU:** not needed; used if present.

# %% [markdown]
# ## Setup
#
# Every lesson imports from `helpers`, the small package in this repository (installed by the README's commands).

# %%
import platform

import torch
import torchvision

from torch import nn

from helpers import GiB, Meter, MiB, fmt_bytes, profile_step, resolve_backend, round_up, tensor_bytes
from helpers.allocator.rules import allocation_size, block_bytes
from helpers.saved import forward_saved_bytes

_ = torch.manual_seed(0)

# %% [markdown]
# ## Your environment
#
# This cell's output depends on your machine (it is not checked by the tests). Look at the last line: it is the backend every lesson will use when it says `device="auto"`.

# %%
# NBVAL_IGNORE_OUTPUT
# (why: versions and devices differ between machines)
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
# Rounding to 512 bytes matters for the many tiny tensors of a model (BatchNorm statistics and counters, biases). The big activations are already multiples of 512 bytes, but a GPU can still count more for them, because of a second rule of the allocator. It gets memory from the driver in *segments* (`cudaMalloc`): a request above 10 MiB gets a segment of its own size rounded up to 2 MiB. The tensor takes a *block* at the start of the segment, and the rest of the segment is split off as a free block only if it is **more than 1 MiB**; otherwise the tensor's block keeps it, and `memory_allocated()` counts the whole block. Three activation sizes of ResNet18 at batch 128, each in a new segment (the rules are those of `c10/cuda/CUDACachingAllocator.cpp`, in `helpers.allocator.rules`):

# %%
activations = {
    "conv1 output": (128, 64, 112, 112),
    "layer2 output": (128, 128, 28, 28),
    "layer3 output": (128, 256, 14, 14),
}
print(f"{'tensor':<14} {'shape':<20} {'simulated':>10} {'segment':>10} {'counted on a GPU':>17}")
for label, shape in activations.items():
    size = tensor_bytes(torch.empty(shape))
    print(f"{label:<14} {str(shape):<20} {fmt_bytes(size):>10} {fmt_bytes(allocation_size(size)):>10} "
          f"{fmt_bytes(block_bytes(size)):>17}")
assert block_bytes(49 * MiB) == allocation_size(49 * MiB) == 50 * MiB   # 1 MiB rest: kept in the block
assert block_bytes(int(24.5 * MiB)) == int(24.5 * MiB)                 # 1.5 MiB rest: split off

# %% [markdown]
# The 49 MiB tensor occupies 50 MiB on a GPU; the simulation counts 49 MiB, because it applies the 512-byte rule only. So a GPU's `memory_allocated()` can exceed the simulated figure by up to 1 MiB for each such tensor, and which block a tensor gets also depends on what the allocator has cached from earlier steps: the allocator lesson (06) simulates that. The GPU cell of section 5 measures the 49 MiB case on your card.

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
# The simulation runs PyTorch's **CPU kernels** on fake tensors. For most operations a CUDA kernel keeps the same tensors for backward as the CPU kernel, but not for all. Where they differ, the simulated backend makes the CPU follow **CUDA's rules** (`helpers/engine/cuda_rules.py`). Check it: `forward_saved_bytes` runs one forward pass and sums what autograd keeps for backward, on the CPU's kernels, on a fake GPU (fake `cuda` tensors: a forward pass needs no GPU), and as the simulation runs it:

# %%
def saved(dtypes):
    return ", ".join(f"{fmt_bytes(n, 'KiB')} {str(d).removeprefix('torch.')}" for d, n in dtypes.items())


devices = ("cpu", "cuda", "simulated")
dropout = {dev: forward_saved_bytes(lambda: nn.Dropout(0.5), (64, 512), device=dev, input_requires_grad=True)
           for dev in devices}
print("Dropout(0.5) on a (64, 512) float32 input keeps for backward:")
for dev in devices:
    print(f"  {dev:<10} {saved(dropout[dev])}")
assert dropout["cpu"] == {torch.float32: 4 * 64 * 512} and dropout["cuda"] == dropout["simulated"] == {torch.bool: 64 * 512}

print("\nUnder float16 autocast, Linear(512, 512) on a (64, 512) input, then:")
print(f"  {'':<10} {'CPU':>22} {'CUDA':>22} {'simulated':>22}   (bytes kept, of them float32)")
followers = {"Softmax": nn.Softmax(dim=-1), "LogSoftmax": nn.LogSoftmax(dim=-1),
             "LayerNorm": nn.LayerNorm(512, elementwise_affine=False), "GroupNorm": nn.GroupNorm(8, 512, affine=False)}
for name, layer in followers.items():
    row = {dev: forward_saved_bytes(lambda layer=layer: nn.Sequential(nn.Linear(512, 512), layer), (64, 512),
                                    device=dev, autocast_dtype=torch.float16) for dev in devices}
    cells = [f"{fmt_bytes(sum(r.values()), 'KiB')}, {fmt_bytes(r.get(torch.float32, 0), 'KiB')}" for r in row.values()]
    print(f"  {name:<10} " + " ".join(f"{c:>22}" for c in cells))
    assert torch.float32 not in row["cpu"] and row["cuda"][torch.float32] >= 64 * 512 * 4   # float32 output on CUDA
    assert row["simulated"] == row["cuda"]
bf16 = forward_saved_bytes(lambda: nn.Sequential(nn.Linear(512, 512), nn.Softmax(dim=-1)), (64, 512), device="cuda",
                           autocast_dtype=torch.bfloat16)
print(f"\nSoftmax on CUDA under bfloat16 autocast keeps {saved(bf16)}: the same bytes as under float16")
assert sum(bf16.values()) == sum(forward_saved_bytes(lambda: nn.Sequential(nn.Linear(512, 512), nn.Softmax(dim=-1)),
                                                     (64, 512), device="cuda", autocast_dtype=torch.float16).values())

# %% [markdown]
# * **Dropout** keeps its mask: the CPU kernel keeps it as float32 (4 bytes per element), CUDA's `native_dropout` as bool (1 byte). The simulation calls `native_dropout`, as a GPU does.
# * **Autocast** follows a list of operations per device. CUDA's autocast runs `softmax`, `log_softmax`, `layer_norm` and `group_norm` (and, in PyTorch's autocast op reference, `exp`, `sum` and others) in float32; the CPU's lets them run in 16 bits when their input is 16-bit. The simulation follows CUDA's lists, so a transformer under AMP keeps what it would on a GPU (lesson 04 measures a vision transformer). float16 and bfloat16 take the same 2 bytes: the difference is the device's list, not the 16-bit type.
# * **Attention**: `scaled_dot_product_attention` chooses among several kernels by device, dtype and shape, and they keep very different tensors: the fused kernels (flash, memory-efficient) keep the inputs, the output and one number per row; the math kernel keeps the whole sequence × sequence matrix of scores. A GPU picks for itself; the simulation takes the kernel you name (`attention=`; by default a fused one, as a recent GPU picks for training); lesson 08 measures both.
# * Two more: Adam's per-parameter `step` counters live in host memory on a GPU with the default `foreach` (or for-loop) implementation, and the simulation does not count them there (with `fused=True` or `capturable=True` PyTorch creates them on the GPU, and they are counted); AMP in float16 uses a `GradScaler`, whose few scalar tensors the simulation creates as PyTorch's does.
#
# Why not run the whole step on fake CUDA tensors, then? Because backward does not run without a GPU: the autograd engine asks the CUDA runtime about device 0 (PyTorch issue #92627). So the fake GPU serves as the reference the simulation is checked against, one forward pass at a time (the tests do it for ResNet18, EfficientNet, ConvNeXt, Swin and ViT: within 0.1%; the rest is BatchNorm's saved statistics, float32 on a GPU and float16 here, a few KiB).
#
# In full:
#
# | | simulated | real GPU (`cuda`) |
# |---|---|---|
# | parameters, gradients, optimizer states | exact | exact |
# | activations and every other tensor, with their lifetimes | the CPU's kernels with CUDA's rules for dropout, autocast, attention (above) | exact |
# | 512-byte rounding of each allocation | modelled | real |
# | large blocks not split (section 2), cached blocks reused | not in the step's figures; lesson 06 replays the step through a model of the allocator | real |
# | cuDNN / cuBLAS workspaces (scratch memory inside a kernel) | **not seen** | included |
# | the CUDA context (a few hundred MiB per process, outside PyTorch's counters) | not seen | not in `memory_allocated` either; visible in `nvidia-smi` |
# | memory *reserved* by the caching allocator but not in use | not in the step's figures; modelled in lesson 06 (`helpers.allocator`) | `torch.cuda.memory_reserved()` |
# | out-of-memory errors | only against a capacity you choose | real |
#
# So a simulated peak is what `torch.cuda.max_memory_allocated()` would report for the tensors of your code, to within the unsplit blocks of section 2 (and, for attention, if your GPU picks the kernel you named); on a real GPU expect a little more (workspaces, blocks), and plan for the reserved pool and the context on top. The lessons that show both backends say where they differ.
#
# **Recorded on a real GPU.** `make gpu-reference`, run once on a machine with an NVIDIA GPU, records about thirty training steps (ResNet18 in lesson 04's configurations at three batch sizes, five other vision models, GPT-2, lesson 02's dropout MLP) with both backends *on that machine*, with the same PyTorch, into `lessons/data/gpu_reference.json`. This cell shows them. A difference between the two columns is what the simulation leaves out there: the table above says where to look (workspaces and unsplit blocks make the GPU's peak higher; a kernel that keeps other tensors than the simulation assumes, such as another attention kernel, moves it either way). The last line names every run that differs by more than 2%.

# %%
from helpers.teaching.reference import reference_report

print(reference_report())

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
# If you have a GPU, this cell measures the same step for real, and the 49 MiB tensor of section 2 (on a machine without one it says so):

# %%
# NBVAL_IGNORE_OUTPUT
# (why: it measures this machine's GPU, and says so when there is none)
if torch.cuda.is_available():
    real = profile_step("resnet18", batch_size=128, device="cuda")
    print(f"measured on {torch.cuda.get_device_name(0)}: peak {fmt_bytes(real.peak_allocated_bytes)}, "
          f"reserved {fmt_bytes(real.reserved_bytes)}")
    print(f"simulated: peak {fmt_bytes(step.peak_allocated_bytes)}")
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    t = torch.empty(49 * MiB, dtype=torch.uint8, device="cuda")
    print(f"a 49 MiB tensor: memory_allocated() grew by {fmt_bytes(torch.cuda.memory_allocated() - before)} "
          f"(simulated: {fmt_bytes(tensor_bytes(t))})")
    del t
else:
    print("no GPU here: the lessons will use the simulated backend")

# %% [markdown]
# ## 6. The counting itself
#
# Section 1 said how the simulation counts: each new storage when it is created, until it is freed. That idea is the whole engine, and it fits in one cell. A `TorchDispatchMode` sees every operation that PyTorch runs below autograd, with its outputs. For each output tensor it takes the tensor's *storage*, the memory a tensor shares with its views; the first time it sees a storage it adds its size rounded up to 512 bytes (section 2), and `weakref.finalize` subtracts it when the storage is freed. Under it, `FakeTensorMode` gives tensors shapes and lifetimes but no data (section 3). Section 5's step, counted by plain PyTorch:

# %%
import weakref

from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class CountStorages(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live, self.allocated, self.peak = {}, 0, 0  # live: id(storage) -> bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))  # run the operation
        for t in tree_flatten(out)[0]:  # every tensor it returned
            if isinstance(t, torch.Tensor) and id(storage := t.untyped_storage()) not in self.live:
                self.live[id(storage)] = (storage.nbytes() + 511) // 512 * 512  # new: round up to 512 bytes
                self.allocated += self.live[id(storage)]
                self.peak = max(self.peak, self.allocated)
                weakref.finalize(storage, self.free, id(storage))  # called when the storage is freed
        return out

    def free(self, key):
        self.allocated -= self.live.pop(key)


with torch.device("meta"):
    resnet = torchvision.models.resnet18()  # shapes only: no memory, no initialisation
with FakeTensorMode(allow_non_fake_inputs=True), CountStorages() as counter:  # meta tensors may come in
    resnet = resnet.to_empty(device="cpu")  # parameters and buffers: fake tensors, counted
    optimizer = torch.optim.SGD(resnet.parameters(), lr=0.01, momentum=0.9, foreach=True)
    images, labels = torch.randn(128, 3, 224, 224), torch.randint(0, 1000, (128,))
    nn.functional.cross_entropy(resnet(images), labels).backward()
    optimizer.step()
    optimizer.zero_grad()

print(f"peak: {counter.peak:,} bytes in this cell, {step.peak_allocated_bytes:,} from profile_step")
assert counter.peak == step.peak_allocated_bytes

# %% [markdown]
# The same number, byte for byte. So a simulated peak is no formula's estimate: it is the sum of the storages that PyTorch's own code keeps alive at once, at the step's highest moment. Change the code, and the count follows.
#
# The package's version is `helpers/engine/counting.py`, about 200 lines, half of them explanation: read it next. It adds bookkeeping, not another idea: each storage's dtype and shape (lesson 03's categories come from them), storages resized in place (FSDP, lesson 07), the tensors inside a `DTensor`. `profile_step` also applies section 4's CUDA rules (`helpers/engine/cuda_rules.py`), which this step does not need: ResNet18 has no dropout and no attention, the step no autocast, and SGD no step counters.

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
# 500 KiB (1000 × 512 bytes) for 4000 bytes of data: each tensor occupies a whole 512-byte block. Real models have such tensors too: each of ResNet18's 20 BatchNorm layers keeps a one-number `num_batches_tracked` counter (8 bytes in a 512-byte block), and every bias is a small tensor of its own. This is why frameworks that care (fused optimizers, FSDP) pack small tensors into one large buffer.
#
# ```python
# resnet = torchvision.models.resnet18()
# counters = [b for name, b in resnet.named_buffers() if name.endswith("num_batches_tracked")]
# print(len(counters), sum(tensor_bytes(b) for b in counters))   # 20 counters, 10,240 bytes for 160 bytes of data
# assert len(counters) == 20 and sum(tensor_bytes(b) for b in counters) == 20 * 512 and sum(b.nbytes for b in counters) == 160
# ```
#
# (Adam's per-parameter `step` counters are *not* such an example on a GPU: unless the optimizer is created with `fused=True` or `capturable=True`, PyTorch keeps them in host memory.)
# </details>
#
# ## Key points
#
# - The lessons measure one thing, bytes allocated (now and at peak), with one interface: `Meter`, `profile_step`.
# - On a GPU the numbers are PyTorch's own counters (`cuda` backend); elsewhere they are **simulated** on fake tensors, exact for the tensors of your code.
# - Every allocation is rounded up to 512 bytes, as the CUDA caching allocator does; on a GPU a large tensor can also keep up to 1 MiB of unsplit block with it.
# - The counting is one idea, about 25 lines of PyTorch: a dispatch mode adds each new storage (rounded up to 512 bytes) and a finalizer subtracts it when it is freed; `helpers/engine/counting.py` is the package's version.
# - The simulation runs the CPU's kernels with CUDA's rules where the two differ (dropout masks, autocast's op lists, the attention kernel, Adam's host-side step counters), checked against a fake GPU's forward pass.
# - The simulation cannot see kernel workspaces, the CUDA context or the allocator's reserved pool: plan a margin for them.
# - 1 MiB = 2²⁰ bytes; 1 MB = 10⁶ bytes.
#
# ## Further reading
#
# - PyTorch documentation, *CUDA semantics: memory management* (`torch.cuda.memory_allocated`, `memory_reserved`): https://pytorch.org/docs/stable/notes/cuda.html#cuda-memory-management
# - PyTorch documentation, *Fake tensor*: https://pytorch.org/docs/stable/torch.compiler_fake_tensor.html
# - PyTorch documentation, *Automatic Mixed Precision: autocast op reference* (which operations run in which precision, per device): https://pytorch.org/docs/stable/amp.html#autocast-op-reference
# - Next: lesson 01, mini-batching.
