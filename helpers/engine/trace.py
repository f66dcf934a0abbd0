"""Record memory, module by module, over one training step (lesson 03).

For every call of every submodule the tracer records the bytes allocated and the change since the previous event at
``pre`` (before its forward), ``fwd`` (after it, with the output's shape) and ``bwd`` (once the gradients of its inputs
and all its parameters exist); a checkpointed module's forward run again in backward is a ``recompute`` event.

``bwd`` uses a plain ``Tensor.register_hook`` on each input and parameter, counted down to the last: it stays bound to
the node that produced the tensor (PyTorch autograd notes, "Backward Hooks execution"), where in-place operations break
``register_full_backward_hook`` and ``register_multi_grad_hook`` keeps the gradients alive until the last one.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._pytree import tree_leaves

from .event import MODULE_PHASES, STEP_PHASES, Event  # noqa: F401 (where a traced step's events were defined)
from .meter import Meter


def _tensors(obj) -> list[torch.Tensor]:
    return [t for t in tree_leaves(obj) if isinstance(t, torch.Tensor)]


def _shape(output) -> tuple[int, ...] | None:
    ts = _tensors(output)
    return tuple(ts[0].shape) if ts else None


class StepTracer:
    """Context manager that records :class:`Event` objects for one step.

    Args:
        meter, model: the :class:`helpers.engine.meter.Meter` the step runs under; the model whose modules are named.
        root: the module actually called, if not ``model`` (a checkpointing wrapper); its events are named ``""``.

    Attributes:
        events, saved: the recorded events, in order; serials of storages autograd saved for backward.
        recomputed: ``(first, last)`` serial ranges made while checkpointed modules recomputed their forward.
        in_backward: set True just before ``backward()``: forward calls from then on are ``recompute`` events.
    """

    def __init__(self, meter: Meter, model: nn.Module, root: nn.Module | None = None):
        self.meter = meter
        self.events: list[Event] = []
        self.saved: set[int] = set()
        self.recomputed: list[tuple[int, int]] = []
        self.in_backward = False
        self._named = [(name, mod) for name, mod in model.named_modules()]
        if root is not None:
            self._named[0] = ("", root)
        self._handles: list = []
        self._grad_handles: list = []
        self._grad_waiters: dict = {}
        self._saved_hooks = saved_tensors_hooks(self._pack, self._unpack)
        self._recompute_start: dict[int, int] = {}

    def record(self, module: str | None, type_: str, phase: str, shape=None) -> Event:
        """Append and return an event at the bytes allocated now; ``type_``: the class name, or a step event's note."""
        allocated = self.meter.allocated()
        previous = self.events[-1].allocated_bytes if self.events else 0
        event = Event(
            index=len(self.events),
            phase=phase,
            module=module,
            module_type=type_ if module is not None else None,
            note=type_ if module is None else None,
            allocated_bytes=allocated,
            delta_bytes=allocated - previous,
            peak_bytes=self.meter.peak(),
            shape=shape,
            depth=0 if not module else module.count(".") + 1,
            live=self.meter.live_serials(),
            log_position=self.meter.log_length(),
        )
        self.events.append(event)
        return event

    def _pre_hook(self, name: str):
        def hook(mod, args):
            if self.in_backward:
                self._recompute_start[id(mod)] = self.meter.storages_so_far()
                return
            self.record(name, type(mod).__name__, "pre")
            wanted = [t for t in _tensors(args) if t.requires_grad]
            wanted += [p for p in mod.parameters() if p.requires_grad]
            if wanted:
                waiter = [len(wanted), name, type(mod).__name__]
                for t in wanted:
                    self._waiters_of(t).append(waiter)

        return hook

    def _waiters_of(self, t: torch.Tensor) -> list:
        """The modules waiting for ``t``'s gradient; hooks ``t`` (per tensor and version) on first use."""
        key = (id(t), t._version)
        entry = self._grad_waiters.get(key)
        if entry is None or entry[0]() is not t:
            waiters: list = []
            entry = (weakref.ref(t), waiters)
            self._grad_waiters[key] = entry
            self._grad_handles.append(t.register_hook(lambda grad: self._arrived(waiters)))
        return entry[1]

    def _arrived(self, waiters: list) -> None:
        # Modules registered later are nested deeper: let them finish first.
        for waiter in reversed(waiters):
            waiter[0] -= 1
            if waiter[0] == 0:
                self.record(waiter[1], waiter[2], "bwd")

    def _post_hook(self, name: str):
        def hook(mod, args, output):
            if self.in_backward:
                first = self._recompute_start.pop(id(mod), self.meter.storages_so_far())
                self.recomputed.append((first, self.meter.storages_so_far()))
                self.record(name, type(mod).__name__, "recompute", _shape(output))
            else:
                self._kept_on_ctx(output)
                self.record(name, type(mod).__name__, "fwd", _shape(output))

        return hook

    def _kept_on_ctx(self, output) -> None:
        """Tensors a custom autograd function keeps for backward on its context rather than through
        ``save_for_backward``, which the saved-tensor hooks never see, are saved too: bitsandbytes' ``MatMul8bitLt``
        keeps its input in ``ctx.tensors`` (``bitsandbytes/autograd/_functions.py``)."""
        for out in _tensors(output):
            for t in getattr(out.grad_fn, "tensors", None) or ():
                if isinstance(t, torch.Tensor) and (serial := self.meter.serial_of(t)) is not None:
                    self.saved.add(serial)

    def _pack(self, t: torch.Tensor):
        serial = self.meter.serial_of(t)
        if serial is not None:
            self.saved.add(serial)
        return t

    @staticmethod
    def _unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    def __enter__(self) -> "StepTracer":
        for name, mod in self._named:
            self._handles.append(mod.register_forward_pre_hook(self._pre_hook(name)))
            self._handles.append(mod.register_forward_hook(self._post_hook(name)))
        self._saved_hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._saved_hooks.__exit__(*exc)
        for handle in self._handles + self._grad_handles:
            handle.remove()
        self._handles.clear()
        self._grad_handles.clear()
        self._grad_waiters.clear()
