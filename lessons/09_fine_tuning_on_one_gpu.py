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
# # 09 · Fine-tuning a 7-8B model on one GPU: full fine-tuning, LoRA and QLoRA
#
# **Questions**
# - Will my fine-tune of Llama-3.1 8B fit a 24, 48 or 80 GB card, activations included, before I rent one?
# - Where is the peak of full fine-tuning, of LoRA and of QLoRA, and what fills it?
# - Why does LoRA sometimes take as much memory as full fine-tuning, or more?
# - What do fused and 8-bit AdamW, bfloat16 weights, offloaded states and gradient checkpointing each buy?
#
# **Objectives**
# - Build a Hugging Face model from its config alone and count LoRA's parameters by hand.
# - Measure one training step of Llama-3.1 8B with full fine-tuning, LoRA and QLoRA, and read its peak by category against three cards.
# - Reproduce with the engine a reported case of LoRA taking as much memory as full fine-tuning, and explain it.
# - Measure what fused and 8-bit AdamW, bfloat16 weights and states, offloading and checkpointing each change, in bytes per parameter.
#
# **Time:** about 55 minutes alone: 23 of reading, 13 of code, 3 for the figures, 1 to run all, 18 for the two exercises. **GPU:** not needed (memory simulated on fake tensors: nothing is downloaded, no weight is allocated). Memory is in GiB (2³⁰ bytes); a card's or a source's GB (10⁹ bytes) is named as its maker names it. The minutes to run all are the kernel's CPU time (the instructor guide's method); on a machine busy with other work the wall time can be twice that or more.
#
# Lessons 04 (AMP, checkpointing), 05a (model states, bytes per parameter) 08 and 08b (a transformer's activations, flash attention, the logits) come first. Lesson 09b continues with the longest sequence and the largest batch, the fine-tuning widget, and published real-GPU figures.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import torch

from helpers import GPU_CARDS, GiB, profile_step
from helpers.batch import Estimate
from helpers.models import hf
from helpers.techniques.lora import apply_lora
from helpers.teaching.plots import plot_finetune_peaks
from helpers.teaching.widgets import CARD_48GB

_ = torch.manual_seed(0)
L8 = "meta-llama/Llama-3.1-8B"
#: The cards of this lesson: GPU_CARDS' 24 and 80 GB cards, and a 48 GB card (CARD_48GB: an RTX A6000's total_memory).
CARDS = {"RTX 4090 24 GB": GPU_CARDS["RTX 4090 24 GB"], **CARD_48GB, "H100 80 GB": GPU_CARDS["H100 80 GB"]}
#: Every step of this lesson: steady state (the optimizer's states exist), bfloat16 autocast, AdamW, the next-token
#: loss over the whole logits (what "auto" picks for a causal LM, named as lesson 09b's widget names it), simulated.
STEP = dict(amp=True, amp_dtype="bfloat16", optimizer="adamw", loss="next_token", steady_state=True, device="simulated")


def gib(nbytes):
    """Bytes as GiB with one decimal, the unit of this lesson."""
    return f"{nbytes / GiB:.1f} GiB"


def judged(profile, card):
    """The verdict of every widget on ``profile``'s step for ``card`` of CARDS: the peak allocated, plus the
    assumed 1 GiB overhead, plus the cuBLAS workspaces of a card of GPU_CARDS (the A6000 is a bare capacity)."""
    return Estimate.of(profile).verdict(CARDS[card], card if card in GPU_CARDS else None)


def verdicts(profile):
    """'yes' or 'no' for each card of CARDS."""
    return ["yes" if judged(profile, card).fits else "no" for card in CARDS]


# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
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
lora = apply_lora(llama, 16, ("q_proj", "v_proj"))
adapters = sum(p.numel() for p in lora.parameters() if p.requires_grad)
h, q_out, v_out = c.hidden_size, c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
assert adapters == c.num_hidden_layers * 16 * ((h + q_out) + (h + v_out))  # rank x (in + out), q and v, 32 layers
print(f"Llama-3.1 8B: {P8:,} parameters; LoRA of rank 16 on q_proj and v_proj trains {adapters:,} of them "
      f"({adapters / P8:.2%})")

# %% [markdown]
# LoRA trains less than a thousandth of the model: its adapters' float32 weights, gradients and AdamW's states (16 bytes per trained parameter, lesson 05a) are about 100 MiB. The base weights stay, frozen, in the dtype they were loaded in (2 bytes per parameter in bfloat16, 15 GiB here), or, with QLoRA (Dettmers et al., 2023), in 4-bit NF4 with their quantization constants. What no parameter count shows is the activations: LoRA's forward pass runs the whole model, and its backward pass goes through every layer to reach the first adapters.
#
# ## 2. Full fine-tuning, LoRA, QLoRA: where the peak is
#
# One training step of Llama-3.1 8B, batch 1, 2,048 tokens, under bfloat16 autocast with AdamW, no checkpointing: full fine-tuning with float32 weights (PyTorch's default, lesson 05a's 16 bytes per parameter), LoRA of rank 16 on a bfloat16 base, and QLoRA, the same LoRA on an NF4 base:

# %%
methods = {
    "full fine-tuning (float32 weights)": profile_step(L8, 1, seq_len=2048, **STEP),
    "LoRA r16 (bfloat16 base)": profile_step(L8, 1, seq_len=2048, lora_rank=16, param_dtype="bfloat16", **STEP),
    "QLoRA r16 (NF4 base)": profile_step(L8, 1, seq_len=2048, lora_rank=16, quantization="nf4",
                                         double_quant=True, param_dtype="bfloat16", **STEP),
}
full, lora16, qlora16 = methods.values()
plot_finetune_peaks(methods, CARDS, title="Llama-3.1 8B, batch 1 x 2,048 tokens, bfloat16 autocast, AdamW")

# %% [markdown]
# Look at the three bars against the three dashed lines, each a card's memory less the assumed 1 GiB overhead: full fine-tuning's bar, four colours wide, passes every card; LoRA's and QLoRA's are mostly blue (the frozen weights) and green (what the forward pass keeps for backward), with almost no orange or purple. Full fine-tuning peaks at `optimizer.step()`, the two others in backward. The same, with the verdicts:

# %%
print(f"{'method':<36} {'peak':>10}  {'where':<18} {'24 GB':>6} {'48 GB':>6} {'80 GB':>6}")
for label, p in methods.items():
    where = "optimizer.step()" if p.peak.label == "optimizer.step()" else "backward"
    print(f"{label:<36} {gib(p.peak_allocated_bytes):>10}  {where:<18} " + " ".join(f"{v:>6}" for v in verdicts(p)))
assert full.peak.label == "optimizer.step()" and "backward" in lora16.peak.label and "backward" in qlora16.peak.label
assert verdicts(full) == ["no", "no", "no"] and round(full.model_state_bytes / P8, 2) == 16.0
linear = P8 - 2 * c.vocab_size * h - (2 * c.num_hidden_layers + 1) * h  # the decoder layers' linear weights
nf4 = linear * (0.5 + 1 / 64 + 4 / (64 * 256))  # 4-bit codes, a uint8 scale per 64, a float32 one per 256 of those
bf16_rest = 2 * (P8 - linear)                   # embedding, LM head and norms stay bfloat16
assert abs(qlora16.categories["parameters"] - nf4 - bf16_rest - 4 * adapters) < 0.001 * nf4
assert round(bf16_rest / GiB, 1) == 2.0 and round(2 * bf16_rest / GiB, 1) == 3.9  # in bfloat16; in float32
assert round(qlora16.categories["parameters"] / GiB, 1) == 5.3 and round(nf4 / linear, 2) == 0.52
assert round((lora16.categories["activations"] - qlora16.categories["activations"]) / GiB, 1) == 0.5


def inputs_at_peak(profile):
    """How many bfloat16 tensors of one layer's input shape, (1, 2,048, hidden), are alive at the peak."""
    alive = set(profile.peak_serials)
    return sum(1 for st in profile.storages.values() if st.serial in alive and st.dtype == torch.bfloat16
               and tuple(st.shape) == (1, 2048, h))


copies = inputs_at_peak(lora16) - inputs_at_peak(qlora16)
assert copies == c.num_hidden_layers and inputs_at_peak(qlora16) == c.num_hidden_layers  # one more per layer
assert copies * 2048 * h * 2 == lora16.categories["activations"] - qlora16.categories["activations"]

# %% [markdown]
# Full fine-tuning needs 149.6 GiB at `optimizer.step()`: 30 GiB each of float32 weights and gradients, 60 GiB of AdamW's two float32 moments (lesson 05a's 16 bytes per parameter), and 30 GiB of the `foreach` step's temporaries. None of the three cards holds it, at any sequence length (section 4 shows what does). LoRA removes the gradients and the states of the 8 billion frozen weights: its peak moves to backward, where the bfloat16 weights (15 GiB) sit beside the activations, and it fits 48 GB. QLoRA stores the frozen linear weights of the 32 layers in 4 bits plus their scales. Here they are bitsandbytes' `Linear4bit`, as most QLoRA users run it: Hugging Face's `BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)`, the QLoRA paper's recipe (`quantization="nf4", double_quant=True` here). Double quantization stores the 4-bit codes, a uint8 scale per 64 weights and a float32 scale per 256 of those: about 0.52 bytes per weight (asserted). Without it, Hugging Face's default, every scale is float32: 0.5 + 4/64 ≈ 0.56 bytes. torchao's `NF4Tensor`, which torchtune's QLoRA recipes use (`quantization="torchao-nf4"`), also stores about 0.52 bytes per weight. That makes 5.3 GiB of parameters, of which 2.0 GiB are the embedding and the LM head, still bfloat16 (asserted); peft's `prepare_model_for_kbit_training`, the usual step before QLoRA with bitsandbytes, casts every parameter that is not 4-bit to float32, which makes them 3.9 GiB (asserted); TRL's `SFTTrainer` and the QLoRA paper's script then cast the embedding and the head back to bfloat16 (the course's option `bf16_embeddings=True` models those casts; neither library has an argument of that name). It fits 24 GB. QLoRA's green part is also 0.5 GiB smaller than LoRA's (asserted), and the trace says what it is: 32 more bfloat16 tensors of one layer's input shape, (1, 2,048, 4,096), one per layer. LoRA's `lora.Linear` casts each adapted layer's input to the adapters' float32, and autocast casts it back to bfloat16 for `lora_A`'s product: the float32 copy is freed at once, and `lora_A` saves its own bfloat16 copy for backward, so q_proj and v_proj keep two copies of the same input. peft's `lora.bnb.Linear4bit`, which wraps a 4-bit layer, gives its adapters the input as it is, and both save that one tensor. (Without autocast, section 3's setup, the float32 copy is what `lora_A` keeps.) In both, the green part is now as large as the weights or larger: at 2,048 tokens the activations are what is left to remove.
#
# ## 3. Why LoRA can take as much memory as full fine-tuning, or more
#
# peft issue #1514, *Tinyllama with Lora consumes more memory than full-finetuning* (2024), trains TinyLlama 1.1B in bfloat16 (loaded with `torch_dtype=torch.bfloat16`, no autocast) with PyTorch's AdamW and FlashAttention-2, batch 2 × 8,192 tokens, on an A100, with and without a LoRA adapter whose `print_trainable_parameters()` reads "trainable params: 50,462,720 || all params: 1,150,511,104". The reporter found the memory with and without LoRA about the same at long context, and far apart only at short context; a maintainer, trying 1,024 tokens in float16 without FlashAttention, found LoRA using less. The engine builds TinyLlama from its config's sizes, and the printed counts pin the adapter: rank 64 on all seven linear layers of each block.

# %%
TINYLLAMA = dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                 num_attention_heads=32, num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048,
                 rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
with torch.device("meta"):
    tiny = apply_lora(hf.build_causal_lm(TINYLLAMA), 64, ALL_LINEAR)
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
# Look at the pairs: at 2 × 1,024 tokens LoRA's bar is the shorter, as full fine-tuning peaks at `optimizer.step()` with AdamW's states (purple); at 2 × 8,192 both peak in backward, green activations fill both bars, and LoRA's is the longer. With today's peft the engine reproduces the report, title included (the end of this section says what the reporter's own version did). Where LoRA's extra activations come from, per token and layer:

# %%
h_t, inter = TINYLLAMA["hidden_size"], TINYLLAMA["intermediate_size"]
full_inputs = 2 * (h_t + h_t + h_t + inter)      # bfloat16 inputs of q/k/v (one), o, gate/up (one), down: once each
lora_inputs = 4 * (3 * h_t + h_t + 2 * h_t + inter) + 4 * 7 * 64  # a float32 copy of its input in each of the 7
                                                                  # adapted layers, and lora_A's rank-64 outputs
f8, l8 = issue["full fine-tuning, 2 x 8,192"], issue["LoRA r64 all linear, 2 x 8,192"]
grown = (l8.categories["activations"] - f8.categories["activations"]) / (2 * 8192 * TINYLLAMA["num_hidden_layers"])
print(f"linear-layer inputs kept per token and layer: full fine-tuning {full_inputs:,} bytes, LoRA {lora_inputs:,}; "
      f"the engine's activations grow by {grown:,.0f}")
for seq in (1024, 8192):
    f, l = issue[f"full fine-tuning, 2 x {seq:,}"], issue[f"LoRA r64 all linear, 2 x {seq:,}"]
    assert (l.peak_allocated_bytes < f.peak_allocated_bytes) == (seq == 1024)
predicted = lora_inputs - full_inputs
assert 0.85 < grown / predicted < 0.95

# %% [markdown]
# Three things decide the comparison:
#
# - **What LoRA removes**: the gradients and AdamW's states of the frozen weights (bfloat16 here, 2 + 4 bytes per parameter, 6.1 GiB), not the weights themselves, and not the activations: backward must go through every layer to reach the first adapters.
# - **What LoRA adds**: peft keeps the adapters in float32 (`get_peft_model(..., autocast_adapter_dtype=True)`, its default) and casts each adapted layer's input to the adapter's dtype (`_cast_input_dtype`, peft 0.21.2's `tuners/lora/layer.py`). `lora_A` keeps that float32 copy for its weight's gradient, one copy per adapted layer: q, k and v each keep their own copy of the same input, which full fine-tuning keeps once, in bfloat16. A frozen base layer keeps no input (it computes no weight gradient; bitsandbytes' 4-bit layers kept theirs until version 0.43.2, pull request #1270 of July 2024, so figures published with older versions include them). The count above predicts 49,920 bytes more per token and layer; the engine measures 45,079 more, the net of these copies and of smaller tensors that differ elsewhere in the layer.
# - **Which wins** depends on the tokens: the model states are fixed, the activations grow with batch × sequence. At 2 × 1,024 the saved states weigh more; at 2 × 8,192 the added activations do.
#
# What the thread shows is narrower. Its reporter ran peft 0.8.2, which made the adapters in the base weight's dtype when that dtype is a floating-point one (its `LoraLayer.update_layer` calls `self.to(weight.device, dtype=weight.dtype)`), bfloat16 here, so that version kept none of these float32 copies: float32 adapters became peft's default in 0.12 (pull request #1706). Here `lora_dtype="bfloat16"` makes the adapters bfloat16, as that version did (and as `autocast_adapter_dtype=False` does today on a bfloat16 base); the engine reproduces the copies' absence, not the reporter's unstated adapter config. QLoRA with bitsandbytes keeps no such copy either way under autocast: peft's wrapper of a 4-bit layer (`lora.bnb.Linear4bit`) casts the input only when autocast is off. The reporter did not post the adapter's config, so what made their LoRA as large is not in the thread; dropout is one candidate (a `lora_dropout` above 0 makes each adapted layer keep a dropped copy of its input and a mask). The mechanism is the one LoRA-FA's author states in peft pull request #2468: against full fine-tuning, LoRA reduces only the gradients and optimizer states, and since A is trained, its input must be kept; LoRA-FA freezes A to avoid that. peft issue #1023 (ESM-2 with QLoRA) is another case: there a maintainer measured *less allocated* memory with LoRA than with full fine-tuning but *more reserved*, the caching allocator's share (lesson 06), which the widget's "reserved" view judges by.
#
# ## 4. Fused and 8-bit AdamW, bfloat16, offloading, checkpointing
#
# Back to Llama-3.1 8B at 2,048 tokens. Each technique removes or shrinks parts of section 2's bars:
#
# - **Fused AdamW** (`torch.optim.AdamW(..., fused=True)`; the Hugging Face Trainer's default optimizer, `adamw_torch_fused`, with PyTorch 2.8 or later): one kernel updates each parameter and its two moments in place, without the `foreach` step's temporaries.
# - **8-bit AdamW** (Dettmers et al., 2021; torchao's `AdamW8bit` here) stores each moment in 8 bits with a scale per block of values: about 2 bytes of states per parameter instead of 8.
# - **bfloat16 weights and states**: the model loaded and trained in bfloat16. `torch.optim.AdamW` makes its moments in the parameters' dtype, so every term of the 16 bytes halves.
# - **Offloading the optimizer states** (torchao's `CPUOffloadOptimizer`): the states live in host memory and the step runs on the CPU; the GPU keeps the weights and the gradients. A *paged* optimizer (bitsandbytes' `PagedAdamW`) is another thing: its states live in CUDA unified memory, which the driver moves to host memory only when the GPU runs short and back when the step touches them. What that costs is the driver's paging under pressure, time rather than bytes, and `torch.cuda.memory_allocated` does not see those states at all. The engine's `optimizer="paged-adamw"` allocates them as bitsandbytes does (a parameter's states are paged from 100,000 elements on, smaller ones stay on the device) and reports the paged bytes beside the peak (`profile.paged_bytes`), outside it; when the driver moves them is what a count of allocations cannot show.
# - **Gradient checkpointing** the Hugging Face way (`model.gradient_checkpointing_enable()`): every decoder layer keeps only its input, and recomputes the rest in backward (lesson 04).

# %%
at2k = dict(seq_len=2048, **STEP)
techniques = {
    "full, AdamW": full,
    "full, fused AdamW": profile_step(L8, 1, fused=True, **at2k),
    "full, 8-bit AdamW": profile_step(L8, 1, **(at2k | dict(optimizer="adamw8bit"))),
    "full, bfloat16 weights and states": profile_step(L8, 1, param_dtype="bfloat16", **at2k),
    "full, bfloat16, states offloaded, checkpointing": profile_step(
        L8, 1, param_dtype="bfloat16", optimizer_offload=True, checkpoint=1, **at2k),
    "LoRA r16, checkpointing": profile_step(L8, 1, lora_rank=16, param_dtype="bfloat16", checkpoint=1,
                                                        **at2k),
    "QLoRA r16, checkpointing": profile_step(L8, 1, lora_rank=16, quantization="nf4", double_quant=True,
                                             param_dtype="bfloat16", checkpoint=1, **at2k),
}
plot_finetune_peaks(techniques, CARDS, title="Llama-3.1 8B, batch 1 x 2,048 tokens: what each technique changes")

# %% [markdown]
# Look at what each bar lost against the one it comes from. Fused AdamW loses the grey part, the `foreach` step's temporaries (4 bytes per parameter), and its peak moves to backward, where the activations sit beside the weights and states: its bar still passes every card's line. 8-bit AdamW shrinks the purple states to a quarter and the peak moves to backward, where green activations (autocast's cached bfloat16 copies of the float32 weights among them, lesson 08) now sit beside the weights, gradients and states: it fits 80 GB. bfloat16 weights and states halve every part of the first bar and fit 80 GB too; what they cost is precision, not bytes: a bfloat16 number keeps 8 significant bits, so an update smaller than about 1/256 of a weight is rounded away (asserted below), which is why mixed-precision training updates a float32 master copy of the weights (lesson 05a counts its bytes). Offloading removes the purple altogether; with bfloat16 weights and checkpointing, only the weights and gradients are left, 2 + 2 bytes per parameter, and full fine-tuning fits 48 GB. Checkpointing shortens LoRA's and QLoRA's green parts to a sliver: LoRA fits 24 GB, and QLoRA needs a third of it.

# %%
eight, offloaded = techniques["full, 8-bit AdamW"], techniques["full, bfloat16, states offloaded, checkpointing"]
fused, half = techniques["full, fused AdamW"], techniques["full, bfloat16 weights and states"]
assert abs(full.categories["other"] - 4 * P8) < GiB and "backward" in fused.peak.label  # the temporaries, then none
assert all(abs(half.categories[c] - full.categories[c] / 2) < GiB  # every part of the first bar halved
           for c in ("parameters", "gradients", "optimizer_states", "other"))
one = torch.tensor(1.0, dtype=torch.bfloat16)
assert one + 2**-9 == one and one + 2**-7 > one  # an update of 1/512 of a weight is lost, one of 1/128 is not
assert abs(eight.categories["optimizer_states"] / P8 - 2) < 0.05 and "backward" in eight.peak.label
assert offloaded.categories["optimizer_states"] == 0
assert abs(offloaded.categories["parameters"] / P8 - 2) < 0.01 and abs(offloaded.categories["gradients"] / P8 - 2) < 0.01
ckpt_lora, ckpt_qlora = techniques["LoRA r16, checkpointing"], techniques["QLoRA r16, checkpointing"]
print(f"{'':<50} {'peak':>10}  {'24 GB':>6} {'48 GB':>6} {'80 GB':>6}")
for label, p in list(techniques.items())[1:]:
    print(f"{label:<50} {gib(p.peak_allocated_bytes):>10}  " + " ".join(f"{v:>6}" for v in verdicts(p)))
assert verdicts(eight) == ["no", "no", "yes"] and verdicts(offloaded) == ["no", "yes", "yes"]
assert verdicts(fused) == ["no", "no", "no"] and verdicts(half) == ["no", "no", "yes"]
assert verdicts(ckpt_lora) == ["yes"] * 3

# %% [markdown]
# In bytes per parameter (lesson 05a), each technique takes one term away: 8-bit states 8 → 2, offloading 8 → 0 (and the `foreach` step's temporaries with them, since the step runs on the CPU), bfloat16 weights 4 + 4 → 2 + 2 for the weights and gradients, LoRA the gradients and states of the frozen weights, QLoRA 2 → about 0.5 for the frozen weights themselves. Checkpointing is the only one that removes activations. What each costs is time: a second forward pass of every layer (checkpointing), traffic to host memory at each step (offloading), the 4-bit weights dequantized at every use (QLoRA); the engine counts bytes, not seconds.
#
# ## Exercises
#
# **Exercise 1: LoRA on every linear layer.** peft's default adapts `q_proj` and `v_proj`; many recipes adapt all seven linear layers of each block (`ALL_LINEAR` above). For Llama-3.1 8B at rank 16, how many parameters does that train, and how much higher is the peak of section 4's "LoRA r16, checkpointing" step? Explain the difference from section 3.

# %%
# Your code here: profile_step(L8, 1, lora_rank=16, lora_targets=ALL_LINEAR, param_dtype="bfloat16", checkpoint=1, **at2k)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# all_linear = profile_step(L8, 1, lora_rank=16, lora_targets=ALL_LINEAR, param_dtype="bfloat16", checkpoint=1, **at2k)
# with torch.device("meta"):
#     trained = sum(p.numel() for p in apply_lora(hf.build_causal_lm(L8), 16, ALL_LINEAR).parameters()
#                   if p.requires_grad)
# qv = techniques["LoRA r16, checkpointing"]
# extra = all_linear.peak_allocated_bytes - qv.peak_allocated_bytes
# print(f"{trained:,} trained parameters ({trained / P8:.2%}); the peak grows by {gib(extra)}")
# assert trained == 16 * c.num_hidden_layers * (2 * (h + q_out) + 2 * (h + v_out) + 3 * (h + c.intermediate_size))
# assert abs(extra - 12 * (trained - adapters)) < 0.1 * extra
# ```
#
# 41,943,040 parameters (0.52%), six times the q and v adapters, and 0.4 GiB more at the peak: the new adapters' float32 weights and AdamW's two moments, 12 bytes per trained parameter (their gradients do not exist yet at the peak, the start of backward). With checkpointing, the adapters' own input copies (section 2's bfloat16 ones, under autocast) exist only for the one layer being recomputed, so adapting every layer costs almost nothing here; without it, every layer would keep them.
# </details>
#
# **Exercise 2: without double quantization.** Hugging Face's `BitsAndBytesConfig` quantizes the scales only when asked (`bnb_4bit_use_double_quant=False` is its default): each block of 64 weights then keeps a float32 scale. For section 4's "QLoRA r16, checkpointing" step, how many bytes does a 4-bit linear weight take without double quantization, how much higher is the peak, and which cards does the step still fit? Use section 2's `linear`, `bf16_rest` and `adapters`.

# %%
# Your code here: profile_step(L8, 1, lora_rank=16, quantization="nf4", double_quant=False, param_dtype="bfloat16", checkpoint=1, **at2k)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# single = profile_step(L8, 1, lora_rank=16, quantization="nf4", double_quant=False, param_dtype="bfloat16",
#                       checkpoint=1, **at2k)
# per_weight = (single.categories["parameters"] - bf16_rest - 4 * adapters) / linear
# extra = single.peak_allocated_bytes - ckpt_qlora.peak_allocated_bytes
# print(f"{per_weight:.4f} bytes per linear weight; the peak grows by {extra / 2**20:,.0f} MiB to "
#       f"{gib(single.peak_allocated_bytes)}; fits 24, 48, 80 GB: {verdicts(single)}")
# saved = 4 / 64 - (1 / 64 + 4 / (64 * 256))  # a float32 scale per 64, against a uint8 one and a float32 per 256 of those
# assert round(per_weight, 2) == 0.56 and abs(extra - saved * linear) < 0.002 * extra
# assert round(extra / 2**20) == 310 and verdicts(single) == ["yes", "yes", "yes"]
# ```
#
# 0.5625 bytes (0.5 for the 4-bit code and 4/64 for a float32 scale per 64 weights), against about 0.52 with double quantization: 0.047 bytes more for each of the 32 layers' 7 billion linear weights, 310 MiB, which the peak grows by as the parameters do. The step, 8.7 GiB, still fits all three cards: at 8B, double quantization saves a few percent of QLoRA's peak; what decides a card is the activations and the logits (lesson 09b).
# </details>
#
# ## Key points
#
# - A 7-8B model's config decides every tensor: the engine builds it on the meta device and counts a step without the weights or a GPU.
# - Full fine-tuning with float32 weights and AdamW needs 16 bytes per parameter plus 4 at the `foreach` step (150 GiB for Llama-3.1 8B), more than an 80 GB card. Fused AdamW removes the 4; 8-bit states shrink the 8 bytes of states to 2 and offloading removes them; bfloat16 weights and states halve every term and fit Llama-3.1 8B in 80 GB, at the cost of updates too small for bfloat16.
# - LoRA removes the gradients and optimizer states of the frozen weights, not the weights and not the activations; peft's copies of each adapted layer's input (float32 without autocast, bfloat16 under it) can make its activations larger than full fine-tuning's, so at long sequences LoRA can need more (peft issue #1514, reproduced with today's peft). QLoRA stores the frozen linear weights in about 0.52 bytes each.
# - Checkpointing is the only technique here that removes activations: with it, LoRA of Llama-3.1 8B fits a 24 GB card at 2,048 tokens, and QLoRA needs a third of it.
#
# ## Further reading
#
# - E. J. Hu et al., *LoRA: Low-Rank Adaptation of Large Language Models*, 2021, arXiv:2106.09685.
# - T. Dettmers, A. Pagnoni, A. Holtzman, L. Zettlemoyer, *QLoRA: Efficient Finetuning of Quantized LLMs*, 2023, arXiv:2305.14314.
# - T. Dettmers, M. Lewis, S. Shleifer, L. Zettlemoyer, *8-bit Optimizers via Block-wise Quantization*, 2021, arXiv:2110.02861.
# - peft issues #1514 (*Tinyllama with Lora consumes more memory than full-finetuning*) and #1023 (*ESM-V2 + QLoRa: high memory usage*); peft pull request #2468 (LoRA-FA).
# - Documentation: peft (`LoraConfig`, `get_peft_model`, `lora.bnb.Linear4bit`, `prepare_model_for_kbit_training`), transformers (`gradient_checkpointing_enable`, `BitsAndBytesConfig`), torchao (`NF4Tensor`, `AdamW8bit`, `CPUOffloadOptimizer`), bitsandbytes (`Linear4bit`, paged optimizers), PyTorch (`torch.optim.AdamW`'s `foreach` and `fused`).
#
# Lesson 09b continues with the same steps at longer sequences and larger batches: the longest sequence each card holds and what its logits cost, the fine-tuning widget, and published real-GPU figures beside the engine's.
