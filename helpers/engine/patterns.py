"""Calls written from the pattern of their first run: a call whose allocations depend only on the shapes it is given
(QLoRA's dequantization of a 4-bit weight) writes the same log entries each time, so the simulation runs it op by op
once and writes its :class:`Pattern` after that. ``tests/test_finetune_engine.py`` checks steps written so against the
same steps run op by op."""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from .counting import StorageTracker


class Pattern(NamedTuple):
    """What one call allocated and freed, its storages numbered in the order it made them: ``entries``, ``(kind,
    number)`` in log order; ``storages``, ``(bytes, dtype, shape)`` by number; ``out``, the number of the one
    storage that outlives the call and its tensor's ``(shape, stride, offset, device)``."""

    entries: tuple[tuple[str, int], ...]
    storages: tuple[tuple[int, torch.dtype, tuple[int, ...]], ...]
    out: tuple


def remember(tracker: StorageTracker, patterns: dict, key, call: Callable[[], torch.Tensor]) -> torch.Tensor:
    """``call()``, counted by ``tracker``: run the first time, its :class:`Pattern` kept in ``patterns[key]``; after
    that the pattern written again (the kept storage a new fake tensor of its shape, the others :meth:`transient
    <helpers.engine.counting.StorageTracker.transient>`), ``call`` not run. ``call`` must allocate and free as a
    function of ``key`` alone and return one new tensor; one that touches an older storage, keeps another or returns a
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
    plain = isinstance(out, torch.Tensor) and not is_traceable_wrapper_subclass(out) and not out.requires_grad
    serial = tracker.serial_of(out) if plain else None
    entries = tuple((e.kind, e.serial - first) for e in tracker.log[log_start:])
    made = range(first, len(tracker.sizes))
    freed = {n for kind, n in entries if kind == "free"}
    if (serial is None or serial < first or any(n < 0 or kind == "resize" for kind, n in entries)
            or freed != set(range(len(made))) - {serial - first}):
        return False
    dtype, shape = tracker.dtypes[serial], tracker.shapes[serial]
    if out.untyped_storage().nbytes() != torch.Size(shape).numel() * dtype.itemsize:
        return False  # the kept storage is not one torch.empty of its shape makes
    return Pattern(entries, tuple((tracker.sizes[s], tracker.dtypes[s], tracker.shapes[s]) for s in made),
                   (serial - first, tuple(out.shape), out.stride(), out.storage_offset(), out.device))


def _replay(tracker: StorageTracker, pattern: Pattern) -> torch.Tensor:
    """``pattern``'s log entries written again; its result."""
    made, out = {}, None
    kept, shape, stride, offset, device = pattern.out
    for kind, n in pattern.entries:
        if kind == "free":
            tracker.release(made[n])
            continue
        nbytes, dtype, created = pattern.storages[n]
        if n == kept:
            base = torch.empty(created, dtype=dtype, device=device)
            made[n], out = tracker.serial_of(base), base.as_strided(shape, stride, offset)
        else:
            made[n] = tracker.transient(nbytes, dtype, created)
    return out
