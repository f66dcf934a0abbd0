"""A Llama-shaped decoder in plain ``torch.nn``: RMSNorm, SwiGLU, grouped-query attention, rotary embeddings (lesson 08b).

Not a port of released code: the shapes and operations that decide memory, after Touvron et al. 2023 (LLaMA) and the
Llama 3 report (Grattafiori et al. 2024, table 3 for 8B): a token embedding, no position embedding, an untied head;
``n_layer`` pre-norm blocks ``x + o(attention(rope(q(n(x))), rope(k(n(x))), v(n(x))))`` with ``n = torch.nn.RMSNorm``,
then ``x + down(silu(gate(n(x))) * up(n(x)))`` (SwiGLU, Shazeer 2020), no biases; grouped-query attention (Ainslie et
al. 2023) with keys and values repeated to ``n_head`` heads before ``scaled_dot_product_attention``, as Hugging Face's
``repeat_kv`` does; rotary embeddings (Su et al. 2021, RoFormer) computed once per forward, in float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..config import check_int


@dataclass(frozen=True)
class LlamaConfig:
    """The sizes of a Llama-shaped model.

    Attributes:
        vocab_size, n_positions: tokens in the vocabulary and the longest sequence (Llama 3.1: 128256, 131072).
        d_model, n_layer: the hidden size h, blocks.
        n_head, n_kv_head: query heads, key and value heads (``d_model`` a multiple of ``n_head``, itself of
            ``n_kv_head``).
        intermediate: the MLP's inner width (Llama-3 8B: 14336 = 3.5 h).
        rope_theta, eps: the base of the rotary frequencies (Llama 3: 500000), RMSNorm's epsilon.
    """

    vocab_size: int = 128256
    n_positions: int = 131072
    d_model: int = 4096
    n_layer: int = 32
    n_head: int = 32
    n_kv_head: int = 8
    intermediate: int = 14336
    rope_theta: float = 500000.0
    eps: float = 1e-5

    def __post_init__(self):
        for name in ("vocab_size", "n_positions", "d_model", "n_layer", "n_head", "n_kv_head", "intermediate"):
            check_int(name, getattr(self, name), 1)
        if self.d_model % self.n_head:
            raise ValueError(f"d_model ({self.d_model}) must be a multiple of n_head ({self.n_head})")
        if self.n_head % self.n_kv_head:
            raise ValueError(f"n_head ({self.n_head}) must be a multiple of n_kv_head ({self.n_kv_head})")
        if (self.d_model // self.n_head) % 2:
            raise ValueError(f"the head size d_model / n_head = {self.d_model // self.n_head} must be even (rotary)")

    @property
    def head_dim(self) -> int:
        """The size of one head, ``d_model // n_head``."""
        return self.d_model // self.n_head

    def parameter_count(self) -> int:
        """Parameters of :class:`Llama` with these sizes (Llama-3 8B: 8,030,261,248).

        Per block: 2h (norms), 2h² (q, o), 2h x ``n_kv_head * head_dim`` (k, v), 3h x intermediate (MLP); then
        2 x vocab x h (embedding, untied head) and h (final norm).
        """
        h, kv = self.d_model, self.n_kv_head * self.head_dim
        block = 2 * h + 2 * h * h + 2 * h * kv + 3 * h * self.intermediate
        return self.n_layer * block + 2 * self.vocab_size * h + h


#: Llama-3 8B's sizes (the Llama 3 report, table 3), and a tiny one of the same structure for tests.
LLAMA_PRESETS = {
    "llama3-8b": LlamaConfig(),
    "llama-tiny": LlamaConfig(vocab_size=1000, n_positions=4096, d_model=64, n_layer=2, n_head=4, n_kv_head=2,
                              intermediate=224),
}


def rotary(seq: int, head_dim: int, theta: float, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary embedding's cosines and sines, each ``(seq, head_dim)`` in float32: angle
    ``p * theta ** (-2i / head_dim)``, in Hugging Face's "rotate half" layout."""
    inverse = theta ** (-torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inverse)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply the rotary embedding to ``(batch, heads, seq, head_dim)``, in ``x``'s dtype (16-bit under autocast)."""
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    half = x.shape[-1] // 2
    turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + turned * sin


class LlamaAttention(nn.Module):
    """Grouped-query causal self-attention with rotary embeddings, no biases."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = config.n_head, config.n_kv_head, config.head_dim
        kv = config.n_kv_head * config.head_dim
        self.q = nn.Linear(config.d_model, config.d_model, bias=False)
        self.k = nn.Linear(config.d_model, kv, bias=False)
        self.v = nn.Linear(config.d_model, kv, bias=False)
        self.o = nn.Linear(config.d_model, config.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q = self.q(x).view(b, s, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, s, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, s, self.n_kv_head, self.head_dim).transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        groups = self.n_head // self.n_kv_head
        if groups > 1:  # repeat_kv: each key/value head serves `groups` query heads
            k, v = (t[:, :, None].expand(b, self.n_kv_head, groups, s, self.head_dim)
                    .reshape(b, self.n_head, s, self.head_dim) for t in (k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, h))


class LlamaBlock(nn.Module):
    """A pre-norm Llama block: x + attention(norm(x)), then x + SwiGLU(norm(x))."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.attn_norm = nn.RMSNorm(config.d_model, eps=config.eps)
        self.attn = LlamaAttention(config)
        self.mlp_norm = nn.RMSNorm(config.d_model, eps=config.eps)
        self.gate = nn.Linear(config.d_model, config.intermediate, bias=False)
        self.up = nn.Linear(config.d_model, config.intermediate, bias=False)
        self.down = nn.Linear(config.intermediate, config.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), cos, sin)
        n = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


class Llama(nn.Module):
    """A Llama-shaped decoder: token ids ``(batch, seq)`` -> logits ``(batch, seq, vocab)``; ``config``: the sizes, or
    a preset name of :data:`LLAMA_PRESETS`.
    Raises ``ValueError`` for an unknown preset, or a sequence longer than ``n_positions``.
    """

    def __init__(self, config: LlamaConfig | str = "llama-tiny"):
        super().__init__()
        if isinstance(config, str):
            if config not in LLAMA_PRESETS:
                raise ValueError(f"unknown Llama preset {config!r}; use one of {', '.join(LLAMA_PRESETS)}")
            config = LLAMA_PRESETS[config]
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(LlamaBlock(config) for _ in range(config.n_layer))
        self.norm = nn.RMSNorm(config.d_model, eps=config.eps)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        seq = ids.shape[1]
        if seq > self.config.n_positions:
            raise ValueError(f"sequence length {seq} is longer than the model's context "
                             f"({self.config.n_positions} positions)")
        cos, sin = rotary(seq, self.config.head_dim, self.config.rope_theta, ids.device)
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))
