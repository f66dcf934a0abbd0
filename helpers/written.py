"""The :class:`helpers.record.StepProfile` of a step written, not traced (:mod:`helpers.depth`).

:func:`profile_of_log` replays a written allocation log as :class:`helpers.engine.counting.StorageTracker` counts a
traced one, and reads from it every field :func:`helpers.record.record_step` reads from a traced step's meter; the
storages alive at each event are worked out only when first read (:class:`_LiveAt`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from .engine.trace import Event
from .record import CATEGORIES, Allocation, Storage, StepProfile, frees_in_allocation_order


def profile_of_log(log: tuple, storages: tuple, markers: tuple, like: StepProfile, **fields) -> StepProfile:
    """The :class:`StepProfile` of a step written, not traced (:mod:`helpers.depth`): its ``(log, storages, markers)``
    read as :func:`record_step` reads a traced step (simulated: every byte is a storage's).

    ``log`` entries are ``(serial, kind, delta)``; ``storages[serial]`` is ``(category, dtype, shape, bytes)``;
    ``markers`` are ``(log position, kind, payload)``, an ``"event"``'s payload ``(phase, module, module_type, note,
    shape)``.  The log is replayed as :class:`helpers.engine.counting.StorageTracker` counts: the bytes allocated, the
    peak (started afresh at each ``"reset"`` marker) and the allocation that reached it, the storages alive at each
    event and at the peak.  Each ``"event"`` marker is an event of the profile; ``"first"`` markers (the untraced first
    step of a steady state) are not.  The other fields (model, config, input shape) are ``like``'s, save ``fields``."""
    log = frees_in_allocation_order(log, [pos for pos, kind, _ in markers if kind != "first"])
    sizes = [s[3] for s in storages]
    cats = [s[0] for s in storages]
    now = [0] * len(storages)
    totals = dict.fromkeys(CATEGORIES, 0)
    allocated = peak = peak_log = made = 0
    peak_at, events, m = -1, [], 0
    lives = [log, [pos for pos, kind, _ in markers if kind == "event"]]
    for j in range(len(log) + 1):
        while m < len(markers) and markers[m][0] == j:
            _, kind, payload = markers[m]
            m += 1
            if kind == "reset":
                peak, peak_log, peak_at = allocated, j, made - 1
            elif kind == "event":
                by = dict(totals)
                by["other"] += allocated - sum(by.values())
                phase, module, module_type, note, shape = payload
                events.append((Event(len(events), phase, module, module_type, note, allocated,
                                     allocated - (events[-1][0].allocated_bytes if events else 0), peak, shape,
                                     0 if not module else module.count(".") + 1, _LiveAt(lives, len(events)), j), by))
        if j == len(log):
            break
        serial, kind, delta = log[j]
        made += kind == "alloc"
        was, now[serial] = now[serial], now[serial] + delta
        if not was and now[serial]:
            totals[cats[serial]] += sizes[serial]
        elif was and not now[serial]:
            totals[cats[serial]] -= sizes[serial]
        allocated += delta
        if allocated > peak:
            peak, peak_log, peak_at = allocated, j + 1, serial
    return _profile_of(log, storages, events, peak, peak_log, peak_at, like, fields)


class _LiveAt(Sequence):
    """:attr:`helpers.engine.trace.Event.live` of event ``k`` of a written step (ascending serials, as traced), worked
    out for every event when one is first read: thousands of events, thousands of storages each, most never read."""

    def __init__(self, shared: list, k: int):
        self._shared, self._k = shared, k  # [log, the events' log positions], then every event's serials

    def __getitem__(self, i):
        if len(self._shared) == 2:
            (log, positions), now, alive, lives, j = self._shared, {}, {}, [], 0
            for position in positions:
                for serial, _, delta in log[j:position]:
                    was = now.get(serial, 0)
                    now[serial] = was + delta
                    if not was and now[serial]:
                        alive[serial] = None
                    elif was and not now[serial]:
                        del alive[serial]
                lives.append(tuple(sorted(alive)))
                j = position
            self._shared.append(lives)
        return self._shared[2][self._k][i]

    def __len__(self) -> int:
        return len(self[:])

    def __eq__(self, other) -> bool:
        return self[:] == (tuple(other) if isinstance(other, Sequence) else other)


def _profile_of(log, storages, events, peak, peak_log, peak_at, like, fields) -> StepProfile:
    """:func:`profile_of_log`'s profile, from its replay."""
    now: dict[int, int] = {}
    for serial, _, delta in log[:peak_log]:
        now[serial] = now.get(serial, 0) + delta
    at_peak = tuple(s for s, n in now.items() if n)
    by = dict.fromkeys(CATEGORIES, 0)
    for s in at_peak:
        by[storages[s][0]] += storages[s][3]
    by["other"] += peak - sum(by.values())
    positions = [e.log_position for e, _ in events]
    values = dict(like.__dict__, events=[e for e, _ in events], event_categories=[c for _, c in events],
                  peak_allocated_bytes=peak, peak_event=next(e.index for e, _ in events if e.peak_bytes == peak),
                  categories=by, reserved_bytes=None, peak_allocation=peak_at, peak_serials=at_peak,
                  storages={s: Storage(s, *meta) for s, meta in enumerate(storages)},
                  allocation_log=[Allocation(s, kind, delta, storages[s][0], bisect.bisect_right(positions, i))
                                  for i, (s, kind, delta) in enumerate(log)])
    values.update(fields)
    return StepProfile(**values)
