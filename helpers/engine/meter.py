"""The engine's one face: bytes allocated now and at peak, on either backend (lesson 00).

Every measurement, and everything that runs a step, goes through a :class:`Meter`. Behind it the backend
(:mod:`helpers.engine.backends`) answers what differs between a real GPU and the simulation, and the storage tracker
(:mod:`helpers.engine.counting`) counts on both.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from ..config import check_int
from ..units import cuda_size
from .backends import get_backend
from .counting import LogEntry, StorageTracker
from .cuda_rules import host_side_steps
from .patterns import remember


class Meter:
    """One API over both backends: bytes allocated now and at peak. Tensors made inside it on ``meter.device`` count::

        with Meter("auto") as meter:
            x = torch.ones(1024, 1024, device=meter.device)   # 4 MiB
            y = x * 2                                          # 4 MiB more
            del y
        meter.peak()  # 8 MiB: 8388608 bytes, on either backend

    Simulated, the block runs under ``FakeTensorMode``: tensors have no values (no ``.item()`` inside it). Counts are
    relative to entering the block; after it, :meth:`allocated`, :meth:`peak` and :meth:`reserved` are the values at
    exit.

    Args:
        device: ``"auto"`` (cuda when present, else simulated), ``"cuda"`` or ``"simulated"``.
        capacity: behave as a GPU of this many bytes: simulated, less the assumed
            :data:`helpers.gpus.CUDA_OVERHEAD_BYTES` (:class:`helpers.engine.simulated.SimulatedTracker`); on cuda,
            ``torch.cuda.set_per_process_memory_fraction`` (restored on exit). Exceeding it raises
            ``torch.OutOfMemoryError``.
        attention: simulated only: the attention kernel (:data:`helpers.config.ATTENTION`).
        count_storages: run the storage tracker (default); False for timing (on a GPU the real counters still count;
            simulated, nothing is counted).
        tracker: the :class:`helpers.engine.counting.StorageTracker` (default: the backend's).
        workspaces: simulated only: what kernels allocate beyond the tensors (:data:`helpers.config.WORKSPACES`).

    Attributes:
        backend: ``"cuda"`` or ``"simulated"``: say it next to every number.
        device: the ``torch.device`` to create tensors on inside the block.

    Raises:
        ValueError: for an unknown device, ``"cuda"`` without a GPU, or a capacity that is not a positive number of
            bytes (or, on cuda, exceeds the GPU's memory).
    """

    def __init__(self, device: str = "auto", capacity: int | None = None, attention: str = "auto",
                 count_storages: bool = True, tracker: StorageTracker | None = None, workspaces: str = "none"):
        self._backend = get_backend(device, attention)
        self.backend = self._backend.name
        self.device = self._backend.device
        if capacity is not None:
            check_int("capacity", capacity, 1)
            total = self._backend.total_memory()
            if total is not None and capacity > total:
                raise ValueError(f"capacity {cuda_size(capacity)} exceeds this GPU's memory")
        self.capacity = capacity
        self._tracker = tracker if tracker is not None else self._backend.tracker(capacity, workspaces)
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
        """``torch.cuda.memory_reserved()`` for the whole process (not relative to entry); ``None`` simulated (lesson 06 models it)."""
        return self._frozen[2] if self._frozen else self._backend.reserved()

    def reset_peak(self) -> None:
        """Start a new peak from the bytes allocated now."""
        self._tracker.reset_peak()
        self._backend.reset_peak()

    @property
    def tracker(self) -> StorageTracker:
        """The storage tracker that counts this meter's storages: the one it was given, or its backend's."""
        return self._tracker

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
        """Every allocation, free and resize counted so far (after the block: up to its exit), in order.

        :class:`helpers.engine.counting.LogEntry` entries, the input of :func:`helpers.allocator.replay`. Empty with
        ``count_storages=False``.
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

    def kernel_memory(self) -> tuple[int | None, int]:
        """Simulated: ``(bound, missing)`` of the tracker's :class:`helpers.engine.workspaces.KernelMemory`: the most
        cuDNN may add beyond what was counted (:attr:`~helpers.engine.workspaces.KernelMemory.bound`; None without
        convolutions, or on cuda) and how many convolution passes its measured table lacked."""
        kernels = getattr(self._tracker, "kernels", None)
        if kernels is None or not kernels.passes:
            return None, 0
        return kernels.bound, len(kernels.missing)

    def peak_allocation(self) -> int | None:
        """Simulated: the serial of the allocation that reached :meth:`peak`; None on cuda."""
        return None if self._backend.measured else self._tracker.peak_at

    def host_side_steps(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """``optimizer``, its states counted where a GPU keeps them (changed in place and returned).

        Simulated, Adam's host-side ``step`` counters are left out (:func:`helpers.engine.cuda_rules.host_side_steps`).
        Call it before the first ``step()``; on a GPU, and for other optimizers, it changes nothing.
        """
        if self.backend != "simulated":
            return optimizer
        return host_side_steps(optimizer, self._tracker)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A ``GradScaler`` for float16 training: ``torch.amp.GradScaler("cuda")``, or :class:`helpers.engine.cuda_rules.SimulatedGradScaler`."""
        return self._backend.grad_scaler()

    def build(self, builder: Callable[[], nn.Module]) -> nn.Module:
        """``builder()``'s model, built before the ``with`` block (not measured); :meth:`place` gives it memory.

        Simulated, on ``meta`` (a constructor that reads tensor values: on the CPU); on a GPU as ``builder()`` makes it.
        """
        return self._backend.build(builder)

    def place(self, model: nn.Module) -> nn.Module:
        """Put ``model``'s parameters and buffers on :attr:`device`, counted, inside the ``with`` block; returns it.

        On a GPU ``model.to("cuda")``; simulated, a fake storage of each one's size and dtype.
        """
        return self._backend.place(model)

    def autocast(self, dtype: torch.dtype):
        """A new autocast context for one forward pass in ``dtype``: ``torch.autocast("cuda", dtype)``, or
        simulated, CPU autocast with CUDA's op lists (:func:`helpers.engine.autocast.simulated_autocast`)."""
        return self._backend.autocast(dtype)

    def offload(self):
        """A new context in which autograd keeps the tensors it saves in host memory: on a GPU,
        ``torch.autograd.graph.save_on_cpu(pin_memory=True)``; simulated, its hooks, the host copies uncounted."""
        return self._backend.offload(self._tracker)

    def optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """:meth:`host_side_steps` for any optimizer; simulated, a torchao optimizer's fused kernel is skipped."""
        return self._backend.optimizer(optimizer, self._tracker)

    def offloaded_optimizer(self, make: Callable[[list], torch.optim.Optimizer], params):
        """An optimizer of ``params`` with its states in host memory (torchao's ``CPUOffloadOptimizer``, or :class:`helpers.engine.backends.HostStates`)."""
        return self._backend.offloaded_optimizer(make, params, self._tracker)

    def synchronize(self) -> None:
        """Wait until the GPU has finished the work queued so far (for timing; simulated: nothing)."""
        self._backend.synchronize()

    def release(self) -> None:
        """After an out-of-memory error, the step's tensors dropped: on a GPU, collect garbage and ``torch.cuda.empty_cache()``."""
        self._backend.release()


def remembered(patterns: dict, key, call: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``call()``; inside a simulated :class:`Meter`, written after its first run from that run's allocations
    (:func:`helpers.engine.patterns.remember`, whose conditions ``call`` must meet), without running it again. On a
    GPU, or outside a meter, ``call()``. ``patterns``: the caller's dictionary of what was seen, by ``key``."""
    modes = _get_current_dispatch_mode_stack()
    tracker = next((m for m in reversed(modes) if isinstance(m, StorageTracker)), None)
    if tracker is None or not any(isinstance(m, FakeTensorMode) for m in modes):
        return call()
    return remember(tracker, patterns, key, call)
