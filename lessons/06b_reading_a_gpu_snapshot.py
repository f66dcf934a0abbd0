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
# # 06b · A real GPU's memory snapshot, explained
#
# **Questions**
# - What does PyTorch record when you ask it for a memory snapshot, and how do you record one of your own training step?
# - What filled a real GPU's memory at the peak of a step, and why was each tensor there?
# - Where does a simulated step agree with what a GPU did, and where not?
#
# **Objectives**
# - Record a snapshot of one training step, and name what it holds: the allocator's segments and blocks, and a trace of every allocation and free with its stack.
# - Read a snapshot with `explain_snapshot`: the peak, what was live at it by category, reserved memory, the free space in the segments.
# - Put a snapshot beside the same step simulated, and name each difference: cuBLAS workspaces, kernels' own buffers, tensors the stacks cannot name.
# - Explain a snapshot of your own with the widget or `python -m helpers explain`.
#
# **Time:** about 60 minutes alone: 27 of reading, 12 of code, 3 for the figures, 1 to run all, 15 for the two exercises. **GPU:** not needed (the snapshots here were recorded on an NVIDIA H200; on a GPU, section 5 records yours).
#
# Lessons 06 and 06a (segments, blocks, reserved memory, the allocator model's memory map) come first. The step of sections 1 to 4 is lesson 09's: a LoRA fine-tuning step of Llama-3.1 8B. Here it is simply a training step of a large model; lesson 09 explains LoRA.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import collections

import torch

from helpers import MiB, fmt_bytes, profile_step
from helpers.snapshot import explain_snapshot, load_snapshot, where
from helpers.teaching.plots import gpu_only_bytes, plot_gpu_only, plot_memory_map, plot_snapshot
from helpers.teaching.reference import load_reference
from helpers.teaching.widgets import SHIPPED, SnapshotExplorer

# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
print(f"torch {torch.__version__}, GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. What a snapshot holds
#
# PyTorch's caching allocator can keep a history: call `torch.cuda.memory._record_memory_history()` before a step, and `torch.cuda.memory._dump_snapshot("step.pickle")` after it. The file is a pickled dictionary, the one `torch.cuda.memory._snapshot()` returns, and https://pytorch.org/memory_viz draws it in a browser. Here is one that `make gpu-reference` recorded on an H200 (lesson 00): one training step of Llama-3.1 8B with LoRA adapters, batch 1 × 2,048 tokens, recorded from an emptied cache. That machine ran its own PyTorch 2.11.0+cu130, transformers 5.17.0 and peft 0.21.0, not the versions this course pins (`lessons/data/h200_2026-11-26/README.md` says how each of its snapshots was made); every comparison below is between that run and the same step simulated here.

# %%
path = SHIPPED["Llama-3.1 8B, LoRA r16 (H200)"]
snapshot = load_snapshot(path)
trace = snapshot["device_traces"][0]
print(sorted(snapshot))
print(f"{len(snapshot['segments'])} segments at the end; {len(trace):,} trace entries:",
      dict(collections.Counter(e["action"] for e in trace)))
first = next(e for e in trace if e["action"] == "alloc" and e["size"] > MiB)
print({key: first[key] for key in ("action", "addr", "size", "stream")}, f"{len(first['frames'])} frames")

# %% [markdown]
# Two parts. `segments` is the allocator's state when the snapshot was taken: each segment it holds from the driver, cut into blocks, each block allocated or free (lesson 06a's picture, at one moment). `device_traces` is the history: one entry per allocation (`alloc`), per free (`free_requested`, then `free_completed` once no stream still uses the block) and per segment the driver handed over (`segment_alloc`), each with an address, a size, a stream, a time and the Python frames of the call that caused it.
#
# Two facts decide how to read it. An `alloc`'s size is what the tensor *asked* for; the block behind it is at least that, rounded up as lesson 06 showed, so the trace alone gives the tensors' memory, not `memory_allocated()`. And the frames are the stack at the moment of the allocation: which line of which function asked. A block allocated before the recording began has no entry and no stack.
#
# ## 2. The snapshot explained
#
# `explain_snapshot` reads such a file and answers the course's question: the peak of live tensors, where it was reached, what was live then by category, reserved memory, and, from the trace replayed through lesson 06's allocator model, the blocks and the free space at the peak.

# %%
report = explain_snapshot(path)
print("\n".join(report.lines()))
assert round(report.peak_bytes / 2**30, 1) == 27.1 and report.live_at_peak[0].size == 1002 * MiB
assert round(report.by_category["parameters"] / 2**30) == 15 and report.by_category["optimizer_states"] == 52 * MiB

# %% [markdown]
# Every category comes from a stack, by rules a line each (`helpers.snapshot.category_of`): what a model's `_apply` (its `.to("cuda")`) allocated is a parameter, what an optimizer's `_init_group` allocated an optimizer state, what a `forward` allocated an activation, and an allocation with no Python frame at all a gradient if it lives on into `optimizer.step()`. In a plain training loop such an allocation comes from the backward pass: autograd runs it on a thread of its own, where no Python runs unless something asks for it: a `TorchDispatchMode` (this course's tracker is one), a custom `autograd.Function` written in Python (bitsandbytes' `MatMul4Bit`, lesson 09), checkpointing's recomputed forward. Here the recording ran inside this course's own step, under its tracker, so the backward pass's allocations have Python frames too: the tracker's (`helpers/engine/counting.py`) and PyTorch's dispatch to it. The report skips those frames, as if the tracker were not there, and names the frame that asked for the tensor; the rules read what is left of the stack. In your own loop the stacks end in your code. Section 4 names each tensor another way. Which entries of this trace have no Python frame at all?
#
# %%
frameless = collections.Counter(e["action"] for e in trace if not e["frames"])
allocs, frees = (sum(e["action"] == action for e in trace) for action in ("alloc", "free_requested"))
print(f"without a Python frame: {frameless['alloc']} of {allocs:,} allocations, "
      f"{frameless['free_requested']:,} of {frees:,} frees")
assert frameless["alloc"] == 0 and 0 < frameless["free_requested"] < frees
assert report.by_category["gradients"] == 0  # at this peak, before the first gradient is made

# %% [markdown]
# None of the allocations, and about two frees in three. PyTorch records the Python stack of the thread at the moment of each event. Every allocation here happens while Python runs: the model's placement and the optimizer are Python, and every operation of the step runs inside the tracker's `__torch_dispatch__`, on whichever thread runs it; a tensor is freed wherever its last reference goes, often in autograd's C++ code between two operations, when no Python frame is on that thread's stack. So in the raw trace only frees are frameless. Once the report has skipped the tracker's frames, what the backward pass allocated through it has no frame left, as in your own loop: the report's line for the allocation that reached the peak says so. Rule 4 still finds no gradient at this peak, for another reason: the peak comes as the backward pass begins, before the first gradient is made.
#
# The peak is 27.1 GiB, reached as the backward pass begins: a 1,002 MiB tensor, the gradient of the logits (section 4 names it), is made while another 1,002 MiB tensor is still live, the float32 log-softmax that cross-entropy keeps for its backward pass (`log_softmax` saves its output, `derivatives.yaml`). The float32 copy of the logits it was computed from, as large, was freed when the loss returned (lesson 08b). The replay gives `max_memory_allocated()`. Is it what the H200 itself reported? The course's record of that run keeps the step's own peak: `max_memory_allocated()` less what was allocated before the step began.

# %%
reference = load_reference()
(run,) = [r for r in reference["runs"] if r["config"] == "LoRA r16"]
before = report.by_category["before_recording"]
assert before == 2 * 32 * MiB  # two cuBLAS workspaces, made before the recording (section 4)
assert max(report.allocated) - before == run["cuda_peak_bytes"]
print(f"the step's peak on the H200: {run['cuda_peak_bytes']:,} bytes; from the snapshot's replay, less the "
      f"{fmt_bytes(before)} allocated before it: {max(report.allocated) - before:,} bytes")

# %% [markdown]
# To the byte: the trace, replayed through the model of `CUDACachingAllocator.cpp`, gives the number the GPU's allocator counted. Now the step over time: each category stacked, reserved memory dashed, and at the right what was live at the peak.

# %%
plot_snapshot(report, title="Llama-3.1 8B, LoRA r16, batch 1 x 2,048 tokens, on an H200 (recorded)")

# %% [markdown]
# Look at it from left to right. The parameters (blue) arrive first, 15 GiB of bfloat16 weights, and stay. A first step follows: the forward pass stacks activations (green) until the loss, the backward pass frees them layer by layer. Then the measured step does the same once more, on top of the optimizer's states (52 MiB, too thin to see at this scale: only the adapters train). Reserved memory climbs in steps during the first forward pass and then hardly moves: the second step finds nearly every block it needs in the cache, as lesson 06 predicted (section 4 counts what it adds).
#
# ## 3. Segments and free space at the peak
#
# The same trace, drawn as lesson 06a drew the allocator model's: each segment a band of addresses, each block a bar in its category's colour, free but reserved memory light grey.

# %%
plot_memory_map(*report.memory_map(), segments=report.segments,
                title="Llama-3.1 8B LoRA on an H200: segments and blocks over the recording")

# %% [markdown]
# Look at the lower left: the first step's activations (green) fill segment after segment, and its backward pass leaves them free (grey). Some of the optimizer's states (reddish purple), made by the first `optimizer.step()`, land in those segments and stay there, as lesson 06a's momentum buffers did. At the peak, 509 segments hold 785 MiB that no tensor uses, and the largest free block is 502 MiB. A 600 MiB tensor made at that moment would not fit in any of them: the allocator would ask the driver for a new segment, with 785 MiB free in the cache. That is lesson 06a's fragmentation, on a real GPU.

# %%
assert (report.segments_at_peak, report.largest_free // MiB) == (509, 502)
assert report.free_in_segments == report.reserved[report.peak] - report.allocated[report.peak]
print(f"at the peak: {fmt_bytes(report.free_in_segments)} free in {report.segments_at_peak} segments, "
      f"the largest free block {fmt_bytes(report.largest_free)}")

# %% [markdown]
# ## 4. Beside the same step, simulated
#
# This course can name every tensor of a step it simulates: its category and the module that made it. Give `explain_snapshot` the same step simulated, and it aligns the two lists of allocations (same order, same sizes once rounded to 512 bytes), labels each allocation of the GPU's with its simulated twin's category and moment, and lists what differs.

# %%
simulated = profile_step("meta-llama/Llama-3.1-8B", 1, seq_len=2048, lora_rank=16, param_dtype="bfloat16", amp=True,
                         amp_dtype="bfloat16", optimizer="adamw", steady_state=True, device="simulated")
beside = explain_snapshot(path, step=simulated)
twin = beside.twin
print("\n".join(twin.lines()))

# %% [markdown]
# The categories at the peak now come from the simulation, and they agree with it: the parameters, optimizer states and temporaries to the byte, the activations to 32 KiB (below). The GPU's peak is the simulated one plus the 64 MiB made before the recording, two cuBLAS workspaces, one per thread that multiplies matrices (lesson 06), which the harness makes before each run; and those 32 KiB: 1 KiB per attention layer, two 8-byte tensors (a 512-byte block each) that the simulation leaves out.

# %%
gpu, sim = twin.categories_gpu, simulated.categories
(peak_block,) = [b for b in beside.live_at_peak if b.allocated == beside.peak]
print(f"the allocation that reached the peak: {fmt_bytes(peak_block.size)}, in the simulated step just before the "
      f"{peak_block.moment}")
large = sorted(((simulated.storages[k].nbytes, str(simulated.storages[k].dtype).removeprefix("torch."),
                 simulated.storages[k].category) for k in simulated.peak_serials
                if simulated.storages[k].nbytes > 400 * MiB and simulated.storages[k].category != "parameters"),
               reverse=True)
print("live at the simulated peak, besides the weights:", "; ".join(f"{fmt_bytes(n)} {d} ({c})" for n, d, c in large))
added = beside.reserved[-1] - beside.reserved[twin.measured]
opened = sum(e["action"] == "segment_alloc" for e in trace[twin.measured:])
print(f"the measured step added {opened} segment{'s' * (opened != 1)} to the cache, {fmt_bytes(added)}")
assert peak_block.moment == "backward of Linear 'base_model.model.lm_head'" and peak_block.size == 1002 * MiB
assert [(n, d) for n, d, c in large if c == "activations" and d == "float32"] == [(1002 * MiB, "float32")]
assert added < 0.002 * beside.reserved[-1]
assert gpu["parameters"] == sim["parameters"]
assert all(gpu[c] == sim[c] for c in ("optimizer_states", "other")) and gpu["activations"] - sim["activations"] == 32 * 1024
assert twin.peak_gpu - simulated.peak_allocated_bytes - gpu["before_recording"] == 32 * 1024

# %% [markdown]
# The allocation that set the peak is the logits' gradient, in float32 (2,048 tokens × 128,256 vocabulary entries × 4 bytes), made by the backward of the loss just before the head's backward. One float32 tensor of that size is live among the activations, not two: cross-entropy's saved log-softmax; the float32 copy of the logits it came from was not kept. And the measured step hardly grew the cache: every tensor of the second step found a block the first had left.
#
# Now the 8-byte tensors. Whose are they? The trace says, in the order in which each attention call allocates:

# %%
def size(n):
    return f"{n:,} B" if n < 1024 else f"{n // 1024:,} KiB" if n < MiB else f"{n / MiB:.2f} MiB"


step = trace[twin.measured:]  # the measured step
calls = [i for i, e in enumerate(step)
         if e["action"] == "alloc" and any(f["name"] == "sdpa_attention_forward" for f in e["frames"])]
per_call = {tuple(step[i]["size"] for i in calls[k:k + 5]) for k in range(0, len(calls), 5)}  # five per call
first = [step[i] for i in calls[:5]]
given_back = step[calls[4] + 1]["action"] == "free_requested" and step[calls[4] + 1]["addr"] == first[4]["addr"]
print(f"forward, each of {len(calls) // 5} attention calls:", ", ".join(size(e["size"]) for e in first),
      "(given back at once)" if given_back else "")
workspaces = [i for i, e in enumerate(step) if e["action"] == "alloc" and e["size"] == 67_371_264]
before_it = [[e["size"] for e in step[:i] if e["action"] == "alloc"][-3:] for i in workspaces]
freed_next = all(step[i + 1]["action"] == "free_requested" and step[i + 1]["addr"] == step[i]["addr"] for i in workspaces)
print(f"backward, in each of {len(workspaces)} layers:", ", ".join(size(n) for n in before_it[0]),
      f"then {size(step[workspaces[0]]['size'])}, given back at the next entry" if freed_next else "")
assert per_call == {(8, 8, 16 * MiB, 256 * 1024, 256)} and len(calls) == 5 * 32 and given_back
assert len(workspaces) == 32 and freed_next and all(b == [16 * MiB, 4 * MiB, 4 * MiB] for b in before_it)

# %% [markdown]
# Two 8-byte tensors first, then the output (2,048 tokens × 32 heads × 128 values × 2 bytes: 16 MiB), then one float32 per head and token (256 KiB), then 256 bytes taken and given back within the call. That is the order of **cuDNN attention**, not of FlashAttention. On a Hopper GPU with a cuDNN newer than 9.15 (the recording's PyTorch loaded 9.19), PyTorch's dispatcher tries cuDNN's attention kernel before FlashAttention (`check_prefer_cudnn_attention` and `priority_order` in `aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`; `TORCH_CUDNN_SDPA_DEPRIORITIZED=1` turns that off). Its forward (`_cudnn_attention_forward` in `attention.cu`) makes its dropout seed and offset as two 8-byte CUDA tensors before anything else, whatever the dropout, and `run_cudnn_SDP_fprop` (`aten/src/ATen/native/cudnn/MHA.cpp`) then makes the output, the float32 softmax statistics and a workspace. FlashAttention's forward (`mha_fwd` in `flash_attn/flash_api.cpp`) makes the output and the statistics first and its random state after them: on the CPU when dropout is 0 in older releases, and in 2.14.1 as a 16-byte and an 8-byte tensor (its meta function in `torch/_meta_registrations.py`), never as two 8-byte tensors ahead of the output. The simulation keeps what either kernel keeps for backward (they keep the same tensors) and leaves their random state out.
#
# The backward pass agrees. In each of the 32 layers the GPU makes the gradients of the query, key and value (16, 4 and 4 MiB: Llama-3.1 8B's keys and values have 8 heads, its queries 32) and then one 64.25 MiB block that lives only inside the call: cuDNN's backward workspace, most likely. FlashAttention's backward would instead make separate tensors: a float32 accumulator for the query's gradient, one float32 per row, and, with fewer key heads than query heads, 16-bit key and value gradients at the full 32 heads, summed afterwards:

# %%
heads, kv_heads, head_dim, tokens = 32, 8, 128, 2048  # Llama-3.1 8B's attention, one sequence of 2,048 tokens
flash_buffers = {"float32 query-gradient accumulator": tokens * heads * head_dim * 4, "float32 row sums": heads * tokens * 4,
                 "key and value gradients at 32 heads": 2 * tokens * heads * head_dim * 2}
block = step[workspaces[0]]["size"]
print(" + ".join(f"{name} {size(n)}" for name, n in flash_buffers.items()),
      f"= {sum(flash_buffers.values()):,} bytes; the GPU's block: {block:,} bytes")
assert block - sum(flash_buffers.values()) == 256

# %% [markdown]
# The same bytes in one block, 256 bytes more (room to align its parts, most likely): cuDNN's workspace most likely holds the same three things. The snapshot's Python stacks cannot prove it (C++ stacks, `_record_memory_history(stacks="all")`, would name the function that asked), so take it as the likeliest reading, not a fact. Over the whole recording, what the GPU held and the simulated step did not:

# %%
plot_gpu_only(beside, title="Llama-3.1 8B LoRA on an H200: what the GPU held beyond the simulated step")

# %% [markdown]
# Look at the orange spikes: one per decoder layer as each step's backward pass goes down the model, 32 in the first step and 32 in the measured one, each a 64.25 MiB block held for one call. Below them, the vermillion band is the 64 MiB of cuBLAS workspaces made before the recording. The 8-byte tensors and the 256-byte forward workspaces are there too, far too small to see. Nothing else: every other allocation of the GPU's trace has a simulated twin, or a simulated tensor of its size that the alignment left unpaired too (`gpu_only_bytes` counts neither).

# %%
before, during = gpu_only_bytes(beside)
assert 67_371_264 <= max(during) < 67_371_264 + 1024 and max(before) == 64 * MiB  # a workspace, and a few bytes
extra = [b for b in twin.extra if b.size == 67_371_264]
tiny = [b for b in twin.extra if b.size == 8 and b.allocated >= twin.measured]
print(f"only on the GPU: {len(extra)} blocks of {extra[0].size / MiB:.2f} MiB (two steps), "
      f"{len(tiny)} tensors of 8 bytes in the measured step")
assert len(extra) == 64 and all(b.freed == b.allocated + 1 for b in extra) and len(tiny) == 2 * 32

# %% [markdown]
# A workspace that lives for one call never sets the peak here: the peak comes as the backward pass begins, before any layer's attention runs backward. It can still cost reserved memory where it finds no free block, and it is memory the margin on a fuller card must leave. The Python stacks of a snapshot could not name its kernel; C++ stacks can (`_record_memory_history(stacks="all")`), as in this snapshot of lesson 02's dropout MLP, also recorded on the H200:

# %%
mlp = explain_snapshot(SHIPPED["dropout MLP, C++ stacks (H200)"])
largest = mlp.live_at_peak[0]
print(f"{fmt_bytes(largest.size)} at the peak, allocated at {where(largest.frames)}")
assert largest.size == 32 * MiB and "gpu_reduce_kernel" in where(largest.frames)
(mlp_run,) = [r for r in reference["runs"] if r["config"] == "steady state"]
under = mlp_run["cuda_peak_bytes"] - mlp_run["simulated_peak_bytes"]
print(f"the H200's max_memory_allocated() is {under / MiB:.1f} MiB above the simulated peak")
assert round(under / MiB, 1) == 15.8

# %% [markdown]
# The innermost C++ frames name the kernel: `gpu_reduce_kernel`, called by `sum` in the backward pass (a bias's gradient, summed over the batch of 4,096). CUDA's reductions stage their partial sums in a buffer they take from the caching allocator for the length of the kernel, and at this step's peak it is 32 MiB. The simulation does not model it. The course's record of this step is 15.8 MiB above the simulated peak, but that is another run on the same H200 and the highest `max_memory_allocated()` of its whole step, not this snapshot's moment: the 32 MiB here is no part of those 15.8 MiB. Both say the same thing, that a GPU's kernels take memory no tensor holds; the snapshot says which kernel and when. The kind of difference a snapshot finds and a formula never will.
#
# ## 5. Your own snapshot
#
# On a GPU, record one step of your loop: after a first step (so that the optimizer's states exist), empty the cache, record, run the step, dump. The next cell does it for a small model; without a GPU it says so. Its output is not checked (it depends on the GPU).

# %% tags=["nbval-ignore-output"] nbval_reason="runs only on a GPU, whose figures depend on the card"
if torch.cuda.is_available():
    net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).cuda()
    optimizer = torch.optim.AdamW(net.parameters())

    def train_step():
        x, y = torch.randn(512, 1024, device="cuda"), torch.randint(0, 10, (512,), device="cuda")
        torch.nn.functional.cross_entropy(net(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    train_step()
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=200_000)
    train_step()
    torch.cuda.memory._dump_snapshot("my_step.pickle")
    torch.cuda.memory._record_memory_history(enabled=None)
    print("\n".join(explain_snapshot("my_step.pickle").lines()))
else:
    print("no GPU here: the snapshots above were recorded on an H200; the widget below explains them or your file")

# %% [markdown]
# The widget explains a snapshot: pick one of the four recorded on the H200, or upload your own file (`my_step.pickle`, gzipped or not). A file that is not a snapshot is refused in one line.

# %%
explorer = SnapshotExplorer()
assert explorer.report.peak_bytes == report.peak_bytes
explorer

# %% [markdown]
# From a terminal, the same report: `python -m helpers explain my_step.pickle`, with `--plots figures/` for the two figures, `--json` for a program, and the step's options (`--model ... --batch-size ...`, as `python -m helpers profile` takes them) to put it beside its simulated twin. Each step of lesson 00's recording left its snapshot in `lessons/data/snapshots/` (`recorded_snapshot(model, batch_size, config)` from `helpers.teaching.reference` finds it; its options are in `gpu_reference.json`): ResNets, vision transformers, GPT-2, and lesson 09's LoRA and QLoRA steps of Llama-3.1 8B.
#
# ## Exercises
#
# **Exercise 1: the block that set a peak.** The widget's third snapshot is lesson 04's ResNet18 at batch 128 with four checkpoint segments, recorded with C++ stacks. Which allocation set its peak: how large, made by which kernel, and how long did it live?

# %%
# Your code here: explain_snapshot(SHIPPED["ResNet18, checkpointed, C++ stacks (H200)"]), then its live_at_peak

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# checkpointed = explain_snapshot(SHIPPED["ResNet18, checkpointed, C++ stacks (H200)"])
# (peak_block,) = [b for b in checkpointed.live_at_peak if b.allocated == checkpointed.peak]
# print(f"{fmt_bytes(peak_block.size)}, {where(peak_block.frames)}, freed at entry {peak_block.freed}")
# assert round(peak_block.size / MiB, 1) == 198.1 and "cudnn_convolution_backward_weight" in where(peak_block.frames)
# assert peak_block.freed == peak_block.allocated + 1
# ```
#
# A 198.1 MiB block allocated inside `raw_cudnn_convolution_backward_weight_out`, the weight gradient of a convolution in the backward pass, and freed at the very next entry of the trace: a cuDNN workspace, live only while its kernel runs, yet it set the step's peak. No tensor of the model asked for it, which is why lesson 06a found convolutional networks reserving more on the GPU than the simulation says.
# </details>
#
# **Exercise 2: one more tensor at the peak.** At the peak of the LoRA step (section 3), could a 500 MiB tensor be allocated without a new segment? A 600 MiB one? How much memory did the cache hold free at that moment?

# %%
# Your code here: report.largest_free, report.free_in_segments

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# fits = {mib: mib * MiB <= report.largest_free for mib in (500, 600)}
# print(fits, f"free in the cache: {fmt_bytes(report.free_in_segments)}")
# assert fits == {500: True, 600: False} and report.free_in_segments > 600 * MiB
# ```
#
# A request is rounded up to a multiple of 512 bytes (lesson 06), so 500 MiB stays 500 MiB and fits in the 502 MiB block. 600 MiB fits in no free block, although 785 MiB are free in the cache: the allocator asks the driver for a new segment. On a full card it would first give back its wholly free segments and try again, and fail only if that were not enough: the free memory between live blocks cannot be given back.
# </details>
#
# ## Key points
#
# - A memory snapshot (`_record_memory_history()`, then `_dump_snapshot()`) holds the allocator's segments and blocks at one moment and a trace of every allocation and free since recording began, each with its stack. Record from an emptied cache, after a first step.
# - The trace's sizes are requests: they give the tensors' memory exactly. Replayed through a model of the caching allocator they give `memory_allocated()`, to the byte here, and the free space and largest free block at the peak.
# - Stacks say where an allocation was made, at the moment it was made: the backward pass's allocations have Python frames only when Python runs on autograd's thread (a dispatch mode, a custom `autograd.Function`, checkpointing's recomputation), and a block made before the recording has no entry and no stack: a snapshot alone cannot name everything.
# - Beside the same step simulated, every allocation gets a category and a module, and what is left over is what the GPU did that the simulation does not: cuBLAS workspaces, cuDNN's convolution and attention workspaces and random state, reduction buffers. C++ stacks (`stacks="all"`) name the kernel; without them, the order and sizes of a call's allocations often do.
#
# ## References
#
# Cited in this lesson by name:
#
# - PyTorch documentation, *Understanding CUDA memory usage* (`torch.cuda.memory._record_memory_history`, `_dump_snapshot`, `_snapshot`, https://pytorch.org/memory_viz): https://pytorch.org/docs/stable/torch_cuda_memory.html
# - PyTorch source, version 2.14.1: `c10/cuda/CUDACachingAllocator.cpp` (the trace's entries, their sizes, when `memory_allocated()` falls), `aten/src/ATen/native/cuda/Reduce.cuh` (`gpu_reduce_kernel`'s staging buffer): https://github.com/pytorch/pytorch
# - PyTorch tutorial, *Mosaic: Memory Profiling for PyTorch* (categories of a snapshot from its stacks), and facebookresearch/mosaic: https://github.com/facebookresearch/mosaic
# - This course's recording on an NVIDIA H200, 2026-11-26: `lessons/data/gpu_reference.json` and the snapshots in `lessons/data/` (their README says how each was made).
