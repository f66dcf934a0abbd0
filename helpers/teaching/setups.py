"""The steps of published setups that a :class:`helpers.config.StepConfig` option cannot name in a word:
model builders, losses and inputs, by name (:data:`OBJECTS`).

The rows of ``published.json`` name them, ``{"python": "BertLM", "args": ["eager"]}``,
and :mod:`helpers.teaching.published` resolves them here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class BertLM:
    """Builds BERT-base as ``AutoModelForCausalLM.from_pretrained("bert-base-uncased")`` does, in
    float16: ``transformers.BertLMHeadModel`` of the default ``BertConfig`` (12 layers, 768 wide, 12
    heads, vocabulary 30522, dropout 0.1), not a decoder (bidirectional attention), its LM head tied to
    the word embeddings: 109,514,298 parameters.

    Attributes:
        attn_implementation: ``"eager"`` (the full scores, softmax and dropout kept) or ``"sdpa"``.
    """

    attn_implementation: str

    def __call__(self) -> torch.nn.Module:
        from transformers import BertConfig, BertLMHeadModel

        config = BertConfig()
        config._attn_implementation = self.attn_implementation
        quiet = logging.getLogger("transformers.models.bert.modeling_bert")
        level = quiet.level
        quiet.setLevel(logging.ERROR)  # "add is_decoder=True": the benchmark did not either
        try:
            model = BertLMHeadModel(config)
        finally:
            quiet.setLevel(level)
        return model.half().train()


@dataclass(frozen=True)
class EagerCausalLM:
    """Builds a Hugging Face causal LM with ``attn_implementation="eager"`` (the full scores, softmax in
    float32): an architecture that ``transformers`` runs without SDPA (BLOOM), or a model as
    ``transformers`` ran it before SDPA (Llama in 2023).

    Attributes:
        config: a name of :data:`helpers.models.hf.SHIPPED`, or ``config.json``'s keys and values as
            sorted ``(key, value)`` pairs.
    """

    config: str | tuple[tuple[str, Any], ...]

    def __call__(self) -> torch.nn.Module:
        from ..models import hf

        config = hf.load_config(self.config if isinstance(self.config, str) else dict(self.config))
        return hf.CausalLMBuilder(config, "eager")()


@dataclass(frozen=True)
class TokenIds:
    """The input as the transformers benchmark fed it: ``(batch_size, seq_len)`` random token ids, no
    ``attention_mask`` (its mask of all ones meant no mask to SDPA, so that the flash kernel ran)."""

    seq_len: int
    vocab_size: int = 30522

    def __call__(self, batch_size: int, device) -> tuple[torch.Tensor]:
        return (torch.randint(0, self.vocab_size - 1, (batch_size, self.seq_len), device=device),)


def shifted_float32_loss(output) -> torch.Tensor:
    """The next-token loss of the 2024 fine-tuning code: logits upcast to float32, shifted into a
    contiguous copy, then the cross-entropy against random token ids.

    transformers 4.31 to 4.45's Llama returned ``self.lm_head(hidden_states).float()``, and its loss,
    torchtune's recipes and the PEFT notebook shifted them with ``logits[..., :-1, :].contiguous()``;
    on float32 logits ``.float()`` copies nothing.

    Args:
        output: a model output with ``.logits``, or the logits, ``(batch, seq, vocabulary)``.

    Returns:
        The mean cross-entropy over the ``batch x (seq - 1)`` shifted positions.
    """
    return shifted_loss(getattr(output, "logits", output).float())


def shifted_loss(output) -> torch.Tensor:
    """:func:`shifted_float32_loss` without the upcast: the logits in the model's dtype (transformers
    before 4.31, and BLOOM)."""
    logits = getattr(output, "logits", output)
    shifted = logits[..., :-1, :].contiguous()
    targets = torch.randint(0, shifted.shape[-1], shifted.shape[:-1], device=shifted.device)
    return torch.nn.functional.cross_entropy(shifted.flatten(0, 1), targets.flatten())


class HeldLogitsSum:
    """The benchmark's loss, ``outputs.logits.sum()``, the model's ``outputs`` kept as the script kept
    them: in a variable, through backward, until the next step's forward pass made new ones."""

    def __init__(self):
        self.outputs = None

    def __call__(self, output) -> torch.Tensor:
        self.outputs = output
        return output.logits.sum()


def vit_output_sum(output: torch.Tensor) -> torch.Tensor:
    """The optimizer-step-in-backward tutorial's loss: the sum of the model's output."""
    return output.sum()


#: What a row may name: ``{"python": name}`` is the object itself; ``{"python": name, "args": [...]}``
#: calls it with the arguments (lists become tuples, objects sorted ``(key, value)`` pairs).
OBJECTS = {f.__name__: f for f in (BertLM, EagerCausalLM, TokenIds, HeldLogitsSum, shifted_float32_loss,
                                    shifted_loss, vit_output_sum)}
