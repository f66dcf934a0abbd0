"""One moment of a traced step (:class:`Event`), and the phases a moment can be.

Plain values only, no torch import: a profile read from a log on disk (:mod:`helpers.cli_cold`) is made of these
without the engine that traces (:mod:`helpers.engine.trace` records them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Phases of module events, in the order they happen to one module.
MODULE_PHASES = ("pre", "fwd", "bwd", "recompute")

#: Step events, in the order a step records them (``Event.phase`` of a step event).
STEP_PHASES = ("model", "input", "loss", "backward", "optimizer.step", "zero_grad")


@dataclass
class Event:
    """One moment of a traced step.

    Attributes:
        index: position in the step's event list (0-based).
        phase: one of :data:`MODULE_PHASES` for a module, of :data:`STEP_PHASES` for a step event.
        module: dotted name from ``model.named_modules()`` (the model is ``""``); ``None`` for a step event.
        module_type, note: the module's class name, or a step event's description (the other is ``None``).
        allocated_bytes, delta_bytes, peak_bytes: allocated now, the change since the previous event, the step's
            highest so far.
        shape, depth: the output's shape for ``fwd``/``recompute`` events, else ``None``; the nesting (model: 0).
        live, log_position: serials of the storages alive now; the allocation log's length now.
    """

    index: int
    phase: str
    module: str | None
    module_type: str | None
    note: str | None
    allocated_bytes: int
    delta_bytes: int
    peak_bytes: int
    shape: tuple[int, ...] | None = None
    depth: int = 0
    live: tuple[int, ...] = field(default=(), repr=False)
    log_position: int = field(default=0, repr=False)

    @property
    def type(self) -> str:
        """The module's class name, or the step event's note (the JSON ``type``)."""
        return self.module_type if self.module is not None else self.note

    @property
    def label(self) -> str:
        """The moment in words: ``"backward of ReLU 'layer4.1.relu'"``, ``"optimizer.step()"``."""
        if self.module is None:
            return self.note
        words = {"pre": "before", "fwd": "forward of", "bwd": "backward of", "recompute": "recomputation of"}
        name = f"the model ({self.module_type})" if self.module == "" else f"{self.module_type} '{self.module}'"
        return f"{words[self.phase]} {name}"
