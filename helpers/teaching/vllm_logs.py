"""vLLM's own start-up logs, as published, beside :func:`helpers.serving.vllm_startup`'s figures (lesson 10).

Each :class:`VllmLog` is one start-up of vLLM found in a public log: where, which version and card, the options it
ran with (the launch command or the ``non-default args`` line vLLM prints), and the figures it logged, copied as
printed (GiB with two decimals; "Loading model weights took X GB" was GiB mislabelled before vLLM PR #15807).  The
engine is given the same card total, utilization, lengths, dtypes and the logged non-torch memory (which no
simulation of tensors sees), so that what differs is what the engine traces: the weights and the profile run's
activation peak.  :func:`engine_beside_logs` puts the two side by side.

Only models whose Hugging Face config ships with this package can be traced (nothing is downloaded); an Instruct
model has its base model's architecture, and Meta-Llama-3-8B the same layers, widths and vocabulary as Llama-3.1-8B
(3.1 adds rope scaling and positions, which change no tensor's size at these lengths).

What differs, and why (``tests/test_vllm_logs.py`` asserts the bounds): the weights, within 1% (1.5% for fp8 and 4-bit
GPTQ, counted by :func:`helpers.serving.formula_weight_bytes`, whose kernels may keep a workspace): vLLM also keeps buffers
Hugging Face's modules do not (Llama-3.1's logged 14.99 GiB is the engine's 14.96 plus about a cos/sin table of its
131,072 positions, 32 MiB in bfloat16). The activation peak: the engine traces Hugging Face's forward pass, then
v0.19.0's sampler pass on the requests' logits (:func:`helpers.vllm_profile.dummy_sampler_run`); vLLM runs its own
compiled kernels.  On v0.19's runs of 8,192 tokens and 1,024 requests the sampler's float32 tensors set the peak:
within 3% of the logged one, the KV tokens within 0.2% (float32 weights: the forward pass sets it, 18% under the
logged peak, below: tokens within 1.1%).  V0's profile (the logits' float32 copy only) of 20,000 and 29,000 tokens
(256 requests) logged 7-8% less than the engine traces.

Where the forward pass sets the peak, vLLM v0.19.0 logs more than the engine traces: 2.21 GiB against 1.82 for
Llama-3.1 8B in float32 (no sampler tensor is larger there), 1.10 against 0.91 on the first stage of its
pipeline-parallel runs (no sampler at all), in both dtypes 17.6-17.7 units of tokens × hidden × dtype bytes (8,192 ×
4,096) against the engine's 14.56 (Hugging Face's forward at its MLP: four hidden-sized tensors and three of the MLP's
width).  Read in v0.19.0's wheel and in Inductor (the pinned PyTorch's, not the release vLLM pins), and
ruled out:

* the window: ``memory_profiling`` (``vllm/utils/mem_utils.py``) resets the peak before
  ``GPUModelRunner.profile_run``, whose first model call runs Dynamo and Inductor (the log: "torch.compile took
  10.81 s", then "Initial profiling/warmup run took 2.57 s"): compilation and the first compiled run are both inside the
  logged peak;
* vLLM's own forward: its decoder piece between two attention ops (``LlamaDecoderLayer.forward`` in
  ``vllm/model_executor/models/llama.py``; ``RMSNorm.forward_static``, ``SiluAndMul.forward_native``,
  ``RotaryEmbedding.forward_static``: the log disables every custom op), compiled by Inductor here on the CPU with
  dynamic tokens in float32 (its wrapper's allocations and frees read), holds at most 13.5 units (at ``silu_and_mul``:
  the attention's output and the old residual, held by the calling split graph, the new residual, ``gate_up``'s 7 and
  the product's 3.5), lighter than Hugging Face's; counted eagerly (no Inductor), 18.0, above the logged figures'
  rounding;
* the attention: with no metadata in the profile run (``_dummy_run`` builds it only with ``force_attention`` or a full
  CUDA graph), ``TritonAttentionImpl.forward`` (``vllm/v1/attention/backends/triton_attn.py``) fills its ``[tokens,
  hidden]`` output with zeros, the one tensor the engine's attention also makes;
* autotuning in the first compiled run: ``CachingAutotuner.maybe_clone_args``
  (``torch/_inductor/runtime/triton_heuristics.py``) clones only the arguments a kernel mutates in place, at most one
  hidden-sized buffer where five are alive;
* any buffer of fixed size (a benchmarker's cache-flush buffer, a cuBLAS workspace): the excess is the same in units
  of both dtypes within the logs' rounding (bfloat16 17.52-17.68, float32 17.64-17.72), which leaves 5 MiB at most to
  anything whose size does not follow the dtype;
* Inductor's combo-kernel benchmark (vLLM sets ``combo_kernels`` and ``benchmark_combo_kernel``:
  ``CompilationConfig.__post_init__``, ``vllm/config/compilation.py``), read in torch 2.10.0, the release v0.19.0's
  wheel requires: ``Scheduler.create_combo_kernel_nodes`` benchmarks a group (``speedup_by_combo_kernel``: each kernel,
  then the group, on random arguments from the generated module's ``get_args``, cloning only mutated ones) only when two
  kernels share a topological level (``_default_group_nodes_for_combo_kernels``; ``combinable_nodes`` drops matmuls and
  no-op nodes).  The first piece (embedding, the first RMSNorm, ``qkv_proj``, the rotary, the attention's ``empty``
  output), written from vLLM's code at small widths and scheduled by the pinned PyTorch's Inductor for CUDA (fake CUDA
  tensors, no GPU; the CPU backend groups it the same), has the embedding and the norm fused in one Triton kernel, alone
  at its level beside ``empty``, a no-op (every other kernel reads the norm's output): it is never benchmarked.  Its one
  group benchmarked, the query's and key's rotary, takes 3.25 units (``qkv`` 1.5, the 0.5-unit cos/sin table, the
  outputs 1.25) during compilation, when no activation is alive; were the cos/sin gather its own kernel beside the
  embedding's, the group's copies would be 18.19 units (1.14 and 2.27 GiB), over both logged figures.  Inductor's other
  compile-time benchmarks (``benchmark_fusion``, epilogue fusion of templates, ``max_autotune``) are off for vLLM's
  range of 1-8,192 tokens (``set_inductor_config``, ``vllm/compilation/compiler_interface.py``); Inductor's
  ``memory_planning`` is off, and its buffer reuse only takes freed buffers; the split graph (``split_graph``,
  ``vllm/compilation/backends.py``) is FX code, which drops each value after its last use, so only a piece's inputs (the
  attention's output and the residual, 2 units) are held around it.

What the logs do settle: a middle stage of the pipeline-parallel 4 run logs 1.05 GiB (16.72-16.88 units), two
``[tokens, hidden]`` buffers received (:func:`helpers.vllm_profile.intermediate_buffers`) plus its layers, so vLLM's
layers hold at most 14.72-14.88 units (the engine's 14.56 is 1-2% under that).  The first stage, the same layers
without those buffers, logs 17.52-17.68: its peak is not in its layers but where only a stage holding the embedding
has something, and the first piece's own tensors stay under 6 units.  The embedding table (128,256 / 8,192 = 15.66
units) and two ``[tokens, hidden]`` tensors make 17.66, inside both dtypes' rounding (17.64-17.68): a copy of the
table while the first piece's fused embedding-and-norm kernel writes its two outputs fits every row.  One route makes
exactly that: Inductor clones an input whose address is not a multiple of 16 bytes before a compiled piece runs
(``align_inputs_from_check_idxs``, ``copy_misaligned_inputs``: ``torch/_inductor/utils.py``), and the piece's code
drops the clone after the one kernel that reads it (the first piece's code, generated for CUDA as above, allocates the
kernel's two outputs before it); but ``VocabParallelEmbedding.create_weights`` allocates the table on its own, aligned,
and nothing read moves it.  The engine does not model it.  A GPU run of vLLM v0.19.0 would decide it:
``torch.cuda.memory._record_memory_history()`` before ``GPUModelRunner.profile_run`` and
``torch.cuda.memory._dump_snapshot()`` after it (the stack of the block alive at the peak), the table's
``data_ptr() % 16``, or a first stage's logged peak with ``--max-num-batched-tokens 2048`` (a table copy stays 0.98
GiB in bfloat16, a forward pass's tensors shrink 4 times).

Models with sliding-window layers (:data:`SLIDING_LOGS`: Gemma-2 2B, 9B and 27B, Gemma-3 4B, 12B and 27B;
:data:`GEMMA_7B`, all full attention, beside them) are sized by vLLM v0.19.0's KV cache groups (:mod:`helpers.vllm_kv`);
their configs ship for these logs only (:data:`helpers.hf_config.FOR_LOGS`).  Gemma-2: the weights within 0.6%, the
activation peak 1-1.2% under the logged one (the sampler's float32 [1,024, 256,000] tensors set it), the tokens and the
concurrency within 0.2%.  Gemma-3 is multimodal: vLLM also loads its SigLIP vision tower, keeps rotary tables of
1,048,576 positions for its linearly scaled layers, and profiles the encoder on 32 dummy images whose pixel values and
embeddings stay alive through the text pass (:mod:`helpers.vllm_mm`): the weights 0.1-0.2% under, the activation peak
0.9-1.1% under, the tokens 0.1-0.7% over (``tests/test_vllm_groups.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..serving import StartupAccount, WouldNotStart, vllm_startup
from ..units import GiB
from ..vllm_mm import is_multimodal, vllm_startup_mm

_PLANNER = ("https://github.com/llm-d-incubation/llm-d-planner/blob/d3121e059da88662db39a926a3ead964be97359b/"
            "accuracy/results/v0.19.0/logs/")
_H100_V019 = dict(version="v0.19.0 (V1)", rules="0.11", gpu="H100 80GB HBM3", total_gib=79.19)
#: What every v0.19.0 run of llm-d-planner's validation shared (its job template: ``vllm serve <model>
#: --gpu-memory-utilization=0.95 --no-enable-prefix-caching``; each log's ``non-default args`` line agrees; the logs
#: print "Chunked prefill is enabled with max_num_batched_tokens=8192").  ``max_num_seqs``: vLLM's default for a card
#: of 70 GiB or more (1024).
_PLANNER_OPTIONS = dict(gpu_memory_utilization=0.95, max_num_batched_tokens=8192, max_num_seqs=1024)


@dataclass(frozen=True)
class VllmLog:
    """One published vLLM start-up.

    Attributes:
        name: a short label (model, card, what differs).
        url: where the log is (a commit-pinned file, an issue or a pull request).
        version: vLLM's version, as the log or its thread states it; ``rules``: the accounting
            :func:`helpers.serving.vllm_startup` applies (``"0.11"``: V1 from v0.9.1 on, per instance; ``"0.6.5"``:
            V0, whose arithmetic v0.6.4's global cap shares on a card used by nothing else).
        gpu, total_gib: the card, and its total memory as the log prints it (GiB, two decimals).
        command: the launch command, or vLLM's ``non-default args``, as stated.
        model: the shipped config traced for it (:data:`helpers.hf_config.SHIPPED`, or :data:`helpers.hf_config.
            FOR_LOGS`), or a config dict (:data:`LLAMA_33_70B`, :data:`QWEN_25_72B`).
        options: :func:`helpers.serving.vllm_startup`'s options for it (besides ``gpu``, ``version`` and
            ``non_torch_bytes``).
        logged: the figures it printed: ``weights``, ``activation``, ``non_torch``, ``kv`` (GiB), ``tokens``,
            ``blocks``, ``concurrency`` (x); a figure it did not print is absent.
        note: what the log's thread leaves unstated, and what is inferred.
    """

    name: str
    url: str
    version: str
    rules: str
    gpu: str
    total_gib: float
    command: str
    model: str | dict
    options: dict
    logged: dict
    note: str = ""
    refused: bool = False


def _rtx3090(tokens: int, logged: dict, note: str, refused: bool = False) -> VllmLog:
    """One of issue #10517's start-ups of Llama-3.1-8B-Instruct on an RTX 3090 (vLLM v0.6.4), at ``tokens`` of
    ``--max-model-len``: the figures of that run (``logged``), beside those all of its runs printed."""
    return VllmLog(f"Llama-3.1-8B, RTX 3090, {tokens:,} tokens", "https://github.com/vllm-project/vllm/issues/10517",
                   version="v0.6.4 (V0; inferred from the log's format)", rules="0.6.5", gpu="RTX 3090",
                   total_gib=23.58, command=f"--max-model-len {tokens} (the rest of the command is not in the comment)",
                   model="meta-llama/Llama-3.1-8B",
                   options=dict(gpu_memory_utilization=0.9, max_model_len=tokens, max_num_batched_tokens=tokens,
                                max_num_seqs=256),
                   logged=dict(weights=14.9888, non_torch=0.35, **logged), note=note, refused=refused)


#: The logs, in the lesson's order: one model on one H100 with what one option changes, then older versions on
#: smaller cards.
LOGS = (
    VllmLog("Llama-3.1-8B, 8,192 tokens", _PLANNER + "meta-llama-llama-3-1-8b---h100-80gb--tp1pp1dp1--8192.log",
            command="vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.95 "
                    "--no-enable-prefix-caching", model="meta-llama/Llama-3.1-8B",
            options=dict(_PLANNER_OPTIONS, max_model_len=8192),
            logged=dict(weights=14.99, activation=1.89, non_torch=0.25, kv=58.11, tokens=476_016, concurrency=58.11),
            **_H100_V019),
    VllmLog("Llama-3.1-8B, 32,768 tokens", _PLANNER + "meta-llama-llama-3-1-8b--h100-80gb--tp1pp1dp1--32768.log",
            command="vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768 --gpu-memory-utilization 0.95 "
                    "--no-enable-prefix-caching", model="meta-llama/Llama-3.1-8B",
            options=dict(_PLANNER_OPTIONS, max_model_len=32768),
            logged=dict(weights=14.99, activation=1.89, non_torch=0.25, kv=58.11, tokens=476_016, concurrency=14.53),
            **_H100_V019),
    VllmLog("Llama-3.1-8B, fp8 KV cache", _PLANNER + "meta-llama---h100-80gb--tp1pp1dp1--8192-dtbf16-kvfp8.log",
            command="vllm serve meta-llama/Llama-3.1-8B-Instruct --dtype bfloat16 --max-model-len 8192 "
                    "--gpu-memory-utilization 0.95 --kv-cache-dtype fp8 --no-enable-prefix-caching",
            model="meta-llama/Llama-3.1-8B", options=dict(_PLANNER_OPTIONS, max_model_len=8192, kv_cache_dtype="fp8"),
            logged=dict(weights=14.99, activation=1.89, non_torch=0.25, kv=58.11, tokens=952_032, concurrency=116.21),
            **_H100_V019),
    VllmLog("Llama-3.1-8B, float32", _PLANNER + "meta-llama-llama-3--h100-80gb--tp1pp1dp1--8192-dtf32.log",
            command="vllm serve meta-llama/Llama-3.1-8B-Instruct --dtype float32 --max-model-len 8192 "
                    "--gpu-memory-utilization 0.95 --no-enable-prefix-caching", model="meta-llama/Llama-3.1-8B",
            options=dict(_PLANNER_OPTIONS, max_model_len=8192, dtype="float32"),
            logged=dict(weights=29.98, activation=2.21, non_torch=0.25, kv=42.8, tokens=175_296, concurrency=21.40),
            **_H100_V019),
    VllmLog("Qwen2.5-7B, 8,192 tokens", _PLANNER + "qwen-qwen2-5-7b-instruct--h100-80gb--tp1pp1dp1--8192.log",
            command="vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.95 "
                    "--no-enable-prefix-caching", model="Qwen/Qwen2.5-7B",
            options=dict(_PLANNER_OPTIONS, max_model_len=8192),
            logged=dict(weights=14.25, activation=2.21, non_torch=0.24, kv=58.53, tokens=1_096_000,
                        concurrency=133.79), **_H100_V019),
    VllmLog("Qwen2.5-7B, fp8 KV cache", _PLANNER + "qwen-qwen2---h100-80gb--tp1pp1dp1--8192-dtbf16-kvfp8.log",
            command="vllm serve Qwen/Qwen2.5-7B-Instruct --dtype bfloat16 --max-model-len 8192 "
                    "--gpu-memory-utilization 0.95 --kv-cache-dtype fp8 --no-enable-prefix-caching",
            model="Qwen/Qwen2.5-7B", options=dict(_PLANNER_OPTIONS, max_model_len=8192, kv_cache_dtype="fp8"),
            logged=dict(weights=14.25, activation=2.21, non_torch=0.24, kv=58.53, tokens=2_192_000,
                        concurrency=267.58), **_H100_V019),
    VllmLog("Llama-3.1-8B, fp8 weights", _PLANNER + "meta-llama-llama-3---h100-80gb--tp1pp1dp1--8192-qfp8.log",
            command="vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192 --quantization fp8 "
                    "--gpu-memory-utilization 0.95 --no-enable-prefix-caching", model="meta-llama/Llama-3.1-8B",
            options=dict(_PLANNER_OPTIONS, max_model_len=8192, quantization="fp8"),
            logged=dict(weights=8.49, activation=1.89, non_torch=0.25, kv=64.61, tokens=529_248, concurrency=64.61),
            note="vLLM quantizes the 16-bit checkpoint to fp8 as it loads; the engine counts its bytes by formula",
            **_H100_V019),
    VllmLog("Llama-3.1-8B, 4-bit GPTQ weights", _PLANNER + "w4a16-redhatai-lla--h100-80gb--tp1pp1dp1--8192-dtf16.log",
            command="vllm serve RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16 --dtype float16 "
                    "--max-model-len 8192 --gpu-memory-utilization 0.95 --no-enable-prefix-caching",
            model="meta-llama/Llama-3.1-8B",
            options=dict(_PLANNER_OPTIONS, max_model_len=8192, dtype="float16", quantization="int4"),
            logged=dict(weights=5.38, activation=1.89, non_torch=0.25, kv=67.71, tokens=554_704, concurrency=67.71),
            note="vLLM runs it with its gptq_marlin kernels (the engine line); the checkpoint's group size is taken "
                 "as 128, GPTQ's usual, and the engine counts its bytes by formula", **_H100_V019),
    VllmLog("Qwen2.5-7B, fp8 weights", _PLANNER + "fp8dyn-redhatai-qwen2-5---h100-80gb--tp1pp1dp1--8192.log",
            command="vllm serve RedHatAI/Qwen2.5-7B-Instruct-fp8-dynamic --max-model-len 8192 "
                    "--gpu-memory-utilization 0.95 --no-enable-prefix-caching", model="Qwen/Qwen2.5-7B",
            options=dict(_PLANNER_OPTIONS, max_model_len=8192, quantization="fp8"),
            logged=dict(weights=8.14, activation=2.21, non_torch=0.24, kv=64.64, tokens=1_210_304,
                        concurrency=147.74),
            note="an FP8-dynamic checkpoint (a scale per output channel); the engine counts its bytes by formula",
            **_H100_V019),
    VllmLog("Meta-Llama-3-8B, V0", "https://github.com/vllm-project/vllm/pull/10511",
            version="V0, the branch of PR #10511 (December 2024)", rules="0.6.5", gpu="H100 80GB", total_gib=79.22,
            command="vllm serve meta-llama/Meta-Llama-3-8B", model="meta-llama/Llama-3.1-8B",
            options=dict(gpu_memory_utilization=0.9, max_model_len=8192, max_num_batched_tokens=8192,
                         max_num_seqs=256),
            logged=dict(weights=14.96, activation=1.26, non_torch=1.79, kv=53.29),
            note="a pull request's build; the card is inferred from its 79.22 GiB; max_num_batched_tokens is V0's "
                 "rule without chunked prefill, max(max_model_len, 2048); blocks, tokens and concurrency not in the "
                 "comment"),
    _rtx3090(20_000, dict(activation=2.07, kv=3.81, blocks=1952, concurrency=1.56),
             "options not stated are vLLM's defaults; V0 without chunked prefill profiles max(max_model_len, 2048) "
             "tokens; the activation is the logged peak_torch_memory (17.06 GiB) less the weights"),
    _rtx3090(29_000, dict(activation=2.99, kv=2.89, blocks=1478, concurrency=0.82),
             "vLLM refused to start: 1,478 blocks hold 23,648 tokens, fewer than one request of 29,000; the "
             "activation is the logged peak_torch_memory (17.98 GiB) less the weights", refused=True),
    VllmLog("Qwen2.5-7B in 4 bits, RTX 4060", "https://github.com/vllm-project/vllm/issues/13882",
            version="v0.7.3.dev233 (V0; printed)", rules="0.6.5", gpu="RTX 4060 8GB", total_gib=8.00,
            command="Qwen2.5-7B-Instruct-bnb-4bit, quantization=bitsandbytes, dtype bfloat16, max_seq_len 4096, "
                    "gpu_memory_utilization 0.70 (vLLM's engine configuration line)",
            model="Qwen/Qwen2.5-7B",
            options=dict(gpu_memory_utilization=0.7, max_model_len=4096, max_num_batched_tokens=4096,
                         max_num_seqs=256, quantization="nf4", double_quant=True),
            logged=dict(weights=5.2032, activation=1.42, non_torch=0.03, kv=-1.05, blocks=0, concurrency=0.0),
            note="a checkpoint quantized beforehand: its double quantization is inferred (the logged weights fit "
                 "NF4 with 8-bit scales, not with float32 ones); max_num_batched_tokens is V0's rule without chunked "
                 "prefill; vLLM started with 0 GPU blocks and could serve nothing", refused=True),
)


@dataclass(frozen=True)
class Beside:
    """A log and the engine's account of the same start-up (``account``; for a start-up vLLM would refuse, the account
    :class:`helpers.serving.WouldNotStart` carries, and ``refusal`` its line)."""

    log: VllmLog
    account: StartupAccount
    refusal: str | None

    def engine(self) -> dict:
        """The engine's figures under the log's names: GiB (``weights``, ``activation``, ``non_torch``, ``kv``),
        ``tokens``, ``blocks``, ``concurrency``; over several GPUs rank 0's, and under pipeline parallelism the last
        stage's ``last_weights`` and ``last_activation`` too."""
        a = self.account
        last = a.other_stages[-1:]
        return dict(weights=a.weights_bytes / GiB, activation=a.activation_peak_bytes / GiB,
                    non_torch=a.non_torch_bytes / GiB, kv=a.available_kv_bytes / GiB, tokens=a.kv_tokens,
                    blocks=a.num_blocks, concurrency=a.max_concurrency,
                    **{k: v for s in last for k, v in (("last_weights", s.weights_bytes / GiB),
                                                        ("last_activation", s.activation_peak_bytes / GiB))})


def engine_beside_logs(logs=LOGS) -> list[Beside]:
    """Each log of ``logs`` with :func:`helpers.serving.vllm_startup`'s account of the same start-up (for a model with a
    vision tower, :func:`helpers.vllm_mm.vllm_startup_mm`'s): the card's total as logged (rounded to the byte), the log's
    options and version rules, and its logged non-torch memory.

    Raises:
        ValueError: as :func:`helpers.serving.vllm_startup` does for an option it refuses (not for a refusal to
            start, which is part of the comparison).
    """
    rows = []
    for log in logs:
        try:
            startup = vllm_startup_mm if is_multimodal(log.model) else vllm_startup
            account, refusal = startup(log.model, gpu=round(log.total_gib * GiB), version=log.rules,
                                       non_torch_bytes=round(log.logged["non_torch"] * GiB), **log.options), None
        except WouldNotStart as e:
            account, refusal = e.account, str(e)
        rows.append(Beside(log, account, refusal))
    return rows


def _sized(base: str, name: str, **sizes) -> dict:
    """A config dict: the shipped ``base`` config's file with ``sizes`` in place of its own (the rest, rope and norm
    settings, are the family's), named ``name``."""
    from ..hf_config import CONFIG_DIR, SHIPPED

    data = json.loads((CONFIG_DIR / SHIPPED[base].file).read_text())
    return {**data, **sizes, "_name_or_path": name}


#: Llama-3.3-70B-Instruct: 80 layers of 8192, MLP 28,672, 64 heads, 8 KV heads, vocabulary 128,256, untied, 131,072
#: positions, as oumi's ``configs/recipes/llama3_3/README.md`` tabulates it (no stored copy of the Hub's
#: ``config.json`` was found); rope and norm settings are Llama-3.1's (the shipped 8B's file).
LLAMA_33_70B = _sized("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.3-70B-Instruct", hidden_size=8192,
                      intermediate_size=28672, num_attention_heads=64, num_key_value_heads=8, num_hidden_layers=80)
#: Qwen2.5-72B-Instruct: 80 layers of 8192, MLP 29,568, 64 heads, 8 KV heads (head size 128), vocabulary 152,064,
#: untied, as public copies of its ``config.json`` sizes list them (no stored copy of the file itself was found);
#: 32,768 positions (the Instruct model's file; the logs ask for 8,192); the rest is Qwen2.5-7B's file.
QWEN_25_72B = _sized("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-72B-Instruct", hidden_size=8192, intermediate_size=29568,
                     num_attention_heads=64, num_key_value_heads=8, num_hidden_layers=80, max_window_layers=80,
                     max_position_embeddings=32768)


def _planner_parallel(name: str, file: str, model, repo: str, tp: int, pp: int, logged: dict, note: str = "",
                      **options) -> VllmLog:
    """One of llm-d-planner's v0.19.0 start-ups over several H100s (``vllm serve <repo> --max-model-len 8192
    --gpu-memory-utilization 0.95 --no-enable-prefix-caching`` and the parallel sizes, as its ``non-default args``
    line prints them): rank 0's figures, as its log prints them (every rank's agree, but a pipeline stage's)."""
    sizes = (f" --tensor-parallel-size {tp}" if tp > 1 else "") + (f" --pipeline-parallel-size {pp}" if pp > 1 else "")
    return VllmLog(name, _PLANNER + file, command=f"vllm serve {repo} --max-model-len 8192 "
                   f"--gpu-memory-utilization 0.95 --no-enable-prefix-caching{sizes}", model=model,
                   options=dict(_PLANNER_OPTIONS, max_model_len=8192, tensor_parallel_size=tp,
                                pipeline_parallel_size=pp, **options),
                   logged=logged, note=note, **_H100_V019)


#: Start-ups over several GPUs, every option printed (vLLM v0.19.0, H100 80GB, llm-d-planner's validation runs at
#: commit d3121e0): Llama-3.1 8B and Qwen2.5 7B at tensor_parallel_size 2 and 4, Llama-3.1 8B at
#: pipeline_parallel_size 2 and 4, and 70B-class models at 2 and 4.  ``logged`` holds rank 0's figures
#: (``weights`` per GPU); under pipeline parallelism also the last stage's (``last_weights``, ``last_activation``),
#: whose fewer blocks every stage gets.
PARALLEL_LOGS = (
    _planner_parallel("Llama-3.1-8B, TP 2", "meta-llama-llama-3-1-8b---h100-80gb--tp2pp1dp1--8192.log",
                      "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", 2, 1,
                      dict(weights=7.51, activation=1.89, non_torch=2.07, kv=63.76, tokens=1_044_688,
                           concurrency=127.53)),
    _planner_parallel("Llama-3.1-8B, TP 4", "meta-llama-llama-3-1-8b---h100-80gb--tp4pp1dp1--8192.log",
                      "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", 4, 1,
                      dict(weights=3.77, activation=1.89, non_torch=2.13, kv=67.44, tokens=2_209_792,
                           concurrency=269.75)),
    _planner_parallel("Llama-3.1-8B, PP 2", "meta-llama-llama-3-1-8b---h100-80gb--tp1pp2dp1--8192.log",
                      "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", 1, 2,
                      dict(weights=7.51, activation=1.10, non_torch=0.07, kv=66.54, tokens=1_075_312,
                           concurrency=131.26, last_weights=7.51, last_activation=2.01)),
    _planner_parallel("Llama-3.1-8B, PP 4", "meta-llama-llama-3-1-8b---h100-80gb--tp1pp4dp1--8192.log",
                      "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B-Instruct", 1, 4,
                      dict(weights=4.26, activation=1.10, non_torch=0.07, kv=69.8, tokens=2_257_264,
                           concurrency=275.54, last_weights=4.26, last_activation=2.01),
                      note="the middle stages logged 3.28 GiB of weights and 1.05 GiB of activation"),
    _planner_parallel("Qwen2.5-7B, TP 2", "qwen-qwen2-5-7b-instruct--h100-80gb--tp2pp1dp1--8192.log",
                      "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B-Instruct", 2, 1,
                      dict(weights=7.12, activation=2.21, non_torch=2.06, kv=63.84, tokens=2_390_592,
                           concurrency=291.82)),
    _planner_parallel("Qwen2.5-7B, TP 4", "qwen-qwen2-5-7b-instruct--h100-80gb--tp4pp1dp1--8192.log",
                      "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-7B-Instruct", 4, 1,
                      dict(weights=3.55, activation=2.21, non_torch=2.13, kv=67.34, tokens=5_043_280,
                           concurrency=615.63)),
    _planner_parallel("Qwen2.5-72B, TP 2", "qwen-qwen2-5-72b-instruc--h100-80gb--tp2pp1dp1--8192.log",
                      QWEN_25_72B, "Qwen/Qwen2.5-72B-Instruct", 2, 1,
                      dict(weights=67.8, activation=2.29, non_torch=2.09, kv=3.04, tokens=19_920, concurrency=2.43)),
    _planner_parallel("Llama-3.3-70B fp8, TP 2", "fp8dyn-llama-3-3-70b--h100-80gb--tp2pp1dp1--8192.log",
                      LLAMA_33_70B, "RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic", 2, 1,
                      dict(weights=33.88, activation=1.96, non_torch=2.1, kv=37.28, tokens=244_304,
                           concurrency=29.82),
                      note="an FP8-dynamic checkpoint; the engine counts its bytes by formula", quantization="fp8"),
    _planner_parallel("Llama-3.3-70B fp8, TP 4", "fp8dyn-llama-3-3-70b--h100-80gb--tp4pp1dp1--8192.log",
                      LLAMA_33_70B, "RedHatAI/Llama-3.3-70B-Instruct-fp8-dynamic", 4, 1,
                      dict(weights=16.96, activation=1.97, non_torch=2.21, kv=54.09, tokens=708_992,
                           concurrency=86.55),
                      note="an FP8-dynamic checkpoint; the engine counts its bytes by formula", quantization="fp8"),
    _planner_parallel("Llama-3.3-70B int8, TP 2", "redhatai-llama-3-3-70b-i--h100-80gb--tp2pp1dp1--8192.log",
                      LLAMA_33_70B, "redhatai/Llama-3.3-70B-Instruct-quantized.w8a8", 2, 1,
                      dict(weights=33.88, activation=1.96, non_torch=2.11, kv=37.28, tokens=244_304,
                           concurrency=29.82),
                      note="int8 weights (w8a8) take a byte each, as fp8's: the engine counts them with the fp8 "
                           "formula (their per-channel scales are a few KiB more)", quantization="fp8"),
)


def _planner_single(name: str, file: str, repo: str, logged: dict, note: str = "") -> VllmLog:
    """One of llm-d-planner's v0.19.0 start-ups on one H100 (``vllm serve <repo> --max-model-len 8192
    --gpu-memory-utilization 0.95 --no-enable-prefix-caching``, as its ``non-default args`` line prints them), of a
    config shipped for the logs (:data:`helpers.hf_config.FOR_LOGS`, named as the repository served)."""
    return VllmLog(name, _PLANNER + file, command=f"vllm serve {repo} --max-model-len 8192 "
                   f"--gpu-memory-utilization 0.95 --no-enable-prefix-caching", model=repo,
                   options=dict(_PLANNER_OPTIONS, max_model_len=8192), logged=logged, note=note, **_H100_V019)


_GEMMA_NOTE = ("layers alternate sliding window (4,096 tokens) and full attention: two KV cache groups; ``blocks`` is "
               "the num_gpu_blocks the log's cache_config_info prints, the tokens num_blocks // 2 x 16")
_GEMMA3_NOTE = ("five sliding-window layers (1,024 tokens) to one full-attention layer: 7, 6 and 7 KV cache groups; "
                "``blocks`` is the num_gpu_blocks the log's cache_config_info prints; multimodal: vLLM loads the SigLIP "
                "vision tower and projector too and profiles the encoder on 32 dummy images (the log: \"Encoder cache "
                "will be initialized with a budget of 8192 tokens, and profiled with 32 image items of the maximum "
                "feature size\"), which the engine traces (:func:`helpers.vllm_mm.vllm_startup_mm`)")
#: Start-ups of models with sliding-window layers, every option printed (vLLM v0.19.0, H100 80GB, llm-d-planner's
#: validation runs at commit d3121e0): Gemma-2 2B, 9B and 27B (instruction-tuned; text only) and Gemma-3 4B, 12B and
#: 27B (instruction-tuned; with their vision tower), each sized by vLLM's KV cache groups (:mod:`helpers.vllm_kv`);
#: the Gemma-3 start-ups by :func:`helpers.vllm_mm.vllm_startup_mm` (:func:`engine_beside_logs` picks it).
SLIDING_LOGS = (
    _planner_single("Gemma-2 2B, 8,192 tokens", "google-gemma-2-2b-it--h100-80gb--tp1pp1dp1--8192.log",
                    "google/gemma-2-2b-it", dict(weights=4.9, activation=3.62, non_torch=0.24, kv=66.47,
                                                 tokens=670_160, blocks=83_770, concurrency=81.73), _GEMMA_NOTE),
    _planner_single("Gemma-2 9B, 8,192 tokens", "google-gemma-2-9b-it--h100-80gb--tp1pp1dp1--8192.log",
                    "google/gemma-2-9b-it", dict(weights=17.22, activation=3.65, non_torch=0.25, kv=54.12,
                                                 tokens=168_880, blocks=21_110, concurrency=20.60), _GEMMA_NOTE),
    _planner_single("Gemma-2 27B, 8,192 tokens", "google-gemma-2-27b-it--h100-80gb--tp1pp1dp1--8192.log",
                    "google/gemma-2-27b-it", dict(weights=50.72, activation=3.66, non_torch=0.26, kv=20.59,
                                                  tokens=58_672, blocks=7_335, concurrency=7.16), _GEMMA_NOTE),
    _planner_single("Gemma-3 4B, 8,192 tokens", "google-gemma-3-4b-it--h100-80gb--tp1pp1dp1--8192.log",
                    "google/gemma-3-4b-it", dict(weights=8.58, activation=3.89, non_torch=0.25, kv=62.51,
                                                 tokens=468_144, blocks=204_817, concurrency=57.05), _GEMMA3_NOTE),
    _planner_single("Gemma-3 12B, 8,192 tokens", "google-gemma-3-12b-it--h100-80gb--tp1pp1dp1--8192.log",
                    "google/gemma-3-12b-it", dict(weights=23.31, activation=3.94, non_torch=0.25, kv=47.72,
                                                  tokens=130_304, blocks=48_867, concurrency=15.88), _GEMMA3_NOTE),
    _planner_single("Gemma-3 27B, 8,192 tokens", "google-gemma-3-27b-it--h100-80gb--tp1pp1dp1--8192.log",
                    "google/gemma-3-27b-it", dict(weights=51.45, activation=3.99, non_torch=0.26, kv=19.53,
                                                  tokens=36_560, blocks=15_997, concurrency=4.46), _GEMMA3_NOTE),
)
#: Gemma 7B in the same runs, for contrast: the same 256,000-row vocabulary, every layer full attention (one group).
GEMMA_7B = _planner_single("Gemma 7B, 8,192 tokens", "google-gemma-7b--h100-80gb--tp1pp1dp1--8192.log",
                           "google/gemma-7b", dict(weights=15.91, activation=3.63, non_torch=0.25, kv=55.44,
                                                   tokens=129_760, blocks=8_110, concurrency=15.84),
                           "every layer full attention: one group, num_blocks x 16 tokens")
