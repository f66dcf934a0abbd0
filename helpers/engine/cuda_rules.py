"""What a CUDA GPU computes differently from the CPU, applied to the simulation (lesson 00).

The simulation runs PyTorch's CPU kernels on fake tensors; while :func:`cuda_rules` is active the CPU keeps what CUDA
would keep for backward: CUDA's autocast lists (:data:`CUDA_AUTOCAST`), dropout's bool mask (:func:`_dropout`), the
attention kernel (:func:`attention_kernel`), fused RMSNorm; Adam's ``step`` counters stay on the host
(:func:`host_side_steps`). The step cannot run on fake ``cuda`` tensors: backward asks the CUDA runtime about device 0
(pytorch/pytorch#92627). Fake CUDA tensors are the reference the tests compare these rules against, forward by forward.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import warnings

import torch
from torch._C import DispatchKey, DispatchKeySet
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense
from torch._subclasses.fake_tensor import FakeTensor

from ..allocator.rules import allocation_size, round_up
from ..gpus import CUDA_OVERHEAD_BYTES, headroom, oom_message, simulated_card
from .counting import StorageTracker
from .workspaces import KernelMemory, run_with_kernel_memory

#: CUDA's autocast policies in the pinned PyTorch, by operator overload: the lists of ``aten/src/ATen/autocast_mode.h``
#: (``AT_FORALL_LOWER_PRECISION_FP``, ``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``,
#: ``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE``, ``AT_FORALL_PROMOTE``) and the registrations of ``autocast_mode.cpp``
#: (cuDNN convolutions, the banned ``binary_cross_entropy``). A test checks it against the dispatcher.
CUDA_AUTOCAST = {
    "lower_precision_fp": (
        "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
        "conv_transpose2d.input", "conv_transpose3d.input", "convolution", "prelu", "addmm", "addmv", "addr",
        "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul",
        "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell",
        "rnn_tanh_cell", "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
        "cudnn_convolution", "cudnn_convolution_transpose"),
    "fp32": (
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
        "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
        "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
        "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
        "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
        "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
        "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
        "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
        "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
        "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa"),
    "fp32_set_opt_dtype": (
        "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum", "linalg_vector_norm",
        "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum", "sum.dim_IntList"),
    "fp32_append_dtype": ("norm.Scalar", "norm.ScalarOpt_dim"),
    "promote": ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put",
                "tensordot", "scatter_add"),
    "banned": ("binary_cross_entropy",),
}

#: Operations CUDA's autocast registers that :func:`cuda_rules` leaves to the CPU, with the reason.
NOT_EMULATED = {
    "_cudnn_rnn": "a cuDNN kernel: never runs on the CPU",
    "linalg_matrix_sqrth": "registered outside the header's lists, policy not documented there",
}

#: Operations both devices run in 16 bits: the CPU's own kernel is kept (with autocast's cache of weight casts). From
#: the CPU list of ``autocast_mode.cpp``; a test checks that these come out 16-bit.
SAME_ON_BOTH = frozenset({
    "conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "addbmm", "linear",
    "_convolution.deprecated", "matmul", "conv_tbc", "conv_transpose1d", "conv_transpose2d.input",
    "conv_transpose3d.input", "prelu", "scaled_dot_product_attention"})

_NO_AUTOCAST = DispatchKeySet(DispatchKey.AutocastCPU)


def _eligible(t) -> bool:
    """Autocast casts floating-point tensors other than float64 (``is_eligible`` in autocast_mode.h)."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64


def _cast(value, dtype: torch.dtype):
    if _eligible(value):
        return value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _cast_all(args: tuple, kwargs: dict, dtype: torch.dtype) -> tuple[tuple, dict]:
    return _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()}


def _tensors(values):
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


def _kernel(op, policy: str):
    """An ``AutocastCPU`` kernel that applies CUDA's ``policy`` to ``op``, then runs ``op`` below autocast."""
    schema = op._schema
    names = [a.name for a in schema.arguments]

    def run(args, kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST):
            return op(*args, **kwargs)

    def first_eligible(args, kwargs) -> bool:
        first = next(_tensors((*args, *kwargs.values())), None)
        return first is not None and _eligible(first)

    if policy == "passthrough":
        if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
            # On a GPU a composite (cross_entropy_loss, ...) has no autocast kernel: its parts meet autocast one by
            # one (log_softmax in float32). Split it here, autocast still on.
            def decompose(*args, **kwargs):
                out = op.decompose(*args, **kwargs)
                return run(args, kwargs) if out is NotImplemented else out
            return decompose
        return lambda *args, **kwargs: run(args, kwargs)
    if policy == "banned":
        def banned(*args, **kwargs):
            raise RuntimeError("torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
                               "autocast (on a GPU); use binary_cross_entropy_with_logits or BCEWithLogitsLoss")
        return banned
    if policy == "lower_precision_fp":
        return lambda *args, **kwargs: run(*_cast_all(args, kwargs, torch.get_autocast_dtype("cpu")))
    if policy == "fp32":
        return lambda *args, **kwargs: run(*_cast_all(args, kwargs, torch.float32))
    if policy == "promote":
        def promote(*args, **kwargs):
            widest = torch.get_autocast_dtype("cpu")
            for t in _tensors((*args, *kwargs.values())):
                if _eligible(t):
                    widest = torch.promote_types(widest, t.dtype)
            return run(*_cast_all(args, kwargs, widest))
        return promote
    if policy == "fp32_set_opt_dtype":
        where = names.index("dtype")

        def set_dtype(*args, **kwargs):
            if first_eligible(args, kwargs):
                if len(args) > where:
                    if args[where] is None:
                        args = (*args[:where], torch.float32, *args[where + 1:])
                elif kwargs.get("dtype") is None:
                    kwargs = {**kwargs, "dtype": torch.float32}
            return run(args, kwargs)
        return set_dtype
    if policy == "fp32_append_dtype":
        target = {"norm.Scalar": torch.ops.aten.norm.ScalarOpt_dtype,
                  "norm.ScalarOpt_dim": torch.ops.aten.norm.ScalarOpt_dim_dtype}[_overload_name(op)]

        def append_dtype(*args, **kwargs):
            if not first_eligible(args, kwargs):
                return run(args, kwargs)
            full = dict(zip(names, args), **kwargs)
            with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST):
                if "dim" in full:
                    return target(full["self"], full.get("p"), full["dim"], full.get("keepdim", False),
                                  dtype=torch.float32)
                return target(full["self"], full.get("p", 2), dtype=torch.float32)
        return append_dtype
    raise ValueError(f"unknown autocast policy {policy!r}")


def _overload_name(op) -> str:
    name = op._schema.name.removeprefix("aten::")
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def _op(name: str):
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def cuda_autocast_policy() -> dict[str, str]:
    """The ``AutocastCPU`` policy :func:`cuda_rules` installs, by operator overload: CUDA's for every op CUDA's
    autocast lists but :data:`SAME_ON_BOTH`; ``"passthrough"`` for ops only the CPU lists (as on a GPU)."""
    policy = {name: kind for kind, names in CUDA_AUTOCAST.items() for name in names if name not in SAME_ON_BOTH}
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCPU"):
            short = name.removeprefix("aten::")
            if short not in SAME_ON_BOTH and short not in policy and short.split(".")[0] not in NOT_EMULATED:
                policy[short] = "passthrough"
    return policy


def _dropout(input: torch.Tensor, p: float, train: bool) -> torch.Tensor:
    """``aten::dropout`` as on a GPU: ``native_dropout`` (a bool mask) when it is acceptable."""
    if train and 0 < p < 1 and input.numel() > 0:
        return torch.ops.aten.native_dropout(input, p, train)[0]
    if p == 0 or not train or input.numel() == 0:
        return input
    return input * torch.zeros((), dtype=input.dtype, device=input.device)  # p == 1


class _FusedRMSNorm(torch.autograd.Function):
    """RMSNorm saving what the GPU's fused kernel saves (``_fused_rms_norm`` in ``derivatives.yaml``): the input, the
    weight and the inverse RMS per row (float32 for 16-bit inputs)."""

    @staticmethod
    def forward(ctx, input, weight, dims, eps):
        with torch.no_grad():
            rstd = torch.rsqrt(input.to(torch.promote_types(input.dtype, torch.float32)).pow(2).mean(dims, keepdim=True) + eps)
            out = (input * rstd).to(input.dtype)
            if weight is not None:
                out = out * weight
        ctx.dims = dims
        ctx.save_for_backward(input, weight, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        input, weight, rstd = ctx.saved_tensors
        normed = input * rstd
        g = grad * weight if weight is not None else grad
        n = math.prod(input.shape[d] for d in ctx.dims)
        grad_input = rstd * (g - normed * (g * normed).sum(ctx.dims, keepdim=True) / n)
        grad_weight = None
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = (grad * normed).sum(tuple(range(input.dim() - weight.dim())))
        return grad_input.to(input.dtype), grad_weight, None, None


def _rms_norm(input, normalized_shape, weight=None, eps=None):
    """``aten::rms_norm`` as on a GPU: :class:`_FusedRMSNorm` (the CPU's composite also keeps the normalised input)."""
    if eps is None:
        eps = torch.finfo(input.dtype).eps
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    return _FusedRMSNorm.apply(input, weight, dims, eps)


def attention_kernel(kernel: str, masked: bool = False) -> str:
    """The kernel one simulated ``scaled_dot_product_attention`` call runs: ``"fused"`` or ``"math"`` (only here).

    ``"auto"``, ``"flash"`` and ``"efficient"`` run a fused kernel (:func:`attention_saved_bytes`). Grouped-query
    attention (``enable_gqa=True``) is fused too, as in the pinned PyTorch (:data:`helpers.versions.TORCH`) on an NVIDIA
    GPU: ``can_use_flash_attention`` and ``can_use_mem_efficient_attention``
    (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``) accept it and keep key and value un-expanded. An
    explicit ``attn_mask`` takes the math kernel here: an upper bound (on a GPU memory-efficient attention accepts it).
    Raises ``ValueError`` for a kernel not in :data:`helpers.config.ATTENTION`.
    """
    if kernel not in ("auto", "flash", "efficient", "math"):
        raise ValueError(f"unknown attention kernel {kernel!r}; use auto, flash, efficient or math")
    return "math" if kernel == "math" or masked else "fused"


def _attention(kernel: str):
    """``scaled_dot_product_attention`` running the chosen kernel (:func:`attention_kernel`).

    The memory-efficient kernel runs CUDA's own ``_scaled_dot_product_efficient_attention``, whose fake implementation
    needs no GPU (``attention.cu``, ``derivatives.yaml``). The other fused kernels, and all on real tensors, run as
    ``_scaled_dot_product_flash_attention_for_cpu``, which keeps what the GPU's flash kernel keeps.
    """
    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False):
        if attention_kernel(kernel, masked=attn_mask is not None) == "math":
            return torch.ops.aten._scaled_dot_product_attention_math(
                query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]
        efficient = kernel == "efficient" or (kernel == "auto" and query.dtype == torch.float32)
        if efficient and isinstance(query, FakeTensor):
            grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, value, None, grad, dropout_p, is_causal, scale=scale)[0]
        return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, dropout_p, is_causal, scale=scale)[0]
    return sdpa


#: The 16-bit type of the simulated GPU's autocast while :func:`simulated_autocast` is active (None outside it).
_AUTOCAST_DTYPE: contextvars.ContextVar = contextvars.ContextVar("simulated_autocast", default=None)


@contextlib.contextmanager
def simulated_autocast(dtype: torch.dtype):
    """``torch.autocast("cpu", dtype=dtype)`` standing for CUDA's, which also tells the tracker autocast is on (under
    ``torch.inference_mode()`` :class:`SimulatedTracker` splits composites and switches autocast on for their parts)."""
    token = _AUTOCAST_DTYPE.set(dtype)
    try:
        with torch.autocast("cpu", dtype=dtype):
            yield
    finally:
        _AUTOCAST_DTYPE.reset(token)


#: Matrix products that hand their operands to cuBLAS as they are, and where the two matrices are among their arguments.
_CUBLAS_OPERANDS = {torch.ops.aten.mm.default: (0, 1), torch.ops.aten.addmm.default: (1, 2)}


def cublas_operand_copy(matrix: torch.Tensor) -> int:
    """Bytes of the copy a GPU makes of a 2-D ``mm``/``addmm`` operand that cuBLAS cannot read in place.

    cuBLAS reads a matrix with one dimension dense (stride 1) and the other's stride at least that dimension's size;
    PyTorch clones any other operand for the product's duration (``prepare_matrix_for_cublas``,
    ``ATen/native/cuda/cuBlasCommonArgs.h``), e.g. the 0-stride gradient of ``logits.sum()``. The CPU does not.

    Returns:
        0 for a matrix cuBLAS reads in place, else its bytes rounded up to 512.
    """
    if matrix.dim() != 2 or is_non_overlapping_and_dense(matrix):
        return 0
    (rows, cols), (down, across) = matrix.shape, matrix.stride()
    if (down == 1 and across >= max(1, rows)) or (across == 1 and down >= max(1, cols)):
        return 0
    return round_up(matrix.numel() * matrix.element_size())


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
    called (:func:`_gemm_4bit_autocast`): the step's forward, and a checkpoint's recompute in backward, which
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
    with _autocast_again(_GEMM_4BIT_AUTOCAST.get()):  # excluded in SimulatedTracker; CUDA's kernel runs under it
        return torch.nn.functional.linear(A, weight, bias)


#: Autocast's dtype where ``bitsandbytes::gemm_4bit`` was called under autocast (None elsewhere), for
#: :func:`bnb_gemm_4bit`, below autocast, which cannot ask (``torch.is_autocast_enabled`` is False there).
_GEMM_4BIT_AUTOCAST: contextvars.ContextVar = contextvars.ContextVar("gemm_4bit_autocast", default=None)


def _gemm_4bit_autocast(*args, **kwargs):
    """``bitsandbytes::gemm_4bit``'s ``AutocastCPU`` kernel, reached only while autocast is on: it notes autocast's
    dtype for :func:`bnb_gemm_4bit` and runs the op below autocast, its inputs as they are, as CUDA's fallthrough does
    (bitsandbytes registers no autocast kernel). Not :data:`_AUTOCAST_DTYPE`: that is set in the step's forward only,
    and a checkpoint's recompute in backward runs under the autocast it restores (``recompute_fn``,
    ``torch/utils/checkpoint.py``)."""
    token = _GEMM_4BIT_AUTOCAST.set(torch.get_autocast_dtype("cpu"))
    try:
        with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST):
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


class SimulatedTracker(StorageTracker):
    """The :class:`helpers.engine.counting.StorageTracker` of the simulated GPU.

    It adds a **capacity**: a storage that would take the tensor bytes above :func:`helpers.gpus.headroom` raises
    ``torch.OutOfMemoryError`` with a CUDA-shaped :func:`helpers.gpus.oom_message` (``requested`` and ``allocated``
    attributes, bytes); **composites under inference mode** (``cross_entropy``, ``to``), which autograd does not split
    there, are split here, with autocast again if it was on, as a GPU's dispatcher does; and cuBLAS's operand copies
    (:func:`cublas_operand_copy`). ``capacity``: simulate a GPU of this many bytes (``None``: no limit).  What kernels
    allocate for themselves, by ``workspaces`` (:data:`helpers.config.WORKSPACES`) on the card of ``capacity``
    (:func:`helpers.gpus.simulated_card`): :attr:`kernels`, a :class:`helpers.engine.workspaces.KernelMemory`.
    """

    def __init__(self, capacity: int | None = None, workspaces: str = "none"):
        super().__init__(None)
        self.capacity = capacity
        self._room = None if capacity is None else headroom(capacity)
        self.kernels = KernelMemory(workspaces, simulated_card(capacity))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (not self.paused and torch.is_inference_mode_enabled() and func.namespace == "aten"
                and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")):
            with self, _autocast_again():
                out = func.decompose(*args, **(kwargs or {}))
            if out is not NotImplemented:
                return out
        if not self.paused and func.namespace == "bitsandbytes" and (cuda := BNB_CUDA.get(func.name())):
            with self:
                return cuda(*args, **(kwargs or {}))
        if self.paused:
            out = super().__torch_dispatch__(func, types, args, kwargs)
        else:
            dispatch = super().__torch_dispatch__
            out = run_with_kernel_memory(self.kernels, self, lambda f, a, k: dispatch(f, types, a, k), func, args, kwargs)
        if func in _CUBLAS_OPERANDS and not self.paused:  # after the result, as cuBLAS's caller allocates them
            copies = [self.transient(n, args[i].dtype, args[i].shape) for i in _CUBLAS_OPERANDS[func]
                      if (n := cublas_operand_copy(args[i]))]
            for serial in copies:
                self.release(serial)
        return out

    def before_alloc(self, nbytes: int) -> None:
        if self._room is not None and self.allocated + nbytes > self._room:
            in_use = self.allocated + CUDA_OVERHEAD_BYTES
            error = torch.OutOfMemoryError(
                oom_message(allocation_size(nbytes), self.capacity, in_use, self.allocated, self.allocated))
            error.requested, error.allocated = allocation_size(nbytes), self.allocated  # for DoesNotFit
            raise error


def _autocast_again(dtype=...):
    """Inside ``__torch_dispatch__``, where PyTorch has excluded autocast: include it again, in ``dtype`` (by default
    :func:`simulated_autocast`'s; None: none)."""
    if dtype is ...:
        dtype = _AUTOCAST_DTYPE.get()
    if dtype is None:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    excluded = torch._C._dispatch_tls_local_exclude_set().remove(torch._C.DispatchKey.AutocastCPU)
    stack.enter_context(torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), excluded))
    stack.enter_context(torch.autocast("cpu", dtype=dtype))
    return stack


@contextlib.contextmanager
def cuda_rules(attention: str = "auto"):
    """While active, CPU operations save what CUDA's would (the module's docstring); ``attention``: the kernel
    (:func:`attention_kernel`). ``torch.library`` kernels, removed on exit."""
    library = torch.library.Library("aten", "IMPL")
    bnb = torch.library.Library("bitsandbytes", "IMPL")  # taken before bitsandbytes defines the op, if it is not yet
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
            for name, policy in cuda_autocast_policy().items():
                op = _op(name)
                library.impl(name, _kernel(op, policy), "AutocastCPU")
            library.impl("dropout", _dropout, "CompositeImplicitAutograd")
            library.impl("scaled_dot_product_attention", _attention(attention), "CompositeImplicitAutograd")
            library.impl("rms_norm", _rms_norm, "CompositeImplicitAutograd")
            bnb.impl("gemm_4bit", _gemm_4bit_autocast, "AutocastCPU")
        torch.is_autocast_enabled = _is_autocast_enabled
        yield
    finally:
        torch.is_autocast_enabled = _IS_AUTOCAST_ENABLED
        library._destroy()
        bnb._destroy()


_IS_AUTOCAST_ENABLED = torch.is_autocast_enabled


def _is_autocast_enabled(device_type: str | None = None) -> bool:
    """``torch.is_autocast_enabled``, where a question without a device, which asks about CUDA (as peft's 4-bit LoRA
    layers ask, ``tuners/lora/bnb.py``), is answered by the CPU's autocast, which stands for CUDA's here."""
    return _IS_AUTOCAST_ENABLED("cpu" if device_type is None else device_type)


def attention_saved_bytes(kernel: str, batch: int, heads: int, seq: int, head_dim: int,
                          dtype: torch.dtype = torch.float16, kv_heads: int | None = None) -> int:
    """Bytes one ``scaled_dot_product_attention`` call keeps for backward, by kernel.

    From ``derivatives.yaml`` (q, k, v of shape ``(batch, heads, seq, head_dim)`` in ``dtype``; each storage rounded up
    to 512 bytes):

    * ``"flash"``: query, key, value, output, and a float32 log-sum-exp per row (its 1 KiB random state left out);
    * ``"efficient"``: the same, the log-sum-exp padded to a multiple of 32 rows;
    * ``"math"`` (``_scaled_dot_product_attention_math``): the scaled query and key, the softmax
      ``(batch, heads, seq, seq)`` and the value, all float32 for 16-bit inputs
      (``aten/src/ATen/native/transformers/attention.cpp``).

    With ``kv_heads`` (grouped-query) the fused kernels keep key and value with ``kv_heads`` heads; the math kernel
    repeats them to ``heads`` first.
    Raises ``ValueError`` for another kernel, or ``kv_heads`` that does not divide ``heads``.
    """
    if kv_heads is not None and (kv_heads < 1 or heads % kv_heads):
        raise ValueError(f"kv_heads must divide heads ({heads}), got {kv_heads}")
    size = dtype.itemsize
    kv = heads if kv_heads is None else kv_heads
    qkv = round_up(batch * heads * seq * head_dim * size) + 2 * round_up(batch * kv * seq * head_dim * size)
    out = round_up(batch * heads * seq * head_dim * size)
    if kernel == "flash":
        return qkv + out + round_up(batch * heads * seq * 4)
    if kernel == "efficient":
        return qkv + out + round_up(batch * heads * math.ceil(seq / 32) * 32 * 4)
    if kernel == "math":
        size = max(size, 4)  # upcast to float32
        return 3 * round_up(batch * heads * seq * head_dim * size) + round_up(batch * heads * seq * seq * size)
    raise ValueError(f"unknown attention kernel {kernel!r}; use flash, efficient or math")


def host_side_steps(optimizer: torch.optim.Optimizer, tracker) -> torch.optim.Optimizer:
    """Count an Adam-family optimizer's ``step`` counters as host memory, as on a GPU; changed in place and returned.

    ``torch.optim.Adam``/``AdamW`` make each ``step`` with ``torch.tensor(0.0)``, a host tensor, unless ``fused`` or
    ``capturable`` (``_init_group``, ``torch/optim/adam.py``). Other optimizers are returned as they are.
    """
    if not isinstance(optimizer, torch.optim.Adam) or any(
            g.get("fused") or g.get("capturable") for g in optimizer.param_groups):
        return optimizer
    original = optimizer._init_group

    def init_group(group, *args, **kwargs):
        new = [p for p in group["params"] if p.grad is not None and not optimizer.state[p]]
        tracker.paused = True
        try:
            result = original(group, *args, **kwargs)
        finally:
            tracker.paused = False
        for p in new:
            for key, value in optimizer.state[p].items():
                if key != "step" and isinstance(value, torch.Tensor):
                    tracker.track(value)
        return result

    optimizer._init_group = init_group
    return optimizer


class SimulatedGradScaler(torch.amp.GradScaler):
    """PyTorch's ``GradScaler`` on the simulated GPU: its tensors as the real one makes them; every step is taken
    (fake tensors have no values: ``_maybe_opt_step`` would read one with ``.item()``)."""

    def __init__(self):
        super().__init__("cpu")

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        return optimizer.step(*args, **kwargs)
