"""What a CUDA GPU computes differently from the CPU, applied to the simulation (lesson 00).

The simulation runs PyTorch's CPU kernels on fake tensors; while :func:`cuda_rules` is active the CPU keeps what CUDA
would keep for backward: CUDA's autocast lists (:mod:`helpers.engine.autocast`), dropout's bool mask
(:func:`_dropout`), the attention kernel (:func:`attention_kernel`), fused RMSNorm, bitsandbytes' 4-bit product under
autocast (:mod:`helpers.engine.bnb_rules`); Adam's ``step`` counters stay on the host (:func:`host_side_steps`).
The step cannot run on fake ``cuda`` tensors: backward asks the CUDA runtime about device 0 (pytorch/pytorch#92627).
Fake CUDA tensors are the reference the tests compare these rules against, forward by forward.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense
from torch._subclasses.fake_tensor import FakeTensor

from ..allocator.rules import round_up
from .autocast import cpu_autocast_answers, cuda_autocast_policy, kernel_for, op_named
from .bnb_rules import gemm_4bit_autocast


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
    ``_scaled_dot_product_flash_attention_for_cpu``, which keeps what the GPU's flash kernel keeps. On a Hopper or
    Blackwell GPU with a cuDNN newer than 9.15 the pinned PyTorch runs cuDNN attention first (``priority_order`` in
    ``sdp_utils.cpp``), which keeps the same tensors for backward (lesson 06b names it in an H200's snapshot).
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


def cuda_allocation_order(func, args: tuple, out) -> list | None:
    """The results of ``func`` in the order its CUDA kernel allocates them, where that differs from the order it returns
    them (the fake and CPU kernels allocate in the returned order); ``None`` elsewhere.

    ``native_dropout`` in training (``0 <= p < 1``): ``dropout_cuda`` in ``aten/src/ATen/native/cuda/Dropout.cu`` makes
    the bool mask (``Tensor mask = at::empty_like(self, ...)``) before the output (``Tensor ret = at::empty_like(self)``)
    and returns ``(ret, mask)``; ``native_dropout_cuda``'s short-cuts (``train=False``, ``p == 1``) make the output
    first.  An H200's snapshot of lesson 02's dropout MLP shows the same (each 4 MiB mask allocated just before its
    16 MiB output).  Which cached block serves a request depends on this order: the caching allocator's best fit
    (:mod:`helpers.allocator.model`, rule 4) sees the mask's request first.
    """
    if func is not torch.ops.aten.native_dropout.default:
        return None
    train = args[2] if len(args) > 2 else None
    if train is False or args[1] == 1:
        return None
    return [out[1], out[0]]


#: Matrix products that hand their operands to cuBLAS as they are, and where the two matrices are among their arguments.
CUBLAS_OPERANDS = {torch.ops.aten.mm.default: (0, 1), torch.ops.aten.addmm.default: (1, 2)}


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
                op = op_named(name)
                library.impl(name, kernel_for(op, policy), "AutocastCPU")
            library.impl("dropout", _dropout, "CompositeImplicitAutograd")
            library.impl("scaled_dot_product_attention", _attention(attention), "CompositeImplicitAutograd")
            library.impl("rms_norm", _rms_norm, "CompositeImplicitAutograd")
            bnb.impl("gemm_4bit", gemm_4bit_autocast, "AutocastCPU")
        with cpu_autocast_answers():
            yield
    finally:
        library._destroy()
        bnb._destroy()


def attention_saved_bytes(kernel: str, batch: int, heads: int, seq: int, head_dim: int,
                          dtype: torch.dtype = torch.float16, kv_heads: int | None = None) -> int:
    """Bytes one ``scaled_dot_product_attention`` call keeps for backward, by kernel.

    From ``derivatives.yaml`` (q, k, v of shape ``(batch, heads, seq, head_dim)`` in ``dtype``; each storage rounded up
    to 512 bytes):

    * ``"flash"``: query, key, value, output, and a float32 log-sum-exp per row; the kernels' random state is left out
      (cuDNN attention's two 8-byte CUDA tensors, ``_cudnn_attention_forward`` in ``attention.cu``; flash's 16- and
      8-byte ones in 2.14.1's ``_meta_registrations.py``: 1 KiB of blocks on the GPU);
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
