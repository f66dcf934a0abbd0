"""What a CUDA GPU computes differently from the CPU, applied to the simulation.

Introduced in lesson 00 (what "simulated" covers).  The simulation runs
PyTorch's CPU kernels on fake tensors (:mod:`helpers.engine.backends`).  Where a
CUDA GPU would keep other tensors for backward, :func:`cuda_rules` makes the
CPU do what CUDA does, for as long as a simulated measurement lasts:

* **autocast**: each device has its own lists of which operations run in 16
  bits, which in float32, and which in the widest input type
  (``aten/src/ATen/autocast_mode.h`` and ``autocast_mode.cpp``).  Inside
  :func:`cuda_rules` the CPU's autocast follows :data:`CUDA_AUTOCAST`: a Python
  kernel for the ``AutocastCPU`` dispatch key (``torch.library``) applies the
  CUDA policy to every operation whose two policies differ;
* **dropout**: ``torch.nn.functional.dropout`` calls ``native_dropout`` on a
  GPU (``aten/src/ATen/native/Dropout.cpp``, ``is_fused_kernel_acceptable``),
  which keeps a bool mask, where the CPU multiplies by a float mask;
* **attention**: ``scaled_dot_product_attention`` runs the kernel the
  simulation is told to (:data:`helpers.config.ATTENTION`): the fused kernels
  (flash, memory-efficient) keep the inputs, the output and a log-sum-exp
  (``tools/autograd/derivatives.yaml``), the math kernel keeps the full
  sequence x sequence scores; :func:`attention_saved_bytes` derives each.

Two places need no rule here: Adam's ``step`` counters live in host memory on a
GPU unless the optimizer is ``fused`` or ``capturable`` (``torch/optim/adam.py``,
``_init_group``), which :func:`host_side_steps` tells the tracker; and float16 training uses a
``GradScaler``, whose tensors :class:`SimulatedGradScaler` creates as the real
one does.

Why not simply run the step on fake ``cuda`` tensors?  A forward pass works
without a GPU, but backward does not: the autograd engine asks the CUDA runtime
about device 0 (``hasPrimaryContext expects a valid device index``;
pytorch/pytorch#92627).  So fake CUDA tensors serve as the *reference* the tests
compare these rules against, forward pass by forward pass.
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
from ..gpus import CUDA_OVERHEAD_BYTES, headroom, oom_message
from .counting import StorageTracker

#: CUDA's autocast policies in torch 2.14.1, by operator overload: the lists of
#: ``aten/src/ATen/autocast_mode.h`` (``AT_FORALL_LOWER_PRECISION_FP``,
#: ``AT_FORALL_FP32``, ``AT_FORALL_FP32_SET_OPT_DTYPE``,
#: ``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE``, ``AT_FORALL_PROMOTE``) and the
#: registrations of ``autocast_mode.cpp`` (cuDNN convolutions, the banned
#: ``binary_cross_entropy``).  A test checks it against the dispatcher.
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

#: Operations CUDA's autocast registers that :func:`cuda_rules` leaves to the
#: CPU, with the reason.
NOT_EMULATED = {
    "_cudnn_rnn": "a cuDNN kernel: never runs on the CPU",
    "linalg_matrix_sqrth": "registered outside the header's lists, policy not documented there",
}

#: Operations both devices run in 16 bits: the CPU's own C++ kernel is kept
#: (with autocast's cache of weight casts).  From the CPU list of
#: ``autocast_mode.cpp``; a test checks that these really come out 16-bit.
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
            # On a GPU a composite (cross_entropy_loss, ...) has no autocast kernel:
            # it falls through, and the operations it is made of meet autocast one
            # by one (log_softmax in float32).  Split it here, autocast still on.
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
    """The ``AutocastCPU`` policy :func:`cuda_rules` installs, by operator overload.

    Every operation CUDA's autocast lists gets CUDA's policy, except those the
    CPU already runs the same way (:data:`SAME_ON_BOTH`); every operation only
    the CPU's autocast lists gets ``"passthrough"`` (runs in its input's type,
    as on a GPU).
    """
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
    """RMSNorm with the GPU's fused kernel's saved tensors: the input, the weight and
    the inverse RMS per row, float32 for 16-bit inputs (``_fused_rms_norm`` in
    ``derivatives.yaml``).  Its gradients are RMSNorm's, computed in Python."""

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
    """``aten::rms_norm`` as on a GPU: the fused kernel (:class:`_FusedRMSNorm`), where
    the CPU's composite also keeps the normalised input."""
    if eps is None:
        eps = torch.finfo(input.dtype).eps
    dims = tuple(range(input.dim() - len(normalized_shape), input.dim()))
    return _FusedRMSNorm.apply(input, weight, dims, eps)


def attention_kernel(kernel: str, masked: bool = False) -> str:
    """The kernel one simulated ``scaled_dot_product_attention`` call runs: ``"fused"`` or ``"math"``.

    The one place the simulation decides it.  ``kernel`` is the option
    (:data:`helpers.config.ATTENTION`); ``"auto"``, ``"flash"`` and
    ``"efficient"`` run a fused kernel, which keeps query, key, value, output
    and a float32 log-sum-exp (see :func:`attention_saved_bytes`).

    Grouped-query attention (``enable_gqa=True``, fewer key/value heads than
    query heads) takes the fused kernel too, as in PyTorch 2.14.1 on an NVIDIA
    GPU: ``can_use_flash_attention`` and ``can_use_mem_efficient_attention``
    (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``) both check the
    dense inputs with ``check_batch_size_and_num_heads_dense<supports_gqa=true>``
    (``sdp_utils_cpp.h``: query heads a multiple of the key/value heads), so
    16-bit inputs run flash (or cuDNN attention, first on Hopper and Blackwell
    with a recent cuDNN) and float32 inputs, which flash refuses, run the
    memory-efficient kernel (on sm80 and newer); neither falls back to math.
    Both take the key and value un-expanded, and keep them so
    (``_scaled_dot_product_efficient_backward``'s meta function makes the key's
    gradient with the key's own head count).  Only ROCm's memory-efficient
    kernel lacks GQA, which the simulation does not model.

    An explicit ``attn_mask`` takes the math kernel here, which keeps the
    scores: an upper bound (on a GPU flash refuses a mask, memory-efficient
    attention accepts one).

    Raises:
        ValueError: for a kernel not in :data:`helpers.config.ATTENTION`.
    """
    if kernel not in ("auto", "flash", "efficient", "math"):
        raise ValueError(f"unknown attention kernel {kernel!r}; use auto, flash, efficient or math")
    return "math" if kernel == "math" or masked else "fused"


def _attention(kernel: str):
    """``scaled_dot_product_attention`` running the chosen kernel (:func:`attention_kernel`).

    The memory-efficient kernel (``"efficient"``, and ``"auto"`` for float32
    inputs) runs CUDA's own operator, ``_scaled_dot_product_efficient_attention``,
    whose fake-tensor implementation needs no GPU: its output is laid out
    ``(batch, seq, heads, head_dim)`` in memory, whatever the query's layout,
    its log-sum-exp is padded to a multiple of 32 rows, and its random-number
    seed and offset are two int64 scalars on the device, all kept for backward
    (``attention.cu``, ``derivatives.yaml``).  Checked against PyTorch's CUDA
    dispatch on the stub driver (``tests/test_whole_step_reference.py``): with
    the CPU's flash kernel instead, a model that makes the output contiguous
    in another layout (torchvision's ``MultiheadAttention``: ViT-B/16) copied
    nothing where a GPU keeps a copy, 3.8% of its float32 step.  The other
    fused kernels, and every kernel on real (not fake) tensors, which have no
    CUDA kernel, run as the CPU's flash kernel
    (``_scaled_dot_product_flash_attention_for_cpu``), which keeps what the
    GPU's flash kernel does; with ``enable_gqa`` both take the key and value
    un-expanded, as the GPU's flash and memory-efficient kernels do.
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


#: The 16-bit type of the simulated GPU's autocast while
#: :func:`simulated_autocast` is active (None outside it).
_AUTOCAST_DTYPE: contextvars.ContextVar = contextvars.ContextVar("simulated_autocast", default=None)


@contextlib.contextmanager
def simulated_autocast(dtype: torch.dtype):
    """``torch.autocast`` on the CPU's fake tensors, standing for CUDA's.

    The same as ``torch.autocast("cpu", dtype=dtype)``, and it tells the
    storage tracker that autocast is on: under ``torch.inference_mode()`` the
    tracker splits composite operations itself (see :class:`SimulatedTracker`),
    where PyTorch has switched autocast off, and must switch it on again for
    their parts, as a GPU's dispatcher does (a composite such as
    ``cross_entropy_loss`` has no autocast kernel: its ``nll_loss`` is what
    autocast casts to float32).
    """
    token = _AUTOCAST_DTYPE.set(dtype)
    try:
        with torch.autocast("cpu", dtype=dtype):
            yield
    finally:
        _AUTOCAST_DTYPE.reset(token)


#: Matrix products that hand their operands to cuBLAS as they are, and where
#: the two matrices are among their arguments.
_CUBLAS_OPERANDS = {torch.ops.aten.mm.default: (0, 1), torch.ops.aten.addmm.default: (1, 2)}


def cublas_operand_copy(matrix: torch.Tensor) -> int:
    """Bytes of the copy a GPU makes of a 2-D operand of ``mm``/``addmm`` that cuBLAS cannot read in place.

    cuBLAS reads a matrix with one of its two dimensions dense (stride 1) and
    the other's stride at least that dimension's size; PyTorch 2.14.1 clones
    any other operand to a contiguous matrix for as long as the product runs
    (``prepare_matrix_for_cublas`` in ``ATen/native/cuda/cuBlasCommonArgs.h``,
    which the wheel ships).  The usual case is a gradient expanded from a
    scalar: the backward of ``logits.sum()`` has strides of 0, and the layer
    that made the logits multiplies it twice (for its input's and its weight's
    gradients), each time through a full copy.  The CPU's kernels read such
    a matrix in place, so the simulation adds it (:class:`SimulatedTracker`).

    Returns:
        0 for a matrix cuBLAS reads in place, else its bytes rounded as the
        caching allocator rounds them (512).
    """
    if matrix.dim() != 2 or is_non_overlapping_and_dense(matrix):
        return 0
    (rows, cols), (down, across) = matrix.shape, matrix.stride()
    if (down == 1 and across >= max(1, rows)) or (across == 1 and down >= max(1, cols)):
        return 0
    return round_up(matrix.numel() * matrix.element_size())


class SimulatedTracker(StorageTracker):
    """The :class:`helpers.engine.counting.StorageTracker` of the simulated GPU.

    It adds two things the core leaves out:

    * **a capacity**: a new storage that would take the tensor bytes above
      :func:`helpers.gpus.headroom` raises ``torch.OutOfMemoryError`` with a
      CUDA-shaped :func:`helpers.gpus.oom_message`, whose ``requested`` and
      ``allocated`` attributes give the bytes;
    * **composites under inference mode**: under ``torch.inference_mode()`` the
      autograd layer, which normally splits a composite operation
      (``cross_entropy``, ``to``, ...) into the operations it is made of, is
      skipped, so the composite would arrive whole and hide its intermediate
      tensors: it is split here, with autocast on again if it was
      (:func:`simulated_autocast`), as a GPU's dispatcher does.

    Args:
        capacity: simulate a GPU of this many bytes (``None``: no limit).
    """

    def __init__(self, capacity: int | None = None):
        super().__init__(None)
        self.capacity = capacity
        self._room = None if capacity is None else headroom(capacity)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (not self.paused and torch.is_inference_mode_enabled() and func.namespace == "aten"
                and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")):
            with self, _autocast_again():
                out = func.decompose(*args, **(kwargs or {}))
            if out is not NotImplemented:
                return out
        out = super().__torch_dispatch__(func, types, args, kwargs)
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



def _autocast_again():
    """Inside ``__torch_dispatch__``, where PyTorch has excluded autocast: include it again."""
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
    """While active, CPU operations save what CUDA's would (see the module's docstring).

    Registers Python kernels with ``torch.library`` for the ``AutocastCPU``
    key (:func:`cuda_autocast_policy`) and for ``dropout`` and
    ``scaled_dot_product_attention``; they are removed on exit, and the CPU
    behaves as before.

    Args:
        attention: ``"auto"``, ``"flash"`` and ``"efficient"`` run a fused
            kernel (no sequence x sequence scores kept), grouped-query
            attention included; ``"math"`` the math kernel.  A mask always
            takes the math kernel here (:func:`attention_kernel`).
    """
    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel"
            for name, policy in cuda_autocast_policy().items():
                op = _op(name)
                library.impl(name, _kernel(op, policy), "AutocastCPU")
            library.impl("dropout", _dropout, "CompositeImplicitAutograd")
            library.impl("scaled_dot_product_attention", _attention(attention), "CompositeImplicitAutograd")
            library.impl("rms_norm", _rms_norm, "CompositeImplicitAutograd")
        yield
    finally:
        library._destroy()


def attention_saved_bytes(kernel: str, batch: int, heads: int, seq: int, head_dim: int,
                          dtype: torch.dtype = torch.float16, kv_heads: int | None = None) -> int:
    """Bytes one ``scaled_dot_product_attention`` call keeps for backward, by kernel.

    From the ``derivatives.yaml`` entries of the three kernels (q, k, v of
    shape ``(batch, heads, seq, head_dim)`` in ``dtype``; each storage rounded
    up to 512 bytes):

    * ``"flash"`` (``_scaled_dot_product_flash_attention``): query, key,
      value, output, and a float32 log-sum-exp per row ``(batch, heads, seq)``
      (its random-number state, two 8-byte scalars on the device, 1 KiB
      after rounding, is left out);
    * ``"efficient"`` (``_scaled_dot_product_efficient_attention``): the same,
      its log-sum-exp padded to a multiple of 32 rows (its seed and offset,
      1 KiB, left out here too; the simulation keeps them, as CUDA does);
    * ``"math"`` (``_scaled_dot_product_attention_math``, a composite of
      matmuls and softmax): the scaled query and key (for the scores'
      backward), the softmax output ``(batch, heads, seq, seq)`` (also the
      second matmul's left operand), and the value.  For 16-bit inputs it
      computes in float32 ("keep query, key, value in high precision for
      accuracy" in ``aten/src/ATen/native/transformers/attention.cpp``), so
      all four are float32.

    With grouped-query attention (``kv_heads`` key/value heads shared by the
    ``heads`` query heads, ``enable_gqa=True``) the fused kernels keep the key
    and value with their ``kv_heads`` heads (:func:`attention_kernel`); the
    math kernel repeats them to ``heads`` heads first and keeps those.

    Raises:
        ValueError: for another kernel, or ``kv_heads`` that does not divide ``heads``.
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
    """Count an Adam-family optimizer's ``step`` counters as host memory, as on a GPU.

    ``torch.optim.Adam`` (and AdamW) create each parameter's ``step`` counter
    with ``torch.tensor(0.0)``, a host tensor, unless the optimizer is
    ``fused`` or ``capturable`` (``_init_group`` in ``torch/optim/adam.py``).
    In the simulation every tensor is a CPU tensor; this wraps the
    optimizer's ``_init_group`` so that the tracker is paused while the states
    are created, and then counts every new state except ``step``.  Other
    optimizers are returned unchanged.

    Args:
        optimizer: the optimizer (changed in place and returned).
        tracker: the :class:`helpers.engine.counting.StorageTracker` of the simulation.
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
    """PyTorch's ``GradScaler``, on the simulated GPU.

    Its tensors (the scale, the growth tracker, the scaled loss, the inverse
    scale and the found-inf flags) are created as the real one creates them.
    Only its decision is not simulated: fake tensors have no values, so it can
    never find an inf, and every step is taken (``_maybe_opt_step`` reads a
    value with ``.item()`` to decide).
    """

    def __init__(self):
        super().__init__("cpu")

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        return optimizer.step(*args, **kwargs)
