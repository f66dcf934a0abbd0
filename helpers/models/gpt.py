"""A GPT-2-style decoder in plain ``torch.nn``, with the GPT-2 sizes as presets (lessons 05a, 05b, 08).

GPT-2's architecture (Radford et al., 2019, and the released code): learned token and position embeddings, ``n_layer``
pre-norm blocks (LayerNorm, causal self-attention through ``scaled_dot_product_attention``, residual; LayerNorm, MLP
``d -> 4d -> d`` with GELU, residual), a final LayerNorm, and a head tied to the token embedding. No dropout by default.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class GPTConfig:
    """The sizes of a GPT-2-style model.

    Attributes:
        vocab_size, n_positions: tokens in the vocabulary and the context length (GPT-2: 50257, 1024).
        d_model, n_layer, n_head: the hidden size h, blocks, attention heads (``d_model`` a multiple of ``n_head``).
        dropout: dropout probability before each residual sum (0: none).
    """

    vocab_size: int = 50257
    n_positions: int = 1024
    d_model: int = 768
    n_layer: int = 12
    n_head: int = 12
    dropout: float = 0.0

    def __post_init__(self):
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})")

    def parameter_count(self) -> int:
        """Parameters of :class:`GPT` (the tied head once): 12h² + 13h per block, (vocab + positions) x h, 2h."""
        h = self.d_model
        return self.n_layer * (12 * h * h + 13 * h) + (self.vocab_size + self.n_positions) * h + 2 * h


#: The four GPT-2 sizes (Radford et al. 2019, table 2; the released checkpoints' configurations).
GPT2_PRESETS = {
    "gpt2": GPTConfig(d_model=768, n_layer=12, n_head=12),
    "gpt2-medium": GPTConfig(d_model=1024, n_layer=24, n_head=16),
    "gpt2-large": GPTConfig(d_model=1280, n_layer=36, n_head=20),
    "gpt2-xl": GPTConfig(d_model=1600, n_layer=48, n_head=25),
}


class Embeddings(nn.Module):
    """Token ids ``(batch, seq)`` -> hidden states ``(batch, seq, d_model)``."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.token = nn.Embedding(config.vocab_size, config.d_model)
        self.position = nn.Embedding(config.n_positions, config.d_model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        seq = ids.shape[1]
        if seq > self.position.num_embeddings:
            raise ValueError(f"sequence length {seq} is longer than the model's context "
                             f"({self.position.num_embeddings} positions)")
        positions = torch.arange(seq, device=ids.device)
        return self.token(ids) + self.position(positions)


class SelfAttention(nn.Module):
    """Causal multi-head self-attention: one ``Linear`` to q, k, v, SDPA, one ``Linear`` out."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.n_head = config.n_head
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.out = nn.Linear(config.d_model, config.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.n_head, h // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, h))


class Block(nn.Module):
    """A pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = SelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(nn.Linear(config.d_model, 4 * config.d_model), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * config.d_model, config.d_model))
        self.drop = nn.Dropout(config.dropout) if config.dropout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_1(x)))
        return x + self.drop(self.mlp(self.ln_2(x)))


class Head(nn.Module):
    """The final LayerNorm and the output projection, tied to the token embedding."""

    def __init__(self, config: GPTConfig, embeddings: Embeddings):
        super().__init__()
        self.ln_f = nn.LayerNorm(config.d_model)
        self.embeddings = [embeddings]  # a list: the tied weight is not registered twice

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ln_f(x), self.embeddings[0].token.weight)


class GPT(nn.Module):
    """A GPT-2-style decoder: token ids ``(batch, seq)`` -> logits ``(batch, seq, vocab)``; ``config``: the sizes, or a
    preset name of :data:`GPT2_PRESETS`.
    Raises ``ValueError`` for an unknown preset, or a sequence longer than the context.
    """

    def __init__(self, config: GPTConfig | str = "gpt2"):
        super().__init__()
        if isinstance(config, str):
            if config not in GPT2_PRESETS:
                raise ValueError(f"unknown GPT preset {config!r}; use one of {', '.join(GPT2_PRESETS)}")
            config = GPT2_PRESETS[config]
        self.config = config
        self.embeddings = Embeddings(config)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.head = Head(config, self.embeddings)

    def units(self) -> list[nn.Module]:
        """The model as a sequence of modules (for checkpointing by segments)."""
        return [self.embeddings, *self.blocks, self.head]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = ids
        for unit in self.units():
            x = unit(x)
        return x
