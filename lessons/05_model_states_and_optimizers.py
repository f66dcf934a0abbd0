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
# # 05 · Model states and optimizers: from ResNet18 to a 1.5-billion-parameter GPT-2
#
# **Questions**
# - How many bytes per parameter does training need, and why do the guides say 16, 18 or 20?
# - When do the model states (parameters, gradients, optimizer states) rather than the activations fill the GPU?
# - What can be done about them on one GPU: another optimizer, the optimizer step inside backward, gradient accumulation?
# - Why does a model that trains at batch 32 run out of memory in evaluation, or after a few hundred steps?
#
# **Objectives**
# - Measure parameters, gradients and optimizer states for SGD, SGD with momentum, Adam and AdamW, and match each to its formula, including the optimizer step's own temporaries.
# - Run each mixed-precision scheme that PyTorch can express and tell which "bytes per parameter" convention describes it.
# - Find where the peak of a step is, and the batch size at which it moves.
# - Reproduce PyTorch's "optimizer step in backward" figures for ViT-L/16, and the ZeRO paper's figures for GPT-2 1.5B, explaining every gap.
# - Use gradient accumulation, inference mode and leak-free loops, and answer "will it fit?" for any model.
#
# **Time:** 50 minutes teaching, 20 minutes exercises. **GPU:** not needed (memory simulated: nothing is downloaded, nothing of GPT-2 1.5B is allocated).
#
# Lessons 01 (steady state, bytes-per-parameter conventions) and 04 (AMP) come first.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import torch
import torch.nn.functional as F
from torch import nn

from helpers import GPU_CARDS, GiB, Meter, MiB, fmt_bytes, profile_step
from helpers.batch import model_state_estimate
from helpers.config import OPTIMIZER_NAMES, OPTIMIZERS
from helpers.teaching.data import load_digits
from helpers.loops import LOOPS, forward_peak, loop_memory
from helpers.models import digits_mlp
from helpers.models.gpt import GPT2_PRESETS
from helpers.techniques import STATE_BYTES, STEP_TEMPORARY_BYTES
from helpers.teaching.widgets import PARAMETER_COUNT, WillItFit

_ = torch.manual_seed(0)

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
# - **Adam** and **AdamW**: `exp_avg` and `exp_avg_sq`, the running mean and uncentred variance of the gradient (8 bytes). Their per-tensor `step` counters live in host memory on a GPU.
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
assert p.parameter_count == P124

print(f"GPT-2 124M ({P124:,} parameters), bytes per parameter at optimizer.step():")
print(f"{'optimizer':<28} {'param':>6} {'grad':>6} {'state':>6} {'step temp':>9} {'total':>6}   formula")
for (name, fused), c in rows.items():
    temp = c["step temp"]
    total = c["parameters"] + c["gradients"] + c["optimizer_states"] + temp
    formula = 4 + 4 + STATE_BYTES[name] + (0 if fused else STEP_TEMPORARY_BYTES[name])
    label = f"{OPTIMIZER_NAMES[name]} ({'fused' if fused else 'foreach'})"
    print(f"{label:<28} {c['parameters']:>6.2f} {c['gradients']:>6.2f} {c['optimizer_states']:>6.2f} {temp:>9.2f} "
          f"{total:>6.2f}   4 + 4 + {STATE_BYTES[name]} + {0 if fused else STEP_TEMPORARY_BYTES[name]} = {formula}")
    assert abs(total - formula) < 0.01 and abs(c["optimizer_states"] - STATE_BYTES[name]) < 0.01

# %% [markdown]
# Every row matches its formula to the hundredth of a byte (the rest is each tensor's rounding to 512 bytes, lesson 00). Read the table as a budget:
#
# - The gradients cost as much as the parameters, whatever the optimizer.
# - Adam's states cost twice the parameters: **16 bytes per parameter** for parameters, gradients and states, the figure you will meet everywhere.
# - The `foreach` Adam step adds 4 bytes per parameter for its duration: **20 bytes per parameter at its peak**. For a large model this is the moment that decides whether the step fits, and `fused=True` removes it (the `torch.optim` documentation ranks the implementations fused, then foreach, then the plain for-loop, in speed; fused is not the default yet).
# - AdamW differs from Adam in how it applies weight decay, not in memory.
#
# **`zero_grad(set_to_none=True)`**, PyTorch's default since 2.0, frees the gradients after each step; `set_to_none=False` zeroes them in place and keeps them. Compare ResNet18 with Adam at batch 32:

# %%
zero = {}
for set_to_none in (True, False):
    p = profile_step("resnet18", 32, optimizer="adam", steady_state=True, set_to_none=set_to_none, device="simulated")
    zero[set_to_none] = p
    print(f"set_to_none={set_to_none!s:<5}  gradients allocated before the step starts: "
          f"{fmt_bytes(p.event_categories[0]['gradients']):>9}   peak {fmt_bytes(p.peak_allocated_bytes)} "
          f"({p.peak.label})")
assert zero[True].event_categories[0]["gradients"] == 0
assert zero[False].event_categories[0]["gradients"] == zero[False].event_categories[0]["parameters"] - 51200
assert zero[False].peak_allocated_bytes > zero[True].peak_allocated_bytes

# %% [markdown]
# With `set_to_none=False` the 44.6 MiB of gradients stay allocated between steps (the parameters' 44.6 MiB include 50 KiB of BatchNorm buffers, which have no gradient), and the peak rises by 31.9 MiB: during backward, the gradients of the layers not yet reached are already there. Setting them to `None` is free memory.
#
# ## 2. Sixteen, eighteen, twenty: the conventions side by side
#
# Guides and papers give different bytes-per-parameter figures for "mixed-precision training with Adam". Each describes a different training loop. Run each loop that PyTorch can express on a fake GPU, on a network of four `Linear(4096, 4096)` layers without bias (64 Mi parameters, so that each tensor's 512-byte rounding vanishes), and read the bytes per parameter at three moments: before the optimizer step (after backward), at the peak of the step, and between steps.

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


def autocast_adam(meter):
    model = layers(meter)
    opt, scaler = adam(meter, model.parameters()), meter.grad_scaler()  # torch.amp.GradScaler("cuda") on a GPU
    for last in (False, True):
        with torch.autocast("cpu", dtype=torch.float16):  # the simulation applies CUDA's autocast lists
            loss = model(batch(meter)).float().square().mean()
        if last:
            yield "after forward"
        scaler.scale(loss).backward()
        if last:
            yield "before step"
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    yield "between steps"


def master_weights(meter, dtype=torch.float16, fp32_accumulation=False):
    """A 16-bit model, an fp32 master copy that Adam updates, and (optionally) fp32 gradients accumulated over two micro-batches."""
    model = layers(meter, dtype)
    master = [p.detach().float() for p in model.parameters()]
    opt = adam(meter, master)
    for last in (False, True):
        for _ in range(2 if fp32_accumulation else 1):
            model(batch(meter, dtype)).float().square().mean().backward()
            if fp32_accumulation:  # fold the 16-bit gradients into fp32 ones
                for m, p in zip(master, model.parameters()):
                    m.grad = p.grad.float() if m.grad is None else m.grad.add_(p.grad)
                    p.grad.zero_()
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
    "torch.autocast float16 + GradScaler + Adam": autocast_adam,
    "float16 model + fp32 master + Adam": master_weights,
    "bfloat16 model + fp32 master + fp32 grad accumulation": lambda m: master_weights(m, torch.bfloat16, True),
}
measured = {name: per_parameter(loop) for name, loop in loops.items()}
print(f"{'loop (bytes per parameter)':<56} {'after fwd':>9} {'before step':>11} {'peak':>6} {'between':>8}")
for name, m in measured.items():
    after = f"{m['after forward']:.2f}" if "after forward" in m else "-"
    print(f"{name:<56} {after:>9} {m['before step']:>11.2f} {m['peak']:>6.2f} {m['between steps']:>8.2f}")

# %% [markdown]
# Each loop runs two steps and is read during the second, when the optimizer states exist; "between" is what it keeps after the step, which every later step starts with. Now the conventions, each with its breakdown, its source, and the loop it describes:
#
# | convention | breakdown (bytes per parameter) | total | where it comes from | measured above |
# |---|---|---|---|---|
# | fp32 Adam | parameter 4 + gradient 4 + Adam 8 | **16** | any float32 training loop | "before step" of fp32 + Adam: 16.00; 20 at the `foreach` peak |
# | `torch.autocast` (PyTorch AMP) | 4 + 4 + 8, plus a *transient* 16-bit copy of each weight (2) during forward and backward | **16**, up to 18 | PyTorch's AMP: the fp32 parameters are the weights; autocast casts them per operation and keeps the casts that backward needs | 13.51 after forward (12 + 1.50 of copies, as the first layer's copy is not kept because its input needs no gradient, + 0.01 of activations for the 8 tokens), 16.00 before step, copies gone |
# | ZeRO's mixed precision | fp16 parameter 2 + fp16 gradient 2 + fp32 master parameter 4 + Adam 8 ("K = 12") | **16** | Rajbhandari et al., ZeRO, SC20, section 3 | "before step" of the float16 + master loop: 16.00; between steps 14.00 (no gradients) |
# | "mixed precision" in the Hugging Face and ML-engineering guides | weights 6 (fp32 + an fp16 copy) + fp32 gradient 4 + Adam 8 | **18** | Hugging Face, *Model training anatomy*; S. Bekman, *Machine Learning Engineering* | an upper bound for `torch.autocast`: it counts the 16-bit copies as if they lived beside all the gradients, which they never do in the loop above |
# | bf16 with fp32 gradient accumulation | bf16 parameter 2 + bf16 gradient 2 + fp32 master 4 + fp32 gradient 4 + Adam 8 | **20** | *The Ultra-Scale Playbook* (Hugging Face, 2025), its mixed-precision table | "before step" of the bfloat16 + master + accumulation loop: 20.00 |
#
# Two sixteens, then, that are different things: fp32 Adam's 4 + 4 + 8 and ZeRO's 2 + 2 + 12. And every convention counts what lives *between* the phases of a step; the measured peaks add what the loop does at the step: the `foreach` temporary (4 bytes) in all of them, and, in the master-weights loop, an fp32 copy of every gradient made just before `step()` (ZeRO's implementations convert in chunks instead).

# %%
m = measured
assert round(m["fp32 + Adam"]["before step"], 2) == 16.0 and round(m["fp32 + Adam"]["peak"], 2) == 20.0
assert round(m["torch.autocast float16 + GradScaler + Adam"]["after forward"], 1) == 13.5
assert round(m["torch.autocast float16 + GradScaler + Adam"]["before step"], 2) == 16.0
assert round(m["float16 model + fp32 master + Adam"]["before step"], 2) == 16.0
assert round(m["float16 model + fp32 master + Adam"]["between steps"], 2) == 14.0
assert round(m["float16 model + fp32 master + Adam"]["peak"], 2) == 24.0   # + fp32 gradients + foreach temporary
assert round(m["bfloat16 model + fp32 master + fp32 grad accumulation"]["before step"], 2) == 20.0
print("each convention matches the loop it describes")

# %% [markdown]
# Which one applies to *your* training? If you use `torch.autocast` (with or without a `GradScaler`), your model states are 16 bytes per parameter with Adam, 20 at the `foreach` step, and autocast's casts come on top only during forward and backward. The 2 + 2 + 12 layouts are those of frameworks that keep the model itself in 16 bits (DeepSpeed, Megatron-LM, Apex's O2): they save the 4-byte parameters' room only if the master copy is sharded away (ZeRO, lesson 07).
#
# ## 3. Where the peak is
#
# A training step has two candidates for its peak: late in the forward pass or early in backward, when the activations are all alive (lessons 03 and 04), and the optimizer step, when parameters, gradients, states and the step's temporaries are. The first grows with the batch, the second does not. So there is a batch size at which the peak moves. For ResNet18 with Adam:

# %%
where = {}
for b in (1, 2, 3, 4, 32, 128):
    p = profile_step("resnet18", b, optimizer="adam", steady_state=True, device="simulated")
    where[b] = p.peak.phase
    print(f"batch {b:>3}: peak {fmt_bytes(p.peak_allocated_bytes):>11} at {p.peak.label}")
crossover = min(b for b, phase in where.items() if phase != "optimizer.step")
assert where[1] == where[2] == "optimizer.step" and crossover == 3 and where[128] == "bwd"

# %% [markdown]
# At batch 1 and 2 the Adam step decides (44.6 MiB of parameters + 44.6 of gradients + 89.2 of states + 44.6 of `foreach` temporary = 223 MiB); from batch **3** on, the backward pass does. ResNet18 is small and its activations large (21 MiB per image, lesson 01), so the crossover comes early. For a large language model the optimizer step can decide up to a batch of many sequences: then the model states, not the activations, are what to shrink.
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
# The simulation does the same with `step_in_backward=True` (GB here are 10⁹ bytes, as in the tutorial):

# %%
vit = {sib: profile_step("vit_l_16", 1, optimizer="adam", steady_state=True, step_in_backward=sib, device="simulated")
       for sib in (False, True)}
for sib, p in vit.items():
    c = {k: v / 1e9 for k, v in p.categories.items()}
    print(f"{'step in backward' if sib else 'optimizer.step()':<17} peak {p.peak_allocated_bytes / 1e9:.2f} GB at "
          f"{p.peak.label}: parameters {c['parameters']:.2f}, gradients {c['gradients']:.2f}, "
          f"Adam states {c['optimizer_states']:.2f}, activations {c['activations']:.2f}, other {c['other']:.2f}")
assert round(vit[False].peak_allocated_bytes / 1e9, 1) == 6.1 and vit[False].peak.phase == "optimizer.step"
assert round(vit[True].peak_allocated_bytes / 1e9, 1) == 4.0 and vit[True].peak.phase == "bwd"
assert vit[True].categories["gradients"] < 0.02 * vit[False].categories["gradients"]

# %% [markdown]
# Both of the tutorial's figures, to the tenth of a GB. The peak **moves**: from the optimizer step, where all 1.2 GB of gradients and the 1.2 GB `foreach` temporary coexist with the states, to the backward pass of the last MLP layer, where only that layer's gradient (and its small Adam temporary) exists. The price: no gradient clipping over the whole model, no gradient accumulation, and one small step per parameter; and it cannot be combined with a `GradScaler`, which must see every gradient before stepping (the simulation refuses `step_in_backward` with float16 AMP).
#
# ## 5. The ZeRO paper's GPT-2 1.5B
#
# Section 3 of the ZeRO paper (Rajbhandari et al., SC20) explains where training memory goes with one example: GPT-2 with 1.5 billion parameters. It states that the weights alone in 16 bits take 3 GB, that mixed-precision Adam needs 16 bytes per parameter, 24 GB, and that the activations at sequence length 1K and batch 32 need about 60 GB, about 8 GB with activation checkpointing. The engine's `gpt2-xl` has GPT-2 1.5B's sizes (48 layers, 1600 wide, 25 heads, 50,257 tokens): nothing is downloaded, and its 30 GB of steps are counted, not allocated.

# %%
P15 = GPT2_PRESETS["gpt2-xl"].parameter_count()
print(f"GPT-2 1.5B: {P15:,} parameters")
print(f"  16-bit weights alone: {2 * P15 / 1e9:.2f} GB   (paper: 3 GB, for 1.5 billion)")
print(f"  16 bytes per parameter: {16 * P15 / 1e9:.2f} GB   (paper: 24 GB)")
xl = profile_step("gpt2-xl", 32, seq_len=1024, amp=True, optimizer="adam", steady_state=True, device="simulated")
states = xl.model_state_bytes
print(f"  measured model states at the optimizer step (AMP, Adam): {states / 1e9:.2f} GB "
      f"= {states / xl.parameter_count:.2f} bytes per parameter")
assert xl.parameter_count == P15 and round(states / P15, 2) == 16.0

# %% [markdown]
# The model states match: 16 bytes per parameter, 24.9 GB for GPT-2's exact 1.56 billion parameters (the paper rounds to 1.5 billion). They are the loop of `torch.autocast` (4 + 4 + 8), not the paper's 2 + 2 + 12, and come to the same total.
#
# Now the activations, at the end of the forward pass of that step (sequence 1024, batch 32, float16 autocast, the flash attention kernel that a recent GPU runs):

# %%
B, S, H, L = 32, 1024, 1600, 48
fwd_end = xl.events.index(xl.find("", "fwd"))
at_end = xl.event_categories[fwd_end]
print(f"at the end of the forward pass: activations {at_end['activations'] / 1e9:.1f} GB, "
      f"other (the logits) {at_end['other'] / 1e9:.1f} GB")
print(f"the paper's about 60 GB: 12 half-precision values per token, hidden unit and layer reproduce it: "
      f"12 x 2 x {B}·{S}·{H}·{L} = {12 * 2 * B * S * H * L / 1e9:.1f} GB")

# %% [markdown]
# 94 GB, not 60. Which tensors does the engine count that the paper does not? Take one transformer block apart: every storage that is still alive at the end of the forward pass and was allocated while block 0 ran (the allocation log, lesson 03, says when each was made), grouped by dtype and shape:

# %%
start, end = xl.find("blocks.0", "pre"), xl.find("blocks.0", "fwd")  # block 0's forward pass
kept = [s for s in xl.kept_between(start, end, until=xl.find("", "fwd")) if s.category == "activations"]
weight_shapes = {(3 * H, H), (H, H), (4 * H, H), (H, 4 * H)}  # a block's four weight matrices
block, copies = {}, 0
for s in kept:
    if s.shape in weight_shapes and s.dtype == torch.float16:
        copies += s.nbytes
    else:
        key = (str(s.dtype).removeprefix("torch."), s.shape)
        block[key] = block.get(key, 0) + s.nbytes
tokens = B * S
print(f"block 0 keeps, per token and hidden unit (bytes):")
for (dtype, shape), nbytes in sorted(block.items(), key=lambda kv: -kv[1]):
    print(f"  {dtype:<8} {str(shape):<22} {nbytes / (tokens * H):6.2f}")
per_layer = sum(block.values()) / (tokens * H)
print(f"  {'total':<31} {per_layer:6.2f}   (+ its 16-bit weight copies: {copies / 2**20:.1f} MiB)")
assert 36.0 < per_layer < 36.1

# %% [markdown]
# **36.07 bytes** per token, hidden unit and layer, against the 24 (12 values × 2 bytes) that reproduce the paper's figure. Korthikanti et al. (*Reducing Activation Recomputation in Large Transformer Models*, 2022) name the parts of a block in half precision: 34 bytes per token and hidden unit, plus 5 × heads × sequence bytes for the attention scores. Against theirs:
#
# - the attention scores term disappears: the flash kernel keeps q, k, v, its output (which is also the output projection's input) and one log-sum-exp per row and head (the 0.06 above), never the sequence × sequence matrix;
# - our GPT has no dropout, so the two residual dropout masks (1 byte each) are not there: 34 − 2 = 32;
# - **+4**: `torch.autocast` keeps the residual stream in float32 (the parameters are float32, so the embeddings and every residual addition are), and each LayerNorm keeps its float32 input: the first row above, 8 bytes instead of 4 (the last row, 0.01, is the LayerNorms' per-token mean and inverse deviation).
#
# So 32 + 4 + 0.06 + 0.01 = 36.07. The whole 94 GB then adds up from parts:

# %%
blocks = L * per_layer * tokens * H
weights16 = L * copies
rest = at_end["activations"] - blocks - weights16
print(f"48 blocks x {per_layer:.2f} B x {tokens}·{H}:        {blocks / 1e9:6.1f} GB")
print(f"16-bit weight copies kept for backward (48 blocks): {weights16 / 1e9:6.1f} GB")
print(f"embeddings and the last LayerNorm:                  {rest / 1e9:6.1f} GB")
print(f"activations at the end of the forward pass:          {at_end['activations'] / 1e9:6.1f} GB")
assert abs(rest) < 0.6e9

# %% [markdown]
# Every gap has its cause: 24 → 36 bytes per token per layer (the paper's count of values is not a count of PyTorch's tensors: autocast's float32 residual stream, the MLP's 4× wide input and output, the attention inputs), and 3 GB of 16-bit weight copies that autocast keeps for backward. Besides, the logits: the 3.3 GB "other" above are the float16 logits, 32 × 1024 × 50,257 values. The loss keeps two more copies of them for backward: their log-softmax in float16 (`cross_entropy` has no entry in CUDA's autocast lists, so it runs in its input's type), and the float32 copy that autocast makes of it for `nll_loss` (which is on the float32 list): 3.3 + 6.6 GB. Backward then starts with the float32 gradient of that copy, 6.6 GB again, and that is what "other" holds at the step's peak:
#
# %%
vocab = GPT2_PRESETS["gpt2-xl"].vocab_size
print(f"'other' at the peak: {xl.categories['other'] / 1e9:.2f} GB; a float32 tensor the size of the logits: "
      f"{B * S * vocab * 4 / 1e9:.2f} GB")
assert abs(xl.categories["other"] - B * S * vocab * 4) < 0.01e9

# %% [markdown]
# **With activation checkpointing** of every block (the engine checkpoints GPT-2 as its 50 units: embeddings, 48 blocks, head), each block keeps only its input:

# %%
ckpt = profile_step("gpt2-xl", 32, seq_len=1024, amp=True, optimizer="adam", steady_state=True, checkpoint=50,
                    device="simulated")
ckpt_end = ckpt.event_categories[ckpt.events.index(ckpt.find("", "fwd"))]
inputs_fp32 = L * tokens * H * 4
print(f"checkpointed: activations at the end of the forward pass {ckpt_end['activations'] / 1e9:.1f} GB; "
      f"48 float32 block inputs = {inputs_fp32 / 1e9:.1f} GB (in float16 they would be {inputs_fp32 / 2e9:.1f} GB)")
print(f"peak of the whole step: {fmt_bytes(xl.peak_allocated_bytes, 'GiB')} -> {fmt_bytes(ckpt.peak_allocated_bytes, 'GiB')}")
assert abs(ckpt_end["activations"] - inputs_fp32) < 0.5e9

# %% [markdown]
# 10.5 GB against the paper's "about 8 GB": the block inputs are float32 here (the residual stream again), 10.1 GB; in float16 they would be 5.0 GB. The paper does not say what its 8 GB count beyond the inputs. The lesson to keep: a published activation figure is a formula about some set of tensors; the engine counts every tensor your PyTorch code keeps.
#
# ## 6. Gradient accumulation
#
# When the batch you want does not fit, split it: run k micro-batches, each with its loss divided by k, add up their gradients in `.grad`, and step once. Memory is that of one micro-batch, plus the gradients that now live across the micro-batches:

# %%
full = profile_step("resnet18", 128, optimizer="adam", steady_state=True, device="simulated")
accumulated = profile_step("resnet18", 32, optimizer="adam", steady_state=True, accumulation_steps=4,
                           device="simulated")
micro = profile_step("resnet18", 32, optimizer="adam", steady_state=True, device="simulated")
print(f"batch 128 at once:           peak {fmt_bytes(full.peak_allocated_bytes)}")
print(f"4 micro-batches of 32:       peak {fmt_bytes(accumulated.peak_allocated_bytes)}")
print(f"one batch of 32, no accum.:  peak {fmt_bytes(micro.peak_allocated_bytes)}")
assert accumulated.peak_allocated_bytes < full.peak_allocated_bytes / 3
assert accumulated.peak_allocated_bytes > micro.peak_allocated_bytes

# %% [markdown]
# Accumulating costs more than one micro-batch alone (the second micro-batch's backward starts with every gradient already allocated), and far less than the whole batch. Is the result the same step? For a network without BatchNorm, yes: the mean loss over 128 samples is the mean of four means over 32, so its gradient is the mean of their gradients. Check it on real data and real numbers (in float64, so that the check does not depend on the CPU's rounding):

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
print(f"largest difference between the two gradients: {difference:.1e} (of gradients up to "
      f"{max(g.abs().max().item() for g in whole):.2f})")
assert difference < 1e-15

# %% [markdown]
# The same gradient, to the last bits of float64. (With BatchNorm, each micro-batch normalises with its own statistics, so the step is not exactly the same: one more reason why large models use LayerNorm.)
#
# ## 7. Training, inference, and two classic leaks
#
# A forward pass with autograd recording keeps what backward will need; under `torch.no_grad()` or `torch.inference_mode()` it keeps nothing, and each activation is freed as soon as the next layer has used it. The peak of one forward pass and its loss, parameters included:

# %%
print(f"{'':<26} {'ResNet18, b128':>15} {'GPT-2 124M, b8 x 1024':>22} {'same, float16 AMP':>18}")
fwd = {}
for mode in ("enabled", "no_grad", "inference_mode"):
    fwd[mode] = (forward_peak("resnet18", 128, grad_mode=mode, device="simulated"),
                 forward_peak("gpt2", 8, seq_len=1024, grad_mode=mode, device="simulated"),
                 forward_peak("gpt2", 8, seq_len=1024, amp=True, grad_mode=mode, device="simulated"))
    label = {"enabled": "training forward", "no_grad": "torch.no_grad()", "inference_mode": "torch.inference_mode()"}[mode]
    print(f"{label:<26} {fmt_bytes(fwd[mode][0]):>15} {fmt_bytes(fwd[mode][1]):>22} {fmt_bytes(fwd[mode][2]):>18}")
assert fwd["no_grad"][:2] == fwd["inference_mode"][:2]
assert fwd["enabled"][0] > 3 * fwd["no_grad"][0]
weight_cache = fwd["no_grad"][2] - fwd["inference_mode"][2]
print(f"under AMP, no_grad keeps {fmt_bytes(weight_cache)} more than inference_mode: "
      f"{weight_cache / P124:.2f} bytes per parameter")
assert abs(weight_cache - 2 * P124) < 0.05 * 2 * P124

# %% [markdown]
# Inference needs a third of the training forward pass for ResNet18, less than half for GPT-2, whose inference peak is its logits and their float32 log-softmax (8 × 1024 × 50,257 values each). In float32, `no_grad` and `inference_mode` keep exactly the same tensors; `inference_mode` saves CPU time (no version counters, no view tracking). Under autocast they differ by 2 bytes per parameter: under `no_grad`, autocast caches the 16-bit copy of every weight until the autocast region ends (its heuristic caches casts of leaves that require grad), while under `inference_mode` it casts each weight at each use and frees the copy: 235.8 MiB for GPT-2 124M, printed above. So for inference, prefer `torch.inference_mode()`.
#
# The two leaks of the PyTorch FAQ ("My model reports *cuda runtime error(2): out of memory*") are loops that keep something they should not. `loop_memory` runs four iterations of each loop on ResNet18 at batch 32 and reports the bytes still allocated after each:

# %%
grow = {}
for loop in LOOPS:
    after = loop_memory(loop, "resnet18", 32, steps=4, device="simulated")
    grow[loop] = [b - a for a, b in zip(after, after[1:])]
    print(f"{loop:<38} " + "  ".join(f"{fmt_bytes(b):>10}" for b in after))
assert grow["eval, total_loss += loss"] == [grow["eval, total_loss += loss"][0]] * 3 and grow["eval, total_loss += loss"][0] > 600 * MiB
assert all(g == [0, 0, 0] for name, g in grow.items() if name != "eval, total_loss += loss")
print(f"the leaking loop grows by {fmt_bytes(grow['eval, total_loss += loss'][0])} per batch")

# %% [markdown]
# - **Evaluation without `torch.no_grad()`, summing the loss tensor**: every batch's graph, with all its saved activations, stays reachable from `total_loss`, and memory grows by 677.0 MiB per batch until the GPU is full. With `.detach()` (or `.item()`, which also moves the number to the host) each graph is freed with its batch; under `torch.no_grad()` none is built.
# - **Training, `total_loss += loss`**: the FAQ's example. On the GPU nothing grows here: `backward()` has already freed the saved tensors of each graph. What grows is the graph's *nodes*, in host memory, one graph per step, and the time autograd takes to walk them if anything ever calls backward on `total_loss`. Write `total_loss += loss.item()` or `loss.detach()`.
#
# ## 8. Will it fit?
#
# All of the above in one tool: the model (a GPT-2 preset, a torchvision classifier, or a bare parameter count), the optimizer, the precision, the batch size, the sequence length or image size, and the GPU (with the memory PyTorch sees on each card, lesson 01). It shows the peak of a steady-state step by category and the verdict, with an assumed 1 GiB for the CUDA context and workspaces. For a bare parameter count it shows the model states alone, from the formulas of section 1: activations depend on the architecture.
#
# The same figures first as text, for GPT-2 124M at batch 8 and sequence 1024 with Adam and float16 AMP on an A100 40 GB:

# %%
fit = WillItFit(model="gpt2", batch_size=8, optimizer="adam", precision="AMP float16", capacity="A100 40 GB",
                device="simulated")
print(fit.summary())
assert fit.message.startswith("fits in A100 40 GB")

# %%
fit

# %% [markdown]
# Driven from code, as a learner would with the mouse: GPT-2 1.5B's model states alone, as a parameter count, on a 24 GB card and on an A100 40 GB:

# %%
fit.model.value = PARAMETER_COUNT
fit.parameters.value = P15
fit.capacity.value = "RTX 4090 24 GB"
print(fit.message)
assert fit.message.startswith("does not fit")
fit.capacity.value = "A100 40 GB"
print(fit.message)
assert fit.message.startswith("fits") and fit.result.peak_bytes == 20 * P15

# %% [markdown]
# 20 bytes per parameter at the `foreach` step: 31.2 GB of model states, which fit an A100 40 GB before any activation. Add the activations of section 5 and GPT-2 1.5B trains on one such GPU only at small batches, with checkpointing, or with the model states sharded over several GPUs (ZeRO, lesson 07).
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
# Each prediction keeps its whole graph, and with it every activation the batch saved: 677.0 MiB per batch of 32 (as the evaluation leak of section 7). `.detach()` keeps only the 125 KiB of logits; better still, run evaluation under `torch.inference_mode()` and build no graph at all.
# </details>
#
# ## Key points
#
# - Model states per parameter: parameter 4 + gradient 4 + optimizer state (SGD 0, momentum 4, Adam and AdamW 8) bytes in float32; Adam's `foreach` step adds 4 bytes for its duration (20 at its peak), `fused=True` none. `zero_grad(set_to_none=True)` frees the gradients between steps.
# - "16 bytes per parameter" is two different things: fp32 Adam's 4 + 4 + 8, which `torch.autocast` training also needs, and ZeRO's 16-bit 2 + 2 + 12. 18 counts autocast's transient weight copies as permanent; 20 adds fp32 gradient accumulation to a bf16 model. Ask which loop a figure describes.
# - The peak is at the optimizer step for small batches and in backward for large ones; find the crossover by measuring. The step in backward (`register_post_accumulate_grad_hook`) removes almost all gradients from the peak: ViT-L/16 at batch 1 from 6.1 to 4.0 GB.
# - GPT-2 1.5B: 24.9 GB of model states at 16 bytes per parameter; activations at sequence 1024 and batch 32 are 94 GB under `torch.autocast` with flash attention, not the paper's 60, because PyTorch keeps 36 bytes per token, hidden unit and layer (a float32 residual stream, the MLP's wide tensors) and 16-bit weight copies.
# - Gradient accumulation gives the same gradient at the memory of a micro-batch plus the gradients; inference under `torch.inference_mode()` keeps no activations (and, under autocast, no cache of weight copies); a loop that holds a loss or an output with its graph grows by a whole batch of activations per iteration.
#
# ## Further reading
#
# - S. Rajbhandari, J. Rasley, O. Ruwase, Y. He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054, section 3.
# - V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022, arXiv:2205.05198.
# - PyTorch tutorials: *How to save memory by fusing the optimizer step into the backward pass*; PyTorch FAQ, *My model reports "cuda runtime error(2): out of memory"*; `torch.optim` documentation (foreach and fused implementations).
# - Hugging Face, *Model training anatomy* and *The Ultra-Scale Playbook* (2025); S. Bekman, *Machine Learning Engineering*, chapter on model memory.
