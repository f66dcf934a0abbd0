"""Activation memory of transformers: a block tensor by tensor (:func:`gpt_block_kept`, :func:`measure_blocks`), the
published formula (:func:`korthikanti_layer_bytes`), and remedies (lessons 08 and 08b).  Sizes in bytes; 1 GB = 10**9 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .allocator.rules import round_up
from .config import StepConfig, check_int
from .step import StepRunner
from .techniques.checkpointing import CHECKPOINT_POLICIES, checkpoint_blocks

#: Korthikanti et al. 2022 (arXiv:2205.05198), section 4.1: what one transformer layer stores, in bytes, with 16-bit
#: activations and 1-byte dropout masks, as (tensor, coefficient of s·b·h, coefficient of a·s²·b); they sum to 34 and 5.
KORTHIKANTI_TERMS = (
    ("LayerNorm 1 input", 2, 0),
    ("QKV projection input", 2, 0),
    ("Q and K (for QK^T)", 4, 0),
    ("softmax output", 0, 2),
    ("softmax dropout mask", 0, 1),
    ("dropout output (for attention over V)", 0, 2),
    ("V", 2, 0),
    ("output projection input", 2, 0),
    ("attention dropout mask", 1, 0),
    ("LayerNorm 2 input", 2, 0),
    ("MLP first linear input", 2, 0),
    ("GeLU input", 8, 0),
    ("MLP second linear input", 8, 0),
    ("MLP dropout mask", 1, 0),
)


def korthikanti_layer_bytes(seq: int, batch: int, hidden: int, heads: int) -> int:
    """Activation bytes of one transformer layer (Korthikanti et al. 2022, eq. 1): 34·s·b·h + 5·a·s²·b, for 16-bit
    activations, dropout (1-byte masks), attention keeping the a·s² scores and no tensor parallelism.

    Raises:
        ValueError: for a size below 1.
    """
    for name, value in (("seq", seq), ("batch", batch), ("hidden", hidden), ("heads", heads)):
        check_int(name, value, 1)
    return 34 * seq * batch * hidden + 5 * heads * seq * seq * batch


@dataclass(frozen=True)
class Kept:
    """One tensor a block keeps for backward (or alive while needed): ``name`` (``"softmax output (the scores)"``),
    ``shape``, ``dtype``, and ``paper``, its :data:`KORTHIKANTI_TERMS` entry (``""``: the paper does not count it)."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    paper: str = ""

    @property
    def nbytes(self) -> int:
        """Its storage, rounded up to the caching allocator's 512-byte blocks."""
        return round_up(math.prod(self.shape) * self.dtype.itemsize)

    @property
    def group(self) -> str:
        """The part of the block it belongs to, one of :data:`KEPT_GROUPS`."""
        name = self.name
        if "copy (autocast cache)" in name:
            return KEPT_GROUPS[5]
        if "scores" in name:
            return KEPT_GROUPS[3]
        if "GELU" in name:
            return KEPT_GROUPS[4]
        if name.startswith(("residual", "block output")):
            return KEPT_GROUPS[0]
        if name.startswith(("q", "k ", "v ")):
            return KEPT_GROUPS[2]
        if "input" in name:
            return KEPT_GROUPS[1]
        return KEPT_GROUPS[6]


#: The parts of a block, as :attr:`Kept.group` names them (lesson 08's figure).
KEPT_GROUPS = (
    "residual stream (float32)",
    "inputs of the linear layers",
    "q, k, v",
    "attention scores (b·a·s·s)",
    "MLP's 4h-wide tensors",
    "autocast's 16-bit weight and bias copies",
    "small: norm statistics, log-sum-exp, masks",
)


def kept_by_group(kept: list[Kept]) -> dict[str, int]:
    """Bytes of ``kept`` by :attr:`Kept.group`, in the order of :data:`KEPT_GROUPS` (zeros left out)."""
    totals = {g: sum(k.nbytes for k in kept if k.group == g) for g in KEPT_GROUPS}
    return {g: n for g, n in totals.items() if n}


def gpt_block_kept(batch: int, seq: int, hidden: int, heads: int, *, amp: bool = False,
                   attention: str = "math", dropout: bool = False) -> list[Kept]:
    """What one block of :class:`helpers.models.gpt.GPT` keeps: :class:`Kept`, in the order the forward pass makes them.

    From what each operation saves on a CUDA GPU (``tools/autograd/derivatives.yaml``; the math kernel of
    ``aten/src/ATen/native/transformers/attention.cpp``): every storage made in the block and alive at the end of the
    forward pass, its output included (the next block's LayerNorm input, in the paper) and, under AMP, autocast's
    cached 16-bit weights.  The sum equals :func:`measure_blocks`.

    Args:
        batch, seq, hidden, heads: b, s, h, a (``hidden`` a multiple of ``heads``).
        amp, dropout: float16 autocast, as CUDA's lists say (else float32); dropout before each residual sum.
        attention: ``"math"`` (keeps the a·s² scores) or ``"flash"``.

    Raises:
        ValueError: for a size below 1, ``hidden`` not a multiple of ``heads``, or another kernel.
    """
    for name, value in (("batch", batch), ("seq", seq), ("hidden", hidden), ("heads", heads)):
        check_int(name, value, 1)
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    if attention not in ("math", "flash"):
        raise ValueError(f"attention must be 'math' or 'flash', got {attention!r}")
    b, s, h, a, d = batch, seq, hidden, heads, hidden // heads
    f32, half = torch.float32, torch.float16
    w = half if amp else f32  # what the matmuls return
    kept = [
        Kept("LayerNorm 1 mean", (b, s, 1), f32),
        Kept("LayerNorm 1 inverse std", (b, s, 1), f32),
        Kept("QKV projection input (LayerNorm 1 output)", (b, s, h), w, "QKV projection input"),
    ]
    if attention == "math":
        # The math kernel computes in float32 (it upcasts 16-bit inputs), and its matmuls keep their operands: the
        # scaled q, the scaled k transposed, the softmax output (also the left operand of the second matmul), and v.
        kept += [
            Kept("q, scaled (float32)", (b, a, s, d), f32, "Q and K (for QK^T)"),
            Kept("k transposed, scaled (float32)", (b, a, d, s), f32, "Q and K (for QK^T)"),
            Kept("softmax output (the scores)", (b, a, s, s), f32, "softmax output"),
            Kept("v (float32)", (b, a, s, d), f32, "V"),
            Kept("output projection input (heads merged: a copy)", (b, s, a, d), w, "output projection input"),
        ]
    else:
        kept += [
            Kept("q, k, v (the QKV projection's output)", (b, s, 3 * h), w, "Q and K (for QK^T)"),
            Kept("attention output (= output projection input)", (b, a, s, d), w, "output projection input"),
            Kept("log-sum-exp per row and head", (b, a, s), f32),
        ]
    if dropout:
        kept.append(Kept("attention dropout mask", (b, s, h), torch.bool, "attention dropout mask"))
    kept += [
        Kept("residual stream after attention (LayerNorm 2 input)", (b, s, h), f32, "LayerNorm 2 input"),
        Kept("LayerNorm 2 mean", (b, s, 1), f32),
        Kept("LayerNorm 2 inverse std", (b, s, 1), f32),
        Kept("MLP first linear input (LayerNorm 2 output)", (b, s, h), w, "MLP first linear input"),
        Kept("GELU input", (b, s, 4 * h), w, "GeLU input"),
        Kept("MLP second linear input (GELU output)", (b, s, 4 * h), w, "MLP second linear input"),
    ]
    if dropout:
        kept.append(Kept("MLP dropout mask", (b, s, h), torch.bool, "MLP dropout mask"))
    kept.append(Kept("block output (next LayerNorm 1 input)", (b, s, h), f32, "LayerNorm 1 input"))
    if amp:
        for shape in ((3 * h, h), (h, h), (4 * h, h), (h, 4 * h)):
            kept.append(Kept("16-bit weight copy (autocast cache)", shape, half))
        for n in (3 * h, h, 4 * h, h):
            kept.append(Kept("16-bit bias copy (autocast cache)", (n,), half))
    return kept


def kept_bytes(kept: list[Kept]) -> int:
    """The sum of :attr:`Kept.nbytes` (each storage rounded up to 512 bytes)."""
    return sum(k.nbytes for k in kept)


def measure_blocks(build, batch: int, seq: int, *, amp: bool = False, attention: str = "math",
                   policy: str = "none") -> list[int]:
    """Bytes each block keeps at the end of its forward pass, measured by the engine: one figure per block.

    ``build()`` returns a model with ``blocks`` and ``config.vocab_size`` (a :class:`helpers.models.gpt.GPT` or
    :class:`helpers.models.llama.Llama`), built on ``meta``; its forward runs on ``(batch, seq)`` token ids on the
    simulated GPU as :class:`helpers.step.StepRunner` runs it, with float16 autocast if ``amp``, the simulated kernel
    ``attention`` (:data:`helpers.config.ATTENTION`) and checkpointing ``policy`` (:data:`CHECKPOINT_POLICIES`).  Block
    i's figure is the growth of allocated bytes from block i-1's return to its own: what it keeps, and its output.

    Raises:
        ValueError: for bad sizes, an unknown kernel or policy.
    """
    check_int("batch", batch, 1)
    check_int("seq", seq, 1)

    def token_ids(batch_size: int, device: torch.device) -> torch.Tensor:  # below the built model's vocabulary
        return torch.randint(0, runner.model.config.vocab_size, (batch_size, seq), device=device)

    config = StepConfig(model=build, batch_size=batch, inputs=token_ids, amp=amp, attention=attention,
                        device="simulated")
    runner = StepRunner(config)  # builds the model, on meta
    checkpoint_blocks(runner.model, policy)
    meter, marks = runner.meter, []
    with meter:
        blocks = list(runner.place().blocks)
        hooks = [blocks[0].register_forward_pre_hook(lambda *_: marks.append(meter.allocated()))]
        hooks += [b.register_forward_hook(lambda *_: marks.append(meter.allocated())) for b in blocks]
        out = runner.output(runner.batch())  # the step's forward pass, without the loss
        del out
        for hook in hooks:
            hook.remove()
    return [b - a for a, b in zip(marks, marks[1:])]


def chunked_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                          chunks: int) -> torch.Tensor:
    """Mean next-token cross-entropy of ``hidden @ weight.T`` (a scalar), a chunk of tokens at a time.

    Each chunk's logits are reduced and dropped, and recomputed in backward (``torch.utils.checkpoint``): at most one
    chunk's logits are alive (the idea of Liger Kernel's and torchtune's chunked losses, in plain PyTorch).

    Args:
        hidden, targets: ``(tokens, h)`` final hidden states and ``(tokens,)`` int64 token ids (or ``(batch, seq, h)``
            and ``(batch, seq)``).
        weight, chunks: the output head's ``(vocab, h)`` weight; how many pieces the tokens are split into.

    Raises:
        ValueError: for ``chunks`` below 1 or more than the tokens, or shapes that disagree.
    """
    hidden, targets = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"{hidden.shape[0]} hidden states but {targets.shape[0]} targets")
    check_int("chunks", chunks, 1)
    if chunks > hidden.shape[0]:
        raise ValueError(f"chunks ({chunks}) cannot exceed the tokens ({hidden.shape[0]})")

    def piece(x, w, t):
        return F.cross_entropy(F.linear(x, w), t, reduction="sum")  # float32 under autocast

    total = sum(checkpoint(piece, x, weight, t, use_reentrant=False)
                for x, t in zip(hidden.chunk(chunks), targets.chunk(chunks)))
    return total / hidden.shape[0]


def kv_cache_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int = 2) -> int:
    """Bytes of KV cache per token of context: ``2 · layers · kv_heads · head_dim · dtype_bytes``.

    Raises:
        ValueError: for a size below 1.
    """
    for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
                        ("dtype_bytes", dtype_bytes)):
        check_int(name, value, 1)
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def transformer_presets() -> dict:
    """The models of lesson 08b's widget, by name: the four GPT-2 sizes and Llama-3 8B (configs)."""
    from .models.gpt import GPT2_PRESETS
    from .models.llama import LLAMA_PRESETS

    return {**GPT2_PRESETS, "llama3-8b": LLAMA_PRESETS["llama3-8b"]}


def _builder(config):
    from .models.gpt import GPT, GPTConfig
    from .models.llama import Llama

    return (lambda: GPT(config)) if isinstance(config, GPTConfig) else (lambda: Llama(config))


def _preset_at(model: str, seq: int, policy: str):
    """The config of preset ``model`` for ``seq`` tokens (GPT-2's learned positions extended past 1024).

    Raises:
        ValueError: for an unknown model or policy, a ``seq`` below 1 or past Llama's context.
    """
    import dataclasses

    from .models.gpt import GPTConfig

    presets = transformer_presets()
    if model not in presets:
        raise ValueError(f"unknown model {model!r}; use one of {', '.join(presets)}")
    check_int("seq", seq, 1)
    if policy not in CHECKPOINT_POLICIES:
        raise ValueError(f"unknown checkpointing policy {policy!r}; use one of {', '.join(CHECKPOINT_POLICIES)}")
    config = presets[model]
    if isinstance(config, GPTConfig) and seq > config.n_positions:
        return dataclasses.replace(config, n_positions=seq)
    if seq > config.n_positions:
        raise ValueError(f"seq {seq} is longer than {model}'s context ({config.n_positions})")
    return config


@dataclass(frozen=True)
class TransformerBuilder:
    """Builds a model of :func:`transformer_presets` (``config``: a ``GPTConfig`` or ``LlamaConfig``) with a
    checkpointing ``policy`` applied: a function of no arguments for :attr:`helpers.config.StepConfig.model`, equal (and
    hashing equal) for equal configurations, so traces can be cached."""

    config: object
    policy: str = "none"

    def __call__(self):
        return checkpoint_blocks(_builder(self.config)(), self.policy)

    def model_spec(self):
        """Its :class:`helpers.models.ModelSpec`: ``config.n_layer`` alike blocks, so a step is written from
        shallow traces (:mod:`helpers.depth`)."""
        import dataclasses

        from .models.spec import ModelSpec

        return ModelSpec(type(self.config).__name__, self, vocab_size=self.config.vocab_size,
                         seq_len=self.config.n_positions, blocks=self.config.n_layer,
                         at_depth=lambda n: TransformerBuilder(dataclasses.replace(self.config, n_layer=n),
                                                               self.policy).model_spec())


def transformer_step(model: str, seq: int, batch: int, *, amp: bool = True, attention: str = "flash",
                     policy: str = "none", optimizer: str = "adam") -> StepConfig:
    """The steady-state training step of lesson 08b's widget, simulated, as a :class:`helpers.config.StepConfig` (its
    ``peak_allocated_bytes`` is what must fit, :func:`helpers.gpus.judge`).

    Args:
        model: a name of :func:`transformer_presets` (GPT-2 gets ``seq`` positions past 1024, so more parameters).
        seq, batch: tokens per sequence, sequences per batch.
        amp, attention: float16 autocast (with a GradScaler); ``"math"``, ``"flash"`` or ``"efficient"``.
        policy, optimizer: every block's checkpointing policy (:data:`CHECKPOINT_POLICIES`); one of
            :data:`helpers.config.OPTIMIZERS`.

    Raises:
        ValueError: for an unknown model or policy, a size below 1, a sequence past Llama's context, or as StepConfig.
    """
    config = _preset_at(model, seq, policy)
    return StepConfig(model=TransformerBuilder(config, policy), name=model, batch_size=batch, seq_len=seq,
                      vocab_size=config.vocab_size, amp=amp, attention=attention, optimizer=optimizer,
                      steady_state=True, device="simulated")
