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
# # 04 · AMP and activation checkpointing: what they save, what they cost, and the trap
#
# **Questions**
# - How much memory do automatic mixed precision (AMP) and activation checkpointing save, and why exactly that much?
# - The Sicara article says AMP plus checkpointing "divides the footprint of ResNet18 by 5". Is that true?
# - Do they change the gradients, and how many checkpoint segments should you use?
#
# **Objectives**
# - Measure one ResNet18 training step in four configurations and explain each difference from dtypes and kept tensors.
# - Reproduce the article's "divide by 5", find the parameters it leaves without gradients, and spot the same bug in your own code.
# - Assert that checkpointing gives the same gradients as the baseline and AMP close ones, and fix BatchNorm's double update.
# - Sweep the number of checkpoint segments, count the recomputed FLOPs, and test the √n rule of Chen et al. (2016).
#
# **Time:** about 65 minutes alone: 22 of reading, 21 of code, 3 for the figures, 1 to run all, 20 for the three exercises. **GPU:** not needed (memory simulated, gradients and timings on the CPU).
#
# Read lesson 03 first: this lesson uses its step profiles and vocabulary.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import copy
import time
import warnings

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from helpers import CATEGORIES, MiB, fmt_bytes, profile_step, round_up
from helpers.models import build_model, sequential_form
from helpers.palette import OKABE_ITO
from helpers.teaching.plots import plot_peak_bars, plot_timeline
from helpers.techniques import Checkpointed

_ = torch.manual_seed(0)
# The reentrant checkpoint warns when no input requires grad; section 2 shows that case on purpose.
warnings.filterwarnings("ignore", message="None of the inputs have requires_grad")

# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. Four configurations of one step
#
# Two tools attack the activations, which lesson 03 showed are 95% of ResNet18's peak at batch 128:
#
# * **AMP** (`torch.autocast`) runs the convolutions and matrix products in a 16-bit float type: the activations they produce take 2 bytes per value instead of 4. On a GPU that is float16 with a `GradScaler` (which scales the loss so small float16 gradients do not underflow), and the simulation does the same, with CUDA's lists of which operations run in 16 bits (lesson 04b, section 4 compares them with the CPU's). (The article, in 2019, used NVIDIA's Apex library for AMP: `torch.autocast` arrived in PyTorch 1.6, in 2020. This lesson re-creates its experiments with today's API.)
# * **Activation checkpointing** (`torch.utils.checkpoint`) splits the network into segments. A checkpointed segment keeps only its *input* during the forward pass and runs its forward again during backward to get the activations back: memory traded for computation. `profile_step(checkpoint=4)` splits ResNet18's 10 units (the stem, 8 residual blocks, the head) into 4 segments with PyTorch's rule (10 // 4 = 2 units each; the last segment takes the other 4 and is not checkpointed), with the recommended non-reentrant implementation.
#
# Batch 128, 224 × 224 images, SGD with momentum, simulated:

# %%
configs = {
    "baseline": {},
    "AMP": {"amp": True},
    "checkpoint 4": {"checkpoint": 4},
    "AMP + checkpoint 4": {"amp": True, "checkpoint": 4},
}
steps = {name: profile_step("resnet18", 128, device="simulated", **kw) for name, kw in configs.items()}
base = steps["baseline"].peak_allocated_bytes
print(f"{'configuration':<20} {'peak':>11} {'÷ baseline':>10}  " + " ".join(f"{c[:11]:>11}" for c in CATEGORIES))
for name, p in steps.items():
    print(f"{name:<20} {fmt_bytes(p.peak_allocated_bytes):>11} {base / p.peak_allocated_bytes:>10.2f}  "
          + " ".join(f"{p.categories[c] / MiB:>11.1f}" for c in CATEGORIES))
peaks = [p.peak_allocated_bytes for p in steps.values()]
assert peaks[0] > peaks[2] > peaks[1] > peaks[3]          # baseline > checkpoint > AMP > both
assert all(p.params_without_grad == [] for p in steps.values())

# %%
fig = plot_timeline(list(steps.values()), labels=list(steps), title="ResNet18, batch 128: one training step (simulated)")
fig

# %% [markdown]
# Look at where each curve peaks: the baseline and AMP climb through the forward pass and peak early in backward, while the checkpointed steps stay low through the forward pass (they keep only each segment's input) and peak late, when backward recomputes the first segment, which holds the stem. Their curves run longer because they have extra `recompute` events; the shading marks the baseline's phases.

# %%
fig = plot_peak_bars(list(steps.values()), list(steps), title="What is allocated at each configuration's peak")
fig


# %% [markdown]
# Look at what changes between the bars: the parameters and the input batch are the same in every configuration, while the activations (green) and "other" (grey: mostly the gradients flowing back through the activations) change. The checkpointed steps also hold more parameter gradients (orange) at their peak, because they peak later in backward. Now explain each difference.
#
# **AMP.** Look at the first convolution. In fp32 it added its 392 MiB output. Under autocast it adds a float16 output (half the size) *and* float16 copies of its input and its weight, because autocast casts the inputs of each convolution to 16 bits and autograd keeps the casts for backward:

# %%
def nbytes(shape, dtype):
    n = 1
    for s in shape:
        n *= s
    return round_up(n * dtype.itemsize)


amp_conv1 = steps["AMP"].find("conv1", "fwd").delta_bytes
out16 = nbytes((128, 64, 112, 112), torch.float16)
x16 = nbytes((128, 3, 224, 224), torch.float16)
w16 = nbytes((64, 3, 7, 7), torch.float16)
print(f"conv1 under AMP: {fmt_bytes(amp_conv1, sign=True)} = output {fmt_bytes(out16)} + input copy {fmt_bytes(x16)} "
      f"+ weight copy {w16:,} bytes")
assert amp_conv1 == out16 + x16 + w16

# %% [markdown]
# So AMP does **not** halve the step. Which tensors does it halve, and which not? Every storage alive at the AMP peak carries its dtype and shape (`StepProfile.at_peak()`), so the peak can be taken apart exactly, and set beside the baseline's:

# %%
with torch.device("meta"):
    weight_shapes = {tuple(p.shape) for p in build_model("resnet18").parameters() if p.dim() > 1}  # conv, linear


def kind(storage):
    """What a storage alive at the peak is, in the terms of this section."""
    dtype = str(storage.dtype).removeprefix("torch.")
    if storage.category in ("parameters", "gradients", "optimizer_states", "input"):
        return f"{storage.category.replace('_', ' ')}, {dtype}"
    if dtype == "int64":
        return "MaxPool's int64 indices"
    if len(storage.shape) == 1:
        return "BatchNorm's batch statistics"
    if storage.shape == ():
        return "scalars (the GradScaler's scale, ...)"
    if storage.dtype == torch.float16 and storage.shape in weight_shapes:
        return "16-bit copies of the weights"
    if storage.dtype == torch.float16 and storage.shape == (128, 3, 224, 224):
        return "16-bit copy of the input batch"
    return f"{storage.category}, {dtype}"


parts = {}
for name in ("baseline", "AMP"):
    for storage in steps[name].at_peak():
        parts.setdefault(kind(storage), dict.fromkeys(("baseline", "AMP"), 0))[name] += storage.nbytes
print(f"{'alive at the peak':<34} {'baseline':>11} {'AMP':>11}")
small = dict.fromkeys(("baseline", "AMP"), 0)
for what, sizes in sorted(parts.items(), key=lambda item: -item[1]["baseline"] - item[1]["AMP"]):
    if max(sizes.values()) < MiB // 10:   # BatchNorm counters, the targets, the scalars: fold them into one line
        small = {k: small[k] + sizes[k] for k in small}
        continue
    print(f"{what:<34} {fmt_bytes(sizes['baseline']):>11} {fmt_bytes(sizes['AMP']):>11}")
print(f"{'smaller tensors (under 0.1 MiB)':<34} {fmt_bytes(small['baseline']):>11} {fmt_bytes(small['AMP']):>11}")
print(f"{'peak':<34} {fmt_bytes(base):>11} {fmt_bytes(steps['AMP'].peak_allocated_bytes):>11}")

assert sum(sizes["AMP"] for sizes in parts.values()) == steps["AMP"].peak_allocated_bytes
assert parts["activations, float16"]["AMP"] * 2 == parts["activations, float32"]["baseline"]   # exactly halved
assert parts["activations, float32"]["AMP"] == 0                                                 # none stays fp32
assert parts["MaxPool's int64 indices"]["AMP"] == parts["MaxPool's int64 indices"]["baseline"] == 196 * MiB

# %% [markdown]
# Read the two columns together:
#
# * The float32 activations of the baseline become float16 activations of **exactly half** the size: in ResNet18 almost every operation's output is 16-bit under autocast (convolutions, BatchNorm, ReLU, pooling, the linear layer), and no activation at the peak stays float32. The gradient flowing back at that moment ("other") is 16-bit too, and halves.
# * **MaxPool's int64 indices** (196 MiB) do not shrink: they are indices, not floating-point values.
# * Autocast **adds** tensors: 16-bit copies of the input batch and of the weights, made for each convolution and kept for its backward.
# * The **smaller tensors** line gathers BatchNorm's batch statistics and counters, the targets, and the scalars: the loss, its gradient, and the `GradScaler`'s scale and growth counter (the scale that the scaled loss keeps for backward is the AMP step's one float32 "activation", counted above as a scalar).
# * **Parameters, gradients and the input batch** stay float32. `torch.autocast` keeps no separate "master" copy of the weights: the fp32 parameters *are* the weights the optimizer updates, and autocast casts them to 16 bits on the fly, at each operation. (Mixed-precision schemes that store 16-bit weights and keep an fp32 master copy, like Apex's O2 or the ZeRO paper's accounting, are a different layout; lessons 01 and 05a compare the conventions.)
#
# So the peak falls by about 40%, not 50%: only the float activations halve, and the rest either stays or is new.
#
# **Checkpointing** keeps the activations of one segment at a time. At the peak of the checkpointed step, backward is recomputing a segment (the `recompute` events) while the inputs of the earlier segments wait. Its peak moves from the end of the network to the segment containing `layer1`:

# %%
for name in ("baseline", "checkpoint 4"):
    p = steps[name]
    e = p.events[p.peak_event]
    recomputes = sum(ev.phase == "recompute" for ev in p.events)
    print(f"{name:<13} peak at event {p.peak_event:>3} ({e.label}); recompute events: {recomputes}")
assert sum(ev.phase == "recompute" for ev in steps["checkpoint 4"].events) > 0

# %% [markdown]
# ## 2. The trap: "divide by 5"
#
# The article combined AMP with checkpointing and reported a footprint divided by 5. Its code used `checkpoint_sequential` with the *reentrant* implementation, then the default, on the network's input, which does not require grad. Reproduce it:

# %%
trap = profile_step("resnet18", 128, device="simulated", amp=True, checkpoint=4, reentrant=True)
right = steps["AMP + checkpoint 4"]
print(f"AMP + reentrant checkpoint: peak {fmt_bytes(trap.peak_allocated_bytes)}, baseline ÷ {base / trap.peak_allocated_bytes:.2f}")
print(f"parameters that got no gradient: {len(trap.params_without_grad)} of {len(list(build_model('resnet18').parameters()))}")
stages = sorted({n.split('.')[0] for n in trap.params_without_grad})
print(f"  in: {', '.join(stages)}")
print(f"AMP + non-reentrant checkpoint (correct): {fmt_bytes(right.peak_allocated_bytes)}, "
      f"baseline ÷ {base / right.peak_allocated_bytes:.2f}, parameters without gradient: {len(right.params_without_grad)}")
assert round(base / trap.peak_allocated_bytes) == 5 and len(trap.params_without_grad) > 30
assert right.params_without_grad == [] and base / right.peak_allocated_bytes < 3

# %% [markdown]
# The "5x" is real memory, and a broken training step: the reentrant checkpoint is an `autograd.Function` that only builds a backward when one of its *inputs* requires grad. The image batch does not, so the output of each checkpointed segment is cut from the graph: no activations are kept (nothing will be differentiated), and the parameters of the first three segments (the stem, `layer1`, `layer2` and the first block of `layer3`) never receive a gradient. Only the last segment trains. The correct figure, with every parameter getting its gradient, is the table's: about 2.5x.
#
# **How to spot it in your own code:**
# 1. After `loss.backward()`, list `[n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]`: it must be empty (`profile_step` reports it as `params_without_grad`; the command line warns).
# 2. PyTorch warns: *"None of the inputs have requires_grad=True. Gradients will be None"* (this notebook silenced it in the setup cell, to show the trap; don't silence it in yours).
# 3. Always pass `use_reentrant=False` explicitly: PyTorch now asks you to, and the non-reentrant version does not have this problem.

# %% [markdown]
# ## 3. Same gradients? Asserted
#
# Memory savings are worth nothing if the gradients change. On real tensors (ResNet18 with 10 classes, 8 images of 64 × 64, on the CPU), compare one step's gradients in each configuration with the baseline's, starting from identical weights:

# %%
torch.manual_seed(0)
reference = build_model("resnet18", num_classes=10)
x, y = torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))


def one_step(checkpoint=0, reentrant=False, amp=False, freeze_bn_stats=False):
    """Loss and model after one forward and backward pass from the reference weights."""
    model = copy.deepcopy(reference)
    runner = model
    if checkpoint:
        runner = Checkpointed(sequential_form(model), checkpoint, reentrant=reentrant, freeze_bn_stats=freeze_bn_stats)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(runner(x), y)
    loss.backward()
    return loss.item(), model


def flat_grad(model):
    return torch.cat([p.grad.flatten() for p in model.parameters()])


base_loss, base_model = one_step()
ck_loss, ck_model = one_step(checkpoint=4)
missing = [n for n, p in ck_model.named_parameters() if p.grad is None]
same = all(torch.equal(p.grad, q.grad) for p, q in zip(ck_model.parameters(), base_model.parameters()))
print(f"checkpoint 4: loss equal: {ck_loss == base_loss}; parameters without gradient: {len(missing)}; "
      f"every gradient bit-identical: {same}")
assert ck_loss == base_loss and missing == [] and same

re_loss, re_model = one_step(checkpoint=4, reentrant=True)
print(f"reentrant:    parameters without gradient: {sum(p.grad is None for p in re_model.parameters())}")
assert sum(p.grad is None for p in re_model.parameters()) > 30

# %% [markdown]
# Checkpointing recomputes exactly the same operations on the same inputs, so on the CPU the gradients are bit-identical. (On a GPU, some kernels are not bitwise deterministic; expect equality to within rounding.)
#
# AMP does change the arithmetic: bfloat16 keeps 8 significant bits (float16 keeps 11). The tolerance we state: loss within 1% and the gradient, as one vector, pointing the same way (cosine similarity above 0.9). The relative difference of the whole gradient is large (about a third, at random initialisation), and individual small gradients can be off by more, which is why lesson 04b, section 1 asks the question that matters: does training still reach the same accuracy?

# %%
amp_loss, amp_model = one_step(amp=True)
g32, g16 = flat_grad(base_model), flat_grad(amp_model)
cosine = F.cosine_similarity(g32, g16, dim=0).item()
relative = ((g16 - g32).norm() / g32.norm()).item()
# bfloat16 arithmetic differs in its last bits between CPUs: print the tolerances, checked, rather than the digits
print("AMP (bfloat16) against fp32, one step from the same weights:")
print(f"  loss within 1%:                                   {abs(amp_loss - base_loss) / base_loss < 0.01}")
print(f"  gradient cosine similarity above 0.9:             {cosine > 0.9}")
print(f"  relative difference of the gradient 0.25 to 0.5:  {0.25 < relative < 0.5}")
assert abs(amp_loss - base_loss) / base_loss < 0.01 and cosine > 0.9 and 0.25 < relative < 0.5

# %% [markdown]
# **BatchNorm's running statistics are updated twice.** A checkpointed segment runs its forward twice in a training step. Each training-mode BatchNorm forward updates `running_mean`, `running_var` and `num_batches_tracked`, which the model uses at evaluation time. The gradients are unaffected (they use the batch statistics), but the running statistics drift:

# %%
fixed_loss, fixed_model = one_step(checkpoint=4, freeze_bn_stats=True)
for label, model in (("baseline", base_model), ("checkpoint", ck_model), ("checkpoint + freeze", fixed_model)):
    drift = (model.bn1.running_mean - base_model.bn1.running_mean).abs().max().item()
    print(f"{label:<20} bn1.num_batches_tracked = {int(model.bn1.num_batches_tracked)}, "
          f"running_mean differs from baseline by {drift:.2e}")
assert int(ck_model.bn1.num_batches_tracked) == 2 and int(fixed_model.bn1.num_batches_tracked) == 1
assert torch.equal(fixed_model.bn1.running_mean, base_model.bn1.running_mean)
assert all(torch.equal(p.grad, q.grad) for p, q in zip(fixed_model.parameters(), base_model.parameters()))

# %% [markdown]
# The fix, `Checkpointed(..., freeze_bn_stats=True)`, passes a `context_fn` to `torch.utils.checkpoint.checkpoint` (non-reentrant only) that sets every BatchNorm's momentum to 0 during recomputation, so the running values are kept exactly, and takes back the extra count. Alternatives: put BatchNorm outside the checkpointed segments, or accept the drift. How large is it? A running statistic is an exponential average, r ← (1 − m)·r + m·x with momentum m = 0.1; two updates per step with the same batch statistic x make one update with a larger momentum:

# %%
m = 0.1
twice = 1 - (1 - m) ** 2
print(f"two updates with momentum {m} = one update with momentum {twice:.2f}: the running statistics average "
      f"over about {1 / twice:.1f} steps instead of {1 / m:.0f}")
assert round(twice, 2) == 0.19 and 0.5 < (1 / twice) / (1 / m) < 0.55


# %% [markdown]
# The window is about halved: the running statistics that evaluation uses follow the last few batches more closely than the model's author chose.
#
# ## 4. How many segments? Memory, FLOPs, time, and the √n rule
#
# Sweep ResNet18's segments from 1 (nothing checkpointed) to 10 (every unit but the head). For each: the peak (simulated), and the floating-point operations of forward + backward counted by `torch.utils.flop_counter.FlopCounterMode`, which runs fine on fake tensors.

# %%
def step_flops(segments, backward=True):
    """FLOPs of one forward (+ backward) of ResNet18 at batch 128 (fake tensors: nothing is computed)."""
    with FakeTensorMode():
        model = build_model("resnet18")
        runner = Checkpointed(sequential_form(model), segments) if segments > 1 else model
        images, labels = torch.randn(128, 3, 224, 224), torch.randint(0, 1000, (128,))
        with FlopCounterMode(display=False) as counter:
            loss = F.cross_entropy(runner(images), labels)
            if backward:
                loss.backward()
    return counter.get_total_flops()


sweep = {}
for k in range(1, 11):
    p = profile_step("resnet18", 128, device="simulated", checkpoint=k)
    sweep[k] = (p.peak_allocated_bytes, step_flops(k))
base_flops = sweep[1][1]
print(f"{'segments':>8} {'peak':>11} {'TFLOPs':>7} {'recomputed':>10}")
for k, (peak, flops) in sweep.items():
    print(f"{k:>8} {fmt_bytes(peak):>11} {flops / 1e12:>7.3f} {flops / base_flops - 1:>+10.1%}")
forward_flops = step_flops(1, backward=False)
print(f"one forward pass: {forward_flops / 1e12:.3f} TFLOPs, {forward_flops / base_flops:.1%} of forward + backward")
assert sweep[1][0] == base and min(v[0] for v in sweep.values()) < 0.65 * base
assert max(v[1] for v in sweep.values()) - base_flops <= forward_flops   # at most one extra forward pass


# %% [markdown]
# The recomputation costs at most one extra forward pass. A backward pass is usually about twice a forward, so a forward is about a third of the step; here it is a little more (the last line), because the first convolution's backward computes no gradient for the input images, which need none. So the FLOPs grow by up to that share: 34% with every unit but the head checkpointed. The memory does *not* keep falling: from 6 segments on, the peak is stuck at the stem, which holds ResNet18's largest activations (lesson 03) and must be recomputed whole when its segment's turn comes.
#
# **The √n rule.** Chen et al. (2016) showed that a chain of n *equal* layers, cut into k checkpointed segments, needs memory for the k segment inputs plus the activations of one segment, n/k layers: about k + n/k layer outputs, smallest at k = √n, which gives O(√n) memory for one extra forward pass. ResNet18 is not a chain of equal layers, so test the rule where it applies: 64 identical `Linear(512, 512)` + ReLU blocks at batch 16,384, where each block's activation is 32 MiB:

# %%
def uniform_mlp():
    blocks = [nn.Sequential(nn.Linear(512, 512), nn.ReLU()) for _ in range(64)]
    return nn.Sequential(*blocks, nn.Linear(512, 10))


chain = {}
for k in (1, 2, 4, 6, 8, 10, 12, 16, 32):
    chain[k] = profile_step(uniform_mlp, 16384, input_shape=(512,), num_classes=10, checkpoint=k,
                            device="simulated").peak_allocated_bytes
best = min(chain, key=chain.get)
for k, peak in chain.items():
    print(f"{k:>3} segments: {fmt_bytes(peak):>11}{'   <- smallest' if k == best else ''}")
print(f"√65 units = {65 ** 0.5:.1f}; baseline / best = {chain[1] / chain[best]:.1f}")
assert best == 8

# %%
fig = Figure(figsize=(10, 3.6), layout="constrained")
ax_r, ax_m = fig.subplots(1, 2)
ax_r.plot(list(sweep), [v[0] / MiB for v in sweep.values()], "o-", color=OKABE_ITO["blue"], label="peak")
ax_r.set(xlabel="checkpoint segments", ylabel="peak allocated (MiB)", title="ResNet18, batch 128")
ax_f = ax_r.twinx()
ax_f.plot(list(sweep), [v[1] / base_flops for v in sweep.values()], "s--", color=OKABE_ITO["vermillion"])
ax_f.set_ylabel("FLOPs ÷ baseline", color=OKABE_ITO["vermillion"])
ax_m.plot(list(chain), [v / MiB for v in chain.values()], "o-", color=OKABE_ITO["blue"])
ax_m.axvline(65 ** 0.5, color=OKABE_ITO["grey"], ls=":", label="√n")
ax_m.set(xscale="log", xlabel="checkpoint segments (log scale)", ylabel="peak allocated (MiB)",
         title="64 equal blocks, batch 16384")
ax_m.legend()
fig

# %% [markdown]
# Look at the two panels: on the left, ResNet18's peak (solid line, left axis) stops falling at 6 segments, while the FLOPs (dashed, right axis) stay 19% to 34% above the baseline's; on the right, the chain of equal blocks (64 blocks and the final `Linear`: 65 units) is smallest at 8 segments, next to √65 ≈ 8.1 (the dotted line), with 3.4 times less memory, as the rule predicts. The bumps between come from PyTorch's segment sizes (n // k units each, the remainder in the last, unchecked segment). For real networks, use the rule as a starting point, then measure: the largest layer sets a floor no segmenting can break.
#
# What does the recomputation cost in **time**? Measured on this CPU, on ResNet18 with 64 × 64 images at batch 16, so that it runs in seconds. Timings vary between machines, so this output is not checked; the FLOP counts above are the deterministic version of the same claim:

# %% tags=["nbval-ignore-output"] nbval_reason="wall-clock times depend on the machine and its load"
torch.manual_seed(0)
timed_model = build_model("resnet18", num_classes=10)
runners = {k: Checkpointed(sequential_form(timed_model), k) if k > 1 else timed_model for k in (1, 4, 10)}
images, labels = torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,))
samples = {k: [] for k in runners}
for repeat in range(8):                  # interleaved, so that a slow moment hits every configuration
    for k, runner in runners.items():
        start = time.perf_counter()
        F.cross_entropy(runner(images), labels).backward()
        if repeat:                       # the first round warms up
            samples[k].append(time.perf_counter() - start)
timings = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}   # medians
for k, t in timings.items():
    print(f"{k:>2} segments: {1000 * t:6.1f} ms per step ({t / timings[1] - 1:+.0%}); "
          f"FLOPs {sweep[k][1] / base_flops - 1:+.0%}")

# %% [markdown]
# ## Exercises
#
# **Exercise 1: find the trap.** This training step checkpoints a feature extractor. Without running it, say which parameters get no gradient, then fix it in two different ways.
#
# ```python
# features = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3), nn.ReLU())
# head = nn.Linear(16 * 28 * 28, 10)
# images = torch.randn(4, 3, 32, 32)
# h = torch.utils.checkpoint.checkpoint(features, images, use_reentrant=True)
# loss = F.cross_entropy(head(h.flatten(1)), torch.tensor([0, 1, 2, 3]))
# loss.backward()
# ```

# %%
# Your code here: run it, list the parameters whose .grad is None, and fix it

# %% [markdown]
# <details><summary>Solution</summary>
#
# Both convolutions' weights and biases get no gradient: `images` does not require grad, so the reentrant checkpoint's output is detached from the graph and only `head` trains.
#
# ```python
# def no_gradient(use_reentrant, images_need_grad=False):
#     torch.manual_seed(0)
#     features = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 3), nn.ReLU())
#     head = nn.Linear(16 * 28 * 28, 10)
#     images = torch.randn(4, 3, 32, 32, requires_grad=images_need_grad)
#     h = torch.utils.checkpoint.checkpoint(features, images, use_reentrant=use_reentrant)
#     F.cross_entropy(head(h.flatten(1)), torch.tensor([0, 1, 2, 3])).backward()
#     return [n for n, p in features.named_parameters() if p.grad is None]
#
# print(no_gradient(use_reentrant=True))                          # the trap
# assert no_gradient(use_reentrant=True) == ["0.weight", "0.bias", "2.weight", "2.bias"]
# assert no_gradient(use_reentrant=False) == []                   # fix 1
# assert no_gradient(use_reentrant=True, images_need_grad=True) == []   # fix 2
# ```
#
# Fix 1 (recommended): `use_reentrant=False`. Fix 2 (the old workaround): `images.requires_grad_(True)` before the checkpoint, which makes the reentrant version build its backward, at the cost of computing a gradient for the images.
# </details>
#
# **Exercise 2: segments for VGG11.** Sweep `profile_step("vgg11", 64, device="simulated", checkpoint=k)` for k from 1 to 10. Where is the minimum, and where is the peak reached there?

# %%
# Your code here: for k in range(1, 11): ...

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# vgg = {}
# for k in range(1, 11):
#     p = profile_step("vgg11", 64, device="simulated", checkpoint=k)
#     e = p.events[p.peak_event]
#     print(k, fmt_bytes(p.peak_allocated_bytes), e.label)
#     vgg[k] = p
# assert fmt_bytes(vgg[1].peak_allocated_bytes) == "4022.2 MiB" and fmt_bytes(vgg[7].peak_allocated_bytes) == "3402.4 MiB"
# assert min(vgg, key=lambda k: vgg[k].peak_allocated_bytes) == 7 and vgg[7].events[vgg[7].peak_event].module == "features.1"
# ```
#
# `sequential_form` gives VGG11 as 20 units: its convolutions (each joined with its in-place ReLU), pools, and classifier layers. Measured (simulated): the peak falls from 4022.2 MiB at k = 1 to 3402.4 MiB from k = 7 on, where it is reached in the backward pass of `features.1`, the first convolution's ReLU at 224 × 224 with 64 channels: as with ResNet18's stem, the largest unit sets the floor. √20 ≈ 4.5 would have stopped short of it: the rule is a starting point, the measurement decides. (VGG11's 133 million parameters, with their gradients and momentum, are also a large fixed part of the peak that checkpointing cannot touch.)
# </details>
#
# **Exercise 3: what AMP keeps in 32 bits.** With Adam (`optimizer="adam"`, `steady_state=True`), compare the categories at the peak of the baseline and of AMP for ResNet18 at batch 128. Which categories shrink, which do not, and why?

# %%
# Your code here: profile_step("resnet18", 128, device="simulated", optimizer="adam", steady_state=True, amp=...)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# adam = {}
# for amp in (False, True):
#     adam[amp] = profile_step("resnet18", 128, device="simulated", optimizer="adam", steady_state=True, amp=amp)
#     print(amp, {k: round(v / MiB, 1) for k, v in adam[amp].categories.items()})
# for name in ("parameters", "optimizer_states", "input"):
#     assert adam[True].categories[name] == adam[False].categories[name]
# assert (round(adam[False].categories["activations"] / MiB, 1), round(adam[True].categories["activations"] / MiB, 1)) == (2633.8, 1472.9)
# ```
#
# Parameters (44.6 MiB), optimizer states (Adam's two fp32 moments, 89.2 MiB) and the input stay the same: autocast changes the dtype of operation outputs, not of the tensors the optimizer keeps, and keeps no master copy. Activations shrink by 44% (2633.8 to 1472.9 MiB), not 50%, for section 1's reasons: MaxPool's int64 indices do not shrink, and autocast adds 16-bit copies of the input batch and the weights. For large models whose memory is dominated by model states (lesson 05a), AMP alone saves little; schemes that do shrink the model states keep 16-bit weights and gradients beside an fp32 master copy, which is why the ZeRO paper's mixed-precision accounting still comes to 16 bytes per parameter (2 + 2 + 12, lesson 01).
# </details>
#
#
# ## Key points
#
# - AMP halves only the activations autocast computes in 16 bits (in ResNet18, all of them, exactly), keeps MaxPool's int64 indices, and adds 16-bit copies of the input and the weights; parameters, gradients and optimizer states stay fp32, with no master copy. ResNet18 at batch 128: the peak falls by about 40%.
# - Checkpointing keeps segment inputs and recomputes segments in backward: up to one extra forward pass (+34% FLOPs for ResNet18, where a forward pass is a little over a third of the step). For n equal layers the best is √n segments (Chen et al. 2016); for real networks the largest segment sets a floor.
# - The article's "divide by 5" is the reentrant checkpoint on an input that does not require grad: most parameters get **no gradient**. Use `use_reentrant=False`, and check that every parameter has a `.grad` after backward.
# - Checkpointing gives bit-identical gradients; it updates BatchNorm statistics twice unless you stop it (momentum 0.1 twice = 0.19: half the averaging window). AMP gives close gradients: the loss within 1%, the gradient pointing the same way.
#
# ## Further reading
#
# - T. Chen, B. Xu, C. Zhang, C. Guestrin, *Training Deep Nets with Sublinear Memory Cost*, 2016, arXiv:1604.06174.
# - P. Micikevicius et al., *Mixed Precision Training*, ICLR 2018, arXiv:1710.03740.
# - PyTorch documentation: *torch.utils.checkpoint* (reentrant vs non-reentrant) and *Automatic Mixed Precision examples*.
# - Q. Febvre, *Deep Learning Memory Usage and Pytorch Optimization Tricks*, Sicara, 2019 (the "divide by 5").
#
# **Next:** lesson 04b trains in these configurations on real data (accuracy and time), offloads saved tensors to host memory down to a floor that no per-tensor trick breaks, runs them from the command line, and sets them beside a real GPU's figures.
