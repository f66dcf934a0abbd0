"""The engine: what measures the memory of a step, on a GPU or simulated.

Read :mod:`helpers.engine.counting` first: the storage-counting mode that makes every simulated number. The others:

* :mod:`helpers.engine.cuda_rules`: where a CUDA GPU keeps other tensors than the CPU's kernels (autocast lists,
  dropout masks, attention, RMSNorm, Adam's step counters), a simulated GPU's capacity;
* :mod:`helpers.engine.backends`: a real GPU's counters or the simulation, behind one object;
* :mod:`helpers.engine.meter`: :class:`~helpers.engine.meter.Meter`, one API over both backends, the engine's one face;
* :mod:`helpers.engine.patterns`: calls written from their first run's allocations (QLoRA's dequantization);
* :mod:`helpers.engine.trace`: per-module events of a step.
"""
