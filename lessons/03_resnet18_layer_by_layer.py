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
# # 03 · ResNet18, layer by layer: where one training step's memory goes
#
# **Questions**
# - ResNet18 has 44.6 MiB of parameters. Why does one training step at batch 128 need about 2.7 GiB?
# - Which layers hold that memory, when is the peak, and what is in it?
#
# **Objectives**
# - Read a per-module memory log of one training step (`pre`, `fwd`, `bwd` events).
# - Derive every large change in the log from a tensor shape and a dtype, and check it.
# - Explain why the first layers dominate, where the peak happens, and what it holds.
# - Compare with the published ResNet18 figures, and say where and why they differ.
#
# **Time:** about 55 minutes alone: 26 of reading, 14 of code, 3 for the figures, 1 to run all, 15 for the three exercises. **GPU:** not needed (simulated); a GPU, if present, is measured in section 7.
#
# This lesson re-derives, and checks, the ResNet18 analysis of Quentin Febvre's article *Deep Learning Memory Usage and Pytorch Optimization Tricks* (Sicara, 2019).

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import math
import warnings

import torch
import torch.nn.functional as F

from helpers import Meter, MiB, fmt_bytes, profile_step, round_up
from helpers.models import build_model
from helpers.teaching.plots import plot_categories, plot_stages, plot_timeline

_ = torch.manual_seed(0)


def nbytes(shape, dtype=torch.float32):
    """Bytes a tensor of this shape and dtype occupies on the GPU (rounded up to 512)."""
    return round_up(math.prod(shape) * dtype.itemsize)


# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
import torchvision
print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, GPU: {torch.cuda.is_available()}")

# %% [markdown]
# ## 1. One training step, recorded
#
# A training step does five things: put a batch on the device, run the forward pass and the loss, run `loss.backward()`, call `optimizer.step()`, and clear the gradients with `optimizer.zero_grad(set_to_none=True)`.
#
# `profile_step` runs exactly that, for ResNet18 from `torchvision` with a batch of 128 images of 3 × 224 × 224 pixels and SGD with momentum, and records an event for every module:
#
# * `pre`: just before the module's forward;
# * `fwd`: just after it (with the output's shape);
# * `bwd`: once backward has computed the gradients of the module's inputs and parameters.
#
# Each event carries the bytes allocated at that moment and the change (delta) since the previous event. We use the simulated backend here so that every number below is exact and the same on every machine; section 7 repeats the measurement on a real GPU if you have one.

# %%
step = profile_step("resnet18", batch_size=128, device="simulated")
print(f"{len(step.events)} events, backend: {step.backend}")
print(step.table(events=slice(0, 26)))

# %% [markdown]
# Read it like a bank statement. Event 0 is the model arriving on the device (parameters and BatchNorm buffers, 44.6 MiB); event 1 is the input batch and its labels. Then each module's forward adds what it leaves behind: **conv1 +392 MiB, bn1 +392 MiB, relu +0, maxpool +294 MiB, and +98 MiB for each convolution and BatchNorm of `layer1`**. These are the figures published in the article; here is where each one comes from.

# %% [markdown]
# ## 2. Every delta is a shape
#
# A float32 tensor of shape (N, C, H, W) takes N·C·H·W·4 bytes. The first convolution turns (128, 3, 224, 224) into (128, 64, 112, 112):

# %%
stem = (128, 64, 112, 112)
print(f"conv1 output {stem}: {fmt_bytes(nbytes(stem))}; log says {fmt_bytes(step.find('conv1', 'fwd').delta_bytes, sign=True)}")
assert step.find("conv1", "fwd").delta_bytes == nbytes(stem) == 392 * MiB

# %% [markdown]
# That output cannot be freed when bn1 starts: **BatchNorm needs its input to compute the gradient of its weight** (the gradient of γ is the sum of the upstream gradient times the normalised input). So bn1 adds its own 392 MiB output, plus two per-channel vectors it saves for backward (the batch mean and inverse standard deviation, 64 floats each, one 512-byte block each):

# %%
bn1 = step.find("bn1", "fwd").delta_bytes
print(f"bn1: output {fmt_bytes(nbytes(stem))} + mean and inverse std {2 * nbytes((64,))} bytes = {bn1:,} bytes")
assert bn1 == nbytes(stem) + 2 * nbytes((64,))

# %% [markdown]
# The ReLU adds **nothing**. torchvision's ResNet uses `ReLU(inplace=True)`: it overwrites bn1's output with max(x, 0) instead of allocating a new tensor. Its backward needs only to know where the output was positive, and it reads that from the output itself, so it keeps no extra tensor. (bn1 saved its *input*, conv1's output, not its output, so overwriting the output is safe.)

# %%
relu = step.find("relu", "fwd")
print(f"relu (in place): {fmt_bytes(relu.delta_bytes, sign=True)}, output shape {relu.shape}")
assert relu.delta_bytes == 0

# %% [markdown]
# Max pooling halves height and width, so its output is a quarter of 392 MiB: 98 MiB. But the log says +294 MiB. For backward, `MaxPool2d` must know *which* input won each 3 × 3 window, and it stores that as an int64 index per output element: 8 bytes each, twice the size of the float32 output.

# %%
pooled = (128, 64, 56, 56)
values, indices = nbytes(pooled), nbytes(pooled, torch.int64)
print(f"maxpool output (float32) {fmt_bytes(values)} + indices (int64) {fmt_bytes(indices)} = {fmt_bytes(values + indices)}")
assert step.find("maxpool", "fwd").delta_bytes == values + indices == 294 * MiB

# %% [markdown]
# Two thirds of the "294 MB" in the published log is bookkeeping, not activations. From here on, `layer1` keeps the spatial size (56 × 56, 64 channels): every convolution and BatchNorm keeps a new 98 MiB tensor.

# %%
for name in ("layer1.0.conv1", "layer1.0.bn1", "layer1.0.conv2", "layer1.0.bn2"):
    e = step.find(name, "fwd")
    print(f"{name:<15} {fmt_bytes(e.delta_bytes, sign=True):>11}  output {e.shape}")
    assert abs(e.delta_bytes - nbytes(pooled)) <= 2 * 512

# %% [markdown]
# **The rule behind all of this:** a layer's backward needs some of the tensors its forward saw. A convolution or linear layer y = Wx + b needs x to compute ∂L/∂W = (∂L/∂y)·xᵀ; BatchNorm needs its input; max pooling needs its indices. Autograd keeps these *saved tensors* alive from the forward pass until that layer's backward has run. Those are the **activations**, and lesson 02 measures what each kind of layer saves.

# %% [markdown]
# ## 3. The whole step at a glance
#
# The timeline shows every event's allocated memory. It climbs during the forward pass (each layer adds what it saves) and falls during the backward pass (each layer's backward releases what its forward saved).

# %%
plot_timeline(step, title="ResNet18, batch 128, one training step (simulated)")

# %% [markdown]
# Look at the climb: steep at first, then flatter, up to the peak (the dot) early in the backward pass. Why? Sum what each top-level stage of the network keeps after its forward, and compare with where the parameters are:

# %%
with torch.device("meta"):  # shapes only: no memory, no initialisation
    model = build_model("resnet18")
params_per_stage = {}
for name, p in model.named_parameters():
    stage = name.split(".")[0]
    params_per_stage[stage] = params_per_stage.get(stage, 0) + p.numel() * p.element_size()

kept = step.stage_deltas("fwd")
total_kept = sum(kept.values())
total_params = sum(params_per_stage.values())
print(f"{'stage':<8} {'kept in forward':>16} {'share':>6}  {'parameters':>11} {'share':>6}")
for stage, b in kept.items():
    p = params_per_stage.get(stage, 0)
    print(f"{stage:<8} {fmt_bytes(b):>16} {b / total_kept:>6.1%}  {fmt_bytes(p):>11} {p / total_params:>6.1%}")
early = sum(kept[s] for s in ("conv1", "bn1", "relu", "maxpool", "layer1"))
print(f"stem + layer1: {early / total_kept:.0%} of the activations, "
      f"{sum(params_per_stage.get(s, 0) for s in ('conv1', 'bn1', 'layer1')) / total_params:.1%} of the parameters")
assert early / total_kept > 0.6 and params_per_stage["layer4"] / total_params > 0.7

# %%
plot_stages(step)

# %% [markdown]
# Look at the bars: the stem and `layer1` keep the most and each later stage less, the opposite of the parameters (the table above). Activations scale with batch × channels × height × width. Each ResNet stage halves height and width (a quarter of the pixels) and doubles the channels, so each stage keeps about half as much as the one before; the stem, at 112 × 112, keeps the most. Parameters scale with channels_in × channels_out × kernel size, and grow by about 4× per stage: `layer4` alone holds more than 70% of them (the table above).
#
# So **the memory of training is dominated by the early, high-resolution, cheap-in-parameters layers**. Shrinking parameters (a smaller `fc`, fewer channels in `layer4`) barely changes the peak; the batch size and the input resolution do.

# %% [markdown]
# ## 4. The backward pass gives memory back
#
# Here is the end of the backward pass, stem last. Negative deltas are saved tensors being freed once their layer's backward has run:

# %%
print(step.table(phases=("bwd",), events=slice(216, 234)))

# %% [markdown]
# In the stem, relu's backward frees the tensor it saved (bn1's output, which it overwrote in place), bn1's backward frees its saved input (conv1's output), and conv1's backward frees the last gradient flowing through the stem: 392 MiB each. One delta is positive: **maxpool's backward +98 MiB**. It creates the gradient with respect to its input, a full (128, 64, 112, 112) float32 tensor (392 MiB), and releases its int64 indices (196 MiB) and the incoming gradient (98 MiB):

# %%
mp = step.find("maxpool", "bwd").delta_bytes
print(f"+{fmt_bytes(nbytes(stem))} - {fmt_bytes(indices)} - {fmt_bytes(nbytes(pooled))} = {fmt_bytes(mp, sign=True)}")
assert mp == nbytes(stem) - indices - nbytes(pooled)

# %% [markdown]
# The published log shows the same "MaxPool2d bwd 98.0" without an explanation; now it has one.

# %% [markdown]
# ## 5. Where the peak is, and what it holds
#
# The peak is not at the end of the forward pass, but a little into the backward pass: every activation is still saved, and backward has started allocating gradients (of the parameters, and of the activations flowing backward) before the first saved tensors are released.

# %%
print(step.summary())
for name in ("activations", "parameters"):
    print(f"{name} share of the peak: {step.categories[name] / step.peak_allocated_bytes:.1%}")
loss_event = step.find(None, "loss").index
assert step.peak_event > loss_event  # the peak happens during backward
assert step.categories["activations"] > 0.9 * step.peak_allocated_bytes

# %%
plot_categories(step)

# %% [markdown]
# Look at the dashed line, the peak: there saved activations are almost all of the memory, and parameters a sliver (the shares are printed above); the gradients that exist so far (only those of the last layers: backward runs from the output towards the input) and the "other" tensors (gradients flowing between layers, the loss) are small. SGD's momentum buffers (one per parameter, 44.6 MiB) do not exist yet: they are created by the first `optimizer.step()`, after the peak. The categories are those of the ZeRO paper (Rajbhandari et al., 2020): *model states* (parameters, gradients, optimizer states) and *residual states* (activations, temporary buffers).
#
# After the step, what stays is the model states and the batch: parameters, momentum, the input.

# %%
end = step.event_categories[-1]
for name, b in end.items():
    print(f"{name:<17} {fmt_bytes(b):>11}")
assert end["activations"] == 0 and end["gradients"] == 0 and end["optimizer_states"] > 0

# %% [markdown]
# ## 6. The published figure: "a maximum memory of about 2500 MB"
#
# The article reads its peak off its timeline plot. Our figure for the same model, batch and image size:

# %%
published_mib = 2500  # the article divides by 2**20, so its "MB" are MiB
ours = step.peak_allocated_bytes / MiB
highest_event = max(e.allocated_bytes for e in step.events) / MiB
print(f"published (read off a plot): about {published_mib} MiB")
print(f"ours, true peak:             {ours:.1f} MiB ({ours / published_mib - 1:+.0%})")
print(f"ours, highest at an event:   {highest_event:.1f} MiB")
print(f"ours in MB (10**6 bytes):    {step.peak_allocated_bytes / 1e6:.0f} MB")
assert abs(ours / published_mib - 1) < 0.15


# %% [markdown]
# Every *forward* delta we checked above is the article's. Its backward log of the stem is not: it reads "MaxPool2d bwd 98.0, ReLU bwd 98.0, BatchNorm2d bwd −392.0, Conv2d bwd −784.0", where ours (section 4) reads +98, −392, −392, −392. The two logs measure the same tensors at different moments. The article's `bwd` lines come from `Module.register_backward_hook` (deprecated today): it fires when the module's *last* autograd node has run, while the gradient that node received is still held by the hook. Ours fires when the gradients of the module's inputs and parameters exist (`helpers.engine.trace`). Reproduce the article's logger here, on the same simulated step:

# %%
def article_log(batch_size=128):
    """One simulated ResNet18 training step, logged as the article does: memory_allocated() read in forward hooks
    and in the old module backward hooks (register_backward_hook). Returns [(module, phase, allocated bytes)]."""
    with torch.device("meta"):
        model = build_model("resnet18")
    log = []
    with Meter("simulated") as meter, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the old hook is deprecated, and says so
        model = meter.place(model)  # parameters and buffers on the simulated GPU, counted
        for name, module in model.named_modules():
            module.register_forward_pre_hook(lambda m, args, name=name: log.append((name, "pre", meter.allocated())))
            module.register_forward_hook(lambda m, args, out, name=name: log.append((name, "fwd", meter.allocated())))
            module.register_backward_hook(lambda m, gin, gout, name=name: log.append((name, "bwd", meter.allocated())))
        images, labels = torch.randn(batch_size, 3, 224, 224), torch.randint(0, 1000, (batch_size,))
        F.cross_entropy(model(images), labels).backward()
    return log


article_way = article_log()
article_delta = {(name, phase): allocated - before
                 for (_, _, before), (name, phase, allocated) in zip(article_way, article_way[1:])}
published = {"maxpool": 98, "relu": 98, "bn1": -392, "conv1": -784}   # MiB, the article's stem backward
print(f"{'stem, bwd':<10} {'published':>10} {'the article’s way':>18} {'ours':>8}")
for name, mib in published.items():
    print(f"{name:<10} {mib:>+10} {article_delta[name, 'bwd'] / MiB:>+18.1f} {step.find(name, 'bwd').delta_bytes / MiB:>+8.1f}")
    assert round(article_delta[name, "bwd"] / MiB) == mib
assert round(sum(step.find(n, "bwd").delta_bytes for n in published) / MiB) == sum(published.values()) - 98

# %% [markdown]
# The article's method, replayed on PyTorch 2.14's step, gives the article's four numbers exactly: the 2019 article and this lesson allocate and free the same tensors; they look at different moments. A gradient that the old hook still holds is freed only after the hook, so the release shows up one line later, and after the last hook (conv1's) nothing is logged at all: over the stem the article's log frees 98 MiB less than ours, the 98 MiB released after its last line. PyTorch deprecated that hook (its `grad_input` is wrong for a module made of several operations) in favour of `register_full_backward_hook`, which ResNet's in-place ReLU breaks; this lesson's tracer uses tensor hooks instead.
#
# And the peak? The totals differ by the percentage printed above. What we can account for:
#
# * **Sampling.** A logger that reads `memory_allocated()` in hooks sees memory only at events, and the true peak happens inside an operation. With our events the highest sampled value is below the true peak, but that explains only a small share of the gap to 2500:

# %%
article_highest = max(allocated for _, _, allocated in article_way) / MiB
share = (ours - highest_event) / (ours - published_mib)
print(f"gap to the published figure: {ours - published_mib:.1f} MiB; our events miss {ours - highest_event:.1f} MiB of the "
      f"true peak: {share:.0%} of the gap")
print(f"the article's own hooks (replayed above) see {article_highest:.1f} MiB at their highest event: "
      f"{'the true peak itself' if abs(article_highest - ours) < 0.05 else 'not the true peak'}")
assert share < 0.1

# %% [markdown]
# * **Reading a plot.** "About 2500" is a value read off an axis, not a printed number.
# * **Units.** The article's "MB" are MiB (it divides by 2²⁰). In real megabytes (the last line of the first cell of this section) our figure moves further away, not closer.
#
# Sampling, then, explains a few percent of the gap with our events, and none of it with the article's: its old backward hooks fire at the very moment of the peak. The rest of the gap (the article's PyTorch and cuDNN of 2019, its plotting code) cannot be rerun here. We state our figure as computed, and do not try to force the published one.

# %% [markdown]
# ## 7. On a real GPU
#
# With a GPU, this cell measures the same step with the `cuda` backend (PyTorch's own counters) and puts it beside the simulation. Without one, it says so; the numbers above are what the simulation computes for a GPU.

# %% tags=["nbval-ignore-output"] nbval_reason="it measures this machine's GPU, and says so when there is none"
if torch.cuda.is_available():
    real = profile_step("resnet18", batch_size=128, device="cuda")
    print(f"{'':<22} {'simulated':>12} {'measured':>12}   ({torch.cuda.get_device_name(0)})")
    for name in ("conv1", "bn1", "maxpool", "layer1.0.conv1"):
        print(f"{name + ' fwd delta':<22} {fmt_bytes(step.find(name, 'fwd').delta_bytes):>12} "
              f"{fmt_bytes(real.find(name, 'fwd').delta_bytes):>12}")
    print(f"{'peak allocated':<22} {fmt_bytes(step.peak_allocated_bytes):>12} {fmt_bytes(real.peak_allocated_bytes):>12}")
    print(f"{'reserved after step':<22} {'(not modelled)':>12} {fmt_bytes(real.reserved_bytes):>12}")
    gap = real.peak_allocated_bytes / step.peak_allocated_bytes - 1
    print(f"measured peak vs simulated: {gap:+.1%} (cuDNN workspaces are invisible to the simulation)")
else:
    print("No GPU here: everything above is simulated. On a GPU machine, run this cell, or")
    print("  python -m helpers profile --model resnet18 --batch-size 128 --device cuda")

# %% [markdown]
# The project's own recording on a GPU (`make gpu-reference`, lesson 00): this step and its neighbours at batch 128, and every module whose delta on the GPU differs from the simulated one by 1 MiB or more:

# %%
from helpers.teaching.reference import load_reference, module_differences, reference_report

print(reference_report("resnet18", 128))
recorded = load_reference()
if recorded is not None:
    print(module_differences("resnet18", 128, "baseline"))
    baseline = next(r for r in recorded["runs"] if (r["model"], r["batch_size"], r["config"]) == ("resnet18", 128, "baseline"))
    assert max(abs(gpu - simulated) for _, _, gpu, simulated in baseline["events"]) < 3 * MiB

# %% [markdown]
# Module by module, the GPU and the simulation agree to within a few MiB, and each difference is a block, not a tensor: layer2's 49 MiB activations get 50 MiB blocks on the GPU, since a last MiB is too small to split off (lesson 00, section 2), and `zero_grad` frees gradients together with such rests. The simulated column of the first table counts those rests too (lesson 06 replays the step through a model of the allocator); what remains of the gap is not in any delta. A cuDNN workspace lives only while its convolution runs and is freed before the module returns, so no event can see it: it shows in the peak alone, when a convolution runs at the top of the memory curve.

# %% [markdown]
# ## Exercises
#
# **Exercise 1.** Predict conv1's delta at batch size 32, and the maxpool delta. Then check.

# %%
prediction_conv1_mib = None  # your prediction
small = profile_step("resnet18", batch_size=32, device="simulated")
print(f"conv1 at batch 32: {fmt_bytes(small.find('conv1', 'fwd').delta_bytes, sign=True)}; you predicted {prediction_conv1_mib}")

# %% [markdown]
# <details><summary>Solution</summary>
#
# Activations are proportional to the batch size: conv1 keeps 32 × 64 × 112 × 112 × 4 bytes = 98 MiB, a quarter of 392 MiB, and maxpool keeps 294 / 4 = 73.5 MiB.
#
# ```python
# assert small.find("conv1", "fwd").delta_bytes == 98 * MiB
# assert small.find("maxpool", "fwd").delta_bytes == nbytes((32, 64, 56, 56)) + nbytes((32, 64, 56, 56), torch.int64)
# ```
# The peak does not fall by exactly 4: the parameters (44.6 MiB) do not depend on the batch. Lesson 01 fits this as M(b) = M₀ + b·m.
# </details>
#
# **Exercise 2.** The first block of `layer2` has a `downsample` branch (a 1 × 1 convolution with stride 2, and a BatchNorm) whose output is the `identity` that the block adds to its main branch (`out += identity`). Here are the branch's `fwd` events and the block's own `fwd` event, when the block returns. Explain each delta; in particular, what happens to the BatchNorm's output?

# %%
for e in step.events:
    if e.phase == "fwd" and e.module in ("layer2.0.downsample.0", "layer2.0.downsample.1", "layer2.0.downsample", "layer2.0"):
        print(f"{e.module:<22} {fmt_bytes(e.delta_bytes, sign=True):>11}  output {e.shape}")

# %% [markdown]
# <details><summary>Solution</summary>
#
# Both branch outputs are (128, 128, 28, 28) float32: 128 × 128 × 28 × 28 × 4 bytes = 49 MiB. The convolution's output stays: the BatchNorm saved it as its input. The BatchNorm's output (plus 1 KiB of statistics) is `identity`, and nothing saves it: the in-place addition `out += identity` needs neither operand for its backward (the gradient of a sum is passed through unchanged). Only the local variable `identity` refers to it, so it is freed when the block returns: that is the block's −49 MiB. The container `downsample` adds nothing itself.
#
# ```python
# assert step.find("layer2.0.downsample.1", "fwd").delta_bytes == nbytes((128, 128, 28, 28)) + 2 * nbytes((128,))
# assert step.find("layer2.0", "fwd").delta_bytes == -nbytes((128, 128, 28, 28))
# ```
# </details>
#
# **Exercise 3.** Profile `resnet50` at batch size 64. Which stage keeps the most memory in the forward pass, and how many times its parameters is the peak?

# %%
r50 = profile_step("resnet50", batch_size=64, device="simulated")
kept50 = r50.stage_deltas("fwd")
print({stage: fmt_bytes(b) for stage, b in kept50.items()})

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# biggest = max(kept50, key=kept50.get)
# print(biggest, fmt_bytes(r50.peak_allocated_bytes), r50.peak_allocated_bytes / r50.categories["parameters"])
# ```
# `layer1` keeps the most: ResNet50's bottleneck blocks expand to 256 channels at 56 × 56, so layer1 alone keeps more than the whole stem. The last number printed is how many times the parameters the peak is.
# </details>
#
# ## Key points
#
# - During training, every layer keeps the tensors its backward needs (*saved tensors*, the activations) from its forward pass until its backward runs.
# - Each delta in the log is a shape times the bytes of a dtype: conv1 392 MiB = 128 × 64 × 112 × 112 × 4 bytes; maxpool's 294 MiB is one third values, two thirds int64 indices.
# - In-place ReLU keeps nothing extra; BatchNorm keeps its input and two small vectors.
# - Early, high-resolution layers hold most activations; late layers hold most parameters.
# - The peak comes early in the backward pass and is about 95% activations: batch size and resolution set it, not the parameter count.
# - A memory log depends on *when* it reads the counter: the article's old backward hooks and this lesson's tensor hooks see the same tensors at different moments.
#
# ## Further reading
#
# - Q. Febvre, *Deep Learning Memory Usage and Pytorch Optimization Tricks*, Sicara (2019): the per-module log reproduced here.
# - S. Rajbhandari et al., *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20 (arXiv:1910.02054), section 3: model states and residual states.
# - K. He et al., *Deep Residual Learning for Image Recognition*, CVPR 2016 (arXiv:1512.03385): the ResNet architecture.
# - PyTorch documentation, *Autograd mechanics: saved tensors*: https://pytorch.org/docs/stable/notes/autograd.html#saved-tensors
# - Next: lesson 04 (AMP and activation checkpointing) shrinks exactly these activations.
