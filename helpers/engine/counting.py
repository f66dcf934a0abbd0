"""The core of the engine: count the bytes of tensor storages while they live. Every simulated number comes from here.

A ``TorchDispatchMode`` sees the output of every ATen operation. Each new storage is counted once, at its size rounded
up to 512 bytes (the CUDA caching allocator's block, :func:`helpers.allocator.rules.round_up`); a ``weakref.finalize``
on the storage subtracts it when autograd or Python frees it. Views and in-place results share a storage: they add
nothing. Run a training step on fake tensors (``FakeTensorMode``: shapes, dtypes and lifetimes, no data) under this
mode, and :attr:`StorageTracker.allocated` and :attr:`StorageTracker.peak` are what ``torch.cuda.memory_allocated()``
and ``max_memory_allocated()`` would report for the step's tensors on a GPU.

Lesson 00 writes the same idea in a few lines and checks it against :func:`helpers.profile_step` byte for byte. CUDA's
rules: :mod:`helpers.engine.cuda_rules` and the simulated GPU's tracker, :mod:`helpers.engine.simulated`; a real GPU's
counters: :mod:`helpers.engine.backends`. Bytes throughout.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves

from ..allocator.rules import round_up


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of GPU memory that the storage holding ``t`` occupies: its ``nbytes()`` rounded up to 512.

    A view reports its base's whole storage (what stays allocated while it lives).

    Raises:
        TypeError: if ``t`` is not a tensor.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"tensor_bytes expects a torch.Tensor, got {type(t).__name__}")
    return round_up(t.untyped_storage().nbytes())


_DEVICE = torch.ops.prim.device.default  #: what C++ code (autograd, operators' checks) asks a fake tensor's modes


class LogEntry(NamedTuple):
    """One change in allocated memory: ``delta`` bytes (negative: a free or a shrink) of storage ``serial``;
    ``kind`` is ``"alloc"``, ``"free"`` or ``"resize"``."""

    serial: int
    kind: str
    delta: int


class StorageTracker(TorchDispatchMode):
    """Count the bytes of every tensor storage that operations create, while alive.

    A storage resized in place (``untyped_storage().resize_()``, as FSDP frees and re-gathers parameters) is counted
    at its new size: ``UntypedStorage.resize_`` is not an ATen operation, so it is wrapped while the tracker is active
    (as ``torch.distributed._tools.mem_tracker.MemTracker`` does). A tensor subclass that wraps others (a ``DTensor``)
    owns no memory: the tensors it wraps are counted.

    Args:
        device_type: count only storages on this device type (``"cuda"``); ``None``: every storage (simulated).

    Attributes:
        allocated: bytes alive now.
        peak: the highest ``allocated`` since creation or :meth:`reset_peak`.
        peak_serials: serials of the storages alive at that peak.
        peak_at: serial of the allocation that reached the peak (the same at another batch size).
        sizes, dtypes, shapes: serial -> bytes (its largest size), dtype and shape of the tensor that first showed it.
        log: every :class:`LogEntry`, in order.
        paused: while True, new storages are host memory and are not counted.

    Limits: memory a kernel allocates without creating a tensor (cuDNN/cuBLAS workspaces) is invisible here, and so
    are tensors created before the mode was entered unless passed to :meth:`track`.
    """

    def __init__(self, device_type: str | None = None):
        super().__init__()
        self.device_type = device_type
        self.allocated = self.peak = 0
        self.peak_at = -1
        self._peak_log = 0  # len(self.log) when the peak was reached
        self.paused = False
        self.sizes: dict[int, int] = {}
        self.dtypes: dict[int, torch.dtype] = {}
        self.shapes: dict[int, tuple[int, ...]] = {}
        self.log: list[LogEntry] = []
        self._live: dict[int, int] = {}  # id(storage) -> serial
        self._now: dict[int, int] = {}   # serial -> bytes now (a resized storage differs from sizes)
        self._resizes: list = []  # UntypedStorage.resize_ as each (re-)entry found it, restored on its exit

    def __enter__(self):
        tracker, original = self, torch.UntypedStorage.resize_

        def resize_(storage, size):
            result = original(storage, size)
            tracker._resized(storage)
            return result

        self._resizes.append(original)
        if len(self._resizes) == 1:  # re-entered (a composite split inside dispatch), it is patched already
            torch.UntypedStorage.resize_ = resize_
        return super().__enter__()

    def __exit__(self, *exc):
        torch.UntypedStorage.resize_ = self._resizes.pop()
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _DEVICE and type(args[0]) is FakeTensor and not args[0].fake_mode.in_kernel_invocation:
            return args[0].fake_device  # allocates nothing: answered as FakeTensorMode would, without re-entering it
        out = func(*args, **(kwargs or {}))
        if not self.paused:
            for t in self.allocation_order(func, args, out):
                if isinstance(t, torch.Tensor):
                    self.track(t)
        return out

    def allocation_order(self, func, args: tuple, out) -> list:
        """The results ``out`` of ``func(*args)`` in the order its kernel allocates them, which is the order the log
        records them in: here, the order it returns them (a CUDA GPU's exceptions:
        :class:`helpers.engine.simulated.SimulatedTracker`)."""
        return tree_leaves(out)

    def track(self, t: torch.Tensor) -> int | None:
        """Count ``t``'s storage if it is new; return its serial (None if not counted)."""
        if is_traceable_wrapper_subclass(t):
            serial = None
            for name in t.__tensor_flatten__()[0]:
                inner = getattr(t, name)
                if isinstance(inner, torch.Tensor):  # a DTensor also names its device mesh
                    serial = self.track(inner)
            return serial
        if self.device_type is not None and t.device.type != self.device_type:
            return None
        st = t.untyped_storage()
        serial = self._live.get(id(st))
        if serial is not None:
            return serial
        nbytes = round_up(st.nbytes())
        self.before_alloc(nbytes)
        serial = len(self.sizes)
        self.sizes[serial], self.dtypes[serial], self.shapes[serial] = nbytes, t.dtype, tuple(t.shape)
        self._live[id(st)] = serial
        self._change(serial, "alloc", nbytes)
        weakref.finalize(st, self._free, id(st))
        return serial

    def transient(self, nbytes: int, dtype: torch.dtype, shape: tuple[int, ...]) -> int:
        """Count ``nbytes`` a kernel allocates for itself (no tensor) until :meth:`release`; return their serial."""
        self.before_alloc(nbytes)
        serial = len(self.sizes)
        self.sizes[serial], self.dtypes[serial], self.shapes[serial] = nbytes, dtype, tuple(shape)
        self._change(serial, "alloc", nbytes)
        return serial

    def release(self, serial: int) -> None:
        """Free what :meth:`transient` counted."""
        self._change(serial, "free", -self._now[serial])

    def before_alloc(self, nbytes: int) -> None:
        """Called before ``nbytes`` more are counted: a simulated GPU of limited capacity raises
        ``torch.OutOfMemoryError`` here (:class:`helpers.engine.simulated.SimulatedTracker`)."""

    def _change(self, serial: int, kind: str, delta: int) -> None:
        self._now[serial] = self._now.get(serial, 0) + delta
        self.allocated += delta
        self.log.append(LogEntry(serial, kind, delta))
        if self.allocated > self.peak:
            self.peak, self._peak_log, self.peak_at = self.allocated, len(self.log), serial

    def _free(self, key: int) -> None:
        serial = self._live.pop(key)
        self._change(serial, "free", -self._now[serial])

    def _resized(self, storage) -> None:
        serial = self._live.get(id(storage))
        if serial is None or self.paused:
            return
        delta = round_up(storage.nbytes()) - self._now[serial]
        if delta > 0:
            self.before_alloc(delta)
        self.sizes[serial] = max(self.sizes[serial], self._now[serial] + delta)
        self._change(serial, "resize", delta)

    def serial_of(self, t: torch.Tensor) -> int | None:
        """Serial of the live storage holding ``t`` (a ``DTensor``: its local shard), or None if not counted."""
        while is_traceable_wrapper_subclass(t):
            inner = [getattr(t, n) for n in t.__tensor_flatten__()[0]]
            inner = [i for i in inner if isinstance(i, torch.Tensor)]
            if len(inner) != 1:
                return None
            t = inner[0]
        return self._live.get(id(t.untyped_storage()))

    def live_serials(self) -> tuple[int, ...]:
        """Serials of all storages alive now, holding bytes."""
        return tuple(s for s in self._live.values() if self._now[s])

    def reset_peak(self) -> None:
        """Start a new peak from the bytes alive now."""
        self.peak, self._peak_log, self.peak_at = self.allocated, len(self.log), len(self.sizes) - 1

    @property
    def peak_serials(self) -> tuple[int, ...]:
        """Serials of the storages holding bytes at the peak, in allocation order (:attr:`log` replayed up to it)."""
        now: dict[int, int] = {}
        for entry in self.log[:self._peak_log]:
            now[entry.serial] = now.get(entry.serial, 0) + entry.delta
        return tuple(serial for serial, nbytes in now.items() if nbytes)
