"""Published real-GPU memory figures, set beside the engine's (lesson 09; issues 23 and 24).

Each :class:`Published` row is one figure that someone measured on a real GPU
and published, with its setup in our words, the
:class:`helpers.config.StepConfig` options that reproduce that setup, what the
figure measures, how far the engine's figure may be from it, and the gap
explained.  :func:`finetune_comparison` runs the engine on each row (the same
:func:`helpers.step.profile_step` as every lesson, simulated) and returns a
:class:`Comparison` per row; :func:`helpers.teaching.plots.plot_published_comparison`
draws them; ``benchmarks/published_figures.py`` prints the whole table.

Two lists:

* :data:`PUBLISHED` (issue 24): fine-tuning 7B to 65B models on one GPU
  (torchtune's QLoRA tutorial, the comparison of torchtune and PEFT on an
  RTX 4090, PEFT's README table, the QLoRA paper's 65B model on a 48 GB
  card, Unsloth's context-length table);
* :data:`ENGINE_CHECKS` (issue 23): two figures to reproduce within 5%,
  PyTorch's optimizer-step-in-backward tutorial (ViT-L/16) and the memory
  table of transformers pull request #28802 (BERT, eager against SDPA
  attention, on an A100), before and after the cuBLAS workspaces that a GPU
  allocates beside the tensors (:func:`helpers.gpus.unseen_lines`).

What is measured matters (:data:`MEASURES`): ``torch.cuda.max_memory_allocated``
counts tensors (and the cuBLAS workspaces, which the caching allocator hands
out like tensors), ``max_memory_reserved`` adds the allocator's cache, and a
claim that a model "fits a 48 GB GPU" is judged like every verdict of the
course (:func:`helpers.gpus.judge`: the whole step's peak plus the stated
overhead).  The units are the sources' own: "GB" is 10**9 bytes where the
source divides by 1e9 (torchtune's logs, the transformers benchmark scripts),
and a card's "24 GB" is its nominal size.

The sources (none quoted; each row's ``url`` and ``setup`` say where and what):

* torchtune, "Fine-Tuning Llama2 with QLoRA" (docs/source/tutorials/qlora_finetune.rst),
  its configs ``recipes/configs/llama2/7B_{qlora,lora}_single_device.yaml``
  and ``torchtune/utils/memory.py`` at the tutorial's commit (0914d5c, April 2024);
* B. Bossan (a PEFT maintainer), ``torchtune/llama3-lora-single-device`` in
  the repository BenjaminBossan/peft-experiments (README.md, train-peft.ipynb,
  log_peft.txt): the comparison is kept there, not in huggingface/peft;
* huggingface/peft README.md ("High performance on consumer hardware") and
  examples/causal_language_modeling/peft_lora_clm_accelerate_ds_zero3_offload.py;
* Dettmers et al., "QLoRA: Efficient Finetuning of Quantized LLMs" (2023),
  and artidoro/qlora scripts/finetune_guanaco_65b.sh and qlora.py;
* unslothai/unsloth README.md, the context-length table for Llama 3.1 8B;
* pytorch/tutorials intermediate_source/optimizer_step_in_backward_tutorial.py;
* huggingface/transformers pull request #28802 and the table it added to
  docs/source/en/model_doc/bert.md; the benchmark script it used (F. Marty's
  training benchmark gist: ``max_memory_allocated`` x 1e-6, ``logits.sum()``,
  no optimizer).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Any

import torch

from .. import gpus
from ..allocator import replay
from ..config import StepConfig
from ..step import profile_step

#: What a published figure measures, in words.  ``"card"``: a claim that the
#: step fits (or just fits) a card of ``published`` bytes.
MEASURES = {
    "allocated": "peak allocated (torch.cuda.max_memory_allocated)",
    "reserved": "peak reserved (torch.cuda.max_memory_reserved)",
    "snapshot": "peak of a memory snapshot (allocated blocks)",
    "card": "fits a card of this size (a claim, judged as every verdict)",
}
#: Where the engine's figure is expected, against the published one:
#: within the row's tolerance, or below (``"under"``) or above (``"over"``) it
#: by more than the tolerance, for the reason the row's ``gap`` states.
EXPECTED = ("within", "under", "over")

#: Every linear layer of a Llama decoder block: what "all linear layers" means
#: in QLoRA's, torchtune's and Unsloth's setups.
LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: A card of 48 GB (RTX A6000, A40, L40S): 48 GiB of memory chips, its nominal size.
CARD_48GB = 48 * 2**30


def _options(**options) -> tuple[tuple[str, Any], ...]:
    """The StepConfig options of a row as a sorted tuple of pairs (hashable, frozen)."""
    return tuple(sorted(options.items()))


@dataclass(frozen=True)
class Published:
    """One published real-GPU memory figure and the step that reproduces it.

    Attributes:
        key: a short unique name (``"torchtune-qlora"``).
        source: who published it and where, in a few words.
        url: the page or repository file it is in.
        setup: the setup as the source states it (model, sequence, batch,
            precision, LoRA, quantization, optimizer, checkpointing, card),
            in our words, with anything assumed marked as such.
        options: the :class:`helpers.config.StepConfig` options that
            reproduce the setup, as ``(name, value)`` pairs (``device`` is
            always ``"simulated"``); see :meth:`config`.
        published: the published figure, bytes.
        measured: what it measures, a key of :data:`MEASURES`.
        card: the GPU it was measured on, a key of :data:`helpers.gpus.GPU_CARDS`,
            or None when the source names none that is listed there (then no
            cuBLAS workspace line is added).
        gap: the difference between the engine's figure and the published
            one, explained in one or two sentences.
        tolerance: how far the engine may be from it, a fraction (0.10: 10%).
        expected: a value of :data:`EXPECTED`.
        slow: True when the engine takes more than a few seconds for it (most
            7B models and up): the tests leave it to the benchmark.
    """

    key: str
    source: str
    url: str
    setup: str
    options: tuple[tuple[str, Any], ...]
    published: int
    measured: str
    card: str | None
    gap: str
    tolerance: float
    expected: str = "within"
    slow: bool = True

    def config(self) -> StepConfig:
        """The step of this row: ``StepConfig(**options, device="simulated")``.

        Raises:
            ValueError: as :class:`helpers.config.StepConfig` does, for an option it lacks.
        """
        return StepConfig(**dict(self.options), device="simulated")


# -- issue 23: models for the transformers benchmark ---------------------------------------

@dataclass(frozen=True)
class BertLM:
    """Builds BERT-base as ``AutoModelForCausalLM.from_pretrained("bert-base-uncased")`` does,
    in float16: ``transformers.BertLMHeadModel`` of the default ``BertConfig``
    (bert-base-uncased's sizes: 12 layers, 768 wide, 12 heads, vocabulary
    30522, dropout 0.1), not a decoder (bidirectional attention), its LM head
    tied to the word embeddings: 109,514,298 parameters.

    Attributes:
        attn_implementation: ``"eager"`` (the full scores, softmax and dropout
            kept) or ``"sdpa"`` (``scaled_dot_product_attention``).
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
    """Builds a Hugging Face causal LM with ``attn_implementation="eager"``: the
    attention of an architecture that ``transformers`` runs without SDPA
    (BLOOM), or of a model as ``transformers`` ran it before SDPA (Llama in
    2023: the full scores, softmax in float32), which
    :func:`helpers.models.hf.build_causal_lm`'s default (SDPA) does not give.

    Attributes:
        config: a name of :data:`helpers.models.hf.SHIPPED`, or the
            ``config.json`` keys and values as sorted ``(key, value)`` pairs
            (hashable).
    """

    config: str | tuple[tuple[str, Any], ...]

    def __call__(self) -> torch.nn.Module:
        from ..models import hf

        config = hf.load_config(self.config if isinstance(self.config, str) else dict(self.config))
        return hf.CausalLMBuilder(config, "eager")()


#: bigscience/bloomz-7b1's config.json (BLOOM 7B1's sizes: 4096 wide, 30 layers, 32
#: heads, vocabulary 250880, LM head tied to the embedding; 7,069,016,064
#: parameters, as Hugging Face reports them for bloom-7b1), from BloomConfig's
#: keys as the published BLOOM configs write them.
BLOOMZ_7B1 = tuple(sorted({
    "model_type": "bloom", "architectures": ("BloomForCausalLM",), "hidden_size": 4096, "n_layer": 30, "n_head": 32,
    "vocab_size": 250880, "layer_norm_epsilon": 1e-05, "apply_residual_connection_post_layernorm": False,
    "attention_dropout": 0.0, "hidden_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 3,
    "unk_token_id": 0, "pretraining_tp": 1, "slow_but_exact": False, "use_cache": True,
}.items()))


@dataclass(frozen=True)
class TokenIds:
    """The model's input as the benchmark feeds it: ``(batch_size, seq_len)`` token ids.

    No ``attention_mask``: the benchmark passed one of all ones, which
    transformers (4.38, with PyTorch 2.2) turned into no mask for SDPA, so that
    its flash kernel ran; without it the pinned transformers does the same.
    """

    seq_len: int
    vocab_size: int = 30522

    def __call__(self, batch_size: int, device) -> tuple[torch.Tensor]:
        return (torch.randint(0, self.vocab_size - 1, (batch_size, self.seq_len), device=device),)


def shifted_float32_loss(output) -> torch.Tensor:
    """The next-token loss as the 2024 fine-tuning code of these sources computed it.

    transformers 4.31 to 4.45's Llama returned its logits upcast to float32
    (``self.lm_head(hidden_states).float()``, removed by transformers #33902),
    and its loss, torchtune's recipes (whose model also returned ``.float()``
    logits) and the PEFT notebook all shifted them into a contiguous copy
    before the cross-entropy (``logits[..., :-1, :].contiguous()``).  On a
    float32 model ``.float()`` copies nothing.  The pinned transformers returns
    the logits in the model's dtype, so this loss makes the same float32 copies
    from them.  Targets are random token ids.  See :func:`shifted_loss` for the
    same without the upcast.

    Args:
        output: a model output with ``.logits``, or the logits, ``(batch, seq, vocabulary)``.

    Returns:
        The mean cross-entropy over the ``batch x (seq - 1)`` shifted positions.
    """
    logits = getattr(output, "logits", output).float()
    shifted = logits[..., :-1, :].contiguous()
    targets = torch.randint(0, shifted.shape[-1], shifted.shape[:-1], device=shifted.device)
    return torch.nn.functional.cross_entropy(shifted.flatten(0, 1), targets.flatten())


def shifted_loss(output) -> torch.Tensor:
    """The next-token loss as transformers computed it before 4.31 (and for BLOOM):
    the logits in the model's dtype, shifted into a contiguous copy, then the
    cross-entropy against random token ids (:func:`shifted_float32_loss` without
    the float32 upcast)."""
    logits = getattr(output, "logits", output)
    shifted = logits[..., :-1, :].contiguous()
    targets = torch.randint(0, shifted.shape[-1], shifted.shape[:-1], device=shifted.device)
    return torch.nn.functional.cross_entropy(shifted.flatten(0, 1), targets.flatten())


class HeldLogitsSum:
    """The benchmark's loss, ``outputs.logits.sum()``, with the model's ``outputs``
    kept as the script keeps them: in a variable, through backward, until the
    next step's forward pass has made new ones."""

    def __init__(self):
        self.outputs = None

    def __call__(self, output) -> torch.Tensor:
        self.outputs = output
        return output.logits.sum()


def vit_output_sum(output: torch.Tensor) -> torch.Tensor:
    """The tutorial's loss: the sum of the model's output (``loss.sum()``)."""
    return output.sum()


# -- the rows -----------------------------------------------------------------------------

_TORCHTUNE_URL = ("https://docs.pytorch.org/torchtune/stable/tutorials/qlora_finetune.html (table of peak memory "
                  "reserved; configs recipes/configs/llama2/7B_qlora_single_device.yaml and "
                  "7B_lora_single_device.yaml at pytorch/torchtune 0914d5c)")
_TORCHTUNE_SETUP = ("Llama-2-7B, everything in bfloat16 (weights, activations, adapters, gradients, AdamW's states), "
                    "torchtune's activation checkpointing (every layer), AdamW, batch 2 of Alpaca-cleaned samples "
                    "of at most 512 tokens (padded to the longest of the batch), gradient accumulation; the peak "
                    "reserved of the logged training steps, torch.cuda.max_memory_reserved() / 1e9, on an unnamed "
                    "GPU.")

PUBLISHED: tuple[Published, ...] = (
    Published(
        key="torchtune-qlora",
        source="torchtune's QLoRA tutorial: Llama2-7B QLoRA",
        url=_TORCHTUNE_URL,
        setup="QLoRA rank 8 (alpha 16) on every linear layer of the blocks, whose weights are torchao NF4 "
              "tensors (embedding and output layer stay bfloat16). " + _TORCHTUNE_SETUP,
        options=_options(model="meta-llama/Llama-2-7b-hf", loss=shifted_float32_loss, batch_size=2, seq_len=512,
                         lora_rank=8, lora_targets=LLAMA_LINEAR, quantization="nf4", param_dtype="bfloat16",
                         optimizer="adamw", checkpoint=1, steady_state=True),
        published=9_290_000_000, measured="reserved", card=None,
        gap="Within 10%, under.  The figure is reserved memory since the model was built: quantizing the "
            "bfloat16 weights to NF4 on the GPU frees blocks that the allocator keeps (torchtune: 9.13 GB "
            "reserved at init, the tutorial's other column), and the training step fits inside that cache.  The "
            "engine's replay places and quantizes the weights too, and keeps a cache alike: 5.3 GB allocated at "
            "the step's peak, 8.5 GB reserved.",
        tolerance=0.10),
    Published(
        key="torchtune-lora",
        source="torchtune's QLoRA tutorial: Llama2-7B LoRA",
        url=_TORCHTUNE_URL,
        setup="LoRA rank 8 (alpha 16) on q_proj and v_proj, the base weights bfloat16. " + _TORCHTUNE_SETUP,
        options=_options(model="meta-llama/Llama-2-7b-hf", loss=shifted_float32_loss, batch_size=2, seq_len=512,
                         lora_rank=8, lora_targets=("q_proj", "v_proj"), param_dtype="bfloat16", optimizer="adamw",
                         checkpoint=1, steady_state=True),
        published=15_570_000_000, measured="reserved", card=None,
        gap="Within 10%, under: the figure is the peak reserved over a hundred logged steps whose batches "
            "have different lengths (Alpaca samples padded per batch), on top of the cache left by building the "
            "model (13.98 GB reserved at init, 0.5 GB above the bfloat16 weights); the replay sees one "
            "512-token step, from an empty cache.",
        tolerance=0.10),
    Published(
        key="peft-lora-4090",
        source="PEFT's torchtune/PEFT comparison: Llama-3 8B LoRA, RTX 4090",
        url="https://github.com/BenjaminBossan/peft-experiments/tree/main/torchtune/llama3-lora-single-device "
            "(README.md, train-peft.ipynb, log_peft.txt)",
        setup="Meta-Llama-3-8B-Instruct in bfloat16 (from_pretrained(torch_dtype=bfloat16)), PEFT LoRA rank 8 "
              "(alpha 16, dropout 0.05) on q_proj and v_proj with bfloat16 adapters, AdamW (weight decay "
              "0.01), no gradient checkpointing, batch 2 of Alpaca-cleaned samples of at most 512 tokens, "
              "gradient accumulation 4, NVIDIA GeForce RTX 4090, torch 2.3.1; the figure is the largest "
              "peak_memory_alloc of the logged steps (torch.cuda.max_memory_allocated() / 1e9), reached "
              "whenever a batch is 512 tokens long.",
        options=_options(model="meta-llama/Llama-3.1-8B", loss=shifted_float32_loss, batch_size=2, seq_len=512,
                         lora_rank=8, lora_targets=("q_proj", "v_proj"), lora_dropout=0.05, param_dtype="bfloat16",
                         optimizer="adamw", steady_state=True),
        published=23_446_532_096, measured="allocated", card="RTX 4090 24 GB",
        gap="Within 2%, over, with differences both ways: the engine's adapters are float32 (peft's default; "
            "the notebook made them bfloat16), so each of the 64 adapted projections keeps its dropout's output "
            "in float32, 8.4 MB more each (0.5 GB); the notebook's transformers repeated the key and value to 32 "
            "heads before SDPA, which kept them, 0.4 GB more than the engine's grouped-query kernel keeps.  The "
            "notebook accumulates 4 micro-batches, which adds only the adapters' gradients (a few MB).",
        tolerance=0.10),
    Published(
        key="peft-readme-bloomz",
        source="PEFT's README table: bloomz-7b1 LoRA, plain PyTorch",
        url="https://github.com/huggingface/peft (README.md, High performance on consumer hardware; setup from "
            "examples/causal_language_modeling/peft_lora_clm_accelerate_ds_zero3_offload.py)",
        setup="bigscience/bloomz-7b1 loaded in float32 (from_pretrained without a dtype), LoRA rank 8 (alpha 32, "
              "dropout 0.1) on peft's default target for BLOOM (query_key_value), AdamW, batch 8 of "
              "twitter_complaints samples padded to 64 tokens, no checkpointing, no mixed precision, on an "
              "A100 80GB; the table's PEFT-LoRA PyTorch column: 32GB GPU, rounded from the script's peak "
              "(torch.cuda.max_memory_allocated, printed in MiB).",
        options=_options(model=EagerCausalLM(BLOOMZ_7B1), name="bigscience/bloomz-7b1", loss=shifted_loss,
                         batch_size=8, seq_len=64, vocab_size=250880, lora_rank=8, lora_dropout=0.1,
                         optimizer="adamw", steady_state=True),
        published=32_000 * 2**20, measured="allocated", card="A100 80 GB",
        gap="Within rounding: the README gives whole GB; read as the script's 32,000 MiB the engine is 3% "
            "under, read as 32e9 bytes 2% over.  Nearly all of it is the float32 weights (28.3 GB).",
        tolerance=0.10, slow=False),
    Published(
        key="qlora-guanaco-65b",
        source="QLoRA paper: Guanaco 65B on one 48 GB GPU",
        url="https://arxiv.org/abs/2305.14314 (abstract: a 65B model fine-tuned on a single 48 GB GPU); "
            "setup from artidoro/qlora scripts/finetune_guanaco_65b.sh and qlora.py",
        setup="LLaMA 65B as transformers ran it in May 2023 (eager attention: the full scores, softmax in "
              "float32; logits not upcast), base weights NF4 with double quantization, computed in bfloat16, "
              "LoRA rank 64 (alpha 16, dropout 0.05) on every linear layer, paged AdamW with 32-bit states, gradient "
              "checkpointing, batch 4 of OASST1 samples (at most 16 source + 512 target tokens), gradient "
              "accumulation 4; the claim: it fits one 48 GB GPU.",
        options=_options(model=EagerCausalLM("huggyllama/llama-65b"), name="huggyllama/llama-65b (eager attention)",
                         loss=shifted_loss, batch_size=4, seq_len=528, vocab_size=32000,
                         lora_rank=64, lora_targets=LLAMA_LINEAR, lora_dropout=0.05, quantization="nf4",
                         param_dtype="bfloat16", optimizer="adamw", checkpoint=1, steady_state=True),
        published=CARD_48GB, measured="card", card=None,
        gap="Just over the card (2%) with the stated 1 GiB overhead, where the paper fits it: the LoRA "
            "adapters are float32 in the engine (peft's default), bfloat16 in qlora.py (--bf16): 800 million "
            "adapter parameters (rank 64 on every linear layer of 80 layers) and their gradients take 3.2 GB "
            "more, without which it fits with about 2 GB to spare.  And the paged AdamW keeps its 6.4 GB of "
            "32-bit states in CUDA unified memory, which the driver pages out to host memory under pressure: "
            "a count of allocations cannot show that.",
        tolerance=0.10),
    Published(
        key="unsloth-hf-24gb",
        source="Unsloth's context-length table: Hugging Face + FA2 on 24 GB",
        url="https://github.com/unslothai/unsloth (README.md, context length of Llama 3.1 8B QLoRA per GPU size)",
        setup="Llama 3.1 8B Instruct, 4-bit QLoRA rank 32 on every linear layer (q, k, v, o, gate, up, down), "
              "batch 1, every sequence padded to the length tried; the claim: with Hugging Face and "
              "FlashAttention 2 the longest that fits 24 GB is 5,789 tokens.  Not stated, assumed here: "
              "gradient checkpointing on (peft's prepare_model_for_kbit_training turns it on), 8-bit AdamW "
              "(Unsloth's notebooks' optimizer), bfloat16 compute.",
        options=_options(model="meta-llama/Llama-3.1-8B", loss=shifted_float32_loss, batch_size=1, seq_len=5789,
                         lora_rank=32, lora_targets=LLAMA_LINEAR, quantization="nf4", param_dtype="bfloat16",
                         optimizer="adamw8bit", checkpoint=1, steady_state=True),
        published=gpus.GPU_CARDS["RTX 4090 24 GB"], measured="card", card="RTX 4090 24 GB",
        gap="A claim checked, not reproduced: the engine needs about 18 GB for 5,789 tokens, so it puts the "
            "longest sequence that fits 24 GB well beyond.  The setup is not fully stated; Hugging Face's usual "
            "QLoRA recipe (peft's prepare_model_for_kbit_training) also casts the embedding, the LM head and the "
            "norms to float32 (2.1 GB more weights, and a float32 residual stream, whose checkpoint at each "
            "layer doubles to 95 MB), which no StepConfig option expresses.",
        tolerance=0.10, expected="under"),
)

_TUTORIAL_URL = ("https://docs.pytorch.org/tutorials/intermediate/optimizer_step_in_backward_tutorial.html "
                 "(pytorch/tutorials intermediate_source/optimizer_step_in_backward_tutorial.py)")
_TUTORIAL_SETUP = ("torchvision's vit_l_16 in float32 (304,326,632 parameters), one 3 x 224 x 224 image, "
                   "loss = the sum of the 1000 outputs, torch.optim.Adam with its defaults (foreach on a GPU), "
                   "optimizer.zero_grad() (set_to_none); the peak read off a memory snapshot of three steps, "
                   "in GB of 10**9 bytes (its ~1.2 GB of parameters are 1.217e9 bytes)")
_BERT_URL = ("https://github.com/huggingface/transformers/pull/28802 (table in docs/source/en/model_doc/bert.md, "
             "section Using Scaled Dot Product Attention)")


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:,.1f}"


def _bert_row(batch: int, seq: int, impl: str, published_mb: float) -> Published:
    logits = batch * seq * 30522 * 2  # (batch, seq, vocabulary) float16
    return Published(
        key=f"bert-{impl}-b{batch}-s{seq}",
        source=f"transformers #28802: BERT training, {impl}, batch {batch}, {seq} tokens",
        url=_BERT_URL,
        setup=f"BertLMHeadModel of bert-base-uncased (AutoModelForCausalLM, not a decoder) in float16, "
              f"attn_implementation={impl!r}, batch {batch} of {seq} random token ids with an all-ones "
              f"attention mask, loss = logits.sum(), backward, no optimizer (model.zero_grad() before each "
              f"step), A100-80GB, PyTorch 2.2.0; torch.cuda.max_memory_allocated() x 1e-6 over 1000 steps "
              f"after 5 warm-up steps.",
        options=_options(model=BertLM(impl), name=f"bert-base-uncased ({impl})", batch_size=batch,
                         inputs=TokenIds(seq), loss=HeldLogitsSum(), optimizer="sgd"),
        published=round(published_mb * 1e6), measured="allocated", card="A100 80 GB",
        gap=f"Early in backward, as on the GPU: the script's `outputs` still holds the logits while cuBLAS "
            f"copies logits.sum()'s stride-0 gradient to a dense {batch * seq} x 30522 float16 matrix "
            f"({_mb(logits)} MB) for the LM head's products (the engine's rule for a matrix cuBLAS cannot read "
            f"in place, helpers.engine.cuda_rules.cublas_operand_copy).  What remains is the A100's choice of "
            f"kernels and their workspaces, which the engine does not see.",
        tolerance=0.05, expected="within", slow=False)


#: The training table of transformers #28802, (batch, seq): (eager MB, sdpa MB), MB = 10**6 bytes.
BERT_TABLE = {
    (4, 256): (939.213, 764.834), (4, 512): (1970.447, 1227.162), (8, 256): (1594.295, 1226.114),
    (8, 512): (3629.401, 2134.262), (16, 256): (2874.426, 2134.262), (16, 512): (6964.659, 3961.013),
}

ENGINE_CHECKS: tuple[Published, ...] = (
    Published(
        key="vit-l16-adam",
        source="PyTorch tutorial: optimizer step in backward, ViT-L/16, plain step",
        url=_TUTORIAL_URL,
        setup=_TUTORIAL_SETUP + "; the plain step: peak about 6 GB, at the optimizer step.",
        options=_options(model="vit_l_16", batch_size=1, loss=vit_output_sum, optimizer="adam",
                         steady_state=True),
        published=6_000_000_000, measured="snapshot", card=None,
        gap="None beyond the tutorial's rounding: its ~6 GB is five times the 1.217 GB of parameters "
            "(parameters, gradients, Adam's two states and foreach Adam's intermediates at the optimizer step), "
            "6.09 GB, the engine's figure.  The tutorial names no card, so no cuBLAS workspace is added "
            "(8.5 MB to 33.6 MB per handle: inside the rounding).",
        tolerance=0.05, slow=False),
    Published(
        key="vit-l16-adam-in-backward",
        source="PyTorch tutorial: optimizer step in backward, ViT-L/16, step in backward",
        url=_TUTORIAL_URL,
        setup=_TUTORIAL_SETUP + "; one Adam(foreach=False) per parameter stepped by "
              "register_post_accumulate_grad_hook: peak about 4 GB, early in backward.",
        options=_options(model="vit_l_16", batch_size=1, loss=vit_output_sum, optimizer="adam",
                         step_in_backward=True, steady_state=True),
        published=4_000_000_000, measured="snapshot", card=None,
        gap="None: parameters and Adam's states (3.65 GB) and the activations still alive early in backward "
            "(0.3 GB), as the tutorial explains its ~4 GB.  No card named, no workspace added.",
        tolerance=0.05, slow=False),
    *(_bert_row(b, s, impl, mb) for (b, s), pair in BERT_TABLE.items() for impl, mb in zip(("eager", "sdpa"), pair)),
)

#: Every row, by key.
ROWS: dict[str, Published] = {row.key: row for row in (*PUBLISHED, *ENGINE_CHECKS)}


# -- the engine beside them ----------------------------------------------------------------

@dataclass(frozen=True)
class Comparison:
    """One row's published figure beside the engine's.  Bytes.

    Attributes:
        row: the :class:`Published` row.
        allocated: the engine's peak allocated bytes of the whole step
            (``profile_step(row.config()).peak_allocated_bytes``: tensors only).
        reserved: the peak reserved bytes of that step replayed through the
            caching-allocator model (:func:`helpers.allocator.replay`), for a
            row that measured reserved memory; else None.
        workspaces: the cuBLAS workspaces a real GPU adds beside the tensors
            on the row's card (two handles: the forward's thread and
            autograd's; :func:`helpers.gpus.unseen_lines`), 0 without a card.
        verdict: for a ``"card"`` row, :func:`helpers.gpus.judge` of the
            allocated peak on a card of ``row.published`` bytes (with the
            card's workspace lines when the row names it); else None.
    """

    row: Published
    allocated: int
    reserved: int | None
    workspaces: int
    verdict: gpus.Verdict | None

    @property
    def before(self) -> int:
        """The engine's figure for what the row measures, tensors only: the
        reserved replay for a reserved figure, the peak plus the assumed
        overhead for a card (the verdict's need without its workspace
        lines), else the allocated peak."""
        if self.row.measured == "reserved" and self.reserved is not None:
            return self.reserved
        if self.row.measured == "card":
            return self.verdict.peak + self.verdict.overhead
        return self.allocated

    @property
    def after(self) -> int:
        """:attr:`before` plus the cuBLAS workspaces (the figure a GPU would show)."""
        return self.before + self.workspaces

    @property
    def ratio(self) -> float:
        """``after / published``: 1.0 is exact, 0.9 is 10% under."""
        return self.after / self.row.published

    @property
    def ratio_before(self) -> float:
        """``before / published``."""
        return self.before / self.row.published

    @property
    def agrees(self) -> bool:
        """True when the engine is where the row expects it (:data:`EXPECTED`):
        within the tolerance, or beyond it on the explained side."""
        off, tol = self.ratio - 1, self.row.tolerance
        if self.row.expected == "under":
            return off < -tol
        if self.row.expected == "over":
            return off > tol
        return abs(off) <= tol


def _workspaces(card: str | None) -> int:
    """Two cuBLAS workspaces on ``card`` (a training step's two threads), 0 for no card."""
    if card is None:
        return 0
    return gpus.unseen_lines(card, 2).get(gpus.CUBLAS_LINE) or 0


@functools.lru_cache(maxsize=None)
def compare(row: Published) -> Comparison:
    """The engine's figures for ``row``: its step profiled, simulated (cached per row in this process).

    Raises:
        ValueError: as :func:`helpers.step.profile_step` does.
    """
    profile = profile_step(row.config())
    reserved = None
    if row.measured == "reserved":
        result = replay(profile.allocation_log)
        reserved = max(result.reserved) if result.reserved else 0
    verdict = None
    if row.measured == "card":  # the verdict of every widget, with the card's workspace lines when it is named
        verdict = gpus.judge(row.published, profile.peak_allocated_bytes, card=row.card,
                             cublas_handles=2 if row.card else 0)
    return Comparison(row, profile.peak_allocated_bytes, reserved, _workspaces(row.card), verdict)


def finetune_comparison(rows: tuple[Published, ...] | list[Published] = PUBLISHED) -> list[Comparison]:
    """The engine's figure beside each published one, in the order of ``rows``.

    Each row's step is profiled once per process (simulated, whole step, steady
    state as the row says) and judged by the same rule as every "does it fit?"
    of the course.  Measured on the project's two-core machine, quiet: the
    BERT and ViT rows about a second each, bloomz-7b1 5 s, the LoRA rows of
    7-8B models about 10 s, the QLoRA rows 30-50 s (quantizing the weights),
    the 65B QLoRA row about a minute (``benchmarks/published_figures.py``
    prints them); a lesson passes the rows it shows.

    Args:
        rows: :class:`Published` rows (default :data:`PUBLISHED`; also
            :data:`ENGINE_CHECKS`).

    Returns:
        One :class:`Comparison` per row.

    Raises:
        ValueError: for something that is not a :class:`Published` row, or as
            :func:`helpers.step.profile_step` does.
    """
    rows = list(rows)
    for row in rows:
        if not isinstance(row, Published):
            raise ValueError(f"rows must be Published rows (helpers.teaching.published), got {type(row).__name__}")
    return [compare(row) for row in rows]


def comparison_table(comparisons: list[Comparison]) -> str:
    """A Markdown table: source, what was measured, published, engine before and after the workspaces, ratio.

    Sizes in GB of 10**9 bytes, as most sources give them.
    """
    lines = ["| source | measured | published (GB) | engine, tensors (GB) | engine + cuBLAS workspaces (GB) "
             "| engine / published | expected |", "|---|---|---:|---:|---:|---:|---|"]
    for c in comparisons:
        r = c.row
        lines.append(f"| {r.source} | {r.measured} | {r.published / 1e9:.3f} | {c.before / 1e9:.3f} | "
                     f"{c.after / 1e9:.3f} | {c.ratio:.3f} | {r.expected} (tol. {r.tolerance:.0%}) |")
    return "\n".join(lines)
