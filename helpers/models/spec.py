"""What a step needs to know about a model before building it: :class:`ModelSpec`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from torch import nn


@dataclass(frozen=True)
class ModelSpec:
    """How to build a model, and what it expects.

    Attributes:
        name: the label of its profiles.
        build: returns a fresh model (on ``meta`` when simulating).
        input_shape: one float sample's shape, if the model fixes it.
        vocab_size, seq_len: token models: the vocabulary and the longest sequence.
        num_classes: a classifier's classes, if known before a forward pass.
        seq_len_required: ``seq_len`` must be given (a Hugging Face causal LM).
        blocks: a model built of identical repeated blocks (the GPT and Llama presets, a Hugging Face causal LM whose
            decoder layers all run alike): how many; None for any other model.
        at_depth: with ``blocks``, ``n -> ModelSpec`` of the same model with ``n`` blocks (:mod:`helpers.depth` traces
            two such copies and writes the step of ``blocks`` from them); None when the blocks differ.
        blocks_differ: why the blocks are not all alike (a Hugging Face config whose layers differ), or None.
    """

    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...] | None = None
    vocab_size: int | None = None
    seq_len: int | None = None
    num_classes: int | None = None
    seq_len_required: bool = False
    blocks: int | None = None
    at_depth: Callable[[int], "ModelSpec"] | None = None
    blocks_differ: str | None = None
