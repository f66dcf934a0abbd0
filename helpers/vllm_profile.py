"""vLLM's profile run, traced on the simulated GPU: the weights placed, the dummy forward pass, the sampler pass
(lesson 10, :func:`helpers.serving.vllm_startup`).  The rules are vLLM v0.19.0's (``GPUModelRunner.profile_run``,
``_dummy_run`` and ``_dummy_sampler_run`` in ``vllm/v1/worker/gpu_model_runner.py`` of the published wheel); each
function names the part it stands for.
"""

from __future__ import annotations

import torch

from .allocator.rules import round_up
from .config import StepConfig
from .errors import first_line
from .formats import BY_FORMULA, INT4_GROUP
from .hf_config import load_config
from .models.hf import FLASH_IN_KERNEL, CausalLMBuilder
from .step import StepRunner
from .techniques.quantization import nf4_linears, weights as weights_of
from .vllm_kv import layer_windows
from .vllm_rules import Split, not_held, padded_vocab, rank_config
from .vllm_sampler import sampler_pass


def formula_weight_bytes(model: torch.nn.Module, quantization: str, dtype_bytes: int) -> int:
    """Bytes of ``model``'s weights in a format no library runs on fake tensors here, each tensor rounded up to 512
    bytes as the caching allocator rounds it (:func:`helpers.allocator.rules.round_up`).  The linear layers QLoRA would
    quantize (:func:`helpers.techniques.quantization.nf4_linears`: every ``nn.Linear`` but the LM head) take:

    * ``"fp8"``: one byte a weight and one float32 scale (vLLM's ``Fp8LinearMethod`` with a per-tensor scale; an
      FP8-dynamic checkpoint's scale per output channel is a few KiB more);
    * ``"int4"``: half a byte a weight (eight to an int32) and a 16-bit scale per :data:`INT4_GROUP` weights of an input
      row: a symmetric GPTQ or AWQ checkpoint as vLLM's Marlin kernels keep it after loading (``gptq_marlin``,
      ``awq_marlin``: no zero points or activation order kept; their few KiB of workspace left out);

    their biases, and every other parameter and buffer (embeddings, norms, the head), ``dtype_bytes`` an element.

    Args:
        model: the model, built (on ``meta`` is enough), its linear layers' weights frozen.
        quantization: one of :data:`helpers.formats.BY_FORMULA`.
        dtype_bytes: bytes an element of what is not quantized.

    Raises:
        ValueError: for another ``quantization``.
    """
    if quantization not in BY_FORMULA:
        raise ValueError(f"no weight formula for quantization {quantization!r}; they are for "
                         f"{', '.join(BY_FORMULA)}")
    packed = {id(layer.weight) for _, _, layer in nf4_linears(model)}
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        n = t.numel()
        if id(t) not in packed:
            total += round_up(n * dtype_bytes)
        elif quantization == "fp8":
            total += round_up(n) + round_up(4)
        else:
            total += round_up(n // 2) + round_up(n // INT4_GROUP * 2)
    return total


def traced_profile_run(model, label: str, dtype: str, weights_format: tuple[str, bool], tokens: int,
                       num_reqs: int, num_sm: int, split: Split | None = None, v0: bool = False
                       ) -> tuple[int, int, int]:
    """(parameters, weight bytes, activation peak bytes) of vLLM v0.19.0's profile run, traced on the simulated GPU
    (:func:`helpers.serving.vllm_startup`).

    The model is made by the step recipe in ``dtype`` (``StepConfig.param_dtype``, as ``from_pretrained`` loads it:
    every parameter and buffer in ``dtype`` but a model class's ``_keep_in_fp32_modules``, which none of the shipped
    configs has; vLLM's own model classes load all in ``dtype``), its linear layers quantized as ``weights_format``
    says (a format of :data:`helpers.formats.BY_FORMULA`: weights by :func:`formula_weight_bytes`, the run in
    ``dtype``), placed; then, as ``GPUModelRunner.profile_run`` (``vllm/v1/worker/gpu_model_runner.py``): the dummy
    forward pass of ``tokens`` tokens (``_dummy_run``: its hidden states stay alive to the end), and on the last
    pipeline stage only :func:`dummy_sampler_run`.  The peak is taken above what was allocated before the run (the
    input ids, made before it as vLLM's persistent buffers; ``memory_profiling``'s ``torch_peak_increase``).

    Of one rank's shard when ``split`` is given (:func:`helpers.vllm_rules.rank_config`): a stage after the first
    takes the hidden states in (made before the run, as vLLM's intermediate buffers), a stage before the last stops at
    the last layer (no head, no sampler).  The weights a stage does not hold (:func:`helpers.vllm_rules.not_held`) are
    not counted.

    Args:
        model: a shipped config's name or a config (:func:`helpers.hf_config.load_config`).
        label, dtype: the model's label and dtype name (``"bfloat16"``...).
        weights_format: ``(quantization, double_quant)``.
        tokens, num_reqs: ``max_num_batched_tokens`` and ``min(max_num_batched_tokens, max_num_seqs)``.
        num_sm: the card's streaming multiprocessors (:func:`helpers.vllm_sampler.sampler_pass`).
        split: where the rank sits, or None for one card.
        v0: vLLM's V0 engine (``version="0.6.5"``): its profile run as the course traced it before v0.19.0's
            sampler was read: the forward pass with the head on the last ``num_reqs`` tokens, and the logits' float32
            copy (V0's sampler, ``vllm/model_executor/layers/sampler.py``, and its temporaries are not simulated).

    Raises:
        ValueError: in one line, when the model cannot run the pass.
    """
    quantization, double_quant = weights_format
    formula = quantization in BY_FORMULA
    first = last = True
    config = load_config(model)
    vocab = config.get_text_config().vocab_size
    if split is not None:
        first, last = split.first, split.last
        model = rank_config(config, split)
    model = _with_vllm_attention(model, label)
    runner = StepRunner(StepConfig(model=model, batch_size=1, seq_len=tokens, name=label, frozen=True,
                                   param_dtype=dtype, quantization="none" if formula else quantization,
                                   double_quant=double_quant, device="simulated"))
    meter = runner.meter
    with meter:
        net = runner.place().eval()
        weights = meter.allocated()
        if first:  # before the run, as vLLM's
            inputs = dict(input_ids=torch.randint(0, runner.task.vocab_size, (1, tokens), device=meter.device))
        else:
            width = net.get_input_embeddings().embedding_dim
            inputs = dict(inputs_embeds=torch.zeros(1, tokens, width, dtype=getattr(torch, dtype), device=meter.device))
        meter.reset_peak()
        before = meter.allocated()
        try:
            with torch.inference_mode():
                if not last:
                    net.get_decoder()(**inputs)
                elif v0:
                    _v0_logits(net, inputs, num_reqs, vocab, split.tp if split else 1)
                else:
                    hidden = net.get_decoder()(**inputs).last_hidden_state[0]  # [tokens, hidden]: kept
                    dummy_sampler_run(net, hidden, num_reqs, vocab, split.tp if split else 1, num_sm)
        except (RuntimeError, TypeError, ValueError) as e:
            raise ValueError(f"{label} cannot run vLLM's profile pass of {tokens:,} tokens: {first_line(e)}") from None
        peak = meter.peak() - before
    parameters = sum(map(weights_of, net.parameters()))  # a 4-bit weight: its weights, not its packed bytes
    if formula:
        weights = formula_weight_bytes(net, quantization, getattr(torch, dtype).itemsize)
    dropped = not_held(net, first, last)
    return (parameters - sum(t.numel() for t in dropped),
            weights - sum(round_up(t.numel() * t.element_size()) for t in dropped), peak)


def _with_vllm_attention(model, label: str):
    """``model``, or, when Hugging Face would attend differently from vLLM's kernel in memory (a logit softcap, which
    Hugging Face runs only eagerly, storing every score; sliding windows, for which it makes a mask tensor), its
    builder with :data:`helpers.models.hf.FLASH_IN_KERNEL`, the flash kernel that stands for vLLM's FlashAttention."""
    config = load_config(model)
    text = config.get_text_config()
    if getattr(text, "attn_logit_softcapping", None) or any(layer_windows(text, label)):
        return CausalLMBuilder(config, FLASH_IN_KERNEL, label)
    return model


def dummy_sampler_run(net: torch.nn.Module, hidden: torch.Tensor, num_reqs: int, vocab: int, tp: int,
                      num_sm: int) -> torch.Tensor:
    """``_dummy_sampler_run`` after ``_dummy_run`` (``vllm/v1/worker/gpu_model_runner.py``, v0.19.0), on the last
    stage's model ``net``: the last token of each of ``num_reqs`` requests picked from the forward pass's ``hidden``
    states ``[tokens, hidden size]`` (``hidden_states[logit_indices]``: a copy), replaced by random ones
    (``torch.rand_like``), through the head: ``[num_reqs, rows]`` in the model's dtype, ``rows`` this rank's share of
    the vocabulary padded to 64 (:func:`helpers.vllm_rules.padded_vocab`).  Under tensor parallelism they are
    all-gathered (``LogitsProcessor._gather_logits``: every rank gets them on CUDA; ``all_gather`` of
    ``base_device_communicator.py`` fills ``[tp × num_reqs, rows]`` and reshapes it, through ``movedim``, to a
    ``[num_reqs, tp × rows]`` copy); the padding is sliced off (``[..., :vocab]``, a view), and
    :func:`helpers.vllm_sampler.sampler_pass` samples.  Returns the sampled token ids.

    The requests' positions are not the token ids' values: on fake tensors only their count and dtype matter.
    """
    picked = hidden[torch.arange(num_reqs, device=hidden.device)]  # logit_indices: int64 on the device
    logits = net.get_output_embeddings()(torch.rand_like(picked))
    if tp > 1:
        gathered = logits.new_empty(tp * num_reqs, logits.shape[-1])
        logits = gathered.reshape(tp, num_reqs, -1).movedim(0, 1).reshape(num_reqs, -1)
        del gathered
    elif logits.shape[-1] != padded_vocab(vocab):  # vLLM's head has the padded rows; Hugging Face's has not
        logits = logits.new_empty(num_reqs, padded_vocab(vocab))
    return sampler_pass(logits[..., :vocab], num_sm)


def _v0_logits(net: torch.nn.Module, inputs: dict, num_reqs: int, vocab: int, tp: int) -> None:
    """V0's profile pass as :func:`traced_profile_run` says (``v0``): Hugging Face's forward with the head on the last
    ``num_reqs`` tokens (the model's dtype), all-gathered to the padded vocabulary under tensor parallelism, then one
    float32 copy of the real vocabulary, both alive."""
    logits = net(**inputs, logits_to_keep=num_reqs).logits
    if tp > 1:
        logits = logits.new_empty(*logits.shape[:-1], logits.shape[-1] * tp)[..., :vocab]
    logits.float()
