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
# - Read the 25 lines of PyTorch that count a training step's memory.
#
# **Time:** about 35 minutes alone: 18 of reading, 12 of code, 1 to run all, 5 for the two exercises. **GPU:** not needed; used if present.

# %% [markdown]
# ## Setup
#
# Every lesson imports from `helpers`, the small package in this repository (installed by the README's commands).

# %%
import platform

import torch
import torchvision

from torch import nn

from helpers import GiB, Meter, MiB, fmt_bytes, profile_step, resolve_backend, tensor_bytes
from helpers.allocator.rules import allocation_size, block_bytes

_ = torch.manual_seed(0)

# %% [markdown]
# ## Your environment
#
# This cell's output depends on your machine (the tests do not check it). Its last line is the backend every lesson uses when it says `device="auto"`.

# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
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
# Every lesson asks: *how many bytes of GPU memory are allocated now, and what was the peak?*
#
# * With an NVIDIA GPU, the **`cuda`** backend reads PyTorch's own counters, `torch.cuda.memory_allocated()` and `torch.cuda.max_memory_allocated()`.
# * Everywhere else, the **`simulated`** backend runs the same code on *fake tensors* (PyTorch's `FakeTensorMode`): tensors with a shape, a dtype and a lifetime, but no data. It counts each new storage when it is created and subtracts it when it is freed.
#
# `Meter` is the one interface to both. Here it is simulated, so the numbers are the same on every machine:

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
# A float32 number takes 4 bytes, so 1024 × 1024 of them take 4 MiB. **1 MiB is 2²⁰ = 1,048,576 bytes**, the unit of PyTorch and `nvidia-smi`; a MB is 10⁶ bytes, almost 5% less, and sources often write MB for MiB.
#
# The peak is 8 MiB although 4 MiB is left: **the peak is what has to fit on the GPU**.

# %% [markdown]
# ## 2. Why a single number costs 512 bytes
#
# The CUDA caching allocator hands out memory in blocks that are multiples of 512 bytes, so a 4-byte tensor occupies 512 bytes of `memory_allocated()`. The simulation rounds the same way:

# %%
examples = {
    "one float32 number": torch.empty(1),
    "3 x 5 float16": torch.empty(3, 5, dtype=torch.float16),
    "conv1 output of ResNet18, batch 128": torch.empty(128, 64, 112, 112),
}
for label, t in examples.items():
    raw = t.numel() * t.element_size()
    print(f"{label:<38} {raw:>11,} bytes of data -> {tensor_bytes(t):>11,} bytes allocated")
assert tensor_bytes(torch.empty(1)) == 512 and tensor_bytes(torch.empty(3, 5, dtype=torch.float16)) == 512

# %% [markdown]
# The rounding matters for a model's many tiny tensors (biases, BatchNorm's counters). For large tensors a GPU has a second rule (`CUDACachingAllocator.cpp`, in `helpers.allocator.rules`): a request above 10 MiB gets a *segment* from the driver of its size rounded up to 2 MiB, and the rest is split off as a free block only if it is **more than 1 MiB**; otherwise the tensor's *block* keeps it, and `memory_allocated()` counts it. ResNet18's `layer2` output at batch 128, in a new segment:

# %%
layer2 = tensor_bytes(torch.empty(128, 128, 28, 28))
print(f"simulated {fmt_bytes(layer2)}; segment {fmt_bytes(allocation_size(layer2))}; "
      f"counted on a GPU {fmt_bytes(block_bytes(layer2))}")
assert layer2 == 49 * MiB and block_bytes(layer2) == allocation_size(layer2) == 50 * MiB   # 1 MiB rest: kept
assert block_bytes(int(24.5 * MiB)) == int(24.5 * MiB)                                     # 1.5 MiB rest: split off

# %% [markdown]
# So a GPU can count up to 1 MiB more than the simulation for each large tensor, depending also on what the allocator has cached: lesson 06 models it.

# %% [markdown]
# ## 3. Fake tensors have no values
#
# Inside a simulated `Meter`, a tensor can be as large as you like, because nothing is allocated. The price: it has no values, so anything that needs one (printing it, `.item()`, an `if` on its contents) is refused.

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
# The simulation runs PyTorch's **CPU kernels** on fake tensors. Where a CUDA kernel keeps other tensors for backward than the CPU's, it follows **CUDA's rules** (`helpers/engine/cuda_rules.py`): dropout keeps a 1-byte mask (lesson 02 measures it), autocast runs CUDA's list of operations in 16 bits (lesson 04b), and attention uses the kernel you name (lesson 08). Lessons 02 and 04b check their rules against forward passes on fake CUDA tensors, which need no GPU.
#
# | | simulated | real GPU (`cuda`) |
# |---|---|---|
# | every tensor of your code, with its lifetime, rounded to 512 bytes | exact | exact |
# | unsplit blocks (section 2); memory *reserved* by the allocator but not in use | modelled in lesson 06 | real |
# | cuBLAS workspaces (one per thread that multiplies matrices) | not in the traced peak; added to every "does it fit?" for the card you pick | included |
# | cuDNN workspaces (scratch memory inside a convolution) | **not seen**, not modelled | included |
# | NCCL buffers (several GPUs) | not seen | included |
# | copies a kernel makes of an operand it cannot read in place (cuBLAS needs each matrix dense in one direction: the expanded gradient of a `.sum()` loss is copied while the multiplication runs) | **not seen** | included |
# | scratch buffers of other kernels (a `sum` over a large batch, such as a bias gradient's, stages partial sums in a buffer of its own) | **not seen** | included |
# | the CUDA context (a few hundred MiB per process) | assumed, not seen | only in `nvidia-smi` |
#
# So a simulated peak is what `torch.cuda.max_memory_allocated()` would report for your code's tensors, to within section 2's unsplit blocks. The cuBLAS workspaces are known exactly for a card (lesson 06, section 1): a training step takes two, one for the forward pass on your thread and one for backward on autograd's, and the verdicts add them; on a GPU, plan a margin for the rest:

# %%
from helpers.gpus import COMPUTE_CAPABILITY, cublas_workspace_bytes

for card in ("V100 16 GB", "H100 80 GB"):
    print(f"{card}: a training step's two cuBLAS workspaces = {fmt_bytes(2 * cublas_workspace_bytes(COMPUTE_CAPABILITY[card]))}")
assert 2 * cublas_workspace_bytes(COMPUTE_CAPABILITY["H100 80 GB"]) == 64 * MiB

# %% [markdown]
# `make gpu-reference`, run on a machine with an NVIDIA GPU, records a list of training steps there with both backends: `max_memory_allocated` on the GPU, and the simulation of the same step. The *simulated* column is the allocator model's peak allocated (lesson 06: the tensors plus section 2's unsplit blocks, as the GPU counts them); *tensors* is the engine's peak alone, the figure every lesson uses. The last line names every run whose two peaks differ by more than 2%:

# %%
from helpers.teaching.reference import load_reference, reference_report, relative_difference

print(reference_report())

# %% [markdown]
# The simulation never claims more than the GPU used, beyond a few MiB, and for the language models it is the GPU's figure: GPT-2, and Llama-3.1 8B with LoRA and with QLoRA on bitsandbytes' 4-bit weights, land within 0.1%, a few MiB of 8 to 27 GiB. Where the GPU is higher, a library took scratch memory inside one kernel, the rows of the table above marked *not seen*. The convolutional networks show it most: cuDNN takes a workspace for a convolution and frees it when the kernel ends, and when that happens at the step's peak the peak grows by it. In the checkpointed ResNet18 (5% under) the peak falls inside the backward pass of a convolution, whose weight gradient needed a workspace there: a memory snapshot of that step on the same GPU shows the workspace's block as the allocation that set the peak. Lesson 02's dropout MLP has no convolution; its gap is the staging buffer of a reduction in the backward pass. So a simulated peak is a floor for the real one, to within a few MiB: on a card with little room left, keep a margin for the workspaces of convolutions (a verdict says so, lesson 06).

# %%
recorded = load_reference()
if recorded is not None:  # the figures above, as the text states them
    runs = [r for r in recorded["runs"] if not r.get("error")]
    differences = {(r["model"], r["config"]): relative_difference(r) for r in runs}
    assert all(r["simulated_allocated_bytes"] - r["cuda_peak_bytes"] < 5 * MiB for r in runs)  # over by a few MiB at most
    assert all(d > -0.08 for d in differences.values())
    assert all(abs(d) < 0.001 for (model, _), d in differences.items() if model in ("gpt2", "meta-llama/Llama-3.1-8B"))
    assert all(d < -0.03 for (model, config), d in differences.items() if model == "resnet18" and config == "checkpoint 4")

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
# Training needs about **62 times** the memory of the parameters. Where the other 98% goes is what the lessons are about.
#
# With a GPU, this cell measures the same step for real, and section 2's 49 MiB tensor (without one it says so):

# %% tags=["nbval-ignore-output"] nbval_reason="it measures this machine's GPU, and says so when there is none"
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
# Section 1's idea, each new storage counted from its creation until it is freed, is the whole engine, and it fits in one cell. A `TorchDispatchMode` sees every operation PyTorch runs below autograd, with its outputs. The first time it sees an output's *storage* (the memory a tensor shares with its views) it adds its size rounded up to 512 bytes, and `weakref.finalize` subtracts it when the storage is freed. Section 5's step, counted by plain PyTorch:

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
# The same number, byte for byte: a simulated peak is no formula's estimate but the storages PyTorch's own code keeps alive at once. Change the code, and the count follows.
#
# The package's version, `helpers/engine/counting.py`, adds bookkeeping, not another idea (dtypes and shapes for lesson 03's categories, storages resized in place for FSDP), and section 4's CUDA rules, which this step does not need.

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
# 64 × 3 × 256 × 256 = 12,582,912 numbers: at 4 bytes each 50,331,648 bytes = 48 MiB, in float16 (2 bytes) 24 MiB. Both are multiples of 512, so no rounding:
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
# 500 KiB (1000 × 512 bytes) for 4000 bytes of data: each tensor occupies a whole 512-byte block. Real models have such tensors: each of ResNet18's 20 BatchNorm layers keeps a one-number `num_batches_tracked` counter. This is why fused optimizers and FSDP pack small tensors into one buffer.
#
# ```python
# resnet = torchvision.models.resnet18()
# counters = [b for name, b in resnet.named_buffers() if name.endswith("num_batches_tracked")]
# print(len(counters), sum(tensor_bytes(b) for b in counters))   # 20 counters, 10,240 bytes for 160 bytes of data
# assert len(counters) == 20 and sum(tensor_bytes(b) for b in counters) == 20 * 512 and sum(b.nbytes for b in counters) == 160
# ```
#
# (Adam's per-parameter `step` counters are one-number tensors too; whether they sit on the GPU depends on the implementation: lesson 05a.)
# </details>
#
# ## Key points
#
# - The lessons measure bytes allocated, now and at peak, with `Meter` and `profile_step`: on a GPU PyTorch's own counters (`cuda`), elsewhere **simulated** on fake tensors with CUDA's rules.
# - Every allocation is rounded up to 512 bytes; on a GPU a large tensor can also keep up to 1 MiB of unsplit block.
# - The counting is one idea in 25 lines: a dispatch mode adds each new storage, a finalizer subtracts it when it is freed.
# - The simulation cannot see kernel workspaces, the CUDA context or the allocator's reserved pool: plan a margin for them.
# - 1 MiB = 2²⁰ bytes; 1 MB = 10⁶ bytes.
#
# ## Further reading
#
# - PyTorch documentation, *CUDA semantics: memory management* (`torch.cuda.memory_allocated`, `memory_reserved`): https://pytorch.org/docs/stable/notes/cuda.html#cuda-memory-management
# - PyTorch documentation, *Fake tensor*: https://pytorch.org/docs/stable/torch.compiler_fake_tensor.html
# - Next: lesson 01, mini-batching.
