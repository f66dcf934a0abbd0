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
# # 09 · Fine-tuning a 7-8B model on one GPU: full fine-tuning, LoRA and QLoRA
#
# **Questions**
# - Will my fine-tune of Llama-3.1 8B fit a 24, 48 or 80 GB card, activations included, before I rent one?
# - Where is the peak of full fine-tuning, of LoRA and of QLoRA, and what fills it?
# - Why does LoRA sometimes take as much memory as full fine-tuning, or more?
# - What do gradient checkpointing, 8-bit optimizer states and offloaded states each buy?
# - What is the longest sequence, and the largest batch, that fits?
#
# **Objectives**
# - Build a Hugging Face model from its config alone and count LoRA's parameters by hand.
# - Measure one training step of Llama-3.1 8B with full fine-tuning, LoRA and QLoRA, and read its peak by category against three cards.
# - Reproduce with the engine a reported case of LoRA taking as much memory as full fine-tuning, and explain it.
# - Measure what checkpointing, 8-bit AdamW and offloading each change, and what the loss over a 128k vocabulary keeps.
# - Find the longest sequence that fits each card with an affine fit of two traces, confirmed by a trace at the answer.
#
# **Time:** TODO **GPU:** not needed (memory simulated on fake tensors: nothing is downloaded, no weight is allocated). Memory is in GiB (2³⁰ bytes); a card's or a source's GB (10⁹ bytes) is named as its maker names it.
#
# Lessons 04 (AMP, checkpointing), 05a (model states, bytes per parameter) and 08 (a transformer's activations, flash attention, the logits) come first.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import torch

from helpers import GPU_CARDS, GiB, fit_affine, fits, fmt_bytes, profile_step
from helpers.batch import card_verdicts
from helpers.models import hf
from helpers.teaching.plots import plot_finetune_peaks, plot_memory_vs_seq
from helpers.teaching.widgets import CARD_48GB, FineTuneFit

_ = torch.manual_seed(0)
L8 = "meta-llama/Llama-3.1-8B"
#: The cards of this lesson: GPU_CARDS' 24 and 80 GB cards, and a 48 GB card (CARD_48GB: an RTX A6000's total_memory).
CARDS = {"RTX 4090 24 GB": GPU_CARDS["RTX 4090 24 GB"], **CARD_48GB, "H100 80 GB": GPU_CARDS["H100 80 GB"]}
#: Every step of this lesson: steady state (the optimizer's states exist), bfloat16 autocast, AdamW, simulated.
STEP = dict(amp=True, amp_dtype="bfloat16", optimizer="adamw", steady_state=True, device="simulated")


def gib(nbytes):
    """Bytes as GiB with one decimal, the unit of this lesson."""
    return f"{nbytes / GiB:.1f} GiB"


def verdicts(profile):
    """'yes' or 'no' for each card of CARDS: the rule of every widget (peak allocated + 1 GiB assumed overhead)."""
    return ["yes" if fits(profile.peak_allocated_bytes, capacity) else "no" for capacity in CARDS.values()]


# %%
# NBVAL_IGNORE_OUTPUT
# (why: versions and devices differ between machines)
import peft
import transformers

print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}, "
      f"GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. A Hugging Face model from its config, and LoRA's parameters
#
# A model's `config.json` (a few hundred bytes) decides every tensor's shape; its weights (16 GB for this one) decide none. The engine builds the `transformers` class from the config alone, on PyTorch's `meta` device, where a tensor has a shape and a dtype but no memory (`helpers.models.hf`; Llama-3.1 8B's config ships with the course, so nothing is downloaded). LoRA (Hu et al., 2021) then freezes every weight and adds two small trained matrices beside each targeted `nn.Linear(in, out)`: A (rank × in) and B (out × rank), `rank · (in + out)` parameters. peft's default targets for Llama are `q_proj` and `v_proj`:

# %%
with torch.device("meta"):
    llama = hf.build_causal_lm(L8)
c = llama.config
P8 = sum(p.numel() for p in llama.parameters())
assert P8 == hf.SHIPPED[L8].parameters  # 8,030,261,248: the Hub's "8.03B"
lora = hf.apply_lora(llama, 16, ("q_proj", "v_proj"))
adapters = sum(p.numel() for p in lora.parameters() if p.requires_grad)
h, q_out, v_out = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
assert adapters == c.num_hidden_layers * 16 * ((h + q_out) + (h + v_out))  # rank x (in + out), q and v, 32 layers
print(f"Llama-3.1 8B: {P8:,} parameters; LoRA of rank 16 on q_proj and v_proj trains {adapters:,} of them "
      f"({adapters / P8:.2%})")

# %% [markdown]
# LoRA trains less than a thousandth of the model: its gradients and AdamW's states (16 bytes per trained parameter, lesson 05a) are about 100 MiB. The base weights stay, frozen, in the dtype they were loaded in (2 bytes per parameter in bfloat16, 15 GiB here), or, with QLoRA (Dettmers et al., 2023), in 4-bit NF4 with their quantization constants. What no parameter count shows is the activations: LoRA's forward pass runs the whole model, and its backward pass goes through every layer to reach the first adapters.
#
# ## 2. Full fine-tuning, LoRA, QLoRA: where the peak is
#
# One training step of Llama-3.1 8B, batch 1, 2,048 tokens, under bfloat16 autocast with AdamW, no checkpointing: full fine-tuning with float32 weights (PyTorch's default, lesson 05a's 16 bytes per parameter), LoRA of rank 16 on a bfloat16 base, and QLoRA, the same LoRA on an NF4 base:

# %%
methods = {
    "full fine-tuning (float32 weights)": profile_step(L8, 1, seq_len=2048, **STEP),
    "LoRA r16 (bfloat16 base)": profile_step(L8, 1, seq_len=2048, lora_rank=16, param_dtype="bfloat16", **STEP),
    "QLoRA r16 (NF4 base)": profile_step(L8, 1, seq_len=2048, lora_rank=16, quantization="nf4",
                                         param_dtype="bfloat16", **STEP),
}
full, lora16, qlora16 = methods.values()
plot_finetune_peaks(methods, CARDS, title="Llama-3.1 8B, batch 1 x 2,048 tokens, bfloat16 autocast, AdamW")

# %% [markdown]
# Look at TODO
#
# The same, with the verdicts:

# %%
print(f"{'method':<36} {'peak':>10}  {'where':<18} {'24 GB':>6} {'48 GB':>6} {'80 GB':>6}")
for label, p in methods.items():
    where = "optimizer.step()" if p.peak.label == "optimizer.step()" else "backward"
    print(f"{label:<36} {gib(p.peak_allocated_bytes):>10}  {where:<18} " + " ".join(f"{v:>6}" for v in verdicts(p)))
assert full.peak.label == "optimizer.step()" and "backward" in lora16.peak.label
assert verdicts(full) == ["no", "no", "no"]

# %% [markdown]
# TODO message
#
# ## 3. Why LoRA can take as much memory as full fine-tuning
#
# peft issue #1514, *Tinyllama with Lora consumes more memory than full-finetuning* (2024), trains TinyLlama 1.1B in bfloat16 (the model loaded with `torch_dtype=torch.bfloat16`, no autocast) with AdamW, FlashAttention-2, batch 2 × 8,192 tokens, on an A100, with and without a LoRA adapter whose `print_trainable_parameters()` reads "trainable params: 50,462,720 || all params: 1,150,511,104". The reporter found that at long context the memory with and without LoRA was about the same, and that the difference was large only at short context; the maintainers could not reproduce it at 1,024 tokens. The engine builds TinyLlama from its config's sizes; the printed counts pin the adapter: rank 64 on all seven linear layers of each block.

# %%
TINYLLAMA = dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                 num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
                 rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
with torch.device("meta"):
    tiny = hf.apply_lora(hf.build_causal_lm(TINYLLAMA), 64, ALL_LINEAR)
counts = sum(p.numel() for p in tiny.parameters() if p.requires_grad), sum(p.numel() for p in tiny.parameters())
assert counts == (50_462_720, 1_150_511_104)  # the issue's print_trainable_parameters(), exactly
ISSUE = dict(param_dtype="bfloat16", optimizer="adamw", attention="flash", steady_state=True, device="simulated")
issue = {}
for seq in (1024, 8192):
    issue[f"full fine-tuning, 2 x {seq:,}"] = profile_step(TINYLLAMA, 2, seq_len=seq, **ISSUE)
    issue[f"LoRA r64 all linear, 2 x {seq:,}"] = profile_step(TINYLLAMA, 2, seq_len=seq, lora_rank=64,
                                                             lora_targets=ALL_LINEAR, **ISSUE)
plot_finetune_peaks(issue, {"A100 40 GB": GPU_CARDS["A100 40 GB"], "A100 80 GB": GPU_CARDS["A100 80 GB"]},
                    title="TinyLlama 1.1B in bfloat16, AdamW, flash attention (peft issue #1514's setup)")

# %% [markdown]
# Look at TODO

# %%
TODO_section3_numbers = None

# %% [markdown]
# TODO explanation + #1023
#
# ## 4. Checkpointing, 8-bit states, offloading, and the loss over 128k tokens
#
# TODO intro

# %%
at2k = dict(seq_len=2048, **STEP)
techniques = {
    "full, AdamW (section 2)": full,
    "full, 8-bit AdamW": profile_step(L8, 1, **(at2k | dict(optimizer="adamw8bit"))),
    "full, AdamW states in host memory": profile_step(L8, 1, optimizer_offload=True, **at2k),
    "full, bfloat16 weights, states in host memory, checkpointing": profile_step(
        L8, 1, param_dtype="bfloat16", optimizer_offload=True, checkpoint=1, **at2k),
    "LoRA r16 (section 2), checkpointing": profile_step(L8, 1, lora_rank=16, param_dtype="bfloat16", checkpoint=1,
                                                        **at2k),
    "QLoRA r16, checkpointing": profile_step(L8, 1, lora_rank=16, quantization="nf4", param_dtype="bfloat16",
                                             checkpoint=1, **at2k),
}
plot_finetune_peaks(techniques, CARDS, title="Llama-3.1 8B, batch 1 x 2,048 tokens: what each technique changes")

# %% [markdown]
# Look at TODO

# %%
TODO_section4_numbers = None

# %% [markdown]
# ## 5. The longest sequence and the largest batch
#
# TODO

# %%
qlora_ckpt = techniques["QLoRA r16, checkpointing"]
qlora_8k = profile_step(L8, 1, seq_len=8192, lora_rank=16, quantization="nf4", param_dtype="bfloat16", checkpoint=1,
                        **STEP)
line = fit_affine([2048, 8192], [qlora_ckpt.peak_allocated_bytes, qlora_8k.peak_allocated_bytes])
longest = {}
for card, capacity in CARDS.items():
    tokens = line.largest_batch(capacity)  # the line's largest "batch" is a number of tokens here
    longest[card] = tokens // 256 * 256
confirmed = {card: profile_step(L8, 1, seq_len=n, lora_rank=16, quantization="nf4", param_dtype="bfloat16",
                                checkpoint=1, **STEP) for card, n in longest.items()}
for card, p in confirmed.items():
    assert fits(p.peak_allocated_bytes, CARDS[card])  # the answer, traced, fits
    assert not fits(line.predict(longest[card] + 256), CARDS[card])  # 256 tokens more do not, by the line
    assert abs(p.peak_allocated_bytes - line.predict(longest[card])) < 0.01 * GiB  # and the line is exact there
print("longest sequence at batch 1, QLoRA r16 with checkpointing: " +
      "; ".join(f"{card} {n:,} tokens" for card, n in longest.items()))

# %%
seqs = sorted({2048, 8192, *longest.values()})
peaks = {2048: qlora_ckpt.peak_allocated_bytes, 8192: qlora_8k.peak_allocated_bytes,
         **{longest[card]: p.peak_allocated_bytes for card, p in confirmed.items()}}
plot_memory_vs_seq(seqs, {"QLoRA r16, checkpointing (engine)": [peaks[s] for s in seqs]}, unit="GiB",
                   levels={f"{card} less 1 GiB": capacity - GiB for card, capacity in CARDS.items()},
                   title="Llama-3.1 8B, batch 1: the peak against the sequence length")

# %% [markdown]
# Look at TODO
#
# ## 6. The widget: will this fine-tune fit?
#
# TODO

# %%
fit = FineTuneFit()
print(fit.message)
assert fit.result.peak_bytes == techniques["LoRA r16 (section 2), checkpointing"].peak_allocated_bytes

# %%
fit

# %% [markdown]
# ## Exercises
#
# TODO
#
# ## Key points
#
# TODO
#
# ## Further reading
#
# - E. J. Hu et al., *LoRA: Low-Rank Adaptation of Large Language Models*, 2021, arXiv:2106.09685.
# - T. Dettmers, A. Pagnoni, A. Holtzman, L. Zettlemoyer, *QLoRA: Efficient Finetuning of Quantized LLMs*, 2023, arXiv:2305.14314.
# - T. Dettmers, M. Lewis, S. Shleifer, L. Zettlemoyer, *8-bit Optimizers via Block-wise Quantization*, 2021, arXiv:2110.02861.
# - peft issues #1514 (*Tinyllama with Lora consumes more memory than full-finetuning*) and #1023 (*ESM-V2 + QLoRa: high memory usage*).
# - Hugging Face documentation: *PEFT* (`LoraConfig`, `get_peft_model`), *transformers* (`gradient_checkpointing_enable`), torchao (`NF4Tensor`, `CPUOffloadOptimizer`).
