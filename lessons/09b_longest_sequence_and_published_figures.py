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
# # 09b · Fine-tuning on one GPU, part 2: the longest sequence, the widget, and published figures
#
# **Questions**
# - What is the longest sequence, and the largest batch, that a fine-tune of Llama-3.1 8B fits on a 24, 48 or 80 GB card?
# - What does one more token cost, and why is most of it the logits?
# - Will my own fine-tune fit, and how far can it go?
# - How close are simulated figures to what people measured on real GPUs?
#
# **Objectives**
# - Find the longest sequence that fits each card with an affine fit of two traces, confirmed by a trace at the answer, and the largest batch from the same line.
# - Count what the loss over a 128k vocabulary keeps per token, whole and in torchtune's chunks.
# - Drive the fine-tuning widget: a model, a method, an optimizer, the weights' dtype, the loss, checkpointing, the sequence, the batch and the card.
# - Set the engine beside eight published real-GPU fine-tuning figures and three steps this course recorded on an H200, and explain each gap.
#
# **Time:** about 55 minutes alone: 23 of reading, 10 of code, 2 for the figures, 1 to run all, 17 for the two exercises. **GPU:** not needed (memory simulated on fake tensors: nothing is downloaded, no weight is allocated). Memory is in GiB (2³⁰ bytes); a card's or a source's GB (10⁹ bytes) is named as its maker names it. The minutes to run all are the kernel's CPU time (the instructor guide's method); on a machine busy with other work the wall time can be twice that or more.
#
# Read lesson 09 first: this lesson continues with its steps of Llama-3.1 8B (LoRA and QLoRA, checkpointing, the cards of 24, 48 and 80 GB, and the peak judged with the assumed overhead).

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import textwrap

import torch

from helpers import GPU_CARDS, GiB, fit_affine, fmt_bytes, profile_step
from helpers.batch import Estimate
from helpers.models import hf
from helpers.profile import many_points
from helpers.teaching.plots import plot_peak_vs_tokens, plot_published_comparison
from helpers.teaching.published import finetune_comparison
from helpers.teaching.widgets import CARD_48GB, FineTuneFit

_ = torch.manual_seed(0)
L8 = "meta-llama/Llama-3.1-8B"
#: The cards of this lesson, as lesson 09's: GPU_CARDS' 24 and 80 GB cards, and a 48 GB card (CARD_48GB: an RTX A6000's total_memory).
CARDS = {"RTX 4090 24 GB": GPU_CARDS["RTX 4090 24 GB"], **CARD_48GB, "H100 80 GB": GPU_CARDS["H100 80 GB"]}
#: Every step of this lesson, as lesson 09's: steady state (the optimizer's states exist), bfloat16 autocast, AdamW, the
#: next-token loss over the whole logits (what "auto" picks for a causal LM, named as the widget of section 2 names it), simulated.
STEP = dict(amp=True, amp_dtype="bfloat16", optimizer="adamw", loss="next_token", steady_state=True, device="simulated")


def gib(nbytes):
    """Bytes as GiB with one decimal, the unit of this lesson."""
    return f"{nbytes / GiB:.1f} GiB"


def judged(profile, card):
    """The verdict of every widget on ``profile``'s step for ``card`` of CARDS: the peak allocated, plus the
    assumed 1 GiB overhead, plus the cuBLAS workspaces of a card of GPU_CARDS (the A6000 is a bare capacity)."""
    return Estimate.of(profile).verdict(CARDS[card], card if card in GPU_CARDS else None)


# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
import peft
import transformers

print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, "
      f"GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# Recomputed from lesson 09 with `hf.load_config` and `profile_step`: Llama-3.1 8B's config (`c`), and three of its steps at batch 1 × 2,048 tokens: LoRA of rank 16 on a bfloat16 base (`lora16`, its section 2), and LoRA and QLoRA with checkpointing (`ckpt_lora`, `ckpt_qlora`, its section 4):

# %%
c = hf.load_config(L8)
at2k = dict(seq_len=2048, **STEP)
LORA16 = dict(lora_rank=16, param_dtype="bfloat16")
QLORA16 = dict(lora_rank=16, quantization="nf4", double_quant=True, param_dtype="bfloat16")
lora16 = profile_step(L8, 1, **LORA16, **at2k)
ckpt_lora = profile_step(L8, 1, checkpoint=1, **LORA16, **at2k)
ckpt_qlora = profile_step(L8, 1, checkpoint=1, **QLORA16, **at2k)
print(f"peak allocated: LoRA r16 {gib(lora16.peak_allocated_bytes)}; with checkpointing, LoRA r16 "
      f"{gib(ckpt_lora.peak_allocated_bytes)}, QLoRA r16 {gib(ckpt_qlora.peak_allocated_bytes)}")
assert [judged(ckpt_lora, card).fits for card in CARDS] == [True] * 3 and not judged(lora16, "RTX 4090 24 GB").fits

# ## 1. The longest sequence, the largest batch, and the logits
#
# With flash attention nearly every tensor a step keeps grows linearly with the tokens of the batch (batch × sequence), or not at all (the rotary position tables, which grow with the sequence alone, are small): the peak is a straight line in the token count, once it is in backward (lesson 01's M0 + b·m, with tokens for samples). Two traces give the line; the line gives the longest sequence each card holds (in steps of 256 tokens); a trace at each answer confirms it. QLoRA with checkpointing, batch 1:

# %%
QLORA_CKPT = dict(lora_rank=16, quantization="nf4", double_quant=True, param_dtype="bfloat16", checkpoint=1,
                  **STEP)
qlora_2k = ckpt_qlora
with many_points():  # one step at five lengths: traced once with symbolic sizes, checked equal to the 2,048-token
    qlora_8k = profile_step(L8, 1, seq_len=8192, **QLORA_CKPT)  # trace, then evaluated: the same bytes as a trace
    line = fit_affine([2048, 8192], [qlora_2k.peak_allocated_bytes, qlora_8k.peak_allocated_bytes])
    longest = {card: line.largest_batch(capacity) // 256 * 256 for card, capacity in CARDS.items()}  # tokens, not samples
    beside = {card: judged(qlora_2k, card).overhead + judged(qlora_2k, card).unseen for card in CARDS}  # overhead, cuBLAS
    confirmed = {card: profile_step(L8, 1, seq_len=n, **QLORA_CKPT) for card, n in longest.items()}
for card, p in confirmed.items():
    assert judged(p, card).fits                                          # the answer, traced, fits
    assert abs(p.peak_allocated_bytes - line.predict(longest[card])) < 0.01 * GiB  # the line holds there
    assert line.predict(longest[card] + 256) + beside[card] > CARDS[card]  # and 256 tokens more do not fit
peaks = {2048: qlora_2k.peak_allocated_bytes, 8192: qlora_8k.peak_allocated_bytes,
         **{longest[card]: p.peak_allocated_bytes for card, p in confirmed.items()}}
plot_peak_vs_tokens(peaks, line, CARDS, longest, title="Llama-3.1 8B, QLoRA r16 with checkpointing, batch 1")

# %% [markdown]
# Look at the points: the three confirming traces (diamonds) lie on the line drawn through the first two, each just under its card's dashed line, at 12,032, 28,160 and 49,920 tokens. The line's slope is what one more token costs:

# %%
vocab = c.vocab_size
print(f"each token adds {fmt_bytes(line.per_sample_bytes, 'MiB')} to the peak; longest sequence at batch 1: "
      + "; ".join(f"{card} {n:,} tokens" for card, n in longest.items()))
alive = set(qlora_8k.peak_serials)
logits = sum(st.nbytes for st in qlora_8k.storages.values() if st.serial in alive and st.shape[-1:] == (vocab,))
print(f"at 8,192 tokens, logit-sized tensors hold {gib(logits)} of the {gib(qlora_8k.peak_allocated_bytes)} peak")
assert logits == 10 * 8192 * vocab and 0.75 < 10 * vocab / line.per_sample_bytes < 0.85

# %% [markdown]
# With checkpointing, most of what a token costs is its logits: the LM head's bfloat16 output, the float32 log-softmax that cross-entropy saves for backward (autocast runs cross-entropy in float32, as Hugging Face's own `ForCausalLMLoss` does with `logits.float()`; the float32 copy of the logits is freed when the loss returns, its log-softmax stays) and the float32 gradient that backward starts from, 2 + 4 + 4 = 10 bytes for each of the 128,256 vocabulary entries, 1.2 of the 1.5 MiB per token (asserted). At 8,192 tokens they are 9.8 GiB of the 17.3 GiB peak, twice the 4-bit model.
#
# torchtune's recipes compute this loss with `CEWithChunkedOutputLoss`: the LM head runs on 8 chunks of the sequence, and each chunk's logits are upcast to float32 on their own, so one chunk's float32 copy exists at a time (`loss="chunked"`; the default, `"next_token"`, frees the model's output before backward, as Hugging Face's `Trainer` and torchtune's loop both do):

# %%
chunked_8k = profile_step(L8, 1, seq_len=8192, **(QLORA_CKPT | dict(loss="chunked")))
alive = set(chunked_8k.peak_serials)
chunked_logits = sum(st.nbytes for st in chunked_8k.storages.values()
                     if st.serial in alive and st.shape[-1:] == (vocab,))
print(f"torchtune's chunked loss at 8,192 tokens: peak {gib(chunked_8k.peak_allocated_bytes)} "
      f"(whole logits: {gib(qlora_8k.peak_allocated_bytes)}), logit-sized tensors {gib(chunked_logits)}")
assert 2 * chunked_logits == 13 * 8192 * vocab and chunked_8k.peak.phase == "loss"  # 6.5 bytes per logit
assert round((qlora_8k.peak_allocated_bytes - chunked_8k.peak_allocated_bytes) / GiB, 1) == 3.4

# %% [markdown]
# The peak moves to the loss itself, and a logit costs 6.5 bytes instead of 10 (asserted): 2 for the bfloat16 logits, 4 for the float32 log-softmax that cross-entropy keeps for backward, and 4/8 for the float32 copy of one chunk in eight. That is 3.4 GiB less at 8,192 tokens. Lesson 08's chunked cross-entropy, which recomputes each chunk in backward and so never holds all the logits, goes further still.
#
# The largest batch follows from the same line: a batch of 2,048-token samples fits where its tokens do, so the A6000's 28,160 tokens hold 13 such samples (exercise 1 checks it with traces).
#
# ## 2. The widget: will this fine-tune fit?
#
# All of the above in one place: the model (Llama-3.1 8B, Qwen2.5 7B, Mistral 7B v0.3), the method (full fine-tuning, LoRA with its rank, QLoRA), the adapters' dtype and DoRA, peft's k-bit preparation (for QLoRA), the optimizer (AdamW, 8-bit AdamW, AdamW with offloaded states, bitsandbytes' paged AdamW), the weights' dtype, the loss (the whole logits, or torchtune's chunks), checkpointing, the sequence, the batch and the card, and a question: "does it fit?", "largest batch" (at the sequence shown) or "longest sequence" (at the batch shown). It judges the whole step's peak plus the assumed overhead, like every widget (or, with "reserved", the step replayed through the allocator model). The two searches run section 1's method: a line through two traces, then a trace at the answer and one just beyond it, so an 8B search takes several traces (tens of seconds); the view says "updating" meanwhile. A search's answer shows in its box, greyed out, while that question is asked; ask another and the box holds your own value again. First as text, its default: LoRA with checkpointing on a 24 GB card:

# %%
fit = FineTuneFit()
print(fit.message)
assert fit.result.peak_bytes == ckpt_lora.peak_allocated_bytes

# %%
fit

# %% [markdown]
# It fits, with checkpointing: switch it off and LoRA no longer fits the 24 GB card; choose "QLoRA", then the question "longest sequence", and compare with section 1. Then try Qwen2.5 7B, whose 152,064-entry vocabulary makes each token's logits dearer.
#
# ## 3. Against published real-GPU figures
#
# Everything above is simulated. How close is it to what people measured on real GPUs? `helpers.teaching.published` holds eight published fine-tuning figures: torchtune's QLoRA tutorial (Llama-2 7B with LoRA and with QLoRA), the comparison of torchtune and PEFT for Llama-3 8B LoRA on an RTX 4090 kept by a PEFT maintainer, the table in PEFT's README (bloomz-7b1 with LoRA), IBM's fms-acceleration benchmark of Mistral-7B QLoRA with bitsandbytes and TRL at two batch sizes, the QLoRA paper's 65B model on one 48 GB GPU, and Unsloth's context-length table as a claim to check. Each row holds the setup as its source states it, the step options that reproduce it, what the figure measures (peak allocated, peak reserved, or a claim that the step fits a card), and the gap explained. `finetune_comparison()` runs the engine on each row, as every cell above does (a minute or two for all eight). Here the unit is the sources' GB (10⁹ bytes):

# %%
comparisons = finetune_comparison()
plot_published_comparison(comparisons, title="Published fine-tuning figures beside the engine's")

# %% [markdown]
# Look at each pair of bars: blue is the published figure (hatched where it is a claim that the step fits a card of that size), vermillion the engine's (the whole step's peak with the card's cuBLAS workspaces, and for a card the assumed overhead too), the ratio written at its end. Six vermillion bars are within a tenth of their blue ones; the last two, the QLoRA paper's and Unsloth's, are claims that a step fits a card, and both are shorter: the engine fits each with room to spare. As a table, and, for each row more than 2% off or judged against a card, the gap as its row explains it:

# %%
print(f"{'source':<60} {'measures':<10} {'published':>10} {'engine':>9} {'ratio':>6}")
for cmp in comparisons:
    print(f"{cmp.row.source:<60} {cmp.row.measured:<10} {cmp.row.published / 1e9:>7.2f} GB {cmp.after / 1e9:>6.2f} GB "
          f"{cmp.ratio:>6.2f}")
assert all(cmp.agrees for cmp in comparisons)  # each where its row expects it: within its tolerance, or as explained
for cmp in comparisons:
    if abs(cmp.ratio - 1) > 0.02 or cmp.row.measured == "card":
        print("\n" + textwrap.fill(f"{cmp.row.source}: {cmp.row.gap}", 116))
by_key = {cmp.row.key: cmp for cmp in comparisons}
assert abs(by_key["peft-lora-4090"].ratio - 1) < 0.02 and abs(by_key["peft-readme-bloomz"].ratio - 1) < 0.05
assert sum(abs(cmp.ratio - 1) <= 0.1 for cmp in comparisons) == 6  # the bars within a tenth
fms = [by_key[f"fms-peft-bnb-mistral-b{b}"] for b in (4, 8)]
assert [round(100 * (1 - cmp.ratio), 1) for cmp in fms] == [1.3, 1.5]  # under, at batch 4 and 8
short_per_token = ((fms[1].row.published - fms[1].after) - (fms[0].row.published - fms[0].after)) / (4 * 4096)
assert abs(short_per_token / (4096 * 4) - 1) < 0.01  # 4 more sequences of 4,096 tokens: one float32 vector a token
guanaco = by_key["qlora-guanaco-65b"]
unsloth = by_key["unsloth-hf-24gb"]
assert guanaco.verdict.fits and 0.85 < guanaco.ratio < 0.9 and unsloth.verdict.fits and 0.8 < unsloth.ratio < 0.85
assert round((guanaco.row.published - guanaco.before) / 1e9, 1) == 6.6  # to spare, beside the 1 GiB overhead

# %% [markdown]
# Where the setup is stated and the figure is what the engine counts, the peak allocated, it is close: 2% over the PEFT maintainer's Llama-3 8B LoRA on an RTX 4090, whose notebook states every option, and 3% under PEFT's README, whose setup is read from the script behind its table. The one figure measured with bitsandbytes and Hugging Face's QLoRA recipe whose setup is stated to the last option and library version, fms-acceleration's Mistral-7B benchmark (the course's `bf16_embeddings=True` models TRL's cast), is 1.3% and 1.5% under at batch 4 and 8, and what it lacks grows by one float32 vector of 4,096 values a token (asserted): the final norm's output, which transformers 4.48 still holds while it computes the loss inside the model's forward. torchtune's figures are reserved memory, the allocator's cache included since the model was built, and the replay of one step from an empty cache is 8% under. The QLoRA paper's claim holds when the engine is given the paper's setup, read from its script: bitsandbytes' NF4 with double quantization, peft's k-bit preparation, bfloat16 adapters and the paged AdamW (`optimizer="paged-adamw"`, whose 32-bit states live in unified memory, outside `memory_allocated`) fit Guanaco 65B on a 48 GB card with 6.6 GB to spare. Its row says what changes the answer: PyTorch's AdamW still fits, but with peft's float32 adapters (today's default) too the step passes the card; and torchao's NF4, whose eager dequantization holds far more at the peak than bitsandbytes' kernel, put the row's earlier setup 2% over it. Unsloth's number is a claim checked, not reproduced: the engine fits 5,789 tokens in a 24 GB card with a sixth of it to spare, even with Hugging Face's QLoRA recipe (`prepare_kbit=True`, peft's `prepare_model_for_kbit_training`), and its setup is not fully stated. A simulated figure is as good as the setup it is given: state the dtype of every part, what is measured, and what the allocator keeps.
#
# This course measured three of its own steps: `make gpu-reference` (lesson 00) ran lesson 09's LoRA step of section 2 and its "LoRA r16, checkpointing" and "QLoRA r16, checkpointing" of section 4 (this lesson's `lora16`, `ckpt_lora` and `ckpt_qlora`) on an NVIDIA H200, random weights and all, and simulated each beside it. That machine ran its own PyTorch 2.11.0 (CUDA 13.0), transformers 5.17.0 and peft 0.21.0, not this course's pins (`lessons/data/h200_2026-11-26/README.md`; the recording's PyTorch is asserted below); the simulated figures are the pins'. The simulated column is the allocator model's peak allocated, *tensors* the engine's peak that this lesson plots, in GiB above; here the unit is MiB:

# %%
from helpers.teaching.reference import load_reference, reference_report

print(reference_report(L8))
recorded = load_reference()
if recorded is not None:
    on_gpu = {r["config"]: r for r in recorded["runs"] if r["model"] == L8}
    assert on_gpu["LoRA r16"]["simulated_peak_bytes"] == lora16.peak_allocated_bytes  # lesson 09's section 2 step, byte for byte
    assert on_gpu["LoRA r16, checkpointing"]["simulated_peak_bytes"] == ckpt_lora.peak_allocated_bytes
    assert on_gpu["QLoRA r16, checkpointing"]["simulated_peak_bytes"] == ckpt_qlora.peak_allocated_bytes
    checkpointed, plain, qlora = (on_gpu[c]["simulated_allocated_bytes"] - on_gpu[c]["cuda_peak_bytes"]
                                  for c in ("LoRA r16, checkpointing", "LoRA r16", "QLoRA r16, checkpointing"))
    assert checkpointed == 0 and -1.1 * 2**20 < plain < 0 and -2**20 < qlora < 0
    assert [round(on_gpu[c]["cuda_peak_bytes"] / 2**30, 1) for c in on_gpu] == [27.0, 18.0, 8.4]  # as stated below
    assert recorded["torch"] == "2.11.0+cu130" and recorded["device"] == "NVIDIA H200"  # not the pinned PyTorch

# %% [markdown]
# The checkpointed LoRA step lands on the GPU's `max_memory_allocated` to the byte, out of 18 GiB, the other 1 MiB under it, out of 27 GiB, and the QLoRA step half a MiB under it, out of 8.4 GiB: a transformer's step is matrix multiplications, attention and elementwise kernels, and at these three peaks none of them held scratch memory beyond the cuBLAS workspaces that the verdicts add, so what the simulation counts is what the GPU held there. bitsandbytes' own kernels are no exception: its 4-bit weights, and the bfloat16 copy of one layer's weight that it dequantizes for each product (at 2,048 tokens in the forward pass and in checkpointing's recomputation as in backward), take on the GPU the bytes that lesson 09's section 2 counted. The published figures above differ from the engine by what their setups leave unsaid, not by what the engine misses.
#
#
# ## Exercises
#
# **Exercise 1: the largest batch.** With QLoRA and checkpointing at 2,048 tokens, what is the largest batch that fits the RTX A6000 48 GB? Use `largest_fit` (the widget's search, `from helpers.batch import largest_fit`) on `Estimate.of(profile_step(...))`, then check the answer against section 1's line.

# %%
# Your code here: largest_fit(lambda b: Estimate.of(profile_step(L8, b, seq_len=2048, **QLORA_CKPT)), 1, 64, ...)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# from helpers.batch import largest_fit
#
# card = "RTX A6000 48 GB"
# found, seen = largest_fit(lambda b: Estimate.of(profile_step(L8, b, seq_len=2048, **QLORA_CKPT)), 1, 64, CARDS[card])
# print(f"largest batch at 2,048 tokens on the {card}: {found}, found with {len(seen)} traces; "
#       f"the line of section 1 says {line.largest_batch(CARDS[card]) / 2048:.2f}")
# assert seen[found].verdict(CARDS[card]).fits and not seen[found + 1].verdict(CARDS[card]).fits
# assert found == line.largest_batch(CARDS[card]) // 2048
# ```
#
# Batch 13: four traces (batch 1, 4, the line's answer 13, and 14, which does not fit). Section 1's line, made from two batch-1 traces at 2,048 and 8,192 tokens, says 13.8 samples: the peak depends on the batch's tokens, not on how they are split into samples.
# </details>
#
# **Exercise 2: the vocabulary.** At the peak of section 1's 8,192-token step, the logits, their float32 log-softmax and its gradient take 10 bytes per logit (token × vocabulary entry). How many GiB is that per 1,000 tokens for Llama-3.1 8B (128,256 entries), Qwen2.5 7B (152,064) and Mistral 7B v0.3 (32,768), and at how many tokens does it pass Llama's 4-bit linear weights?

# %%
# Your code here: hf.load_config(name).vocab_size for each name of hf.SHIPPED

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# for name in (L8, "Qwen/Qwen2.5-7B", "mistralai/Mistral-7B-v0.3"):
#     per_token = 10 * hf.load_config(name).vocab_size
#     print(f"{name:<26} {gib(1000 * per_token)} per 1,000 tokens")
# passes = ckpt_qlora.categories["parameters"] / (10 * c.vocab_size)
# print(f"Llama's logits pass its QLoRA parameters ({gib(ckpt_qlora.categories['parameters'])}) at {passes:,.0f} tokens")
# assert round(passes) == 4468
# ```
#
# 1.2 GiB per 1,000 tokens for Llama-3.1 8B, 1.4 for Qwen2.5 7B, 0.3 for Mistral 7B v0.3, whose vocabulary is a quarter of Llama's. From about 4,500 tokens on, Llama's logits at the peak weigh more than its whole QLoRA model: at long sequences a fine-tune's memory is decided by its vocabulary as much as by its parameter count.
# </details>
#
# ## Key points
#
# - With flash attention the peak is a straight line in the batch's tokens: two traces predict the longest sequence and the largest batch, and a trace at the answer confirms it.
# - With checkpointing and QLoRA, most of what a token costs is its logits (10 bytes per vocabulary entry, 6.5 with torchtune's chunked loss): the vocabulary decides the longest sequence.
# - The widget asks the same questions of your own fine-tune: does it fit, the largest batch, the longest sequence, judged with the assumed overhead or the allocator's reserved memory.
# - Against published real-GPU figures the engine is within a few percent where the setup is stated and the figure is the peak allocated; a reserved figure, a claim about a card, or an unstated setup needs its gap explained.
#
# ## Further reading
#
# - T. Dettmers, A. Pagnoni, A. Holtzman, L. Zettlemoyer, *QLoRA: Efficient Finetuning of Quantized LLMs*, 2023, arXiv:2305.14314 (Guanaco 65B on one 48 GB GPU, and the paged optimizers).
# - torchtune, *Fine-Tuning Llama2 with QLoRA* (tutorial), and its `CEWithChunkedOutputLoss` (pytorch/torchtune pull request #1390); Unsloth's README (its context-length table); the PEFT README's memory table; fms-acceleration's benchmark tables (`scripts/benchmarks/refs/a100_80gb.csv`).
# - Documentation: transformers (`BitsAndBytesConfig`, `Trainer`), bitsandbytes (`Linear4bit`, `PagedAdamW`), peft (`prepare_model_for_kbit_training`), TRL (`SFTTrainer`), PyTorch (`torch.cuda.max_memory_allocated`, `torch.nn.functional.cross_entropy`).
