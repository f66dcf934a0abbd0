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
# # 02 · Why each layer keeps its input: the linear-layer gradient, and what autograd saves
#
# **Questions**
# - The parameters of a network are small. Why does training need so much more memory?
# - What exactly does each kind of layer keep for the backward pass, and how much does it cost?
# - Can a layer keep less?
#
# **Objectives**
# - Derive the gradients of a linear layer over a batch, check them against autograd, and conclude that its input must be kept.
# - List, with a tool, every tensor autograd saves for Linear, Conv2d, ReLU, Sigmoid, Tanh, GELU, MaxPool2d, BatchNorm2d and Dropout, and tell which of them cost extra memory.
# - Check three popular claims about what layers store against PyTorch's real behaviour.
# - Build a ReLU that keeps a 1-byte or a 1-bit mask, prove its gradients equal `nn.ReLU`'s, and measure where it saves memory and where it does not.
# - Compare how parameters (O(n·m)) and activations (O(batch·n)) grow, and find the batch size where activations win.
#
# **Time:** about 60 minutes alone: 20 of reading, 16 of code, 1 for the figure, 1 to run all, 20 for the three exercises. **GPU:** not needed.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import functools

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn

from helpers import OKABE_ITO, MiB, build_model, fmt_bytes, profile_step
from helpers.saved import forward_saved_bytes, inspect_saved
from helpers.masks import BitMaskReLU, BoolMaskReLU, replace_relu

_ = torch.manual_seed(0)

# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. A linear layer over a batch
#
# A linear layer maps each input row x (n features) to y = Wx + b (m features). Over a batch of B rows, stacked as the rows of X:
#
# Y = X Wᵀ + b, with X of shape (B, n), W of shape (m, n), b of shape (m), Y of shape (B, m).
#
# Backward receives G = ∂L/∂Y, of shape (B, m), and must return three gradients:
#
# * ∂L/∂W = Gᵀ X, shape (m, n): the sum over the batch of each row's outer product g xᵀ;
# * ∂L/∂b = the sum of G over the batch, shape (m);
# * ∂L/∂X = G W, shape (B, n), passed on to the layer below.
#
# Compute them by hand and compare with autograd:

# %%
B, n, m = 32, 20, 10
layer = nn.Linear(n, m)
X = torch.randn(B, n, requires_grad=True)
Y = layer(X)
G = torch.randn(B, m)                  # an upstream gradient, as backward would receive
Y.backward(G)

dW, db, dX = G.T @ X.detach(), G.sum(0), G @ layer.weight.detach()
for name, mine, autograd in (("dL/dW", dW, layer.weight.grad), ("dL/db", db, layer.bias.grad), ("dL/dX", dX, X.grad)):
    print(f"{name}: shape {tuple(mine.shape)}, equal to autograd's: {torch.allclose(mine, autograd, atol=1e-6)}")
    assert torch.allclose(mine, autograd, atol=1e-6)


# %% [markdown]
# ∂L/∂W = Gᵀ X needs **X**, the layer's input, and it is only available during the forward pass. So autograd must keep X from the moment the layer runs forward until its backward has run: for the first layer of a network, that is nearly the whole step. ∂L/∂X needs W, which is kept anyway (it is a parameter). ∂L/∂b needs nothing.
#
# That is why training keeps **activations** that inference can drop at once: **every layer with weights keeps its input**, and the inputs of all layers are the activations of the whole network, for every sample of the batch. Activations are not training's only extra cost, though: training also keeps a gradient for every parameter, and the optimizer's states (momentum, Adam's two moments), which grow with the parameters, not with the batch. Which of the two dominates depends on the network and the batch:

# %%
def wide_mlp():
    """Four Linear(4096, 4096) layers with ReLUs: 67 million parameters, tiny activations at batch 32."""
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(4096, 4096), nn.ReLU())])


print(f"{'one steady-state training step':<42} {'peak':>11} {'model states':>13} {'activations':>12}")
balance = {}
for label, model, batch, options in (
        ("ResNet18, batch 128, SGD with momentum", "resnet18", 128, {}),
        ("4 x Linear(4096), batch 32, Adam", wide_mlp, 32, {"input_shape": (4096,), "num_classes": 4096,
                                                             "optimizer": "adam"})):
    p = profile_step(model, batch, device="simulated", steady_state=True, **options)
    states = p.categories["parameters"] + p.categories["gradients"] + p.categories["optimizer_states"]
    balance[label] = (states, p.categories["activations"])
    print(f"{label:<42} {fmt_bytes(p.peak_allocated_bytes):>11} {fmt_bytes(states):>13} "
          f"{fmt_bytes(p.categories['activations']):>12}")
(r_states, r_acts), (m_states, m_acts) = balance.values()
assert r_acts > 10 * r_states and m_states > 100 * m_acts

# %% [markdown]
# ResNet18 at batch 128 is almost all activations; the wide MLP at batch 32 is almost all model states (its peak is in the optimizer step, like lesson 01b's deep MLP). This lesson is about the activations; lesson 05a is about the model states.
#
# ## 2. What each operation saves, measured
#
# Autograd stores the tensors a backward formula needs on the graph's nodes, as *saved tensors*. `inspect_saved` runs one forward pass under `torch.autograd.graph.saved_tensors_hooks`, which sees every tensor as it is saved, then asks each node which of them it saved and why. It compares every saved tensor's storage with the layer's input, output and parameters: a saved tensor that *is* one of these costs nothing extra. Only tensors marked **new** are extra memory, and each storage is counted once. Its sizes are the exact bytes of each storage; on a GPU each would occupy a multiple of 512 bytes (lesson 00), which `profile_step` counts and the inspector does not.

# %%
x = torch.randn(64, 512)
report = inspect_saved(nn.Linear(512, 256), x)
print(report.table())
assert [(s.attribute, s.same_as) for s in report.saved] == [("mat1", "input"), ("mat2", "parameter weight")]
assert report.extra_bytes == 0

# %% [markdown]
# `nn.Linear` runs as one `addmm` (b + X Wᵀ), whose backward node `AddmmBackward0` saved `mat1` (X, the input) and `mat2` (Wᵀ, a view of the weight's storage). Nothing new: in a network, the input is the previous layer's output, which exists anyway; keeping it alive *longer* is what costs memory (lesson 03 shows it over a whole step).
#
# Now every layer of the list, on a batch of 64 images (16 channels, 32 × 32) or 64 vectors (512 features):

# %%
images, vectors = torch.randn(64, 16, 32, 32), torch.randn(64, 512)
layers = {
    "Linear(512, 256)": (nn.Linear(512, 256), vectors),
    "Conv2d(16, 32, 3)": (nn.Conv2d(16, 32, 3, padding=1), images),
    "ReLU": (nn.ReLU(), vectors),
    "ReLU(inplace=True)": (nn.ReLU(inplace=True), vectors),
    "Sigmoid": (nn.Sigmoid(), vectors),
    "Tanh": (nn.Tanh(), vectors),
    "GELU": (nn.GELU(), vectors),
    "MaxPool2d(2)": (nn.MaxPool2d(2), images),
    "AvgPool2d(2)": (nn.AvgPool2d(2), images),
    "BatchNorm2d(16)": (nn.BatchNorm2d(16), images),
    "Dropout(0.5)": (nn.Dropout(0.5), vectors),
}
reports = {name: inspect_saved(layer, inp) for name, (layer, inp) in layers.items()}
print(f"{'layer':<20} {'saved (what: same storage as)':<62} {'extra bytes':>11} {'output bytes':>12}")
for name, r in reports.items():
    what = ", ".join(f"{s.attribute}: {s.same_as}" for s in r.saved if not s.same_as.startswith(("buffer", "parameter")))
    print(f"{name:<20} {what:<62.62} {r.extra_bytes:>11,} {r.output_bytes:>12,}")

# %% [markdown]
# Read it column by column:
#
# * **Linear and Conv2d** save their input (and their weight, a parameter). Nothing extra.
# * **ReLU, Sigmoid and Tanh** save their **output** (`result`): their derivatives are written in terms of it (ReLU: output > 0; sigmoid: σ(1 − σ); tanh: 1 − tanh²). Nothing extra, because the output exists anyway, and the next layer usually keeps it too.
# * **In-place ReLU** saves its output, which *is* its input (overwritten). This is why torchvision's ResNet uses `inplace=True`: the batch-norm output it overwrites is not needed by anyone else.
# * **GELU** saves its **input**: its derivative needs x, not GELU(x). Now the input and the output must both stay alive.
# * **MaxPool2d** saves its input and an **int64 index** for every output element: new memory, twice the size of a float32 output.
# * **AvgPool2d** saves its **input**, although its gradient does not depend on it: backward only spreads each output gradient evenly over its window. PyTorch's backward kernel (`avg_pool2d_backward`) takes the input as an argument, for its shape, so autograd keeps it. A saved tensor is what the backward *code* reads, not only what the mathematics needs.
# * **BatchNorm2d** saves its input, plus the batch mean and inverse standard deviation per channel (`result1`, `result2`: new, but tiny).
# * **Dropout** saves its **mask**, new memory as large as the output: here a float32 tensor (4 bytes per element), because on the CPU PyTorch implements dropout as a multiplication by a scaled random tensor. On a GPU it uses another kernel (`native_dropout`), which keeps a bool mask; the cell after the checks shows it, on fake CUDA tensors (lesson 00).

# %%
extra = {name: r.extra_bytes for name, r in reports.items()}
pooled = 64 * 16 * 16 * 16
assert extra["MaxPool2d(2)"] == pooled * 8                   # one int64 index per output element
assert extra["BatchNorm2d(16)"] == 2 * 16 * 4                 # mean and inverse std, 16 channels
assert extra["Dropout(0.5)"] == reports["Dropout(0.5)"].output_bytes
assert all(extra[k] == 0 for k in ("Linear(512, 256)", "Conv2d(16, 32, 3)", "ReLU", "ReLU(inplace=True)",
                                   "Sigmoid", "Tanh", "GELU"))
kept = {name: {s.attribute: s.same_as for s in r.saved} for name, r in reports.items()}
assert kept["ReLU"] == {"result": "output"} and kept["Sigmoid"] == {"result": "output"}
assert kept["GELU"] == {"self": "input"} and kept["AvgPool2d(2)"] == {"self": "input"}
print("checked: every figure above")

# %%
on_gpu = forward_saved_bytes(lambda: nn.Dropout(0.5), (64, 512), device="cuda", input_requires_grad=True)
(dtype, nbytes), = on_gpu.items()
print(f"Dropout(0.5) on a GPU keeps a {dtype} mask of {nbytes:,} bytes for the same input: "
      f"a quarter of the CPU's {extra['Dropout(0.5)']:,}")
assert on_gpu == {torch.bool: extra["Dropout(0.5)"] // 4}

# %% [markdown]
# ## 3. Three claims, checked
#
# The sources of this lesson (a short note on training memory, and the Sicara article *Deep Learning Memory Usage and Pytorch Optimization Tricks*) make three claims. Each can now be checked against what PyTorch does.
#
# **Claim 1: "ReLU only needs the sign of its input; it saves a lighter sign mask."** ReLU's gradient does need only the sign. But PyTorch does not save a mask: it saves the full float output.

# %%
relu = reports["ReLU"].saved[0]
print(f"ReLU saves {relu.node}.{relu.attribute}: {relu.dtype}, {relu.nbytes:,} bytes for {64 * 512:,} elements "
      f"({relu.nbytes // (64 * 512)} bytes each); same storage as the {relu.same_as}")
assert relu.dtype == torch.float32 and relu.same_as == "output" 

# %% [markdown]
# So the claim is **wrong about PyTorch**, but the article's third option is right: when the next layer keeps the output anyway, saving it costs nothing, and a mask would cost *more*. Section 4 measures both cases.
#
# **Claim 2: "sigmoid's derivative depends on nothing."** The derivative is σ'(x) = σ(x)(1 − σ(x)): it depends on the output. PyTorch saves it:

# %%
sig = reports["Sigmoid"].saved[0]
z = torch.randn(1000, requires_grad=True)
s = torch.sigmoid(z)
s.backward(torch.ones_like(s))
print(f"Sigmoid saves {sig.node}.{sig.attribute} ({sig.same_as}); gradient equals s * (1 - s): "
      f"{torch.allclose(z.grad, (s * (1 - s)).detach())}")
assert sig.attribute == "result" and torch.allclose(z.grad, (s * (1 - s)).detach())

# %% [markdown]
# **Wrong.** What is true is that sigmoid keeps nothing *beyond its output*: like ReLU, it adds no memory of its own.
#
# **Claim 3: "every layer with learnable parameters stores its input (every batchnorm, convolution, dense layer)."**

# %%
for name in ("Linear(512, 256)", "Conv2d(16, 32, 3)", "BatchNorm2d(16)"):
    inputs = [s.attribute for s in reports[name].saved if s.same_as == "input"]
    print(f"{name:<18} keeps its input as: {inputs}")
    assert len(inputs) == 1

# %% [markdown]
# **True** for these three. But the converse fails, and that matters as much: layers *without* parameters also keep tensors. MaxPool keeps its input and indices, GELU its input, Dropout its mask, and a plain product `a * b` keeps both factors. The rule to remember is not "layers with parameters", it is: **each operation keeps what its backward formula reads.**
#
# ## 4. A ReLU that keeps 1 byte, or 1 bit, per element
#
# ReLU's backward needs only `x > 0`. `helpers.saved` has two ReLUs, written as custom `torch.autograd.Function`s, whose forward saves just that: `BoolMaskReLU` a bool tensor (1 byte per element), `BitMaskReLU` the same mask packed eight elements per byte. First, their gradients must be exactly `nn.ReLU`'s, including at x = 0:

# %%
x = torch.randn(256, 1000)
x[:, :10] = 0.0                        # exact zeros: the gradient there must be 0, as nn.ReLU's
upstream = torch.randn(256, 1000)
reference = x.clone().requires_grad_()
nn.ReLU()(reference).backward(upstream)
for make in (BoolMaskReLU, BitMaskReLU):
    mine = x.clone().requires_grad_()
    out = make()(mine)
    out.backward(upstream)
    same = torch.equal(out, F.relu(x)) and torch.equal(mine.grad, reference.grad)
    print(f"{make.__name__:<13} output and gradient identical to nn.ReLU: {same}")
    assert same

# %%
vectors = torch.randn(64, 512)
print(f"{'ReLU':<13} {'saved dtype':<12} {'extra bytes':>11} {'bytes/element':>14}")
mask_bytes = {}
for make in (nn.ReLU, BoolMaskReLU, BitMaskReLU):
    r = inspect_saved(make(), vectors)
    mask_bytes[make.__name__] = r.extra_bytes
    print(f"{make.__name__:<13} {str(r.saved[0].dtype):<12} {r.extra_bytes:>11,} {r.extra_bytes / vectors.numel():>14.3f}")
assert mask_bytes == {"ReLU": 0, "BoolMaskReLU": 64 * 512, "BitMaskReLU": 64 * 512 // 8}

# %% [markdown]
# Alone, the mask ReLUs look *worse*: `nn.ReLU` costs 0 extra bytes, because what it saves is its output. Whether a mask saves memory depends on what comes next. If the next layer keeps the ReLU's output anyway (a Linear or a convolution does), `nn.ReLU`'s save is free and the mask is pure overhead. If the next layer does *not* keep its input, as Dropout does not (it keeps only its mask), then `nn.ReLU`'s output is kept alive by the ReLU alone, and a mask saves 3 or 3⅞ bytes per element.
#
# Measure both on real networks, over one simulated training step (batch as shown):
#
# * an MLP for 28 × 28 images in the style of the dropout paper (Srivastava et al., 2014): 784 → 4 × (Linear 1024, ReLU, Dropout 0.5) → 10, at batch 4096;
# * ResNet18 at batch 128, whose ReLUs all feed convolutions (or the residual addition).
#
# (The simulation follows a GPU's dropout, which keeps a 1-byte mask: lesson 00.)

# %%
from helpers.models import dropout_mlp  # Flatten, 4 x (Linear(., 1024), relu(), Dropout(0.5)), Linear(1024, 10)


def named(builder, name):
    builder.__name__ = name
    return builder


peaks = {}
for make in (nn.ReLU, BoolMaskReLU, BitMaskReLU):
    mlp_step = profile_step(named(functools.partial(dropout_mlp, make), "dropout MLP"), 4096,
                            input_shape=(1, 28, 28), num_classes=10, device="simulated", steady_state=True)
    resnet_step = profile_step(named(lambda: replace_relu(build_model("resnet18"), make), "resnet18"), 128,
                               device="simulated", steady_state=True)
    peaks[make.__name__] = (mlp_step.peak_allocated_bytes, resnet_step.peak_allocated_bytes)
base_mlp, base_resnet = peaks["ReLU"]
print(f"{'ReLU':<13} {'dropout MLP, b=4096':>20} {'change':>11}   {'ResNet18, b=128':>16} {'change':>11}")
for name, (p_mlp, p_resnet) in peaks.items():
    print(f"{name:<13} {fmt_bytes(p_mlp):>20} {fmt_bytes(p_mlp - base_mlp, sign=True):>11}   "
          f"{fmt_bytes(p_resnet):>16} {fmt_bytes(p_resnet - base_resnet, sign=True):>11}")

# %%
relu_output = 4096 * 1024 * 4     # one ReLU output of the MLP, float32
saved_bool = base_mlp - peaks["BoolMaskReLU"][0]
saved_bit = base_mlp - peaks["BitMaskReLU"][0]
print(f"MLP: one ReLU output is {fmt_bytes(relu_output)}. Over its 4 ReLUs the bool mask saves "
      f"{fmt_bytes(saved_bool)} ({saved_bool / (4 * relu_output):.3f} of each output), "
      f"the bit mask {fmt_bytes(saved_bit)} ({saved_bit / (4 * relu_output):.3f} of each)")
assert saved_bool == 4 * relu_output * 3 // 4    # 4 bytes kept -> 1 byte
assert saved_bit == 4 * relu_output * 31 // 32   # 4 bytes kept -> 1/8 byte
assert peaks["BoolMaskReLU"][1] > base_resnet and peaks["BitMaskReLU"][1] > base_resnet


# %% [markdown]
# On the dropout MLP the masks help; on ResNet18 they **hurt**: its ReLUs run in place and feed convolutions that keep their output anyway, so `nn.ReLU` saves nothing of its own, while a mask ReLU must write a new output *and* keep a mask (the bool mask adds about a quarter of every ReLU output). Memory tricks are not universal: measure them on your network.
#
# ## 5. Parameters grow as O(n·m), activations as O(batch·n)
#
# A `Linear(n, n)` has n² + n parameters, whatever the batch. What it makes the network keep for backward grows with the batch: here, for a stack of `Linear(n, n)` + ReLU blocks, one n-vector per sample and layer (the ReLU output, which the next Linear also keeps). The inspector measures it for one block:

# %%
def block(n):
    return nn.Sequential(nn.Linear(n, n), nn.ReLU())


print(f"{'width n':>8} {'batch':>6} {'parameters':>12} {'kept for backward':>18}")
rows = []
for n in (256, 1024, 4096):
    params = sum(p.numel() * p.element_size() for p in block(n).parameters())
    for batch in (32, 256, 2048):
        r = inspect_saved(block(n), torch.randn(batch, n))
        kept_bytes = r.extra_bytes + r.output_bytes     # the ReLU output is kept (saved by ReLU and the next layer)
        rows.append((n, batch, params, kept_bytes))
        print(f"{n:>8} {batch:>6} {fmt_bytes(params, 'KiB'):>12} {fmt_bytes(kept_bytes, 'KiB'):>18}")
        assert kept_bytes == batch * n * 4

# %% [markdown]
# Parameter memory is 4(n² + n) bytes; activation memory 4·batch·n bytes. They are equal at **batch = n + 1**: a layer 1,024 wide keeps more for backward than it weighs as soon as the batch exceeds 1,025. Wide layers are expensive in parameters (HSF's lesson warns of the O(n·m) growth); big batches and long sequences are expensive in activations.

# %%
fig = Figure(figsize=(9, 3.8), layout="constrained")
ax = fig.add_subplot()
batches = [2**k for k in range(0, 15)]
for n, color in ((256, OKABE_ITO["blue"]), (1024, OKABE_ITO["orange"]), (4096, OKABE_ITO["bluish green"])):
    params = 4 * (n * n + n)
    ax.plot(batches, [4 * b * n / MiB for b in batches], color=color, label=f"activations, n = {n}")
    ax.axhline(params / MiB, color=color, ls="--", lw=1, label=f"parameters, n = {n}")
    crossover = params // (4 * n)
    ax.plot([crossover], [params / MiB], "o", color=color)
    assert crossover == n + 1
ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="MiB per Linear(n, n) + ReLU block",
       title="parameters are O(n²), activations O(batch · n): they cross at batch n + 1")
ax.legend(fontsize=8, ncol=2)
fig

# %% [markdown]
# Look at where each solid line (activations) crosses the dashed line of its colour (parameters): at the dot, batch n + 1, so the wider the layer, the larger the batch at which activations take over.
#
# And the optimizer multiplies the parameter side (gradients, momentum, Adam's two moments: lesson 05a), while activation checkpointing divides the activation side (lesson 04).
#
# ## Exercises
#
# **Exercise 1: GELU versus ReLU.** A Linear → GELU → Linear stack keeps more than a Linear → ReLU → Linear one, with the same shapes. Use `inspect_saved` on both (width 1024, batch 256) and explain the difference in bytes.

# %%
# Your code here: inspect_saved(nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1024)), torch.randn(256, 1024))

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# for act in (nn.ReLU(), nn.GELU()):
#     r = inspect_saved(nn.Sequential(nn.Linear(1024, 1024), act, nn.Linear(1024, 1024)), torch.randn(256, 1024))
#     print(type(act).__name__, fmt_bytes(r.extra_bytes))
# ```
#
# ReLU saves its output, which the second Linear saves too: one (256, 1024) tensor, 1 MiB. GELU saves its *input* (the first Linear's output), and the second Linear saves GELU's output: two tensors, 2 MiB. The same holds for SiLU and other smooth activations, which is one reason transformer blocks, full of GELUs, keep so much.
# </details>
#
# **Exercise 2: which layer saves what?** Without running it, predict what `nn.Softmax(dim=1)` and `nn.LayerNorm(512)` save, then check with `inspect_saved`.

# %%
# Your code here: inspect_saved(nn.Softmax(dim=1), torch.randn(64, 512)), ...

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# print(inspect_saved(nn.Softmax(dim=1), torch.randn(64, 512)).table())
# print(inspect_saved(nn.LayerNorm(512), torch.randn(64, 512)).table())
# ```
#
# Softmax saves its output (its derivative is s(δ − s), written in terms of s), so it adds nothing beyond it. LayerNorm, like BatchNorm, saves its input, its weight and bias, and per-row mean and reciprocal standard deviation: 64 of each here, small.
# </details>
#
# **Exercise 3: a mask after average pooling.** Build a small CNN in which the ReLU feeds an `nn.AvgPool2d(2)`: `Conv2d(3, 64, 3, padding=1)`, ReLU, `AvgPool2d(2)`, `Flatten`, `Linear(64 * 16 * 16, 10)`, on 32 × 32 images at batch 512. Section 2 showed that AvgPool2d keeps its input, the ReLU's output, so a mask ReLU cannot spare that tensor. Measure with `profile_step` whether `BitMaskReLU` lowers the peak anyway, and explain what you find from the two step logs (`p.table()`).

# %%
# Your code here: a Sequential(Conv2d, ReLU, AvgPool2d, Flatten, Linear) built with nn.ReLU, then with BitMaskReLU

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# def cnn(relu):
#     return nn.Sequential(nn.Conv2d(3, 64, 3, padding=1), relu(), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(64 * 16 * 16, 10))
#
# cnn_steps = {}
# for make in (nn.ReLU, BitMaskReLU):
#     cnn_steps[make] = profile_step(named(functools.partial(cnn, make), "cnn"), 512, image_size=32, num_classes=10,
#                                    device="simulated")
#     p = cnn_steps[make]
#     print(f"{make.__name__:<12} peak {fmt_bytes(p.peak_allocated_bytes)} at the {p.events[p.peak_event].label}")
#     print(p.table(phases=("bwd",), events=slice(14, 20)))
# relu_output = 512 * 64 * 32 * 32 * 4
# plain, bits = (cnn_steps[m].peak_allocated_bytes for m in (nn.ReLU, BitMaskReLU))
# assert (fmt_bytes(plain), fmt_bytes(bits)) == ("391.3 MiB", "299.3 MiB")
# assert plain - bits == relu_output - relu_output // 4 // 8 - relu_output // 4   # 128 - 4 - 32 MiB
# ```
#
# It does: the peak falls from 391.3 MiB to 299.3 MiB, by 92 MiB. Not because anything is kept *less* in the forward pass (the ReLU's 128 MiB output is kept by AvgPool2d either way, and the bit mask adds 4 MiB), but because of the **order in which backward frees tensors**. With `nn.ReLU`, two nodes saved that output, AvgPool2d and the ReLU; it stays alive until the ReLU's backward, which is the moment the ReLU writes its own 128 MiB input gradient while AvgPool2d's 128 MiB gradient is still alive: three 128 MiB tensors at once, the peak. With `BitMaskReLU`, AvgPool2d is the output's last user: it is freed as soon as AvgPool2d's backward has run, before the ReLU's backward allocates anything. The new peak is AvgPool2d's backward itself (its input, its new gradient and its 32 MiB incoming gradient), 92 MiB = 128 − 32 − 4 MiB lower. A saved tensor costs memory until its *last* saver's backward has run.
# </details>
#
# ## Key points
#
# - For y = Wx + b over a batch: ∂L/∂W = Gᵀ X, ∂L/∂b = Σ G, ∂L/∂X = G W. The weight gradient needs the input, so **every layer with weights keeps its input until backward**.
# - Each operation keeps what its backward code reads: ReLU, Sigmoid and Tanh their output; GELU its input; MaxPool its input and int64 indices; AvgPool its input (for its shape only); BatchNorm its input and per-channel statistics; Dropout its mask (float32 on the CPU, bool on a GPU).
# - A saved tensor that is also an input, output or parameter costs nothing extra; what costs memory is keeping it *alive until backward*, until the backward of the *last* operation that saved it, and the new tensors (indices, masks, statistics).
# - Activations are what training keeps and inference does not; gradients and optimizer states are the other part of training's memory, and they dominate for large models at small batches.
# - PyTorch's ReLU keeps its float output, not a sign mask. A 1-bit mask is exact and saves memory only where nothing else keeps that output: measure it.
# - Parameters grow as O(n·m) and activations as O(batch·n); for a Linear(n, n) layer, activations outweigh parameters from batch n + 1.
#
# ## Further reading
#
# - PyTorch documentation, *Autograd mechanics: saved tensors* and *Hooks for saved tensors*, https://pytorch.org/docs/stable/notes/autograd.html
# - PyTorch documentation, *Extending torch.autograd* (custom `Function`s), https://pytorch.org/docs/stable/notes/extending.html
# - N. Srivastava et al., *Dropout: A Simple Way to Prevent Neural Networks from Overfitting*, JMLR 2014.
# - S. Rota Bulò et al., *In-Place Activated BatchNorm for Memory-Optimized Training of DNNs*, CVPR 2018, arXiv:1712.02616 (recomputing instead of saving).
# - Q. Febvre, *Deep Learning Memory Usage and Pytorch Optimization Tricks*, Sicara, 2019 (the claims of section 3).
