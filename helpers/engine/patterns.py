"""Calls written from the pattern of their first run: a call whose allocations depend only on the shapes it is given
(QLoRA's quantization and dequantization of a weight) writes the same log entries each time, so the simulation runs
it op by op once and writes its :class:`Pattern` after that. ``tests/test_finetune_engine.py`` checks steps written
so against the same steps run op by op."""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from .counting import StorageTracker


class Pattern(NamedTuple):
    """What one call allocated and freed, its storages numbered in the order it made them: ``entries``, ``(kind,
    number)`` in log order; ``storages``, ``(bytes, dtype, shape)`` by number; ``kept``, ``(name, number, shape,
    stride, offset, device)`` of the tensor returned (``name`` None) or of each inner tensor (``name`` its attribute) of
    the wrapper subclass returned, whose ``(type, context, size, stride)`` is ``wrapper`` (else None)."""

    entries: tuple[tuple[str, int], ...]
    storages: tuple[tuple[int, torch.dtype, tuple[int, ...]], ...]
    kept: tuple[tuple, ...]
    wrapper: tuple | None


def remember(tracker: StorageTracker, patterns: dict, key, call: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``call()``, counted by ``tracker``: run the first time, its :class:`Pattern` kept in ``patterns[key]``; after
    that the pattern written again (each kept storage a new fake tensor of its shape, the others :meth:`transient
    <helpers.engine.counting.StorageTracker.transient>`), ``call`` not run. ``call`` must allocate and free as a
    function of ``key`` alone and return one new tensor, or a traceable wrapper subclass (torchao's ``NF4Tensor``)
    whose inner tensors are new, one storage each; one that touches an older storage, keeps another or returns a
    tensor that requires grad is run every time. Fake tensors only: the result has no values."""
    pattern = patterns.get(key)
    if tracker.paused or pattern is False:
        return call()
    if pattern is not None:
        return _replay(tracker, pattern)
    log_start, first = len(tracker.log), len(tracker.sizes)
    out = call()
    patterns[key] = _pattern(tracker, out, log_start, first)
    return out


def _pattern(tracker: StorageTracker, out, log_start: int, first: int) -> Pattern | bool:
    """The :class:`Pattern` of a call that wrote ``tracker.log`` from ``log_start`` and made serials from ``first`` on,
    returning ``out``; False if it is not one."""
    if not isinstance(out, torch.Tensor) or out.requires_grad:
        return False
    wrapper, inner = None, [(None, out)]
    if is_traceable_wrapper_subclass(out):
        names, context = out.__tensor_flatten__()
        wrapper, inner = (type(out), context, tuple(out.shape), out.stride()), [(n, getattr(out, n)) for n in names]
    serials = [tracker.serial_of(t) if not is_traceable_wrapper_subclass(t) else None for _, t in inner]
    entries, made = tuple((e.kind, e.serial - first) for e in tracker.log[log_start:]), range(first, len(tracker.sizes))
    if (any(s is None or s < first for s in serials) or len(set(serials)) < len(serials)
            or any(n < 0 or kind == "resize" for kind, n in entries)
            or {n for kind, n in entries if kind == "free"} != set(range(len(made))) - {s - first for s in serials}
            or any(t.untyped_storage().nbytes() != torch.Size(tracker.shapes[s]).numel() * tracker.dtypes[s].itemsize
                   for (_, t), s in zip(inner, serials))):  # a kept storage must be one torch.empty of its shape makes
        return False
    return Pattern(entries, tuple((tracker.sizes[s], tracker.dtypes[s], tracker.shapes[s]) for s in made),
                   tuple((name, s - first, tuple(t.shape), t.stride(), t.storage_offset(), t.device)
                         for (name, t), s in zip(inner, serials)), wrapper)


def _replay(tracker: StorageTracker, pattern: Pattern) -> torch.Tensor:
    """``pattern``'s log entries written again; its result."""
    made, bases, devices = {}, {}, {number: device for _, number, *_, device in pattern.kept}
    for kind, n in pattern.entries:
        if kind == "free":
            tracker.release(made[n])
            continue
        nbytes, dtype, created = pattern.storages[n]
        if n in devices:
            bases[n] = torch.empty(created, dtype=dtype, device=devices[n])
            made[n] = tracker.serial_of(bases[n])
        else:
            made[n] = tracker.transient(nbytes, dtype, created)
    inner = {name: bases[n] if (shape, stride, offset) == (bases[n].shape, bases[n].stride(), 0)
             else bases[n].as_strided(shape, stride, offset) for name, n, shape, stride, offset, _ in pattern.kept}
    if pattern.wrapper is None:
        return inner[None]
    return pattern.wrapper[0].__tensor_unflatten__(inner, *pattern.wrapper[1:])  # (type, context, size, stride)
