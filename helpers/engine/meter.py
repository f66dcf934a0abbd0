"""One API over both backends: bytes allocated now and at peak.

Introduced in lesson 00; every measurement in the lessons goes through a
:class:`Meter`, and so does everything that runs a step (:mod:`helpers.step`,
:mod:`helpers.fsdp`, the studies): the meter is the engine's one face.  Behind
it, the backend object (:mod:`helpers.engine.backends`) answers what differs
between a real GPU and the simulation, and the storage tracker
(:mod:`helpers.engine.counting`) counts on both.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from ..config import check_int
from ..units import cuda_size
from .backends import get_backend
from .counting import LogEntry, StorageTracker
from .cuda_rules import host_side_steps


class Meter:
    """One API over both backends: bytes allocated now and at peak.

    Use it as a context manager.  Tensors and models made inside it on
    ``meter.device`` are measured::

        with Meter("auto") as meter:
            x = torch.ones(1024, 1024, device=meter.device)   # 4 MiB
            y = x * 2                                          # 4 MiB more
            del y
        meter.peak()  # 8 MiB: 8388608 bytes, on either backend

    In simulated mode the ``with`` block runs under ``FakeTensorMode``: tensors
    have no values, and data-dependent operations (``.item()``, printing
    values) are not possible inside it.

    Counts are relative to entering the block: on a GPU, memory that other
    code already held is not included.  After the block, :meth:`allocated`,
    :meth:`peak` and :meth:`reserved` return the values at exit.

    Args:
        device: ``"auto"`` (cuda when present, else simulated), ``"cuda"`` or
            ``"simulated"``.
        capacity: behave as a GPU of this many bytes.  Simulated: see
            :class:`helpers.engine.cuda_rules.SimulatedTracker` (the assumed
            :data:`helpers.gpus.CUDA_OVERHEAD_BYTES` is taken off it).  On cuda: ``torch.cuda.set_per_process_memory_fraction``
            limits the caching allocator to ``capacity`` (restored on exit),
            so a large GPU fails as a smaller one would.  Exceeding it raises
            ``torch.OutOfMemoryError``.
        attention: simulated only: the kernel of ``scaled_dot_product_attention``
            (see :data:`helpers.config.ATTENTION`).
        count_storages: run the storage tracker (default).  False leaves it
            out, so that no Python runs between operations (for timing): on a
            GPU the real counters still count; simulated, nothing is counted.
        tracker: the :class:`helpers.engine.counting.StorageTracker` that
            counts storages (both backends; on cuda it explains the real
            counters by category); default: the backend's.  :mod:`helpers.fsdp`
            passes one that also notes what FSDP2's operators make.

    Attributes:
        backend: ``"cuda"`` or ``"simulated"``: say it next to every number.
        device: the ``torch.device`` to create tensors on inside the block.

    Raises:
        ValueError: for an unknown device, ``"cuda"`` without a GPU, or a
            capacity that is not a positive number of bytes (or, on cuda,
            exceeds the GPU's memory).
    """

    def __init__(self, device: str = "auto", capacity: int | None = None, attention: str = "auto",
                 count_storages: bool = True, tracker: StorageTracker | None = None):
        self._backend = get_backend(device, attention)
        self.backend = self._backend.name
        self.device = self._backend.device
        if capacity is not None:
            check_int("capacity", capacity, 1)
            total = self._backend.total_memory()
            if total is not None and capacity > total:
                raise ValueError(f"capacity {cuda_size(capacity)} exceeds this GPU's memory")
        self.capacity = capacity
        self._tracker = tracker if tracker is not None else self._backend.tracker(capacity)
        self.count_storages = count_storages
        self._frozen: tuple[int, int, int | None] | None = None
        self._log_at_exit: int | None = None

    def __enter__(self) -> "Meter":
        self._backend.enter(self.capacity)
        if self.count_storages:
            self._tracker.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.count_storages:
            self._tracker.__exit__(*exc)
        self._backend.exit(*exc)
        self._frozen = (self._now(), self._peak(), self._backend.reserved())
        self._log_at_exit = len(self._tracker.log)  # tensors that outlive the block are freed later, unmeasured

    def _now(self) -> int:
        return self._backend.allocated(self._tracker)

    def _peak(self) -> int:
        return self._backend.peak(self._tracker)

    def allocated(self) -> int:
        """Bytes of tensor memory allocated now, since the block was entered."""
        return self._frozen[0] if self._frozen else self._now()

    def peak(self) -> int:
        """Highest :meth:`allocated` since entry or the last :meth:`reset_peak`."""
        return self._frozen[1] if self._frozen else self._peak()

    def reserved(self) -> int | None:
        """Bytes the caching allocator holds from the driver (cuda only).

        This is ``torch.cuda.memory_reserved()`` for the whole process, not
        relative to entry.  ``None`` in simulated mode: the simulation has no
        allocator cache (lesson 06 models one).
        """
        return self._frozen[2] if self._frozen else self._backend.reserved()

    def reset_peak(self) -> None:
        """Start a new peak from the bytes allocated now."""
        self._tracker.reset_peak()
        self._backend.reset_peak()

    def serial_of(self, t: torch.Tensor) -> int | None:
        """The tracker's serial for the storage of ``t`` (None if not counted)."""
        return self._tracker.serial_of(t)

    def live_serials(self) -> tuple[int, ...]:
        """Serials of the storages alive now."""
        return self._tracker.live_serials()

    def storages_so_far(self) -> int:
        """How many storages have been counted so far (the next serial)."""
        return len(self._tracker.sizes)

    def log_length(self) -> int:
        """How many allocation-log entries there are so far."""
        return len(self._tracker.log)

    def allocation_log(self) -> list[LogEntry]:
        """Every allocation, free and resize counted so far, in order.

        Each entry is a :class:`helpers.engine.counting.LogEntry`
        ``(serial, kind, delta)``: ``delta`` bytes (rounded up to 512;
        negative for a free or a shrink) of the storage numbered ``serial``,
        ``kind`` being ``"alloc"``, ``"free"`` or ``"resize"``: the input of
        :func:`helpers.allocator.replay` (lesson 06).  After the block, the log
        as it was at exit.  Empty when the meter was made with ``count_storages=False``.
        """
        return self._tracker.log[:self._log_at_exit]

    def storages(self) -> dict[int, tuple[int, torch.dtype, tuple[int, ...]]]:
        """Every storage counted so far, by serial: ``(bytes, dtype, shape)``: bytes rounded up to 512
        (a storage resized in place: its largest size), the dtype and shape of the tensor that made it."""
        tracker = self._tracker
        return {serial: (nbytes, tracker.dtypes[serial], tracker.shapes[serial])
                for serial, nbytes in tracker.sizes.items()}

    def peak_serials(self) -> tuple[int, ...]:
        """Serials of the storages alive at :meth:`peak`, in allocation order."""
        return self._tracker.peak_serials

    def peak_allocation(self) -> int | None:
        """Simulated: the serial of the allocation that reached :meth:`peak`; None on cuda."""
        return None if self._backend.measured else self._tracker.peak_at

    def host_side_steps(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """``optimizer``, its states counted where a GPU keeps them.

        ``torch.optim.Adam`` and ``AdamW`` keep each parameter's ``step``
        counter in a host tensor (``torch.tensor(0.0)``) unless ``fused`` or
        ``capturable``: on a GPU it takes no device memory.  The simulated GPU
        makes every tensor on the CPU, so there it would be counted; this
        leaves it out, as :func:`helpers.profile_step` does, and counts the
        moments ``exp_avg`` and ``exp_avg_sq``.  On a real GPU, and for any
        other optimizer, the optimizer is returned unchanged.

        Args:
            optimizer: a ``torch.optim`` optimizer of parameters made on
                :attr:`device` (changed in place and returned).  Call this
                before its first ``step()``, which creates the states.
        """
        if self.backend != "simulated":
            return optimizer
        return host_side_steps(optimizer, self._tracker)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A ``GradScaler`` for float16 training on this backend, as :func:`helpers.profile_step` uses.

        On a GPU, ``torch.amp.GradScaler("cuda")``.  Simulated, a scaler that
        creates the tensors the CUDA one creates (the scale, the growth
        tracker, the scaled loss, the inverse scale, the found-inf flags) and
        always takes the step, since fake tensors have no values to find an
        inf in (:class:`helpers.engine.cuda_rules.SimulatedGradScaler`).
        """
        return self._backend.grad_scaler()

    def build(self, builder: Callable[[], nn.Module]) -> nn.Module:
        """``builder()``'s model, built as :func:`helpers.profile_step` builds it.

        Call it before the ``with`` block (building is not measured).
        Simulated, on the ``meta`` device: shapes and dtypes only, no memory
        and no initialisation work (a constructor that reads tensor values is
        built on the CPU instead).  On a GPU, on the CPU, as ``builder()``
        returns it.  Then give it its memory with :meth:`place`.
        """
        return self._backend.build(builder)

    def place(self, model: nn.Module) -> nn.Module:
        """Put ``model``'s parameters and buffers on :attr:`device`, counted.

        Call it inside the ``with`` block, on a model from :meth:`build`: on a
        GPU this is ``model.to("cuda")``; simulated, every parameter and
        buffer gets a fake storage of its size and dtype (what
        ``model.to("cuda")`` would allocate).  Returns the placed model.
        """
        return self._backend.place(model)

    def autocast(self, dtype: torch.dtype):
        """A new autocast context for one forward pass in ``dtype``: ``torch.autocast("cuda", dtype)``, or
        simulated, CPU autocast with CUDA's op lists (:func:`helpers.engine.cuda_rules.simulated_autocast`)."""
        return self._backend.autocast(dtype)

    def offload(self):
        """A new context in which autograd keeps the tensors it saves in host memory: on a GPU,
        ``torch.autograd.graph.save_on_cpu(pin_memory=True)``; simulated, its hooks, the host copies uncounted."""
        return self._backend.offload(self._tracker)

    def optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """:meth:`host_side_steps` for any optimizer: simulated, a torchao optimizer (whose step a GPU runs
        ``torch.compile``'d) also steps eagerly, its temporaries uncounted
        (:meth:`helpers.engine.backends.SimulatedBackend.optimizer`)."""
        return self._backend.optimizer(optimizer, self._tracker)

    def offloaded_optimizer(self, make: Callable[[list], torch.optim.Optimizer], params):
        """An optimizer of ``params`` (``make`` builds one of a list of parameters) with its states in host
        memory, stepped on the CPU: torchao's ``CPUOffloadOptimizer``, or simulated,
        :class:`helpers.engine.backends.HostStates`, which keeps the same tensors where torchao does."""
        return self._backend.offloaded_optimizer(make, params, self._tracker)

    def synchronize(self) -> None:
        """Wait until the GPU has finished the work queued so far (for timing; simulated: nothing)."""
        self._backend.synchronize()

    def release(self) -> None:
        """After an out-of-memory error, once the step's tensors are dropped: on a GPU, collect
        garbage and return the allocator's cache to the driver (``torch.cuda.empty_cache()``)."""
        self._backend.release()
