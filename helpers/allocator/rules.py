"""The CUDA caching allocator's size rules, once, named as in ``c10/cuda/CUDACachingAllocator.cpp`` (sizes in bytes):
the engine's count uses :func:`round_up`, the allocator model and lesson 00's size table the rest.
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
    """The smallest multiple of ``block`` (default 512, ``kMinBlockSize``) >= ``nbytes`` (0 stays 0).

    Raises:
        ValueError: if ``nbytes`` is negative or ``block`` is not positive.
    """
    if nbytes < 0 or block <= 0:
        raise ValueError(f"round_up needs nbytes >= 0 and block > 0, got {nbytes}, {block}")
    return -(-nbytes // block) * block


def round_size(nbytes: int, divisions: int = 0) -> int:
    """``round_size``: a request rounded up to a multiple of 512 bytes, at least 512; with ``divisions``
    (``roundup_power2_divisions``), a request above ``512 * divisions`` goes to the next of ``divisions`` steps between
    two powers of two (``roundup_power2_next_division``): 84 MiB with 4 takes 96 MiB.

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
    """``get_allocation_size``: bytes of the segment that a rounded request of ``size`` opens: 2 MiB for a small
    request (at most 1 MiB), 20 MiB for one below 10 MiB, else the request rounded up to 2 MiB."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return round_up(size, K_ROUND_LARGE)


def should_split(size: int, block_size: int, small: bool, max_split_size: int = 2**63,
                 expandable: bool = False) -> bool:
    """``should_split``: whether the rest of a ``block_size`` block serving a rounded ``size`` is split off: in the
    small pool (or expandable segments) a rest of at least 512 bytes, in the large pool one of *more than* 1 MiB, for
    requests below ``max_split_size``.  An unsplit rest counts in ``memory_allocated()``."""
    rest = block_size - size
    if small or expandable:
        return rest >= K_MIN_BLOCK
    return size < max_split_size and rest > K_SMALL_SIZE


def allocation_size(nbytes: int) -> int:
    """Bytes the allocator asks the driver for when no cached block fits (CUDA's "Tried to allocate"):
    :func:`get_allocation_size` of :func:`round_size`, ``allocation_size(49 * MiB) == 50 * MiB``.

    Raises:
        ValueError: if ``nbytes`` is negative.
    """
    return get_allocation_size(round_size(nbytes))


def block_bytes(nbytes: int, free_block: int | None = None) -> int:
    """Bytes of ``memory_allocated()`` a request of ``nbytes`` occupies, served by a ``free_block`` (default a new
    segment of :func:`allocation_size`) split only as :func:`should_split` says: a 49 MiB tensor in a new 50 MiB segment
    occupies 50 MiB.

    Raises:
        ValueError: for a negative request or a block too small for it.
    """
    size = round_size(nbytes)
    block = allocation_size(nbytes) if free_block is None else free_block
    if block < size:
        raise ValueError(f"a block of {block} bytes cannot hold a request of {size} bytes")
    return block if not should_split(size, block, size <= K_SMALL_SIZE) else size
