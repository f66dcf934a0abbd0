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
# # 05a · Model states and optimizers: bytes per parameter, and where the peak is
#
# **Questions**
# - How many bytes per parameter does training need, and why do the guides say 16, 18 or 20?
# - When do the model states (parameters, gradients, optimizer states) rather than the activations decide the peak of a step?
# - What can be done about them on one GPU: another optimizer, a fused step, the optimizer step inside backward?
#
# **Objectives**
# - Measure parameters, gradients and optimizer states for SGD, SGD with momentum, Adam and AdamW, and match each to its formula, including the optimizer step's own temporaries.
# - Run each mixed-precision training loop behind the published "bytes per parameter" figures and tell which one describes your training.
# - Find where the peak of a step is, and the batch size at which it moves.
# - Reproduce PyTorch's "optimizer step in backward" figures for ViT-L/16.
#
# **Time:** about 60 minutes alone: 15 of reading, 20 of code, 3 for the figures, 2 to run all, 20 for the two exercises. **GPU:** not needed (memory simulated: nothing is downloaded). Memory is in GiB (2³⁰ bytes); a source's GB (10⁹ bytes) is converted beside it.
#
# Lessons 01 (steady state, bytes-per-parameter conventions) and 04 (AMP) come first. Lesson 05b goes on with GPT-2 1.5B against the ZeRO paper, gradient accumulation, inference and leaks, and the "will it fit?" widget.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import torch
from matplotlib.figure import Figure
from torch import nn

from helpers import GPU_CARDS, GiB, Meter, MiB, fmt_bytes, profile_step
from helpers.batch import model_state_estimate
from helpers.config import OPTIMIZER_NAMES, TORCH_OPTIMIZERS
from helpers.models.gpt import GPT2_PRESETS
from helpers.palette import CATEGORY_COLORS
from helpers.teaching.plots import plot_bytes_per_parameter
from helpers.techniques import STATE_BYTES, STEP_TEMPORARY_BYTES

_ = torch.manual_seed(0)


def gib(nbytes):
    """Bytes as GiB with two decimals, the unit of this lesson."""
    return f"{nbytes / GiB:.2f} GiB"


# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. Parameters, gradients and optimizer states, optimizer by optimizer
#
# The *model states* are what training keeps for every parameter: the parameter itself, its gradient, and what the optimizer remembers about it. For a float32 parameter (4 bytes) and its float32 gradient (4 bytes), the optimizer adds, from `torch/optim`:
#
# - **SGD**: nothing; **SGD with momentum**: one `momentum_buffer` (4 bytes);
# - **Adam** and **AdamW**: `exp_avg` and `exp_avg_sq`, the running mean and uncentred variance of the gradient (8 bytes), and a `step` counter per tensor. With the default implementations (`foreach`, or the plain for-loop) PyTorch keeps the counters in host memory; with `fused=True` or `capturable=True` it creates them on the GPU (`_init_group` in `torch/optim/adam.py`), 512 bytes per parameter tensor once rounded: nothing per parameter.
#
# And `optimizer.step()` itself may need room. By default on a GPU, PyTorch's optimizers use the `foreach` implementation, which updates all parameters with a few large operations; Adam's takes the square root of `exp_avg_sq` for *every* parameter at once, a temporary as large as the parameters. The `fused=True` implementation does the whole update in one kernel per group of parameters and allocates nothing.
#
# Measure it on GPT-2 124M, in float32, with one short sequence (so that the activations are small and the step's peak is the optimizer step), in steady state (lesson 01: the optimizer states exist from the start):

# %%
P124 = GPT2_PRESETS["gpt2"].parameter_count()
rows = {}
for name in TORCH_OPTIMIZERS:
    for fused in (False, True):
        p = profile_step("gpt2", 1, seq_len=64, optimizer=name, fused=fused, steady_state=True, device="simulated")
        step = p.find(None, "optimizer.step")
        c = {k: v / P124 for k, v in p.event_categories[step.index].items()}   # just after the step
        c["step temp"] = (p.peak_during(step) - p.events[step.index - 1].allocated_bytes) / P124  # inside it
        rows[name, fused] = c
        formula = 4 + 4 + STATE_BYTES[name] + (0 if fused else STEP_TEMPORARY_BYTES[name])
        total = c["parameters"] + c["gradients"] + c["optimizer_states"] + c["step temp"]
        assert abs(total - formula) < 0.01 and abs(c["optimizer_states"] - STATE_BYTES[name]) < 0.01
assert p.parameter_count == P124

fig = plot_bytes_per_parameter(
    {f"{OPTIMIZER_NAMES[name]} ({'fused' if fused else 'foreach'})":
         [("parameters", "param", round(c["parameters"], 1)), ("gradients", "grad", round(c["gradients"], 1)),
          ("optimizer_states", "state", round(c["optimizer_states"], 1)),
          ("other", "step temp.", round(c["step temp"], 1))]
     for (name, fused), c in rows.items()},
    title=f"GPT-2 124M in float32: bytes per parameter at optimizer.step() (measured, simulated)")
fig

# %% [markdown]
# Look at the right end of each bar: SGD needs 8 bytes per parameter, momentum 12, Adam and AdamW 16 with `fused=True` and **20** with the default `foreach`, whose grey step temporary exists only while `optimizer.step()` runs. Every bar matches 4 + 4 + state + temporary to the hundredth of a byte (the cell asserts it). The gradients cost as much as the parameters, whatever the optimizer; Adam's states twice as much: **16 bytes per parameter**, the figure you will meet everywhere, and **20 at the `foreach` step**, the moment that decides whether a large model's step fits. `fused=True` removes the temporary (the `torch.optim` documentation ranks the implementations fused, foreach, for-loop, in speed; fused is not the default yet). AdamW differs from Adam in how it applies weight decay, not in memory.
#
# **`zero_grad(set_to_none=True)`**, PyTorch's default since 2.0, frees the gradients after each step; `set_to_none=False` zeroes them in place and keeps them. Compare GPT-2 124M with Adam at batch 8 and sequence 256:

# %%
zero = {}
for set_to_none in (True, False):
    zero[set_to_none] = profile_step("gpt2", 8, seq_len=256, optimizer="adam", steady_state=True,
                                     set_to_none=set_to_none, device="simulated")
kept = zero[False].event_categories[0]["gradients"]
rise = zero[False].peak_allocated_bytes - zero[True].peak_allocated_bytes
print(f"set_to_none=False keeps {gib(kept)} of gradients between steps; the peak rises by {gib(rise)}")
assert zero[True].event_categories[0]["gradients"] == 0
assert abs(kept - zero[False].event_categories[0]["parameters"]) < 0.01 * kept
assert rise > 0

# %% [markdown]
# With `set_to_none=False` the gradients (as large as the parameters) stay allocated between steps, and the peak, early in backward, rises by all of them: the gradients of the layers that backward has not reached yet are already there. Setting them to `None` is free memory.
#
# ## 2. Sixteen, eighteen, twenty: the conventions side by side
#
# Guides, papers and libraries give different bytes-per-parameter figures for "mixed-precision training with Adam". Each describes a different training loop. Run each loop on a fake GPU, on four `Linear(4096, 4096)` layers without bias (64 Mi parameters: the 512-byte rounding vanishes), and read the bytes per parameter before the optimizer step, at the peak, and between steps, in the second step (when Adam's states exist).

# %%
WIDTH, LAYERS, TOKENS = 4096, 4, 8
PARAMS = LAYERS * WIDTH * WIDTH


def layers(meter, dtype=torch.float32):
    return nn.Sequential(*[nn.Linear(WIDTH, WIDTH, bias=False, device=meter.device, dtype=dtype) for _ in range(LAYERS)])


def batch(meter, dtype=torch.float32):
    return torch.randn(TOKENS, WIDTH, device=meter.device, dtype=dtype)


def adam(meter, params):
    return meter.host_side_steps(torch.optim.Adam(params, foreach=True))  # step counters on the host, as on a GPU


def fp32_adam(meter):
    model = layers(meter)
    opt = adam(meter, model.parameters())
    for last in (False, True):  # two steps: the moments are read in the second, when Adam's states exist
        model(batch(meter)).square().mean().backward()
        if last:
            yield "before step"
        opt.step()
        opt.zero_grad()
    yield "between steps"  # what every later step starts with


def autocast_adam(meter, backward_inside=False):
    """torch.autocast + GradScaler; backward_inside: loss.backward() inside the autocast region."""
    model = layers(meter)
    opt, scaler = adam(meter, model.parameters()), meter.grad_scaler()  # torch.amp.GradScaler("cuda") on a GPU
    for last in (False, True):
        with torch.autocast("cpu", dtype=torch.float16):  # the simulation applies CUDA's autocast lists
            loss = model(batch(meter)).float().square().mean()
            if backward_inside:
                scaler.scale(loss).backward()
                if last:
                    yield "before step"   # still inside: autocast's cache of weight copies is alive
        if not backward_inside:
            if last:
                yield "after forward"
            scaler.scale(loss).backward()
            if last:
                yield "before step"
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    yield "between steps"


def master_weights(meter, dtype=torch.float16, fp32_accumulation=False, keep_16bit_grads=True):
    """A 16-bit model and an fp32 master copy that Adam updates. With fp32_accumulation, the 16-bit
    gradients of two micro-batches are folded into fp32 ones, and kept (zeroed) or freed after each fold."""
    model = layers(meter, dtype)
    master = [p.detach().float() for p in model.parameters()]
    opt = adam(meter, master)
    for last in (False, True):
        for _ in range(2 if fp32_accumulation else 1):
            model(batch(meter, dtype)).float().square().mean().backward()
            if fp32_accumulation:  # fold the 16-bit gradients into fp32 ones
                for m, p in zip(master, model.parameters()):
                    m.grad = p.grad.float() if m.grad is None else m.grad.add_(p.grad)
                    if keep_16bit_grads:
                        p.grad.zero_()
                    else:
                        p.grad = None
        if last:
            yield "before step"
        if not fp32_accumulation:
            for m, p in zip(master, model.parameters()):
                m.grad = p.grad.float()
        opt.step()
        with torch.no_grad():
            for m, p in zip(master, model.parameters()):
                p.copy_(m)  # the 16-bit model gets the updated weights
                p.grad = None
        opt.zero_grad()
    yield "between steps"


def per_parameter(loop):
    """Run `loop` on a fake GPU: bytes per parameter at the moments of its second step, at its peak, and after it."""
    seen = {}
    with Meter("simulated") as meter:
        for moment in loop(meter):
            seen[moment] = meter.allocated() / PARAMS
        seen["peak"] = meter.peak() / PARAMS
    return seen


loops = {
    "fp32 + Adam": fp32_adam,
    "torch.autocast + GradScaler + Adam": autocast_adam,
    "the same, backward inside autocast": lambda m: autocast_adam(m, backward_inside=True),
    "float16 model + fp32 master + Adam": master_weights,
    "bfloat16 model + fp32 master + fp32 grads": lambda m: master_weights(m, torch.bfloat16, True, False),
    "the same, keeping the bfloat16 grads": lambda m: master_weights(m, torch.bfloat16, True, True),
}
measured = {name: per_parameter(loop) for name, loop in loops.items()}
m = {name: {k: round(v, 2) for k, v in seen.items()} for name, seen in measured.items()}
assert m["fp32 + Adam"]["before step"] == 16.0 and m["fp32 + Adam"]["peak"] == 20.0
assert m["torch.autocast + GradScaler + Adam"]["before step"] == 16.0
assert round(m["torch.autocast + GradScaler + Adam"]["after forward"], 1) == 13.5   # 12 + 3 of 4 weight copies
assert m["the same, backward inside autocast"]["before step"] == 18.0           # + all 4 weight copies
assert m["float16 model + fp32 master + Adam"]["before step"] == 16.0
assert m["float16 model + fp32 master + Adam"]["between steps"] == 14.0
assert m["float16 model + fp32 master + Adam"]["peak"] == 24.0   # + fp32 gradients + foreach temporary
assert m["bfloat16 model + fp32 master + fp32 grads"]["before step"] == 18.0
assert m["the same, keeping the bfloat16 grads"]["before step"] == 20.0

conventions = {
    "fp32 Adam: any float32 loop": [("parameters", "fp32 param", 4), ("gradients", "fp32 grad", 4),
                                    ("optimizer_states", "Adam", 8)],
    "ZeRO paper, section 3 (K = 12)": [("parameters", "fp16", 2), ("gradients", "fp16", 2),
                                       ("optimizer_states", "master", 4), ("optimizer_states", "Adam", 8)],
    "Hugging Face guide: 'mixed precision'": [("parameters", "fp32", 4), ("activations", "copy", 2),
                                              ("gradients", "fp32 grad", 4), ("optimizer_states", "Adam", 8)],
    "Megatron-LM README: bf16, fp32 grads": [("parameters", "bf16", 2), ("gradients", "fp32 grad", 4),
                                             ("optimizer_states", "master", 4), ("optimizer_states", "Adam", 8)],
    "Megatron-LM fp16; Ultra-Scale Playbook": [("parameters", "16-bit", 2), ("gradients", "16-bit", 2),
                                               ("gradients", "fp32", 4), ("optimizer_states", "master", 4),
                                               ("optimizer_states", "Adam", 8)],
}
fig = plot_bytes_per_parameter(conventions, marks={
    "fp32 Adam: any float32 loop": m["fp32 + Adam"]["before step"],
    "ZeRO paper, section 3 (K = 12)": m["float16 model + fp32 master + Adam"]["before step"],
    "Hugging Face guide: 'mixed precision'": m["the same, backward inside autocast"]["before step"],
    "Megatron-LM README: bf16, fp32 grads": m["bfloat16 model + fp32 master + fp32 grads"]["before step"],
    "Megatron-LM fp16; Ultra-Scale Playbook": m["the same, keeping the bfloat16 grads"]["before step"]},
    mark_label="measured before optimizer.step()",
    title="Bytes per parameter for Adam: each convention's parts, and the loop that reaches it")
fig

# %% [markdown]
# Look at the diamonds: each sits at the end of its bar, so every convention is a loop, measured before `optimizer.step()` (the cell asserts them). Blue is weights, orange gradients, purple what only the optimizer reads (ZeRO's K = 12 is the fp32 master copy, 4, and Adam's two moments, 8), green autocast's 16-bit weight copies.
#
# - **16, fp32 Adam** (4 + 4 + 8): every float32 loop, and `torch.autocast` training, whose weights *are* the fp32 parameters.
# - **16, ZeRO** (2 + 2 + 12; Rajbhandari et al., SC20, section 3): a float16 model with an fp32 master copy. Same total, other tensors: between steps it keeps 14, fp32 Adam 12.
# - **18, the Hugging Face guide** (*Model training anatomy*; S. Bekman, *Machine Learning Engineering*) counts autocast's 16-bit copies beside the gradients. That happens only if backward runs **inside** the autocast region, whose cache keeps every copy until the region ends. With `backward()` after the `with` block, as PyTorch's examples write it, the cache is gone: 13.5 after the forward pass (12 + 3 of the 4 copies, kept for backward; the first layer's is not, as its input needs no gradient), 16 before the step.
# - **18 and 20, Megatron-LM**: its README gives 18 bytes per parameter for bf16 and 20 for fp16 with its non-distributed optimizer, which keeps an fp32 "main" gradient. With bf16 no 16-bit weight gradient is kept: the weight-gradient matrix multiplication takes the bf16 inputs and accumulates its product in fp32 straight into `main_grad` (gradient accumulation fusion, `wgrad_gemm_accum_fp32` in `megatron/core/tensor_parallel/layers.py`, on by default) (2 + 4 + 4 + 8); fp16 gradients are kept beside it (2 + 2 + 4 + 4 + 8). *The Ultra-Scale Playbook*'s 20 (bf16, fp32 gradient accumulation) is the second layout; DeepSpeed's ZeRO-2 estimator counts 2Ψ + 18Ψ/N, 20 on one GPU, with the same fp32 gradients (lesson 07).
#
# So 2 + 2 + 12 is the paper's accounting; the libraries that keep the model in 16 bits keep an fp32 gradient besides and count 18 or 20. The peaks add the step's own work: the `foreach` temporary (4 bytes), and, in the ZeRO-style loop, an fp32 copy of every gradient made just before `step()` (24 at its peak). For *your* `torch.autocast` training with backward outside the region: 16 bytes per parameter with Adam, 20 at the `foreach` step. A 16-bit model with fp32 master weights saves room only once the master copy and the states are sharded (ZeRO, lesson 07).
#
# ## 3. Where the peak is
#
# A step has two candidates for its peak: the end of the forward pass or early backward, when the activations are alive (lessons 03 and 04), and the optimizer step, when parameters, gradients, states and the step's temporaries are. The first grows with the batch, the second does not. For GPT-2 124M with Adam, at sequence 256:

# %%
batches = range(1, 11)
curve = {}
for b in batches:
    p = profile_step("gpt2", b, seq_len=256, optimizer="adam", steady_state=True, device="simulated")
    step = p.find(None, "optimizer.step")
    curve[b] = (max(p.peak_during(e) for e in p.events[1:] if e.phase != "optimizer.step"), p.peak_during(step),
                p.peak.phase)
crossover = min(b for b, (_, _, phase) in curve.items() if phase != "optimizer.step")
print(f"the peak is at optimizer.step() up to batch {crossover - 1}, in backward from batch {crossover}")
assert crossover == 4 and all(curve[b][2] == "optimizer.step" for b in (1, 2, 3)) and curve[10][2] == "bwd"
steps = [s for _, s, _ in curve.values()]
assert max(steps) - min(steps) < MiB   # the step's peak hardly depends on the batch (only its input does)

fig = Figure(figsize=(8, 3.6), layout="constrained")
ax = fig.add_subplot()
ax.plot(batches, [curve[b][0] / GiB for b in batches], "o-", color=CATEGORY_COLORS["activations"],
        label="peak of forward and backward")
ax.plot(batches, [curve[b][1] / GiB for b in batches], "s-", color=CATEGORY_COLORS["optimizer_states"],
        label="peak of optimizer.step() (foreach Adam)")
ax.axvline(crossover - 0.5, color="black", lw=0.8, ls="--")
ax.annotate("the peak moves to backward", (crossover - 0.5, curve[10][0] / GiB * 0.9), xytext=(8, 0),
            textcoords="offset points", fontsize=9)
ax.set(xlabel="batch size (sequences of 256 tokens)", ylabel="memory allocated (GiB)", xticks=list(batches),
       title="GPT-2 124M with Adam, one steady-state step (simulated)")
ax.legend(fontsize=8, loc="upper left")
fig

# %% [markdown]
# Look where the two lines cross: the optimizer step's peak (squares) is flat, at 20 bytes per parameter; the forward and backward peak (circles) climbs with every sequence and overtakes it at batch 4. Below the crossover a smaller batch saves nothing: the model states decide (shrink them: `fused=True`, another optimizer, the step in backward, sharding). Above it the activations decide (checkpointing, AMP, a smaller batch).
#
# ## 4. The optimizer step inside backward
#
# PyTorch's tutorial *How to save memory by fusing the optimizer step into the backward pass* trains ViT-L/16 at batch 1 with Adam and reports a peak of about 6 GB at the optimizer step (1.2 GB of parameters, 1.2 of gradients, 2.4 of Adam states, 1.2 of `foreach` intermediates), and about 4 GB when each parameter is updated as soon as its gradient is complete, with `Tensor.register_post_accumulate_grad_hook`:
#
# ```python
# optimizers = {p: torch.optim.Adam([p], foreach=False) for p in model.parameters()}
# def step_now(p):
#     optimizers[p].step()
#     optimizers[p].zero_grad()
# for p in model.parameters():
#     p.register_post_accumulate_grad_hook(step_now)
# ```
#
# The simulation does the same with `step_in_backward=True`:

# %%
vit = {sib: profile_step("vit_l_16", 1, optimizer="adam", steady_state=True, step_in_backward=sib, device="simulated")
       for sib in (False, True)}
for sib, p in vit.items():
    print(f"{'step in backward' if sib else 'optimizer.step()':<17} peak {gib(p.peak_allocated_bytes)} "
          f"= {p.peak_allocated_bytes / 1e9:.1f} GB, at {p.peak.label}; gradients then {gib(p.categories['gradients'])}")
assert round(vit[False].peak_allocated_bytes / 1e9, 1) == 6.1 and vit[False].peak.phase == "optimizer.step"
assert round(vit[True].peak_allocated_bytes / 1e9, 1) == 4.0 and vit[True].peak.phase == "bwd"
assert vit[True].categories["gradients"] < 0.02 * vit[False].categories["gradients"]

# %% [markdown]
# Both of the tutorial's figures, to the tenth of a GB (5.7 and 3.7 GiB). The peak **moves**: from the optimizer step, where all the gradients and the `foreach` temporary coexist with the states, to the backward pass of the last MLP layer, where only that layer's gradient exists. The price: no gradient clipping over the whole model, no gradient accumulation, one small step per parameter, and no `GradScaler`, which must see every gradient before stepping (the simulation refuses `step_in_backward` with float16 AMP).
#
# ## Exercises
#
# **Exercise 1: the largest model for its model states.** With fused AdamW (no step temporary) in `torch.autocast` training, how many bytes per parameter does the optimizer step need, and how many parameters can an H100 80 GB hold in model states alone, with lesson 01's assumed 1 GiB of overhead? Check with `model_state_estimate`.

# %%
# Your code here: model_state_estimate(parameters, "adamw", fused=True) and GPU_CARDS["H100 80 GB"]

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# per_param = 4 + 4 + STATE_BYTES["adamw"]          # fused: no temporary
# card = GPU_CARDS["H100 80 GB"] - GiB               # the assumed overhead
# largest = card // per_param
# print(f"{per_param} bytes per parameter: at most {largest / 1e9:.2f} billion parameters")
# assert model_state_estimate(largest, "adamw", fused=True).peak_bytes <= card
# assert model_state_estimate(largest + 1, "adamw", fused=True).peak_bytes > card
# assert per_param == 16 and round(largest / 1e9, 2) == 5.25
# ```
#
# 16 bytes per parameter: about 5.25 billion parameters, before a single activation. With `foreach` (20 bytes) it is 4.2 billion. A 7-billion-parameter model does not train this way on one 80 GB GPU, whatever its batch size: its model states must shrink (16-bit states, 8-bit optimizers) or be sharded.
# </details>
#
# **Exercise 2: which GPT-2 trains on a 24 GB card?** At batch 1, sequence 1024, Adam and float16 AMP, which presets fit an RTX 4090 24 GB (with the same assumed overhead: `from helpers import fits`), and does the step in backward (section 4) make the next one fit?

# %%
# Your code here: for name in GPT2_PRESETS: profile_step(name, 1, seq_len=1024, amp=True, ...)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# from helpers import fits
# card = GPU_CARDS["RTX 4090 24 GB"]
# fit24 = {}
# for name in ("gpt2-large", "gpt2-xl"):   # the two largest: gpt2 and gpt2-medium fit with room
#     for dtype, sib in (("float16", False), ("bfloat16", True)):
#         p = profile_step(name, 1, seq_len=1024, amp=True, amp_dtype=dtype, optimizer="adam", steady_state=True,
#                          step_in_backward=sib, device="simulated")
#         fit24[name, sib] = fits(p.peak_allocated_bytes, card)
#         print(f"{name:<12} {'step in backward' if sib else 'optimizer.step()':<17} {fmt_bytes(p.peak_allocated_bytes, 'GiB'):>10}  fits: {fit24[name, sib]}")
# assert fit24["gpt2-large", False] and not fit24["gpt2-xl", False] and not fit24["gpt2-xl", True]
# ```
#
# GPT-2 774M fits (14.4 GiB); GPT-2 1.5B does not (29.0 GiB), even with the step in backward (which needs bfloat16: a `GradScaler` cannot unscale gradients that are already gone). Its parameters and Adam states alone are 12 bytes per parameter, 17.4 GiB, before the activations and the logits.
# </details>
#
# ## Key points
#
# - Model states per parameter: parameter 4 + gradient 4 + optimizer state (SGD 0, momentum 4, Adam and AdamW 8) bytes in float32; Adam's `foreach` step adds 4 bytes for its duration (20 at its peak), `fused=True` none. `zero_grad(set_to_none=True)` frees the gradients between steps.
# - "16 bytes per parameter" is two different things: fp32 Adam's 4 + 4 + 8, which `torch.autocast` training also needs, and ZeRO's 2 + 2 + 12. 18 is autocast's weight copies beside the gradients (backward inside the autocast region) or Megatron-LM's bf16 layout; 20 adds an fp32 gradient to a 16-bit model and gradient (Megatron-LM fp16, DeepSpeed ZeRO-2 on one GPU). Ask which loop a figure describes.
# - The peak is at the optimizer step for small batches and in backward for large ones; find the crossover by measuring. Below it, a smaller batch saves nothing.
# - The step in backward (`register_post_accumulate_grad_hook`) removes almost all gradients from the peak: ViT-L/16 at batch 1 from 5.7 to 3.7 GiB, at the price of gradient clipping, accumulation and `GradScaler`.
#
# ## Further reading
#
# - S. Rajbhandari, J. Rasley, O. Ruwase, Y. He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054, section 3.
# - PyTorch tutorial *How to save memory by fusing the optimizer step into the backward pass*; `torch.optim` documentation (foreach and fused implementations).
# - Hugging Face, *Model training anatomy* and *The Ultra-Scale Playbook* (2025); S. Bekman, *Machine Learning Engineering*, chapter on model memory.
# - NVIDIA Megatron-LM, README, *Distributed optimizer* (bytes per parameter); DeepSpeed, `estimate_zero2_model_states_mem_needs` in `deepspeed/runtime/zero/stage_1_and_2.py`.