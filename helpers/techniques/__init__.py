"""The memory-saving techniques a profiled step can use.

* :mod:`.checkpointing`: activation checkpointing by segments (lesson 04);
* :mod:`.optimizers`: the optimizers and their states (lessons 01 and 05a);
* :mod:`.masks`: ReLUs that save a 1-byte or 1-bit mask (lesson 02);
* :mod:`.sharding`: ZeRO's stages and DeepSpeed's estimators as formulas
  (lesson 07; FSDP2 itself is run by :mod:`helpers.fsdp`);
* offloading saved tensors to host memory belongs to each backend
  (:meth:`helpers.engine.backends.Backend.offload`), since only the backend
  knows what host memory is.
"""

from .checkpointing import Checkpointed, frozen_batchnorm_stats
from .optimizers import STATE_BYTES, STEP_TEMPORARY_BYTES, StepInBackward, make_optimizer

__all__ = ["Checkpointed", "STATE_BYTES", "STEP_TEMPORARY_BYTES", "StepInBackward", "frozen_batchnorm_stats",
           "make_optimizer"]
