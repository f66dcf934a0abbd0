"""A model of PyTorch's CUDA caching allocator (lesson 06).

* :mod:`helpers.allocator.rules`: the size rules, named as in
  ``c10/cuda/CUDACachingAllocator.cpp``;
* :mod:`helpers.allocator.model`: the allocator itself, which replays a step's
  allocation log: segments, blocks, reserved memory, fragmentation.
"""

from .model import (AllocatorOutOfMemory, AllocatorSettings, CachingAllocator, Replay, replay, replay_on_gpu,
                    smallest_capacity)
from .rules import allocation_size, block_bytes, get_allocation_size, round_size, round_up, should_split

__all__ = ["AllocatorOutOfMemory", "AllocatorSettings", "CachingAllocator", "Replay", "allocation_size",
           "block_bytes", "get_allocation_size", "replay", "replay_on_gpu", "round_size", "round_up",
           "should_split", "smallest_capacity"]
