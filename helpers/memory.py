"""Measure the bytes that PyTorch code allocates, on a real GPU or simulated.

Introduced in lesson 00 (setup check); every other lesson measures with it.

Two backends answer the same questions (bytes allocated now, peak allocated);
:mod:`helpers.backends` holds what differs between them:

* ``cuda``: the real counters of PyTorch's CUDA caching allocator
  (``torch.cuda.memory_allocated``, ``max_memory_allocated``,
  ``memory_reserved``), see https://pytorch.org/docs/stable/notes/cuda.html.
* ``simulated``: the code runs on CPU *fake tensors*
  (``torch._subclasses.fake_tensor.FakeTensorMode``): every tensor has its
  shape, dtype and lifetime, but no data is allocated.  :class:`StorageTracker`
  sees every tensor an operation creates, counts its storage once, rounded up to
  512 bytes as the CUDA caching allocator does, and subtracts it again when the
  storage is freed (or resized).  The operations are PyTorch's CPU kernels,
  with CUDA's rules applied where a GPU's kernels keep other tensors (dropout's
  mask, the autocast op lists, attention kernels, Adam's host-side step
  counters: :mod:`helpers.cuda_semantics`, lesson 00), so the result is what
  ``torch.cuda.memory_allocated()`` would report for the step's tensors.  It
  does not model the allocator's unsplit large blocks (:func:`block_bytes`),
  the CUDA context, cuDNN and cuBLAS workspaces, or the cached-but-free memory
  that the allocator keeps *reserved*.

All sizes are in bytes; 1 MiB = 2**20 bytes (not 1 MB = 10**6 bytes).
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from typing import NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten

MiB = 2**20
GiB = 2**30

#: The CUDA caching allocator hands out blocks in multiples of 512 bytes
#: (``kMinBlockSize`` in c10/cuda/CUDACachingAllocator.cpp), so a 4-byte
#: tensor occupies 512 bytes of ``memory_allocated``.
BLOCK_BYTES = 512


# The caching allocator's size constants (c10/cuda/CUDACachingAllocator.cpp).
#: Requests of at most 1 MiB are "small" (``kSmallSize``); they share 2 MiB segments.
SMALL_REQUEST_BYTES = 2**20
#: Segment size for small requests (``kSmallBuffer``).
SMALL_SEGMENT_BYTES = 2 * 2**20
#: Requests below 10 MiB (``kMinLargeAlloc``) get a 20 MiB segment (``kLargeBuffer``) ...
MEDIUM_REQUEST_BYTES = 10 * 2**20
MEDIUM_SEGMENT_BYTES = 20 * 2**20
#: ... and larger ones a segment of their own size rounded up to 2 MiB (``kRoundLarge``).
LARGE_ROUNDING_BYTES = 2 * 2**20

#: ``total_memory`` of real cards, as ``torch.cuda.get_device_properties(0)``
#: printed it in public logs (its repr shows whole MiB; the figure moves by a
#: few tens of MiB with the driver and the ECC setting).  A card's nominal
#: "16 GB" is 16 GiB of memory chips, and the driver keeps part of it: PyTorch
#: sees 15.78 GiB on a "16 GB" V100, 79.19 GiB on an "80 GB" H100.
#: Sources: V100-SXM2-16GB, 16160 MiB (Ultralytics YOLOv5 setup logs);
#: RTX 4090, 24563 MiB, and H100 80GB HBM3, 81089 MiB (printed by
#: ``get_device_properties`` with torch 2.x, the latter in S. Bekman's
#: *Machine Learning Engineering* benchmarks); A100-SXM4-40GB, 40536 MiB
#: (``get_device_properties`` in the PaddlePaddle documentation, same CUDA
#: property); A100 80GB, 79.15 GiB (the "total capacity" of CUDA
#: out-of-memory messages on that card).
GPU_CARDS = {
    "V100 16 GB": 16160 * 2**20,
    "RTX 4090 24 GB": 24563 * 2**20,
    "A100 40 GB": 40536 * 2**20,
    "A100 80 GB": 81050 * 2**20,
    "H100 80 GB": 81089 * 2**20,
}

#: Memory a training process holds on a GPU besides its tensors, *assumed* (not
#: measured here) when a lesson asks whether a step fits a GPU of a given size:
#: the CUDA context (a few hundred MiB), cuBLAS and cuDNN workspaces, and the
#: caching allocator's free-but-reserved blocks.  1 GiB is a round, deliberately
#: generous figure; on a real GPU, measure instead.
CUDA_OVERHEAD_BYTES = 1 * 2**30

#: Memory a process holds on a GPU outside PyTorch's caching allocator, *assumed*
#: when the allocator's reserved memory is simulated (lesson 06): the CUDA
#: context, with its kernels loaded lazily (the default since PyTorch 1.13),
#: and the library handles.  Published measurements: 287,047,680 bytes (274 MiB)
#: of device memory in use after one small tensor, with lazy loading
#: (pytorch/pytorch#86509, which made it the default; 666 MB without it);
#: "around 400MB" with CUDA >= 11.7 (pytorch/pytorch#109888); 426 MiB in
#: nvidia-smi for PyTorch 2.10 with CUDA 13.0 on an RTX 6000 Ada
#: (unslothai/unsloth-zoo#1053).  512 MiB is a round figure above them.
#: cuBLAS workspaces are not in it: they go through the caching allocator.
CUDA_CONTEXT_BYTES = 512 * 2**20


def headroom(capacity: int, overhead: int = CUDA_OVERHEAD_BYTES) -> int:
    """Bytes of tensors a GPU of ``capacity`` bytes can hold: ``capacity - overhead``.

    The one rule behind "does it fit" everywhere (the simulated GPU, the largest
    batch, the widget's verdict): the tensors' peak must fit what the CUDA
    context, the library workspaces and the allocator's cache leave.

    Raises:
        ValueError: if ``capacity`` or ``overhead`` is negative.
    """
    if capacity < 0 or overhead < 0:
        raise ValueError(f"capacity and overhead must be >= 0 bytes, got {capacity} and {overhead}")
    return capacity - overhead


def fits(peak: int, capacity: int, overhead: int = CUDA_OVERHEAD_BYTES) -> bool:
    """Whether a step whose tensors peak at ``peak`` bytes fits a GPU of ``capacity`` bytes."""
    return peak <= headroom(capacity, overhead)


def round_up(nbytes: int, block: int = BLOCK_BYTES) -> int:
    """Round ``nbytes`` up to a whole number of allocator blocks.

    Args:
        nbytes: a size in bytes, >= 0.
        block: the block size in bytes (default 512, the CUDA caching
            allocator's minimum block).

    Returns:
        The smallest multiple of ``block`` that is >= ``nbytes`` (0 stays 0:
        an empty tensor allocates nothing).

    Raises:
        ValueError: if ``nbytes`` is negative or ``block`` is not positive.
    """
    if nbytes < 0 or block <= 0:
        raise ValueError(f"round_up needs nbytes >= 0 and block > 0, got {nbytes}, {block}")
    return -(-nbytes // block) * block


def allocation_size(nbytes: int) -> int:
    """Bytes the caching allocator asks the driver for when no cached block fits.

    ``get_allocation_size`` in c10/cuda/CUDACachingAllocator.cpp, applied to
    the request rounded up to 512 bytes (``round_size``): a request of at most
    1 MiB gets a 2 MiB segment (shared by later small requests), one below
    10 MiB a 20 MiB segment, and a larger one a segment of its own size rounded
    up to 2 MiB.  This is also the size CUDA's out-of-memory message reports as
    "Tried to allocate".

    Example: ``allocation_size(49 * MiB) == 50 * MiB``.

    Raises:
        ValueError: if ``nbytes`` is negative.
    """
    size = max(round_up(nbytes), BLOCK_BYTES)
    if size <= SMALL_REQUEST_BYTES:
        return SMALL_SEGMENT_BYTES
    if size < MEDIUM_REQUEST_BYTES:
        return MEDIUM_SEGMENT_BYTES
    return round_up(size, LARGE_ROUNDING_BYTES)


def block_bytes(nbytes: int, free_block: int | None = None) -> int:
    """Bytes of ``memory_allocated()`` a request of ``nbytes`` occupies.

    The allocator hands out a free block (a cached one of ``free_block`` bytes,
    or by default a new segment of :func:`allocation_size` bytes) and splits off
    the rest only if the rest is worth keeping (``should_split`` in
    c10/cuda/CUDACachingAllocator.cpp): for a request of at most 1 MiB, a rest of
    at least 512 bytes; for a larger one, a rest of *more than* 1 MiB.  An
    unsplit block counts whole in ``memory_allocated()``: a 49 MiB tensor in a
    new 50 MiB segment occupies 50 MiB.

    Args:
        nbytes: the request in bytes, >= 0.
        free_block: size of the free block that serves it, in bytes, at least
            the request rounded up to 512 bytes; default a new segment.

    Raises:
        ValueError: for a negative request or a block too small for it.
    """
    size = max(round_up(nbytes), BLOCK_BYTES)
    block = allocation_size(nbytes) if free_block is None else free_block
    if block < size:
        raise ValueError(f"a block of {block} bytes cannot hold a request of {size} bytes")
    rest = block - size
    keep_rest = rest >= BLOCK_BYTES if size <= SMALL_REQUEST_BYTES else rest > SMALL_REQUEST_BYTES
    return size if keep_rest else block


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of GPU memory that the storage holding ``t`` occupies.

    This is the storage's size (``t.untyped_storage().nbytes()``) rounded up to
    512 bytes.  A view shares its base's storage, so a view of a big tensor
    reports the big storage: that is what stays allocated while the view lives.

    Example: a float32 tensor of shape (128, 64, 112, 112) occupies
    128 * 64 * 112 * 112 * 4 bytes = 392 MiB.

    Raises:
        TypeError: if ``t`` is not a tensor.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"tensor_bytes expects a torch.Tensor, got {type(t).__name__}")
    return round_up(t.untyped_storage().nbytes())


def fmt_bytes(nbytes: float, unit: str = "MiB", sign: bool = False) -> str:
    """Format a byte count, e.g. ``fmt_bytes(411041792) == '392.0 MiB'``.

    Args:
        nbytes: bytes (may be negative, for a change).
        unit: one of ``B``, ``KiB``, ``MiB``, ``GiB``, ``TiB``, ``MB``, ``GB``.
            The ``i`` units are powers of 2 (as PyTorch and nvidia-smi use),
            ``MB`` and ``GB`` powers of 10.
        sign: show ``+`` for positive values (for deltas).

    Raises:
        ValueError: for an unknown unit.
    """
    scale = {"B": 1, "KiB": 2**10, "MiB": MiB, "GiB": GiB, "TiB": 2**40, "MB": 10**6, "GB": 10**9}
    if unit not in scale:
        raise ValueError(f"unknown unit {unit!r}; use one of {', '.join(scale)}")
    value = nbytes / scale[unit]
    digits = 0 if unit == "B" else 1
    return f"{value:{'+' if sign else ''}.{digits}f} {unit}"


def cuda_size(nbytes: int) -> str:
    """Format bytes as the CUDA caching allocator's messages do.

    ``bytes`` up to 1 KiB, then KiB, MiB or GiB with two decimals
    (``format_size`` in c10/cuda/CUDACachingAllocator.cpp): ``cuda_size(3 * 2**29) == '1.50 GiB'``.
    """
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 2**10)):
        if nbytes > scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} bytes"


def oom_message(requested: int, capacity: int, in_use: int, allocated: int, reserved: int,
                simulated: bool = True, allowed: int | None = None, free: int | None = None) -> str:
    """The first line of a CUDA out-of-memory error, field by field.

    Shaped like the message of ``torch.OutOfMemoryError`` in PyTorch 2.x
    (``DeviceCachingAllocator::malloc`` in c10/cuda/CUDACachingAllocator.cpp),
    without its closing advice, so that a learner can read a real one.

    Args:
        requested: bytes the failing allocation asked for ("Tried to allocate");
            pass :func:`allocation_size` of the request, as PyTorch reports it.
        capacity: total memory of the GPU ("total capacity").
        in_use: memory the process holds on the GPU, tensors, cache and CUDA
            context together.
        allocated: bytes in live tensors ("allocated by PyTorch").
        reserved: bytes the caching allocator holds from the driver, >= ``allocated``.
        simulated: say at the start that no GPU ran out.
        allowed: the cap set with ``torch.cuda.set_per_process_memory_fraction``
            ("... allowed;"), or ``None`` when no cap is set.
        free: what the driver reports free ("of which ... is free"); default
            ``capacity - in_use`` (no other process on the GPU).
    """
    prefix = "Simulated CUDA out of memory" if simulated else "CUDA out of memory"
    free = max(capacity - in_use, 0) if free is None else free
    cap = f"{cuda_size(allowed)} allowed; " if allowed is not None else ""
    return (
        f"{prefix}. Tried to allocate {cuda_size(requested)}. GPU 0 has a total capacity of "
        f"{cuda_size(capacity)} of which {cuda_size(free)} is free. "
        f"Including non-PyTorch memory, this process has {cuda_size(in_use)} memory in use. {cap}"
        f"Of the allocated memory {cuda_size(allocated)} is allocated by PyTorch, and "
        f"{cuda_size(reserved - allocated)} is reserved by PyTorch but unallocated."
    )


#: The 16-bit type of the simulated GPU's autocast while
#: :func:`simulated_autocast` is active (None outside it).
_AUTOCAST_DTYPE: contextvars.ContextVar = contextvars.ContextVar("simulated_autocast", default=None)


@contextlib.contextmanager
def simulated_autocast(dtype: torch.dtype):
    """``torch.autocast`` on the CPU's fake tensors, standing for CUDA's.

    The same as ``torch.autocast("cpu", dtype=dtype)``, and it tells the
    storage tracker that autocast is on: under ``torch.inference_mode()`` the
    tracker splits composite operations itself (see :class:`StorageTracker`),
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


class LogEntry(NamedTuple):
    """One change in allocated memory: a storage allocated, freed or resized.

    ``delta`` is in bytes (negative for a free or a shrink); ``kind`` is
    ``"alloc"``, ``"free"`` or ``"resize"``.
    """

    serial: int
    kind: str
    delta: int


class StorageTracker(TorchDispatchMode):
    """Count the bytes of every tensor storage that operations create, while alive.

    A ``TorchDispatchMode`` sees the outputs of every ATen operation.  Each new
    storage is counted once (views and in-place results share a storage and
    add nothing), rounded up to 512 bytes, and a ``weakref.finalize`` on the
    storage subtracts it again when autograd or Python frees it.  A storage
    resized in place (``untyped_storage().resize_()``, as FSDP does to free and
    re-gather parameters) is counted at its new size: ``UntypedStorage.resize_``
    is not an ATen operation, so it is wrapped while the tracker is active (as
    ``torch.distributed._tools.mem_tracker.MemTracker`` does).

    Every storage gets a serial number, so that a snapshot (the serials alive
    at some moment) can be labelled later, e.g. as parameters or gradients, and
    every change is appended to :attr:`log`, in order.

    Args:
        device_type: count only storages on this device type (``"cuda"``), or
            every storage when ``None`` (simulated mode, where all are fake).
        capacity: simulate a GPU of this many bytes: a new storage that would
            take the tensor bytes above :func:`headroom` raises
            ``torch.OutOfMemoryError`` with a CUDA-shaped :func:`oom_message`,
            whose ``requested`` and ``allocated`` attributes give the bytes.
            ``None``: no limit.

    Attributes:
        allocated: bytes alive now.
        peak: the highest ``allocated`` since creation or :meth:`reset_peak`.
        peak_serials: serials alive at that peak.
        peak_at: serial of the allocation that reached the peak (which
            allocation of the step it was; the same operation in a run at
            another batch size has the same serial).
        sizes: serial -> bytes, for every storage ever counted (its largest size).
        dtypes, shapes: serial -> dtype and shape of the tensor through which
            the storage was first seen (what created it).
        log: every :class:`LogEntry`, in order (cheap: one tuple per change).
        paused: while True, new storages are not device memory (a simulated
            host copy) and are not counted.

    Limits: memory allocated inside a kernel without creating a tensor
    (cuDNN/cuBLAS workspaces) is invisible here, and so are tensors created
    before the mode was entered unless passed to :meth:`track`.
    """

    def __init__(self, device_type: str | None = None, capacity: int | None = None):
        super().__init__()
        self.device_type = device_type
        self.capacity = capacity
        self.allocated = 0
        self.peak = 0
        self.peak_serials: tuple[int, ...] = ()
        self.peak_at = -1
        self.paused = False
        self.sizes: dict[int, int] = {}
        self.dtypes: dict[int, torch.dtype] = {}
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.log: list[LogEntry] = []
        self._live: dict[int, int] = {}  # id(storage) -> serial
        self._now: dict[int, int] = {}   # serial -> bytes now (a resized storage differs from sizes)
        self._resize = None

    def __enter__(self):
        tracker, original = self, torch.UntypedStorage.resize_

        def resize_(storage, size):
            result = original(storage, size)
            tracker._resized(storage)
            return result

        self._resize = original
        torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._resize
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (not self.paused and torch.is_inference_mode_enabled() and func.namespace == "aten"
                and torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")):
            # Under torch.inference_mode() the autograd layer, which normally
            # splits a composite operation (cross_entropy, to, ...) into the
            # operations it is made of, is skipped, so the composite arrives
            # here whole and would hide its intermediate tensors: split it here,
            # with autocast on again if it was (simulated_autocast).
            with self, _autocast_again():
                out = func.decompose(*args, **(kwargs or {}))
            if out is not NotImplemented:
                return out
        out = func(*args, **(kwargs or {}))
        if self.paused:
            return out
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.track(t)
        return out

    def track(self, t: torch.Tensor) -> int | None:
        """Count ``t``'s storage if it is new; return its serial (None if ignored).

        A tensor subclass that wraps other tensors (a ``DTensor``, whose
        ``_local_tensor`` is one rank's shard) owns no memory itself: the
        tensors it wraps are counted instead, and the serial of the last one
        is returned.

        Raises:
            torch.OutOfMemoryError: past the simulated capacity.
        """
        if is_traceable_wrapper_subclass(t):
            serial = None
            for name in t.__tensor_flatten__()[0]:
                inner = getattr(t, name)
                if isinstance(inner, torch.Tensor):  # a DTensor also names its device mesh
                    serial = self.track(inner)
            return serial
        if self.device_type is not None and t.device.type != self.device_type:
            return None
        st = t.untyped_storage()
        key = id(st)
        serial = self._live.get(key)
        if serial is not None:
            return serial
        nbytes = round_up(st.nbytes())
        self._check_capacity(nbytes)
        serial = len(self.sizes)
        self.sizes[serial] = nbytes
        self.dtypes[serial] = t.dtype
        self.shapes[serial] = tuple(t.shape)
        self._live[key] = serial
        self._change(serial, "alloc", nbytes)
        weakref.finalize(st, self._free, key)
        return serial

    def _check_capacity(self, nbytes: int) -> None:
        if self.capacity is not None and self.allocated + nbytes > headroom(self.capacity):
            in_use = self.allocated + CUDA_OVERHEAD_BYTES
            error = torch.OutOfMemoryError(
                oom_message(allocation_size(nbytes), self.capacity, in_use, self.allocated, self.allocated))
            error.requested, error.allocated = allocation_size(nbytes), self.allocated  # for DoesNotFit
            raise error

    def _change(self, serial: int, kind: str, delta: int) -> None:
        self._now[serial] = self._now.get(serial, 0) + delta
        self.allocated += delta
        self.log.append(LogEntry(serial, kind, delta))
        if self.allocated > self.peak:
            self.peak = self.allocated
            self.peak_serials = tuple(s for s in self._live.values() if self._now[s])
            self.peak_at = serial

    def _free(self, key: int) -> None:
        serial = self._live.pop(key)
        self._change(serial, "free", -self._now[serial])

    def _resized(self, storage) -> None:
        serial = self._live.get(id(storage))
        if serial is None or self.paused:
            return
        delta = round_up(storage.nbytes()) - self._now[serial]
        if delta > 0:
            self._check_capacity(delta)
        self.sizes[serial] = max(self.sizes[serial], self._now[serial] + delta)
        self._change(serial, "resize", delta)

    def bytes_now(self, serial: int) -> int:
        """Bytes the storage ``serial`` holds now (0 once freed or resized to 0)."""
        return self._now.get(serial, 0) if serial in self._live.values() else 0

    def serial_of(self, t: torch.Tensor) -> int | None:
        """Serial of the live storage holding ``t`` (for a ``DTensor``, its local
        shard), or None if not counted."""
        while is_traceable_wrapper_subclass(t):
            inner = [getattr(t, n) for n in t.__tensor_flatten__()[0]]
            inner = [i for i in inner if isinstance(i, torch.Tensor)]
            if len(inner) != 1:
                return None
            t = inner[0]
        return self._live.get(id(t.untyped_storage()))

    def live_serials(self) -> tuple[int, ...]:
        """Serials of all storages alive now, holding bytes."""
        return tuple(s for s in self._live.values() if self._now[s])

    def reset_peak(self) -> None:
        """Start a new peak from the bytes alive now."""
        self.peak = self.allocated
        self.peak_serials = self.live_serials()
        self.peak_at = len(self.sizes) - 1


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


class Meter:
    """One API over both backends: bytes allocated now and at peak.

    Use it as a context manager.  Tensors and models made inside it on
    ``meter.device`` are measured::

        with Meter("auto") as meter:
            x = torch.ones(1024, 1024, device=meter.device)   # 4 MiB
            y = x * 2                                          # 4 MiB more
            del y
        meter.peak()  # 8 MiB: 8388608 bytes, on either backend

    In simulated mode the ``with`` block runs under ``FakeTensorMode``: tensors
    have no values, and data-dependent operations (``.item()``, printing
    values) are not possible inside it.

    Counts are relative to entering the block: on a GPU, memory that other
    code already held is not included.  After the block, :meth:`allocated`,
    :meth:`peak` and :meth:`reserved` return the values at exit.

    Args:
        device: ``"auto"`` (cuda when present, else simulated), ``"cuda"`` or
            ``"simulated"``.
        capacity: behave as a GPU of this many bytes.  Simulated: see
            :class:`StorageTracker` (the assumed :data:`CUDA_OVERHEAD_BYTES` is
            taken off it).  On cuda: ``torch.cuda.set_per_process_memory_fraction``
            limits the caching allocator to ``capacity`` (restored on exit),
            so a large GPU fails as a smaller one would.  Exceeding it raises
            ``torch.OutOfMemoryError``.
        attention: simulated only: the kernel of ``scaled_dot_product_attention``
            (see :data:`helpers.config.ATTENTION`).
        count_storages: run the storage tracker (default).  False leaves it
            out, so that no Python runs between operations (for timing): on a
            GPU the real counters still count; simulated, nothing is counted.

    Attributes:
        backend: ``"cuda"`` or ``"simulated"``: say it next to every number.
        device: the ``torch.device`` to create tensors on inside the block.
        runtime: the :class:`helpers.backends.Backend` object behind it.
        tracker: the :class:`StorageTracker` counting storages (both backends;
            on cuda it explains the real counters by category).

    Raises:
        ValueError: for an unknown device, ``"cuda"`` without a GPU, or a
            capacity that is not a positive number of bytes (or, on cuda,
            exceeds the GPU's memory).
    """

    def __init__(self, device: str = "auto", capacity: int | None = None, attention: str = "auto",
                 count_storages: bool = True):
        from .backends import get_backend

        self.runtime = get_backend(device, attention)
        self.backend = self.runtime.name
        self.device = self.runtime.device
        if capacity is not None:
            if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
                raise ValueError(f"capacity must be a positive number of bytes, got {capacity!r}")
            total = self.runtime.total_memory()
            if total is not None and capacity > total:
                raise ValueError(f"capacity {cuda_size(capacity)} exceeds this GPU's memory")
        self.capacity = capacity
        self.tracker = self.runtime.tracker(capacity)
        self.count_storages = count_storages
        self._frozen: tuple[int, int, int | None] | None = None

    def __enter__(self) -> "Meter":
        self.runtime.enter(self.capacity)
        if self.count_storages:
            self.tracker.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.count_storages:
            self.tracker.__exit__(*exc)
        self.runtime.exit(*exc)
        self._frozen = (self._now(), self._peak(), self.runtime.reserved())

    def _now(self) -> int:
        return self.runtime.allocated(self.tracker)

    def _peak(self) -> int:
        return self.runtime.peak(self.tracker)

    def allocated(self) -> int:
        """Bytes of tensor memory allocated now, since the block was entered."""
        return self._frozen[0] if self._frozen else self._now()

    def peak(self) -> int:
        """Highest :meth:`allocated` since entry or the last :meth:`reset_peak`."""
        return self._frozen[1] if self._frozen else self._peak()

    def reserved(self) -> int | None:
        """Bytes the caching allocator holds from the driver (cuda only).

        This is ``torch.cuda.memory_reserved()`` for the whole process, not
        relative to entry.  ``None`` in simulated mode: the simulation has no
        allocator cache (lesson 06 models one).
        """
        return self._frozen[2] if self._frozen else self.runtime.reserved()

    def reset_peak(self) -> None:
        """Start a new peak from the bytes allocated now."""
        self.tracker.reset_peak()
        self.runtime.reset_peak()

    def serial_of(self, t: torch.Tensor) -> int | None:
        """The tracker's serial for the storage of ``t`` (None if not counted)."""
        return self.tracker.serial_of(t)

    def live_serials(self) -> tuple[int, ...]:
        """Serials of the storages alive now."""
        return self.tracker.live_serials()

    def storages_so_far(self) -> int:
        """How many storages have been counted so far (the next serial)."""
        return len(self.tracker.sizes)

    def log_length(self) -> int:
        """How many allocation-log entries there are so far."""
        return len(self.tracker.log)
