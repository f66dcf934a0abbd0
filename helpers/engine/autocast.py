"""CUDA's autocast, applied to the simulation's CPU autocast (lessons 00 and 04).

On a GPU, ``torch.autocast("cuda")`` runs each operation of its lists in 16 bits or float32 (``autocast_mode.h``);
the CPU's autocast has other lists. :func:`helpers.engine.cuda_rules.cuda_rules` installs, for every operation, an
``AutocastCPU`` kernel with CUDA's policy (:func:`cuda_autocast_policy`, :data:`CUDA_AUTOCAST`), and
:func:`simulated_autocast` stands for ``torch.autocast("cuda")``. A test checks the lists against the dispatcher.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch
from torch._C import DispatchKey, DispatchKeySet

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

#: Operations CUDA's autocast registers that :func:`helpers.engine.cuda_rules.cuda_rules` leaves to the CPU, with the
#: reason.
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

#: The dispatch key a kernel excludes to run its op below the CPU's autocast.
NO_AUTOCAST = DispatchKeySet(DispatchKey.AutocastCPU)


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


def kernel_for(op, policy: str):
    """An ``AutocastCPU`` kernel that applies CUDA's ``policy`` to ``op``, then runs ``op`` below autocast."""
    def run(args, kwargs):
        with torch._C._ExcludeDispatchKeyGuard(NO_AUTOCAST):
            return op(*args, **kwargs)

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
    if policy in ("fp32_set_opt_dtype", "fp32_append_dtype"):
        return _float32_dtype_kernel(op, policy, run)
    raise ValueError(f"unknown autocast policy {policy!r}")


def _first_eligible(args, kwargs) -> bool:
    first = next(_tensors((*args, *kwargs.values())), None)
    return first is not None and _eligible(first)


def _float32_dtype_kernel(op, policy: str, run):
    """The kernel of the two float32 policies that pass a ``dtype`` (:func:`kernel_for`): ``fp32_set_opt_dtype``
    sets the op's own ``dtype=None`` to float32; ``fp32_append_dtype`` calls the overload that takes a ``dtype``
    (``norm``), as ``autocast_mode.h``'s ``AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE`` does."""
    names = [a.name for a in op._schema.arguments]
    if policy == "fp32_set_opt_dtype":
        where = names.index("dtype")

        def set_dtype(*args, **kwargs):
            if _first_eligible(args, kwargs):
                if len(args) > where:
                    if args[where] is None:
                        args = (*args[:where], torch.float32, *args[where + 1:])
                elif kwargs.get("dtype") is None:
                    kwargs = {**kwargs, "dtype": torch.float32}
            return run(args, kwargs)
        return set_dtype
    target = {"norm.Scalar": torch.ops.aten.norm.ScalarOpt_dtype,
              "norm.ScalarOpt_dim": torch.ops.aten.norm.ScalarOpt_dim_dtype}[_overload_name(op)]

    def append_dtype(*args, **kwargs):
        if not _first_eligible(args, kwargs):
            return run(args, kwargs)
        full = dict(zip(names, args), **kwargs)
        with torch._C._ExcludeDispatchKeyGuard(NO_AUTOCAST):
            if "dim" in full:
                return target(full["self"], full.get("p"), full["dim"], full.get("keepdim", False),
                              dtype=torch.float32)
            return target(full["self"], full.get("p", 2), dtype=torch.float32)
    return append_dtype


def _overload_name(op) -> str:
    name = op._schema.name.removeprefix("aten::")
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def op_named(name: str):
    """The ``torch.ops.aten`` overload named ``name`` (``"pow.Tensor_Scalar"``; no overload: ``.default``)."""
    base, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), overload or "default")


def cuda_autocast_policy() -> dict[str, str]:
    """The ``AutocastCPU`` policy :func:`helpers.engine.cuda_rules.cuda_rules` installs, by operator overload: CUDA's
    for every op CUDA's autocast lists but :data:`SAME_ON_BOTH`; ``"passthrough"`` for ops only the CPU lists (as on
    a GPU)."""
    policy = {name: kind for kind, names in CUDA_AUTOCAST.items() for name in names if name not in SAME_ON_BOTH}
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("aten::") and torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCPU"):
            short = name.removeprefix("aten::")
            if short not in SAME_ON_BOTH and short not in policy and short.split(".")[0] not in NOT_EMULATED:
                policy[short] = "passthrough"
    return policy


#: The 16-bit type of the simulated GPU's autocast while :func:`simulated_autocast` is active (None outside it).
_AUTOCAST_DTYPE: contextvars.ContextVar = contextvars.ContextVar("simulated_autocast", default=None)


@contextlib.contextmanager
def simulated_autocast(dtype: torch.dtype):
    """``torch.autocast("cpu", dtype=dtype)`` standing for CUDA's, which also tells the tracker autocast is on (under
    ``torch.inference_mode()`` :class:`helpers.engine.simulated.SimulatedTracker` splits composites and switches
    autocast on for their parts)."""
    token = _AUTOCAST_DTYPE.set(dtype)
    try:
        with torch.autocast("cpu", dtype=dtype):
            yield
    finally:
        _AUTOCAST_DTYPE.reset(token)


def autocast_again(dtype=...):
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


_IS_AUTOCAST_ENABLED = torch.is_autocast_enabled


@contextlib.contextmanager
def cpu_autocast_answers():
    """While active, ``torch.is_autocast_enabled()`` asked without a device is answered by the CPU's autocast
    (:func:`_is_autocast_enabled`); restored on exit."""
    torch.is_autocast_enabled = _is_autocast_enabled
    try:
        yield
    finally:
        torch.is_autocast_enabled = _IS_AUTOCAST_ENABLED


def _is_autocast_enabled(device_type: str | None = None) -> bool:
    """``torch.is_autocast_enabled``, where a question without a device, which asks about CUDA (as peft's 4-bit LoRA
    layers ask, ``tuners/lora/bnb.py``), is answered by the CPU's autocast, which stands for CUDA's here."""
    return _IS_AUTOCAST_ENABLED("cpu" if device_type is None else device_type)
