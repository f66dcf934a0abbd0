"""What CUDA kernels allocate for themselves beyond the tensors: reduction staging buffers and cuDNN workspaces.

Both are requests to the caching allocator made inside a kernel's launch and freed when it returns, so a real GPU's
``max_memory_allocated`` counts them and a trace of tensors does not.

* **Reduction staging** is PyTorch's own code: ``gpu_reduce_kernel`` in ``aten/src/ATen/native/cuda/Reduce.cuh`` (the
  pinned PyTorch) asks for ``ReduceConfig::global_memory_size()`` bytes and then ``semaphore_size()`` bytes when
  ``setReduceConfig`` splits each output's inputs across thread blocks.  :func:`reduction_staging` follows that code
  line by line: exact, for a card's SM count and threads per SM (:data:`helpers.gpus.GPU_SPECS`).
* **cuDNN convolution workspaces** are chosen by cuDNN's heuristics, not by PyTorch's code: they can only be measured
  per GPU, cuDNN version, TF32 setting, dtype, pass and convolution (:class:`CudnnTable`, a data file), or bounded
  (:data:`helpers.gpus.CUDNN_BOUND_RATIO`).

:class:`KernelMemory` turns a mode (:data:`helpers.config.WORKSPACES`) into the bytes each operation's kernel adds;
:class:`helpers.engine.simulated.SimulatedTracker` applies it, the one place.  Bytes throughout.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from ..allocator.rules import round_up
from ..gpus import CUDNN_BOUND_RATIO, GPU_SPECS, SIMULATED_GPU

#: ``mnt_wrapper<T>::MAX_NUM_THREADS`` in ``Reduce.cuh``: the threads of a reduction's block (256 for complex double,
#: which :func:`reduction_staging` refuses).
REDUCE_MAX_THREADS = 512
#: ``setReduceConfig``'s ``min_values_per_thread`` (CUDA; ROCm: 128) and ``max_values_per_thread``.
MIN_VALUES_PER_THREAD, MAX_VALUES_PER_THREAD = 16, 256
#: ``vt0``, the default ``input_vec_size`` of ``gpu_reduce_kernel`` (sum and mean take the default).
INPUT_VEC_SIZE = 4
#: ``at::cuda::warp_size()`` on NVIDIA GPUs.
WARP_SIZE = 32


def _last_pow2(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def _div_up(a: int, b: int) -> int:
    return (a + b - 1) // b


def _accumulate_bytes(dtype: torch.dtype) -> int:
    """``sizeof(arg_t)``: CUDA's ``acc_type`` of a sum or mean: float for 16- and 32-bit floats, double for double,
    int64 for integers and bool (``ATen/AccumulateType.h``)."""
    if dtype.is_complex:
        raise ValueError(f"reductions of complex tensors ({dtype}) are not modelled")
    if dtype == torch.float64 or not dtype.is_floating_point:
        return 8
    return 4


def _iterator_dims(shape, strides, reduced) -> list[tuple[int, int, bool]]:
    """The reduction's ``TensorIterator`` dimensions, fastest first: ``(size, input stride in elements, reduced)``.

    ``reorder_dimensions`` puts reduced dimensions (the output's stride 0) first, then orders by the input's stride;
    ``coalesce_dimensions`` drops size-1 dimensions and merges neighbours of one kind that are contiguous in the input
    (the output, made contiguous, then merges too).
    """
    dims = sorted(((n, s, i in reduced) for i, (n, s) in enumerate(zip(shape, strides)) if n != 1),
                  key=lambda d: (not d[2], d[1]))
    merged: list[tuple[int, int, bool]] = []
    for size, stride, red in dims:
        if merged and merged[-1][2] == red and merged[-1][0] * merged[-1][1] == stride:
            prev = merged.pop()
            size, stride = prev[0] * size, prev[1]
        merged.append((size, stride, red))
    return merged


def _output_vec_size(dims: list[tuple[int, int, bool]], output_index: int) -> int:
    """``get_output_vec_size``: 4, halved until it divides the first output dimension's size and every other
    dimension's input stride (the buffers are 512-byte aligned, so the base address divides)."""
    vec = 4
    for n in [dims[output_index][0]] + [s for j, (_, s, _) in enumerate(dims) if j != output_index]:
        while n % vec:
            vec //= 2
    return vec


def _launch_shape(shape, strides, dims) -> tuple[int, bool, int, int, int]:
    """``setReduceConfig`` up to ``set_block_dimension``: ``(num_outputs, reduction_on_fastest_striding_dimension,
    dim0, dim1, output_vec_size)``, with each case of vectorization (along the input, along the output)."""
    it = _iterator_dims(shape, strides, set(dims))
    num_outputs = math.prod(n for n, _, red in it if not red)
    inputs_per_output = math.prod(shape) // num_outputs
    reduce_dims = sum(red for _, _, red in it)
    if not it:
        return num_outputs, True, 1, 1, 1
    fastest = reduce_dims == len(it) or it[0][1] < it[reduce_dims][1]
    dim0, dim1 = (inputs_per_output, num_outputs) if fastest else (num_outputs, inputs_per_output)
    fastest_stride = it[0][1] if fastest else it[reduce_dims][1]
    output_vec = 1
    if fastest_stride == 1:
        if fastest and dim0 >= 128 and reduce_dims == 1:
            dim0 //= INPUT_VEC_SIZE  # vectorize along input
        elif not fastest:
            output_vec = _output_vec_size(it, reduce_dims)  # vectorize along output
            dim0 //= output_vec
    return num_outputs, fastest, dim0, dim1, output_vec


def _block_dimensions(dim0: int, dim1: int, output_vec: int) -> tuple[int, int]:
    """``ReduceConfig::set_block_dimension``: ``(block_width, block_height)``."""
    max_threads = REDUCE_MAX_THREADS // output_vec
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    block_width = min(dim0_pow2, WARP_SIZE)
    block_height = min(dim1_pow2, max_threads // block_width)
    return min(dim0_pow2, max_threads // block_height), block_height


def reduction_staging(shape, dims, dtype: torch.dtype, *, sms: int, threads_per_sm: int,
                      strides=None) -> tuple[int, int]:
    """Bytes of the staging buffer and of the semaphores ``gpu_reduce_kernel`` allocates for a sum or mean of a
    tensor of ``shape`` (``strides`` in elements; default contiguous) over ``dims`` (``()``: every dimension), as
    ``(buffer, semaphores)``; ``(0, 0)`` when the reduction needs none.

    ``setReduceConfig`` and ``ReduceConfig`` (``set_block_dimension``, ``global_memory_size``, ``semaphore_size``) in
    ``aten/src/ATen/native/cuda/Reduce.cuh`` of the pinned PyTorch, with ``sms`` (``multiProcessorCount``) and
    ``threads_per_sm`` (``maxThreadsPerMultiProcessor``) of the card.  An input beyond 32-bit indexing (2**31 bytes
    or elements), which the kernel splits into several launches, is not modelled: ``(0, 0)``.

    Raises:
        ValueError: for a complex dtype, or a dimension out of range.
    """
    shape = tuple(int(n) for n in shape)
    ndim = len(shape)
    if strides is None:
        strides, step = [], 1
        for n in reversed(shape):
            strides.insert(0, step)
            step *= max(n, 1)
    dims = tuple(range(ndim)) if not dims else tuple(d % ndim if -ndim <= d < ndim else _bad_dim(d, ndim) for d in dims)
    element = torch.empty((), dtype=dtype).element_size()
    arg_bytes = _accumulate_bytes(dtype)
    numel = math.prod(shape)
    if numel == 0 or max(numel, element * sum((n - 1) * s for n, s in zip(shape, strides)) + element) > 2**31 - 1:
        return 0, 0
    num_outputs, fastest, dim0, dim1, output_vec = _launch_shape(shape, strides, dims)
    inputs_per_output = numel // num_outputs
    block_width, block_height = _block_dimensions(dim0, dim1, output_vec)
    num_threads = block_width * block_height
    step_input = step_output = 1
    block_x_reduce = fastest
    if fastest:
        step_input *= block_width
    else:
        step_output *= block_width
    split_warps = _div_up(inputs_per_output, step_input) >= min(block_height * 16, MAX_VALUES_PER_THREAD)
    if split_warps:
        step_input *= block_height
    else:
        step_output *= block_height
    grid_x = _div_up(num_outputs // output_vec, step_output)
    target_grid = sms * (threads_per_sm // num_threads)
    values = _div_up(inputs_per_output, step_input)
    if not (split_warps and values >= MAX_VALUES_PER_THREAD and grid_x <= target_grid):
        return 0, 0
    ctas = min(max(_div_up(target_grid, grid_x), _div_up(values, MAX_VALUES_PER_THREAD)),
               _div_up(values, MIN_VALUES_PER_THREAD))  # std::clamp(ctas1, ctas3, ctas2)
    if ctas <= 1:
        return 0, 0
    buffer = arg_bytes * num_outputs * ctas * (1 if block_x_reduce else block_width * output_vec)
    return buffer, 4 * grid_x  # sizeof(int) * grid().x


def _bad_dim(d: int, ndim: int) -> int:
    raise ValueError(f"dimension {d} out of range for a {ndim}-dimensional tensor")


#: The passes of a cuDNN convolution that may take a workspace, as the table names them.
CONV_PASSES = ("forward", "backward_input", "backward_weight")


#: The measured tables shipped, by card: ``lessons/data/cudnn_workspaces_<card>.json`` (see its ``about``).
CUDNN_TABLES = {"H200 141 GB": Path(__file__).resolve().parents[2] / "lessons" / "data" / "cudnn_workspaces_h200.json"}


@dataclass(frozen=True)
class ConvPass:
    """One pass of a 2-D convolution as cuDNN runs it: ``pass_`` (one of :data:`CONV_PASSES`), the convolution's
    parameters (NCHW input of ``batch`` x ``in_channels`` x ``height`` x ``width``; square or not), its dtype, and the
    bytes of its input, weight and output (unrounded)."""

    pass_: str
    batch: int
    in_channels: int
    out_channels: int
    height: int
    width: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    dtype: str
    input_bytes: int
    weight_bytes: int
    output_bytes: int

    @property
    def bound(self) -> int:
        """:data:`CUDNN_BOUND_RATIO` x (input + weight + output bytes), rounded up: the bound on its workspace."""
        return workspace_bound(self.input_bytes + self.weight_bytes + self.output_bytes)


def workspace_bound(tensor_bytes: int) -> int:
    """The bound on one cuDNN workspace: :data:`CUDNN_BOUND_RATIO` x its convolution's input + weight + output bytes
    (``tensor_bytes``), rounded up."""
    return math.ceil(CUDNN_BOUND_RATIO * tensor_bytes)


def conv_pass(pass_: str, input: torch.Tensor, weight: torch.Tensor, output_bytes: int, stride, padding, dilation,
              groups: int) -> ConvPass | None:
    """The :class:`ConvPass` of a 2-D convolution (``aten.convolution``'s arguments), or None for another rank.  A
    symbolic size (``torch.SymInt``, :mod:`helpers.symbolic`) is kept as it is: ``int()`` of it would fix it."""
    if input.dim() != 4 or weight.dim() != 4:
        return None
    pair = lambda v: tuple(v if len(v) == 2 else (v[0], v[0]))  # noqa: E731
    n, c, h, w = input.shape
    return ConvPass(pass_, n, c, weight.shape[0], h, w, tuple(weight.shape[2:]), pair(stride), pair(padding),
                    pair(dilation), groups, str(input.dtype).removeprefix("torch."),
                    input.numel() * input.element_size(), weight.numel() * weight.element_size(), output_bytes)


def _key(p: ConvPass) -> tuple:
    return (p.pass_, p.dtype, p.batch, p.in_channels, p.out_channels, p.height, p.width, p.kernel, p.stride,
            p.padding, p.dilation, p.groups)


class CudnnTable:
    """The cuDNN workspaces measured on one card (a file of :data:`CUDNN_TABLES`), looked up by :class:`ConvPass`.

    Attributes:
        card, cudnn, allow_tf32, benchmark: what it was measured on and with (the file's ``gpu``, ``cudnn``,
            ``cudnn_allow_tf32``, ``benchmark``).

    Raises:
        ValueError: for a card without a table, or a missing file.
    """

    def __init__(self, card: str):
        path = CUDNN_TABLES.get(card)
        if path is None:
            raise ValueError(f"no measured cuDNN workspace table for {card} (tables: {', '.join(CUDNN_TABLES)}); "
                             f"use workspaces='bound'")
        if not path.exists():
            raise ValueError(f"the cuDNN workspace table {path.name} is not here (it ships with the lessons)")
        data = _load_table(path)
        self.card, self.cudnn, self.allow_tf32, self.benchmark = (data["gpu"], data["cudnn"], data["cudnn_allow_tf32"],
                                                                  data["benchmark"])
        self._sizes: dict[tuple, int] = {}
        for r in data["rows"]:
            for pass_ in CONV_PASSES:
                k, s, p = (r["kernel"],) * 2, (r["stride"],) * 2, (r["padding"],) * 2
                self._sizes[(pass_, r["dtype"], r["batch"], r["in_channels"], r["out_channels"], r["side"],
                             r["side"], k, s, p, (1, 1), 1)] = r["workspace"].get(pass_, 0)

    def __contains__(self, p: ConvPass) -> bool:
        return _key(p) in self._sizes

    def workspace(self, p: ConvPass) -> int | None:
        """The bytes cuDNN requested for this pass on the table's card (0: none), or None if not measured."""
        return self._sizes.get(_key(p))


@lru_cache(maxsize=None)
def _load_table(path: Path) -> dict:
    return json.loads(path.read_text())


def staging_of(card: str):
    """``(sms, threads_per_sm)`` of ``card`` (:data:`helpers.gpus.GPU_SPECS`).

    Raises:
        ValueError: for an unknown card.
    """
    if card not in GPU_SPECS:
        raise ValueError(f"unknown GPU {card!r}; use one of {', '.join(GPU_SPECS)}")
    return GPU_SPECS[card][:2]


_aten = torch.ops.aten
#: The ATen reductions whose CUDA kernel is ``gpu_reduce_kernel`` (``ReduceSumProdKernel.cu``,
#: ``ReduceMomentKernel.cu``), and where their dimensions are among the arguments (None: every dimension).  Sums over
#: a broadcast dimension (a bias's gradient, ``sum_to`` in autograd) and the mean of adaptive average pooling to 1 x 1
#: (``adaptive_avg_pool2d``) are among them.
REDUCTIONS = {_aten.sum.dim_IntList: 1, _aten.sum.default: None, _aten.mean.dim: 1, _aten.mean.default: None}


class KernelMemory:
    """The bytes each operation's CUDA kernel allocates for itself on the simulated GPU, by ``mode`` (one of
    :data:`helpers.config.WORKSPACES`) on ``card`` (:data:`helpers.gpus.GPU_SPECS`).

    Attributes:
        mode, card: as given; ``table``: the card's :class:`CudnnTable` in mode "measured", else None.
        passes: every convolution pass seen (:class:`ConvPass`), whatever the mode.
        missing: mode "measured": the passes the table does not hold (given no workspace).

    Raises:
        ValueError: for an unknown mode or card, or mode "measured" on a card without a table.
    """

    def __init__(self, mode: str = "none", card: str = SIMULATED_GPU):
        if mode not in ("none", "measured", "bound"):
            raise ValueError(f"workspaces must be one of none, measured, bound; got {mode!r}")
        self.mode, self.card = mode, card
        self.sms, self.threads_per_sm = staging_of(card)
        self.table = CudnnTable(card) if mode == "measured" else None
        self.passes: list[ConvPass] = []
        self.missing: list[ConvPass] = []

    def reduction(self, func, args) -> tuple[int, int]:
        """``(buffer, semaphores)`` bytes of a reduction of :data:`REDUCTIONS` (:func:`reduction_staging`); ``(0, 0)``
        in mode "none" or for another operation."""
        if self.mode == "none" or func not in REDUCTIONS:
            return 0, 0
        x = args[0]
        where = REDUCTIONS[func]
        dims = () if where is None or len(args) <= where or args[where] is None else tuple(args[where])
        if x.dtype.is_complex or x.dim() == 0:
            return 0, 0
        return reduction_staging(x.shape, dims, x.dtype, sms=self.sms, threads_per_sm=self.threads_per_sm,
                                 strides=x.stride())

    def convolution(self, p: ConvPass | None) -> int:
        """Bytes of the cuDNN workspace of one pass, by the mode (0 in mode "none"); every pass is remembered."""
        if p is None:
            return 0
        self.passes.append(p)
        if self.mode == "bound":
            return p.bound
        if self.table is None:
            return 0
        size = self.table.workspace(p)
        if size is None:
            self.missing.append(p)
            return 0
        return size

    @property
    def bound(self) -> int:
        """The most cuDNN may add to the step's peak beyond the tensors: the largest :attr:`ConvPass.bound` of the
        passes seen (one workspace lives at a time, freed when its pass returns); 0 without convolutions."""
        return max((p.bound for p in self.passes), default=0)


_CONV, _CONV_BACKWARD = _aten.convolution.default, _aten.convolution_backward.default


def _momentary(tracker, sizes) -> None:
    """Count each of ``sizes`` (bytes; 0: none) as a kernel's own allocation, in order, then free them in reverse
    (C++ destroys the later ``DataPtr`` first)."""
    serials = [tracker.transient(round_up(n), torch.uint8, (n,)) for n in sizes if n]
    for serial in reversed(serials):
        tracker.release(serial)


def run_with_kernel_memory(memory: KernelMemory, tracker, call, func, args, kwargs):
    """Run ``func`` through ``call(func, args, kwargs)`` (which counts its outputs) and count, after each kernel's
    outputs as a GPU allocates them, what ``memory`` says the kernel takes for itself: a reduction's staging buffer and
    semaphores; a 2-D convolution's workspace per pass.  A convolution's backward runs as cuDNN runs it, one pass at a
    time (``cudnn_convolution_backward`` in ``aten/src/ATen/native/cudnn/ConvShared.cpp``: the input's gradient and
    its workspace, then the weight's; the bias's last), when a mode is set; in mode "none" it runs whole, as before,
    and its passes are only remembered (for :attr:`KernelMemory.bound`).  ``tracker``: its ``transient`` and
    ``release`` count the kernel's own bytes."""
    if func is _CONV and not args[6]:
        out = call(func, args, kwargs)
        _momentary(tracker, [memory.convolution(conv_pass("forward", args[0], args[1], out.numel() * out.element_size(),
                                                          *args[3:6], args[8]))])
        return out
    if func is _CONV_BACKWARD and not args[7]:
        grad, x, w, mask = args[0], args[1], args[2], list(args[10])
        passes = [("backward_input", 0), ("backward_weight", 1)]
        made = lambda name: conv_pass(name, x, w, grad.numel() * grad.element_size(), *args[4:7], args[9])  # noqa: E731
        if memory.mode == "none":
            for name, i in passes:
                if mask[i]:
                    memory.convolution(made(name))
            return call(func, args, kwargs)
        outs = [None, None, None]
        for name, i in passes:
            if mask[i]:
                outs[i] = call(func, (*args[:10], [j == i for j in range(3)]), kwargs)[i]
                _momentary(tracker, [memory.convolution(made(name))])
        if mask[2]:
            outs[2] = call(func, (*args[:10], [False, False, True]), kwargs)[2]
        return tuple(outs)
    out = call(func, args, kwargs)
    _momentary(tracker, memory.reduction(func, args))
    return out
