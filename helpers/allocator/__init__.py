"""A model of PyTorch's CUDA caching allocator (lesson 06): its size rules (:mod:`helpers.allocator.rules`), options
(:mod:`helpers.allocator.settings`), the allocator itself (:mod:`helpers.allocator.model`), and a step's allocation log
replayed through it (:mod:`helpers.allocator.replay`).
"""

from .model import AllocatorOutOfMemory, CachingAllocator
from .replay import Replay, replay, replay_on_gpu, smallest_capacity
from .settings import AllocatorSettings
from .rules import allocation_size, block_bytes, get_allocation_size, round_size, round_up, should_split

__all__ = ["AllocatorOutOfMemory", "AllocatorSettings", "CachingAllocator", "Replay", "allocation_size",
           "block_bytes", "get_allocation_size", "replay", "replay_on_gpu", "round_size", "round_up",
           "should_split", "smallest_capacity"]
