"""Model builders, losses and inputs of published setups that a :class:`helpers.config.StepConfig` option cannot name in a word (:data:`OBJECTS`).

Rows of ``published.json`` name them (``{"python": "BertLM", "args": ["eager"]}``);
:mod:`helpers.teaching.published` resolves them here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class BertLM:
    """BERT-base as ``AutoModelForCausalLM.from_pretrained("bert-base-uncased")`` builds it, in float16.

    ``BertLMHeadModel`` of the default ``BertConfig`` (bidirectional, LM head
    tied): 109,514,298 parameters.  ``attn_implementation``: ``"eager"`` or ``"sdpa"``.
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
class CausalLM:
    """A Hugging Face causal LM with transformers' default attention (``"sdpa"``), from a config that is not shipped.

    ``config``: a name of :data:`helpers.hf_config.SHIPPED`, or sorted ``(key, value)`` pairs of ``config.json``.
    """

    config: str | tuple[tuple[str, Any], ...]
    attention = "sdpa"

    def _builder(self):
        from ..hf_config import load_config
        from ..models import hf

        return hf.CausalLMBuilder(load_config(self.config if isinstance(self.config, str) else dict(self.config)),
                                  self.attention)

    def model_spec(self):
        """Its :class:`helpers.models.ModelSpec`, layers known: a step of it is written from shallow traces."""
        from ..models.resolve import hf_spec

        return hf_spec(self._builder())

    def __call__(self) -> torch.nn.Module:
        return self._builder()()


@dataclass(frozen=True)
class EagerCausalLM(CausalLM):
    """:class:`CausalLM` with ``attn_implementation="eager"`` (BLOOM, or Llama as run before SDPA)."""

    attention = "eager"


@dataclass(frozen=True)
class TokenIds:
    """``(batch_size, seq_len)`` random token ids, no ``attention_mask``, as the transformers benchmark fed them."""

    seq_len: int
    vocab_size: int = 30522

    def __call__(self, batch_size: int, device) -> tuple[torch.Tensor]:
        return (torch.randint(0, self.vocab_size - 1, (batch_size, self.seq_len), device=device),)


def shifted_float32_loss(output) -> torch.Tensor:
    """The next-token loss of the 2024 fine-tuning code: logits upcast to float32, shifted into a contiguous copy.

    transformers 4.31 to 4.45's Llama returned ``self.lm_head(hidden_states).float()``, and its loss, torchtune and the
    PEFT notebook shifted with ``logits[..., :-1, :].contiguous()``.  ``output``: an output with ``.logits``, or the
    logits ``(batch, seq, vocabulary)``; returns the mean cross-entropy over ``batch x (seq - 1)`` positions.
    """
    return shifted_loss(getattr(output, "logits", output).float())


def shifted_loss(output) -> torch.Tensor:
    """:func:`shifted_float32_loss` without the upcast: the logits in the model's dtype (transformers
    before 4.31, and BLOOM)."""
    logits = getattr(output, "logits", output)
    shifted = logits[..., :-1, :].contiguous()
    targets = torch.randint(0, shifted.shape[-1], shifted.shape[:-1], device=shifted.device)
    return torch.nn.functional.cross_entropy(shifted.flatten(0, 1), targets.flatten())


def accelerate_float32_loss(output) -> torch.Tensor:
    """The next-token loss of a ``Trainer`` run in bfloat16 with transformers 4.48 and accelerate 1.x:
    :func:`shifted_float32_loss` (``ForCausalLMLoss`` upcasts the logits and shifts them into a contiguous copy),
    then a float32 copy of the output's logits, made by accelerate's ``convert_outputs_to_fp32`` around the model's
    forward and dropped with the output by ``Trainer.compute_loss``. ``output``: an output with ``.logits``, or the
    logits ``(batch, seq, vocabulary)``; returns the mean cross-entropy."""
    logits = getattr(output, "logits", output)
    loss = shifted_float32_loss(logits)
    logits.float()  # accelerate's copy of the output, freed when the Trainer drops the output
    return loss


class HeldLogitsSum:
    """The benchmark's loss, ``outputs.logits.sum()``, the outputs kept alive until the next forward, as its script kept them."""

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
OBJECTS = {f.__name__: f for f in (BertLM, CausalLM, EagerCausalLM, TokenIds, HeldLogitsSum, accelerate_float32_loss,
                                    shifted_float32_loss, shifted_loss, vit_output_sum)}
