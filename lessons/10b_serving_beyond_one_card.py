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
# # 10b · Serving beyond one card: tensor and pipeline parallelism, and the serving widget
#
# **Questions**
# - A 70B model is larger than one card: what does each of 2 or 4 GPUs hold, and how many requests fit then?
# - What do tensor and pipeline parallelism cut, and what stays whole on every GPU?
# - How close is the simulation to what vLLM logged for ten such start-ups?
# - Which of `vllm serve`'s options gets a model started on a card that refuses it?
#
# **Objectives**
# - Split Llama-3.3 70B over 2 and 4 H100s by tensor and by pipeline parallelism: say what each GPU holds, what is cut and what is not, and check it against ten published start-ups.
# - Drive the serving widget: a model, its weights, the KV cache's dtype, the card, the GPUs, `gpu_memory_utilization`, `max_model_len` and `max_num_batched_tokens`.
# - Weigh 8-bit weights against more GPUs, and pipeline stages against tensor parallelism, by the KV cache each leaves.
#
# **Time:** about 40 minutes alone: 16 of reading, 8 of code, 1 for the figure, 1 to run all, 15 for the two exercises. **GPU:** not needed (memory simulated on fake tensors: nothing is downloaded, no weight is allocated). Memory is in GiB (2³⁰ bytes), as vLLM logs it.
#
# Read lesson 10 first: this lesson continues with its start-up account of one card (weights, the profile run, non-torch memory, the KV cache in blocks of 16 tokens) and its published logs.

# %% [markdown]
# ## Setup

# %%
# %matplotlib inline
import math

import torch

from helpers import GPU_CARDS, GiB
from helpers.models import hf
from helpers.serving import WouldNotStart, vllm_startup
from helpers.teaching.plots import plot_startup_accounts
from helpers.teaching.vllm_logs import LLAMA_33_70B, PARALLEL_LOGS, engine_beside_logs
from helpers.teaching.widgets import ServingFit
from helpers.vllm_rules import padded_vocab, stage_layers

_ = torch.manual_seed(0)
L8 = "meta-llama/Llama-3.1-8B"


def gib(nbytes):
    """Bytes as GiB with two decimals, as vLLM logs them."""
    return f"{nbytes / GiB:.2f} GiB"


def start(model=L8, card="H100 80 GB", **options):
    """vLLM's start-up account of `model` on one card of GPU_CARDS (one GPU's, over several); the account even
    where vLLM would not start."""
    try:
        return vllm_startup(model, gpu=card, **options)
    except WouldNotStart as refused:
        return refused.account


# %% tags=["nbval-ignore-output"] nbval_reason="versions and devices differ between machines"
import transformers

print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
      f"GPU: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none'}")

# %% [markdown]
# Recomputed from lesson 10 with `vllm_startup`: Llama-3.1 8B on one H100 at `max_model_len` 131,072 (`one`, the last case of its section 4), the account this lesson's GPUs are set beside:

# %%
one = start(max_model_len=131072)
print(f"one H100: weights {gib(one.weights_bytes)}, profile run {gib(one.activation_peak_bytes)}, "
      f"non-torch {gib(one.non_torch_bytes)}, {one.kv_tokens:,} tokens, {one.max_concurrency:.1f} requests of 128k")
assert (one.num_blocks, round(one.activation_peak_bytes / GiB, 2), round(one.max_concurrency, 1)) == (27_804, 1.85, 3.4)

# %% [markdown]
# ## 1. A model larger than one card: tensor and pipeline parallelism
#
# Llama-3.3 70B has 80 layers of width 8,192, 64 query heads sharing 8 KV heads, and 70.6 billion parameters: 131 GiB in bfloat16, more than any card of lesson 10. vLLM spreads such a model over several GPUs. **Tensor parallelism** (`tensor_parallel_size`, the Megatron-LM scheme of Shoeybi et al., 2019) cuts every layer across N GPUs. The query, key and value projections and the MLP's gate and up are *column-parallel*: each GPU computes its slice of their outputs (its heads, its share of the MLP's width). The attention's output projection and the MLP's down are *row-parallel*: each GPU multiplies its slice of the input, and an all-reduce sums the N partial results. Each GPU keeps the keys and values of its own KV heads, so every token's cache is cut too; with more GPUs than KV heads, each GPU keeps one, a copy shared by several (`QKVParallelLinear`, `vllm/model_executor/layers/linear.py`). The embedding and the LM head are cut by rows of the vocabulary, padded first to a multiple of 64 (`VocabParallelEmbedding`). The norms are small and every GPU keeps them whole.
#
# `vllm_startup(..., tensor_parallel_size=N)` traces one GPU's shard and gives that GPU's account. The config is `LLAMA_33_70B` of `helpers.teaching.vllm_logs`, Llama-3.1's file with the 70B's sizes. On H100s, at `max_model_len` 8,192:

# %%
c70 = hf.load_config(LLAMA_33_70B)
tp = {n: start(LLAMA_33_70B, max_model_len=8192, tensor_parallel_size=n) for n in (1, 2, 4)}
print(f"{'H100s':>5} {'weights':>10} {'peak':>9} {'non-torch':>10} {'KV cache':>10} {'KiB/token':>9} {'tokens':>8} "
      f"{'requests of 8k':>14}   (per GPU, but the tokens and requests)")
for n, a in tp.items():
    print(f"{n:>5} {gib(a.weights_bytes):>10} {gib(a.activation_peak_bytes):>9} {gib(a.non_torch_bytes):>10} "
          f"{gib(a.kv_cache_bytes):>10} {a.kv_bytes_per_token / 1024:>9g} {a.kv_tokens:>8,} {a.max_concurrency:>14.2f}")
print(tp[1].refusal)
norms = (2 * c70.num_hidden_layers + 1) * c70.hidden_size  # two per layer and the final one, on every GPU
assert tp[1].refusal.startswith("CUDA out of memory") and tp[1].weights_bytes > GPU_CARDS["H100 80 GB"]
for n in (2, 4):
    assert n * tp[n].parameter_count - tp[1].parameter_count == (n - 1) * norms  # every matrix cut in N, not the norms
    assert n * tp[n].kv_bytes_per_token == tp[1].kv_bytes_per_token == 320 * 1024  # 8 KV heads: 4 or 2 per GPU
    assert tp[n].activation_peak_bytes == tp[1].activation_peak_bytes  # the sampler's, the same on every GPU
assert padded_vocab(c70.vocab_size) == c70.vocab_size == 64 * 2004  # no padding: 64,128 rows per GPU at 2
assert tp[4].kv_tokens > 40 * tp[2].kv_tokens and math.floor(tp[2].max_concurrency) == 1

# %% [markdown]
# Two H100s hold the 70B, barely: each GPU's 65.71 GiB of weights, half the model's 131.42 and its norms whole, leave 1.57 GiB of cache, 10,304 tokens: one request of 8k at a time. Four H100s hold 32.86 GiB each and leave 34 GiB each: 450,448 tokens, 55 requests, 44 times as many for twice the GPUs (asserted). The cache of one token is cut like the weights: 320 KiB for the whole model, 160 KiB on each of two GPUs, 80 on each of four. So "GPU KV cache size" counts the same tokens on every GPU, each holding its heads' share of them.
#
# Two things are not cut. The **profile run's peak** is 1.92 GiB on every GPU, at 1, 2 or 4 (asserted): it is the sampler's, and vLLM gathers the logits of the whole vocabulary on every GPU before it samples (`LogitsProcessor._gather_logits`, `vllm/model_executor/layers/logits_processor.py`), so each GPU holds 1,024 rows of 128,256 scores, as one card does. The **non-torch memory** grows: the NCCL communicators and the buffers of vLLM's custom all-reduce live outside PyTorch's allocator. vLLM v0.19.0 logged 2.07 GiB per GPU at 2 and 2.13 at 4, against 0.24 to 0.25 on one card (lesson 10, section 7's logs); no simulation of tensors sees them, so `vllm_startup` takes those logged figures.
#
# **Pipeline parallelism** (`pipeline_parallel_size`) cuts the other way: each *stage* holds whole layers, and a token passes from one stage's GPUs to the next. vLLM gives each stage `layers // stages` layers and the remainder to the stages before the last, one each from the last but one backwards (`get_pp_indices`, `vllm/distributed/utils.py`): 80 layers in 3 stages are 27, 27 and 26. The first stage holds the embedding; only the last holds the LM head and runs the sampler. Each GPU sizes its own cache, and every GPU then takes the fewest blocks of any (`get_kv_cache_configs`). Four H100s as two stages of two:

# %%
pp = start(LLAMA_33_70B, max_model_len=8192, tensor_parallel_size=2, pipeline_parallel_size=2)
stages = (pp, *pp.other_stages)
for s in stages:
    print(f"stage {s.stage}, layers {s.layers[0]}-{s.layers[1] - 1}: weights {gib(s.weights_bytes)}, "
          f"peak {gib(s.activation_peak_bytes)}, {s.own_blocks:,} blocks of its own")
print(f"every GPU: {pp.num_blocks:,} blocks, {pp.kv_tokens:,} tokens, {pp.max_concurrency:.2f} requests of 8k "
      f"(tensor-parallel 4: {tp[4].kv_tokens:,})")
assert [s.layers for s in stages] == stage_layers(80, 2) == [(0, 40), (40, 80)]
assert [b - a for a, b in stage_layers(80, 3)] == [27, 27, 26]
received = 2 * 8192 * c70.hidden_size * 2  # the last stage's input buffers: hidden states and residual, bfloat16
assert stages[0].activation_peak_bytes < tp[4].activation_peak_bytes == stages[1].activation_peak_bytes - received
assert pp.num_blocks == stages[1].own_blocks < stages[0].own_blocks  # the last stage decides
assert abs(pp.kv_tokens - tp[4].kv_tokens) < 0.01 * tp[4].kv_tokens

# %% [markdown]
# The two stages hold the same weights, 32.85 GiB a GPU, but the first stage's profile run ends with its 40 layers' forward pass (1.16 GiB), the last stage's with the sampler (1.92 GiB, as under tensor parallelism) beside the two buffers its input arrives in, 0.25 GiB made inside the run: 2.17 GiB (asserted). The last stage has the fewer blocks, 27,999, and every GPU gets them: 447,984 tokens, within 1% of tensor-parallel 4's (asserted). On four GPUs, the two layouts keep about the same cache; they differ in speed (pipeline stages pass activations once per stage, tensor parallelism all-reduces twice per layer), which this account does not measure. Each GPU's account, the first bar a single H100:

# %%
layouts = {"1 H100": tp[1], "each of 2 H100s (TP 2)": tp[2], "each of 4 H100s (TP 4)": tp[4],
           "TP 2 x PP 2, a stage-0 GPU": stages[0], "TP 2 x PP 2, a stage-1 GPU": stages[1]}
plot_startup_accounts(layouts, title="Llama-3.3 70B in bfloat16 on H100s, max_model_len 8,192: one GPU's account")

# %% [markdown]
# Look at the blue weights: on one H100 they run past the card, on two they fill nearly all that vLLM may use, and on four they leave half of each card to the vermillion cache. The green profile run is the same width on every GPU that runs the sampler (wider by the last stage's input buffers), and the hatched non-torch memory is wider on every GPU that talks to others. The stage-0 GPU keeps some memory unused: its own blocks are more than the last stage's, and it takes the fewer.
#
# vLLM v0.19.0 logged ten such start-ups on H100s (llm-d-planner's validation runs, `PARALLEL_LOGS`): Llama-3.1 8B and Qwen2.5 7B at tensor-parallel 2 and 4, Llama-3.1 8B at pipeline-parallel 2 and 4, Qwen2.5 72B at tensor-parallel 2, and Llama-3.3 70B with 8-bit weights (fp8 at 2 and 4, int8 at 2). Each ran with `gpu_memory_utilization` 0.95 and `max_model_len` 8,192. The engine beside each, with the log's own non-torch memory:

# %%
parallel = engine_beside_logs(PARALLEL_LOGS)
print(f"{'start-up':<26} {'weights per GPU, vLLM / engine':>31} {'KV tokens, vLLM / engine':>27}")
for row in parallel:
    logged, engine = row.log.logged, row.engine()
    print(f"{row.log.name:<26} {logged['weights']:>14.2f} / {engine['weights']:<14.2f} "
          f"{logged['tokens']:>12,} / {engine['tokens']:<12,}")
token_ratios = {row.log.name: row.engine()["tokens"] / row.log.logged["tokens"] for row in parallel}
assert len(parallel) == 10 and all(row.refusal is None for row in parallel)
assert all(abs(row.engine()["weights"] / row.log.logged["weights"] - 1) < 0.01 for row in parallel)
assert all(1 <= ratio < 1.005 for name, ratio in token_ratios.items() if "72B" not in name)
assert 1.04 < token_ratios["Qwen2.5-72B, TP 2"] < 1.05

# %% [markdown]
# The weights per GPU agree within 1% in every row, and the KV cache's tokens within 0.5% in nine. Qwen2.5 72B at tensor-parallel 2 is the exception, 4.6% over vLLM's: its weights leave only 3 GiB of cache per GPU, so the engine's profile run, 0.04 GiB lighter, and its weights, 0.09 GiB lighter, are a large share of so small a cache. The rule holds from 8B to 72B: cut the weights and the cache by the GPUs, keep the sampler and the non-torch memory whole on every GPU, and let the stage with the fewest blocks decide.
#
# ## 2. The widget: how many requests fit?
#
# Lessons 10 and 10b in one place. The controls are `vllm serve`'s options: the model (the shipped configs whose layers all keep full keys and values), its weights (bfloat16, float16, bitsandbytes' NF4 or LLM.int8() traced, fp8 or 4-bit GPTQ/AWQ by their bytes), the KV cache's dtype, the card, how many of them (`tensor_parallel_size`: the menu "GPUs"), `gpu_memory_utilization`, `max_model_len` and `max_num_batched_tokens`. The view is the card as lesson 10's bars draw it (one GPU's, over several), and one line: how many requests of `max_model_len` tokens fit at once, or why vLLM would not start. A new model, weights, card or batch budget traces a new profile run (a second or two; the view says "updating"); the other controls redo vLLM's arithmetic at once. It opens on lesson 10's section 4's last case, `one` above, Llama-3.1 8B at 131,072 tokens on an H100:

# %%
fit = ServingFit()
assert fit.result == one and math.floor(fit.result.max_concurrency) == 3
fit

# %% [markdown]
# Choose the RTX 4090 24 GB: vLLM would not start. Then try NF4 weights, an fp8 KV cache, or a shorter `max_model_len`, and see which gets it started (lesson 10's exercise 2 asks the same); then Llama-2 7B, whose every token takes four times the cache. Choose LLaMA 65B: its weights do not fit one H100; choose 2 GPUs. Then 3 GPUs: vLLM refuses, since 64 heads do not divide by 3.
#
# ## Exercises
#
# **Exercise 1: two H100s or four?** Section 1 served Llama-3.3 70B in bfloat16 on 4 H100s. With 8-bit weights (`quantization="fp8"`, as the published `RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic` checkpoint), 2 H100s hold it too. At `max_model_len` 8,192, how many requests fit on 2 H100s in fp8, and on 4 in fp8? Per GPU, do fp8 weights on 2 beat bfloat16 on 4?

# %%
# Your code here: start(LLAMA_33_70B, max_model_len=8192, tensor_parallel_size=..., quantization="fp8")

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# fp8 = {n: start(LLAMA_33_70B, max_model_len=8192, tensor_parallel_size=n, quantization="fp8") for n in (2, 4)}
# for n, a in fp8.items():
#     print(f"fp8 on {n} H100s: weights {gib(a.weights_bytes)} per GPU, {a.kv_tokens:,} tokens, "
#           f"{a.max_concurrency:.1f} requests of 8k, {a.max_concurrency / n:.1f} per GPU")
# print(f"bfloat16 on 4 H100s: {tp[4].max_concurrency:.1f} requests, {tp[4].max_concurrency / 4:.1f} per GPU")
# assert [a.kv_tokens for a in fp8.values()] == [219_200, 659_344]
# assert abs(fp8[2].max_concurrency / 2 - tp[4].max_concurrency / 4) < 0.5  # about the same per GPU
# assert fp8[2].activation_peak_bytes == tp[4].activation_peak_bytes  # the sampler's, in bfloat16 still
# ```
#
# In fp8 each of 2 H100s holds 33.83 GiB of weights, about what bfloat16 needs on each of 4, and leaves about the same room: 219,200 tokens, 26.8 requests of 8k, 13.4 per GPU against bfloat16's 13.7 on four. The cache per token is the 2-GPU split's, 160 KiB a GPU, twice the 4-GPU split's; the 8-bit weights free room, not tokens. On 4 H100s fp8 holds 659,344 tokens, 80.5 requests: the halved weights leave each GPU 50.30 GiB of cache. Halving the weights' bytes is worth about halving the GPUs.
# </details>
#
# **Exercise 2: four pipeline stages.** Section 1 put Llama-3.3 70B on 4 H100s as tensor-parallel 4 and as two stages of tensor-parallel 2. Now make each H100 a stage of its own (`pipeline_parallel_size=4`, no tensor parallelism). Which stage decides the blocks, and why? Does every GPU keep more or fewer tokens than under tensor-parallel 4, and why?

# %%
# Your code here: start(LLAMA_33_70B, max_model_len=8192, pipeline_parallel_size=4), then its .other_stages

# %% [markdown]
# <details><summary>Solution</summary>
#
# ```python
# pp4 = start(LLAMA_33_70B, max_model_len=8192, pipeline_parallel_size=4)
# for s in (pp4, *pp4.other_stages):
#     print(f"stage {s.stage}, layers {s.layers[0]}-{s.layers[1] - 1}: weights {gib(s.weights_bytes)}, "
#           f"peak {gib(s.activation_peak_bytes)}, {s.own_blocks:,} blocks of its own")
# print(f"every GPU: {pp4.kv_tokens:,} tokens (tensor-parallel 4: {tp[4].kv_tokens:,}); non-torch "
#       f"{gib(pp4.non_torch_bytes)} against {gib(tp[4].non_torch_bytes)}")
# last = max((pp4, *pp4.other_stages), key=lambda s: s.stage)
# assert pp4.num_blocks == last.own_blocks == min(s.own_blocks for s in (pp4, *pp4.other_stages))
# assert last.activation_peak_bytes == stages[1].activation_peak_bytes  # the sampler and its two input buffers
# assert pp4.kv_tokens - tp[4].kv_tokens == 10_928 and pp4.non_torch_bytes < tp[4].non_torch_bytes / 30
# ```
#
# The last stage decides: it holds 20 layers and the LM head, 33.83 GiB, and its profile run is the sampler's beside the two buffers its input arrives in, 2.17 GiB, as in section 1's second stage; it has 28,836 blocks of its own, where the middle stages, without the embedding or the head, have 30,623. Every GPU keeps 461,376 tokens, 10,928 more than tensor-parallel 4's 450,448, although the weights per GPU are about the same: without tensor parallelism there is no all-reduce, and vLLM v0.19.0 logged 0.07 GiB of non-torch memory for pipeline stages, not 2.13 GiB. Beyond that, the layouts differ in speed: four stages pass each token through four GPUs one after another.
# </details>
#
# ## Key points
#
# - A model larger than one card: tensor parallelism cuts every weight matrix and every token's KV cache by the GPUs (column- and row-parallel linears, KV heads split, or one per GPU when they are fewer than the GPUs); the sampler's full-vocabulary logits and the NCCL and all-reduce buffers are on every GPU. Llama-3.3 70B fits 1 request of 8k on 2 H100s, 55 on 4. Pipeline stages hold whole layers; only the last runs the sampler, and the fewest blocks of any stage decide.
# - The profile run's peak is the sampler's on every GPU of tensor parallelism, since the logits of the whole vocabulary are gathered before sampling; pipeline stages but the last run no sampler. 8-bit weights on 2 H100s keep about the requests per GPU of bfloat16 on 4.
# - The engine beside ten published vLLM v0.19.0 start-ups over 2 and 4 H100s: the weights per GPU within 1% in every row, the KV cache's tokens within 0.5% in nine of ten.
#
# ## Further reading
#
# - W. Kwon et al., *Efficient Memory Management for Large Language Model Serving with PagedAttention*, SOSP 2023, arXiv:2309.06180.
# - M. Shoeybi et al., *Megatron-LM: Training Multi-Billion Parameter Language Models Using Model Parallelism*, 2019, arXiv:1909.08053 (column- and row-parallel layers). vLLM's *Parallelism and Scaling* page; its source, v0.19.0: `model_executor/layers/linear.py` (`QKVParallelLinear`), `vocab_parallel_embedding.py`, `logits_processor.py` (`_gather_logits`), `distributed/utils.py` (`get_pp_indices`).
