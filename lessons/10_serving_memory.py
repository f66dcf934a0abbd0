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
# # 10 · Serving memory: the KV cache, vLLM's start-up account, and how many requests fit
#
# **Questions**
# - When an 8B model generates text, where does its memory go: the weights, the KV cache, the prefill, the decode steps, the logits?
# - How many bytes does one token of KV cache take, and why do two models of the same size differ by four times?
# - What does vLLM do with the card's memory when it starts, and what is the "Maximum concurrency" it logs?
# - How many requests of 4k, 32k and 128k tokens fit on a 24, 48 or 80 GB card?
# - Why do 4-bit weights, `max_num_batched_tokens` and `max_model_len` change the answer?
# - How close is a simulation to what vLLM itself logs when it starts?
#
# **Objectives**
# - Trace greedy generation of Llama-3.1 8B with `transformers` and read its timeline: prefill against decode, the KV cache per token and per request.
# - Compute the KV cache's bytes per token from a config (layers, KV heads, head size, dtype) for six models, and what an fp8 cache changes.
# - Reproduce vLLM's start-up account of a card (weights, the profile run's activation peak, non-torch memory, the KV cache) and its block count.
# - Find how many requests fit each card at three context lengths, and which settings free memory for more.
# - Set the engine's accounts beside thirteen published vLLM start-up logs, and say where and why they differ.
#
# **Time:** about 75 minutes alone: 33 of reading, 16 of code, 6 for the figures, 1 to run all, 20 for the three exercises. **GPU:** not needed (memory simulated on fake tensors: nothing is downloaded, no weight is allocated). Memory is in GiB (2³⁰ bytes), as vLLM logs it; a card's GB (10⁹ bytes) is named as its maker names it. The minute to run all is CPU time (the instructor guide's method): a busy machine takes longer.
#
# Lesson 08b (section 3: the KV cache's formula, 128 KiB per token for Llama-3 8B) comes first; lesson 09 builds Llama-3.1 8B from its config the same way. Lesson 10b continues with a model larger than one card and the serving widget.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import torch

from helpers import GPU_CARDS, GiB, MiB
from helpers.generation import generation_memory
from helpers.models import hf
from helpers.serving import WouldNotStart, kv_bytes_per_token, vllm_startup
from helpers.teaching.plots import (plot_activation_peak, plot_concurrency, plot_engine_beside_logs,
                                    plot_generation_timeline, plot_startup_accounts)
from helpers.teaching.plots.serving import kv_ratio
from helpers.teaching.vllm_logs import engine_beside_logs
from helpers.teaching.widgets import CARD_48GB

_ = torch.manual_seed(0)
L8 = "meta-llama/Llama-3.1-8B"
#: The cards of this lesson (as lesson 09): GPU_CARDS' 24 and 80 GB cards and an RTX A6000 48 GB, each its CUDA total.
CARDS = {"RTX 4090 24 GB": GPU_CARDS["RTX 4090 24 GB"], **CARD_48GB, "H100 80 GB": GPU_CARDS["H100 80 GB"]}


def gib(nbytes):
    """Bytes as GiB with two decimals, as vLLM logs them."""
    return f"{nbytes / GiB:.2f} GiB"


def start(model=L8, card="H100 80 GB", **options):
    """vLLM's start-up account of `model` on one card of CARDS (one GPU's, over several); the account even where
    vLLM would not start."""
    try:
        return vllm_startup(model, gpu=card if card in GPU_CARDS else CARDS[card], **options)
    except WouldNotStart as refused:
        return refused.account


# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
import transformers

print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# ## 1. Generating with `transformers`: weights, prefill, decode
#
# `model.generate` runs in two phases. The **prefill** runs the whole prompt through the model once and keeps every layer's keys and values for it: the **KV cache**. Each **decode** step then runs one new token per sequence, which attends to the cache and appends its own keys and values. `generation_memory` traces greedy generation as `transformers`' `GenerationMixin._sample` runs it, with a `DynamicCache`, under `torch.inference_mode()`, in bfloat16. Llama-3.1 8B, 8 prompts of 4,096 tokens, 16 new tokens each:

# %%
gen = generation_memory(L8, 4096, new_tokens=16, batch_size=8)
plot_generation_timeline(gen, title="Llama-3.1 8B in bfloat16: generate(), 8 prompts of 4,096 tokens, 16 new tokens")

# %% [markdown]
# Look at the bars: the weights (blue) are there before anything runs and never change; the prefill adds the KV cache (vermillion) and, at its peak, a green part that is gone once it ends; each decode step then adds a sliver of cache and a thin green part. The figures:

# %%
c8 = hf.load_config(L8)
per_token = kv_bytes_per_token(L8)
tokens_kept = gen.prompt_len + gen.new_tokens - 1  # the last new token's keys and values are never computed
prefill_extra = gen.timeline[1][2] - gen.timeline[1][1]
decode_extra = gen.timeline[2][2] - gen.timeline[2][1]
layer_keys = gen.batch_size * gen.prompt_len * c8.num_key_value_heads * c8.head_dim * 2  # one layer's keys, bfloat16
print(f"weights {gib(gen.weights_bytes)}; KV cache {gib(gen.kv_cache_bytes)} "
      f"({per_token // 1024} KiB per token, {gib(4096 * per_token)} per request of 4,096 tokens)")
print(f"prefill peak {gib(gen.prefill_peak_bytes)}: {gib(prefill_extra)} held only during it; "
      f"decode peak {gib(gen.decode_peak_bytes)}: {decode_extra / MiB:.0f} MiB held only during a step")
assert abs(gen.weights_bytes - 2 * hf.SHIPPED[L8].parameters) < MiB        # 2 bytes a parameter (and buffers)
assert gen.kv_cache_bytes == gen.batch_size * tokens_kept * per_token      # lesson 08b's formula, in a real cache
assert per_token == 2 * c8.num_hidden_layers * c8.num_key_value_heads * c8.head_dim * 2 == 128 * 1024
assert 0.98 < decode_extra / layer_keys < 1.02                             # torch.cat: one layer's old keys
assert 110 * 1024 < prefill_extra / (gen.batch_size * gen.prompt_len) < 120 * 1024  # per prompt token
assert gen.prefill_peak_bytes > gen.decode_peak_bytes

# %% [markdown]
# The weights take 14.96 GiB, two bytes for each of 8,030,261,248 parameters. The KV cache grows by 128 KiB per token, all 32 layers together, exactly lesson 08b's **2 · layers · KV heads · head size · bytes per value**: a request of 4,096 tokens holds 0.50 GiB, and these 8 hold 4.01 GiB. The peak is the **prefill**: its forward pass of 32,768 tokens holds 3.63 GiB of activations at once, about 116 KiB per prompt token (asserted), almost as much as the token's own cache. A **decode** step's forward of 8 tokens holds almost nothing; what it adds, 64 MiB, is one layer's keys: `DynamicCache` grows each layer with `torch.cat`, so for a moment the layer's old and new keys are both alive. (A `StaticCache` allocates each layer's keys and values for `prompt + new` tokens when the prefill first reaches the layer, and writes into them in place.)
#
# One thing is almost missing from the green part: the **logits**. `generate` passes `logits_to_keep=1` to the model (`GenerationMixin`, `transformers/generation/utils.py`), so the prefill computes the vocabulary's 128,256 scores for the last position only, and `_sample` copies them to float32 (`outputs.logits[:, -1].to(copy=True, dtype=torch.float32)`). A plain forward pass over the prompts, `model(input_ids)`, computes them for every position (`logits="all"`):

# %%
plain = generation_memory(L8, 4096, new_tokens=2, batch_size=8, logits="all")
all_logits = gen.batch_size * gen.prompt_len * c8.vocab_size * 2  # bfloat16, every position
after_prefill = plain.timeline[1][1]
print(f"prefill peak with every position's logits: {gib(plain.prefill_peak_bytes)} "
      f"(generate's: {gib(gen.prefill_peak_bytes)}); the logits alone: {gib(all_logits)}")
assert after_prefill == gen.timeline[1][1]  # the same cache afterwards
assert 1.0 < (plain.prefill_peak_bytes - after_prefill) / all_logits < 1.05
assert 1.9 < all_logits / gen.kv_cache_bytes < 2

# %% [markdown]
# Every position's logits take 7.83 GiB here, almost twice the 8 requests' KV cache (asserted), and the prefill's peak moves to the LM head: 27.04 GiB instead of 22.58. The layers' activations are gone by then; the logits are not, until the forward returns them. That is why `generate` asks for the last position only, and why a serving engine computes one row of logits per request.
#
# ## 2. The KV cache's bytes per token, from the config
#
# Every term of the formula comes from `config.json`: `num_hidden_layers`, `num_key_value_heads` (grouped-query attention: fewer KV heads than query heads; without the key, as many as `num_attention_heads`), the head size (`head_dim`, else `hidden_size // num_attention_heads`) and the dtype. `kv_bytes_per_token` reads them as vLLM does. The six configs that ship with the course:

# %%
print(f"{'model':<28} {'layers':>6} {'query/KV heads':>14} {'head':>5} {'KiB/token':>10} {'fp8':>6} "
      f"{'a 32k request':>14}")
kv = {}
for name in hf.SHIPPED:
    cfg = hf.load_config(name)
    heads, kv_heads = cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    kv[name] = kv_bytes_per_token(name)
    assert kv[name] == 2 * cfg.num_hidden_layers * kv_heads * head * 2
    assert kv_bytes_per_token(name, kv_cache_dtype="fp8") * 2 == kv[name]  # one byte a value instead of two
    print(f"{name:<28} {cfg.num_hidden_layers:>6} {f'{heads}/{kv_heads}':>14} {head:>5} {kv[name] / 1024:>10g} "
          f"{kv[name] / 2048:>6g} {gib(32768 * kv[name]):>14}")
assert kv["meta-llama/Llama-2-7b-hf"] == 4 * kv[L8] and kv["Qwen/Qwen2.5-7B"] * 16 == kv[L8] * 7

# %% [markdown]
# Llama-2 7B is smaller than Llama-3.1 8B but its cache is four times larger: each of its 32 query heads has its own keys and values, where Llama-3.1 shares 8 KV heads among 32 (lesson 08b, exercise 2, imagined this; Llama-2 is the real model). Qwen2.5 7B keeps 4 KV heads in 28 layers: 56 KiB a token, 7/16 of Llama-3.1's. LLaMA 65B, without grouped-query attention, needs 2.5 MiB a token: 5 GiB for one request of its 2,048 positions, and 32k tokens would take 80 GiB. The cache depends on layers × KV heads × head size, not on the parameter count.
#
# An **fp8 KV cache** (`--kv-cache-dtype fp8` in vLLM) stores each key and value in one byte instead of two: the same memory holds twice the tokens. vLLM's page of a layer counts `2 × block_size × KV heads × head size × bytes per value` (`AttentionSpec.page_size_bytes`, `vllm/v1/kv_cache_interface.py`), so halving the bytes doubles the blocks; the weights and the profile run do not change. The price is precision: each key and value is stored as an 8-bit float, with one scale per layer's keys and one per its values in v0.11 (vLLM's *Quantized KV Cache* page).
#
# ## 3. vLLM's start-up account
#
# A server keeps many requests' caches at once, each growing and ending at its own time. vLLM (Kwon et al., SOSP 2023) stores them in **blocks** of 16 tokens (*PagedAttention*): a request takes a block when its tokens fill the last one and returns them all when it ends, so no request reserves memory for tokens it never produces. The blocks are allocated once, at start-up, in one pool, sized by what is left of the card. vLLM v0.11's `Worker.determine_available_memory` (`vllm/v1/worker/gpu_worker.py`) computes, per GPU:
#
# - the **requested** memory, `total × gpu_memory_utilization` (0.9 by default), where total is what CUDA reports for the card;
# - the **weights**, measured as the memory allocated while loading them;
# - the **activation peak** of a *profile run*: one forward pass of the largest batch vLLM will schedule, `max_num_batched_tokens` tokens, then the sampler on one row of logits per request; the peak allocated above what was allocated before it (the weights);
# - the **non-torch memory**: what the GPU's used memory grew by outside PyTorch's allocator (cuBLAS and NCCL state, other libraries' workspaces). No simulation of tensors sees it: `vllm_startup` **assumes** 0.16 GiB, what a released vLLM logged for a small model on one 80 GB GPU (mellea pull request #416; an H100, by its 79.19 GiB total). The v0.19 logs of section 7 show 0.24 to 0.25 GiB for 7-8B models (asserted there): the engine's cache may be up to 0.09 GiB too large;
# - the **KV cache**: the rest, `requested − (weights + activation peak + non-torch)`, cut into whole blocks.
#
# Two things are not in the account. The CUDA context existed before vLLM took its first measurement, and the CUDA graphs that vLLM captures after the profile run (unless `enforce_eager`) are made after it: both live in the tenth of the card that `gpu_memory_utilization` keeps back. (v0.19 can estimate the graphs during profiling and take them from the cache instead, with `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`; the engine simulates no graphs.)
#
# `vllm_startup` traces the weights and the profile run of the Hugging Face model on the simulated GPU, and does vLLM's arithmetic; `lines()` writes the account in vLLM's terms. Llama-3.1 8B on an H100 with `max_model_len` 32,768 and every other option at its default:

# %%
h100 = start(max_model_len=32768)
print("\n".join(h100.lines()))
assert h100.weights_bytes == gen.weights_bytes and h100.non_torch_bytes == round(0.16 * GiB)
assert h100.available_kv_bytes == (h100.total_bytes * 0.9 - h100.weights_bytes - h100.activation_peak_bytes
                                   - h100.non_torch_bytes)
assert h100.num_blocks == int(h100.available_kv_bytes // (16 * per_token)) and h100.kv_tokens == 16 * h100.num_blocks
assert h100.max_concurrency == h100.num_blocks / (32768 // 16)
assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)  # v0.11's defaults on an H100
assert (h100.num_blocks, h100.kv_tokens, round(h100.activation_peak_bytes / GiB, 2)) == (27_804, 444_864, 1.85)

# %% [markdown]
# Of the H100's 79.19 GiB, vLLM may use 71.27; the weights take 14.96, the profile run 1.85 and the non-torch memory 0.16, and 54.31 GiB are left: 27,804 blocks of 16 tokens, 444,864 tokens of cache. "Maximum concurrency" is the blocks divided by those one request of `max_model_len` tokens needs: 13.6 requests of 32,768 tokens. The last line names what the account leaves out, as vLLM v0.19.0 does by default: the CUDA graphs (above). Shorter requests take fewer blocks, so more of them run at once, up to `max_num_seqs` (1,024 here). That 8,192 and 1,024 are `vllm serve`'s defaults on a card of 70 GiB or more that is not an A100, and 2,048 and 256 on the others (an A100 80 GB among them); the Python `LLM` class defaults to larger batches, 16,384 and 8,192 tokens (vLLM's `engine/arg_utils.py`). The same account on the three cards, and on the H100 with an fp8 cache:

# %%
accounts = {card: start(card=card, max_model_len=32768) for card in CARDS}
accounts["H100 80 GB, fp8 KV cache"] = fp8 = start(max_model_len=32768, kv_cache_dtype="fp8")
plot_startup_accounts(accounts, title="Llama-3.1 8B in bfloat16, vLLM v0.11's defaults, max_model_len 32,768")

# %% [markdown]
# Look at the bars: every card loses the same blue weights and the grey tenth that `gpu_memory_utilization` keeps back, so the vermillion KV cache is what grows with the card: 48,848 tokens on the 24 GB card, 222,640 on the 48 GB, 444,864 on the 80 GB, 9.1 times the 24 GB card's for 3.3 times its memory (asserted). The green profile run is thin on every card (0.51 GiB on the 24 GB card and 0.49 on the 48 GB, whose defaults are 2,048 tokens and 256 requests, 1.85 GiB on the H100's 8,192 and 1,024: the sampler's rows of logits, one per request, set them all; its top-k buffer has a row per streaming multiprocessor, up to one per request, and the 48 GB card has 84 of them to the 24 GB card's 128). The fp8 bar has the same parts and twice the tokens:

# %%
small = accounts["RTX 4090 24 GB"]
print(f"fp8 KV cache on the H100: {fp8.kv_tokens:,} tokens ({fp8.kv_tokens / h100.kv_tokens:.2f} times bfloat16's), "
      f"{fp8.max_concurrency:.1f} requests of 32,768 tokens")
assert fp8.num_blocks in (2 * h100.num_blocks, 2 * h100.num_blocks + 1)
assert [a.kv_tokens for a in accounts.values()] == [48_848, 222_640, 444_864, 889_744]
assert small.max_num_batched_tokens == 2048 and small.max_num_seqs == 256
assert round(h100.kv_tokens / small.kv_tokens, 1) == 9.1 and round(h100.total_bytes / small.total_bytes, 1) == 3.3

# %% [markdown]
# ## 4. How many requests fit: 4k, 32k, 128k tokens
#
# The pool is the same whatever `max_model_len` is (in v0.11 the profile run depends on `max_num_batched_tokens`, not on it); what changes is how many blocks one request may need. vLLM refuses to start when one request of `max_model_len` tokens does not fit in the pool (`check_enough_kv_cache_memory`, `vllm/v1/core/kv_cache_utils.py`):

# %%
LENGTHS = (4096, 32768, 131072)
grid = {card: {n: start(card=card, max_model_len=n) for n in LENGTHS} for card in CARDS}
concurrency = {card: {n: None if a.refusal else a.max_concurrency for n, a in row.items()}
               for card, row in grid.items()}
plot_concurrency(concurrency, title="Llama-3.1 8B in bfloat16 on vLLM v0.11: requests of max_model_len tokens at once")

# %% [markdown]
# Look at each group of bars: every step from 4k to 32k to 128k divides the requests by 8 or 4, on every card, and the 24 GB card drops under the dashed line of one request at 128k: vLLM would not start. In words:

# %%
refused = grid["RTX 4090 24 GB"][131072]
print(refused.refusal)
for card, row in concurrency.items():
    assert all(row[n] is None or abs(row[n] * n - grid[card][n].kv_tokens) < 16 for n in LENGTHS)  # tokens / length
assert [round(concurrency[card][4096]) for card in CARDS] == [12, 54, 109]
assert concurrency["RTX 4090 24 GB"][131072] is None and refused.kv_tokens == 48_848
assert round(concurrency["RTX A6000 48 GB"][131072], 1) == 1.7 and round(concurrency["H100 80 GB"][131072], 1) == 3.4

# %% [markdown]
# On the 24 GB card, 12 requests of 4k tokens fit, 1.5 of 32k, and 128k does not start: 16 GiB for one request, where 5.96 GiB are left beside the weights; the longest `max_model_len` it takes is 48,848 tokens. The 48 GB card holds 1.7 requests of 128k, the H100 3.4. Lowering `max_model_len` below the model's 131,072 positions frees no memory, but it lets vLLM start on the 24 GB card; and most requests are far shorter than it: with PagedAttention each takes only the blocks its tokens fill, so "Maximum concurrency" is the worst case, every request at full length.
#
# ## 5. Smaller weights: 8 and 4 bits
#
# On the 24 GB card the weights take 15 of the 21.6 GiB that vLLM may use: they, not the cache, are what a small card runs out of. vLLM loads bitsandbytes' formats (`--quantization bitsandbytes`, vLLM's *BitsAndBytes* page): a 16-bit checkpoint quantized to 4 bits as it loads, or a checkpoint quantized beforehand, in 4 bits or in LLM.int8()'s 8 bits. The linear layers' weights shrink; the embedding, the norms and the LM head stay bfloat16, and so do the KV cache and the activations. `vllm_startup(..., quantization="nf4")` or `"int8"`, at 32k tokens on the 24 GB card:

# %%
FORMATS = {"bfloat16": "none", "LLM.int8() (8 bits)": "int8", "NF4 (4 bits)": "nf4"}
quantized = {f"RTX 4090 24 GB, {label}": start(card="RTX 4090 24 GB", max_model_len=32768, quantization=q)
             for label, q in FORMATS.items()}
plot_startup_accounts(quantized, title="Llama-3.1 8B on a 24 GB card, max_model_len 32,768: the weights' format")

# %% [markdown]
# Look at the blue weights shrinking and the vermillion cache growing into their place, the rest unchanged, the green profile run too: the sampler sets it, not the forward pass where a 4-bit layer's weight is dequantized for its product. Requests of 32k tokens on each card:

# %%
by_format = {label: {card: start(card=card, max_model_len=32768, quantization=q) for card in CARDS}
             for label, q in FORMATS.items()}
print(f"requests of 32,768 tokens at once\n{'weights':<20} {'GiB':>6}" + "".join(f"{card:>18}" for card in CARDS))
for label, row in by_format.items():
    print(f"{label:<20} {row['H100 80 GB'].weights_bytes / GiB:>6.2f}"
          + "".join(f"{a.max_concurrency:>18.1f}" for a in row.values()))
nf4 = by_format["NF4 (4 bits)"]["RTX 4090 24 GB"]
head_and_embedding = 2 * c8.vocab_size * c8.hidden_size * 2  # bfloat16, untied
assert round(nf4.kv_tokens / small.kv_tokens, 1) == 2.6 and round(head_and_embedding / GiB, 2) == 1.96
assert all(abs(row["H100 80 GB"].weights_bytes - row["RTX 4090 24 GB"].weights_bytes) < MiB
           for row in by_format.values())
assert nf4.activation_peak_bytes == small.activation_peak_bytes  # the sampler's peak, above the forward's
assert 1.15 < by_format["NF4 (4 bits)"]["H100 80 GB"].max_concurrency / h100.max_concurrency < 1.2

# %% [markdown]
# 4-bit weights take 5.61 GiB instead of 14.96, of which 1.96 are the bfloat16 embedding and LM head (asserted): on the 24 GB card the cache holds 2.6 times the tokens, 3.8 requests of 32k instead of 1.5. On the H100 the same 9.3 GiB buy a sixth more: there the weights were a small part already. The format changes what a token costs to compute, not what it costs to keep: the KV cache stays bfloat16 unless `kv_cache_dtype` says otherwise.
#
# ## 6. The profile run and `max_num_batched_tokens`
#
# The profile run is the largest step vLLM will run: `max_num_batched_tokens` tokens of prompts and new tokens together (with chunked prefill, on by default in v0.11, a long prompt is split into chunks of at most that), spread over `min(max_num_batched_tokens, max_num_seqs)` requests, each giving the sampler one row of logits. Traced on the H100 at six values:

# %%
BUDGETS = (1024, 2048, 4096, 8192, 16384, 32768)
budget = {n: start(max_model_len=32768, max_num_batched_tokens=n) for n in BUDGETS}
rows_of_scores = h100.num_reqs * c8.vocab_size  # 1,024 requests' logits, 128,256 scores each
sampler_floor = rows_of_scores * (2 + 4 + 4 + 4) + 132 * c8.vocab_size * 4  # see below
plot_activation_peak({n: a.activation_peak_bytes for n, a in budget.items()}, floor=sampler_floor,
                     title="Llama-3.1 8B on an H100: the profile run's activation peak")

# %% [markdown]
# Look at the line: almost flat up to 16,384 tokens, just above the dashed line of the sampler's tensors, then up: at 32,768 tokens the forward pass is the larger. The numbers:

# %%
peak_at = {n: a.activation_peak_bytes for n, a in budget.items()}
forward_per_token = peak_at[32768] / 32768
print(f"the sampler's tensors: {gib(sampler_floor)}; the peak at 1,024 / 16,384 / 32,768 tokens: "
      + " / ".join(gib(peak_at[n]) for n in (1024, 16384, 32768))
      + f"; at 32,768: {forward_per_token / 1024:.1f} KiB a token of batch; KV cache at 2,048 / 8,192 / 32,768: "
      + " / ".join(f"{budget[n].kv_tokens:,}" for n in (2048, 8192, 32768)) + " tokens")
hidden_kept = {n: n * c8.hidden_size * 2 for n in BUDGETS}  # the forward's output, [tokens, 4096] in bfloat16
assert all(0 < peak_at[n] - sampler_floor - hidden_kept[n] < 20 * MiB for n in BUDGETS[:-1])
assert peak_at[32768] > sampler_floor + hidden_kept[32768] + GiB
assert 0.85 < forward_per_token / per_token < 0.95
lost = budget[8192].kv_tokens - budget[32768].kv_tokens
assert abs(lost - (peak_at[32768] - peak_at[8192]) / per_token) < 16 and lost == 14_704
assert budget[2048].kv_tokens - budget[8192].kv_tokens == 384

# %% [markdown]
# Two things decide the peak. Up to 16,384 tokens it is the sampler (vLLM v0.19.0's `_dummy_sampler_run`, traced as torch code): 1,024 requests (the H100's `max_num_seqs`) × 128,256 scores, each kept four times at once, as the bfloat16 logits, their float32 copy, the softmax's float32 probabilities and the float32 exponential noise that `random_sample` divides them by (14 bytes a score), beside the scratch buffer of the Triton top-k/top-p kernel, 132 rows of the vocabulary in float32 (one per SM of the H100): 1.78 GiB whatever the batch. Only the forward's output, 8 KiB a token of batch, kept to the end of the profile run, adds to it. Above that, the forward pass's activations win, 116.5 KiB a token, almost one token of KV cache (128 KiB): raising `max_num_batched_tokens` from 8,192 to 32,768 prefills long prompts in fewer chunks and costs 14,704 tokens of cache. Lowering it to 2,048 frees only 384 tokens here, as long as 1,024 requests' sampler sets the floor (exercise 3). vLLM logged 1.89 GiB for this model at 8,192 tokens (section 7); the engine's 1.85 is the sampler's, its kernels and shapes as v0.19.0 runs them.
#
# `max_model_len` does not enter v0.11's profile run. It did in vLLM's older V0 engine: without chunked prefill, its default batch was `max(max_model_len, 2048)` tokens (`SchedulerConfig`), so a longer `max_model_len` made a larger profile run, hence a smaller cache, which it then divided by longer requests. `version="0.6.5"` applies V0's rules, on the 24 GB card:

# %%
v0 = {n: start(card="RTX 4090 24 GB", max_model_len=n, version="0.6.5") for n in (8192, 16384, 24576)}
for n, a in v0.items():
    print(f"V0, max_model_len {n:>6,}: profile run of {a.max_num_batched_tokens:,} tokens, activation peak "
          f"{gib(a.activation_peak_bytes)}, KV cache {a.kv_tokens:,} tokens, {a.max_concurrency:.2f} requests")
assert v0[8192].kv_tokens - v0[16384].kv_tokens == v0[16384].kv_tokens - v0[24576].kv_tokens == 7456

# %% [markdown]
# Each 8,192 tokens more of `max_model_len` cost V0 7,456 tokens of cache here, on top of needing more blocks per request: 5.6 requests of 8k, 1.2 of 24k. In v0.11 `max_model_len` only divides the pool; the batch budget is `max_num_batched_tokens`, set apart.
#
# ## 7. Checked against vLLM's own logs
#
# Everything above is simulated. vLLM prints its account when it starts, and people paste those lines into issues and pull requests. `helpers.teaching.vllm_logs` holds thirteen such start-ups, each with its source, vLLM's version, the card and the command: nine of vLLM v0.19.0 on an H100 with every option printed (llm-d-planner's validation runs: Llama-3.1 8B at two lengths, with an fp8 cache, in float32, with fp8 and 4-bit GPTQ weights; Qwen2.5 7B three ways), and four of the older V0 engine (an H100, an RTX 3090 at two lengths, an RTX 4060 with 4-bit weights). `engine_beside_logs()` runs `vllm_startup` on each with the log's card total, options and version rules, and with the log's own non-torch memory, so that what differs is what the engine computes: the weights (traced; fp8 and GPTQ weights by a byte formula, `formula_weight_bytes`) and the profile run (traced). Each row's three figures as the engine's over vLLM's:

# %%
rows = engine_beside_logs()
plot_engine_beside_logs(rows, title="Thirteen published vLLM start-ups: the engine's figures over vLLM's")

# %% [markdown]
# Look at the vertical line at 1: the blue weights sit on it in every row and the vermillion caches just beside it; the green profile runs of v0.19.0 sit just left of it too, while those of the older V0 engine scatter. In numbers:

# %%
stated = [row for row in rows if row.log.version.startswith("v0.19.0")]
weights = [row.engine()["weights"] / row.log.logged["weights"] for row in rows]
caches = [kv_ratio(row.log.logged, row.engine()) for row in rows]
peaks = [row.engine()["activation"] / row.log.logged["activation"] for row in rows]
cached = [ratio for ratio in caches if ratio is not None]
print(f"{len(rows)} start-ups, the engine's figure over vLLM's: weights {min(weights):.3f} to {max(weights):.3f}; "
      f"KV cache {min(cached):.3f} to {max(cached):.3f} ({len(cached)} logged one); "
      f"activation peak {min(peaks):.2f} to {max(peaks):.2f}")
by_name = {row.log.name: row.log.logged for row in rows}
assert len(rows) == 13 and len(stated) == 9 and len(cached) == 12
assert all(abs(ratio - 1) < 0.015 for ratio in weights)
assert all((row.refusal is not None) == row.log.refused for row in rows)  # the same verdict in every row
assert all(1 < kv_ratio(row.log.logged, row.engine()) < 1.011 for row in stated)
stated_peaks = {row.log.name: row.engine()["activation"] / row.log.logged["activation"] for row in stated}
assert all(0.97 < ratio < 1 for name, ratio in stated_peaks.items() if "float32" not in name)
assert 0.8 < stated_peaks["Llama-3.1-8B, float32"] < 0.85
assert 0.35 < min(peaks) < 0.4 and 1.05 < max(peaks) < 1.1
assert by_name["Llama-3.1-8B, 8,192 tokens"]["kv"] == by_name["Llama-3.1-8B, 32,768 tokens"]["kv"]  # vLLM's own
assert by_name["Llama-3.1-8B, fp8 KV cache"]["tokens"] == 2 * by_name["Llama-3.1-8B, 8,192 tokens"]["tokens"]
non_torch = sorted({row.log.logged["non_torch"] for row in stated})  # GiB, against the assumed 0.16: up to 0.09 more
assert non_torch == [0.24, 0.25] and round(non_torch[-1] - h100.non_torch_bytes / GiB, 2) == 0.09

# %% [markdown]
# vLLM's own figures confirm two rules of this lesson: its cache at 8,192 and at 32,768 tokens is the same, to the hundredth of a GiB (`max_model_len` does not change the pool), and its fp8 cache holds exactly twice the tokens (952,032 against 476,016). The weights agree within 1.5% in every row, and so does every verdict: the two start-ups that left no room for one request (the RTX 3090 at 29,000 tokens, which vLLM refused; the RTX 4060, which had no block at all) leave none in the engine either. Where every option is printed (v0.19.0), the KV cache's tokens are within 1.1%, the engine's a little more, since its profile run is a little smaller: the sampler's tensors, traced as v0.19.0 makes them, put its activation peak within 3% of vLLM's in every 16-bit row (asserted). The float32 row is the exception, at 0.8 of vLLM's: there the logits need no float32 copy, and the forward pass sets the peak, where vLLM logs 21% more than the engine traces (why is open: `helpers.teaching.vllm_logs`). The older V0 engine's rows differ more, from 7% over vLLM's (the RTX 3090) to 0.38 of it (the 4-bit Qwen on the RTX 4060): for V0 the engine traces the logits' float32 copy only, not V0's own sampler. Their non-torch memory, which the engine assumes at 0.16 GiB, is 0.24 to 0.25 GiB for every 7-8B model on the H100 (asserted). Beside 15 GiB of weights and 58 GiB of cache, a gigabyte of profile run moves the cache by less than 2%. To plan a card: trust the weights and the cache's arithmetic, allow a GiB or two for the profile run, and take the non-torch memory from a log of your own machine.

# %% [markdown]
# ## Exercises
#
# **Exercise 1: the older, smaller model.** Llama-2 7B (`"meta-llama/Llama-2-7b-hf"`, 6.7B parameters, 4,096 positions) and Llama-3.1 8B, each on an H100 with `max_model_len` 4,096: which serves more requests at once, by how much, and why?

# %%
# Your code here: start("meta-llama/Llama-2-7b-hf", max_model_len=4096) and start(max_model_len=4096)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# l2, l3 = start("meta-llama/Llama-2-7b-hf", max_model_len=4096), start(max_model_len=4096)
# print(f"Llama-2 7B: {gib(l2.weights_bytes)} of weights, {l2.max_concurrency:.1f} requests; "
#       f"Llama-3.1 8B: {gib(l3.weights_bytes)}, {l3.max_concurrency:.1f} requests")
# assert l2.weights_bytes < l3.weights_bytes and l2.kv_tokens < l3.kv_tokens / 3.5
# assert round(l3.max_concurrency / l2.max_concurrency, 2) == 3.76
# ```
#
# Llama-3.1 8B serves 108.6 requests at once, Llama-2 7B 28.9: 3.8 times fewer, although its weights are 2.4 GiB smaller and leave more room. Each of its tokens takes 512 KiB of cache against 128 KiB: 32 KV heads against 8. Grouped-query attention is what makes a newer model cheaper to serve.
# </details>
#
# **Exercise 2: 128k tokens on a 24 GB card.** Section 4's RTX 4090 would not start Llama-3.1 8B with `max_model_len` 131,072. Does an fp8 KV cache make it start? 4-bit weights (`quantization="nf4"`)? Both? How many tokens does the cache hold in each case?

# %%
# Your code here: start(card="RTX 4090 24 GB", max_model_len=131072, kv_cache_dtype=..., quantization=...)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# tries = {"fp8 KV cache": dict(kv_cache_dtype="fp8"), "NF4 weights": dict(quantization="nf4"),
#          "both": dict(kv_cache_dtype="fp8", quantization="nf4")}
# at128k = {label: start(card="RTX 4090 24 GB", max_model_len=131072, **options) for label, options in tries.items()}
# for label, account in at128k.items():
#     verdict = "would not start" if account.refusal else f"{account.max_concurrency:.2f} requests of 131,072 tokens"
#     print(f"{label}: {account.kv_tokens:,} tokens of cache; {verdict}")
# assert [a.kv_tokens for a in at128k.values()] == [97_712, 125_392, 250_800]
# assert at128k["fp8 KV cache"].num_blocks in (2 * refused.num_blocks, 2 * refused.num_blocks + 1)
# assert [a.refusal is None for a in at128k.values()] == [False, False, True]
# ```
#
# Neither alone. The fp8 cache doubles the tokens to 97,712, and the 4-bit weights free 9.3 GiB for 125,392 tokens, 5,680 short of one request; together they hold 250,800 tokens, 1.9 requests of 128k. On a small card the weights and the cache's dtype are the two levers; `max_model_len` decides only whether one request must fit.
# </details>
#
# **Exercise 3: a smaller batch budget.** On the H100, lower `max_num_batched_tokens` from 8,192 to 2,048: how many tokens of KV cache does it free? Then lower `max_num_seqs` to 256 too, the default of smaller cards. Explain the difference with section 6's figure.

# %%
# Your code here: start(max_model_len=32768, max_num_batched_tokens=2048, max_num_seqs=...)

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# fewer_tokens = start(max_model_len=32768, max_num_batched_tokens=2048)
# fewer_seqs = start(max_model_len=32768, max_num_batched_tokens=2048, max_num_seqs=256)
# for label, a in (("2,048 tokens", fewer_tokens), ("2,048 tokens, 256 sequences", fewer_seqs)):
#     print(f"{label}: activation peak {gib(a.activation_peak_bytes)}, {a.kv_tokens - h100.kv_tokens:+,} tokens of cache")
# assert fewer_tokens.kv_tokens - h100.kv_tokens == 384 and fewer_seqs.kv_tokens - h100.kv_tokens == 10_960
# # the same 256 requests as the 24 GB card's, but 132 SMs instead of 128: the Triton buffer's 4 more rows
# assert fewer_seqs.activation_peak_bytes - small.activation_peak_bytes == (132 - 128) * c8.vocab_size * 4
# ```
#
# 2,048 tokens alone free 384 tokens of cache (0.05 GiB): the peak falls from 1.85 to 1.80 GiB, the kept hidden states of 6,144 fewer tokens, and no lower: the sampler of 1,024 requests sets it. With 256 sequences the sampler's rows fall to a quarter, the peak to 0.51 GiB, and 10,960 tokens are freed: 1.3 requests of 8k. On one 8B model the batch budget is small beside the weights and the cache; it is a choice of speed (fewer chunks for long prompts, more requests per step) more than of memory.
# </details>
#
# ## Key points
#
# - Generating holds the weights, the KV cache (2 · layers · KV heads · head size · bytes per value per token: 128 KiB for Llama-3.1 8B in bfloat16, 0.5 GiB per request of 4k tokens), and, for a moment, the prefill's activations; a decode step adds little. Every position's logits would outweigh the cache: `generate` computes the last one's only.
# - The cache depends on the attention's shape, not the parameter count: Llama-2 7B takes four times Llama-3.1 8B's per token. An fp8 cache doubles the tokens.
# - vLLM gives the KV cache `total × gpu_memory_utilization − (weights + the profile run's activation peak + non-torch memory)`, in blocks of 16 tokens; "Maximum concurrency" is those blocks over one full-length request's.
# - Llama-3.1 8B in bfloat16 fits 12 requests of 4k tokens on a 24 GB card, 54 on 48 GB, 109 on 80 GB; 128k tokens start only on the two larger cards.
# - 4-bit weights free most of the weights' 15 GiB: on a 24 GB card they give the cache 2.6 times the tokens; with an fp8 cache too, 128k tokens fit.
# - Against thirteen published vLLM start-ups, the weights agree within 1.5%, every verdict agrees, and the cache within 1.1% where every option is stated (v0.19.0), whose profile runs the engine reproduces within 3% in 16 bits by tracing v0.19.0's sampler; the older V0 engine's differ by up to 2.6 times.
# - The profile run's peak is the larger of the sampler's (one row of logits per request, kept as four copies at once) and the forward pass of `max_num_batched_tokens` (about one token of cache per token); `max_model_len` costs no memory in v0.11, only blocks per request.
#
# ## Further reading
#
# - W. Kwon et al., *Efficient Memory Management for Large Language Model Serving with PagedAttention*, SOSP 2023, arXiv:2309.06180.
# - vLLM's documentation: *Conserving Memory* and *Optimization and Tuning* (`gpu_memory_utilization`, `max_model_len`, `max_num_batched_tokens`, `max_num_seqs`), *Quantized KV Cache* (`kv_cache_dtype="fp8"`) and *BitsAndBytes*.
# - T. Dettmers et al., *LLM.int8(): 8-bit Matrix Multiplication for Transformers at Scale*, 2022, arXiv:2208.07339; T. Dettmers et al., *QLoRA*, 2023, arXiv:2305.14314 (NF4).
# - vLLM's source, v0.11: `vllm/v1/worker/gpu_worker.py` (`Worker.determine_available_memory`), `vllm/v1/worker/gpu_model_runner.py` (`profile_run`), `vllm/v1/core/kv_cache_utils.py` (blocks, concurrency, `check_enough_kv_cache_memory`), `vllm/v1/kv_cache_interface.py` (`page_size_bytes`), `vllm/utils` (`memory_profiling`), `vllm/engine/arg_utils.py` (the defaults).
# - Hugging Face `transformers` documentation: *Caching* and *Cache strategies* (*KV cache strategies* before v5: `DynamicCache`, `StaticCache`, `generate(cache_implementation=...)`); its source: `GenerationMixin._sample` and `logits_to_keep` in `generation/utils.py`, the caches in `cache_utils.py`.
# - J. Ainslie et al., *GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints*, 2023.
#
# ## What comes next
#
# Lesson 10b continues with a model larger than one card: Llama-3.3 70B over 2 and 4 H100s by tensor and pipeline parallelism, beside ten published start-ups, and the serving widget, where every option of this lesson is one control.
