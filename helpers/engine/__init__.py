"""The engine: what measures the memory of a step, on a GPU or simulated.

Read :mod:`helpers.engine.counting` first: the storage-counting mode that makes
every simulated number.  The other modules refine it:

* :mod:`helpers.engine.cuda_rules`: where a CUDA GPU keeps other tensors than
  the CPU's kernels (autocast lists, dropout masks, attention, RMSNorm, Adam's
  step counters), a simulated GPU's capacity;
* :mod:`helpers.engine.backends`: a real GPU's counters or the simulation,
  behind one object;
* :mod:`helpers.engine.meter`: :class:`~helpers.engine.meter.Meter`, one API
  over both backends, and the engine's one face: the step runner, FSDP and
  every study talk to it only (the backend object and the tracker are its own);
* :mod:`helpers.engine.trace`: per-module events of a step.
"""
