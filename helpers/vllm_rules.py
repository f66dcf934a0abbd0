"""How vLLM splits a model across GPUs: tensor parallelism (heads, widths and the vocabulary cut across the ranks of
a stage) and pipeline parallelism (layers cut into stages), read in vLLM v0.19.0's source (lesson 10b, section 1).

:func:`rank_config` writes the Hugging Face config of what one rank holds, so that the engine traces that rank's
weights and profile run as it traces a whole model on one card (:func:`helpers.serving.vllm_startup`).  Each rule
names vLLM's file and function (paths inside the ``vllm`` package of the published 0.19.0 wheel):

* the attention heads: ``QKVParallelLinear.__init__`` (``model_executor/layers/linear.py``): ``heads / tp`` query
  heads per rank; ``KV heads / tp`` KV heads when there are more KV heads than ranks, else **one** KV head per rank,
  each KV head replicated on ``tp / KV heads`` ranks;
* the MLP: ``ColumnParallelLinear`` cuts the output width of gate and up, ``RowParallelLinear`` the input width of
  down (and of the attention's output projection): ``intermediate_size / tp`` per rank;
* the vocabulary: ``VocabParallelEmbedding.__init__`` (``model_executor/layers/vocab_parallel_embedding.py``) pads
  the *whole* vocabulary to a multiple of 64 (``pad_vocab_size``, ``DEFAULT_VOCAB_PADDING_SIZE``), then gives each
  rank ``padded / tp`` rows; ``ParallelLMHead`` is one of them;
* the layers of a stage: ``get_pp_indices`` (``distributed/utils.py``); the first stage holds the embedding, the last
  the final norm and the head (and the embedding too when the head is tied to it): ``LlamaModel.__init__`` and
  ``LlamaForCausalLM.__init__`` (``model_executor/models/llama.py``), with ``PPMissingLayer`` elsewhere.

Where vLLM refuses a split, :func:`check_split` raises its words: ``ModelConfig.verify_with_parallel_config``
(``config/model.py``) for the heads, and the ``AssertionError`` of ``divide`` (``distributed/utils.py``:
``"{} is not divisible by {}"``) that the layers above raise while the model is built.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .units import GiB

#: ``DEFAULT_VOCAB_PADDING_SIZE`` of ``vocab_parallel_embedding.py``: the vocabulary is padded to a multiple of it.
VOCAB_PADDING = 64

#: Non-torch memory per rank, *as logged* by vLLM v0.19.0 ("non-torch forward increase memory": NCCL communicators,
#: the custom all-reduce's and symmetric memory's buffers, cuBLAS), on H100 80GB cards (llm-d-planner's validation
#: runs, commit d3121e0: Llama-3.1-8B-Instruct at tensor_parallel_size 2 and 4, and at pipeline_parallel_size 2;
#: Qwen2.5-7B logged 2.06 and 2.13 GiB at the same sizes).  No simulation of tensors sees it.  Tensor parallelism
#: above 4 takes the figure of 4 (no log above it was found); tensor and pipeline parallelism together, the tensor
#: figure (no log of both was found); 3, the figure of 2.
NON_TORCH_LOGGED = {"tp2": round(2.07 * GiB), "tp4": round(2.13 * GiB), "pp": round(0.07 * GiB)}


@dataclass(frozen=True)
class Split:
    """Where one rank sits: ``tp`` ranks per stage, ``pp`` stages, this rank's stage ``stage`` (0-based), and the
    layers ``[start, end)`` that stage holds."""

    tp: int
    pp: int
    stage: int
    start: int
    end: int

    @property
    def first(self) -> bool:
        """The first stage: it holds the embedding."""
        return self.stage == 0

    @property
    def last(self) -> bool:
        """The last stage: it holds the final norm and the head, and runs the sampler."""
        return self.stage == self.pp - 1


def padded_vocab(vocab_size: int) -> int:
    """The vocabulary padded to a multiple of :data:`VOCAB_PADDING` (``pad_vocab_size``), all ranks together."""
    return -(-vocab_size // VOCAB_PADDING) * VOCAB_PADDING


def stage_layers(num_layers: int, pp: int) -> list[tuple[int, int]]:
    """``[start, end)`` of each stage's layers, as ``get_pp_indices`` (``distributed/utils.py``) assigns them:
    ``num_layers // pp`` each, and the remainder one each to the stages before the last, from the last but one
    backwards (the last holds the norm and the head).  ``VLLM_PP_LAYER_PARTITION``, which overrides it, is not read.

    ``stage_layers(32, 4) == [(0, 8), (8, 16), (16, 24), (24, 32)]``; ``stage_layers(30, 4)`` gives 7, 8, 8, 7.
    """
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    starts = [sum(sizes[:i]) for i in range(pp)]
    return [(s, s + n) for s, n in zip(starts, sizes)]


def _divide(numerator: int, denominator: int) -> int:
    """``divide`` of ``distributed/utils.py``: its assertion's words, as a ValueError."""
    if numerator % denominator:
        raise ValueError(f"{numerator} is not divisible by {denominator}")
    return numerator // denominator


def check_split(text, tp: int, pp: int) -> None:
    """Refuse, in vLLM's words, a split vLLM refuses: the attention heads not divisible by ``tp``
    (``verify_with_parallel_config``), then, as the model is built, the padded vocabulary (the embedding comes first),
    the KV heads (or ``tp`` by the KV heads when they are fewer) and the MLP's width (``divide``).  A stage without a
    layer (``pp`` above the layers), which vLLM does not check, is refused too.

    Args:
        text: a Hugging Face text config of a decoder (``num_attention_heads``, ``hidden_size``, ``vocab_size``,
            ``num_hidden_layers``, ``intermediate_size``; ``num_key_value_heads`` optional).
        tp, pp: ``tensor_parallel_size`` and ``pipeline_parallel_size``, >= 1.

    Raises:
        ValueError: in one line, as above.
    """
    heads = text.num_attention_heads
    if heads % tp:
        raise ValueError(f"Total number of attention heads ({heads}) must be divisible by tensor parallel size "
                         f"({tp}).")
    _divide(padded_vocab(text.vocab_size), tp)
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    _divide(tp, kv_heads) if tp >= kv_heads else _divide(kv_heads, tp)
    _divide(text.intermediate_size, tp)
    if pp > text.num_hidden_layers:
        raise ValueError(f"pipeline_parallel_size {pp} is more than the {text.num_hidden_layers} layers: a stage "
                         f"would hold none")


def rank_config(config, split: Split):
    """The Hugging Face config of what one rank of ``split`` holds: per rank, ``heads / tp`` attention heads,
    ``max(KV heads / tp, 1)`` KV heads, ``intermediate_size / tp``, ``padded vocabulary / tp`` rows of embedding and
    head, and the stage's layers (``layer_types`` cut to them); ``head_dim`` and ``hidden_size`` unchanged.  Built as
    a Hugging Face model, its parameters have the shapes of the rank's shards (the embedding and head are then
    counted or left out by the stage: :class:`Split`).

    Args:
        config: a ``PretrainedConfig`` of a decoder whose text config :func:`check_split` accepts for ``split``.
        split: the rank's place.

    Returns:
        A new config of the same class (``config`` is not changed).
    """
    text = config.get_text_config()
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    data = text.to_dict()
    data.update(num_attention_heads=heads // split.tp, num_key_value_heads=max(kv_heads // split.tp, 1),
                head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
                intermediate_size=text.intermediate_size // split.tp,
                vocab_size=padded_vocab(text.vocab_size) // split.tp, num_hidden_layers=split.end - split.start,
                bos_token_id=None, eos_token_id=None, pad_token_id=None)  # ids of the whole vocabulary: no shape
    if getattr(text, "layer_types", None):
        data["layer_types"] = list(text.layer_types)[split.start:split.end]
    return text.__class__.from_dict(data)


def splits(text, tp: int, pp: int) -> list[Split]:
    """One :class:`Split` per stage (the ranks of a stage hold the same shapes), after :func:`check_split`."""
    check_split(text, tp, pp)
    return [Split(tp, pp, stage, start, end) for stage, (start, end) in
            enumerate(stage_layers(text.num_hidden_layers, pp))]


def non_torch_bytes(tp: int, pp: int, single: int, given: int | None = None) -> int:
    """Non-torch memory per rank: ``given`` when it is not None; else ``single`` (the one-card assumption) without
    parallelism, and the figure vLLM v0.19.0 logged for the nearest setup with it (:data:`NON_TORCH_LOGGED`)."""
    if given is not None:
        return given
    if tp >= 4:
        return NON_TORCH_LOGGED["tp4"]
    if tp == 2 or tp == 3:
        return NON_TORCH_LOGGED["tp2"]
    return NON_TORCH_LOGGED["pp"] if pp > 1 else single


def not_held(net: torch.nn.Module, first: bool, last: bool) -> list[torch.Tensor]:
    """The parameters of a Hugging Face causal LM that a pipeline stage does not hold: the embedding but on the first
    stage (and on the last when the head is tied to it), the final norm and the untied head but on the last
    (``LlamaModel`` and ``LlamaForCausalLM``, ``vllm/model_executor/models/llama.py``: ``PPMissingLayer``)."""
    embedding = net.get_input_embeddings().weight
    head = net.get_output_embeddings().weight
    tied = head is embedding
    dropped = [] if first or (tied and last) else [embedding]
    if not last:
        norm = getattr(net.get_decoder(), "norm", None)
        dropped += [*([] if norm is None else norm.parameters()), *([] if tied else [head])]
    return dropped


def scheduler_defaults(version: str, card: str, total: int, max_model_len: int, max_num_batched_tokens: int | None,
                        max_num_seqs: int | None) -> tuple[int, int]:
    """``(max_num_batched_tokens, max_num_seqs)``, each as given or by the version's default rule for the card.

    ``version="0.11"`` (``EngineArgs``' V1 defaults, ``_set_default_args_v1`` in ``vllm/engine/arg_utils.py``, for
    ``vllm serve``): on a card of at least 70 GiB that is not an A100, 8192 tokens and 1024 sequences; on others 2048
    and 256.  ``version="0.6.5"`` (V0): 256 sequences, and with chunked prefill off ``max(max_model_len, 2048)`` tokens
    (``SchedulerConfig.__post_init__``); V0's server turned chunked prefill on for long contexts (above about 32K
    tokens, a rule not read in source), so there the tokens must be given (ValueError otherwise)."""
    large = total >= 70 * GiB and "A100" not in card
    if max_num_seqs is None:
        max_num_seqs = 1024 if version == "0.11" and large else 256
    if max_num_batched_tokens is None:
        if version == "0.11":
            max_num_batched_tokens = 8192 if large else 2048
        elif max_model_len > 32_000:
            raise ValueError(f"vLLM V0 turned chunked prefill on for long contexts such as max_model_len "
                             f"{max_model_len:,}, which changes its default max_num_batched_tokens: give "
                             f"max_num_batched_tokens")
        else:
            max_num_batched_tokens = max(max_model_len, 2048)
    return max_num_batched_tokens, max_num_seqs
