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
# # 05 · Model states and optimizers: from GPT-2 124M to a 1.5-billion-parameter GPT-2
#
# **Questions**
# - How many bytes per parameter does training need, and why do the guides say 16, 18 or 20?
# - When do the model states (parameters, gradients, optimizer states) rather than the activations fill the GPU?
# - What can be done about them on one GPU: another optimizer, the optimizer step inside backward, gradient accumulation?
# - Why does a model that trains at batch 32 run out of memory in evaluation?
#
# **Objectives**
# - Measure parameters, gradients and optimizer states for SGD, SGD with momentum, Adam and AdamW, and match each to its formula, including the optimizer step's own temporaries.
# - Run each mixed-precision training loop behind the published "bytes per parameter" figures and tell which one describes your training.
# - Find where the peak of a step is, and the batch size at which it moves.
# - Reproduce PyTorch's "optimizer step in backward" figures for ViT-L/16, and compare the ZeRO paper's figures for GPT-2 1.5B with what PyTorch keeps.
# - Use gradient accumulation (and average a token loss correctly), inference mode and leak-free loops, and answer "will it fit?".
#
# **Time:** about 90 minutes alone: 60 reading and running (a run-all takes under two minutes), 30 for the exercises. **GPU:** not needed (memory simulated: nothing is downloaded, nothing of GPT-2 1.5B is allocated). Memory is in GiB (2³⁰ bytes); a source's GB (10⁹ bytes) is converted beside it.
#
# Lessons 01 (steady state, bytes-per-parameter conventions) and 04 (AMP) come first.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import dataclasses

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn

from helpers import GPU_CARDS, GiB, Meter, MiB, fmt_bytes, profile_step
from helpers.batch import model_state_estimate
from helpers.config import OPTIMIZER_NAMES, OPTIMIZERS
from helpers.loops import LOOPS, forward_peak, loop_memory
from helpers.models import digits_mlp
from helpers.models.gpt import GPT, GPT2_PRESETS
from helpers.record import CATEGORY_COLORS
from helpers.teaching.data import load_digits
from helpers.teaching.plots import plot_bytes_per_parameter
from helpers.teaching.widgets import PARAMETER_COUNT, WillItFit
from helpers.techniques import STATE_BYTES, STEP_TEMPORARY_BYTES
from helpers.transformer import measure_blocks

_ = torch.manual_seed(0)


def gib(nbytes):
    """Bytes as GiB with two decimals, the unit of this lesson."""
    return f"{nbytes / GiB:.2f} GiB"


# %%
# NBVAL_IGNORE_OUTPUT
# (why: versions and devices differ between machines)
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
for name in OPTIMIZERS:
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
                                       ("optimizer_states", "master 4 + Adam", 12)],
    "Hugging Face guide: 'mixed precision'": [("parameters", "fp32", 4), ("activations", "copy", 2),
                                              ("gradients", "fp32 grad", 4), ("optimizer_states", "Adam", 8)],
    "Megatron-LM README: bf16, fp32 grads": [("parameters", "bf16", 2), ("gradients", "fp32 grad", 4),
                                             ("optimizer_states", "master 4 + Adam", 12)],
    "Megatron-LM fp16; Ultra-Scale Playbook": [("parameters", "16-bit", 2), ("gradients", "16-bit", 2),
                                               ("gradients", "fp32", 4), ("optimizer_states", "master 4 + Adam", 12)],
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
# Look at the diamonds: each sits at the end of its bar, so every convention is a loop, measured before `optimizer.step()` (the cell asserts them). Blue is weights, orange gradients, purple what only the optimizer reads (ZeRO's K = 12 counts the fp32 master copy there), green autocast's 16-bit weight copies.
#
# - **16, fp32 Adam** (4 + 4 + 8): every float32 loop, and `torch.autocast` training, whose weights *are* the fp32 parameters.
# - **16, ZeRO** (2 + 2 + 12; Rajbhandari et al., SC20, section 3): a float16 model with an fp32 master copy. Same total, other tensors: between steps it keeps 14, fp32 Adam 12.
# - **18, the Hugging Face guide** (*Model training anatomy*; S. Bekman, *Machine Learning Engineering*) counts autocast's 16-bit copies beside the gradients. That happens only if backward runs **inside** the autocast region, whose cache keeps every copy until the region ends. With `backward()` after the `with` block, as PyTorch's examples write it, the cache is gone: 13.5 after the forward pass (12 + 3 of the 4 copies, kept for backward; the first layer's is not, as its input needs no gradient), 16 before the step.
# - **18 and 20, Megatron-LM**: its README gives 18 bytes per parameter for bf16 and 20 for fp16 with its non-distributed optimizer, which keeps an fp32 "main" gradient: bf16 gradients accumulate straight into it (2 + 4 + 4 + 8), fp16 ones are kept too (2 + 2 + 4 + 4 + 8). *The Ultra-Scale Playbook*'s 20 (bf16, fp32 gradient accumulation) is the second layout; DeepSpeed's ZeRO-2 estimator counts 2Ψ + 18Ψ/N, 20 on one GPU, with the same fp32 gradients (lesson 07).
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
# ## 5. The ZeRO paper's GPT-2 1.5B
#
# Section 3 of the ZeRO paper (Rajbhandari et al., SC20) explains where training memory goes with one example: GPT-2 with 1.5 billion parameters. Its model states, at 16 bytes per parameter, are 24 GB (22.4 GiB); its activations at sequence length 1K and batch 32 are "about 60 GB" (55.9 GiB), from about 12 half-precision values per token, hidden unit and layer (its footnote), and "about 8 GB" (7.5 GiB) with activation checkpointing. The engine's `gpt2-xl` has GPT-2 1.5B's sizes (48 layers, 1600 wide, 25 heads, 50,257 tokens): nothing is downloaded, and its steps are counted, not allocated. Run the paper's configuration under `torch.autocast` with the flash attention kernel that a recent GPU runs, without and with checkpointing of every block (the engine checkpoints GPT-2 as its 50 units: embeddings, 48 blocks, head):

# %%
P15 = GPT2_PRESETS["gpt2-xl"].parameter_count()
B, S, H, L = 32, 1024, 1600, 48
xl = profile_step("gpt2-xl", B, seq_len=S, amp=True, optimizer="adam", steady_state=True, device="simulated")
ckpt = profile_step("gpt2-xl", B, seq_len=S, amp=True, optimizer="adam", steady_state=True, checkpoint=50,
                    device="simulated")
at_end = xl.event_categories[xl.events.index(xl.find("", "fwd"))]        # the end of the forward pass
ckpt_end = ckpt.event_categories[ckpt.events.index(ckpt.find("", "fwd"))]
assert xl.parameter_count == P15 and round(xl.model_state_bytes / P15, 2) == 16.0
vocab = GPT2_PRESETS["gpt2-xl"].vocab_size
logits = B * S * vocab * 2                # float16: what "other" holds at the end of the forward pass
assert abs(at_end["other"] - logits) < 0.01 * logits
inputs_fp32 = L * B * S * H * 4          # checkpointed: each block keeps its float32 input
assert abs(ckpt_end["activations"] - inputs_fp32) < 0.5e9
copies = ckpt_end["other"] - logits       # checkpointed: autocast's cached 16-bit weight copies
assert abs(copies - 2 * (P15 - vocab * H - 1024 * H)) < 0.01 * copies   # 2 bytes per block parameter
kept_ckpt = ckpt_end["activations"] + copies
assert [round(b / GiB, 1) for b in (xl.model_state_bytes, at_end["activations"], kept_ckpt)] == [23.2, 87.7, 12.6]

paper = {"model states": 24e9, "activations": 60e9, "activations, checkpointed": 8e9}
engine = {"model states": xl.model_state_bytes, "activations": at_end["activations"],
          "activations, checkpointed": kept_ckpt}
colours = {"model states": CATEGORY_COLORS["optimizer_states"], "activations": CATEGORY_COLORS["activations"],
           "activations, checkpointed": CATEGORY_COLORS["activations"]}
fig = Figure(figsize=(8, 3.4), layout="constrained")
ax = fig.add_subplot()
for row, kind in enumerate(paper):
    for offset, (source, value) in zip((-0.2, 0.2), (("ZeRO paper", paper[kind]), ("PyTorch (measured)", engine[kind]))):
        ax.barh(row + offset, value / GiB, height=0.38, color=colours[kind], alpha=0.45 if source == "ZeRO paper" else 1,
                hatch="//" if source == "ZeRO paper" else None, edgecolor="white")
        ax.text(value / GiB + 1, row + offset, f"{source}: {value / GiB:.1f}", va="center", fontsize=8)
ax.set_yticks(range(len(paper)), list(paper))
ax.invert_yaxis()
ax.set(xlabel="GiB", xlim=(0, 118), title="GPT-2 1.5B, sequence 1024, batch 32, float16 autocast, Adam")
fig

# %% [markdown]
# Look at the pairs: the model states agree (16 bytes per parameter, 23.2 GiB for GPT-2's exact 1.56 billion parameters; the paper rounds to 1.5 billion), though they are autocast's 4 + 4 + 8, not the paper's 2 + 2 + 12. The activations do not: 87.7 GiB against the paper's 55.9, and 12.6 GiB against 7.5 checkpointed. (Activations here: all that the forward pass keeps beyond the parameters, the states and the logits, autocast's 16-bit weight copies included.)
#
# Why more? The paper's "12 values" is a formula about a set of tensors; PyTorch keeps others. One block, measured on its own (`measure_blocks`, the helper lesson 08 uses to take a block apart tensor by tensor):

# %%
two_blocks = dataclasses.replace(GPT2_PRESETS["gpt2-xl"], n_layer=2)   # every block keeps the same
block = measure_blocks(lambda: GPT(two_blocks), B, S, amp=True, attention="flash")[1]  # the second block
per_token = block / (B * S * H)
print(f"one block keeps {gib(block)}: {per_token:.1f} bytes per token and hidden unit, against the paper's 12 x 2 = 24")
assert 37.0 < per_token < 37.5 and abs(L * block - at_end["activations"]) < 0.02 * at_end["activations"]

# %% [markdown]
# About 37 bytes per token, hidden unit and layer instead of 24, and 48 blocks of them make the 87.7 GiB. Lesson 08 names every tensor; in short, `torch.autocast` keeps the residual stream and each LayerNorm's input in float32 (the parameters are float32, so every residual addition is), the MLP keeps its 4 × wide input and output, attention its q, k, v and output, and autocast a 16-bit copy of each weight (about 1.2 of the 37 bytes). Flash attention keeps no sequence × sequence scores, and this GPT has no dropout masks.
#
# And checkpointed? ZeRO's section 3.2 says what its 8 GB is: activation checkpointing (Chen et al., 2016) reduces activation memory "by approximately the square root of the total activations" at about 33% recomputation, which takes this model's 60 GB to about 8 (numerically, √60 ≈ 7.7). A rule of thumb, not a count of tensors. Checkpointing every block, as here, keeps each block's input, 48 float32 tensors of 32 × 1024 × 1600 values: 9.4 GiB (4.7 GiB if they were 16-bit). Autocast's cache keeps its 16-bit weight copies until the autocast region ends, checkpointed or not: 2.8 GiB more. Backward then recomputes one block at a time.
#
# Besides, the logits: 32 × 1024 × 50,257 values. The loss keeps two more copies for backward: their log-softmax in float16 (`cross_entropy` is in none of CUDA's autocast lists, so it runs in its input's type) and the float32 copy that autocast makes of it for `nll_loss` (on the float32 list). Backward starts with the float32 gradient of that copy, which is what "other" holds at the step's peak:

# %%
print(f"'other' at the peak: {gib(xl.categories['other'])}; a float32 tensor the size of the logits: {gib(B * S * vocab * 4)}")
assert abs(xl.categories["other"] - B * S * vocab * 4) < 0.01e9

# %% [markdown]
# The lesson to keep: a published activation figure is a formula about some set of tensors; the engine counts every tensor your PyTorch code keeps.
#
# ## 6. Gradient accumulation
#
# When the batch you want does not fit, split it: run k micro-batches, each with its loss divided by k, add up their gradients in `.grad`, and step once. Memory is that of one micro-batch, plus the gradients that now live across the micro-batches:

# %%
full = profile_step("resnet18", 128, optimizer="adam", steady_state=True, device="simulated")
accumulated = profile_step("resnet18", 32, optimizer="adam", steady_state=True, accumulation_steps=4,
                           device="simulated")
micro = profile_step("resnet18", 32, optimizer="adam", steady_state=True, device="simulated")
print(f"ResNet18, peak: batch 128 at once {gib(full.peak_allocated_bytes)}; 4 micro-batches of 32 "
      f"{gib(accumulated.peak_allocated_bytes)}; one batch of 32 {gib(micro.peak_allocated_bytes)}")
assert accumulated.peak_allocated_bytes < full.peak_allocated_bytes / 3
assert accumulated.peak_allocated_bytes > micro.peak_allocated_bytes

# %% [markdown]
# Accumulating costs a little more than one micro-batch (the second micro-batch's backward starts with every gradient allocated), and far less than the whole batch. Is it the same step? When the micro-batches have equal numbers of samples and the loss is a mean over samples, yes: the mean over 128 samples is the mean of four means over 32. Check it on real data (in float64, so that the check does not depend on the CPU's rounding):

# %%
data = load_digits()
x, y = data.x_train[:128].double(), data.y_train[:128]
torch.manual_seed(0)
model = digits_mlp().double()
F.cross_entropy(model(x), y).backward()
whole = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
for part in range(4):
    sl = slice(32 * part, 32 * (part + 1))
    (F.cross_entropy(model(x[sl]), y[sl]) / 4).backward()
difference = max((p.grad - g).abs().max().item() for p, g in zip(model.parameters(), whole))
assert difference < 1e-15
print("the accumulated gradient equals the whole batch's, to the last bits of float64")

# %% [markdown]
# The same gradient. (With BatchNorm, each micro-batch normalises with its own statistics, so the step is not exactly the same: one more reason why large models use LayerNorm.)
#
# **The classic pitfall: a mean over tokens.** A language model's loss is a mean over the *tokens* of a batch (`cross_entropy` ignores padding, `ignore_index=-100`). Micro-batches hold different numbers of real tokens, and the mean of their means weighs a token of a short micro-batch more than one of a long one. Two micro-batches of 64 positions, with 8 and 56 real tokens:

# %%
torch.manual_seed(0)
head = nn.Linear(16, 10).double()
features = torch.randn(2, 64, 16, dtype=torch.float64)       # 2 micro-batches x 64 token positions
targets = torch.randint(0, 10, (2, 64))
targets[0, 8:] = -100                                          # padding: cross_entropy's default ignore_index
targets[1, 56:] = -100
n_tokens = int((targets != -100).sum())                        # 64 real tokens in all


def gradient(loss_of):
    """The gradient of the head, accumulated over the two micro-batches."""
    head.zero_grad()
    for f, t in zip(features, targets):
        loss_of(f, t).backward()
    return torch.cat([p.grad.flatten() for p in head.parameters()])


whole_batch = gradient(lambda f, t: F.cross_entropy(head(features.flatten(0, 1)), targets.flatten()) / 2)
mean_of_means = gradient(lambda f, t: F.cross_entropy(head(f), t) / 2)
token_sum = gradient(lambda f, t: F.cross_entropy(head(f), t, reduction="sum") / n_tokens)
error = lambda g: ((g - whole_batch).norm() / whole_batch.norm()).item()
print(f"relative error against the whole batch: mean of means {error(mean_of_means):.0%}, "
      f"sum / total tokens {error(token_sum):.0%}")
assert error(mean_of_means) > 0.1 and error(token_sum) < 1e-12

# %% [markdown]
# The mean of means is another gradient (each of the first micro-batch's 8 tokens counts 7 times as much as one of the other 56). The fix: sum the per-token losses (`reduction="sum"`) and divide by the number of real tokens in the whole accumulated batch (over all ranks under data parallelism), counted before the first backward.
#
# ## 7. Training, inference, and two classic leaks
#
# A forward pass with autograd recording keeps what backward will need; under `torch.no_grad()` or `torch.inference_mode()` it keeps nothing, and each activation is freed as soon as the next layer has used it. The peak of one forward pass and its loss, parameters included:

# %%
fwd = {}
for mode in ("enabled", "no_grad", "inference_mode"):
    fwd[mode] = (forward_peak("resnet18", 128, grad_mode=mode, device="simulated"),
                 forward_peak("gpt2", 8, seq_len=1024, grad_mode=mode, device="simulated"),
                 forward_peak("gpt2", 8, seq_len=1024, amp=True, grad_mode=mode, device="simulated"))
print(f"{'forward peak':<24} {'ResNet18, b128':>15} {'GPT-2 124M, b8 x 1024':>22} {'same, float16 AMP':>18}")
for mode, label in (("enabled", "training"), ("no_grad", "torch.no_grad()"), ("inference_mode", "torch.inference_mode()")):
    print(f"{label:<24} " + " ".join(f"{gib(v):>{w}}" for v, w in zip(fwd[mode], (15, 22, 18))))
assert fwd["no_grad"][:2] == fwd["inference_mode"][:2]
assert fwd["enabled"][0] > 3 * fwd["no_grad"][0]
weight_cache = fwd["no_grad"][2] - fwd["inference_mode"][2]
assert abs(weight_cache - 2 * P124) < 0.05 * 2 * P124

# %% [markdown]
# Inference needs a third of the training forward pass for ResNet18, less than half for GPT-2, whose inference peak is its logits and their float32 log-softmax. In float32, `no_grad` and `inference_mode` keep the same tensors; `inference_mode` saves CPU time (no version counters, no view tracking). Under autocast (last column) they differ by 2 bytes per parameter: under `no_grad`, autocast caches the 16-bit copy of every weight until the region ends (it caches casts of leaves that require grad); under `inference_mode` it frees each copy after use. That difference is recent: PyTorch stopped caching under `inference_mode` with pull request #165068 (`aten/src/ATen/autocast_mode.cpp`, merged in December 2025); PyTorch 2.9 and earlier cache there too. On a current PyTorch, prefer `torch.inference_mode()` for inference.
#
# The two leaks of the PyTorch FAQ ("My model reports *cuda runtime error(2): out of memory*") are loops that keep something they should not. `loop_memory` runs four iterations of each loop on ResNet18 at batch 32 and reports the bytes still allocated after each:

# %%
grow = {}
for loop in LOOPS:
    after = loop_memory(loop, "resnet18", 32, steps=4, device="simulated")
    grow[loop] = [b - a for a, b in zip(after, after[1:])]
    print(f"{loop:<40} grows by {gib(grow[loop][0])} per batch")
assert grow["eval, total_loss += loss"] == [grow["eval, total_loss += loss"][0]] * 3 and grow["eval, total_loss += loss"][0] > 600 * MiB
assert all(g == [0, 0, 0] for name, g in grow.items() if name != "eval, total_loss += loss")

# %% [markdown]
# - **Evaluation without `torch.no_grad()`, summing the loss tensor**: every batch's graph, with its saved activations, stays reachable from `total_loss`: 0.66 GiB more per batch until the GPU is full. With `.detach()` (or `.item()`) each graph is freed with its batch; under `torch.no_grad()` none is built.
# - **Training, `total_loss += loss`**, the FAQ's example: on the GPU nothing grows, as `backward()` has freed each graph's saved tensors; what grows is the graph's *nodes*, in host memory, one graph per step. Write `total_loss += loss.item()`.
#
# ## 8. Will it fit?
#
# All of the above in one tool: the model (a GPT-2 preset, a torchvision classifier, or a bare parameter count), the optimizer, the precision, the batch, the sequence length or image size, and the GPU (the memory PyTorch sees on each card, lesson 01). It shows a steady-state step's peak by category and the verdict, with an assumed overhead for the CUDA context and workspaces. For a bare parameter count it shows the model states alone (section 1's formulas).
#
# First, driven from code as a learner would with the mouse: GPT-2 1.5B's model states alone, as a parameter count, on a 24 GB card and on an A100 40 GB:

# %%
states_only = WillItFit(model=PARAMETER_COUNT, parameters=P15, capacity="RTX 4090 24 GB", device="simulated")
assert states_only.message.startswith("does not fit")
states_only.capacity.value = "A100 40 GB"
assert states_only.message.startswith("model states fit") and states_only.result.peak_bytes == 20 * P15
print(f"GPT-2 1.5B, model states alone with foreach Adam: {gib(states_only.result.peak_bytes)}: "
      f"do not fit an RTX 4090 24 GB, fit an A100 40 GB")

# %% [markdown]
# 20 bytes per parameter at the `foreach` step: 29.0 GiB of model states, which fit an A100 40 GB before any activation. Add the activations of section 5 and GPT-2 1.5B trains on one such GPU only at small batches, with checkpointing, or with the model states sharded over several GPUs (ZeRO, lesson 07).
#
# Now the widget itself, opened on GPT-2 124M at batch 8 and sequence 1024 with Adam and float16 AMP on an A100 40 GB. Its verdict first as text:

# %%
fit = WillItFit(model="gpt2", batch_size=8, optimizer="adam", precision="AMP float16", capacity="A100 40 GB",
                device="simulated")
print(fit.message)
assert fit.message.startswith("fits in A100 40 GB")

# %%
fit

# %% [markdown]
# Move the batch slider to find the largest batch that fits, then switch to `gpt2-xl` and watch the activations overtake the model states.
#
# ## Exercises
#
# **Exercise 1: the largest model for its model states.** With fused AdamW (no step temporary) in `torch.autocast` training, how many bytes per parameter does the optimizer step need, and how many parameters can an H100 80 GB hold in model states alone, with the assumed 1 GiB of overhead? Check with `model_state_estimate`.

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
# **Exercise 2: which GPT-2 trains on a 24 GB card?** At batch 1, sequence 1024, Adam and float16 AMP, which presets fit an RTX 4090 24 GB (with the assumed overhead), and does the step in backward make the next one fit? (`from helpers import fits`.)

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
# **Exercise 3: a leak in your own loop.** This evaluation loop collects predictions. How much does it keep per batch for ResNet18 at batch 32, and what is the one-word fix? Measure it with `Meter` (the model is placed on the fake GPU as `profile_step` does).
#
# ```python
# predictions = []
# for x in batches:
#     predictions.append(model(x))
# ```

# %%
# Your code here: compare with forward_peak(..., grad_mode="enabled") and forward_peak(..., grad_mode="no_grad")

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# from helpers.models import resolve_model
#
# def collected(detach):
#     meter = Meter("simulated")
#     unplaced = meter.build(resolve_model("resnet18").build)
#     with meter:
#         model = meter.place(unplaced).eval()
#         predictions, after = [], []
#         for _ in range(3):
#             out = model(torch.randn(32, 3, 224, 224, device=meter.device))
#             predictions.append(out.detach() if detach else out)
#             del out
#             after.append(meter.allocated())
#     return [b - a for a, b in zip(after, after[1:])]
#
# leak, fixed = collected(False), collected(True)
# print(f"kept per batch: {fmt_bytes(leak[0])} without detach, {fmt_bytes(fixed[0])} with it")
# assert leak[0] == leak[1] > 500 * MiB and fixed == [128000, 128000]   # 32 x 1000 float32 logits
# ```
#
# Each prediction keeps its whole graph, and with it every activation the batch saved: 0.66 GiB per batch of 32 (as the evaluation leak of section 7). `.detach()` keeps only the 32 × 1000 float32 logits; better still, run evaluation under `torch.inference_mode()` and build no graph at all.
# </details>
#
# ## Key points
#
# - Model states per parameter: parameter 4 + gradient 4 + optimizer state (SGD 0, momentum 4, Adam and AdamW 8) bytes in float32; Adam's `foreach` step adds 4 bytes for its duration (20 at its peak), `fused=True` none. `zero_grad(set_to_none=True)` frees the gradients between steps.
# - "16 bytes per parameter" is two different things: fp32 Adam's 4 + 4 + 8, which `torch.autocast` training also needs, and ZeRO's 2 + 2 + 12. 18 is autocast's weight copies beside the gradients (backward inside the autocast region) or Megatron-LM's bf16 layout; 20 adds an fp32 gradient to a 16-bit model and gradient (Megatron-LM fp16, DeepSpeed ZeRO-2 on one GPU). Ask which loop a figure describes.
# - The peak is at the optimizer step for small batches and in backward for large ones; find the crossover by measuring. The step in backward (`register_post_accumulate_grad_hook`) removes almost all gradients from the peak: ViT-L/16 at batch 1 from 5.7 to 3.7 GiB.
# - GPT-2 1.5B: 23.2 GiB of model states at 16 bytes per parameter; activations at sequence 1024 and batch 32 are 87.7 GiB under `torch.autocast` with flash attention, not the paper's 55.9 (60 GB), because PyTorch keeps about 37 bytes per token, hidden unit and layer, not 24; checkpointed, 12.6 GiB. The paper's checkpointed 8 GB is Chen et al.'s square-root rule of thumb.
# - Gradient accumulation gives the same gradient at the memory of a micro-batch plus the gradients, for equal micro-batches of a per-sample mean; a per-token mean must be summed and divided by the total token count. Inference under `torch.inference_mode()` keeps no activations (and, under autocast, since PyTorch's December 2025 change, no cache of weight copies); a loop that holds a loss or an output with its graph grows by a whole batch of activations per iteration.
#
# ## Further reading
#
# - S. Rajbhandari, J. Rasley, O. Ruwase, Y. He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054, section 3.
# - V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022, arXiv:2205.05198.
# - PyTorch tutorials: *How to save memory by fusing the optimizer step into the backward pass*; PyTorch FAQ, *My model reports "cuda runtime error(2): out of memory"*; `torch.optim` documentation (foreach and fused implementations).
# - Hugging Face, *Model training anatomy* and *The Ultra-Scale Playbook* (2025); S. Bekman, *Machine Learning Engineering*, chapter on model memory.
# - NVIDIA Megatron-LM, README, *Distributed optimizer* (bytes per parameter); DeepSpeed, `estimate_zero2_model_states_mem_needs` in `deepspeed/runtime/zero/stage_1_and_2.py`.
# - T. Chen, B. Xu, C. Zhang, C. Guestrin, *Training Deep Nets with Sublinear Memory Cost*, 2016, arXiv:1604.06174.
