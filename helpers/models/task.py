"""What a step feeds a model and how it scores the output: :class:`Task` (made by :func:`resolve_task` from the step's
options and the model's :class:`helpers.models.spec.ModelSpec`), each :class:`Batch`, and the losses: classification,
next-token, and torchtune's chunked output (:func:`chunked_output_loss`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..config import StepConfig
from ..errors import Refused
from .spec import ModelSpec


def output_logits(output) -> torch.Tensor:
    """The logits of a model's output: a tensor, ``.logits`` (Hugging Face), or a tuple's first element.

    Raises:
        ValueError: if no tensor can be found.
    """
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    raise ValueError(f"the model returned {type(output).__name__}, not a tensor of logits; "
                     f"give loss= a function of the output")


@dataclass
class Batch:
    """One (micro-)batch: ``inputs`` (the forward's positional inputs) and ``targets`` (None: drawn by :meth:`Task.loss_of`)."""

    inputs: tuple
    targets: torch.Tensor | None = None

    def tensors(self) -> list[torch.Tensor]:
        """The inputs and targets that are tensors."""
        return [t for t in (*self.inputs, self.targets) if isinstance(t, torch.Tensor)]


#: The chunks of torchtune's ``CEWithChunkedOutputLoss`` (its ``num_output_chunks`` default).
OUTPUT_CHUNKS = 8
#: The Hugging Face model types whose forward applies the LM head to the decoder's last hidden state and returns its
#: output as the logits, with nothing between (no transform, scale or soft-capping): their head can run in chunks.
CHUNKED_MODEL_TYPES = ("llama", "mistral", "qwen2", "gpt2", "bloom")


def check_chunked(model: nn.Module) -> None:
    """That ``model`` can compute :func:`chunked_output_loss`: a Hugging Face causal LM of
    :data:`CHUNKED_MODEL_TYPES` with an LM head (peft's wrapper passes both on).

    Raises:
        Refused (a ValueError): in one line, otherwise.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    head = getattr(model, "get_output_embeddings", None)
    if model_type not in CHUNKED_MODEL_TYPES or not callable(head) or head() is None:
        what = f"a {model_type!r} model" if model_type else type(model).__name__
        raise Refused(f"loss='chunked' (torchtune's chunked output) needs a Hugging Face causal LM whose LM head reads "
                      f"the decoder's output as it is ({', '.join(CHUNKED_MODEL_TYPES)}), not {what}")


def chunked_output_loss(model: nn.Module, inputs: tuple, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross-entropy as torchtune 0.6.1 computes it with ``CEWithChunkedOutputLoss``, for a causal LM that
    :func:`check_chunked` accepts.

    The model runs as usual, but its LM head runs on :data:`OUTPUT_CHUNKS` chunks of the last hidden state
    ``(batch, seq, hidden)`` along the sequence and returns their logits as a list
    (``TransformerDecoder.chunked_output``, ``torchtune/modules/transformer.py``); each chunk is upcast to float32 and
    scored on its own (``compute_cross_entropy``, a sum), and the sum divided by the number of targets
    (``torchtune/modules/loss/ce_chunked_output_loss.py``): one chunk's float32 copy at a time instead of the whole
    logits'. ``targets``: ``(batch, seq)`` token ids. Returns the mean loss, a scalar.
    """
    head = model.get_output_embeddings()
    forward = type(head).forward
    head.forward = lambda x: [forward(head, chunk) for chunk in x.chunk(OUTPUT_CHUNKS, dim=1)]
    try:
        logits = model(*inputs).logits
    finally:
        del head.forward  # the class's forward again
    total = 0.0
    for chunk, target in zip(logits, targets.chunk(OUTPUT_CHUNKS, dim=1)):
        total = total + F.cross_entropy(chunk.flatten(0, 1).float(), target.flatten(), reduction="sum")
    return total / targets.numel()


@dataclass(frozen=True)
class Task:
    """What a step feeds the model and how it scores the output (:func:`resolve_task`).

    Attributes:
        inputs: ``"features"`` (float samples), ``"tokens"`` (int64 ids) or ``"custom"``.
        sample_shape: one sample's shape (``()`` for custom inputs).
        vocab_size: token inputs are drawn below it.
        loss: ``"classification"``, ``"next_token"``, ``"chunked"`` (:func:`chunked_output_loss`), or a function
            of the output.
        num_classes: a classifier's classes, if known before the forward pass.
        dtype: the float samples' dtype (``StepConfig.param_dtype``).
        make: custom inputs: ``StepConfig.inputs``, a function ``(batch_size, device)``.
    """

    inputs: str
    sample_shape: tuple[int, ...]
    vocab_size: int | None
    loss: str | Callable
    num_classes: int | None
    dtype: torch.dtype = torch.float32
    make: Callable | None = None

    def batch(self, batch_size: int, device: torch.device) -> Batch:
        """Random inputs of ``batch_size`` samples on ``device``, and the targets when they can be drawn
        before the forward pass (class ids for a known number of classes; next tokens)."""
        if self.inputs == "custom":
            made = self.make(batch_size, device)
            return Batch(made if isinstance(made, tuple) else (made,))
        shape = (batch_size, *self.sample_shape)
        if self.inputs == "tokens":
            x = torch.randint(0, self.vocab_size, shape, device=device)
            if self.loss in ("next_token", "chunked"):
                return Batch((x,), torch.randint(0, self.vocab_size, shape, device=device))
        else:
            x = torch.randn(shape, device=device, dtype=self.dtype)
        if self.loss == "classification" and self.num_classes:
            return Batch((x,), torch.randint(0, self.num_classes, (batch_size,), device=device))
        return Batch((x,))

    def forward(self, model: nn.Module, inputs: tuple, targets: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The forward pass of ``model`` on ``inputs`` and its loss (:meth:`loss_of`, or
        :func:`chunked_output_loss`); the output is freed on return."""
        if self.loss == "chunked":
            return chunked_output_loss(model, inputs, targets), targets
        return self.loss_of(model(*inputs), targets)

    def loss_of(self, output, targets: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The loss (a scalar) of the model's ``output``, and the targets (drawn here if ``targets`` is None).

        Raises:
            ValueError: in one line, if the output does not fit the loss.
        """
        if callable(self.loss):
            loss = self.loss(output)
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
                raise ValueError(f"the loss function must return a scalar tensor, got {type(loss).__name__}"
                                 + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""))
            return loss, targets
        logits = output_logits(output)
        if self.loss == "next_token":
            if logits.dim() != 3:
                raise ValueError(f"next-token loss expects (batch, seq, vocab) logits, got shape {tuple(logits.shape)}")
            if targets is None:
                targets = torch.randint(0, logits.shape[-1], logits.shape[:2], device=logits.device)
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), targets
        if logits.dim() != 2:
            raise ValueError(f"classification loss expects (batch, classes) logits, got shape {tuple(logits.shape)}; "
                             f"for a language model use seq_len= (next-token loss)")
        if self.num_classes is not None and logits.shape[1] != self.num_classes:
            raise ValueError(f"the model's output has {logits.shape[1]} classes, but num_classes is {self.num_classes}")
        if targets is None:
            targets = torch.randint(0, logits.shape[1], (logits.shape[0],), device=logits.device)
        return F.cross_entropy(logits, targets), targets


def resolve_task(config: StepConfig, spec: ModelSpec) -> Task:
    """The :class:`Task` of a step: ``config``'s inputs and loss, completed by what ``spec`` knows.

    Token ids when ``config.seq_len`` is given or the model is a token model,
    else float samples of ``config.input_shape``, the model's shape, or images;
    loss ``"auto"``: next-token for token ids, else classification.

    Raises:
        ValueError: for ``input_shape`` given to a token model, a Hugging Face causal LM without ``seq_len``, token ids
            without a vocabulary, or ``num_classes`` with a next-token loss.
    """
    if spec.vocab_size and config.input_shape is not None:
        raise ValueError(f"{spec.name} takes token ids: give their number with seq_len= (--seq-len), "
                         f"not input_shape=")
    if config.seq_len is None and config.inputs is None and spec.seq_len_required:
        raise ValueError(f"{spec.name} is a Hugging Face causal LM: give the sequence length with seq_len= "
                         f"(--seq-len); its context{f', {spec.seq_len:,} tokens,' if spec.seq_len else ''} "
                         f"is not taken by default")
    seq_len = config.seq_len if config.seq_len is not None else (spec.seq_len if spec.vocab_size else None)
    if config.inputs is not None:
        kind, shape, vocab = "custom", (), None
    elif seq_len is not None:
        vocab = config.vocab_size or spec.vocab_size
        if vocab is None:
            raise ValueError("token inputs need a vocabulary: give vocab_size= (--vocab-size) with seq_len=")
        kind, shape = "tokens", (seq_len,)
    else:
        kind, shape, vocab = "features", config.input_shape or spec.input_shape or config.sample_shape, None
    loss = config.loss
    if loss == "auto":
        loss = "next_token" if kind == "tokens" else "classification"
    if loss == "chunked" and kind != "tokens":
        raise ValueError("loss='chunked' is a next-token loss: it needs token inputs (seq_len=)")
    if loss in ("next_token", "chunked") and config.num_classes is not None:
        raise ValueError("num_classes applies to a classification loss; next-token loss has the vocabulary "
                         "as its classes")
    return Task(kind, shape, vocab, loss, config.num_classes or spec.num_classes, getattr(torch, config.param_dtype),
                config.inputs)
