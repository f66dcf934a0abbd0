"""Replaying an allocation log through the :class:`~helpers.allocator.model.CachingAllocator` (lesson 06): reserved
memory, whether a step fits a card, the least memory it replays in.  All sizes are bytes.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable

from ..gpus import CUDA_CONTEXT_BYTES
from .model import AllocatorOutOfMemory, Block, CachingAllocator
from .rules import K_ROUND_LARGE
from .settings import AllocatorSettings


@dataclass
class Replay:
    """Allocated and reserved bytes after every entry of an allocation log.

    Attributes:
        settings: the allocator's options; allocator: the :class:`CachingAllocator` in its final state.
        allocated, reserved, requested: bytes after each log entry (lists as long as the log).
        failed_at, error: the index of the entry that ran out of memory and its :class:`AllocatorOutOfMemory`, or None.
    """

    settings: AllocatorSettings
    allocated: list[int]
    reserved: list[int]
    requested: list[int]
    allocator: CachingAllocator
    failed_at: int | None = None
    error: AllocatorOutOfMemory | None = None
    _entry_of_trace: list[int] = field(default_factory=list, repr=False)  # trace entry -> log entry

    @property
    def peak_allocated(self) -> int:
        """Highest ``memory_allocated()`` of the replay (``max_memory_allocated()``)."""
        return self.allocator.peak_allocated

    @property
    def peak_reserved(self) -> int:
        """Highest ``memory_reserved()`` of the replay (``max_memory_reserved()``)."""
        return self.allocator.peak_reserved

    def segments_opened(self, start: int = 0, stop: int | None = None) -> int:
        """How many times the driver was asked for memory between log entries ``start`` and ``stop``."""
        return sum(1 for e in self.allocator.trace[self._trace_at(start):self._trace_at(stop)]
                   if e["action"] in ("segment_alloc", "segment_map"))

    def trace_position(self, index: int) -> int:
        """The position in ``allocator.trace`` at which log entry ``index`` (up to the log's length) begins: where a
        plot marks it."""
        return self._trace_at(index)

    def _trace_at(self, index: int | None) -> int | None:
        return None if index is None else bisect.bisect_left(self._entry_of_trace, index)


def replay(log: Iterable, capacity: int | None = None, settings: AllocatorSettings | str | None = None,
           empty_cache_at: Iterable[int] = (), total_memory: int | None = None,
           segment_addresses: Iterable[int] | None = None) -> Replay:
    """Replay an allocation log through a :class:`CachingAllocator`: a :class:`Replay`, stopped at an out of memory
    with ``failed_at`` and ``error`` set (it does not raise).

    Args:
        log: entries starting ``(serial, kind, nbytes)`` (:attr:`helpers.record.StepProfile.allocation_log`); ``kind``
            ``"alloc"``, ``"free"`` or ``"resize"`` (the new block allocated before the old is freed, like ``resize_``).
        capacity, total_memory, settings: as for :class:`CachingAllocator`.
        empty_cache_at: log indices before which ``torch.cuda.empty_cache()`` runs.
        segment_addresses: where the driver put each new segment, in order (a real snapshot's ``segment_alloc``
            addresses); default the model's own.

    Raises:
        ValueError: for an entry of unknown kind or a free of a storage never allocated.
    """
    alloc = CachingAllocator(capacity, settings, total_memory, segment_addresses=segment_addresses)
    blocks: dict[int, Block] = {}
    sizes: dict[int, int] = {}
    allocated, reserved, requested, entry_of_trace = [], [], [], []
    empty_at = set(empty_cache_at)
    result = Replay(alloc.settings, allocated, reserved, requested, alloc)
    for i, entry in enumerate(log):
        serial, kind, nbytes = entry[0], entry[1], entry[2]
        if i in empty_at:
            alloc.empty_cache()
        mark = len(alloc.trace)
        try:
            if kind == "alloc":
                blocks[serial], sizes[serial] = alloc.malloc(nbytes, serial), nbytes
            elif kind == "free":
                if serial not in blocks:
                    raise ValueError(f"log entry {i} frees storage {serial}, which was never allocated")
                alloc.free(blocks.pop(serial))
                sizes.pop(serial)
            elif kind == "resize":
                new = sizes.get(serial, 0) + nbytes
                old = blocks.pop(serial, None)
                if new > 0:
                    blocks[serial] = alloc.malloc(new, serial)
                if old is not None:
                    alloc.free(old)
                sizes[serial] = new
            else:
                raise ValueError(f"log entry {i} has unknown kind {kind!r}; expected alloc, free or resize")
        except AllocatorOutOfMemory as error:
            result.failed_at, result.error = i, error
            entry_of_trace.extend([i] * (len(alloc.trace) - mark))
            break
        entry_of_trace.extend([i] * (len(alloc.trace) - mark))
        allocated.append(alloc.allocated)
        reserved.append(alloc.reserved)
        requested.append(alloc.requested)
    result._entry_of_trace = entry_of_trace
    return result


def replay_on_gpu(log: Iterable, gpu_bytes: int, settings: AllocatorSettings | str | None = None,
                  context: int = CUDA_CONTEXT_BYTES) -> Replay:
    """Replay a log as on a GPU of ``gpu_bytes``: does the step fit, reserved memory and all?  The allocator may reserve
    ``gpu_bytes`` less ``context``, freeing its cache and retrying before it fails, so the step fits exactly when
    ``error`` is None.

    Raises:
        ValueError: when the context leaves no memory, or as :func:`replay` does.
    """
    if gpu_bytes <= context:
        raise ValueError(f"a GPU of {gpu_bytes} bytes leaves nothing beside a CUDA context of {context} bytes")
    return replay(log, capacity=gpu_bytes - context, settings=settings, total_memory=gpu_bytes)


def smallest_capacity(log: Iterable, settings: AllocatorSettings | str | None = None, start: int = 0,
                      step: int = K_ROUND_LARGE, limit: int = 2**50) -> int:
    """The first capacity, from ``start`` upward in steps of ``step`` bytes (default 2 MiB), at which ``log`` replays
    (a scan, not a bisection: success need not be monotonic in the capacity).

    Raises:
        ValueError: for a step that is not positive, or when nothing up to ``limit`` bytes works.
    """
    if step <= 0:
        raise ValueError(f"step must be a positive number of bytes, got {step}")
    log = list(log)
    capacity = max(start, step)
    while replay(log, capacity=capacity, settings=settings).error is not None:
        capacity += step
        if capacity > limit:
            raise ValueError(f"the log does not replay within {limit} bytes")
    return capacity
