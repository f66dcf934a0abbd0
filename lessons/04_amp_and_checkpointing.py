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
# **Time:** 40 minutes teaching, 20 minutes exercises. **GPU:** not needed (memory simulated, training on the CPU); section 8 measures a GPU if you have one.
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
from helpers.data import load_digits
from helpers.models import build_model, digits_cnn, sequential_form
from helpers.plots import plot_peak_bars, plot_timeline
from helpers.step import Checkpointed
from helpers.training import train

_ = torch.manual_seed(0)
# The reentrant checkpoint warns when no input requires grad; section 2 shows that case on purpose.
warnings.filterwarnings("ignore", message="None of the inputs have requires_grad")

# %%
# NBVAL_IGNORE_OUTPUT
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. Four configurations of one step
#
# Two tools attack the activations, which lesson 03 showed are 95% of ResNet18's peak at batch 128:
#
# * **AMP** (`torch.autocast`) runs the convolutions and matrix products in a 16-bit float type: the activations they produce take 2 bytes per value instead of 4. On a GPU that is float16 with a `GradScaler` (which scales the loss so small float16 gradients do not underflow); the simulation runs on the CPU, whose autocast uses bfloat16, which needs no scaler.
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

# %%
fig = plot_peak_bars(list(steps.values()), list(steps), title="What is allocated at each configuration's peak")
fig


# %% [markdown]
# In the bars, the parameters and the input batch are the same in every configuration; what changes is the activations (green) and "other" (grey: mostly the gradients flowing back through the activations). The checkpointed steps also hold more parameter gradients (orange) at their peak, because they peak later in backward. In the timeline, the baseline and AMP climb through the forward pass and peak early in backward. The checkpointed steps stay low through the forward pass (they keep only each segment's input) and peak late, when backward recomputes the first segment, which holds the stem. Their curves run longer because they have extra `recompute` events; the shading marks the baseline's phases. Now explain each difference.
#
# **AMP.** Look at the first convolution. In fp32 it added its 392 MiB output. Under autocast it adds a bfloat16 output (half the size) *and* bfloat16 copies of its input and its weight, because autocast casts the inputs of each convolution to 16 bits and autograd keeps the casts for backward:

# %%
def nbytes(shape, dtype):
    n = 1
    for s in shape:
        n *= s
    return round_up(n * dtype.itemsize)


amp_conv1 = steps["AMP"].find("conv1", "fwd").delta_bytes
out16 = nbytes((128, 64, 112, 112), torch.bfloat16)
x16 = nbytes((128, 3, 224, 224), torch.bfloat16)
w16 = nbytes((64, 3, 7, 7), torch.bfloat16)
print(f"conv1 under AMP: {fmt_bytes(amp_conv1, sign=True)} = output {fmt_bytes(out16)} + input copy {fmt_bytes(x16)} "
      f"+ weight copy {w16:,} bytes")
assert amp_conv1 == out16 + x16 + w16

# %% [markdown]
# So AMP does **not** halve the step. What stays 32-bit: the parameters (the optimizer updates fp32 *master* weights), their gradients, the optimizer states, the input batch, and the outputs of operations autocast keeps in fp32 (the loss, softmax). AMP adds 16-bit copies of the weights. It halves only the activations that autocast produces in 16 bits, and the peak falls by about 40%, not 50%.
#
# **Checkpointing** keeps the activations of one segment at a time. At the peak of the checkpointed step, backward is recomputing a segment (the `recompute` events) while the inputs of the earlier segments wait. Its peak moves from the end of the network to the segment containing `layer1`:

# %%
for name in ("baseline", "checkpoint 4"):
    p = steps[name]
    e = p.events[p.peak_event]
    recomputes = sum(ev.phase == "recompute" for ev in p.events)
    print(f"{name:<13} peak at event {p.peak_event:>3} ({e.phase} {e.module}); recompute events: {recomputes}")
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
print(f"AMP (bfloat16): loss {amp_loss:.4f} vs {base_loss:.4f} ({abs(amp_loss - base_loss) / base_loss:.2%} apart); "
      f"gradient cosine similarity {cosine:.3f}, relative difference {relative:.2f}")
assert abs(amp_loss - base_loss) / base_loss < 0.01 and cosine > 0.9

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
# The fix, `Checkpointed(..., freeze_bn_stats=True)`, passes a `context_fn` to `torch.utils.checkpoint.checkpoint` (non-reentrant only) that sets every BatchNorm's momentum to 0 during recomputation, so the running values are kept exactly, and takes back the extra count. Alternatives: put BatchNorm outside the checkpointed segments, or accept the drift, which with the default momentum of 0.1 amounts to averaging over a slightly shorter window.
#
# ## 4. How many segments? Memory, FLOPs, time, and the √n rule
#
# Sweep ResNet18's segments from 1 (nothing checkpointed) to 10 (every unit but the head). For each: the peak (simulated), and the floating-point operations of forward + backward counted by `torch.utils.flop_counter.FlopCounterMode`, which runs fine on fake tensors.

# %%
def step_flops(segments):
    """FLOPs of one forward + backward of ResNet18 at batch 128 (fake tensors: nothing is computed)."""
    with FakeTensorMode():
        model = build_model("resnet18")
        runner = Checkpointed(sequential_form(model), segments) if segments > 1 else model
        images, labels = torch.randn(128, 3, 224, 224), torch.randint(0, 1000, (128,))
        with FlopCounterMode(display=False) as counter:
            F.cross_entropy(runner(images), labels).backward()
    return counter.get_total_flops()


sweep = {}
for k in range(1, 11):
    p = profile_step("resnet18", 128, device="simulated", checkpoint=k)
    sweep[k] = (p.peak_allocated_bytes, step_flops(k))
base_flops = sweep[1][1]
print(f"{'segments':>8} {'peak':>11} {'TFLOPs':>7} {'recomputed':>10}")
for k, (peak, flops) in sweep.items():
    print(f"{k:>8} {fmt_bytes(peak):>11} {flops / 1e12:>7.3f} {flops / base_flops - 1:>+10.1%}")
assert sweep[1][0] == base and min(v[0] for v in sweep.values()) < 0.65 * base
assert max(v[1] for v in sweep.values()) / base_flops < 1.4   # at most one extra forward pass


# %% [markdown]
# The recomputation costs at most one extra forward pass: a forward is about a third of forward + backward, so the FLOPs grow by up to a third. The memory does *not* keep falling: from 6 segments on, the peak is stuck at the stem, which holds ResNet18's largest activations (lesson 03) and must be recomputed whole when its segment's turn comes.
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
ax_r.plot(list(sweep), [v[0] / MiB for v in sweep.values()], "o-", label="peak")
ax_r.set(xlabel="checkpoint segments", ylabel="peak allocated (MiB)", title="ResNet18, batch 128")
ax_f = ax_r.twinx()
ax_f.plot(list(sweep), [v[1] / base_flops for v in sweep.values()], "s--", color="C3")
ax_f.set_ylabel("FLOPs ÷ baseline", color="C3")
ax_m.plot(list(chain), [v / MiB for v in chain.values()], "o-")
ax_m.axvline(65 ** 0.5, color="gray", ls=":", label="√n")
ax_m.set(xscale="log", xlabel="checkpoint segments (log scale)", ylabel="peak allocated (MiB)",
         title="64 equal blocks, batch 16384")
ax_m.legend()
fig

# %% [markdown]
# The chain of equal blocks is smallest at 8 segments, √64, with 3.4 times less memory, exactly as the rule predicts; the bumps between come from PyTorch's segment sizes (n // k units each, the remainder in the last, unchecked segment). For real networks, use the rule as a starting point, then measure: the largest layer sets a floor no segmenting can break.
#
# What does the recomputation cost in **time**? Measured on this CPU, on ResNet18 with 64 × 64 images at batch 32, so that it runs in seconds. Timings vary between machines and with their load, so this output is neither checked nor asserted; the FLOP counts above are the deterministic version of the same claim:

# %%
# NBVAL_IGNORE_OUTPUT
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
print(f"{'configuration':<20} " + " ".join(f"ep{e + 1:>2}" for e in range(8)) + "   final loss")
for name, h in runs.items():
    print(f"{name:<20} " + " ".join(f"{100 * a:4.1f}" for a in h.test_accuracy) + f"   {h.train_loss[-1]:.4f}")
assert runs["checkpoint 4"].test_accuracy == runs["baseline"].test_accuracy
assert runs["checkpoint 4"].train_loss == runs["baseline"].train_loss
n_test = len(digits.y_test)
apart = max(abs(a - b) for a, b in zip(runs["AMP"].test_accuracy, runs["baseline"].test_accuracy)) * n_test
print(f"AMP vs fp32: test accuracy differs by at most {round(apart)} of {n_test} images in any epoch; "
      f"final accuracy {100 * runs['AMP'].test_accuracy[-1]:.1f}% vs {100 * runs['baseline'].test_accuracy[-1]:.1f}%")
assert round(apart) <= 2 and abs(runs["AMP"].test_accuracy[-1] - runs["baseline"].test_accuracy[-1]) <= 0.01

# %%
fig = Figure(figsize=(9, 3.5), layout="constrained")
ax = fig.add_subplot()
for (name, h), style in zip(runs.items(), ("-", "--", ":", "-.")):
    ax.plot(range(1, 9), [100 * a for a in h.test_accuracy], style, marker="o", label=name)
ax.set(xlabel="epoch", ylabel="test accuracy (%)", title="digits CNN: accuracy per epoch in four configurations")
ax.legend()
fig

# %% [markdown]
# **"Checkpointing changes training": refuted.** With the BatchNorm fix, checkpointed training is the same computation: every epoch's loss and accuracy are identical to the baseline's, to the last bit.
#
# **"AMP converges worse": refuted here.** The bfloat16 run differs from the fp32 run by a test image or so in some epochs and ends within one percentage point of it. On larger problems float16 needs its `GradScaler` and bfloat16 its 8-bit mantissa can matter; the claim to check is always the final accuracy, not the single step.
#
# **"Checkpointing is slower": confirmed** (the output below was recorded on a 2-core CPU; yours will differ):

# %%
# NBVAL_IGNORE_OUTPUT
per_step = {name: sum(h.seconds) / h.updates[-1] for name, h in runs.items()}
for name, t in per_step.items():
    print(f"{name:<20} {1000 * t:6.2f} ms per step ({t / per_step['baseline'] - 1:+.0%})")

# %% [markdown]
# Checkpointing pays for its recomputation in time, of the same order as the extra FLOPs counted in section 4 (compare the recorded timings there); measure it on your own hardware before relying on it. AMP's speed depends on the hardware: on the CPU these outputs were recorded on, without bfloat16 matrix units, AMP was *slower*, because the casts cost more than the 16-bit arithmetic saves. On a GPU with tensor cores (V100 and later), float16 matrix products run several times faster, and AMP usually speeds training up; section 8 measures it when a GPU is present. The memory saving, measured in section 1, holds everywhere.
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
          f"parameters without gradient: {len(p.params_without_grad)}  peak at {p.events[p.peak_event].phase} "
          f"{p.events[p.peak_event].module}")
best_correct = min(p.peak_allocated_bytes for p in steps.values() if not p.params_without_grad)
print(f"best correct configuration: baseline ÷ {base / best_correct:.2f}")
assert all(not steps[n].params_without_grad for n in beyond)
assert best_correct == steps["offload + AMP"].peak_allocated_bytes

# %% [markdown]
# Offloading with AMP keeps every gradient and divides the peak by about 3.5, better than any checkpointing. Checkpointing every block on top of it makes things *worse*: tensors saved inside checkpointed segments are recomputed on the GPU rather than offloaded, and the stem is recomputed whole.
#
# Can any of these reach the article's 5x correctly? Look at where every good configuration peaks: in the backward pass of the stem. BatchNorm's backward needs, at the same moment, the gradient of its output, its input (brought back from the host, or recomputed), and the gradient of its input that it is writing: three tensors of 128 × 64 × 112 × 112, whatever we do with the rest of the network. Add the parameters, their gradients and the input batch, which must all be on the GPU at that moment:

# %%
stem = 128 * 64 * 112 * 112
at_peak = steps["offload + AMP"].categories
floor = 3 * stem * 2 + at_peak["parameters"] + at_peak["gradients"] + at_peak["input"]
print(f"floor with 16-bit activations: 3 × {fmt_bytes(stem * 2)} + parameters {fmt_bytes(at_peak['parameters'])} "
      f"+ gradients {fmt_bytes(at_peak['gradients'])} + input {fmt_bytes(at_peak['input'])} = {fmt_bytes(floor)}")
print(f"best possible reduction with per-tensor tricks: baseline ÷ {base / floor:.2f}; offload + AMP reaches "
      f"÷ {base / best_correct:.2f}")
assert floor < best_correct < 1.1 * floor and base / floor < 5

# %% [markdown]
# So **no correct combination of AMP, checkpointing and offloading can divide ResNet18's batch-128 peak by 5**: the stem's backward alone sets a floor at about 3.7x. The article's 5x came from not training most of the network. To go further you must change the computation itself: a smaller batch with gradient accumulation (exact for networks without BatchNorm; with BatchNorm it changes the statistics), a stem that computes its gradient in place (in-place activated BatchNorm, Rota Bulò et al. 2018), or sharding across GPUs (lesson 07).
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
# The command line gives the same figures as this lesson (`--device simulated`):
#
# ```bash
# python -m helpers profile --model resnet18 --batch-size 128 --amp --checkpoint 4 --device simulated            # AMP + checkpoint 4
# python -m helpers profile --model resnet18 --batch-size 128 --amp --checkpoint 4 --reentrant --device simulated  # the trap, with a warning
# python -m helpers profile --model resnet18 --batch-size 128 --amp --offload --device simulated                   # offload + AMP
# ```

# %%
import subprocess
import sys

out = subprocess.run([sys.executable, "-m", "helpers", "profile", "--amp", "--offload", "--device", "simulated"],
                     capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
print(out)
assert out == f"peak allocated: {steps['offload + AMP'].peak_allocated_bytes / MiB:.1f} MiB (simulated)" 

# %% [markdown]
# ## 8. On a real GPU
#
# With a GPU, the next cell measures the main configurations for real (float16 autocast with a `GradScaler`, `save_on_cpu(pin_memory=True)`), with the time per step. float16 and bfloat16 autocast cast different sets of operations, so expect the AMP figures to differ from the simulated ones by a few percent; the ordering and the trap do not change. (Output not checked: it depends on the GPU.)

# %%
# NBVAL_IGNORE_OUTPUT
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
# missing = [n for n, p in features.named_parameters() if p.grad is None]
# print(missing)   # ['0.weight', '0.bias', '2.weight', '2.bias']
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
# for k in range(1, 11):
#     p = profile_step("vgg11", 64, device="simulated", checkpoint=k)
#     e = p.events[p.peak_event]
#     print(k, fmt_bytes(p.peak_allocated_bytes), e.phase, e.module)
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
# for amp in (False, True):
#     p = profile_step("resnet18", 128, device="simulated", optimizer="adam", steady_state=True, amp=amp)
#     print(amp, {k: round(v / MiB, 1) for k, v in p.categories.items()})
# ```
#
# Parameters (44.6 MiB), optimizer states (Adam's two fp32 moments, 89.2 MiB) and the input stay the same: autocast only changes the dtype of operation outputs, while the optimizer works on the fp32 master weights. Activations shrink by 44% (2633.8 to 1472.9 MiB): not quite half, because autocast keeps some operations in fp32. This is why, for large models whose memory is dominated by model states (lesson 05), AMP alone saves little, and why mixed-precision training in ZeRO still counts 16 bytes per parameter.
# </details>
#
# ## Key points
#
# - AMP halves only the activations autocast computes in 16 bits, and adds 16-bit weight copies; parameters, gradients and optimizer states stay fp32. ResNet18 at batch 128: the peak falls by about 40%.
# - Checkpointing keeps segment inputs and recomputes segments in backward: up to one extra forward pass (at most +33% FLOPs). For n equal layers the best is √n segments (Chen et al. 2016); for real networks the largest segment sets a floor.
# - The article's "divide by 5" is the reentrant checkpoint on an input that does not require grad: most parameters get **no gradient**. Use `use_reentrant=False`, and check that every parameter has a `.grad` after backward.
# - Checkpointing gives bit-identical gradients; it updates BatchNorm statistics twice unless you stop it. AMP gives close gradients and, here, the same final accuracy.
# - Offloading saved tensors to host memory (`save_on_cpu`) trades memory for transfers; with AMP it divides ResNet18's peak by about 3.5. The stem's backward sets a floor near 3.7x: 5x is not reachable correctly by these tools at batch 128.
#
# ## Further reading
#
# - T. Chen, B. Xu, C. Zhang, C. Guestrin, *Training Deep Nets with Sublinear Memory Cost*, 2016, arXiv:1604.06174.
# - P. Micikevicius et al., *Mixed Precision Training*, ICLR 2018, arXiv:1710.03740.
# - PyTorch documentation: *torch.utils.checkpoint* (reentrant vs non-reentrant), *Automatic Mixed Precision examples*, and *Hooks for saved tensors* (`save_on_cpu`).
# - S. Rota Bulò, L. Porzi, P. Kontschieder, *In-Place Activated BatchNorm for Memory-Optimized Training of DNNs*, CVPR 2018.
# - Q. Febvre, *Deep Learning Memory Usage and Pytorch Optimization Tricks*, Sicara, 2019 (the "divide by 5").
