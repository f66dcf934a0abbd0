"""Which steps a symbolic log answers (:mod:`helpers.symbolic`): the configurations one log answers (:func:`key`),
and the steps that can be traced with symbolic sizes at all (:func:`applies`).

No torch import (but where ``device="auto"`` asks torch whether there is a GPU): the command line's cold answer
(:mod:`helpers.cli_cold`) asks both before it reads a log on disk.
"""

from __future__ import annotations

from .config import StepConfig


def key(config: StepConfig) -> StepConfig:
    """``config`` without its batch size and sequence length: the configurations one symbolic log answers."""
    return config.replace(batch_size=1, seq_len=None if config.seq_len is None else 1)


def applies(config: StepConfig) -> str | None:
    """Why ``config``'s step cannot be traced with symbolic sizes, or None if it can: a real GPU measures, a
    simulated ``capacity`` stops the step where the bytes run out (a comparison), ``full_trace`` asks for a trace."""
    if config.device != "simulated":  # "auto" asks torch whether there is a GPU
        from .engine.backends import resolve_backend

        if resolve_backend(config.device) != "simulated":
            return "a real GPU measures each step"
    if config.capacity is not None:
        return "a simulated capacity (capacity=) stops the step where it runs out, a comparison of sizes"
    if config.full_trace:
        return "a full trace was asked for (full_trace=True)"
    if config.workspaces != "none":
        return "kernels' own bytes (workspaces=) follow rules that compare sizes"
    return None
