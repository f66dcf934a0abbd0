"""bitsandbytes on a CUDA GPU, applied to the simulation (lesson 09).

bitsandbytes registers fake kernels for its 4-bit and 8-bit operators, but a fake kernel allocates only the result;
the CUDA kernels of ``bitsandbytes/backends/cuda/ops.py`` (0.50.2) allocate more (a dequantized weight, row scales,
an int32 product). :data:`BNB_CUDA` maps each such operator to what its CUDA kernel allocates;
:class:`helpers.engine.simulated.SimulatedTracker` runs it in the operator's place.
"""

from __future__ import annotations

import contextvars

import torch

from .autocast import NO_AUTOCAST, autocast_again

#: bitsandbytes' fused 4-bit matrix product takes at most this many rows on every card (``_GEMM_4BIT_CUSTOM_FLOOR_M``);
#: above :data:`BNB_FUSED_MAX_ROWS` never (``_gemm_4bit_custom_max_m``), both in ``bitsandbytes/backends/cuda/ops.py``.
#: In float32 (no MMA kernel) it takes fewer than :data:`BNB_FUSED_FP32_ROWS` rows on every card, and never more
#: (``_gemm_4bit_use_custom_cuda``: ``if dtype == torch.float32 ...: return M < 8``).
BNB_FUSED_ROWS, BNB_FUSED_MAX_ROWS, BNB_FUSED_FP32_ROWS = 4, 1536, 8


def bnb_gemm_4bit(A, B, shapeB, absmax, blocksize, quant_type, bias=None, absmax_8bit=None, absmax_code=None,
                  absmax_offset=None) -> torch.Tensor:
    """What ``torch.ops.bitsandbytes.gemm_4bit`` allocates on a CUDA GPU (bitsandbytes 0.50.2,
    ``backends/cuda/ops.py``), where its fake kernel allocates only the result.

    ``A``: the input (..., K) in the compute dtype (``Linear4bit``'s ``compute_dtype``); ``B``: the packed 4-bit
    weight of ``shapeB`` ``[N, K]``. Up to :data:`BNB_FUSED_ROWS` rows of ``A`` (in float32 up to 7,
    :data:`BNB_FUSED_FP32_ROWS`), the fused kernel: a contiguous ``A`` and the (..., N) result in ``A``'s dtype.
    Otherwise ``_dequant_linear_fallback``: with double quantization the float32 scales (``absmax_8bit``'s length)
    dequantized and then shifted by ``absmax_offset`` (both kept to the end), the weight dequantized in ``A``'s dtype
    (``N * K`` elements: 2 bytes each in 16 bits, 4 in float32), then ``F.linear``, which autocast reaches (the op
    has no autocast kernel: its fallthrough leaves autocast on inside the CUDA kernel): under autocast in another
    dtype, ``A`` and the dequantized weight are cast to autocast's dtype for the product (one more copy of the weight,
    2 bytes each), and the result comes back in autocast's dtype, not ``A``'s. Autocast is the one on when the op is
    called (:func:`gemm_4bit_autocast`): the step's forward, and a checkpoint's recompute in backward, which
    ``torch.utils.checkpoint`` runs under the forward's autocast again. Between 5 and
    :data:`BNB_FUSED_MAX_ROWS` rows of 16-bit ``A`` bitsandbytes picks by the card's architecture and shape
    (``_gemm_4bit_use_custom_cuda``); the simulation, which has no card, takes the fallback there too: an upper bound
    by one dequantized weight (on the stub driver's H100, 8 rows fuse Llama-3.1 8B's gate and up projections: its
    checkpointed step peaks 4,029,440 B under the simulation's).
    """
    rows = A.numel() // A.shape[-1]
    fused = rows < BNB_FUSED_FP32_ROWS if A.dtype == torch.float32 else rows <= BNB_FUSED_ROWS
    if fused and A.shape[-1] % blocksize == 0:
        A = A.contiguous()
        return torch.empty((*A.shape[:-1], shapeB[0]), dtype=A.dtype, device=A.device)
    if absmax_8bit is not None:
        scales = torch.empty_like(absmax_8bit, dtype=torch.float32)
        absmax = scales + absmax_offset
    weight = torch.empty(shapeB, dtype=A.dtype, device=A.device)
    with autocast_again(_GEMM_4BIT_AUTOCAST.get()):  # excluded in the simulated tracker; CUDA's kernel runs under it
        return torch.nn.functional.linear(A, weight, bias)


#: Autocast's dtype where ``bitsandbytes::gemm_4bit`` was called under autocast (None elsewhere), for
#: :func:`bnb_gemm_4bit`, below autocast, which cannot ask (``torch.is_autocast_enabled`` is False there).
_GEMM_4BIT_AUTOCAST: contextvars.ContextVar = contextvars.ContextVar("gemm_4bit_autocast", default=None)


def gemm_4bit_autocast(*args, **kwargs):
    """``bitsandbytes::gemm_4bit``'s ``AutocastCPU`` kernel, reached only while autocast is on: it notes autocast's
    dtype for :func:`bnb_gemm_4bit` and runs the op below autocast, its inputs as they are, as CUDA's fallthrough does
    (bitsandbytes registers no autocast kernel). Not :func:`helpers.engine.autocast.simulated_autocast`'s dtype: that
    is set in the step's forward only, and a checkpoint's recompute in backward runs under the autocast it restores
    (``recompute_fn``, ``torch/utils/checkpoint.py``)."""
    token = _GEMM_4BIT_AUTOCAST.set(torch.get_autocast_dtype("cpu"))
    try:
        with torch._C._ExcludeDispatchKeyGuard(NO_AUTOCAST):
            return torch.ops.bitsandbytes.gemm_4bit.default(*args, **kwargs)
    finally:
        _GEMM_4BIT_AUTOCAST.reset(token)


def bnb_int8_vectorwise_quant(A, threshold=0.0):
    """What ``torch.ops.bitsandbytes.int8_vectorwise_quant`` allocates on a CUDA GPU (bitsandbytes 0.50.2,
    ``backends/cuda/ops.py``; its fake kernel asks for a data-dependent size): LLM.int8()'s row-wise quantization of a
    float16 ``A`` (..., K), in that order: float32 row scales, int8 codes of ``A``'s shape; with a ``threshold`` (6.0),
    ``A.abs()`` in float16 (freed once compared), the bool outlier mask (held to the end), the 0-dim
    ``outliers.any()``, the outlier columns, and for more than one row the 0-dim int8 zero that
    ``out_row[:, outlier_cols] = 0`` puts on the device (a 512-byte block a moment), as on the stub driver.
    No column is assumed to hold an outlier (fake tensors have no values): the outlier columns are empty and the
    product's outlier part adds nothing, a lower bound; each outlier column would add its ``A`` column in 16 bits and
    its weight column dequantized (``backends/default/ops.py``, ``int8_mixed_scaled_mm``)."""
    if A.dtype != torch.float16:
        raise ValueError(f"A must be float16, got {A.dtype}")
    rows = A.numel() // A.shape[-1]
    row_stats = torch.empty(rows, dtype=torch.float32, device=A.device)
    out_row = torch.empty(A.shape, dtype=torch.int8, device=A.device)
    outlier_cols = None
    if threshold > 0.0:
        outliers = A.abs() >= threshold  # held to the return
        outliers.any()  # `if outliers.any():` reads a 0-dim bool tensor; assumed false
        outlier_cols = torch.empty(0, dtype=torch.int64, device=A.device)
    if rows > 1 and outlier_cols is not None:
        # `out_row[:, outlier_cols] = 0`: the value 0 on the device, freed once written
        zero = torch.empty((), dtype=torch.int8, device=A.device)
        del zero
    return out_row, row_stats, outlier_cols


def bnb_int8_linear_matmul(A, B) -> torch.Tensor:
    """What ``torch.ops.bitsandbytes.int8_linear_matmul`` allocates on a CUDA GPU (``backends/cuda/ops.py``):
    ``A @ B.T`` of int8 ``A`` (..., K) and ``B`` (N, K) into an int32 (..., N) result, by cuBLASLt (its workspace is
    not the caching allocator's). When K is not a multiple of 4, cuBLASLt cannot: the fallback holds ``A`` and ``B``
    in float32 and their float32 product, then an int32 copy of it, copied into the result."""
    out = torch.empty((*A.shape[:-1], B.shape[0]), dtype=torch.int32, device=A.device)
    if A.shape[-1] % 4:
        out.copy_(torch.matmul(A.float(), B.float().t()).to(torch.int32))
    return out


def bnb_int8_mm_dequant(A, row_stats, col_stats, dtype=None, bias=None) -> torch.Tensor:
    """What ``torch.ops.bitsandbytes.int8_mm_dequant`` allocates on a CUDA GPU (``backends/cuda/ops.py``): the int32
    product ``A`` dequantized by its kernel into float16 (the only output it writes), a bias not in float16 added in
    place, then cast to ``dtype`` (a second copy, the float16 one freed on return, when ``dtype`` is not float16)."""
    out = torch.empty_like(A, dtype=torch.float16)
    if bias is not None and bias.dtype != torch.float16:
        out.add_(bias)
    return out.to(dtype or torch.float16)


def bnb_int8_scaled_mm(A, B, row_stats, col_stats, bias=None, dtype=None) -> torch.Tensor:
    """``torch.ops.bitsandbytes.int8_scaled_mm`` on a CUDA GPU: its only kernel, ``backends/default/ops.py``'s, runs
    :func:`bnb_int8_linear_matmul`, then :func:`bnb_int8_mm_dequant` into ``dtype``, and frees the int32 product on
    return; the fake kernel allocates the result only."""
    out_i32 = bnb_int8_linear_matmul(A, B)
    return bnb_int8_mm_dequant(out_i32, row_stats, col_stats, dtype=dtype or torch.float16, bias=bias)


def bnb_int8_mixed_scaled_mm(A, CA, CB, SCA, SCB, outlier_cols=None, bias=None):
    """``torch.ops.bitsandbytes.int8_mixed_scaled_mm`` on a CUDA GPU (its only kernel, ``backends/default/ops.py``),
    with no outlier columns (the simulation's assumption, :func:`bnb_int8_vectorwise_quant`): an empty ``subA`` in
    ``A``'s dtype, and :func:`bnb_int8_scaled_mm` of the int8 codes into ``A``'s dtype."""
    if outlier_cols is not None and outlier_cols.numel():
        raise NotImplementedError("the simulation assumes no outlier columns (bnb_int8_vectorwise_quant)")
    subA = torch.empty(0, dtype=A.dtype, device=A.device)
    return bnb_int8_scaled_mm(CA, CB, SCA, SCB, bias=bias, dtype=A.dtype), subA


#: bitsandbytes' operators whose CUDA kernel allocates more than its fake kernel (or whose fake kernel asks for a
#: data-dependent size), and what it allocates.
BNB_CUDA = {"bitsandbytes::gemm_4bit": bnb_gemm_4bit, "bitsandbytes::int8_vectorwise_quant": bnb_int8_vectorwise_quant,
            "bitsandbytes::int8_linear_matmul": bnb_int8_linear_matmul,
            "bitsandbytes::int8_mm_dequant": bnb_int8_mm_dequant, "bitsandbytes::int8_scaled_mm": bnb_int8_scaled_mm,
            "bitsandbytes::int8_mixed_scaled_mm": bnb_int8_mixed_scaled_mm}
