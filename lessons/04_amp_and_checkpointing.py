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
# # 04 · AMP and activation checkpointing, done right and measured
#
# **Questions**
# - How much memory do automatic mixed precision (AMP) and activation checkpointing save, and why exactly that much?
# - The Sicara article says AMP plus checkpointing "divides the footprint of ResNet18 by 5". Is that true?
# - What do they cost in speed, and do they change what the network learns?
#
# **Objectives**
# - Measure one ResNet18 training step in four configurations and explain each difference from dtypes and kept tensors.
# - Reproduce the article's "divide by 5", find the parameters it leaves without gradients, and spot the same bug in your own code.
# - Assert that checkpointing gives the same gradients as the baseline and AMP close ones, and fix BatchNorm's double update.
# - Sweep the number of checkpoint segments, count the recomputed FLOPs, and test the √n rule of Chen et al. (2016).
# - Train on real data in each configuration and confirm or refute "AMP converges worse" and "checkpointing is slower".
# - Go beyond the article with offloading saved tensors to host memory, and find the limit of every per-tensor trick.
#
# **Time:** about 115 minutes alone: 46 of reading, 41 of code, 5 for the figures, 2 to run all, 20 for the three exercises. **GPU:** not needed (memory simulated, training on the CPU); section 8 measures a GPU if you have one.
#
# Read lesson 03 first: this lesson uses its step profiles and vocabulary.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import contextlib
import copy
import time
import warnings

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from helpers import CATEGORIES, DoesNotFit, MiB, fmt_bytes, profile_step, round_up
from helpers.teaching.data import load_digits
from helpers.models import build_model, digits_cnn, sequential_form
from helpers.palette import OKABE_ITO
from helpers.teaching.plots import plot_peak_bars, plot_timeline
from helpers.saved import forward_saved_bytes
from helpers.techniques import Checkpointed
from helpers.teaching.training import train

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
# * **AMP** (`torch.autocast`) runs the convolutions and matrix products in a 16-bit float type: the activations they produce take 2 bytes per value instead of 4. On a GPU that is float16 with a `GradScaler` (which scales the loss so small float16 gradients do not underflow), and the simulation does the same, with CUDA's lists of which operations run in 16 bits (section 8 compares them with the CPU's). (The article, in 2019, used NVIDIA's Apex library for AMP: `torch.autocast` arrived in PyTorch 1.6, in 2020. This lesson re-creates its experiments with today's API.)
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


def one_step(checkpoint=0, reentrant=False, amp=False, freeze_bn_stats=False, offload=False):
    """Loss and model after one forward and backward pass from the reference weights."""
    model = copy.deepcopy(reference)
    runner = model
    if checkpoint:
        runner = Checkpointed(sequential_form(model), checkpoint, reentrant=reentrant, freeze_bn_stats=freeze_bn_stats)
    saving = torch.autograd.graph.save_on_cpu() if offload else contextlib.nullcontext()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp), saving:
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
# AMP does change the arithmetic: bfloat16 keeps 8 significant bits (float16 keeps 11). The tolerance we state: loss within 1% and the gradient, as one vector, pointing the same way (cosine similarity above 0.9). The relative difference of the whole gradient is large (about a third, at random initialisation), and individual small gradients can be off by more, which is why section 5 asks the question that matters: does training still reach the same accuracy?

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
# What does the recomputation cost in **time**? Measured on this CPU, on ResNet18 with 64 × 64 images at batch 32, so that it runs in seconds. Timings vary between machines, so this output is not checked; the FLOP counts above are the deterministic version of the same claim:

# %% tags=["nbval-ignore-output"] nbval_reason="wall-clock times depend on the machine and its load"
torch.manual_seed(0)
timed_model = build_model("resnet18", num_classes=10)
runners = {k: Checkpointed(sequential_form(timed_model), k) if k > 1 else timed_model for k in (1, 4, 10)}
images, labels = torch.randn(32, 3, 64, 64), torch.randint(0, 10, (32,))
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
# ## 5. Speed and accuracy on real data
#
# The article left these "to be confirmed". Train a small CNN (two convolutions with BatchNorm) on the digits of lesson 01, 8 epochs at batch 64 from the same initial weights, in the four configurations. AMP is bfloat16 autocast on the CPU; checkpointing uses 4 segments with the BatchNorm fix of section 3.

# %%
digits = load_digits()
runs = {}
for name, kw in configs.items():
    runs[name] = train(digits_cnn, digits, batch_size=64, epochs=8, lr=0.05, seed=0, **kw)[1]
n_test = len(digits.y_test)
apart = max(abs(a - b) for a, b in zip(runs["AMP"].test_accuracy, runs["baseline"].test_accuracy)) * n_test
same = {name: runs[name].test_accuracy == runs[reference].test_accuracy and runs[name].train_loss == runs[reference].train_loss
        for name, reference in (("checkpoint 4", "baseline"), ("AMP + checkpoint 4", "AMP"))}
# bfloat16 training differs in its last bits between CPUs: print the claims, checked (the next cell has the digits)
print("8 epochs on the digits, from the same initial weights:")
print(f"  {'checkpoint 4 = baseline, every epoch loss and accuracy, to the last bit:':<75}{same['checkpoint 4']}")
print(f"  {'AMP + checkpoint 4 = AMP, likewise:':<75}{same['AMP + checkpoint 4']}")
print(f"  {f'AMP within 2 of the {n_test} test images of fp32, in every epoch:':<75}{round(apart) <= 2}")
print(f"  {'every configuration above 95% test accuracy after 8 epochs:':<75}{all(h.test_accuracy[-1] > 0.95 for h in runs.values())}")
assert all(same.values()) and round(apart) <= 2 and all(h.test_accuracy[-1] > 0.95 for h in runs.values())

# %% tags=["nbval-ignore-output"] nbval_reason="the bfloat16 runs' last digits and the wall-clock times depend on the machine"
print(f"{'configuration':<20} " + " ".join(f"ep{e + 1:>2}" for e in range(8)) + "   final loss   ms per step")
per_step = {name: sum(h.seconds) / h.updates[-1] for name, h in runs.items()}
for name, h in runs.items():
    print(f"{name:<20} " + " ".join(f"{100 * a:4.1f}" for a in h.test_accuracy)
          + f"   {h.train_loss[-1]:10.4f}   {1000 * per_step[name]:6.2f} ({per_step[name] / per_step['baseline'] - 1:+.0%})")

# %%
fig = Figure(figsize=(9, 3.5), layout="constrained")
ax = fig.add_subplot()
colours = [OKABE_ITO[c] for c in ("blue", "vermillion", "bluish green", "reddish purple")]   # as in section 1
for (name, h), style, colour in zip(runs.items(), ("-", "--", ":", "-."), colours):
    ax.plot(range(1, 9), [100 * a for a in h.test_accuracy], style, marker="o", color=colour, label=name)
ax.set(xlabel="epoch", ylabel="test accuracy (%)", title="digits CNN: accuracy per epoch in four configurations")
ax.legend()
fig

# %% [markdown]
# Look at the lines in pairs: checkpoint 4 lies on the baseline and AMP + checkpoint 4 on AMP in every epoch, and the two pairs stay within a couple of test images of each other, all four above 95% after 8 epochs.
#
# **"Checkpointing changes training": refuted.** With the BatchNorm fix, checkpointed training is the same computation: every epoch's loss and accuracy are identical to the baseline's, to the last bit.
#
# **"AMP converges worse": not observed here**, but on a small CNN, 8 epochs, one seed, bfloat16 on a CPU: it does not settle the question for your model. What would: float16 with its `GradScaler` on a GPU (float16 has a narrower range than bfloat16, which is what the scaler protects), your own network trained to the end, and several seeds, comparing final accuracies.
#
# **"Checkpointing is slower": confirmed** in the time column above (measured on the machine that ran the notebook), by the same order as section 4's extra FLOPs; measure it on your own hardware before relying on it. AMP's speed depends on the hardware: a CPU without 16-bit arithmetic units spends more on the casts than the bfloat16 products save, and AMP runs *slower*; a CPU with bfloat16 instructions (AVX-512 BF16, AMX) runs it faster; on a GPU with tensor cores (V100 and later) float16 matrix products run several times faster, and AMP usually speeds training up (section 8 measures it). The memory saving of section 1 holds everywhere.
#
# ## 6. Beyond the article: offloading saved tensors to host memory
#
# `torch.autograd.graph.save_on_cpu(pin_memory=True)` installs `saved_tensors_hooks` that copy every tensor autograd saves to (pinned) host memory during the forward pass, and copy it back to the GPU when backward needs it. No recomputation: the cost is the transfer. `profile_step(offload=True)` simulates it (the host copies are not GPU memory; the copies back are). Combine it with the rest:

# %%
beyond = {
    "offload": {"offload": True},
    "offload + AMP": {"offload": True, "amp": True},
    "offload + AMP + checkpoint every block": {"offload": True, "amp": True, "checkpoint": 10},
}
for name, kw in beyond.items():
    steps[name] = profile_step("resnet18", 128, device="simulated", **kw)
    p = steps[name]
    print(f"{name:<40} {fmt_bytes(p.peak_allocated_bytes):>11}  baseline ÷ {base / p.peak_allocated_bytes:.2f}  "
          f"no gradient: {len(p.params_without_grad)}  peak at the {p.events[p.peak_event].label}")
best_correct = min(p.peak_allocated_bytes for p in steps.values() if not p.params_without_grad)
print(f"best correct configuration: baseline ÷ {base / best_correct:.2f}")
assert all(not steps[n].params_without_grad for n in beyond)
assert best_correct == steps["offload + AMP"].peak_allocated_bytes

# %% [markdown]
# Offloading with AMP keeps every gradient and divides the peak by about 3.5, better than any checkpointing. Checkpointing every block on top of it makes things *worse*: tensors saved inside checkpointed segments are recomputed on the GPU rather than offloaded, and the stem is recomputed whole.
#
# Can any of these reach the article's 5x correctly? Not with these techniques, and the reason is one operation. Every tensor that *waits* for backward can be offloaded or recomputed, but an operation's backward needs its own inputs on the GPU while it runs. Take the step as any ordinary training loop writes it: the loop holds its input batch until the step ends, the gradients accumulate in `.grad` until `optimizer.step()`, and the parameters live on the GPU. With AMP, checkpointing and offloading, what must then be on the GPU at the moment the stem's MaxPool2d runs its backward?
#
# * its backward kernel (`max_pool2d_with_indices_backward`) reads the incoming gradient, the layer's input and its int64 indices, and writes the gradient of the input: four tensors at once, whatever happened to them before;
# * the parameters, the gradients of every layer after the stem (their backward has run), and the input batch.

# %%
fp16, i64 = torch.float16.itemsize, torch.int64.itemsize
full, pooled = 128 * 64 * 112 * 112, 128 * 64 * 56 * 56
maxpool_backward = {"incoming gradient (fp16)": pooled * fp16, "its input, the ReLU's output (fp16)": full * fp16,
                    "its indices (int64)": pooled * i64, "the gradient it writes (fp16)": full * fp16}
at_peak = steps["offload + AMP"].categories
held = {"parameters": at_peak["parameters"], "gradients of the layers after the stem": at_peak["gradients"],
        "the input batch": at_peak["input"]}
floor = sum(maxpool_backward.values()) + sum(held.values())
for what, nbytes in {**maxpool_backward, **held}.items():
    print(f"  {what:<40} {fmt_bytes(nbytes):>10}")
print(f"floor for AMP + checkpointing + offloading: {fmt_bytes(floor)}, baseline ÷ {base / floor:.2f}; "
      f"offload + AMP peaks at {fmt_bytes(best_correct)}")
assert steps["offload + AMP"].events[steps["offload + AMP"].peak_event].module == "maxpool"
assert 0 <= best_correct - floor < 64 * 1024 and base / floor < 5   # reached, up to the loss and other tiny tensors

# %% [markdown]
# Offload + AMP reaches that floor: its peak *is* the stem's MaxPool backward, to within a few tiny tensors (the loss, the targets). So **no correct combination of AMP, checkpointing and offloading divides ResNet18's batch-128 peak by 5**; about 3.5 is the limit. (The peaks of the configurations without offloading are elsewhere: the checkpointed ones in `layer1`'s recomputation, section 1.)
#
# The floor rests on the loop's habits, and two of them can go. A loop can drop its input batch once the forward pass is done (conv1's saved copy is offloaded anyway), and it can apply the optimizer *during* backward, one parameter as soon as its gradient is complete (`Tensor.register_post_accumulate_grad_hook`, lesson 05a), so that no gradient waits. What is left is the four tensors of MaxPool's backward and the parameters themselves:

# %%
tighter = sum(maxpool_backward.values()) + at_peak["parameters"]
print(f"without the input batch and the waiting gradients: {fmt_bytes(tighter)}, baseline ÷ {base / tighter:.2f}")
assert base / tighter < 5

# %% [markdown]
# Still short of 5. The article's 5x came from not training most of the network. To go further you must change the computation itself: a smaller batch with gradient accumulation (exact for networks without BatchNorm; with BatchNorm it changes the statistics), a pooling or normalisation layer that keeps less for its backward (in-place activated BatchNorm, Rota Bulò et al. 2018), or sharding across GPUs (lesson 07).
#
# Offloading must be correct too. `save_on_cpu` on real CPU tensors runs the same hooks (the "copies" are then within host memory), with every unit checkpointed:

# %%
off_loss, off_model = one_step(checkpoint=10, offload=True, freeze_bn_stats=True)
same = all(torch.equal(p.grad, q.grad) for p, q in zip(off_model.parameters(), base_model.parameters()))
print(f"save_on_cpu + checkpoint every unit: loss equal {off_loss == base_loss}, every gradient bit-identical: {same}")
assert off_loss == base_loss and same


# %% [markdown]
# **What offloading costs** is bandwidth. Every saved tensor crosses the host link twice, to the host in forward and back in backward. Count those bytes for the offload + AMP step, with the same hooks on fake tensors:

# %%
def offloaded_bytes(amp):
    """Bytes that save_on_cpu would copy to the host in one ResNet18 step at batch 128."""
    moved = []

    def pack(t):
        moved.append(t.untyped_storage().nbytes())
        return t

    with FakeTensorMode():
        model = build_model("resnet18")
        images, labels = torch.randn(128, 3, 224, 224), torch.randint(0, 1000, (128,))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp), \
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = F.cross_entropy(model(images), labels)
    return sum(moved)


moved = offloaded_bytes(amp=True)
pcie4 = 32e9  # bytes/s: PCIe 4.0 x16, nominal, per direction
print(f"offload + AMP moves {fmt_bytes(moved, 'GiB')} to the host and back in every step: "
      f"{1000 * moved / pcie4:.0f} ms each way at PCIe 4.0 x16's nominal 32 GB/s")
assert moved > 2**30

# %% [markdown]
# About 2 GiB each way per step, because `save_on_cpu` copies every saved tensor separately, including ones that share storage (lesson 02 showed a ReLU's output saved by the ReLU and by the next convolution: it is copied twice). At nominal PCIe speed that is tens of milliseconds per direction, comparable to the step itself on a fast GPU; with `pin_memory=True` the copies can overlap with computation. Whether that pays depends on your GPU and link: measure it (section 8 does, on a GPU).
#
# ## 7. The command line
#
# The command line gives the same figures as this lesson (`--device simulated`). This lesson's steps are first steps, so the commands say `--first-step`; without it the command line answers for the steady-state step (the second, when the optimizer's states exist), the one that decides whether training fits:
#
# ```bash
# python -m helpers profile --model resnet18 --batch-size 128 --amp --checkpoint 4 --device simulated --first-step            # AMP + checkpoint 4
# python -m helpers profile --model resnet18 --batch-size 128 --amp --checkpoint 4 --reentrant --device simulated --first-step  # the trap, with a warning
# python -m helpers profile --model resnet18 --batch-size 128 --amp --offload --device simulated --first-step                   # offload + AMP
# ```

# %%
import subprocess
import sys

out = subprocess.run([sys.executable, "-m", "helpers", "profile", "--amp", "--offload", "--device", "simulated", "--first-step"],
                     capture_output=True, text=True, check=True).stdout.splitlines()[0]
print(out)
assert out == f"peak allocated: {steps['offload + AMP'].peak_allocated_bytes / MiB:,.1f} MiB (simulated)"

# %% [markdown]
# ## 8. On a real GPU
#
# On a GPU, AMP runs float16 with a `GradScaler`, and so did the simulation above. Would the CPU's own autocast have done as well? Not always. Autocast follows a list of operations per device (PyTorch's *autocast op reference*): CUDA's runs `softmax`, `log_softmax`, `layer_norm` and `group_norm` (and `exp`, `sum` and others) in float32, where the CPU's lets them run in 16 bits when their input is 16-bit. The simulation runs the CPU's kernels with CUDA's lists.
#
# A forward pass on fake CUDA tensors needs no GPU (backward does: the autograd engine asks the CUDA runtime for device 0, PyTorch issue #92627). So `forward_saved_bytes` can run one forward pass and sum what autograd keeps for backward, on the CPU's kernels, on a fake GPU, and in the simulation. Each of those four layers after a `Linear(512, 512)`, on a (64, 512) input under float16 autocast:

# %%
followers = {"Softmax": nn.Softmax(dim=-1), "LogSoftmax": nn.LogSoftmax(dim=-1),
             "LayerNorm": nn.LayerNorm(512, elementwise_affine=False), "GroupNorm": nn.GroupNorm(8, 512, affine=False)}
print(f"{'kept for backward':<12} {'CPU':>24} {'CUDA':>24}")
for name, layer in followers.items():
    row = {dev: forward_saved_bytes(lambda layer=layer: nn.Sequential(nn.Linear(512, 512), layer), (64, 512),
                                    device=dev, autocast_dtype=torch.float16) for dev in ("cpu", "cuda", "simulated")}
    print(f"{name:<12} " + " ".join(f"{fmt_bytes(sum(row[d].values()), 'KiB'):>9}, {fmt_bytes(row[d].get(torch.float32, 0), 'KiB'):>9} fp32"
                                    for d in ("cpu", "cuda")))
    assert torch.float32 not in row["cpu"] and row["cuda"][torch.float32] >= 64 * 512 * 4   # float32 kept on CUDA
    assert row["simulated"] == row["cuda"]                                                  # the simulation: CUDA's
print("simulated: the same bytes as CUDA, dtype by dtype, for all four")

# %% [markdown]
# On CUDA each runs in float32 and keeps a float32 tensor for its backward (the softmaxes their output, the norms their input and statistics), twice the bytes of the CPU's 16-bit one; the other 64 KiB is the Linear's 16-bit copy of its input, the same on both. Now whole networks: ResNet18, and a vision transformer (Swin-T), whose LayerNorms and softmaxes are such layers, under both 16-bit types:

# %%
kept = {}
for model, batch in (("resnet18", 128), ("swin_t", 32)):
    row = {}
    for label, device, dtype in (("CPU lists", "cpu", torch.float16), ("CUDA, float16", "cuda", torch.float16),
                                 ("CUDA, bfloat16", "cuda", torch.bfloat16), ("simulated", "simulated", torch.float16)):
        row[label] = sum(forward_saved_bytes(model, (batch, 3, 224, 224), device=device, autocast_dtype=dtype,
                                             num_classes=1000).values())
    kept[model] = row
    print(f"{model} at batch {batch}, forward under autocast keeps: "
          + ", ".join(f"{label} {fmt_bytes(n)}" for label, n in row.items()))
for model, row in kept.items():
    assert row["CUDA, float16"] == row["CUDA, bfloat16"]                                   # the 16-bit type: no difference
    assert abs(row["simulated"] - row["CUDA, float16"]) < 0.001 * row["CUDA, float16"]    # the simulation: CUDA's lists
assert abs(kept["resnet18"]["CUDA, float16"] - kept["resnet18"]["CPU lists"]) < MiB
assert kept["swin_t"]["CUDA, float16"] > 1.1 * kept["swin_t"]["CPU lists"]

# %% [markdown]
# float16 and bfloat16 keep the same bytes on CUDA: what matters is the device's list, not the 16-bit type. The simulation keeps what the fake GPU keeps, to 0.1% (the rest is BatchNorm's saved statistics, float32 on a GPU and float16 here, a few KiB). For ResNet18 the CPU's lists would have given nearly the same figure, less than 1 MiB apart; for Swin-T they keep more than 10% less, so simulating a transformer with the CPU's own autocast would underestimate a GPU. (The simulation follows CUDA's kernels in two more places: dropout's 1-byte mask, lesson 02, and the attention kernel, lesson 08.)
#
# With a GPU, the next cell measures the main configurations for real (float16 autocast with a `GradScaler`, `save_on_cpu(pin_memory=True)`), with the time per step. Expect small differences from the simulated figures (cuDNN workspaces, the allocator's unsplit blocks of lesson 00); the ordering and the trap do not change. (Output not checked: it depends on the GPU.)

# %% tags=["nbval-ignore-output"] nbval_reason="it measures this machine's GPU, and says so when there is none"
if torch.cuda.is_available():
    for name, kw in {**configs, "AMP + reentrant checkpoint 4": {"amp": True, "checkpoint": 4, "reentrant": True},
                     **beyond}.items():
        start = time.perf_counter()
        try:
            p = profile_step("resnet18", 128, device="cuda", **kw)
        except DoesNotFit as e:  # a small GPU: memory already released, go on with the next one
            print(f"{name:<40} does not fit this GPU: {e.cuda_message}")
            continue
        print(f"{name:<40} {fmt_bytes(p.peak_allocated_bytes):>11}  simulated baseline ÷ {base / p.peak_allocated_bytes:4.2f}  "
              f"no gradient: {len(p.params_without_grad):>2}  {time.perf_counter() - start:.2f} s (traced)")
else:
    print("no GPU: the simulated figures above are the reference")

# %% [markdown]
# The project's own recording on a GPU (`make gpu-reference`, lesson 00): these configurations at batch 128, on the GPU and simulated. Does each technique save on a real GPU what the simulation says it saves?

# %%
from helpers.teaching.reference import load_reference, reference_report

print(reference_report("resnet18", 128))
recorded = load_reference()
if recorded is not None:
    peaks = {r["config"]: (r["cuda_peak_bytes"], r["simulated_allocated_bytes"]) for r in recorded["runs"]
             if (r["model"], r["batch_size"]) == ("resnet18", 128)}
    saved = {name: [1 - peaks[name][i] / peaks["baseline"][i] for i in (0, 1)] for name in peaks if name != "baseline"}
    print("saved against the baseline:  " + ",  ".join(f"{name} {gpu:.0%} (simulated {sim:.0%})"
                                                      for name, (gpu, sim) in saved.items()))
    assert all(abs(gpu - sim) < 0.04 for gpu, sim in saved.values())
    assert peaks["offload"][0] == peaks["offload"][1]  # offloading: the GPU's figure to the byte

# %% [markdown]
# Each technique saves on the GPU what the simulation predicts, to within a few points. Offloading matches to the byte: the saved activations wait in pinned host memory, which no device counter sees, and what stays on the device is tensors the simulation counts. Checkpointing is where the GPU's peak is furthest above the simulated one: its peak moves into the backward pass, where the recomputed segments' convolutions run with cuDNN workspaces that no trace of tensors can see (lesson 00). Read a checkpointed convolutional network's simulated peak as a floor, a few percent under the real one.
#
# The same recording caught the `GradScaler` at work. Each run is a first training step, and SGD with momentum creates its momentum buffers, one per parameter, in its first `optimizer.step()`. Here is what that step added on the GPU and in the simulation, for every model recorded with float16 AMP:

# %%
if recorded is not None:
    step_added = {r["model"]: [(gpu, sim) for _, phase, gpu, sim in r["events"] if phase == "optimizer.step"][0]
                  for r in recorded["runs"] if r["config"] == "AMP" and r["batch_size"] == 32}
    for model, (gpu, sim) in step_added.items():
        print(f"{model:<14} optimizer.step on the GPU {fmt_bytes(gpu, sign=True):>11}, simulated {fmt_bytes(sim, sign=True):>11}")
    skipped = sorted(model for model, (gpu, sim) in step_added.items() if gpu == 0 < sim)
    assert skipped == ["mobilenet_v2", "resnet50"]

# %% [markdown]
# On the GPU, MobileNet-V2's and ResNet-50's first step added nothing: their float16 gradients, scaled by the `GradScaler`'s starting factor of 65,536, overflowed, so `scaler.step(optimizer)` skipped the update (and `scaler.update()` halved the scale), and no momentum buffer was made. The simulation has shapes but no values, so it cannot overflow: it always steps, and its first step holds optimizer states that a real run may only create a step or a few later. For the peak of a training run that is the right answer, since the states do come; for the first step on a GPU it can be more than the GPU shows.

# %% [markdown]
# ## 9. What the GPU adds beyond the tensors
#
# Every figure so far counts tensors. A GPU's kernels also ask the caching allocator for memory of their own, freed when they return: cuDNN's convolutions a **workspace** per pass, chosen by cuDNN's heuristics; a sum over many rows a **staging buffer** (PyTorch's `Reduce.cuh` sizes it from the shape and the card's SM count); and the first matrix product of each thread a **cuBLAS workspace**, kept (32 MiB on an H200, two per training step). The simulation counts them with `workspaces="measured"`: reductions by PyTorch's rule, convolutions from a table of 66 convolutions run alone on the recording's H200, never from the steps below. Without it (the default), a simulated peak is a floor. Beside the H200's figures, each simulated reserved figure with the 64 MiB of cuBLAS workspaces the GPU held:

# %%
from helpers.allocator import replay
from helpers.teaching.reference import cublas_segment_bytes, cudnn_measurements

recorded_128 = {r["config"]: r for r in recorded["runs"] if (r["model"], r["batch_size"]) == ("resnet18", 128)}
cublas = cublas_segment_bytes(recorded)
beside = {}  # configuration -> {"GPU", "without", "with"} -> (peak allocated, peak reserved)
for name in ("baseline", "AMP", "checkpoint 4", "AMP + checkpoint 4", "offload"):
    measured = profile_step("resnet18", 128, device="simulated", workspaces="measured", **{**configs, **beyond}[name])
    models = {"without": replay(steps[name].allocation_log), "with": replay(measured.allocation_log)}
    beside[name] = {"GPU": (recorded_128[name]["cuda_peak_bytes"], recorded_128[name]["cuda_reserved_bytes"]),
                    **{k: (m.peak_allocated, m.peak_reserved + cublas) for k, m in models.items()}}
print(f"{'MiB':<20} {'peak allocated: GPU, without, with':>36} {'peak reserved: GPU, without, with':>36}")
for name, row in beside.items():
    print(f"{name:<20} " + "  ".join(" ".join(f"{row[k][i] / MiB:>11,.0f}" for k in ("GPU", "without", "with"))
                                     for i in (0, 1)))
off = {name: [row[k][i] / row["GPU"][i] - 1 for k in ("without", "with") for i in (0, 1)] for name, row in beside.items()}
assert all(abs(a_with) < 0.005 for _, _, a_with, _ in off.values())                    # allocated: within 0.5%
assert min(a_without for a_without, _, _, _ in off.values()) < -0.05                   # a floor: 5% under at worst
assert sum(abs(r_with) < 0.05 for _, _, _, r_with in off.values()) >= 3                # reserved: 3 of 5 within 5%
assert all(r_without < r_with for _, r_without, _, r_with in off.values())             # workspaces reserve more

fig = Figure(figsize=(10, 3.4), layout="constrained")
colours = {"GPU": OKABE_ITO["black"], "without": OKABE_ITO["sky blue"], "with": OKABE_ITO["orange"]}
for i, (ax, what) in enumerate(zip(fig.subplots(1, 2), ("peak allocated", "peak reserved"))):
    for j, k in enumerate(("GPU", "without", "with")):
        ax.bar([n + (j - 1) * 0.27 for n in range(len(beside))], [row[k][i] / MiB for row in beside.values()],
               0.27, color=colours[k], label={"GPU": "H200", "without": "simulated, tensors only",
                                               "with": "simulated, with the H200's table"}[k])
    ax.set_xticks(range(len(beside)), [n.replace(" + ", "\n+ ") for n in beside], fontsize=8)
    ax.set(ylabel="MiB", title=f"ResNet18, batch 128: {what}")
fig.axes[0].legend(fontsize=8)
fig

# %% [markdown]
# Look at the orange bars beside the black: with the table every simulated peak allocated is the H200's to within 0.5%; without it, up to 5% under, most where checkpointing moves the peak into the backward pass, beside the largest weight-gradient workspaces. Reserved memory gains more: a workspace of hundreds of MiB rarely fits a free cached block, so it opens a segment that stays in the cache. With the table, three of the five reserve what the H200 did to within 5%; the two checkpointed ones reserve more in the model than on the GPU, because which cached block serves a workspace depends on where each segment lies, and the model places segments at addresses of its own. Offloading reserves far more than its tensors: it keeps so little on the GPU that conv1's two workspaces each open a segment of their own. What cuDNN takes also depends on its settings, measured on the same H200:

# %%
cudnn = cudnn_measurements()
table = {r["batch"]: r for r in cudnn["workspaces"]["rows"] if r["kernel"] == 7 and r["dtype"] == "float32"}
conv1 = table[128]["workspace"]
offload = beside["offload"]["GPU"]
print(f"offload: the H200 reserved {(offload[1] - cublas) / offload[0] - 1:+.0%} over its peak allocated "
      f"(cuBLAS left out); conv1's workspaces {fmt_bytes(conv1['forward'])} forward, "
      f"{fmt_bytes(conv1['backward_weight'])} for the weight's gradient")
bench = cudnn["settings"]["benchmark_steps"]["baseline"]
print(f"cudnn.benchmark=True: first step's peak {bench['step0']['peak'] / bench['step1']['peak']:.2f}x the second's, "
      f"trying algorithms with workspaces up to {fmt_bytes(bench['step0']['find_ws_max'], 'GiB')}")
default = {(r["kernel"], r["in_channels"], r["out_channels"], r["stride"]): r["workspace"]
           for r in cudnn["workspaces"]["rows"] if (r["batch"], r["dtype"]) == (128, "float32")}
ratios = [ws / default[(r["kernel"], r["in_channels"], r["out_channels"], r["stride"])][p]
          for r in cudnn["settings"]["tf32_off"] for p, ws in r["workspace"].items()]
print(f"TF32 off for cuDNN: workspaces {min(ratios):.2f}x to {max(ratios):.1f}x those with TF32 on")
capped = {p["extra_mib"]: ([s for kind, s in p["first"] if kind == "alloc"], p["after"]) for p in cudnn["settings"]["pressure"]}
fallback = max(n for n, (granted, _) in capped.items() if not granted)
print(f"under a memory cap leaving up to {fallback} MiB beside conv1's output, its {fmt_bytes(conv1['forward'])} "
      f"workspace is refused: cuDNN runs without one, and keeps that choice once the cap is lifted")
assert 0.6 < (offload[1] - cublas) / offload[0] - 1 < 0.8 and 2 < bench["step0"]["peak"] / bench["step1"]["peak"] < 2.1
assert max(ratios) > 20 and all(not after for granted, after in capped.values() if not granted)

# %% [markdown]
# So a simulated figure for a convolutional network is a floor unless it is counted with the card's table; without a table, a verdict states a bound beside it (each workspace at most 1.52 times its convolution's input, weight and output, the largest ratio of the H200's table), as in `python -m helpers profile --model resnet18 --gpu "V100 16 GB"`. The bound holds for the defaults only: `cudnn.benchmark=True` searches with gigabytes on the first step, TF32 off changes workspaces twentyfold, and under memory pressure cuDNN takes a slower algorithm with less or no workspace, and keeps it.

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
# ## Key points
#
# - AMP halves only the activations autocast computes in 16 bits (in ResNet18, all of them, exactly), keeps MaxPool's int64 indices, and adds 16-bit copies of the input and the weights; parameters, gradients and optimizer states stay fp32, with no master copy. ResNet18 at batch 128: the peak falls by about 40%.
# - What autocast runs in 16 bits depends on the device, not on float16 vs bfloat16: for a transformer a GPU keeps more than the CPU's lists suggest, and the simulation follows CUDA's.
# - Checkpointing keeps segment inputs and recomputes segments in backward: up to one extra forward pass (+34% FLOPs for ResNet18, where a forward pass is a little over a third of the step). For n equal layers the best is √n segments (Chen et al. 2016); for real networks the largest segment sets a floor.
# - The article's "divide by 5" is the reentrant checkpoint on an input that does not require grad: most parameters get **no gradient**. Use `use_reentrant=False`, and check that every parameter has a `.grad` after backward.
# - Checkpointing gives bit-identical gradients; it updates BatchNorm statistics twice unless you stop it (momentum 0.1 twice = 0.19: half the averaging window). AMP gives close gradients; a worse final accuracy was not observed on this small problem, which does not settle it for yours.
# - Offloading saved tensors to host memory (`save_on_cpu`) trades memory for transfers; with AMP it divides ResNet18's peak by about 3.5, the floor that the stem's MaxPool backward sets for AMP, checkpointing and offloading: 5x is not reachable correctly by these tools at batch 128.
#
# ## Further reading
#
# - T. Chen, B. Xu, C. Zhang, C. Guestrin, *Training Deep Nets with Sublinear Memory Cost*, 2016, arXiv:1604.06174.
# - P. Micikevicius et al., *Mixed Precision Training*, ICLR 2018, arXiv:1710.03740.
# - PyTorch documentation: *torch.utils.checkpoint* (reentrant vs non-reentrant), *Automatic Mixed Precision examples*, and *Hooks for saved tensors* (`save_on_cpu`).
# - S. Rota Bulò, L. Porzi, P. Kontschieder, *In-Place Activated BatchNorm for Memory-Optimized Training of DNNs*, CVPR 2018.
# - Q. Febvre, *Deep Learning Memory Usage and Pytorch Optimization Tricks*, Sicara, 2019 (the "divide by 5").
