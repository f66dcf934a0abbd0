"""The last part of vLLM's profile run: its sampler on one row of logits per request, as torch code (lesson 10).

vLLM v0.19.0 measures the memory of its profile run (``GPUModelRunner.profile_run``,
``vllm/v1/worker/gpu_model_runner.py``) as a dummy forward pass of ``max_num_batched_tokens`` tokens followed, on the
last pipeline stage only, by ``_dummy_sampler_run``: the hidden states of the last token of each of ``num_reqs``
requests, replaced by random ones, go through the head (``compute_logits``) and the sampler with temperature 0.5,
top-p 0.9 and top-k ``vocab - 1`` (so neither greedy nor plain random sampling: every step below runs).  On a large
vocabulary those ``[num_reqs, vocab]`` float32 tensors, not the forward pass, set the activation peak vLLM logs.

:func:`sampler_pass` replays it on whatever device its input lives on (the simulated GPU's fake tensors in
:func:`helpers.serving.vllm_startup`), with vLLM's shapes and dtypes; each step names the function of the published
0.19.0 wheel it stands for.
"""

from __future__ import annotations

import torch

#: Rows at or above which vLLM applies top-k and top-p with its Triton kernel (``apply_top_k_top_p``,
#: ``vllm/v1/sample/ops/topk_topp_sampler.py``: ``HAS_TRITON and logits.shape[0] >= 8``); below it, PyTorch's sort.
TRITON_MIN_ROWS = 8
#: Entries of each of the Triton path's two float32 lookup tables (``_NORMAL_CDF_TO_SIGMA_TABLE`` and
#: ``_PERCENTILE_TO_STD_TABLE`` of ``vllm/v1/sample/ops/topk_topp_triton.py``), made once per device and kept.
TRITON_TABLE_ENTRIES = 200
#: The sampling settings ``_dummy_sampler_run`` gives every dummy request.
TEMPERATURE, TOP_P = 0.5, 0.9


def triton_buffer_rows(num_reqs: int, num_sm: int) -> int:
    """Rows of the scratch buffer ``apply_top_k_top_p_triton`` (``vllm/v1/sample/ops/topk_topp_triton.py``) makes
    and keeps per device, dtype and vocabulary: one row per Triton program, ``min(num_sm, num_reqs)`` programs,
    rounded up to a power of two but at most ``num_sm`` (``min(next_power_of_2(NUM_PROGRAMS), num_sm)``).  1,024
    requests on an H100's 132 SMs: 132 rows; 40 requests: 64.

    Raises:
        ValueError: for a count below 1.
    """
    if num_reqs < 1 or num_sm < 1:
        raise ValueError(f"num_reqs and num_sm must be >= 1, got {num_reqs} and {num_sm}")
    programs = min(num_sm, num_reqs)
    return min(1 << (programs - 1).bit_length(), num_sm)


def sampler_pass(logits: torch.Tensor, num_sm: int) -> torch.Tensor:
    """vLLM v0.19.0's sampler on the profile run's logits, as ``_dummy_sampler_run`` calls it; returns the sampled
    token ids ``[num_reqs]`` (int64).  The tensors it makes, on ``logits``' device:

    * the dummy sampling metadata: six ``[num_reqs]`` tensors from ``torch.full`` (temperature, top-p, top-k,
      three penalties; ``_dummy_sampler_run``);
    * ``logits.to(torch.float32)``: a float32 copy ``[num_reqs, vocab]`` beside the model-dtype logits, which stay
      alive (none when they are float32 already: ``.to`` returns the same tensor; ``Sampler.forward``,
      ``vllm/v1/sample/sampler.py``);
    * the greedy argmax (``greedy_sample``), then the temperature divided in place (``apply_temperature``: ``div_``);
    * top-k and top-p (``apply_top_k_top_p``, ``vllm/v1/sample/ops/topk_topp_sampler.py``): from
      :data:`TRITON_MIN_ROWS` rows the Triton kernel (``apply_top_k_top_p_triton``) works in place on the float32
      logits with a cached scratch buffer of :func:`triton_buffer_rows` rows of the vocabulary, two small tables and
      the top-k counts in int32; below it PyTorch's sort (``apply_top_k_top_p_pytorch``: sorted values and int64
      indices, their softmax and cumulative sum, masks, ``scatter_`` back);
    * ``logits.softmax(dim=-1, dtype=torch.float32)`` (``TopKTopPSampler.forward_native``), then ``random_sample``:
      ``q = torch.empty_like(probs); q.exponential_()`` and ``probs.div_(q).argmax(dim=-1)``;
    * ``torch.where(temperature < eps, greedy, random, out=greedy)`` (``Sampler.sample``).

    The Triton path's buffer and tables are cached by vLLM (``_TRITON_BUFFER_CACHE``, ``_TRITON_TABLE_CACHE``) and
    outlive the call; here they are freed with the rest when the caller drops them (the profile run's peak is the
    same either way).  The kernel itself is not run: it writes its results into ``logits``, in place.

    Args:
        logits: ``[num_reqs, vocab]`` in the model's dtype, as ``compute_logits`` returns them (all-gathered under
            tensor parallelism, the vocabulary's padding sliced off).
        num_sm: the card's streaming multiprocessors (``num_compute_units``: ``multi_processor_count``).

    Raises:
        ValueError: for logits that are not two-dimensional, or ``num_sm`` below 1.
    """
    if logits.ndim != 2 or num_sm < 1:
        raise ValueError(f"sampler_pass takes [num_reqs, vocab] logits and num_sm >= 1, got {tuple(logits.shape)} "
                         f"and {num_sm}")
    num_reqs, vocab = logits.shape
    full = lambda v: torch.full((num_reqs,), v, device=logits.device)  # noqa: E731
    temperature, top_p, top_k = full(TEMPERATURE), full(TOP_P), full(vocab - 1)
    penalties = [full(0.1) for _ in range(3)]  # noqa: F841  (frequency, presence, repetition: alive, unused)
    logits = logits.to(torch.float32)
    greedy = logits.argmax(dim=-1).view(-1)
    logits.div_(torch.where(temperature < 1e-5, 1.0, temperature).unsqueeze(dim=1))
    if num_reqs >= TRITON_MIN_ROWS:
        scratch = _triton_top_k_top_p(logits, top_k, top_p, num_sm)  # noqa: F841  (cached by vLLM: alive)
    else:
        _sorted_top_k_top_p(logits, top_k, top_p)
    probs = logits.softmax(dim=-1, dtype=torch.float32)
    q = torch.empty_like(probs)
    q.exponential_()
    sampled = probs.div_(q).argmax(dim=-1).view(-1)
    return torch.where(temperature < 1e-5, greedy, sampled, out=greedy)


def _triton_top_k_top_p(logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor, num_sm: int) -> tuple:
    """What ``apply_top_k_top_p_triton`` allocates before its kernel: the top-k counts in int32, top-p in float32
    (already: no copy), the scratch buffer and the two lookup tables; returned so that they stay alive."""
    k32, p32 = k.to(torch.int32), p.to(torch.float32)
    buffer = logits.new_empty((triton_buffer_rows(logits.shape[0], num_sm), logits.shape[1]))
    tables = [logits.new_empty(TRITON_TABLE_ENTRIES) for _ in range(2)]  # new_tensor of 200 Python floats
    return k32, p32, buffer, tables


def _sorted_top_k_top_p(logits: torch.Tensor, k: torch.Tensor, p: torch.Tensor) -> None:
    """``apply_top_k_top_p_pytorch``: sort, mask below the k-th value and beyond the top-p mass, scatter back."""
    logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    kth = logits_sort.gather(1, (logits_sort.size(1) - k.to(torch.long)).unsqueeze(dim=1))
    logits_sort.masked_fill_(logits_sort < kth, -float("inf"))
    probs_sort = logits_sort.softmax(dim=-1)
    probs_sum = torch.cumsum(probs_sort, dim=-1, out=probs_sort)
    top_p_mask = probs_sum <= 1 - p.unsqueeze(dim=1)
    top_p_mask[:, -1] = False
    logits_sort.masked_fill_(top_p_mask, -float("inf"))
    logits.scatter_(dim=-1, index=logits_idx, src=logits_sort)
