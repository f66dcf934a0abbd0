"""vLLM's KV cache groups: how v0.19.0 sizes the KV cache of a model whose layers do not all attend alike (lesson 10).

A sliding-window layer keeps keys and values for its last ``sliding_window`` tokens only; a full-attention layer for
every token.  vLLM v0.19.0 (V1 engine, paths inside the ``vllm`` package of the published 0.19.0 wheel) still gives
every layer the same page size (``block_size`` tokens: ``AttentionSpec.page_size_bytes``, ``v1/kv_cache_interface.py``)
and puts the layers in **groups** of equal size, each group with its own block table
(``_get_kv_cache_groups_uniform_page_size``, ``v1/core/kv_cache_utils.py``):

* the layers are sorted by kind (full attention, or sliding window of a given size), in layer order;
* the group size is the fewest layers of any kind, or the most when that is below 1.5 times the fewest;
* each kind is cut into ``⌈layers / group size⌉`` groups, layer ``i`` of the kind going to group ``i mod groups``
  (the last groups of a kind may hold one layer fewer: the pools keep a page for it anyway, "padding layers");
* a model whose layers are all alike is one group of every layer (``_get_kv_cache_groups_uniform_spec``).

The cache is ``group size`` pools, each shared by one layer of every group (``get_kv_cache_config_from_groups``):
``num_blocks = available // page_size // group_size`` (``get_num_blocks``), and each group's block table draws from
the same ``num_blocks``.  So vLLM reports ``num_blocks // groups × block_size`` tokens (``_report_kv_cache_config``),
and a request of ``max_model_len`` tokens needs, in each group, the pages of its kind's ``max_memory_usage_bytes``
(``v1/kv_cache_interface.py``): full attention ``⌈max_model_len / block_size⌉``; a sliding window
``⌈min(sliding_window − 1 + max_num_batched_tokens, max_model_len) / block_size⌉ + 1`` (the tokens a chunked prefill
can hold, and one page more because the window need not start at a page's start).  The maximum concurrency is
``num_blocks`` over the sum of those pages (``get_max_concurrency_for_kv_cache_config``), and vLLM refuses to start
when that sum is more than ``num_blocks`` (``_check_enough_kv_cache_memory`` with
``_max_memory_usage_bytes_from_groups``).

Which layers slide (``EngineArgs.create_engine_config``, ``engine/arg_utils.py``, and ``Attention.__init__``,
``model_executor/layers/attention/attention.py``): with ``layer_types`` naming more than one kind, a
``"sliding_attention"`` layer has the config's ``sliding_window`` (``gemma2.py``, ``gemma3.py``, ``llama.py``); otherwise
every layer has the config's ``sliding_window`` when it has one (Mistral 7B v0.1), or none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The version whose rules this module reproduces.
VERSION = "0.19.0"
#: ``layer_types`` entries this module sizes: a full-attention layer, and a sliding-window one.
FULL, SLIDING = "full_attention", "sliding_attention"
#: Keys of a text config whose layers cache something other than full or sliding-window keys and values; what
#: :func:`attention_shape` refuses, with the reason.
NOT_SIZED = (
    ("kv_lora_rank", "multi-head latent attention (MLA) caches a compressed latent per token (vLLM's "
                     "MLAAttentionSpec), not keys and values per KV head"),
    ("attention_chunk_size", "chunked local attention on some layers (vLLM's ChunkedLocalAttentionSpec)"),
    ("layers_block_type", "layers that are not all attention (a hybrid model)"),
    ("attn_layer_period", "layers that are not all attention (a hybrid model)"),
)


@dataclass(frozen=True)
class KVGroups:
    """vLLM v0.19.0's KV cache groups of one model (or one rank's shard of it).

    Attributes:
        windows: one entry per group, in vLLM's order (the kinds as their first layer appears): ``None`` for a group
            of full-attention layers, else its sliding window in tokens.
        group_size: layers per group: a pool of ``num_blocks`` pages for each (``group_size × groups`` is the layers
            with vLLM's padding).
        layers: the attention layers themselves (without padding).
    """

    windows: tuple[int | None, ...]
    group_size: int
    layers: int

    @property
    def padded_layers(self) -> int:
        """The layers the pools hold a page for, per block: ``group_size × groups`` (at least :attr:`layers`)."""
        return self.group_size * len(self.windows)

    def pages_per_request(self, max_model_len: int, max_num_batched_tokens: int, block_size: int) -> int:
        """The pages one request of ``max_model_len`` tokens needs, all groups together: each group's
        ``max_memory_usage_bytes`` in pages (see the module's docstring), summed."""
        pages = 0
        for window in self.windows:
            if window is None:
                pages += math.ceil(max_model_len / block_size)
            else:
                pages += math.ceil(min(window - 1 + max_num_batched_tokens, max_model_len) / block_size) + 1
        return pages

    @property
    def sliding(self) -> bool:
        """Whether any group slides."""
        return any(w is not None for w in self.windows)


def layer_windows(text, label: str) -> list[int | None]:
    """Each attention layer's sliding window (``None``: full attention), as vLLM v0.19.0 reads a Hugging Face text
    config (module docstring).

    Raises:
        ValueError: in one line, for a ``layer_types`` entry other than :data:`FULL` and :data:`SLIDING` (chunked
            attention, linear attention...), which this module does not size, and for Qwen2 with windows on some
            layers only, which vLLM refuses (``Qwen2Model.__init__``, ``model_executor/models/qwen2.py``).
    """
    kinds = list(getattr(text, "layer_types", None) or ())
    window = getattr(text, "sliding_window", None)
    if getattr(text, "use_sliding_window", True) is False:  # Qwen2's switch: its sliding_window is not used
        window = None
    if len(set(kinds)) > 1:
        unknown = sorted(set(kinds) - {FULL, SLIDING})
        if unknown:
            raise ValueError(f"{label}: layers of kind {', '.join(unknown)}: vLLM sizes their cache by other rules, "
                             f"not reproduced here")
        if window is None:
            raise ValueError(f"{label}: sliding_attention layers without a sliding_window")
        if getattr(text, "model_type", "") == "qwen2":  # Qwen2Model.__init__, model_executor/models/qwen2.py
            raise ValueError(f"{label}: vLLM refuses it: Sliding window for some but all layers is not supported "
                             f"(max_window_layers {text.max_window_layers} < num_hidden_layers "
                             f"{text.num_hidden_layers})")
        return [window if kind == SLIDING else None for kind in kinds]
    return [window or None] * text.num_hidden_layers


def kv_groups(windows: list[int | None]) -> KVGroups:
    """The groups of layers whose windows are ``windows`` (``_get_kv_cache_groups_uniform_page_size``,
    ``v1/core/kv_cache_utils.py``, v0.19.0; one group when all are alike).

    ``kv_groups([4096, None] * 13)``: two groups of 13 (Gemma-2 2B); ``kv_groups(([1024] * 5 + [None]) * 5 +
    [1024] * 4)``: 29 sliding layers in 6 groups of 5 (the last holding 4) and 5 full in 1: 7 groups of 5 (Gemma-3 4B).

    Raises:
        ValueError: for no layers.
    """
    if not windows:
        raise ValueError("no attention layers: nothing to cache")
    kinds: dict[int | None, int] = {}
    for w in windows:
        kinds[w] = kinds.get(w, 0) + 1
    if len(kinds) == 1:
        return KVGroups(tuple(kinds), len(windows), len(windows))
    fewest, most = min(kinds.values()), max(kinds.values())
    size = most if most < fewest * 1.5 else fewest
    groups = tuple(w for w, n in kinds.items() for _ in range(math.ceil(n / size)))
    return KVGroups(groups, size, len(windows))


def attention_shape(text, label: str) -> tuple[KVGroups, int, int]:
    """(KV cache groups, KV heads, head size) of a Hugging Face text config whose layers keep full or sliding-window
    keys and values (:func:`layer_windows`, :func:`kv_groups`); the head size is ``head_dim``, else ``hidden_size //
    num_attention_heads``, the KV heads ``num_key_value_heads``, else ``num_attention_heads`` (vLLM's
    ``ModelConfig.get_head_size`` and ``get_total_num_kv_heads``, ``config/model.py``).

    Raises:
        ValueError: in one line, for a config with a key of :data:`NOT_SIZED` (its reason said), layer kinds other
            than full and sliding-window attention, or no attention heads.
    """
    for key, why in NOT_SIZED:
        if getattr(text, key, None):
            raise ValueError(f"{label}: {why}; vLLM sizes that KV cache by another rule, not reproduced here")
    heads = getattr(text, "num_attention_heads", None)
    if not heads:
        raise ValueError(f"{label}: no num_attention_heads: not an attention model")
    head_size = getattr(text, "head_dim", None) or text.hidden_size // heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    return kv_groups(layer_windows(text, label)), kv_heads, head_size
