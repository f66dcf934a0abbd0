"""A model of PyTorch's CUDA caching allocator, to replay a step's allocation log.

Introduced in lesson 06 (the caching allocator and fragmentation).  The engine
(:mod:`helpers.engine.counting`) counts the bytes of live tensors: what
``torch.cuda.memory_allocated()`` reports, up to the allocator's unsplit
blocks.  A GPU also *reserves* memory that no tensor uses: the caching
allocator keeps freed blocks to hand them out again, because asking the driver
(``cudaMalloc``, ``cudaFree``) is slow and synchronises the device.  This
module replays the engine's allocation log through the same rules and reports
allocated and reserved bytes, segments and blocks, event by event.

Each rule below is a function or branch of ``DeviceCachingAllocator`` in
``c10/cuda/CUDACachingAllocator.cpp`` (PyTorch 2.x), named where it is used:

1. ``round_size``: a request is rounded up to a multiple of 512 bytes (with
   ``roundup_power2_divisions``, to the next of that many steps between two
   powers of two).  A 0-byte tensor allocates nothing; 1 EB or more fails at
   once.
2. ``get_pool``: requests of at most 1 MiB go to the *small* pool, the rest
   to the *large* pool; a block never moves between pools.
3. ``get_allocation_size``: when no cached block fits, the allocator asks the
   driver for a new *segment*: 2 MiB for a small request, 20 MiB for a request
   under 10 MiB, else the request rounded up to 2 MiB.
4. ``get_free_block``: best fit, the smallest free block of the pool that is
   large enough (the lowest address among equals).  With
   ``max_split_size_mb`` set, a request below it never takes a block at or
   above it, and a larger request takes such a block only if the block is
   less than 20 MiB (``max_non_split_rounding_mb``) larger.
5. ``should_split``: the rest of a block is split off as a free block if it is
   at least 512 bytes (small pool, or expandable segments), or more than
   1 MiB and the request is below ``max_split_size`` (large pool).  An
   unsplit rest stays inside the allocated block and counts in
   ``memory_allocated()``.
6. ``free_block``: a freed block merges with free neighbours of its segment.
7. ``alloc_block``: a new segment fails when it would take the reserved
   memory past the GPU's capacity (or ``set_per_process_memory_fraction``).
8. ``malloc``: when that happens, the allocator frees cached oversize blocks
   (``release_available_cached_blocks``, only with ``max_split_size_mb``),
   then every free whole segment (``release_cached_blocks``, as
   ``torch.cuda.empty_cache()`` does), retrying after each; then it raises
   out of memory.
9. ``empty_cache`` (``release_cached_blocks``): segments with no allocated
   block go back to the driver; a segment with one live block stays whole.
10. ``expandable_segments:True`` (``try_allocate_expandable_block``,
    ``find_expandable_block``, ``map_block``, ``unmap_block``): one segment per
    pool grows by mapping pages (2 MiB in the small pool, 20 MiB in the large
    one) at the lowest address where free and unmapped space together fit the
    request (a new segment opens only when the address space of the others,
    1 1/8 of the GPU's memory each, has no such place), only the pages still
    missing there; blocks split whenever the rest is at least 512 bytes;
    ``empty_cache`` unmaps every free page, even between live blocks; the
    snapshot has one entry per contiguous mapped range.

Not modelled: streams and their events (one stream, every free is immediate),
CUDA graph pools, the options :class:`AllocatorSettings` refuses
(``garbage_collection_threshold``, ``large_segment_size_mb``, ...), and memory that kernels allocate outside
tensors (cuBLAS workspaces do go through the allocator on a GPU; lesson 06
gives their sizes).  Addresses are the model's own, not a GPU's.

All sizes are bytes; 1 MiB = 2**20 bytes.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable

from ..config import check_int
from ..gpus import CUDA_CONTEXT_BYTES
from ..units import MiB, cuda_size
from .rules import (K_LARGE_BUFFER, K_ROUND_LARGE, K_SMALL_BUFFER, K_SMALL_SIZE, get_allocation_size, round_size,
                    round_up, should_split)

#: Where the model puts segments: each new one starts at the next multiple of
#: this, so that addresses are readable (the real ones are the driver's).
_ADDRESS_STEP = 2**40

#: ``one_exa_bytes``: requests of this many bytes or more fail at once.
_ONE_EXA_BYTES = 2**60


class AllocatorOutOfMemory(MemoryError):
    """A request the simulated GPU cannot serve, with the allocator's figures.

    Attributes:
        requested: the bytes asked for from the driver ("Tried to allocate").
        allocated, reserved: bytes at the moment of the failure.
        largest_free: the largest free cached block, in bytes.
    """

    def __init__(self, message: str, requested: int, allocated: int, reserved: int, largest_free: int):
        super().__init__(message)
        self.requested, self.allocated, self.reserved, self.largest_free = requested, allocated, reserved, largest_free


#: Options PyTorch 2.14.1 accepts in ``PYTORCH_CUDA_ALLOC_CONF`` that this model
#: does not model, each with the reason it refuses them (checked against the
#: keys ``c10::CachingAllocator::AcceleratorAllocatorConfig`` and
#: ``CUDAAllocatorConfig`` register in 2.14.1's ``libc10.so``/``libc10_cuda.so``).
_REFUSED_OPTIONS = {
    "garbage_collection_threshold": "it frees cached blocks by age, only under a memory fraction",
    "large_segment_size_mb": "it changes the 20 MiB segment of 1-10 MiB requests",
    "throw_on_cudamalloc_oom": "it changes when cudaMalloc is tried",
    "release_lock_on_cudamalloc": "it changes locking, which a one-stream model has none of",
    "release_lock_on_hipmalloc": "it changes locking, which a one-stream model has none of",
    "graph_capture_record_stream_reuse": "CUDA graphs are not modelled",
    **{key: "it configures the pinned host-memory allocator, not the GPU's"
       for key in ("pinned_use_cuda_host_register", "pinned_use_hip_host_register", "pinned_num_register_threads",
                   "pinned_reserve_segment_size_mb", "pinned_free_catch_all", "pinned_use_background_threads",
                   "pinned_max_round_threshold_mb", "pinned_max_cached_size_mb")},
}

#: ``roundup_power2_divisions`` has one number of divisions per power-of-two
#: interval of request sizes, from [1 MiB, 2 MiB) (and everything below) to
#: [32 GiB, 64 GiB) (and everything above): ``kRoundUpPowerOfTwoIntervals``.
_DIVISION_INTERVALS = 16


def _interval(nbytes: int) -> int:
    """Index of the ``roundup_power2_divisions`` interval of a request (0 below 2 MiB, 15 from 32 GiB)."""
    return min(max(nbytes.bit_length() - 1 - 20, 0), _DIVISION_INTERVALS - 1) if nbytes > 0 else 0


def _parse_divisions(value: str) -> int | tuple[int, ...]:
    """``roundup_power2_divisions``: ``4`` or ``[256:4,512:2,>:1]`` (intervals in MiB), as
    ``AcceleratorAllocatorConfig::parseRoundUpPower2Divisions`` reads them: the
    first entry also sets every interval below it, ``>`` every interval after
    the last one named, and an interval not named keeps 0 (512-byte rounding)."""
    def divisions(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise ValueError(f"roundup_power2_divisions must be a power of 2 or 0, got {text!r}") from None
        if n < 0 or n & (n - 1):
            raise ValueError(f"roundup_power2_divisions must be a power of 2 or 0, got {text!r}")
        return n

    if not value.startswith("["):
        n = divisions(value)
        if n == 0:  # the plain form wants a power of two
            raise ValueError("roundup_power2_divisions must be a power of 2, got '0'")
        return n
    if not value.endswith("]"):
        raise ValueError(f"roundup_power2_divisions list must end with ']', got {value!r}")
    table, first, last = [0] * _DIVISION_INTERVALS, True, 0
    for item in filter(None, value[1:-1].split(",")):
        interval, sep, count = item.partition(":")
        if not sep:
            raise ValueError(f"roundup_power2_divisions entries are <MiB>:<divisions> or >:<divisions>, got {item!r}")
        n = divisions(count)
        if interval == ">":  # every interval after the last one named
            table[last + 1:] = [n] * (_DIVISION_INTERVALS - last - 1)
            continue
        try:
            mib = int(interval)
        except ValueError:
            mib = -1
        if mib <= 0 or mib & (mib - 1):
            raise ValueError(f"roundup_power2_divisions intervals must be powers of 2 (MiB), got {interval!r}")
        index = min(mib.bit_length() - 1, _DIVISION_INTERVALS - 1)
        if first:
            table[:index] = [n] * index
            first = False
        table[index], last = n, index
    return tuple(table)


@dataclass(frozen=True)
class AllocatorSettings:
    """The allocator's options, as ``PYTORCH_CUDA_ALLOC_CONF`` spells them.

    Attributes:
        max_split_size_mb: blocks of at least this many MiB are never split
            (``None``: no limit, PyTorch's default).
        max_non_split_rounding_mb: with ``max_split_size_mb``, a request at or
            above it takes a cached block less than this many MiB larger
            (``None``: 20, PyTorch's default).
        roundup_power2_divisions: round requests up to one of this many
            steps between two powers of two (an 84 MiB tensor takes 96 MiB with
            4); an int for every size, or 16 ints, one per interval [1, 2) MiB
            ... [32, 64) GiB; 0 or 1: PyTorch's default 512-byte rounding.
        expandable_segments: grow one segment per pool instead of allocating
            one per request (PyTorch's default: False).
        per_process_memory_fraction: as ``torch.cuda.set_per_process_memory_fraction``
            (see :class:`CachingAllocator`'s ``memory_fraction``); ``None``: none.

    Every other option PyTorch 2.14.1 accepts is refused by :meth:`parse` with
    the reason (``garbage_collection_threshold``, ``pinned_*``, ...).

    Raises:
        ValueError: for a ``max_split_size_mb`` or ``max_non_split_rounding_mb``
            below 20 (PyTorch refuses those too:
            ``AcceleratorAllocatorConfig::parseMaxSplitSize``), or divisions
            that are not powers of two.
    """

    max_split_size_mb: int | None = None
    expandable_segments: bool = False
    roundup_power2_divisions: int | tuple[int, ...] = 0
    max_non_split_rounding_mb: int | None = None
    per_process_memory_fraction: float | None = None

    def __post_init__(self):
        lowest = K_LARGE_BUFFER // MiB  # PyTorch's rule: at least kLargeBuffer (20 MiB)
        for name in ("max_split_size_mb", "max_non_split_rounding_mb"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), lowest, what=f"a whole number of MiB >= {lowest}")
        if not isinstance(self.expandable_segments, bool):
            raise ValueError(f"expandable_segments must be True or False, got {self.expandable_segments!r}")
        fraction = self.per_process_memory_fraction
        if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                     or not 0 <= fraction <= 1):
            raise ValueError(f"per_process_memory_fraction must be a number from 0 to 1, got {fraction!r}")
        table = self.roundup_power2_divisions
        if isinstance(table, int) and not isinstance(table, bool):
            table = (table,) * _DIVISION_INTERVALS
        if (not isinstance(table, tuple) or len(table) != _DIVISION_INTERVALS
                or any(isinstance(n, bool) or not isinstance(n, int) or n < 0 or n & (n - 1) for n in table)):
            raise ValueError("roundup_power2_divisions must be a power of 2 (or 0), or a tuple of 16 of them, "
                             f"got {self.roundup_power2_divisions!r}")

    @classmethod
    def parse(cls, conf: str) -> "AllocatorSettings":
        """Read ``"max_split_size_mb:128,expandable_segments:True"`` (empty: the defaults).

        The one place where options are read and checked.  Spaces are ignored,
        as PyTorch's ``ConfigTokenizer`` does; ``backend:native`` is accepted.

        Raises:
            ValueError: for an option this model does not know or does not
                model (named, with the reason), or a bad value.
        """
        values: dict = {}
        items, depth, start = [], 0, 0
        conf = "".join(conf.split())
        for k, ch in enumerate(conf + ","):  # split at commas outside [...]
            depth += (ch == "[") - (ch == "]")
            if ch == "," and depth == 0:
                items.append(conf[start:k])
                start = k + 1
        for item in filter(None, items):
            key, sep, value = item.partition(":")
            if key in _REFUSED_OPTIONS:
                raise ValueError(f"allocator option {key} is not modelled: {_REFUSED_OPTIONS[key]}")
            if not sep or key not in ("max_split_size_mb", "max_non_split_rounding_mb", "expandable_segments",
                                      "roundup_power2_divisions", "per_process_memory_fraction", "backend"):
                raise ValueError(f"unknown allocator option {item!r}; this model knows max_split_size_mb:<MiB>, "
                                 "max_non_split_rounding_mb:<MiB>, roundup_power2_divisions:<n>|[<MiB>:<n>,...], "
                                 "expandable_segments:True|False, per_process_memory_fraction:<0..1> "
                                 "and backend:native")
            if key == "backend":
                if value != "native":
                    raise ValueError(f"allocator backend {value!r} is not modelled; this model is backend:native")
            elif key == "expandable_segments":
                if value not in ("True", "False"):
                    raise ValueError(f"expandable_segments must be True or False, got {value!r}")
                values[key] = value == "True"
            elif key == "roundup_power2_divisions":
                values[key] = _parse_divisions(value)
            elif key == "per_process_memory_fraction":
                try:
                    values[key] = float(value)
                except ValueError:
                    raise ValueError(f"per_process_memory_fraction must be a number from 0 to 1, got {value!r}") from None
            else:
                try:
                    values[key] = int(value)
                except ValueError:
                    raise ValueError(f"{key} must be a whole number of MiB, got {value!r}") from None
        return cls(**values)

    @property
    def max_split_size(self) -> int:
        """``max_split_size_mb`` in bytes (no limit: a number larger than any GPU)."""
        return 2**63 if self.max_split_size_mb is None else self.max_split_size_mb * MiB

    @property
    def max_non_split_rounding_size(self) -> int:
        """``max_non_split_rounding_mb`` in bytes (default 20 MiB, ``kLargeBuffer``)."""
        return K_LARGE_BUFFER if self.max_non_split_rounding_mb is None else self.max_non_split_rounding_mb * MiB

    def divisions(self, nbytes: int) -> int:
        """``roundup_power2_divisions(size)``: the divisions for a request of ``nbytes`` (0: none)."""
        table = self.roundup_power2_divisions
        return table if isinstance(table, int) else table[_interval(nbytes)]

    def __str__(self) -> str:
        parts = [f"max_split_size_mb:{self.max_split_size_mb}"] if self.max_split_size_mb is not None else []
        if self.max_non_split_rounding_mb is not None:
            parts.append(f"max_non_split_rounding_mb:{self.max_non_split_rounding_mb}")
        table = self.roundup_power2_divisions
        if isinstance(table, int) and table or isinstance(table, tuple) and len(set(table)) == 1 and table[0]:
            parts.append(f"roundup_power2_divisions:{table if isinstance(table, int) else table[0]}")
        elif isinstance(table, tuple) and any(table):
            parts.append("roundup_power2_divisions:[" + ",".join(f"{2**i}:{n}" for i, n in enumerate(table)) + "]")
        if self.expandable_segments:
            parts.append("expandable_segments:True")
        if self.per_process_memory_fraction is not None:
            parts.append(f"per_process_memory_fraction:{self.per_process_memory_fraction}")
        return ",".join(parts) or "defaults"


@dataclass(eq=False)
class Block:
    """A contiguous range of one segment: allocated to one tensor, free, or unmapped.

    Attributes:
        address: where it starts (the model's address space).
        size: bytes.
        segment: the :class:`Segment` it belongs to (None for a 0-byte tensor's empty block).
        allocated: in use by a tensor.
        requested: bytes that tensor asked for, not rounded (``requested_size``;
            ``size`` is at least that rounded up to 512 bytes, larger after rule 5).
        serial: the engine's storage serial it holds (None when free).
        mapped: backed by memory (False only inside an expandable segment).
    """

    address: int
    size: int
    segment: "Segment"
    allocated: bool = False
    requested: int = 0
    serial: int | None = None
    mapped: bool = True


@dataclass(eq=False)
class Segment:
    """Memory obtained from the driver in one piece (``cudaMalloc``), or one expandable segment.

    Attributes:
        address: its first byte.
        small: in the small pool (requests of at most 1 MiB).
        expandable: an expandable segment (rule 10).
        blocks: its blocks, in address order, covering it without gaps.
    """

    address: int
    small: bool
    expandable: bool = False
    blocks: list[Block] = field(default_factory=list)

    @property
    def size(self) -> int:
        """Bytes reserved: the mapped blocks."""
        return sum(b.size for b in self.blocks if b.mapped)


class CachingAllocator:
    """The caching allocator of one GPU, one stream: ``malloc``, ``free``, ``empty_cache``.

    Args:
        capacity: bytes the allocator may reserve (the GPU's memory less what
            the CUDA context takes, or a ``set_per_process_memory_fraction``
            cap); ``None``: unlimited.
        settings: :class:`AllocatorSettings`, or the ``PYTORCH_CUDA_ALLOC_CONF``
            string for them.
        total_memory: the GPU's memory in bytes (``totalGlobalMem``): an
            expandable segment reserves addresses for 1 1/8 of it; default the
            capacity (``None`` with no capacity: 1 TiB).
        memory_fraction: ``torch.cuda.set_per_process_memory_fraction``: the
            allocator refuses to open a segment when reserved memory plus the
            segment's ``get_allocation_size`` would pass this fraction of
            ``total_memory`` (``alloc_block``'s check, made before anything is
            asked of the driver, also with expandable segments); ``None``: the
            settings' ``per_process_memory_fraction``, if any.

    Attributes:
        allocated: bytes in allocated blocks (``torch.cuda.memory_allocated()``,
            unsplit rests included).
        requested: bytes the live tensors asked for, rounded to 512 (the engine's count).
        reserved: bytes held from the driver (``torch.cuda.memory_reserved()``).
        peak_allocated, peak_reserved: their highest values so far.
        segments: the live :class:`Segment` objects, in address order.
        trace: every action, as dicts shaped like the ``device_traces`` entries of
            ``torch.cuda.memory._snapshot()``: ``action`` (``alloc``,
            ``free_completed``, ``segment_alloc``, ``segment_free``,
            ``segment_map``, ``segment_unmap``, ``oom``), ``addr``, ``size``, and
            ``serial`` (the engine's storage, for ``alloc``/``free_completed``).
        num_alloc_retries, num_ooms, num_device_alloc, num_device_free: counters
            named as in ``torch.cuda.memory_stats()``.

    Raises:
        ValueError: for a capacity or total memory that is not a positive number
            of bytes, or a fraction outside [0, 1] or without a total memory.
    """

    def __init__(self, capacity: int | None = None, settings: AllocatorSettings | str | None = None,
                 total_memory: int | None = None, memory_fraction: float | None = None):
        if capacity is not None:
            check_int("capacity", capacity, 1, what="a positive number of bytes or None")
        if total_memory is not None:
            check_int("total_memory", total_memory, 1, what="a positive number of bytes or None")
        self.total_memory = total_memory if total_memory is not None else capacity
        if settings is None or isinstance(settings, str):
            settings = AllocatorSettings.parse(settings or "")
        self.capacity, self.settings = capacity, settings
        self.allowed_memory_maximum: int | None = None
        if memory_fraction is None:
            memory_fraction = settings.per_process_memory_fraction
        if memory_fraction is not None:
            self.set_per_process_memory_fraction(memory_fraction)
        self.allocated = self.requested = self.reserved = 0
        self.peak_allocated = self.peak_reserved = 0
        self.segments: list[Segment] = []
        self.trace: list[dict] = []
        self.num_alloc_retries = self.num_ooms = self.num_device_alloc = self.num_device_free = 0
        self._next_address = 0

    # -- the public operations -----------------------------------------------------
    def malloc(self, nbytes: int, serial: int | None = None) -> Block:
        """Allocate a block for a tensor of ``nbytes`` bytes (``DeviceCachingAllocator::malloc``).

        A 0-byte tensor gets an empty block outside every segment and costs
        nothing, as in PyTorch (``allocate`` asks ``malloc`` only for a
        nonzero size).

        Raises:
            AllocatorOutOfMemory: when no cached block fits and the driver has no
                more memory, or at once for 1 EB (2**60 bytes) or more, with
                PyTorch's message ("Tried to allocate more than 1EB memory").
        """
        if nbytes >= _ONE_EXA_BYTES:  # NativeCachingAllocator::allocate's check, before anything else
            raise AllocatorOutOfMemory("Simulated CUDA out of memory. Tried to allocate more than 1EB memory.",
                                       nbytes, self.allocated, self.reserved, self.largest_free())
        if nbytes == 0:
            return Block(0, 0, None, allocated=True, serial=serial)
        size = round_size(nbytes, self.settings.divisions(nbytes))              # rule 1
        small = size <= K_SMALL_SIZE                                            # rule 2
        block = self._free_block_for(size, small)                               # rule 4
        if block is None:
            block = (self._new_block(size, small)                               # rules 3 and 7
                     or (self._release_oversize(size, small) and self._new_block(size, small))
                     or (self._release_cached() and self._retry(size, small)))  # rule 8
        if block is None:
            self.num_ooms += 1
            requested = get_allocation_size(size)
            self.trace.append({"action": "oom", "addr": 0, "size": size, "serial": serial})
            raise AllocatorOutOfMemory(
                f"Simulated CUDA out of memory. Tried to allocate {cuda_size(requested)}. "
                f"{cuda_size(self.allocated)} is allocated by PyTorch, and {cuda_size(self.reserved - self.allocated)} "
                f"is reserved by PyTorch but unallocated; the largest free block is {cuda_size(self.largest_free())}.",
                requested, self.allocated, self.reserved, self.largest_free())
        if self._should_split(block, size, small):                               # rule 5
            self._split(block, size)
        block.allocated, block.requested, block.serial = True, nbytes, serial
        self.allocated += block.size
        self.requested += round_up(nbytes)
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.trace.append({"action": "alloc", "addr": block.address, "size": block.size, "serial": serial})
        return block

    def free(self, block: Block) -> None:
        """Return a tensor's block to the cache (``free`` and ``free_block``); reserved stays.

        Raises:
            ValueError: for a block that is not allocated.
        """
        if not block.allocated:
            raise ValueError("this block is not allocated (freed twice?)")
        if block.segment is None:  # a 0-byte tensor's: nothing to give back
            block.allocated = False
            return
        self.trace.append({"action": "free_completed", "addr": block.address, "size": block.size,
                           "serial": block.serial})
        self.allocated -= block.size
        self.requested -= round_up(block.requested)
        block.allocated, block.requested, block.serial = False, 0, None
        self._merge(block)                                                       # rule 6

    def set_per_process_memory_fraction(self, fraction: float) -> None:
        """``torch.cuda.set_per_process_memory_fraction``: cap reserved memory at
        ``fraction`` of ``total_memory`` (``allowed_memory_maximum``, in bytes).

        Raises:
            ValueError: for a fraction outside [0, 1], or with no total memory.
        """
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ValueError(f"memory_fraction must be a number from 0 to 1, got {fraction!r}")
        if self.total_memory is None:
            raise ValueError("memory_fraction needs the GPU's total_memory (or a capacity)")
        self.allowed_memory_maximum = int(fraction * self.total_memory)

    def empty_cache(self) -> int:
        """``torch.cuda.empty_cache()``: give every cached free segment back; return the bytes released."""
        before = self.reserved
        self._release_cached()
        return before - self.reserved

    # -- questions -----------------------------------------------------------------
    def largest_free(self) -> int:
        """The largest free (mapped) block, in bytes: the largest request served without a new segment."""
        return max((b.size for s in self.segments for b in s.blocks if b.mapped and not b.allocated), default=0)

    def describe(self) -> str:
        """The segments and their blocks as text, one segment per line, in address order.

        Each block is ``[size state]``: ``allocated`` (with the tensor's own
        size when the block is larger: an unsplit rest) or ``free``; unmapped
        parts of expandable segments are left out.
        """
        lines = []
        for s in sorted(self.segments, key=lambda s: s.address):
            parts = []
            for b in s.blocks:
                if not b.mapped:
                    continue
                state = "free" if not b.allocated else (
                    "allocated" if round_up(b.requested) == b.size else f"allocated, tensor {cuda_size(b.requested)}")
                parts.append(f"[{cuda_size(b.size)} {state}]")
            if parts:
                kind = ("small" if s.small else "large") + (", expandable" if s.expandable else "")
                lines.append(f"segment of {cuda_size(s.size)} ({kind}): {' '.join(parts)}")
        return "\n".join(lines) or "no segments"

    def snapshot(self) -> list[dict]:
        """The segments now, shaped like ``torch.cuda.memory._snapshot()["segments"]``, in address order.

        Each segment: ``address``, ``total_size``, ``allocated_size``,
        ``segment_type`` (``"small"``/``"large"``), ``is_expandable``, and
        ``blocks``, each with ``address``, ``size``, ``requested_size`` (the
        bytes the tensor asked for, 0 for a free block), ``state``
        (``"active_allocated"`` or ``"inactive"``) and ``serial``.  An
        expandable segment is reported as PyTorch's ``snapshot()`` does: one
        entry per contiguous mapped range; unmapped parts are left out.
        """
        out = []
        for s in self.segments:
            runs: list[list[Block]] = [[]]
            for b in s.blocks:
                if b.mapped:
                    runs[-1].append(b)
                elif runs[-1]:
                    runs.append([])
            for run in filter(None, runs):
                blocks = [{"address": b.address, "size": b.size, "requested_size": b.requested,
                           "state": "active_allocated" if b.allocated else "inactive", "serial": b.serial}
                          for b in run]
                out.append({"address": blocks[0]["address"], "total_size": sum(b["size"] for b in blocks),
                            "allocated_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
                            "segment_type": "small" if s.small else "large", "is_expandable": s.expandable,
                            "blocks": blocks})
        return sorted(out, key=lambda seg: seg["address"])

    # -- the rules -----------------------------------------------------------------
    def _free_block_for(self, size: int, small: bool) -> Block | None:
        """Rule 4, ``get_free_block``: best fit among the pool's free blocks."""
        candidates = [b for s in self.segments if s.small == small
                      for b in s.blocks if b.mapped and not b.allocated and b.size >= size]
        if not candidates:
            return None
        if self.settings.expandable_segments:
            # An expandable segment's block that unmapped space follows counts as
            # large as it could grow: a larger candidate that cannot grow as far
            # is taken instead.
            fits = sorted(candidates, key=lambda b: (b.size, b.address))
            i = 0
            while i + 1 < len(fits) and self._expandable_size(fits[i + 1]) < self._expandable_size(fits[i]):
                i += 1
            block = fits[i]
        else:
            block = min(candidates, key=lambda b: (b.size, b.address))
        limit = self.settings.max_split_size
        if size < limit <= block.size:  # do not return an oversize block for a smaller request
            return None
        if size >= limit and block.size >= size + self.settings.max_non_split_rounding_size:  # oversize: within 20 MiB
            return None
        return block

    @staticmethod
    def _expandable_size(block: Block) -> int:
        blocks = block.segment.blocks
        i = blocks.index(block)
        after = blocks[i + 1] if i + 1 < len(blocks) else None
        return block.size + (after.size if after is not None and not after.mapped else 0)

    def _should_split(self, block: Block, size: int, small: bool) -> bool:
        """Rule 5, :func:`helpers.allocator.rules.should_split`."""
        return should_split(size, block.size, small, self.settings.max_split_size, self.settings.expandable_segments)

    def _split(self, block: Block, size: int) -> None:
        blocks = block.segment.blocks
        rest = Block(block.address + size, block.size - size, block.segment)
        blocks.insert(blocks.index(block) + 1, rest)
        block.size = size

    def _merge(self, block: Block) -> Block:
        """Rule 6, ``try_merge_blocks``: join free neighbours with the same mapped state."""
        blocks = block.segment.blocks
        i = blocks.index(block)
        for j in (i + 1, i - 1):  # the next block, then the previous one
            if 0 <= j < len(blocks):
                other = blocks[j]
                if not other.allocated and other.mapped == block.mapped:
                    block.address = min(block.address, other.address)
                    block.size += other.size
                    blocks.remove(other)
        return block

    def _fits_capacity(self, nbytes: int) -> bool:
        return self.capacity is None or self.reserved + nbytes <= self.capacity

    def _new_block(self, size: int, small: bool) -> Block | None:
        """Rules 3 and 7, ``alloc_block``: a new segment from the driver, or None if it does not fit."""
        if (self.allowed_memory_maximum is not None
                and self.reserved + get_allocation_size(size) > self.allowed_memory_maximum):
            return None  # set_per_process_memory_fraction's cap
        if self.settings.expandable_segments:
            return self._expand(size, small)  # only the pages it maps must fit
        if not self._fits_capacity(get_allocation_size(size)):
            return None
        seg = Segment(self._take_addresses(), small)
        seg.blocks.append(Block(seg.address, get_allocation_size(size), seg))
        self.segments.append(seg)
        self._reserve(get_allocation_size(size))
        self.num_device_alloc += 1
        self.trace.append({"action": "segment_alloc", "addr": seg.address, "size": get_allocation_size(size)})
        return seg.blocks[0]

    def _retry(self, size: int, small: bool) -> Block | None:
        self.num_alloc_retries += 1
        return self._new_block(size, small)

    def _take_addresses(self) -> int:
        address = self._next_address
        self._next_address += _ADDRESS_STEP
        return address

    def _reserve(self, nbytes: int) -> None:
        self.reserved += nbytes
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def _release_segment(self, seg: Segment) -> None:
        self.segments.remove(seg)
        self.reserved -= seg.size
        self.num_device_free += 1
        self.trace.append({"action": "segment_free", "addr": seg.address, "size": seg.size})

    def _release_oversize(self, size: int, small: bool) -> bool:
        """Rule 8, ``release_available_cached_blocks``: free cached oversize segments."""
        limit = self.settings.max_split_size
        if self.settings.max_split_size_mb is None or self.settings.expandable_segments:
            return False
        key = max(size, limit)
        whole = sorted((s.blocks[0].size, s.address, s) for s in self.segments
                       if s.small == small and len(s.blocks) == 1 and not s.blocks[0].allocated)
        big_enough = [s for n, _, s in whole if n >= key]
        if big_enough:
            self._release_segment(big_enough[0])
            return True
        released = 0
        for n, _, s in reversed(whole):  # several oversize ones, the largest first
            if released >= key or n < limit:
                break
            released += n
            self._release_segment(s)
        return released >= key

    def _release_cached(self) -> bool:
        """Rules 8 and 9, ``release_cached_blocks``: whole free segments (and free pages) go back."""
        for seg in list(self.segments):
            if seg.expandable:
                self._unmap_free_pages(seg)
            elif len(seg.blocks) == 1 and not seg.blocks[0].allocated:
                self._release_segment(seg)
        return True

    # -- expandable segments (rule 10) -----------------------------------------------
    def _page(self, small: bool) -> int:
        return K_SMALL_BUFFER if small else K_LARGE_BUFFER

    def _new_expandable_segment(self, small: bool) -> Segment:
        # Address space for 1 1/8 of the GPU's memory, as find_expandable_block reserves.
        total = self.total_memory
        span = (total + total // 8) if total is not None else 2**40
        page = self._page(small)
        seg = Segment(self._take_addresses(), small, expandable=True)
        seg.blocks.append(Block(seg.address, -(-span // page) * page, seg, mapped=False))
        self.segments.append(seg)
        return seg

    def _expand(self, size: int, small: bool) -> Block | None:
        """``try_allocate_expandable_block``: map pages at the lowest address where the request fits.

        ``find_expandable_block`` looks through the pool's expandable segments,
        in address order, for the first unmapped range that, with a free block
        just before it and the free or unmapped blocks after it, holds ``size``
        bytes; when none does, it opens a new expandable segment.  Then only the
        missing pages are mapped, run by run (``map_block``): the unmapped range
        up to the request's size, rounded up to whole pages; if that is not
        enough, it merges with the free block after it and the next unmapped
        range is mapped for what is still missing.  Each ``map_block`` either
        maps all its pages or none (out of memory); pages an earlier one mapped
        stay mapped.
        """
        segments = sorted((s for s in self.segments if s.expandable and s.small == small), key=lambda s: s.address)
        candidate = None
        for seg in segments:
            blocks = seg.blocks
            for i, b in enumerate(blocks):
                if b.mapped:
                    continue
                start = i - 1 if i > 0 and not blocks[i - 1].allocated else i  # a free block just before
                room, j = 0, start
                while j < len(blocks) and not blocks[j].allocated and room < size:
                    room += blocks[j].size
                    j += 1
                if room >= size:
                    candidate = blocks[start]
                    break
            if candidate is not None:
                break
        if candidate is None:
            candidate = self._new_expandable_segment(small).blocks[0]
        if not candidate.mapped:
            candidate = self._map_block(candidate, min(candidate.size, size))
            if candidate is None:
                return None
        while candidate.size < size:  # free, then unmapped: map what is still missing
            blocks = candidate.segment.blocks
            following = blocks[blocks.index(candidate) + 1]
            candidate = self._map_block(following, min(size - candidate.size, following.size))
            if candidate is None:
                return None
        return candidate

    def _map_block(self, block: Block, nbytes: int) -> Block | None:
        """``map_block``: map the pages under the first ``nbytes`` of the unmapped
        ``block`` (whole pages), merge them with free neighbours, and return the
        merged free block; None when the pages do not fit the capacity."""
        seg, page = block.segment, self._page(block.segment.small)
        take = min(-(-nbytes // page) * page, block.size)
        if not self._fits_capacity(take):
            return None
        blocks = seg.blocks
        if take < block.size:  # the rest stays unmapped
            blocks.insert(blocks.index(block) + 1, Block(block.address + take, block.size - take, seg, mapped=False))
            block.size = take
        block.mapped = True
        self._reserve(take)
        self.num_device_alloc += 1
        self.trace.append({"action": "segment_map", "addr": block.address, "size": take})
        return self._merge(block)

    def _unmap_free_pages(self, seg: Segment) -> None:
        """``unmap_block``: every whole page inside a free block goes back to the driver."""
        page = self._page(seg.small)
        for b in [b for b in seg.blocks if b.mapped and not b.allocated]:
            lo = seg.address + -(-(b.address - seg.address) // page) * page
            hi = seg.address + (b.address + b.size - seg.address) // page * page
            if hi <= lo:
                continue
            i = seg.blocks.index(b)
            parts = [Block(b.address, lo - b.address, seg), Block(lo, hi - lo, seg, mapped=False),
                     Block(hi, b.address + b.size - hi, seg)]
            seg.blocks[i:i + 1] = [p for p in parts if p.size]
            self.reserved -= hi - lo
            self.num_device_free += 1
            self.trace.append({"action": "segment_unmap", "addr": lo, "size": hi - lo})
            self._merge(next(p for p in seg.blocks if p.address == lo))
        if all(not b.mapped for b in seg.blocks):
            self.segments.remove(seg)




@dataclass
class Replay:
    """Allocated and reserved bytes after every entry of an allocation log.

    Attributes:
        settings: the allocator's options.
        allocated, reserved, requested: bytes after each log entry (lists as long as the log).
        allocator: the :class:`CachingAllocator` in its final state.
        failed_at: index of the entry that ran out of memory, or None.
        error: that :class:`AllocatorOutOfMemory`, or None.
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
        """The position in ``allocator.trace`` at which log entry ``index`` begins.

        What :func:`helpers.teaching.plots.plot_memory_map` needs to mark a
        moment of the log (e.g. where the second step starts) on the trace's
        time axis.  ``index`` may be the log's length (the end).
        """
        return self._trace_at(index)

    def _trace_at(self, index: int | None) -> int | None:
        return None if index is None else bisect.bisect_left(self._entry_of_trace, index)



def replay(log: Iterable, capacity: int | None = None, settings: AllocatorSettings | str | None = None,
           empty_cache_at: Iterable[int] = (), total_memory: int | None = None) -> Replay:
    """Replay an allocation log through a :class:`CachingAllocator`.

    Args:
        log: entries whose first three fields are ``(serial, kind, nbytes)``:
            :attr:`helpers.record.StepProfile.allocation_log` or
            :attr:`helpers.engine.counting.StorageTracker.log`.  ``kind`` is
            ``"alloc"``, ``"free"`` or ``"resize"`` (a resize frees the old
            block after allocating the new one, as ``resize_`` copies).
        capacity: bytes the allocator may reserve (see :class:`CachingAllocator`).
        settings: :class:`AllocatorSettings` or a ``PYTORCH_CUDA_ALLOC_CONF`` string.
        empty_cache_at: log indices before which ``torch.cuda.empty_cache()`` runs.
        total_memory: the GPU's memory (see :class:`CachingAllocator`).

    Returns:
        a :class:`Replay`; on out of memory it stops there, with ``failed_at``
        and ``error`` set (it does not raise).

    Raises:
        ValueError: for an entry of unknown kind or a free of a storage never allocated.
    """
    alloc = CachingAllocator(capacity, settings, total_memory)
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
    """Replay a log as on a GPU of ``gpu_bytes``: does the step fit, reserved memory and all?

    The allocator may reserve what the GPU has less the CUDA context
    (``context``, by default the assumed :data:`helpers.gpus.CUDA_CONTEXT_BYTES`).
    Under that cap it frees its cache and retries before it gives up, as a
    real one does, so the step fits exactly when the returned replay's
    ``error`` is None.  Expandable segments reserve addresses for 1 1/8 of
    ``gpu_bytes``, as PyTorch does of the card's ``totalGlobalMem``.

    Raises:
        ValueError: when the context leaves no memory, or as :func:`replay` does.
    """
    if gpu_bytes <= context:
        raise ValueError(f"a GPU of {gpu_bytes} bytes leaves nothing beside a CUDA context of {context} bytes")
    return replay(log, capacity=gpu_bytes - context, settings=settings, total_memory=gpu_bytes)


def smallest_capacity(log: Iterable, settings: AllocatorSettings | str | None = None, start: int = 0,
                      step: int = K_ROUND_LARGE, limit: int = 2**50) -> int:
    """The smallest capacity, from ``start`` upward in steps of ``step`` bytes, at which ``log`` replays.

    A scan, not a bisection: under memory pressure the allocator's choices
    change, so success need not be monotonic in the capacity; this returns the
    first capacity of the scan that works.

    Args:
        log: as for :func:`replay`.
        settings: the allocator's options.
        start: the first capacity tried, in bytes (a good one: the engine's
            peak, rounded up to ``step``).
        step: bytes added per try (default 2 MiB).
        limit: give up above this many bytes.

    Raises:
        ValueError: for a step that is not positive, or when nothing up to ``limit`` works.
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
