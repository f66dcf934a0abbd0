"""vLLM's start-up memory accounting, reproduced on the simulated GPU (lesson 10).

When vLLM starts it loads the weights, runs one *profile run* (a forward pass of the largest batch it will schedule,
then the sampler), and gives the KV cache what is left of ``total × gpu_memory_utilization``::

    available KV bytes = total × utilization − (weights + activation peak + non-torch memory)
    blocks             = ⌊available / (KV bytes per token × block_size)⌋       (one page per layer and block)
    KV tokens          = blocks × block_size

:func:`vllm_startup` traces the first two terms on the engine (the Hugging Face model of the config, on fake
tensors), takes the third as a stated assumption (:data:`NON_TORCH_BYTES`), and does vLLM's arithmetic.  The rules
and their sources (vLLM's files and functions, read at the commits named in the project's research notes on vLLM's
start-up logs, section 3) are given where each is applied.  All sizes are bytes; 1 GiB = 2**30 bytes, as vLLM logs.

CUDA graphs are outside the account, as in vLLM v0.19.0 by default: it logs an "Estimated CUDA graph memory" but
subtracts it only when ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`` (``vllm/envs.py``, default 0;
``Worker.determine_available_memory``, ``vllm/v1/worker/gpu_worker.py``): the graphs' pool is taken later from the
headroom ``gpu_memory_utilization`` leaves, not from the KV cache; :meth:`StartupAccount.lines` says so.

Over several GPUs (``tensor_parallel_size``, ``pipeline_parallel_size``) the account is one GPU's: the engine traces
the Hugging Face model of one rank's shard, as vLLM v0.19.0 cuts heads, widths, vocabulary and layers
(:mod:`helpers.vllm_rules`), and every rank gets the fewest KV blocks of any rank.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from .config import StepConfig, check_int
from .errors import first_line
from .formats import BY_FORMULA, FOR_SERVING, INT4_GROUP, WEIGHT_FORMATS
from .gpus import CARD_48GB, GPU_CARDS, GPU_SPECS, SIMULATED_GPU
from .hf_config import FOR_LOGS, SHIPPED, config_label, load_config
from .profile import STEPS, keep, recall
from .units import GiB
from .vllm_kv import VERSION as GROUPS_VERSION
from .vllm_kv import KVGroups, attention_shape
from .vllm_profile import formula_weight_bytes, profile_run
from .vllm_rules import Split, rank_config, scheduler_defaults, splits
from .vllm_rules import non_torch_bytes as parallel_non_torch

#: The accounting rules this module reproduces, by the version named in its ``version`` argument.
VERSIONS = {
    "0.11": "V1 engine, v0.9.1 to v0.19.0 (gpu_worker.py Worker.determine_available_memory with memory_profiling); "
            "its profile run's sampler pass as v0.19.0 runs it",
    "0.6.5": "V0 engine, v0.6.5 to v0.10 (worker.py Worker.determine_num_available_blocks with memory_profiling)",
}
#: The model dtypes (``--dtype``), and the KV cache dtypes (``--kv-cache-dtype``): "auto" is the model's dtype;
#: the fp8 formats keep one byte per value.
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
KV_CACHE_DTYPES = {"auto": None, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
#: vLLM's default tokens per KV block (``--block-size``).
BLOCK_SIZE = 16
#: The card :func:`vllm_startup` assumes unless told another (:data:`helpers.gpus.GPU_CARDS`).
DEFAULT_GPU = "H100 80 GB"

#: Non-torch memory, *assumed*: the growth of the GPU's used memory outside PyTorch's allocator between the worker's
#: start and the end of the profile run (``non_torch_increase`` in ``vllm/utils`` ``memory_profiling``: cuBLAS and
#: NCCL state, other libraries' workspaces), which no simulation of tensors sees.  0.16 GiB is the figure a released
#: vLLM (V0, v0.8 or later, whose ``memory_profiling`` measures it as v0.11's does) logged for one small model on one
#: 80 GB H100 (mellea PR #416; research notes, log 9).  Other logs: 0.03 GiB on an RTX 4060 (vLLM v0.7.3, issue
#: #13882), 0.30 GiB per L40S under tensor parallelism (v0.7.1, issue #15815), and 1.79 GiB from a pre-release build
#: of the measurement itself on an H100 (PR #10511): pass the logged figure to reproduce a log.
NON_TORCH_BYTES = round(0.16 * GiB)

class WouldNotStart(ValueError):
    """vLLM would refuse to start: nothing is left for the KV cache, or it cannot hold one sequence of
    ``max_model_len`` tokens (:attr:`StartupAccount.refusal`).

    Attributes:
        account: the :class:`StartupAccount` that says so, every figure filled in.
    """

    def __init__(self, message: str, account: "StartupAccount"):
        super().__init__(message)
        self.account = account


def kv_bytes_per_token(model, dtype: str = "bfloat16", kv_cache_dtype: str = "auto") -> int:
    """KV cache bytes one token of vLLM's reported cache size takes ("GPU KV cache size: N tokens"), all layers
    together: 2 (K and V) × layers × KV heads × head size × bytes per value.

    The page of one layer holds ``block_size`` tokens: ``2 × block_size × num_kv_heads × head_size × dtype bytes``
    (``AttentionSpec.page_size_bytes``, ``vllm/v1/kv_cache_interface.py``; V0's
    ``CacheEngine.get_cache_block_size``, ``vllm/worker/cache_engine.py``, multiplies it by the layers).  The head size
    is the config's ``head_dim`` when it has one, else ``hidden_size // num_attention_heads``; the KV heads are
    ``num_key_value_heads``, else ``num_attention_heads`` (``ModelConfig.get_head_size``,
    ``get_total_num_kv_heads``).  No tensor parallelism: one GPU holds every head.

    A model with sliding-window layers (Gemma-2, Gemma-3, Mistral 7B v0.1) is sized by vLLM v0.19.0's KV cache groups
    (:func:`kv_cache_groups`, :mod:`helpers.vllm_kv`): every layer still keeps a page per block, and the layers
    counted are the groups' with their padding (``group size × groups``: Gemma-3 4B's 34 layers count 35).  So this
    is what one token of the reported size costs; a sliding-window layer holds at most ``sliding_window − 1 +
    max_num_batched_tokens`` tokens of a request, so a long request takes fewer of them than its length
    (:attr:`StartupAccount.max_concurrency` counts it).

    Args:
        model: a Hugging Face config: a shipped name (:func:`helpers.hf_config.shipped_configs`), or anything
            :func:`helpers.hf_config.load_config` takes.
        dtype: the model's dtype, one of :data:`DTYPES`; ``kv_cache_dtype`` ``"auto"`` keeps the KV cache in it.
        kv_cache_dtype: one of :data:`KV_CACHE_DTYPES` (the fp8 formats: 1 byte).

    Raises:
        ValueError: in one line, for an unknown model or dtype, or a model whose layers cache something other than
            full or sliding-window keys and values: latent attention (MLA, DeepSeek-V2's ``kv_lora_rank``),
            chunked local attention (Llama-4's ``attention_chunk_size``), or a hybrid of attention and other layers;
            vLLM sizes those by other specs, not reproduced here.
    """
    _check_choice("dtype", dtype, DTYPES)
    _check_choice("kv_cache_dtype", kv_cache_dtype, KV_CACHE_DTYPES)
    groups, kv_heads, head_size = attention_shape(_config(model).get_text_config(), config_label(model))
    value_bytes = KV_CACHE_DTYPES[kv_cache_dtype] or DTYPES[dtype].itemsize
    return 2 * groups.padded_layers * kv_heads * head_size * value_bytes


def kv_cache_groups(model) -> KVGroups:
    """vLLM v0.19.0's KV cache groups of ``model``'s layers (:func:`helpers.vllm_kv.kv_groups`): one group of every
    layer for a model whose layers all attend alike.

    Raises:
        ValueError: as :func:`kv_bytes_per_token`.
    """
    return attention_shape(_config(model).get_text_config(), config_label(model))[0]


@dataclass(frozen=True)
class StartupAccount:
    """vLLM's start-up account of one GPU, as :func:`vllm_startup` reproduces it.  Bytes unless named.

    Attributes:
        model, version, gpu: the model's label, the rules' version (:data:`VERSIONS`), the card's name (or
            ``"a GPU of N GiB"``).
        total_bytes: the memory CUDA reports for the card (``torch.cuda.mem_get_info()``'s total).
        gpu_memory_utilization, dtype, kv_cache_dtype, block_size: as vLLM's options of the same names.
        quantization: the weights' format, one of :data:`helpers.formats.FOR_SERVING`.
        max_model_len, max_num_batched_tokens, max_num_seqs: as given, or by the version's default rules.
        num_reqs: the requests of the profile run, each giving one row of logits: ``min(max_num_batched_tokens,
            max_num_seqs)``.
        parameter_count: the model's parameters (tied ones once).
        weights_bytes: traced: the model placed on the simulated GPU in ``dtype`` (vLLM's "model weights take").
        activation_peak_bytes: traced: the profile run's peak allocated above what was allocated before it (vLLM's
            "PyTorch activation peak memory", ``torch_peak_increase``).
        non_torch_bytes: assumed (:data:`NON_TORCH_BYTES` unless given): vLLM's "non_torch_memory".
        kv_bytes_per_token: :func:`kv_bytes_per_token` of this rank: its KV heads (:mod:`helpers.vllm_rules`) and
            its stage's layers (with sliding-window layers, the groups' padded layers: one token of :attr:`kv_tokens`).
        tensor_parallel_size, pipeline_parallel_size: as vLLM's options; with either above 1, every figure above is
            one rank's (weights, activation peak, non-torch memory and KV cache per GPU): the first rank of
            pipeline stage ``stage``, which holds ``layers`` (``[start, end)``).
        other_stages: the accounts of the first rank of each later stage (the ranks of a stage hold the same
            shapes); empty without pipeline parallelism.
        kv_groups: vLLM v0.19.0's KV cache groups of this rank's layers (:class:`helpers.vllm_kv.KVGroups`), or None:
            one group of full-attention layers (every model without sliding windows).  With more than one group,
            :attr:`num_blocks` is vLLM's ``num_blocks`` (pages per pool: ``available // page // group size``), each
            group's block table drawing from it, so the reported tokens are ``num_blocks // groups × block_size``.
    """

    model: str
    version: str
    gpu: str
    total_bytes: int
    gpu_memory_utilization: float
    dtype: str
    quantization: str
    kv_cache_dtype: str
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    num_reqs: int
    parameter_count: int
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    kv_bytes_per_token: int
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    stage: int = 0
    layers: tuple[int, int] | None = None
    other_stages: tuple["StartupAccount", ...] = ()
    kv_groups: KVGroups | None = None

    @property
    def requested_bytes(self) -> float:
        """What the instance may use: ``total × gpu_memory_utilization`` (``requested_memory``)."""
        return self.total_bytes * self.gpu_memory_utilization

    @property
    def non_kv_cache_bytes(self) -> int:
        """Weights + activation peak + non-torch memory (``non_kv_cache_memory`` of ``memory_profiling``)."""
        return self.weights_bytes + self.activation_peak_bytes + self.non_torch_bytes

    @property
    def available_kv_bytes(self) -> float:
        """``requested − non-KV`` ("Available KV cache memory"; negative when nothing is left)."""
        return self.requested_bytes - self.non_kv_cache_bytes

    @property
    def groups(self) -> int:
        """vLLM's KV cache groups (:attr:`kv_groups`): 1 unless some layers slide."""
        return 1 if self.kv_groups is None else len(self.kv_groups.windows)

    @property
    def block_bytes(self) -> int:
        """One block of ``block_size`` tokens in every layer: the KV page of each layer, all layers together (with
        groups, their padded layers: one block of every group's table)."""
        return self.kv_bytes_per_token * self.block_size

    @property
    def pool_block_bytes(self) -> int:
        """One of vLLM's ``num_blocks``: a page in each of the ``group size`` pools (:attr:`block_bytes` over the
        groups; :attr:`block_bytes` itself with one group)."""
        return self.block_bytes // self.groups

    @property
    def own_blocks(self) -> int:
        """``⌊available / pool block bytes⌋`` of this rank, 0 when nothing is available (``get_num_blocks``,
        ``vllm/v1/core/kv_cache_utils.py``: ``available // page_size // group_size``, the group size being every
        layer without sliding windows; V0: ``available // cache_block_size``, clamped at 0)."""
        return max(int(self.available_kv_bytes // self.pool_block_bytes), 0)

    @property
    def num_blocks(self) -> int:
        """The blocks every rank gets: the fewest of any stage's rank (:attr:`own_blocks`; ``get_kv_cache_configs``,
        ``vllm/v1/core/kv_cache_utils.py``: "Change the num_blocks of each worker to the smallest among all
        workers"); one card's own without parallelism."""
        return min(a.own_blocks for a in (self, *self.other_stages))

    @property
    def kv_cache_bytes(self) -> int:
        """What the blocks take: ``num_blocks × pool block bytes`` (at most :attr:`available_kv_bytes`)."""
        return self.num_blocks * self.pool_block_bytes

    @property
    def kv_tokens(self) -> int:
        """Tokens the KV cache holds, as vLLM reports them ("GPU KV cache size: N tokens"): ``num_blocks // groups ×
        block_size`` (``_report_kv_cache_config``, ``vllm/v1/core/kv_cache_utils.py``, v0.19.0)."""
        return self.num_blocks // self.groups * self.block_size

    @property
    def pages_per_request(self) -> int:
        """Blocks one request of ``max_model_len`` tokens needs, all groups together: ``⌈max_model_len /
        block_size⌉`` a full-attention group, ``⌈min(window − 1 + max_num_batched_tokens, max_model_len) /
        block_size⌉ + 1`` a sliding-window one (``max_memory_usage_bytes`` of ``FullAttentionSpec`` and
        ``SlidingWindowSpec``, ``vllm/v1/kv_cache_interface.py``, v0.19.0; :meth:`helpers.vllm_kv.KVGroups.
        pages_per_request`)."""
        if self.kv_groups is None:
            return math.ceil(self.max_model_len / self.block_size)
        return self.kv_groups.pages_per_request(self.max_model_len, self.max_num_batched_tokens, self.block_size)

    @property
    def max_concurrency(self) -> float:
        """Requests of ``max_model_len`` tokens the cache holds at once ("Maximum concurrency ... x").

        v0.11: blocks ÷ the blocks one request needs, :attr:`pages_per_request` (``get_max_concurrency_for_kv_cache_
        config``, ``vllm/v1/core/kv_cache_utils.py``; without sliding windows ``⌈max_model_len / block_size⌉``); V0:
        tokens ÷ ``max_model_len`` (``vllm/executor/executor_base.py``).  Equal when ``max_model_len`` is a multiple
        of ``block_size`` and no layer slides; a sliding-window group needs fewer blocks than ``max_model_len`` fills
        when ``sliding_window − 1 + max_num_batched_tokens`` is below it.
        """
        if self.version == "0.6.5":
            return self.kv_tokens / self.max_model_len
        return self.num_blocks / self.pages_per_request

    @property
    def refusal(self) -> str | None:
        """Why vLLM would not start (one line), or None: a rank's weights larger than its card (vLLM's load_model
        stops with ``torch.OutOfMemoryError``), no memory left for a block, or less than one sequence of
        ``max_model_len`` tokens fits (v0.11: ``check_enough_kv_cache_memory``, ``vllm/v1/core/kv_cache_utils.py``;
        V0: ``raise_if_cache_size_invalid``, ``vllm/worker/worker.py``).  With pipeline parallelism, the figures are
        those of the stage that binds (the heaviest weights, or the fewest blocks)."""
        ranks = (self, *self.other_stages)
        heavy = max(ranks, key=lambda a: a.weights_bytes)
        if heavy.weights_bytes > self.total_bytes:
            return (f"CUDA out of memory: {heavy._rank()}weights take {heavy.weights_bytes / GiB:.2f} GiB, more than "
                    f"the whole card's {self.total_bytes / GiB:.2f} GiB: smaller weights (quantization) or more GPUs "
                    f"(tensor parallelism) are needed")
        a = min(ranks, key=lambda r: r.own_blocks)
        if a.num_blocks == 0 and a.non_kv_cache_bytes >= a.total_bytes:
            return (f"{a._rank()}weights, activation peak and non-torch memory take {a.non_kv_cache_bytes / GiB:.2f} "
                    f"GiB, more than the whole card's {a.total_bytes / GiB:.2f} GiB: smaller weights (quantization) or "
                    f"more GPUs (tensor parallelism) are needed")
        if a.num_blocks == 0:
            return (f"no memory is left for the KV cache: {a._rank()}weights, activation peak and non-torch memory "
                    f"take {a.non_kv_cache_bytes / GiB:.2f} GiB of the {a.requested_bytes / GiB:.2f} GiB that "
                    f"gpu_memory_utilization {a.gpu_memory_utilization:g} allows; raise gpu_memory_utilization")
        needed = a.pages_per_request  # _check_enough_kv_cache_memory: bytes needed above available, in blocks
        if needed > self.num_blocks:
            return (f"one sequence of max_model_len {a.max_model_len:,} tokens needs "
                    f"{needed * a.pool_block_bytes / GiB:.2f} GiB of KV cache, more than the "
                    f"{a.available_kv_bytes / GiB:.2f} GiB available{' on ' + a._rank()[:-2] if a._rank() else ''}: "
                    f"vLLM would not start; the longest that fits is {a.longest_fitting:,} tokens: lower max_model_len or "
                    f"raise gpu_memory_utilization")
        return None

    @property
    def longest_fitting(self) -> int:
        """The longest request the blocks hold: :attr:`kv_tokens` without sliding windows; with them, the longest
        ``max_model_len`` whose :attr:`pages_per_request` fit in :attr:`num_blocks` (vLLM v0.19.0's
        ``_estimate_max_model_len_from_groups`` searches it the same way), at most the model's ``max_model_len``."""
        if self.kv_groups is None or not self.kv_groups.sliding:
            return self.kv_tokens
        fits = lambda n: self.kv_groups.pages_per_request(n, self.max_num_batched_tokens,  # noqa: E731
                                                          self.block_size) <= self.num_blocks
        low, high = 0, self.max_model_len
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        return low

    def _rank(self) -> str:
        """``"stage S's ranks: "`` under pipeline parallelism, else nothing (the words the refusals start with)."""
        return f"stage {self.stage}'s ranks: " if self.pipeline_parallel_size > 1 else ""

    def lines(self) -> list[str]:
        """The account in vLLM's own terms, one figure a line, GiB with two decimals as vLLM logs them."""
        gib = lambda n: f"{n / GiB:.2f} GiB"  # noqa: E731
        kv = self.dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype
        return [
            f"vLLM {self.version} start-up, simulated: {self.model} in {self.dtype}"
            f"{'' if self.quantization == 'none' else f', weights in {WEIGHT_FORMATS[self.quantization].label}'} on "
            f"{self.gpu}{self._parallel_words()}",
            f"  the instance may use total_gpu_memory ({gib(self.total_bytes)}) x gpu_memory_utilization "
            f"({self.gpu_memory_utilization:.2f}) = {gib(self.requested_bytes)}",
            f"  model weights take {gib(self.weights_bytes)} ("
            f"{'by formula' if self.quantization in BY_FORMULA else 'traced'}: "
            f"{self.parameter_count:,} parameters)",
            f"  PyTorch activation peak memory takes {gib(self.activation_peak_bytes)} (traced profile run: "
            f"{self.max_num_batched_tokens:,} tokens, then the {'logits' if self.version == '0.6.5' else 'sampler'} "
            f"of {self.num_reqs:,} requests)",
            f"  non_torch_memory takes {gib(self.non_torch_bytes)} (assumed, not simulated)",
            f"  Available KV cache memory: {gib(self.available_kv_bytes)}",
            f"  GPU KV cache size: {self.kv_tokens:,} tokens ({self.num_blocks:,} blocks of {self.block_size} "
            f"tokens, {self._groups_words()}{self.kv_bytes_per_token / 1024:,.0f} KiB per token in {kv})",
            f"  Maximum concurrency for {self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x"
            f"{self._window_words()}",
            *([] if self.version == "0.6.5" else [
                "  (CUDA graphs: estimated and logged by vLLM, not subtracted: VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS "
                "is 0 by default, vllm/envs.py)"]),
            *(f"  stage {a.stage} (layers {a.layers[0]}-{a.layers[1] - 1}): weights {gib(a.weights_bytes)}, activation "
              f"peak {gib(a.activation_peak_bytes)}, Available KV cache memory {gib(a.available_kv_bytes)}, "
              f"{a.own_blocks:,} blocks" for a in self.other_stages),
        ]

    def _groups_words(self) -> str:
        """What the cache-size line adds with more than one KV cache group: the groups, their size and kinds."""
        g = self.kv_groups
        if g is None or self.groups == 1:
            return ""
        sliding = sum(w is not None for w in g.windows)
        padding = f", {g.padded_layers - g.layers} padding" if g.padded_layers > g.layers else ""
        return (f"each block a page in every layer of {self.groups} groups of {g.group_size} layers ({sliding} "
                f"sliding-window, {self.groups - sliding} full-attention{padding}; vLLM {GROUPS_VERSION}'s groups), ")

    def _window_words(self) -> str:
        """What the concurrency line adds when some layers slide: the blocks one request needs."""
        if self.kv_groups is None or not self.kv_groups.sliding or self.version == "0.6.5":
            return ""
        full = self.groups * math.ceil(self.max_model_len / self.block_size)
        return (f" (a request needs {self.pages_per_request:,} blocks across the groups, {full:,} if no layer slid: "
                f"a sliding-window layer keeps at most its window - 1 + max_num_batched_tokens tokens)")

    def _parallel_words(self) -> str:
        """What the header adds under parallelism: the GPUs, and whose figures follow."""
        tp, pp = self.tensor_parallel_size, self.pipeline_parallel_size
        if tp * pp == 1:
            return ""
        layers = f", layers {self.layers[0]}-{self.layers[1] - 1}" if pp > 1 else ""
        return (f", {tp * pp} GPUs (tensor_parallel_size {tp}, pipeline_parallel_size {pp}): per GPU, rank 0's"
                f"{layers}; the KV blocks are the fewest of any rank's")


def vllm_startup(model, *, gpu: str | int = DEFAULT_GPU, gpu_memory_utilization: float = 0.9,
                 max_model_len: int | None = None, max_num_batched_tokens: int | None = None,
                 max_num_seqs: int | None = None, dtype: str = "bfloat16", kv_cache_dtype: str = "auto",
                 block_size: int = BLOCK_SIZE, version: str = "0.11", quantization: str = "none",
                 double_quant: bool = False, non_torch_bytes: int | None = None, tensor_parallel_size: int = 1,
                 pipeline_parallel_size: int = 1) -> StartupAccount:
    """vLLM's start-up account of ``model`` served alone on one GPU, or per GPU over several: weights, the profile
    run's activation peak, non-torch memory, and the KV cache the rest holds.

    What is traced on the simulated GPU (:class:`helpers.step.StepRunner`, ``device="simulated"``; for a model of
    many alike layers, written to the byte from the same run traced with 3 and 4 layers,
    :func:`helpers.vllm_profile.profile_run`):

    * the weights: the Hugging Face model of the config placed in ``dtype`` (every parameter and buffer:
      :func:`helpers.vllm_profile.traced_profile_run`), as vLLM's "model weights take" counts the allocated bytes
      across loading;
    * the profile run, as ``memory_profiling`` measures it (``torch_peak_increase``: the peak allocated above what
      was allocated before it): a forward pass under ``torch.inference_mode()`` of ``max_num_batched_tokens`` tokens,
      then the logits of the last token of each of ``num_reqs = min(max_num_batched_tokens, max_num_seqs)``
      requests, which the sampler takes in float32 (``GPUModelRunner.profile_run`` and ``_dummy_sampler_run``,
      ``vllm/v1/worker/gpu_model_runner.py``; V0: ``GPUModelRunnerBase.profile_run``, ``vllm/worker/model_runner.py``).
      vLLM runs one flat batch of ``num_reqs`` requests; Hugging Face's model stands in for it here with one
      sequence of ``max_num_batched_tokens`` tokens: a layer's tensors grow with the tokens, not with how they are
      split into requests, attention's too (its flash kernel keeps memory linear in the tokens).  The kernels are
      Hugging Face's, not vLLM's: its RMSNorm computes in float32 and its MLP keeps gate and up apart, where vLLM
      fuses them.  The sampler pass is v0.19.0's, traced as torch code (:mod:`helpers.vllm_profile`); V0's is its
      logits' float32 copy.  The input buffers vLLM allocates before the run are not simulated.

    Args:
        model: a Hugging Face config: a shipped name (:func:`helpers.hf_config.shipped_configs`, offline), or
            anything :func:`helpers.hf_config.load_config` takes.
        gpu: a card of :data:`helpers.gpus.GPU_CARDS` (its CUDA-reported total), or the total in bytes (a card
            whose name is unknown counts as not an A100).
        gpu_memory_utilization: in (0, 1]; the share of the total the instance may use.
        max_model_len, max_num_batched_tokens, max_num_seqs, block_size: vLLM's options of the same names, >= 1; by
            default the config's ``max_position_embeddings``, and for the other two the version's rules for the card
            (:func:`helpers.vllm_rules.scheduler_defaults`).
        dtype, kv_cache_dtype: one of :data:`DTYPES`, one of :data:`KV_CACHE_DTYPES`.
        version: one of :data:`VERSIONS`.
        quantization: one of :data:`FOR_SERVING`: the linear layers' weights as loaded, in bitsandbytes' NF4 or
            LLM.int8() formats (traced), or in fp8 or 4-bit GPTQ/AWQ (by :func:`formula_weight_bytes`; the profile run
            then traced with the weights in ``dtype``); the KV cache and activations keep ``dtype``.
            ``double_quant``: NF4's scales in 8 bits (``bnb_4bit_use_double_quant``, as a checkpoint quantized
            beforehand may say).
        non_torch_bytes: non-torch memory per GPU, >= 0; None: :data:`NON_TORCH_BYTES` on one card, under
            parallelism the figure vLLM v0.19.0 logged (:data:`helpers.vllm_rules.NON_TORCH_LOGGED`), assumed.
        tensor_parallel_size, pipeline_parallel_size: vLLM's options, >= 1; above 1 the account is one GPU's
            (:class:`StartupAccount`), its weights and profile run traced on the rank's shard
            (:mod:`helpers.vllm_rules`: the shard's shapes, so its weights are counted exactly); a split vLLM
            refuses, refused in its words.

    Returns:
        A :class:`StartupAccount`; its properties do vLLM's arithmetic (``Worker.determine_available_memory``,
        ``vllm/v1/worker/gpu_worker.py``; V0: ``Worker.determine_num_available_blocks``, ``vllm/worker/worker.py``).

    Raises:
        WouldNotStart (a ValueError): in one line, when vLLM would refuse to start (:attr:`StartupAccount.refusal`);
            its ``account`` holds the figures.
        ValueError: in one line, for an unknown model, GPU, dtype or version, a utilization outside (0, 1], a
            ``max_model_len`` beyond the model's positions (``max_position_embeddings``, which it must have), a count
            below 1, a V0 default that is not known (above), a model whose KV cache :func:`kv_bytes_per_token`
            refuses, or one with a vision tower (its start-up: :func:`helpers.vllm_mm.vllm_startup_mm`).
    """
    _check_formats(version, dtype, kv_cache_dtype, quantization, double_quant, gpu_memory_utilization)
    card, total = _gpu(gpu)
    _check_counts(max_model_len=max_model_len, max_num_batched_tokens=max_num_batched_tokens,
                  max_num_seqs=max_num_seqs, non_torch_bytes=non_torch_bytes, block_size=block_size,
                  tensor_parallel_size=tensor_parallel_size, pipeline_parallel_size=pipeline_parallel_size)
    config, label = _config(model), config_label(model)
    common = _with_defaults(config, label, version, card, total, max_model_len, max_num_batched_tokens, max_num_seqs,
                            gpu_memory_utilization=float(gpu_memory_utilization), dtype=dtype,
                            quantization=quantization, kv_cache_dtype=kv_cache_dtype, block_size=block_size,
                            non_torch_bytes=non_torch_bytes)
    account = _ranks_account(model, config, common, (quantization, double_quant), tensor_parallel_size,
                             pipeline_parallel_size)
    if account.refusal:
        raise WouldNotStart(account.refusal, account)
    return account


def _with_defaults(config, label: str, version: str, card: str, total: int, max_model_len: int | None,
                   max_num_batched_tokens: int | None, max_num_seqs: int | None, **options) -> dict:
    """:class:`StartupAccount`'s fields that every rank shares: ``options`` as given, the model's label, the card, and
    the lengths with vLLM's defaults filled in (``max_model_len`` from the config's positions; the scheduler's two
    from the version's rules for the card, :func:`helpers.vllm_rules.scheduler_defaults`), ``num_reqs`` the profile
    run's requests, ``min(max_num_batched_tokens, max_num_seqs)`` (``GPUModelRunner._dummy_sampler_run``).

    Raises:
        ValueError: in one line, as :func:`vllm_startup` for the lengths.
    """
    max_model_len = _max_model_len(config, label, max_model_len)
    max_num_batched_tokens, max_num_seqs = scheduler_defaults(version, card, total, max_model_len,
                                                              max_num_batched_tokens, max_num_seqs)
    return dict(model=label, version=version, gpu=card, total_bytes=total, max_model_len=max_model_len,
                max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
                num_reqs=min(max_num_batched_tokens, max_num_seqs), **options)


def _check_counts(**counts) -> None:
    """Each count >= 1 (``non_torch_bytes`` >= 0), or None where None means the default; else one line."""
    for name, value in counts.items():
        if value is not None or name in ("block_size", "tensor_parallel_size", "pipeline_parallel_size"):
            check_int(name, value, 0 if name == "non_torch_bytes" else 1)


def _ranks_account(model, config, common: dict, weights_format: tuple[str, bool], tp: int,
                   pp: int) -> StartupAccount:
    """The first rank's account, the later stages' first ranks' in its ``other_stages`` (one account without
    parallelism): a KV cache not modelled is refused first (:func:`kv_bytes_per_token`), then a split vLLM refuses, in
    its words (:func:`helpers.vllm_rules.splits`); non-torch memory, when ``common`` has None, by the setup.  Sliding
    windows are sized by v0.19.0's groups on one card and under tensor parallelism (every rank holds every layer), not
    under V0's rules nor pipeline parallelism (each stage's groups are the whole model's, projected on its layers:
    ``_project_kv_cache_groups_to_worker``, not reproduced): refused in one line."""
    if getattr(config, "vision_config", None) is not None:  # vLLM loads and profiles the tower too
        raise ValueError(f"{common['model']} has a vision tower: its start-up is helpers.vllm_mm.vllm_startup_mm's")
    groups = kv_cache_groups(config)
    kv_bytes_per_token(config, common["dtype"], common["kv_cache_dtype"])
    if groups.sliding and (pp > 1 or common["version"] == "0.6.5"):
        setup = "pipeline parallelism" if pp > 1 else "vLLM V0's rules (version '0.6.5')"
        raise ValueError(f"{common['model']}: sliding-window layers are sized by vLLM {GROUPS_VERSION}'s KV cache "
                         f"groups here, not under {setup}")
    common = dict(common, non_torch_bytes=parallel_non_torch(tp, pp, NON_TORCH_BYTES, common["non_torch_bytes"]))
    stages = [_rank_account(model, config, split, common, weights_format)
              for split in splits(config.get_text_config(), tp, pp)]
    return dataclasses.replace(stages[0], other_stages=tuple(stages[1:]))


def _rank_account(model, config, split: Split, common: dict, weights_format: tuple[str, bool]) -> StartupAccount:
    """The account of the first rank of ``split``'s stage: its KV bytes per token (its KV heads, its layers), its
    weights and profile run traced on its shard (:func:`helpers.vllm_rules.rank_config`), and ``common``'s figures."""
    alone = split.tp * split.pp == 1
    shard = config if alone else rank_config(config, split)
    parameters, weights, peak = _profile_run(_key(model, config), common["model"], common["dtype"], weights_format,
                                             common["max_num_batched_tokens"], common["num_reqs"],
                                             sm_count(common["gpu"], common["total_bytes"]), None if alone else split,
                                             common["version"])
    return StartupAccount(**common, parameter_count=parameters, weights_bytes=weights, activation_peak_bytes=peak,
                          kv_bytes_per_token=kv_bytes_per_token(shard, common["dtype"], common["kv_cache_dtype"]),
                          tensor_parallel_size=split.tp, pipeline_parallel_size=split.pp, stage=split.stage,
                          layers=(split.start, split.end), kv_groups=kv_cache_groups(shard))


def _check_formats(version: str, dtype: str, kv_cache_dtype: str, quantization: str, double_quant: bool,
                   gpu_memory_utilization: float) -> None:
    """:func:`vllm_startup`'s choices, each refused in one line when out of its set or range."""
    _check_choice("version", version, VERSIONS)
    _check_choice("dtype", dtype, DTYPES)
    _check_choice("kv_cache_dtype", kv_cache_dtype, KV_CACHE_DTYPES)
    _check_choice("quantization", quantization, FOR_SERVING)
    if double_quant not in (False, True) or (double_quant and quantization != "nf4"):
        raise ValueError(f"double_quant applies to quantization='nf4' (True or False), got {double_quant!r}")
    if isinstance(gpu_memory_utilization, bool) or not isinstance(gpu_memory_utilization, (int, float)) or not (
            0 < gpu_memory_utilization <= 1):
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}")


def _max_model_len(config, label: str, max_model_len: int | None) -> int:
    """``max_model_len``, or the config's ``max_position_embeddings`` when None; beyond them, refused in one line."""
    positions = getattr(config.get_text_config(), "max_position_embeddings", None)
    if positions is None:
        raise ValueError(f"{label} has no max_position_embeddings: its longest sequence is not known here")
    if max_model_len is None:
        return positions
    if max_model_len > positions:
        raise ValueError(f"max_model_len {max_model_len:,} exceeds the {positions:,} positions of {label} "
                         f"(max_position_embeddings)")
    return max_model_len


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; use one of {', '.join(choices)}")


def _gpu(gpu) -> tuple[str, int]:
    """The card's name and total bytes, from a name of :data:`GPU_CARDS` or a number of bytes."""
    if isinstance(gpu, str):
        if gpu not in GPU_CARDS:
            raise ValueError(f"unknown GPU {gpu!r}; use one of {', '.join(GPU_CARDS)}, or its total in bytes")
        return gpu, GPU_CARDS[gpu]
    check_int("gpu (a total in bytes)", gpu, 1)
    return f"a GPU of {gpu / GiB:.2f} GiB", gpu


def _config(model):
    """The ``PretrainedConfig`` of ``model``; a name that is no Hugging Face config is an unknown model."""
    try:
        return load_config(model)
    except ValueError as e:
        raise ValueError(f"unknown model {config_label(model)!r}: {first_line(e)}") from None


def _key(model, config):
    """What :func:`_profile_run` is given: a shipped name as it is (so that its runs are kept), else the config."""
    return model if isinstance(model, str) and (model in SHIPPED or model in FOR_LOGS) else config


def _profile_run(model, label: str, dtype: str, weights_format: tuple[str, bool], tokens: int,
                 num_reqs: int, num_sm: int, split: Split | None = None, version: str = "0.11"
                 ) -> tuple[int, int, int]:
    """(parameters, weight bytes, activation peak bytes) of :func:`vllm_startup`'s profile run, traced, or written
    exactly from shallow traces (:func:`helpers.vllm_profile.profile_run`, on one rank's shard when ``split`` says
    where it sits); a shipped config's runs are kept with the profiles (:data:`helpers.profile.KEPT`: the same figures
    every time, nothing in them is random)."""
    key = (("vllm profile run", model, label, dtype, weights_format, tokens, num_reqs, num_sm, split, version)
           if isinstance(model, str) else None)
    with STEPS:  # one step at a time in the process (helpers.profile.STEPS)
        run = recall(key)
        if run is None:
            run = profile_run(model, label, dtype, weights_format, tokens, num_reqs, num_sm, split,
                              v0=version == "0.6.5")
            keep(key, run)
        return run


def sm_count(gpu: str, total: int) -> int:
    """The streaming multiprocessors of the card the account is for (:data:`helpers.gpus.GPU_SPECS`): the named card,
    else the card of :data:`helpers.gpus.GPU_CARDS` or :data:`helpers.gpus.CARD_48GB` (an RTX A6000, 84 SMs) with
    exactly ``total`` bytes (a card given by its total, as lesson 10 gives the A6000), else the simulated GPU's
    (:data:`helpers.gpus.SIMULATED_GPU`: an H200, 132 SMs as an H100's).  vLLM's sampler sizes a buffer by it
    (:func:`helpers.vllm_sampler.triton_buffer_rows`)."""
    if gpu not in GPU_SPECS:
        gpu = next((card for card, nbytes in {**GPU_CARDS, **CARD_48GB}.items() if nbytes == total), SIMULATED_GPU)
    return GPU_SPECS[gpu].sms
