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
# # 01 · Mini-batches: why we use them, and how memory grows with them
#
# **Questions**
# - Why do we train on mini-batches rather than one sample, or the whole data set, at a time?
# - How does the memory of a training step grow with the batch size, and what is the largest batch a GPU can take?
#
# **Objectives**
# - Train the same network with batch sizes 1, 16, 128 and the whole training set, and compare loss, accuracy and time per epoch.
# - Measure the noise of a mini-batch gradient and relate it to the batch size.
# - Measure peak memory against batch size, fit M(b) = M0 + b·m, name M0 and m, and derive them exactly from one symbolic trace.
# - Predict the largest batch that fits a V100, an RTX 4090, an A100 or an H100, and check the prediction.
#
# **Time:** about 60 minutes alone: 23 of reading, 20 of code, 4 for the figures, 1 to run all, 15 for the two exercises. **GPU:** not needed (memory is simulated, training runs on the CPU).

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import math

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from helpers import CUDA_OVERHEAD_BYTES, OKABE_ITO, DoesNotFit, GiB, MiB, PeakCurve, fit_affine, fmt_bytes, peak_polynomial, profile_step
from helpers.teaching.data import load_digits
from helpers.gpus import GPU_CARDS
from helpers.models import digits_mlp
from helpers.teaching.training import train

_ = torch.manual_seed(0)

# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
import sklearn
import torchvision
print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, scikit-learn {sklearn.__version__}, "
      f"GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. Real data, offline
#
# We use scikit-learn's handwritten digits: 1,797 grey-scale images of 8 × 8 pixels, ten classes. The data ships inside the scikit-learn package, so this lesson runs without a network. `load_digits` flattens each image to 64 features in [0, 1] and holds out a fifth of the images, stratified by class, for testing.

# %%
data = load_digits()
n_train = len(data.x_train)
print(f"training set: {tuple(data.x_train.shape)} features, {tuple(data.y_train.shape)} labels")
print(f"test set:     {tuple(data.x_test.shape)} features")
print(f"the whole training set is {fmt_bytes(data.x_train.nbytes, 'KiB')} of float32")
assert n_train == 1437 and data.x_train.shape[1] == 64

# %%
fig = Figure(figsize=(8, 1.6), layout="constrained")
for i, ax in enumerate(fig.subplots(1, 10)):
    ax.imshow(data.x_train[i].reshape(8, 8), cmap="gray_r")
    ax.set_title(int(data.y_train[i]), fontsize=9)
    ax.axis("off")
fig

# %% [markdown]
# Look at the first ten training images, each labelled with its digit: 8 × 8 grey pixels are coarse, yet most digits are easy to tell apart.

# %% [markdown]
# If you are online and want a bigger data set, `helpers.teaching.data.load_mnist(download=True)` gives MNIST (60,000 training images of 28 × 28) in the same form. It is off by default and nothing in this lesson needs it:

# %%
ONLINE = False  # set to True to download MNIST (about 50 MB) into ./data
if ONLINE:
    from helpers.teaching.data import load_mnist
    mnist = load_mnist("data", download=True)
    print(tuple(mnist.x_train.shape))

# %% [markdown]
# ## 2. The same network, four batch sizes
#
# The network is a small multi-layer perceptron, 64 → 256 → 256 → 10 with ReLUs. We train it from the same initial weights, with plain SGD at the same learning rate (0.05) for 10 epochs, changing only the batch size: 1 sample, 16, 128, and all 1,437 training images at once (*full-batch* gradient descent). After every epoch we evaluate the loss on the whole training set and the accuracy on the test set.

# %%
model = digits_mlp()
print(model)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")

BATCH_SIZES = (1, 16, 128, n_train)
EPOCHS = 10
runs = {b: train(digits_mlp, data, batch_size=b, epochs=EPOCHS, lr=0.05, seed=0)[1] for b in BATCH_SIZES}

# %%
print(f"{'batch':>6} {'updates/epoch':>14} {'loss, epoch 1':>14} {'loss, epoch 10':>15} {'test accuracy':>14}")
for b, h in runs.items():
    if b == 1:  # its last digits depend on this CPU's floating-point kernels (next cell): state what holds anywhere
        final_loss, accuracy = "below 0.5 *", "above 90% *"
    else:
        final_loss, accuracy = f"{h.train_loss[-1]:.3f}", f"{100 * h.test_accuracy[-1]:.1f}%"
    print(f"{b:>6} {h.updates[0]:>14} {h.train_loss[0]:>14.3f} {final_loss:>15} {accuracy:>14}")
print("* batch 1's final figures differ between machines (below): what holds on every machine is shown")

assert [runs[b].updates[0] for b in BATCH_SIZES] == [1437, 90, 12, 1]
assert runs[1].train_loss[-1] < 0.5 and runs[1].test_accuracy[-1] > 0.9 and runs[16].test_accuracy[-1] > 0.9
assert 0.6 < runs[128].test_accuracy[-1] < 0.9 and runs[n_train].test_accuracy[-1] < 0.6
assert runs[n_train].train_loss[-1] > 2.0  # ten full-batch steps barely move the loss (ln 10 = 2.30)


# %% [markdown]
# Why is batch 1 reported as a range? Each of its 14,370 steps follows the gradient of a single sample, and each step's result feeds the next, so a difference in the last bit of any number can grow, step after step, into a different trajectory. Two CPUs make such differences all the time: they add numbers in different orders (vector units of different widths, one thread or several). Emulate that here by moving every initial weight by one unit in the last place (`torch.nextafter`, about 10⁻⁷ of its value) and training again: batch 16 for all 10 epochs, batch 1 for its first 3 (enough for two runs to part ways):

# %%
def nudged_mlp():
    """The lesson's MLP with every initial weight moved up by one unit in the last place."""
    model = digits_mlp()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.nextafter(p, torch.full_like(p, math.inf)))
    return model


NUDGED_EPOCHS = {1: 3, 16: EPOCHS}
nudged = {b: train(nudged_mlp, data, batch_size=b, epochs=e, lr=0.05, seed=0)[1] for b, e in NUDGED_EPOCHS.items()}
moved = {b: max(abs(x - y) for x, y in zip(nudged[b].train_loss, runs[b].train_loss)) for b in (1, 16)}
print("initial weights moved by one unit in the last place:")
print(f"  batch 16: every epoch's loss within 0.001 of the first run: {moved[16] < 0.001}")
print(f"  batch 1:  some epoch's loss, of the first {NUDGED_EPOCHS[1]}, more than 0.01 away from the first run: "
      f"{moved[1] > 0.01}")
assert [len(nudged[b].train_loss) for b in (1, 16)] == [3, EPOCHS]
assert moved[16] < 0.001 < 0.01 < moved[1]

# %% [markdown]
# Batches of 16 and more average the noise of many samples at every step, and a last-bit difference stays a last-bit difference: they end at the same figures on every machine. Batch 1 does not, so the table gives what holds everywhere (below 0.5, above 90%), and the next cell, whose output the tests do not check, gives this machine's figures. It also shows the other figure that depends on the machine, the **time** an epoch takes.

# %% tags=["nbval-ignore-output"] nbval_reason="the seconds depend on this machine's speed, batch 1's final figures on its floating-point kernels"
ups = sum(later > earlier for earlier, later in zip(runs[1].train_loss, runs[1].train_loss[1:]))
print(f"batch 1 on this machine: loss after 10 epochs {runs[1].train_loss[-1]:.3f}, "
      f"test accuracy {100 * runs[1].test_accuracy[-1]:.1f}%; the loss went up after {ups} of {EPOCHS - 1} epochs")
print(f"one-ulp nudge: the loss moved by up to {moved[1]:.3f} at batch 1 (in {NUDGED_EPOCHS[1]} epochs), "
      f"by up to {moved[16]:.1e} at batch 16 (in {EPOCHS})")
print(f"\n{'batch':>6} {'s per epoch':>12} {'us per sample':>14}")
per_epoch = {}
for b, h in runs.items():
    per_epoch[b] = sum(h.seconds) / len(h.seconds)
    print(f"{b:>6} {per_epoch[b]:>12.4f} {1e6 * per_epoch[b] / n_train:>14.1f}")
assert per_epoch[1] > 5 * per_epoch[128]

# %% [markdown]
# What holds on every machine is the comparison: per epoch, batches of 1 and 16 learn far more than 128 or the whole set. Which of batch 1 and batch 16 ends higher is *not* a stable result: it changes with the machine, and with the `seed`.
#
# Bigger batches are **faster per sample** (the time columns): one step on 128 samples costs far less than 128 steps on one sample, because matrix products over a batch keep the processor's vector units (or the GPU's thousands of cores) busy. The ratio is asserted; the seconds depend on the machine.

# %%
fig = Figure(figsize=(10, 3.6), layout="constrained")
ax_epoch, ax_updates = fig.subplots(1, 2)
colours = [OKABE_ITO[c] for c in ("blue", "orange", "bluish green", "vermillion")]  # colour-blind safe
for (b, h), colour in zip(runs.items(), colours):
    label = "whole set" if b == n_train else f"batch {b}"
    ax_epoch.plot(range(1, EPOCHS + 1), h.train_loss, marker="o", color=colour, label=label)
    ax_updates.plot(h.updates, h.train_loss, marker="o", color=colour, label=label)
ax_epoch.set(xlabel="epoch (= 1,437 samples seen)", ylabel="training loss", title="loss per epoch")
ax_updates.set(xlabel="optimizer updates (log scale)", xscale="log", title="loss per update")
ax_epoch.legend()
fig

# %% [markdown]
# Look at the left panel: per **epoch**, that is per sample seen, small batches win by far: an epoch at batch 1 makes 1,437 updates, an epoch at full batch makes one. Per **update** (right), the curves nearly line up: at this learning rate, a step on 128 samples does little more than a step on 16. The larger batch computed a more accurate gradient, and the optimizer, taking one small step along it, could not use the extra accuracy. The batch-1 curve shows the price of very small batches: its loss goes up after some epochs, because each step follows the gradient of a single sample.
#
# How noisy is a mini-batch gradient? Take the gradient over the whole training set as the truth, and measure how far the gradients of random batches of size b fall from it. Sampling theory says the expected squared distance is σ²/b · (N − b)/(N − 1), where σ² is the variance of one sample's gradient and the second factor corrects for drawing without replacement from N samples. So b · distance / correction should be the same for every b. (This measurement runs in float64, so that its printed digits are the same on every CPU.)

# %%
torch.manual_seed(0)
probe = digits_mlp().double()
x64, y64 = data.x_train.double(), data.y_train


def gradient(x, y):
    probe.zero_grad()
    F.cross_entropy(probe(x), y).backward()
    return torch.cat([p.grad.flatten() for p in probe.parameters()])


full = gradient(x64, y64)
generator = torch.Generator().manual_seed(0)
sigma2 = {}
print(f"{'batch':>6} {'E|g_b - g|^2':>13} {'b * E / (N-b)/(N-1)':>20}")
for b in (1, 4, 16, 64, 256):
    distances = []
    for _ in range(200):
        idx = torch.randperm(n_train, generator=generator)[:b]
        distances.append(((gradient(x64[idx], y64[idx]) - full) ** 2).sum().item())
    mean = sum(distances) / len(distances)
    sigma2[b] = b * mean / ((n_train - b) / (n_train - 1))
    print(f"{b:>6} {mean:>13.4f} {sigma2[b]:>20.2f}")
assert max(sigma2.values()) / min(sigma2.values()) < 1.15  # the 1/b law, within sampling error

# %% [markdown]
# The noise falls as 1/b: sixteen times the batch buys a gradient four times closer (in norm) to the true one, for sixteen times the work. That is the trade-off: past some size, a bigger batch spends computation on precision the optimizer does not need. (Some noise even helps generalisation; see Keskar et al. in the further reading.)
#
# So mini-batches are a compromise. Small batches make many cheap, noisy updates per epoch; large batches make few precise ones and use parallel hardware well. And large batches cost **memory**, which is what the rest of this lesson measures.

# %% [markdown]
# ## 3. Memory against batch size: a straight line
#
# We measure one training step (forward, loss, backward, optimizer step) with `profile_step`, simulated as in lesson 03. One change matters here: `steady_state=True` measures the *second* step of training. In the first step the optimizer's states (SGD's momentum, Adam's moments) do not exist until `optimizer.step()` creates them; from the second step on they stay allocated through every forward and backward. A batch size fits if every step fits.
#
# Start with the small MLP:

# %%
mlp_sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, n_train]
mlp_curve = PeakCurve(digits_mlp, "simulated", input_shape=(64,), num_classes=10)
print(f"{'batch':>6} {'peak KiB':>9}  peak reached at")
for b in mlp_sizes:
    p = mlp_curve.trace(b)
    e = p.events[p.peak_event]
    print(f"{b:>6} {p.peak_allocated_bytes / 1024:>9.1f}  {e.label}")
whole_mlp = mlp_curve.trace(n_train).peak_allocated_bytes
assert whole_mlp < 8 * MiB

big = [b for b in mlp_sizes if b >= 512]   # one moment wins from here on
mlp_fit = fit_affine(big, [mlp_curve.trace(b).peak_allocated_bytes for b in big])
state = mlp_curve.trace(512).categories
mlp_state = state["parameters"] + state["gradients"] + state["optimizer_states"]
print(f"for b >= 512: M0 = {mlp_fit.m0_bytes / 1024:.1f} KiB (model state at the peak: {mlp_state / 1024:.1f} KiB), "
      f"m = {mlp_fit.per_sample_bytes:,.0f} bytes per sample, largest distance from the line {mlp_fit.max_residual_bytes:.0f} bytes")
assert mlp_fit.max_residual_bytes < 4096 and abs(mlp_fit.m0_bytes - mlp_state) < 4096

# %% [markdown]
# Even the whole training set as one batch needs less than 8 MiB for this network: for a small model and small samples, memory is not what limits the batch. Above 512 samples the peak is a straight line, M0 + b·m: M0 is the model state (parameters, momentum, and the gradients already computed at the peak) and m a few KiB per sample: the 64 inputs and the 256-wide activations each sample leaves for backward. The peak also moves (the "peak reached at" column) for small batches; the ResNet18 case below shows why. Now ResNet18 on 224 × 224 images, the model of lesson 03:

# %%
sizes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
resnet = PeakCurve("resnet18", "simulated")
traces = {b: resnet.trace(b) for b in sizes}
print(f"{'batch':>6} {'peak MiB':>10}  peak reached at")
for b, p in traces.items():
    e = p.events[p.peak_event]
    print(f"{b:>6} {p.peak_allocated_bytes / MiB:>10.1f}  {e.label}")

# %% [markdown]
# Fit a straight line M(b) = M0 + b·m through the large batches (128 and up), where the peak is always at the same moment, early in backward:

# %%
large = [b for b in sizes if b >= 128]
fit = fit_affine(large, [traces[b].peak_allocated_bytes for b in large])
at_peak = traces[128].categories
model_state = at_peak["parameters"] + at_peak["gradients"] + at_peak["optimizer_states"]
print(f"M0 = {fmt_bytes(fit.m0_bytes)}   m = {fmt_bytes(fit.per_sample_bytes)} per sample")
print(f"largest distance of a point from the line: {fit.max_residual_bytes:.0f} bytes")
print(f"model state alive at the peak: parameters {fmt_bytes(at_peak['parameters'])} + gradients "
      f"{fmt_bytes(at_peak['gradients'])} + momentum {fmt_bytes(at_peak['optimizer_states'])} = {fmt_bytes(model_state)}")
assert fit.max_residual_bytes < 4096
assert abs(fit.m0_bytes - model_state) < 64 * 1024
assert 21 * MiB < fit.per_sample_bytes < 22 * MiB

# %% [markdown]
# The line is exact to a few bytes (the rest is rounding each tensor up to 512 bytes). Its two numbers have names:
#
# * **M0**, the memory at batch size 0, is the *model state* alive at the peak: the parameters, the momentum buffers, and the few gradients backward has produced by then. It does not depend on the batch.
# * **m**, the slope, is the memory of one sample: its activations (the saved tensors of every layer, lesson 02), its share of the input batch, and the gradients flowing back through them. Compare it with the image itself:

# %%
image = 3 * 224 * 224 * 4
print(f"one image: {fmt_bytes(image, 'KiB')}; memory per image in training: {fmt_bytes(fit.per_sample_bytes)}, "
      f"{fit.per_sample_bytes / image:.0f} times as much")
assert fit.per_sample_bytes > 30 * image

# %% [markdown]
# The fit *estimated* M0 and m from measured points. They can also be *derived*, exactly. PyTorch can run a model on fake tensors whose sizes are symbols (`FakeTensorMode` with a `ShapeEnv`, the machinery behind `torch.compile`'s dynamic shapes): traced once with the batch size as a symbol B, every storage's size comes out as an expression in B. `peak_polynomial` adds up the storages alive at the moment of batch 128's peak:

# %%
poly = peak_polynomial("resnet18", 128, device="simulated", steady_state=True)
terms = poly.terms()
M0, m = terms["1"], terms["B"]
labels = next(s for s in traces[128].at_peak() if s.category == "input" and s.dtype == torch.int64)
print(f"M(b) = {M0:,} + b × {m:,} + (8·b rounded up to 512) bytes")
print(f"derived: M0 = {fmt_bytes(M0)}, m = {fmt_bytes(m)} per sample; "
      f"fitted above: M0 = {fmt_bytes(fit.m0_bytes)}, m = {fmt_bytes(fit.per_sample_bytes)}")
print(f"the rounded term: the labels, {labels.dtype} of shape {labels.shape}, {labels.nbytes} bytes at batch 128")
gap = {b: traces[b].peak_allocated_bytes - poly(b) for b in sizes if b >= 2}
assert set(terms) == {"1", "B", "RoundUp(8*B)"} and poly.guards == () and poly.ranges["B"][0] == 2
assert labels.shape == (128,) and labels.nbytes == 8 * 128
assert all(gap[b] == 0 for b in large) and all(gap[b] > 0 for b in gap if b < 128)
assert abs(fit.m0_bytes - M0) < 64 * 1024 and abs(fit.per_sample_bytes - m) < 64

fig = Figure(figsize=(6, 3.4), layout="constrained")
ax = fig.subplots()
small = [b for b in gap if b < 128]
ax.plot(small, [gap[b] / MiB for b in small], "o-", color=OKABE_ITO["vermillion"], label="another moment is the peak")
ax.plot(large, [gap[b] / MiB for b in large], "s", color=OKABE_ITO["bluish green"], label="peak = M(b), to the byte")
ax.axhline(0, lw=0.8, color=OKABE_ITO["black"])
ax.set(xscale="log", xlabel="batch size (log scale)", ylabel="measured peak − M(b) (MiB)",
       title="ResNet18: the peak against M(b) derived from one symbolic trace")
ax.legend()
fig

# %% [markdown]
# Look at the squares: from batch 128 up the measured peak equals M(b) to the byte; below 128 the points lie above it, because another moment of the step holds more (the convexity of the figure above). M0 and m are now two integers read off PyTorch's own dispatch, not estimated from points, and M(b) holds at every batch size from 2 up, including the labels' rounding to 512 bytes that no straight line can follow.

# %% [markdown]
# Below batch 128 the points lie *above* the line:

# %%
for b in (1, 16, 64):
    p = traces[b]
    print(f"batch {b:>3}: measured {fmt_bytes(p.peak_allocated_bytes):>10}, line says {fmt_bytes(fit.predict(b)):>10}; "
          f"gradients at the peak {fmt_bytes(p.categories['gradients']):>9}")
    assert p.peak_allocated_bytes > fit.predict(b)
print(f"batch 128: gradients at the peak {fmt_bytes(traces[128].categories['gradients'])}")

fig = Figure(figsize=(10, 3.6), layout="constrained")
ax_all, ax_gap = fig.subplots(1, 2)
ax_all.plot(sizes, [traces[b].peak_allocated_bytes / MiB for b in sizes], "o", color=OKABE_ITO["blue"],
            label="measured (simulated)")
ax_all.plot(sizes, [fit.predict(b) / MiB for b in sizes], "-", lw=1, color=OKABE_ITO["orange"],
            label="M0 + b·m (fit on b ≥ 128)")
ax_all.set(xlabel="batch size", ylabel="peak allocated (MiB)", title="ResNet18, one steady-state training step")
ax_all.legend()
ax_gap.plot(sizes, [(traces[b].peak_allocated_bytes - fit.predict(b)) / MiB for b in sizes], "o-",
            color=OKABE_ITO["blue"])
ax_gap.set(xscale="log", xlabel="batch size (log scale)", ylabel="measured minus line (MiB)",
           title="small batches lie above the line")
fig

# %% [markdown]
# Look at the right panel: from batch 128 up the measured peaks sit on the line, and below 128 they rise above it, the more the smaller the batch.
#
# Why? The memory alive at *each* moment of the step is affine in b, with its own M0 and m. The peak is the highest of them. At large b the moment with the most activations alive wins (early in backward). At small b, activations are cheap and the winner is a later moment of backward, when most of the parameters' gradients have been allocated (42 MiB of them at batch 1, against 2 MiB at batch 128). A maximum of straight lines is convex, so the measured curve bends upward toward small b and is straight once one moment dominates. (This is also how lesson 01b's batch-size widget answers instantly: between two traced batch sizes whose peaks happened at the same moment, the straight line is exact.)
#
# ### How big a batch fits?
#
# Solve M0 + b·m ≤ capacity − overhead for b. Two numbers need care:
#
# * The **capacity** is less than the card's name says. A "16 GB" card carries 16 GiB of memory chips, and the driver keeps part of them: PyTorch sees what `torch.cuda.get_device_properties(0).total_memory` reports, which `helpers.gpus.GPU_CARDS` lists for five common cards (as printed on real machines; it moves by a few MiB with the driver).
# * The **overhead** is memory a process uses on a GPU besides its tensors: the CUDA context (a few hundred MiB), cuBLAS and cuDNN workspaces, and the caching allocator's free-but-reserved blocks (lesson 01b, section 3). The simulation cannot measure any of these; we *assume* 1 GiB, a round and generous figure, and say so next to every result.

# %%
print(f"assumed overhead: {fmt_bytes(CUDA_OVERHEAD_BYTES, 'GiB')}")
print(f"{'GPU':<16} {'PyTorch sees':>13} {'largest ResNet18 batch':>23} {'its peak':>10}")
largest = {}
for card, capacity in GPU_CARDS.items():
    largest[card] = fit.largest_batch(capacity)
    print(f"{card:<16} {fmt_bytes(capacity, 'GiB'):>13} {largest[card]:>23} {fmt_bytes(fit.predict(largest[card]), 'GiB'):>10}")
    assert capacity < int(card.split()[-2]) * GiB   # less than the nominal size, in GiB

# %% [markdown]
# Check the prediction against the simulation itself. `profile_step(..., capacity=...)` behaves like a GPU of that size: an allocation that would take the tensors above the capacity minus the overhead raises an out-of-memory error, as a real GPU would. With the V100's 15.78 GiB:

# %%
V100 = GPU_CARDS["V100 16 GB"]
fits = profile_step("resnet18", largest["V100 16 GB"], device="simulated", steady_state=True, capacity=V100)
print(f"batch {largest['V100 16 GB']}: peak {fmt_bytes(fits.peak_allocated_bytes, 'GiB')}, fits")
try:
    profile_step("resnet18", largest["V100 16 GB"] + 1, device="simulated", steady_state=True, capacity=V100)
    raise AssertionError("expected the simulated GPU to run out of memory")
except DoesNotFit:
    print(f"batch {largest['V100 16 GB'] + 1}: does not fit")


# %% [markdown]
# ## Exercises
#
# **Exercise 1: the linear scaling rule.** Batch 128 lost to batch 16 after 10 epochs, at the same learning rate. Goyal et al. (2017) suggest scaling the learning rate with the batch size. Train batch 128 with 8 times the learning rate (0.4) and compare its final test accuracy with batch 16 at 0.05.

# %%
# Your code here: train(digits_mlp, data, batch_size=128, epochs=EPOCHS, lr=...)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# _, scaled = train(digits_mlp, data, batch_size=128, epochs=EPOCHS, lr=0.4, seed=0)
# print(f"batch 128, lr 0.4: {100 * scaled.test_accuracy[-1]:.1f}%  vs  batch 16, lr 0.05: "
#       f"{100 * runs[16].test_accuracy[-1]:.1f}%")
# ```
#
# With the learning rate scaled, batch 128 goes from about 77% to about 91% test accuracy after 10 epochs, most of the way to batch 16's 96%, with 12 updates per epoch instead of 90. It does not fully catch up: the rule assumes that one large step does what several small ones would, which holds less well early in training and for large factors (Goyal et al. warm the learning rate up for that reason). At the whole-set batch the rule breaks down: 0.05 × 1437/16 ≈ 4.5 makes the loss jump above 50 within 10 epochs, and the accuracy falls to chance (10%): try it.
# </details>
#
# **Exercise 2: your GPU's largest batch.** Use `PeakCurve` and `fit_affine` (or the widget) to find the largest batch of `vgg16` with Adam that fits an RTX 4090 (`GPU_CARDS["RTX 4090 24 GB"]`). Is its M0 larger or smaller than ResNet18's, and why?

# %%
# Your code here: curve = PeakCurve("vgg16", "simulated", optimizer="adam") ...

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# curve = PeakCurve("vgg16", "simulated", optimizer="adam")
# points = [256, 512]
# vgg_fit = fit_affine(points, [curve.trace(b).peak_allocated_bytes for b in points])
# print(fmt_bytes(vgg_fit.m0_bytes), fmt_bytes(vgg_fit.per_sample_bytes), vgg_fit.largest_batch(GPU_CARDS["RTX 4090 24 GB"]))
# ```
#
# VGG16 has 138 million parameters (ResNet18 has 11.7 million), so its M0 is far larger, about 2 GiB against ResNet18's 136 MiB with Adam: parameters (528 MiB) and Adam's two moments (1,056 MiB), most of them in the first fully connected layer (25088 × 4096 weights), plus the gradients already computed at the peak. Its activations per image are also larger, about 70 MiB against 21 MiB (VGG keeps 64 channels at full 224 × 224 resolution for two convolutions, where ResNet18 downsamples at once). Its largest batch on an RTX 4090 is about 300, against about 1,100 for ResNet18 (section 3's table).
# </details>
#
# ## Key points
#
# - Mini-batches trade gradient noise (which falls as 1/b) against the number of updates per epoch and the use of parallel hardware; with the same learning rate, small batches learn more per epoch, large ones more per update.
# - The peak memory of a training step is affine in the batch size once one moment of the step dominates: **M(b) = M0 + b·m**, with M0 the model state alive at the peak (parameters, gradients, optimizer states) and m the activations of one sample. For ResNet18 at 224 × 224, m is about 21 MiB per image.
# - M0 and m can be fitted from measured points or derived exactly from one trace with a symbolic batch size; below the batch where one moment dominates, the peak lies above the line (a maximum of straight lines is convex).
# - The largest batch is (capacity − overhead − M0) / m. The overhead (CUDA context, workspaces, cache) is not in `memory_allocated()`: measure it on your GPU, or leave a margin.
# - A GPU offers PyTorch less than its name says (15.78 GiB on a "16 GB" V100).
#
# ## Further reading
#
# - N. S. Keskar et al., *On Large-Batch Training for Deep Learning: Generalization Gap and Sharp Minima*, ICLR 2017, arXiv:1609.04836.
# - P. Goyal et al., *Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour*, 2017, arXiv:1706.02677 (the linear scaling rule).
# - S. McCandlish et al., *An Empirical Model of Large-Batch Training*, 2018, arXiv:1812.06162 (the gradient noise scale).
#
# Next: lesson 01b runs the whole training set as one batch into an out-of-memory error and reads the message, tells allocated from reserved memory, finds how deep an MLP can get on a V100, and ends with the batch-size widget.
