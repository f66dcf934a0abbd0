"""A model of PyTorch's CUDA caching allocator (lesson 06).

* :mod:`helpers.allocator.rules`: the size rules, named as in ``c10/cuda/CUDACachingAllocator.cpp``;
* :mod:`helpers.allocator.settings`: its options (``PYTORCH_CUDA_ALLOC_CONF``);
* :mod:`helpers.allocator.model`: the allocator itself: segments, blocks, ``malloc``, ``free``, ``empty_cache``,
  snapshots;
* :mod:`helpers.allocator.replay`: a step's allocation log replayed through it: reserved memory, fragmentation, does
  it fit a card.
"""

from .model import AllocatorOutOfMemory, CachingAllocator
from .replay import Replay, replay, replay_on_gpu, smallest_capacity
from .settings import AllocatorSettings
from .rules import allocation_size, block_bytes, get_allocation_size, round_size, round_up, should_split

__all__ = ["AllocatorOutOfMemory", "AllocatorSettings", "CachingAllocator", "Replay", "allocation_size",
           "block_bytes", "get_allocation_size", "replay", "replay_on_gpu", "round_size", "round_up",
           "should_split", "smallest_capacity"]
