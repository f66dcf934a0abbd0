"""The memory-saving techniques a profiled step can use.

Each module that a step's options reach holds its own step of the step
runner's recipe (:data:`helpers.step.RECIPE`), a function of the runner that
reads the technique's options:

* :mod:`.precision`: the parameters' dtype, autocast and the GradScaler (lessons 04, 09);
* :mod:`.checkpointing`: activation checkpointing by segments, Hugging Face's own,
  transformer blocks (lessons 04, 08);
* :mod:`.lora`: LoRA adapters with ``peft`` (lesson 09);
* :mod:`.quantization`: QLoRA's frozen weights in NF4 (lesson 09);
* :mod:`.optimizers`: the optimizers and their states (lessons 01 and 05a);
* :mod:`.masks`: ReLUs that save a 1-byte or 1-bit mask (lesson 02);
* :mod:`.sharding`: ZeRO's stages and DeepSpeed's estimators as formulas
  (lesson 07; FSDP2 itself is run by :mod:`helpers.fsdp`);
* offloading saved tensors to host memory belongs to the engine
  (:meth:`helpers.engine.meter.Meter.offload`), since only the backend
  knows what host memory is.
"""

from .checkpointing import Checkpointed, frozen_batchnorm_stats
from .optimizers import STATE_BYTES, STEP_TEMPORARY_BYTES, StepInBackward, make_optimizer

__all__ = ["Checkpointed", "STATE_BYTES", "STEP_TEMPORARY_BYTES", "StepInBackward", "frozen_batchnorm_stats",
           "make_optimizer"]
