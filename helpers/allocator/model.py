"""A model of PyTorch's CUDA caching allocator: segments, blocks, reserved memory (lesson 06).

Each rule is a function or branch of ``DeviceCachingAllocator`` in ``c10/cuda/CUDACachingAllocator.cpp``, named where
it is used:

1. ``round_size``: a request is rounded up to a multiple of 512 bytes (with ``roundup_power2_divisions``, to the next
   of that many steps between two powers of two).  A 0-byte tensor allocates nothing; 1 EB or more fails at once.
2. ``get_pool``: requests of at most 1 MiB go to the *small* pool, the rest to the *large*; blocks never change pool.
3. ``get_allocation_size``: a new *segment* from the driver is 2 MiB for a small request, 20 MiB for a request under
   10 MiB, else the request rounded up to 2 MiB.
4. ``get_free_block``: best fit, the smallest large-enough free block of the pool (lowest address among equals).  With
   ``max_split_size_mb``, a request below it never takes a block at or above it, and a larger request takes one only
   if it is less than ``max_non_split_rounding_mb`` (20 MiB) larger.
5. ``should_split``: the rest of a block is split off if it is at least 512 bytes (small pool, or expandable segments),
   or more than 1 MiB and the request is below ``max_split_size`` (large pool).  An unsplit rest stays in the
   allocated block and counts in ``memory_allocated()``.
6. ``free_block``: a freed block merges with free neighbours of its segment.
7. ``alloc_block``: a new segment fails if it would take reserved memory past the capacity (or the memory fraction).
8. ``malloc``: then the allocator frees cached oversize blocks (``release_available_cached_blocks``, only with
   ``max_split_size_mb``), then every free whole segment (``release_cached_blocks``), retrying after each; then it
   raises out of memory.
9. ``empty_cache`` (``release_cached_blocks``): segments with no allocated block (and only they) go back to the driver.
10. ``expandable_segments:True`` (``try_allocate_expandable_block``, ``find_expandable_block``, ``map_block``,
    ``unmap_block``): one segment per pool, with addresses for 1 1/8 of the GPU's memory, grows by mapping pages (2 MiB
    small, 20 MiB large) at the lowest address where free and unmapped space fit the request; blocks split whenever the
    rest is at least 512 bytes; ``empty_cache`` unmaps every free page; the snapshot has one entry per contiguous
    mapped range.

All sizes are bytes.  Not modelled: streams and their events (every free is immediate), CUDA graph pools, the options
:class:`~helpers.allocator.settings.AllocatorSettings` refuses, and memory kernels allocate outside tensors.  Addresses
are the model's own, ascending, unless ``segment_addresses`` gives the driver's (rule 4 breaks ties by address, so where
the driver puts a segment can change which block a later request takes, and with it reserved memory).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..config import check_int
from ..units import cuda_size
from .rules import K_LARGE_BUFFER, K_SMALL_BUFFER, K_SMALL_SIZE, get_allocation_size, round_size, round_up, should_split
from .settings import AllocatorSettings

#: Where the model puts segments: each new one at the next multiple of this (readable; real ones are the driver's).
_ADDRESS_STEP = 2**40

#: ``one_exa_bytes``: requests of this many bytes or more fail at once.
_ONE_EXA_BYTES = 2**60


class AllocatorOutOfMemory(MemoryError):
    """A request the simulated GPU cannot serve, with the allocator's figures in bytes: ``requested`` from the driver
    ("Tried to allocate"), ``allocated`` and ``reserved`` at the failure, and ``largest_free``, the largest free
    cached block."""

    def __init__(self, message: str, requested: int, allocated: int, reserved: int, largest_free: int):
        super().__init__(message)
        self.requested, self.allocated, self.reserved, self.largest_free = requested, allocated, reserved, largest_free


@dataclass(eq=False)
class Block:
    """A contiguous range of one segment: allocated to one tensor, free, or unmapped.

    Attributes:
        address, size: where it starts (the model's address space) and its bytes.
        segment: the :class:`Segment` it belongs to (None for a 0-byte tensor's empty block).
        allocated, requested: in use by a tensor, and the bytes that tensor asked for, not rounded (``requested_size``).
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
    """Memory obtained from the driver in one piece (``cudaMalloc``), or one ``expandable`` segment (rule 10): its first
    byte ``address``, ``small`` (in the small pool: requests of at most 1 MiB), and its ``blocks``, in address order,
    covering it without gaps."""

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
        capacity: bytes the allocator may reserve (the GPU's memory less the CUDA context); ``None``: unlimited.
        settings: :class:`AllocatorSettings`, or a ``PYTORCH_CUDA_ALLOC_CONF`` string.
        total_memory: the GPU's memory in bytes (``totalGlobalMem``), for expandable segments' address space and the
            memory fraction; default the capacity (with neither: 1 TiB of addresses).
        memory_fraction: ``torch.cuda.set_per_process_memory_fraction``: a segment is refused when reserved memory
            plus its ``get_allocation_size`` would pass this fraction of ``total_memory`` (``alloc_block``'s check);
            ``None``: the settings' ``per_process_memory_fraction``, if any.
        segment_addresses: the address of each new segment, in the order they are opened, as a real GPU's snapshot
            records them (its ``segment_alloc`` events); after them, and by default, the model's own.

    Attributes:
        allocated: bytes in allocated blocks (``torch.cuda.memory_allocated()``).
        requested: bytes the live tensors asked for, rounded to 512 (the engine's count).
        reserved: bytes held from the driver (``torch.cuda.memory_reserved()``).
        peak_allocated, peak_reserved, segments: their highest values so far; the live :class:`Segment` objects.
        trace: every action, shaped like ``torch.cuda.memory._snapshot()``'s ``device_traces`` entries: ``action``
            (``alloc``, ``free_completed``, ``segment_alloc``, ``segment_free``, ``segment_map``, ``segment_unmap``,
            ``oom``), ``addr``, ``size``, and ``serial`` (the engine's storage).
        num_alloc_retries, num_ooms, num_device_alloc, num_device_free: as in ``torch.cuda.memory_stats()``.

    Raises:
        ValueError: for a capacity or total memory that is not a positive number of bytes, or a bad fraction.
    """

    def __init__(self, capacity: int | None = None, settings: AllocatorSettings | str | None = None,
                 total_memory: int | None = None, memory_fraction: float | None = None,
                 segment_addresses: Iterable[int] | None = None):
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
        self._driver_addresses = iter(segment_addresses or ())

    # -- the public operations -----------------------------------------------------
    def malloc(self, nbytes: int, serial: int | None = None) -> Block:
        """Allocate a block for a tensor of ``nbytes`` bytes (``DeviceCachingAllocator::malloc``); a 0-byte tensor gets
        an empty block outside every segment, as in PyTorch.

        Raises:
            AllocatorOutOfMemory: when no cached block fits and the capacity is reached (at once from 2**60 bytes).
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
        """``torch.cuda.set_per_process_memory_fraction``: cap reserved memory at ``fraction`` of ``total_memory``.

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
        """The segments and their blocks as text, one segment per line, in address order: each block ``[size state]``,
        ``allocated`` (and the tensor's size if smaller: an unsplit rest) or ``free``; unmapped parts left out."""
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
        """The segments, shaped like ``torch.cuda.memory._snapshot()["segments"]``, in address order.

        Each segment: ``address``, ``total_size``, ``allocated_size``, ``segment_type`` (``"small"``/``"large"``),
        ``is_expandable``, and ``blocks`` (``address``, ``size``, ``requested_size``, ``state``: ``"active_allocated"``
        or ``"inactive"``, ``serial``).  An expandable segment gives one entry per contiguous mapped range, as
        PyTorch's ``snapshot()`` does."""
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
            # A block that unmapped space follows counts as large as it can grow: a larger one that cannot wins.
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
        address = next(self._driver_addresses, None)
        if address is None:
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
        """Rule 10, ``try_allocate_expandable_block``: map pages at the lowest address where the request fits.

        ``find_expandable_block``: the first unmapped range (the pool's expandable segments in address order) that,
        with a free block just before it and the free or unmapped blocks after it, holds ``size`` bytes; else a new
        segment.  Only the missing pages are mapped (``map_block``, all or none); pages mapped earlier stay mapped."""
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
        """``map_block``: map the whole pages under the first ``nbytes`` of ``block``, merged with free neighbours; None
        when they do not fit."""
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
