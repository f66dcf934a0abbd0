"""GPU cards, their memory, and the one rule for "does it fit?".

Every widget, the command line and every lesson judge a step by :func:`judge`:
the whole step's peak (through ``optimizer.step()``, in the steady state), plus
one stated overhead model, must not exceed the card's memory.  The overhead
model: an assumed CUDA context (:data:`CUDA_CONTEXT_BYTES`, 512 MiB), plus, when
the step is judged by its allocated peak, an assumed allowance for the caching
allocator's cache (:data:`CACHE_ALLOWANCE_BYTES`, 512 MiB; together
:data:`CUDA_OVERHEAD_BYTES`, 1 GiB); when it is judged by its reserved peak
(the allocator model replays it on the card), the replay replaces the
allowance.  :data:`BASIS` says which, in the words every verdict uses.

All sizes are bytes; 1 MiB = 2**20 bytes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .units import cuda_size, fmt_bytes

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

#: The CUDA context, *assumed* (not measured here): memory a process holds on a
#: GPU outside PyTorch's caching allocator, with its kernels loaded lazily (the
#: default since PyTorch 1.13), and the library handles.  Published
#: measurements: 287,047,680 bytes (274 MiB) of device memory in use after one
#: small tensor, with lazy loading (pytorch/pytorch#86509, which made it the
#: default; 666 MB without it); "around 400MB" with CUDA >= 11.7
#: (pytorch/pytorch#109888); 426 MiB in nvidia-smi for PyTorch 2.10 with CUDA
#: 13.0 on an RTX 6000 Ada (unslothai/unsloth-zoo#1053).  512 MiB is a round
#: figure above them, which also leaves room for the cuBLAS workspaces: a real
#: caching allocator holds them (tens of MiB, on the first matrix
#: multiplication of each handle and stream), the simulated one does not.
CUDA_CONTEXT_BYTES = 512 * 2**20

#: An allowance for the caching allocator's cache, *assumed* when its reserved
#: memory is not simulated: the free blocks it keeps, and their fragmentation,
#: above the peak of the tensors.  Under memory pressure the allocator frees
#: its cached blocks and retries before it reports an out-of-memory error
#: (``release_cached_blocks`` in c10/cuda/CUDACachingAllocator.cpp), so what a
#: step needs at a card's limit is far less than the cache it keeps when it has
#: room (replayed through :mod:`helpers.allocator`, the lessons' steps reserve
#: several hundred MiB to about 1.5 GiB above their allocated peak uncapped).
#: 512 MiB is a round figure; the allocator model (the "reserved" view of the
#: widgets, ``--reserved`` on the command line) replaces it with a replay of the
#: step on the card, which can need more (fragmentation) or less.
CACHE_ALLOWANCE_BYTES = 512 * 2**20

#: The assumed overhead of a step judged by its allocated peak:
#: :data:`CUDA_CONTEXT_BYTES` + :data:`CACHE_ALLOWANCE_BYTES` = 1 GiB.
CUDA_OVERHEAD_BYTES = CUDA_CONTEXT_BYTES + CACHE_ALLOWANCE_BYTES


def headroom(capacity: int, overhead: int = CUDA_OVERHEAD_BYTES) -> int:
    """Bytes of tensors a GPU of ``capacity`` bytes can hold: ``capacity - overhead``.

    The rule behind "does it fit" when a step is judged by its allocated peak
    (the simulated GPU's capacity, the largest batch, :func:`judge`): the
    tensors' peak must fit what the CUDA context and the allocator's cache
    leave.

    Raises:
        ValueError: if ``capacity`` or ``overhead`` is negative.
    """
    if capacity < 0 or overhead < 0:
        raise ValueError(f"capacity and overhead must be >= 0 bytes, got {capacity} and {overhead}")
    return capacity - overhead


def fits(peak: int, capacity: int, overhead: int = CUDA_OVERHEAD_BYTES) -> bool:
    """Whether a step whose tensors peak at ``peak`` bytes fits a GPU of ``capacity`` bytes.

    ``peak`` is the allocated peak of the *whole* step (through
    ``optimizer.step()``, in the steady state: ``profile_step(...,
    steady_state=True).peak_allocated_bytes``); with the default overhead this
    is :func:`judge`'s verdict on it.
    """
    return peak <= headroom(capacity, overhead)


def _basis(unit: str) -> dict[str, str]:
    size = functools.partial(fmt_bytes, unit=unit, grouped=True)
    return {"allocated": f"peak allocated of the whole step + {size(CUDA_OVERHEAD_BYTES)} assumed overhead",
            "reserved": f"peak reserved of the whole step (simulated allocator) + {size(CUDA_CONTEXT_BYTES)} "
                        f"assumed CUDA context"}


#: What a verdict judged, in the same words everywhere (widgets, command line):
#: by the step's allocated peak, or by its reserved peak (the allocator model).
BASIS = _basis("MiB")


@dataclass(frozen=True)
class Verdict:
    """Whether a step fits a GPU, and on what it was judged.  Bytes.

    Attributes:
        fits: the answer.
        capacity: the GPU's memory.
        basis: ``"allocated"`` or ``"reserved"`` (a key of :data:`BASIS`).
        peak: the step's peak allocated bytes (basis ``"allocated"``) or peak
            reserved bytes (``"reserved"``); None when the allocator model ran
            out of memory before the step's end (then it does not fit).
        overhead: the assumed bytes added to ``peak``.
    """

    fits: bool
    capacity: int
    basis: str
    peak: int | None
    overhead: int

    @property
    def need(self) -> int | None:
        """``peak + overhead``: what the card must hold (None if unknown)."""
        return None if self.peak is None else self.peak + self.overhead

    @property
    def judged(self) -> str:
        """What was judged, in words: :data:`BASIS` of :attr:`basis`."""
        return BASIS[self.basis]

    def sentence(self, gpu: str, detail: str = "", unit: str = "MiB") -> str:
        """The verdict in words: ``"fits in <gpu>: <what was judged> = <peak> + <overhead> =
        <need> MiB <= <capacity> MiB"``, or ``"does not fit in <gpu>: ..."``; ``detail``, if
        given, follows in parentheses (say, why the allocator ran out of memory).

        Args:
            gpu: the GPU's name.
            detail: a reason, or ``""``.
            unit: ``"MiB"`` (as nvidia-smi writes a card's memory) or ``"GiB"``.

        Raises:
            ValueError: for another unit.
        """
        if unit not in ("MiB", "GiB"):
            raise ValueError(f"unit must be 'MiB' or 'GiB', got {unit!r}")
        scale = 2**20 if unit == "MiB" else 2**30
        verb = "fits" if self.fits else "does not fit"
        more = f" ({detail})" if detail else ""
        judged = _basis(unit)[self.basis]
        if self.peak is None:
            return f"{verb} in {gpu}: {judged}: the simulated allocator ran out of memory{more}"
        size = functools.partial(fmt_bytes, unit=unit, grouped=True)
        return (f"{verb} in {gpu}: {judged} = {self.peak / scale:,.1f} + {self.overhead / scale:,.1f} = "
                f"{size(self.need)} {'<=' if self.fits else '>'} {size(self.capacity)}{more}")


def judge(capacity: int, peak_allocated: int | None = None, *, peak_reserved: int | None = None,
          reserved: bool = False) -> Verdict:
    """The one rule for "does this training step fit this GPU?".

    Two bases, one overhead model:

    * by the allocated peak (``reserved=False``): ``peak_allocated`` +
      :data:`CUDA_OVERHEAD_BYTES` (the assumed CUDA context and allocator
      cache) <= ``capacity``;
    * by the reserved peak (``reserved=True``), the step replayed through the
      caching-allocator model on this card (``helpers.allocator.replay_on_gpu``,
      which leaves :data:`CUDA_CONTEXT_BYTES` to the context): ``peak_reserved``
      + :data:`CUDA_CONTEXT_BYTES` <= ``capacity``; ``peak_reserved`` None
      means that the replay ran out of memory: it does not fit.

    The peak is the whole step's, through ``optimizer.step()``, in the steady
    state (the optimizer's states exist): what every step of a training loop needs.

    Args:
        capacity: the GPU's memory in bytes (:data:`GPU_CARDS`).
        peak_allocated: the step's peak allocated bytes (basis "allocated").
        peak_reserved: the replay's peak reserved bytes (basis "reserved").
        reserved: which basis.

    Raises:
        ValueError: for a negative capacity or peak, or a missing allocated peak.
    """
    if capacity < 0:
        raise ValueError(f"capacity must be >= 0 bytes, got {capacity}")
    if reserved:
        peak, overhead = peak_reserved, CUDA_CONTEXT_BYTES
    else:
        if peak_allocated is None:
            raise ValueError("judging by the allocated peak needs peak_allocated")
        peak, overhead = peak_allocated, CUDA_OVERHEAD_BYTES
    if peak is not None and peak < 0:
        raise ValueError(f"a peak must be >= 0 bytes, got {peak}")
    ok = peak is not None and peak + overhead <= capacity
    return Verdict(ok, capacity, "reserved" if reserved else "allocated", peak, overhead)


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
