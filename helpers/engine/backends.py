"""What differs between measuring on a real GPU and simulating one (lesson 00).

:class:`CudaBackend` reads PyTorch's counters on a real GPU; :class:`SimulatedBackend` counts fake CPU tensors with a
:class:`helpers.engine.counting.StorageTracker`, builds on ``meta`` and leaves offloaded tensors out of the count.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import warnings
from itertools import chain
from typing import Callable, ContextManager

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from .counting import StorageTracker
from .autocast import simulated_autocast
from .cuda_rules import SimulatedGradScaler, cuda_rules, host_side_steps
from .simulated import SimulatedTracker

_FAKE_LOG = logging.getLogger("torch._subclasses.fake_tensor")


def resolve_backend(device: str = "auto") -> str:
    """Turn a ``device`` argument into ``cuda`` or ``simulated`` (``auto``: ``cuda`` when available).
    Raises ``ValueError`` for an unknown name, or ``cuda`` on a machine without a GPU.
    """
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "simulated"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                "device 'cuda' was asked for, but PyTorch sees no GPU here "
                "(torch.cuda.is_available() is False); use 'auto' or 'simulated'"
            )
        return "cuda"
    if device == "simulated":
        return "simulated"
    raise ValueError(f"unknown device {device!r}; use 'auto', 'cuda' or 'simulated'")


@contextlib.contextmanager
def collector_paused():
    """Python's cycle collector paused, then as it was: reference counting frees a simulated step's storages (as
    ``tests/test_step.py`` checks), and collecting cycles among its objects took 10-20% of an 8B step's time."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def get_backend(device: str = "auto", attention: str = "auto") -> "Backend":
    """The :class:`Backend` for ``device``; ``attention``: the simulated kernel. Raises as :func:`resolve_backend`."""
    return CudaBackend() if resolve_backend(device) == "cuda" else SimulatedBackend(attention)


class Backend:
    """The questions a measurement answers differently on a GPU and in simulation.

    Attributes:
        name, device: ``"cuda"`` or ``"simulated"``; where the step's tensors are created.
        measured: True when the figures are a real GPU's counters.
    """

    name = ""
    device = torch.device("cpu")
    measured = False

    def tracker(self, capacity: int | None, workspaces: str = "none") -> StorageTracker:
        """The storage tracker that labels this backend's memory by category; ``workspaces``: what the simulated
        GPU's kernels allocate beyond the tensors (:data:`helpers.config.WORKSPACES`)."""
        raise NotImplementedError

    def enter(self, capacity: int | None) -> None:
        """Start measuring (called by :class:`helpers.engine.meter.Meter`)."""

    def exit(self, *exc) -> None:
        """Stop measuring."""

    def allocated(self, tracker: StorageTracker) -> int:
        """Bytes of tensors allocated since :meth:`enter`."""
        raise NotImplementedError

    def peak(self, tracker: StorageTracker) -> int:
        """Highest :meth:`allocated` since :meth:`enter` or :meth:`reset_peak`."""
        raise NotImplementedError

    def reserved(self) -> int | None:
        """Bytes the caching allocator holds, or None where there is none."""
        return None

    def reset_peak(self) -> None:
        """Start a new peak (the tracker's is reset by the meter)."""

    def total_memory(self) -> int | None:
        """The GPU's memory in bytes, or None when simulating."""
        return None

    def synchronize(self) -> None:
        """Wait until the device has finished the work queued so far (for timing)."""

    def build(self, builder: Callable[[], nn.Module]) -> nn.Module:
        """Build the model, outside any measurement."""
        raise NotImplementedError

    def place(self, model: nn.Module) -> nn.Module:
        """Put the model's parameters and buffers on :attr:`device`, counted."""
        raise NotImplementedError

    def autocast(self, dtype: torch.dtype):
        """The autocast context of a forward pass in ``dtype``."""
        return torch.autocast(self.device.type, dtype=dtype)

    def grad_scaler(self) -> torch.amp.GradScaler:
        """A gradient scaler for float16 training."""
        raise NotImplementedError

    def optimizer(self, optimizer: torch.optim.Optimizer, tracker: StorageTracker) -> torch.optim.Optimizer:
        """``optimizer``, its states counted where a GPU keeps them (see :meth:`helpers.engine.meter.Meter.optimizer`)."""
        return optimizer

    def offloaded_optimizer(self, make: Callable[[list], torch.optim.Optimizer], params, tracker: StorageTracker):
        """An optimizer made by ``make``, its states in host memory, stepped on the CPU (``CPUOffloadOptimizer``)."""
        raise NotImplementedError

    def offload(self, tracker: StorageTracker):
        """A context in which autograd keeps saved tensors in host memory."""
        raise NotImplementedError

    def release(self) -> None:
        """After an out-of-memory error: return what can be returned."""


class CudaBackend(Backend):
    """A real GPU: PyTorch's counters, CUDA autocast, a real ``GradScaler``."""

    name = "cuda"
    device = torch.device("cuda")
    measured = True

    def __init__(self):
        self._base = 0
        self._capped = False

    def tracker(self, capacity, workspaces="none"):
        if workspaces != "none":
            raise ValueError("workspaces applies to the simulated GPU: a real GPU's kernels allocate their own")
        return StorageTracker("cuda")  # explains the real counters; the GPU itself enforces capacity

    def enter(self, capacity):
        torch.cuda.synchronize()
        self._base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        if capacity is not None:
            torch.cuda.set_per_process_memory_fraction(capacity / self.total_memory())
        self._capped = capacity is not None

    def exit(self, *exc):
        if self._capped:
            torch.cuda.set_per_process_memory_fraction(1.0)

    def allocated(self, tracker):
        return torch.cuda.memory_allocated() - self._base

    def peak(self, tracker):
        return torch.cuda.max_memory_allocated() - self._base

    def reserved(self):
        return torch.cuda.memory_reserved()

    def reset_peak(self):
        torch.cuda.reset_peak_memory_stats()

    def total_memory(self):
        return torch.cuda.get_device_properties(0).total_memory

    def synchronize(self):
        torch.cuda.synchronize()

    def build(self, builder):
        return builder()

    def place(self, model):
        return model.to(self.device)

    def grad_scaler(self):
        return torch.amp.GradScaler("cuda")

    def offloaded_optimizer(self, make, params, tracker):
        from torchao.optim import CPUOffloadOptimizer

        return CPUOffloadOptimizer(params, optimizer_class=lambda groups, **kw: make(groups))

    def offload(self, tracker):
        return torch.autograd.graph.save_on_cpu(pin_memory=True)

    def release(self):
        gc.collect()
        torch.cuda.empty_cache()


class SimulatedBackend(Backend):
    """A simulated CUDA GPU: fake CPU tensors counted under :func:`helpers.engine.cuda_rules.cuda_rules`."""

    name = "simulated"
    device = torch.device("cpu")

    def __init__(self, attention: str = "auto"):
        self.attention = attention
        self._fake: FakeTensorMode | None = None
        self._rules = self._paused = None
        self._log_level = logging.NOTSET

    def tracker(self, capacity, workspaces="none"):
        return SimulatedTracker(capacity, workspaces)

    def enter(self, capacity):
        # FakeTensorMode logs a full traceback before raising a shape error that reaches the caller anyway.
        self._log_level = _FAKE_LOG.level
        _FAKE_LOG.setLevel(logging.CRITICAL)
        self._rules = cuda_rules(self.attention)
        self._rules.__enter__()
        self._fake = FakeTensorMode()
        self._fake.__enter__()
        self._paused = collector_paused()  # last in, first out: paused only once the rest is in place
        self._paused.__enter__()

    def exit(self, *exc):
        self._paused.__exit__(*exc)
        self._fake.__exit__(*exc)
        self._rules.__exit__(*exc)
        _FAKE_LOG.setLevel(self._log_level)

    def allocated(self, tracker):
        return tracker.allocated

    def peak(self, tracker):
        return tracker.peak

    def build(self, builder):
        """On ``meta``; a constructor that reads tensor values falls back to a real CPU build."""
        try:
            with torch.device("meta"), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # what a failed attempt warns about is not the learner's concern
                return builder()
        except (NotImplementedError, RuntimeError):
            return builder()

    def place(self, model):
        """Every parameter and buffer gets a fake storage of its size, once, even when registered in several modules
        (a tied LM head), as ``model.to("cuda")`` keeps them (``Module._apply`` from ``meta`` would not)."""
        where = [(module, key, id(p)) for module in model.modules()
                 for key, p in module._parameters.items() if p is not None]
        sources = list(chain(model.parameters(), model.buffers()))  # kept alive while their ids are keys
        fresh: dict[int, torch.Tensor] = {}

        def empty(t: torch.Tensor) -> torch.Tensor:
            if id(t) not in fresh:
                fresh[id(t)] = torch.empty(t.shape, dtype=t.dtype, device=self.device)
            return fresh[id(t)]

        for module in _children_first(model):  # the order of Module._apply, each module once
            module._apply(empty, recurse=False)
        first: dict[int, nn.Parameter] = {}
        for module, key, source in where:  # one Parameter per source, wherever it is registered
            module._parameters[key] = first.setdefault(source, module._parameters[key])
        del sources
        return model

    def autocast(self, dtype):
        return simulated_autocast(dtype)

    def grad_scaler(self):
        return SimulatedGradScaler()

    def optimizer(self, optimizer, tracker):
        """:func:`helpers.engine.cuda_rules.host_side_steps`; a torchao optimizer: :func:`_simulated_8bit_step`."""
        if _compiled_step(optimizer):
            return _simulated_8bit_step(optimizer, tracker)
        return host_side_steps(optimizer, tracker)

    def offloaded_optimizer(self, make, params, tracker):
        """:class:`HostStates` (torchao's ``CPUOffloadOptimizer`` asserts a CUDA device)."""
        def on_host(ps):
            optimizer = make(ps)
            return _simulated_8bit_step(optimizer) if _compiled_step(optimizer) else optimizer

        return HostStates(params, lambda ps: self.optimizer(make(ps), tracker), on_host, lambda: _paused(tracker))

    def offload(self, tracker):
        """``save_on_cpu``'s two hooks: the host copy uncounted, the copy back counted."""

        def pack(t: torch.Tensor) -> torch.Tensor:
            tracker.paused = True
            try:
                return t.detach().clone()  # the host copy
            finally:
                tracker.paused = False

        def unpack(host: torch.Tensor) -> torch.Tensor:
            return host.clone()  # copied back to the device for backward

        return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


class HostStates:
    """Optimizer states in host memory, stepped on the CPU: torchao's ``CPUOffloadOptimizer`` on the simulated GPU.

    As ``torchao/optim/cpu_offload.py`` does with its defaults: a trained parameter of at least ``minimal_size``
    weights has a host copy, a host gradient buffer and its own host optimizer; smaller ones keep a GPU optimizer.
    Gradients stay on the GPU until ``zero_grad`` (``offload_gradients=False``); ``step()`` steps on the host and copies
    each parameter back in place. No float32 master copy.

    Args:
        params: the model's parameters; ``minimal_size``: smaller ones stay with a GPU optimizer.
        make, make_host: build the GPU optimizer, and a host optimizer of host parameters (inside ``host``).
        host: a new context in which new tensors are host memory (not counted).
    """

    def __init__(self, params, make: Callable[[list], torch.optim.Optimizer],
                 make_host: Callable[[list], torch.optim.Optimizer], host: Callable[[], ContextManager],
                 minimal_size: int = 4096):
        params = [p for p in params if p.requires_grad]
        self._host = host
        self.params = params
        self.host: dict[torch.Tensor, torch.Tensor] = {}
        self.optimizers: dict[torch.Tensor, torch.optim.Optimizer] = {}
        small = [p for p in params if p.numel() < minimal_size]
        with host():
            for p in params:
                if p.numel() >= minimal_size:
                    copy = torch.empty_like(p).copy_(p.detach())
                    copy.grad = torch.empty_like(copy)
                    self.host[p] = copy
                    self.optimizers[p] = make_host([copy])
        self.device_optimizer = make(small) if small else None

    @property
    def param_groups(self) -> list[dict]:
        """The GPU parameters, as one group (what a ``GradScaler`` unscales)."""
        return [{"params": self.params}]

    @property
    def state(self) -> dict:
        """The optimizer states on the GPU: the small parameters' (the others' are host memory)."""
        return dict(self.device_optimizer.state) if self.device_optimizer is not None else {}

    @torch.no_grad()
    def step(self) -> None:
        """The small parameters' step on the GPU; each other's on the host, copied back in place."""
        if self.device_optimizer is not None:
            self.device_optimizer.step()
        with self._host():
            for p, copy in self.host.items():
                if p.grad is None:
                    continue
                copy.grad.copy_(p.grad)  # done during backward by torchao's hook: the same bytes
                self.optimizers[p].step()
                p.copy_(copy)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Free the GPU gradients (torchao asserts ``set_to_none``; the host buffers are reused)."""
        for p in self.params:
            p.grad = None


@contextlib.contextmanager
def _paused(tracker: StorageTracker):
    """New tensors are host memory (not counted) inside."""
    was, tracker.paused = tracker.paused, True
    try:
        yield
    finally:
        tracker.paused = was


def _compiled_step(optimizer: torch.optim.Optimizer) -> bool:
    """True for torchao's optimizers (``AdamW8bit``), whose step a GPU runs ``torch.compile``'d."""
    return type(optimizer).__module__.startswith("torchao.")


def _skipped(fn, *args, **kwargs):
    """``torch.compile``'s stand-in while a simulated optimizer steps: a function that does nothing. torchao's
    ``single_param_adam`` updates the parameter and its states in place, and its temporaries are not counted (a GPU runs
    it as one fused kernel): on fake tensors, which hold no values, running it would change no count."""
    return lambda *a, **k: None


def _simulated_8bit_step(optimizer: torch.optim.Optimizer,
                         tracker: StorageTracker | None = None) -> torch.optim.Optimizer:
    """torchao's ``AdamW8bit`` on the simulated GPU: its states counted, its step's arithmetic not.

    On a GPU each parameter's step is ``torch.compile(single_param_adam)``, one fused kernel with no float32
    temporaries; here the step runs with the tracker paused and that kernel skipped (:func:`_skipped`), then the new
    states but ``step`` are counted. Without a ``tracker`` (a host optimizer) the step only runs so.
    """
    from torch.utils._python_dispatch import _disable_current_modes
    from torchao.optim import subclass_8bit

    with _disable_current_modes():
        subclass_8bit.get_qmap_signed(), subclass_8bit.get_qmap_unsigned()
    original = optimizer.step

    def step(closure=None):
        before = {p: set(state) for p, state in optimizer.state.items()}
        paused, compile_ = tracker is not None and tracker.paused, torch.compile
        torch.compile = _skipped  # for the length of the step: torchao calls torch.compile(single_param_adam, ...)
        if tracker is not None:
            tracker.paused = True
        try:
            result = original(closure)
        finally:
            torch.compile = compile_
            if tracker is not None:
                tracker.paused = paused
        for p, state in optimizer.state.items() if tracker is not None else ():
            for key, value in state.items():
                if key not in before.get(p, ()) and key != "step" and isinstance(value, torch.Tensor):
                    tracker.track(value)
        return result

    optimizer.step = step
    return optimizer


def _children_first(module: nn.Module, seen: set[int] | None = None):
    """``module``'s submodules and itself, each once, children before parents (as ``Module._apply`` visits them)."""
    seen = set() if seen is None else seen
    seen.add(id(module))
    for child in module.children():
        if id(child) not in seen:
            yield from _children_first(child, seen)
    yield module
