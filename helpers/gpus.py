"""GPU cards, their memory, and the one rule for "does it fit?".

Every widget, the command line and every lesson judge a step by :func:`fits`:
the whole step's peak allocated bytes (through ``optimizer.step()``) plus the
stated overhead must not exceed the card's memory.

All sizes are bytes; 1 MiB = 2**20 bytes.
"""

from __future__ import annotations

from .units import cuda_size

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
