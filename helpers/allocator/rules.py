"""The CUDA caching allocator's size rules, once, named as in the C++.

Every rule is a constant or function of ``c10/cuda/CUDACachingAllocator.cpp``
(PyTorch 2.14.1).  The engine's count (:mod:`helpers.engine.counting`) uses
:func:`round_up`; the allocator model (:mod:`helpers.allocator.model`) and
lesson 00's size table use the rest.

All sizes are bytes; 1 MiB = 2**20 bytes.
"""

from __future__ import annotations

from ..units import MiB

K_MIN_BLOCK = 512             # kMinBlockSize: every block is a multiple of this
K_SMALL_SIZE = 1 * MiB        # kSmallSize: the largest "small" request
K_SMALL_BUFFER = 2 * MiB      # kSmallBuffer: small segments; expandable small-pool page
K_MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc: requests below this get a kLargeBuffer segment
K_LARGE_BUFFER = 20 * MiB     # kLargeBuffer: 1-10 MiB requests' segments; expandable large-pool page
K_ROUND_LARGE = 2 * MiB       # kRoundLarge: larger segments are rounded up to this


def round_up(nbytes: int, block: int = K_MIN_BLOCK) -> int:
    """Round ``nbytes`` up to a whole number of allocator blocks.

    Args:
        nbytes: a size in bytes, >= 0.
        block: the block size in bytes (default 512, ``kMinBlockSize``).

    Returns:
        The smallest multiple of ``block`` that is >= ``nbytes`` (0 stays 0:
        an empty tensor allocates nothing).

    Raises:
        ValueError: if ``nbytes`` is negative or ``block`` is not positive.
    """
    if nbytes < 0 or block <= 0:
        raise ValueError(f"round_up needs nbytes >= 0 and block > 0, got {nbytes}, {block}")
    return -(-nbytes // block) * block


def round_size(nbytes: int, divisions: int = 0) -> int:
    """``round_size``: a request rounded up to a multiple of 512 bytes, at least 512.

    With ``divisions`` (``roundup_power2_divisions``, a power of two), a
    request larger than ``512 * divisions`` bytes is rounded up instead to the
    next of ``divisions`` equal steps between two powers of two
    (``roundup_power2_next_division``): 84 MiB with 4 divisions takes 96 MiB
    (64 MiB plus steps of 16 MiB).  A power of two stays as it is.

    Raises:
        ValueError: for a negative size.
    """
    if nbytes < 0:
        raise ValueError(f"a request must be >= 0 bytes, got {nbytes}")
    if nbytes < K_MIN_BLOCK:
        return K_MIN_BLOCK
    if divisions > 1 and nbytes > K_MIN_BLOCK * divisions:
        if nbytes & (nbytes - 1) == 0:
            return nbytes
        floor = 1 << (nbytes.bit_length() - 1)
        step = floor >> (divisions.bit_length() - 1)
        if step == 0:
            return floor << 1
        low = nbytes & ~(step - 1)
        return nbytes if low == nbytes else low + step
    return round_up(nbytes)


def get_allocation_size(size: int) -> int:
    """``get_allocation_size``: bytes of the segment that a rounded request of ``size`` opens.

    2 MiB for a small request (at most 1 MiB), 20 MiB for one below 10 MiB,
    else the request rounded up to 2 MiB.
    """
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return round_up(size, K_ROUND_LARGE)


def should_split(size: int, block_size: int, small: bool, max_split_size: int = 2**63,
                 expandable: bool = False) -> bool:
    """``should_split``: whether the rest of a block of ``block_size`` bytes that
    serves a rounded request of ``size`` bytes is split off as a free block.

    Small pool (or expandable segments): a rest of at least 512 bytes.  Large
    pool: a rest of *more than* 1 MiB, and only for requests below
    ``max_split_size`` (``max_split_size_mb``; no limit by default).  An
    unsplit rest stays inside the allocated block and counts in
    ``memory_allocated()``.
    """
    rest = block_size - size
    if small or expandable:
        return rest >= K_MIN_BLOCK
    return size < max_split_size and rest > K_SMALL_SIZE


def allocation_size(nbytes: int) -> int:
    """Bytes the caching allocator asks the driver for when no cached block fits.

    :func:`get_allocation_size` of :func:`round_size`: this is also the size
    CUDA's out-of-memory message reports as "Tried to allocate".

    Example: ``allocation_size(49 * MiB) == 50 * MiB``.

    Raises:
        ValueError: if ``nbytes`` is negative.
    """
    return get_allocation_size(round_size(nbytes))


def block_bytes(nbytes: int, free_block: int | None = None) -> int:
    """Bytes of ``memory_allocated()`` a request of ``nbytes`` occupies.

    The allocator hands out a free block (a cached one of ``free_block`` bytes,
    or by default a new segment of :func:`allocation_size` bytes) and splits off
    the rest only if :func:`should_split` says so: a 49 MiB tensor in a new
    50 MiB segment occupies 50 MiB (its 1 MiB rest is not split off).

    Args:
        nbytes: the request in bytes, >= 0.
        free_block: size of the free block that serves it, in bytes, at least
            the request rounded up to 512 bytes; default a new segment.

    Raises:
        ValueError: for a negative request or a block too small for it.
    """
    size = round_size(nbytes)
    block = allocation_size(nbytes) if free_block is None else free_block
    if block < size:
        raise ValueError(f"a block of {block} bytes cannot hold a request of {size} bytes")
    return block if not should_split(size, block, size <= K_SMALL_SIZE) else size
