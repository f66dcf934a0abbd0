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
# # 05b · GPT-2 1.5B, gradient accumulation, inference and leaks: will it fit?
#
# **Questions**
# - Why does PyTorch keep more activations for GPT-2 1.5B than the ZeRO paper says?
# - How does gradient accumulation train a batch that does not fit, and when is it not the same step?
# - Why does a model that trains at batch 32 run out of memory in evaluation?
# - Will my model train on this GPU?
#
# **Objectives**
# - Compare the ZeRO paper's figures for GPT-2 1.5B (model states, activations, checkpointed activations) with what PyTorch keeps, and say where each of the paper's figures comes from.
# - Use gradient accumulation, checked exact for a per-sample mean, and average a per-token loss correctly.
# - Measure what a forward pass keeps in training and under `torch.no_grad()` and `torch.inference_mode()`, and find and fix the two classic leaks.
# - Answer "will it fit?" for a model, an optimizer, a precision, a batch and a card.
#
# **Time:** about 60 minutes alone: 22 of reading, 17 of code, 3 for the figures, 1 to run all, 20 for the two exercises. **GPU:** not needed (memory simulated: nothing is downloaded, nothing of GPT-2 1.5B is allocated). Memory is in GiB (2³⁰ bytes); a source's GB (10⁹ bytes) is converted beside it.
#
# Lessons 01 (steady state, the assumed overhead), 04 (AMP, checkpointing) and 05a come first. What this lesson uses from 05a: under `torch.autocast` with Adam, the model states are 16 bytes per parameter (4 of parameter, 4 of gradient, 8 of Adam's two moments), and 20 while a `foreach` `optimizer.step()` runs; the ZeRO paper's 16 is another sum, 2 + 2 + 12 (a 16-bit model and an fp32 master copy). A step peaks at the optimizer step for small batches and in backward, where the activations are, for large ones.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import dataclasses

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn

from helpers import GPU_CARDS, GiB, Meter, MiB, fits, fmt_bytes, profile_step
from helpers.loops import LOOPS, forward_peak, loop_memory
from helpers.models import digits_mlp
from helpers.models.gpt import GPT, GPT2_PRESETS
from helpers.palette import CATEGORY_COLORS
from helpers.teaching.data import load_digits
from helpers.teaching.plots import plot_accumulation, plot_inference_and_leaks
from helpers.teaching.widgets import PARAMETER_COUNT, WillItFit
from helpers.transformer import measure_blocks

_ = torch.manual_seed(0)


def gib(nbytes):
    """Bytes as GiB with two decimals, the unit of this lesson."""
    return f"{nbytes / GiB:.2f} GiB"


# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. The ZeRO paper's GPT-2 1.5B
#
# Section 3 of the ZeRO paper (Rajbhandari et al., SC20) explains where training memory goes with one example: GPT-2 with 1.5 billion parameters. Its model states, at 16 bytes per parameter, are 24 GB (22.4 GiB); its activations at sequence length 1K and batch 32 are "about 60 GB" (55.9 GiB), and "about 8 GB" (7.5 GiB) with activation checkpointing. Its footnote counts the activations as about 12 × hidden × batch × sequence × layers, with no unit: at 2 bytes each, that is its 60 GB. The engine's `gpt2-xl` has GPT-2 1.5B's sizes (48 layers, 1600 wide, 25 heads, 50,257 tokens): nothing is downloaded, and its steps are counted, not allocated. Run the paper's configuration under `torch.autocast` with the flash attention kernel that a recent GPU runs, without and with checkpointing of every block (the engine checkpoints GPT-2 as its 50 units: embeddings, 48 blocks, head):

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
block_weights = L * 12 * H * H           # the four Linear weights of each block: 12·h² values
assert abs(copies - 2 * block_weights) < 0.001 * copies   # 2 bytes per weight (and the biases: 30 KB a block)
kept_ckpt = ckpt_end["activations"] + copies
assert [round(b / GiB, 1) for b in (xl.model_state_bytes, at_end["activations"], kept_ckpt)] == [23.2, 87.7, 12.6]


def outside_blocks(p):
    """The activations kept at the end of the forward pass that no block made: before block 0, after the last."""
    end = p.find("", "fwd")
    made = (p.kept_between(p.events[0], p.find("blocks.0", "pre"), until=end)
            + p.kept_between(p.find(f"blocks.{L - 1}", "fwd"), end))
    return sum(st.nbytes for st in made if st.category == "activations")


outside, outside_ckpt = outside_blocks(xl), outside_blocks(ckpt)
hidden = B * S * H
assert abs(outside - (4 * hidden + 2 * vocab * H + 2 * hidden)) < MiB   # embeddings' float32 output; the head's
assert abs(outside_ckpt - outside) < MiB                                # 16-bit weight and input; ln_f's statistics
print(f"activations at the end of forward: {gib(at_end['activations'])} = {gib(at_end['activations'] - outside)} "
      f"in the 48 blocks + {gib(outside)} outside them")
print(f"checkpointed: {gib(kept_ckpt)} = {gib(kept_ckpt - outside_ckpt)} in the blocks "
      f"(float32 inputs {gib(inputs_fp32)}, 16-bit weight copies {gib(copies)}) + {gib(outside_ckpt)} outside them")
zero_acts = 12 * 2 * B * S * H * L       # the paper's footnote: about 12 values (2 bytes each) per s·b·h and layer
zero_ckpt = zero_acts / L**0.5           # one reading of "the square root of the total activations"
chen = zero_ckpt + L**0.5 * 2 * B * S * H   # Chen et al.'s schedule adds its sqrt(L) segment inputs
assert round(zero_acts / 1e9, 1) == 60.4 and round(zero_ckpt / 1e9, 1) == 8.7 and round(zero_ckpt / GiB, 1) == 8.1
assert round(chen / 1e9, 1) == 9.4

paper = {"model states": 24e9, "activations": 60e9, "activations, checkpointed": 8e9}
engine = {"model states": xl.model_state_bytes, "activations": at_end["activations"],
          "activations, checkpointed": kept_ckpt}
colours = {"model states": CATEGORY_COLORS["optimizer_states"], "activations": CATEGORY_COLORS["activations"],
           "activations, checkpointed": CATEGORY_COLORS["activations"]}
fig = Figure(figsize=(8, 3.4), layout="constrained")
ax = fig.add_subplot()
for row, kind in enumerate(paper):
    for offset, (source, value) in zip((-0.2, 0.2), (("ZeRO paper", paper[kind]), ("PyTorch (simulated)", engine[kind]))):
        ax.barh(row + offset, value / GiB, height=0.38, color=colours[kind], alpha=0.45 if source == "ZeRO paper" else 1,
                hatch="//" if source == "ZeRO paper" else None, edgecolor="white")
        ax.text(value / GiB + 1, row + offset, f"{source}: {value / GiB:.1f}", va="center", fontsize=8)
ax.set_yticks(range(len(paper)), list(paper))
ax.invert_yaxis()
ax.set(xlabel="GiB", xlim=(0, 118), title="GPT-2 1.5B, sequence 1024, batch 32, float16 autocast, Adam")
fig

# %% [markdown]
# Look at the pairs: the model states agree (16 bytes per parameter, 23.2 GiB for GPT-2's exact 1.56 billion parameters; the paper rounds to 1.5 billion), though they are autocast's 4 + 4 + 8, not the paper's 2 + 2 + 12. The activations do not: 87.7 GiB against the paper's 55.9, and 12.6 GiB against 7.5 checkpointed. (Activations here: all that the forward pass keeps beyond the parameters, the states and the logits, autocast's 16-bit weight copies included. The cell splits them: 87.3 GiB in the 48 blocks, which lesson 08 measures block by block, and 0.4 GiB outside them, the embeddings' float32 output, the head's 16-bit copies of its tied weight and of its input, and the final LayerNorm's statistics.)
#
# Why more? The paper's "12 values" is a formula about a set of tensors; PyTorch keeps others. One block, measured on its own (`measure_blocks`, the helper lesson 08 uses to take a block apart tensor by tensor):

# %%
two_blocks = dataclasses.replace(GPT2_PRESETS["gpt2-xl"], n_layer=2)   # every block keeps the same
block = measure_blocks(lambda: GPT(two_blocks), B, S, amp=True, attention="flash")[1]  # the second block
per_token = block / (B * S * H)
print(f"one block keeps {gib(block)}: {per_token:.1f} bytes per token and hidden unit, against the paper's 12 x 2 = 24")
assert 37.0 < per_token < 37.5 and abs(L * block - at_end["activations"]) < 0.02 * at_end["activations"]

# %% [markdown]
# About 37 bytes per token, hidden unit and layer instead of 24, and 48 blocks of them make the 87.3 GiB of the blocks. Lesson 08 names every tensor; in short, `torch.autocast` keeps the residual stream and each LayerNorm's input in float32 (the parameters are float32, so every residual addition is), the MLP keeps its 4 × wide input and output, attention its q, k, v and output, and autocast a 16-bit copy of each weight (about 1.2 of the 37 bytes). Flash attention keeps no sequence × sequence scores, and this GPT has no dropout masks.
#
# And checkpointed? ZeRO's section 3.2 says where its 8 GB comes from: activation checkpointing reduces the activation memory "by approximately the square root of the total activations" at the expense of 33% recomputation, citing Chen et al. (2016). The square root is in the number of layers: Chen et al. cut L layers into about √L segments and keep only the segments' inputs, plus one segment's activations while backward recomputes it, so memory grows as √L instead of L. Read as "the total divided by √L", the footnote's formula (60.4 GB here) gives 60.4 GB / √48 = 8.7 GB (8.1 GiB), its "about 8 GB". That is a reading, not the paper's arithmetic, and it leaves out the segment inputs: Chen et al.'s schedule keeps one hidden state per segment besides, √48 ≈ 7 of 2 bytes × 32 × 1024 × 1600, which makes 9.4 GB (asserted in the cell). Either way it is a formula, not a count of tensors. Checkpointing every block, as here, is another schedule: it keeps each block's input, 48 float32 tensors of 32 × 1024 × 1600 values: 9.4 GiB (4.7 GiB if they were 16-bit). Autocast's cache keeps its 16-bit weight copies until the autocast region ends, checkpointed or not: 2.7 GiB more, 12.1 GiB in the blocks, and the same 0.4 GiB outside them make the 12.6. Backward then recomputes one block at a time.
#
# Besides, the logits: 32 × 1024 × 50,257 values. The loss keeps two more copies for backward: their log-softmax in float16 and the float32 copy that autocast makes of it for `nll_loss` (on the float32 list). A bare `F.log_softmax` would run in float32 under autocast, but `cross_entropy`, in none of CUDA's autocast lists, calls `log_softmax` with its input's dtype named, and autocast keeps a dtype that a call names. Backward starts with the float32 gradient of that copy, which is what "other" holds at the step's peak:

# %%
print(f"'other' at the peak: {gib(xl.categories['other'])}; a float32 tensor the size of the logits: {gib(B * S * vocab * 4)}")
assert abs(xl.categories["other"] - B * S * vocab * 4) < 0.01e9

# %% [markdown]
# The lesson to keep: a published activation figure is a formula about some set of tensors; the engine counts every tensor your PyTorch code keeps.
#
# ## 2. Gradient accumulation
#
# When the batch you want does not fit, split it: run k micro-batches, each with its loss divided by k, add up their gradients in `.grad`, and step once. Memory is that of one micro-batch, plus the gradients that now live across the micro-batches:

# %%
full = profile_step("resnet18", 128, optimizer="adam", steady_state=True, device="simulated")
split = {k: profile_step("resnet18", 128 // k, optimizer="adam", steady_state=True, accumulation_steps=k,
                         device="simulated") for k in (2, 4, 8, 16)}    # k micro-batches of 128 / k
accumulated = split[4]
micro = profile_step("resnet18", 32, optimizer="adam", steady_state=True, device="simulated")
print(f"ResNet18, peak: batch 128 at once {gib(full.peak_allocated_bytes)}; 4 micro-batches of 32 "
      f"{gib(accumulated.peak_allocated_bytes)}; one batch of 32 {gib(micro.peak_allocated_bytes)}")
assert accumulated.peak_allocated_bytes < full.peak_allocated_bytes / 3
assert accumulated.peak_allocated_bytes > micro.peak_allocated_bytes
acts, states = full.categories["activations"], lambda p: p.categories["parameters"] + p.categories["optimizer_states"]
for k, p in split.items():
    assert abs(k * p.categories["activations"] - acts) < 0.02 * acts      # activations: 1 / k of the batch's
    assert states(p) == states(full)                                     # parameters and Adam's states: the same
    assert 2 * p.categories["gradients"] == p.categories["optimizer_states"]   # every gradient (as one moment)

# %%
plot_accumulation([full, *split.values()], ["1 × 128", *(f"{k} × {128 // k}" for k in split)],
                  title="ResNet18 with Adam: one batch of 128, or k micro-batches of 128 / k accumulated")

# %% [markdown]
# Look at the green: the activations halve each time the micro-batch does, while the parameters (blue) and Adam's states (purple) stay, and from two micro-batches on every gradient (orange) is allocated at the peak. So each halving saves less than the one before: accumulation shrinks the activations, never the model states, which for a large model soon make most of the peak (sharding them is lesson 07).

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
# The same gradient. (With BatchNorm, each micro-batch normalises with its own statistics, so the step is not exactly the same; LayerNorm and RMSNorm normalise each sample on its own and make no such difference.)
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
# The mean of means is another gradient (each of the first micro-batch's 8 tokens counts 7 times as much as one of the other 56). The fix: sum the per-token losses (`reduction="sum"`) and divide by the number of real tokens in the whole accumulated batch, counted before the first backward.
#
# **Under data parallelism**, count the real tokens of all ranks, and mind the all-reduce: `DistributedDataParallel` (and FSDP) *average* the ranks' gradients, which divides them by the number of ranks N once more. So each rank multiplies its loss by N, as Hugging Face's `Trainer` does (`average_tokens_across_devices`, in `Trainer.compute_loss`). The same two micro-batches on two ranks, one each:

# %%
def rank_gradient(f, t, scale):
    """One rank's gradient of its summed loss over all ranks' tokens, times `scale`."""
    head.zero_grad()
    (F.cross_entropy(head(f), t, reduction="sum") / n_tokens * scale).backward()
    return torch.cat([p.grad.flatten() for p in head.parameters()])


world = 2
averaged = {scale: sum(rank_gradient(f, t, scale) for f, t in zip(features, targets)) / world  # the all-reduce's mean
            for scale in (1, world)}
print(f"two ranks, sum / all ranks' tokens, averaged by the all-reduce: off by {error(averaged[1]):.0%}; "
      f"with each loss times {world}: off by {error(averaged[world]):.0%}")
assert abs(error(averaged[1]) - (1 - 1 / world)) < 1e-12 and error(averaged[world]) < 1e-12

# %% [markdown]
# Divided by all the tokens and averaged again, the gradient is half what it should be (1/N of it on N ranks): the step is as if the learning rate were N times smaller. Times N, it is the whole batch's.
#
# ## 3. Training, inference, and two classic leaks
#
# A forward pass with autograd recording keeps what backward will need; under `torch.no_grad()` or `torch.inference_mode()` it keeps nothing, and each activation is freed as soon as the next layer has used it. The peak of one forward pass and its loss, parameters included:

# %%
P124 = GPT2_PRESETS["gpt2"].parameter_count()
runs = {"ResNet18\nbatch 128": dict(model="resnet18", batch_size=128),
        "GPT-2 124M\nbatch 8 × 1024 tokens": dict(model="gpt2", batch_size=8, seq_len=1024),
        "GPT-2 124M, 8 × 1024\nfloat16 autocast": dict(model="gpt2", batch_size=8, seq_len=1024, amp=True)}
modes = {"training": "enabled", "torch.no_grad()": "no_grad", "torch.inference_mode()": "inference_mode"}
fwd = {run: {label: forward_peak(**kw, grad_mode=mode, device="simulated") for label, mode in modes.items()}
       for run, kw in runs.items()}
resnet, gpt, gpt_amp = fwd.values()
assert all(r["torch.no_grad()"] == r["torch.inference_mode()"] for r in (resnet, gpt))   # float32: the same
assert resnet["training"] > 3 * resnet["torch.no_grad()"] and gpt["training"] > 2 * gpt["torch.no_grad()"]
weight_cache = gpt_amp["torch.no_grad()"] - gpt_amp["torch.inference_mode()"]
assert abs(weight_cache - 2 * P124) < 0.05 * 2 * P124

# %% [markdown]
# The two leaks of the PyTorch FAQ ("My model reports *cuda runtime error(2): out of memory*") are loops that keep something they should not. `loop_memory` runs four iterations of each loop on ResNet18 at batch 32 and reports the bytes still allocated after each:

# %%
after = {loop: loop_memory(loop, "resnet18", 32, steps=4, device="simulated") for loop in LOOPS}
grow = {loop: [b - a for a, b in zip(a, a[1:])] for loop, a in after.items()}
leak = grow["eval, total_loss += loss"][0]
assert grow["eval, total_loss += loss"] == [leak] * 3 and round(leak / GiB, 2) == 0.66
assert all(g == [0, 0, 0] for name, g in grow.items() if name != "eval, total_loss += loss")

# %%
plot_inference_and_leaks(fwd, after, title="Training vs inference, and loops that keep what they should not")

# %% [markdown]
# Look at the left panel first: without autograd recording, a forward pass needs a third of its training peak for ResNet18 and less than half for GPT-2, whose inference peak is its logits and their float32 log-softmax. Then at the right panel: one line climbs, the evaluation loop that sums the loss tensor without `torch.no_grad()`, by a whole batch of activations per iteration; the other loops stay flat (two pairs lie on top of each other).
#
# Left: in float32, `no_grad` and `inference_mode` keep the same tensors; `inference_mode` saves CPU time (no version counters, no view tracking). Under autocast (third group) they differ by 2 bytes per parameter: under `no_grad`, autocast caches the 16-bit copy of every weight until the region ends (it caches casts of leaves that require grad); under `inference_mode` it frees each copy after use. That difference is recent: PyTorch stopped caching under `inference_mode` with pull request #165068 (`aten/src/ATen/autocast_mode.cpp`, merged in December 2025); PyTorch 2.9 and earlier cache there too. On a current PyTorch, prefer `torch.inference_mode()` for inference.
#
# Right, the loops:
#
# - **Evaluation without `torch.no_grad()`, summing the loss tensor**: every batch's graph, with its saved activations, stays reachable from `total_loss`: 0.66 GiB more per batch until the GPU is full. With `.detach()` (or `.item()`) each graph is freed with its batch; under `torch.no_grad()` none is built.
# - **Training, `total_loss += loss`**, the FAQ's example: on the GPU nothing grows, as `backward()` has freed each graph's saved tensors; what grows is the graph's *nodes*, in host memory, one graph per step. Write `total_loss += loss.item()`.
#
# ## 4. Will it fit?
#
# All of the above in one tool: the model (a GPT-2 preset, a torchvision classifier, or a bare parameter count), the optimizer, the precision, the batch, the sequence length or image size, and the GPU (the memory PyTorch sees on each card, lesson 01). It shows a steady-state step's peak by category and the verdict, with an assumed overhead for the CUDA context and the card's cuBLAS workspaces (lesson 06). For a bare parameter count it shows the model states alone (lesson 05a's formulas, section 1).
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
# 20 bytes per parameter at the `foreach` step: 29.0 GiB of model states, which fit an A100 40 GB before any activation. Add the activations of section 1 and GPT-2 1.5B trains on one such GPU only at small batches, with checkpointing, or with the model states sharded over several GPUs (ZeRO, lesson 07).
#
# Now the widget itself, opened on section 3's GPT-2 124M at batch 8 and sequence 1024, now training with Adam and float16 AMP, on an A100 40 GB. Its verdict first as text:

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
# **Exercise 1: a leak in your own loop.** This evaluation loop collects predictions. How much does it keep per batch for ResNet18 at batch 32, and what is the one-word fix? Measure it with `Meter` (the model is placed on the fake GPU as `profile_step` does).
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
# Each prediction keeps its whole graph, and with it every activation the batch saved: 0.66 GiB per batch of 32 (as the evaluation leak of section 3). `.detach()` keeps only the 32 × 1000 float32 logits; better still, run evaluation under `torch.inference_mode()` and build no graph at all.
# </details>
#
# **Exercise 2: how large a batch can you evaluate?** GPT-2 124M at sequence 1024 under float16 autocast, on an RTX 4090 24 GB with lesson 01's assumed overhead (`fits`): what is the largest batch whose forward pass and loss fit under `torch.inference_mode()`, and with autograd recording (an evaluation loop that forgot it)? `forward_peak` is affine in the batch (lesson 01's M(b) = M0 + b·m): fit it on two batch sizes, predict, then check the batch you predict and the next one.

# %%
# Your code here: forward_peak("gpt2", b, seq_len=1024, amp=True, grad_mode=..., device="simulated") for b = 1, 2

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# from helpers.gpus import headroom
#
# card = GPU_CARDS["RTX 4090 24 GB"]
# largest = {}
# for mode in ("inference_mode", "enabled"):
#     one, two = (forward_peak("gpt2", b, seq_len=1024, amp=True, grad_mode=mode, device="simulated") for b in (1, 2))
#     per_sample = two - one                                   # m
#     largest[mode] = (headroom(card) - (one - per_sample)) // per_sample   # (room - M0) // m
#     peak = lambda b: forward_peak("gpt2", b, seq_len=1024, amp=True, grad_mode=mode, device="simulated")
#     assert fits(peak(largest[mode]), card) and not fits(peak(largest[mode] + 1), card)
#     print(f"{mode:<15} {fmt_bytes(per_sample)} per sequence: largest batch {largest[mode]}")
# assert largest == {"inference_mode": 58, "enabled": 31}
# ```
#
# Under `torch.inference_mode()` a sequence costs 392.6 MiB (its logits, their log-softmax and its float32 copy), and batch 58 fits; with autograd recording each sequence also keeps its activations, 721.9 MiB, and only batch 31 does. The straight line predicts the largest batch exactly, because the forward pass keeps the same tensors at every batch size.
# </details>
#
# ## Key points
#
# - GPT-2 1.5B: 23.2 GiB of model states at 16 bytes per parameter; activations at sequence 1024 and batch 32 are 87.7 GiB under `torch.autocast` with flash attention, not the paper's 55.9 (60 GB), because PyTorch keeps about 37 bytes per token, hidden unit and layer, not 24; checkpointed, 12.6 GiB (87.3 and 12.1 GiB of them in the 48 blocks). The paper's checkpointed 8 GB reads as 60.4 GB / √48 layers = 8.7 GB; Chen et al.'s schedule, with its segment inputs, keeps 9.4 GB. A published activation figure is a formula about some set of tensors.
# - Gradient accumulation gives the same gradient at the memory of a micro-batch plus the gradients, for equal micro-batches of a per-sample mean; a per-token mean must be summed and divided by the total token count (under data parallelism: all ranks' tokens, and each loss times the number of ranks, since the all-reduce averages).
# - Inference under `torch.inference_mode()` keeps no activations (and, under autocast, since PyTorch's December 2025 change, no cache of weight copies); a loop that holds a loss or an output with its graph grows by a whole batch of activations per iteration.
# - "Will it fit?" is the whole step's peak plus an assumed overhead, against the memory PyTorch sees on the card: GPT-2 1.5B's model states alone need 29.0 GiB at the `foreach` step.
#
# ## Further reading
#
# - S. Rajbhandari, J. Rasley, O. Ruwase, Y. He, *ZeRO: Memory Optimizations Toward Training Trillion Parameter Models*, SC20, arXiv:1910.02054, section 3.
# - V. Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models*, 2022, arXiv:2205.05198.
# - T. Chen, B. Xu, C. Zhang, C. Guestrin, *Training Deep Nets with Sublinear Memory Cost*, 2016, arXiv:1604.06174.
# - PyTorch FAQ, *My model reports "cuda runtime error(2): out of memory"*; `torch.inference_mode` documentation; PyTorch pull request #165068 (autocast's cache under inference mode).
