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
from . import vllm_written
from .hf_config import load_config
from .models import resolve_model
from .models.hf import FLASH_IN_KERNEL, CausalLMBuilder
from .shallow import block_list
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


def profile_run(model, label: str, dtype: str, weights_format: tuple[str, bool], tokens: int, num_reqs: int,
                num_sm: int, split: Split | None = None, v0: bool = False) -> tuple[int, int, int]:
    """(parameters, weight bytes, activation peak bytes) of vLLM v0.19.0's profile run (:func:`traced_profile_run`'s
    arguments and figures, to the byte), obtained the one way that applies: **written** from the same run traced with
    3 and 4 decoder layers (:mod:`helpers.vllm_written`) for a model of at least
    :data:`helpers.vllm_written.MIN_LAYERS` alike layers on the rank, else, or where the shallow runs do not repeat
    layer by layer, **traced** in full.

    Raises:
        ValueError: as :func:`traced_profile_run`.
    """
    config = load_config(model)
    shard = _shard(model, config, split, label)
    try:
        spec = resolve_model(shard, None, label)
    except ValueError:  # refused by the full trace, in its words
        spec = None
    if spec is not None and spec.blocks is not None and vllm_written.applies(spec.blocks, spec.blocks_differ) is None:
        runs = [_trace(spec.at_depth(d), shard, label, dtype, weights_format, tokens, num_reqs, num_sm, split, v0,
                       vocab=config.get_text_config().vocab_size) for d in vllm_written.DEPTHS]
        try:
            return vllm_written.written_run(*runs, spec.blocks)
        except vllm_written.NotRepeated:
            pass
    return traced_profile_run(model, label, dtype, weights_format, tokens, num_reqs, num_sm, split, v0)


def traced_profile_run(model, label: str, dtype: str, weights_format: tuple[str, bool], tokens: int,
                       num_reqs: int, num_sm: int, split: Split | None = None, v0: bool = False
                       ) -> tuple[int, int, int]:
    """(parameters, weight bytes, activation peak bytes) of vLLM v0.19.0's profile run, traced in full on the
    simulated GPU (:func:`helpers.serving.vllm_startup`; :func:`profile_run` writes the same figures from shallow
    traces where it can).

    The model is made by the step recipe in ``dtype`` (``StepConfig.param_dtype``, as ``from_pretrained`` loads it:
    every parameter and buffer in ``dtype`` but a model class's ``_keep_in_fp32_modules``, which none of the shipped
    configs has; vLLM's own model classes load all in ``dtype``), its linear layers quantized as ``weights_format``
    says (a format of :data:`helpers.formats.BY_FORMULA`: weights by :func:`formula_weight_bytes`, the run in
    ``dtype``), placed; then, as ``GPUModelRunner.profile_run`` (``vllm/v1/worker/gpu_model_runner.py``): the dummy
    forward pass of ``tokens`` tokens (``_dummy_run``: its hidden states stay alive to the end), and on the last
    pipeline stage only :func:`dummy_sampler_run`.  The peak is taken above what was allocated before the run (the
    input ids, made before it as vLLM's persistent buffers; ``memory_profiling``'s ``torch_peak_increase``).

    Of one rank's shard when ``split`` is given (:func:`helpers.vllm_rules.rank_config`): a stage after the first
    takes the hidden states in from :func:`intermediate_buffers`, made inside the run and alive to its end, a stage
    before the last stops at the last layer (no head, no sampler).  The weights a stage does not hold
    (:func:`helpers.vllm_rules.not_held`) are not counted.

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
    config = load_config(model)
    run = _trace(None, _shard(model, config, split, label), label, dtype, weights_format, tokens, num_reqs, num_sm, split, v0,
                 vocab=config.get_text_config().vocab_size)
    return run.parameters, run.weights, run.peak


def _shard(model, config, split: Split | None, label: str):
    """What the rank builds: ``model`` itself on one card (a shipped name stays a name), else its shard's config
    (:func:`helpers.vllm_rules.rank_config` of ``config``, ``model``'s), with vLLM's attention where Hugging Face's
    would differ in memory (:func:`_with_vllm_attention`)."""
    return _with_vllm_attention(rank_config(config, split) if split is not None else model, label)


def _trace(spec, shard, label: str, dtype: str, weights_format: tuple[str, bool], tokens: int, num_reqs: int,
           num_sm: int, split: Split | None, v0: bool, vocab: int) -> vllm_written.TracedRun:
    """:func:`traced_profile_run` of the rank's model ``shard`` (a config, or a shipped name), or of ``spec`` (the same
    model with fewer layers: :meth:`helpers.models.ModelSpec.at_depth`) when given; ``vocab``: the whole model's
    vocabulary.  With ``spec``, the log's changes and where each decoder layer starts and ends are read too (forward
    hooks on the layers, which allocate nothing)."""
    quantization, double_quant = weights_format
    formula = quantization in BY_FORMULA
    first, last = (split.first, split.last) if split is not None else (True, True)
    runner = StepRunner(StepConfig(model=shard, batch_size=1, seq_len=tokens, name=label, frozen=True,
                                   param_dtype=dtype, quantization="none" if formula else quantization,
                                   double_quant=double_quant, device="simulated"), spec=spec)
    meter = runner.meter
    with meter:
        net = runner.place().eval()
        weights = meter.allocated()
        if first:  # before the run, as vLLM's persistent input buffers
            inputs = dict(input_ids=torch.randint(0, runner.task.vocab_size, (1, tokens), device=meter.device))
        meter.reset_peak()
        before, start = meter.allocated(), meter.log_length()
        if not first:  # inside the run: _dummy_run makes them the first time it runs (intermediate_buffers)
            received = intermediate_buffers(tokens, net.get_input_embeddings().embedding_dim, getattr(torch, dtype),
                                            meter.device)  # both alive to the end of the run
            inputs = dict(inputs_embeds=received[0][None])
        starts, ends, hooks = [], [], []
        if spec is not None:
            for layer in net.get_submodule(block_list(net, spec.blocks)):
                hooks += [layer.register_forward_pre_hook(lambda *_: starts.append(meter.log_length() - start)),
                          layer.register_forward_hook(lambda *_: ends.append(meter.log_length() - start))]
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
        finally:
            for hook in hooks:
                hook.remove()
        peak = meter.peak() - before
        deltas = tuple((e.kind, e.delta) for e in meter.allocation_log()[start:]) if spec is not None else ()
    parameters = sum(map(weights_of, net.parameters()))  # a 4-bit weight: its weights, not its packed bytes
    if formula:
        weights = formula_weight_bytes(net, quantization, getattr(torch, dtype).itemsize)
    dropped = not_held(net, first, last)
    return vllm_written.TracedRun(
        spec.blocks if spec is not None else 0, deltas, tuple(starts), tuple(ends),
        parameters - sum(t.numel() for t in dropped),
        weights - sum(round_up(t.numel() * t.element_size()) for t in dropped), peak)


def intermediate_buffers(tokens: int, width: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``hidden_states`` and ``residual`` buffers a pipeline stage after the first receives its input in: two
    zero tensors ``[tokens, width]`` of the model's ``dtype`` (``make_empty_intermediate_tensors_factory``,
    ``vllm/model_executor/models/utils.py``, v0.19.0), ``tokens`` being ``max_num_batched_tokens``
    (``self.max_num_tokens``).  vLLM makes them the first time ``GPUModelRunner._dummy_run`` runs on such a stage
    (``self.intermediate_tensors`` is None until then, ``vllm/v1/worker/gpu_model_runner.py``): in ``profile_run``,
    inside ``memory_profiling``, so their bytes are in the logged activation peak.  The llm-d-planner logs agree:
    Llama-3.1 8B's last stage under pipeline parallelism logged 2.01 GiB, the single card 1.89 (the same sampler
    pass), 0.12 GiB more, and two such bfloat16 buffers of 8,192 x 4,096 are 0.125 GiB.  The engine's forward takes
    ``hidden_states`` in as Hugging Face's ``inputs_embeds``; Hugging Face's decoder has no residual stream to take
    in, and ``residual`` is kept unread, as vLLM keeps it."""
    return (torch.zeros(tokens, width, dtype=dtype, device=device),
            torch.zeros(tokens, width, dtype=dtype, device=device))


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
