"""The memory-saving techniques a profiled step can use; each module holds its steps of :data:`helpers.step.RECIPE`.

* :mod:`.precision`: the parameters' dtype, autocast and the GradScaler (lessons 04, 09);
* :mod:`.checkpointing`: activation checkpointing by segments, Hugging Face's own, transformer blocks (lessons 04, 08);
* :mod:`.lora`: LoRA adapters with ``peft``; :mod:`.quantization`: the recipe's steps that quantize the frozen weights
  (QLoRA, lesson 09), in bitsandbytes' formats (:mod:`.bnb`) or torchao's NF4 (:mod:`.torchao_nf4`);
* :mod:`.optimizers`: the optimizers and their states (lessons 01 and 05a);

ReLUs that save a mask (:mod:`helpers.masks`) and ZeRO's formulas (:mod:`helpers.sharding`) are studies, not steps of
the recipe.  Offloading saved tensors belongs to the engine (:meth:`helpers.engine.meter.Meter.offload`).
"""

from .checkpointing import Checkpointed, frozen_batchnorm_stats
from .optimizers import STATE_BYTES, STEP_TEMPORARY_BYTES, StepInBackward, make_optimizer

__all__ = ["Checkpointed", "STATE_BYTES", "STEP_TEMPORARY_BYTES", "StepInBackward", "frozen_batchnorm_stats",
           "make_optimizer"]
