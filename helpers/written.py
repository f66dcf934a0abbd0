"""The :class:`helpers.record.StepProfile` of a step written, not traced (:mod:`helpers.depth`).

:func:`profile_of_log` replays a written allocation log as :class:`helpers.engine.counting.StorageTracker` counts a
traced one, and reads from it every field :func:`helpers.record.record_step` reads from a traced step's meter; the
storages alive at each event are worked out only when first read (:class:`_LiveAt`).
"""

from __future__ import annotations

import bisect
import functools
import operator
from collections.abc import Sequence
from itertools import accumulate

from .engine.event import Event
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



def numbered_log(log: list, storages: list, markers: tuple, constants: dict, negated: dict) -> NumberedLog | None:
    """A :class:`NumberedLog` of a log whose sizes are numbers, or None where :func:`profile_of_log`'s replay of it is
    not a sum of its changes: a storage of no category of :data:`helpers.record.CATEGORIES`, an entry neither an
    allocation nor a free, a storage allocated twice or freed twice or before it is allocated, an allocation that is
    not its storage's bytes or a free that is not their negation.

    Args:
        log: entries ``(serial, kind, number of the change)``.
        storages: by serial, ``(category, dtype, shape as numbers, number of the bytes)``.
        markers: ``(log position, kind, payload)`` as :func:`profile_of_log` has them, an event's shape as numbers.
        constants: number -> value, for the numbers whose value is the same at every point.
        negated: number of a storage's bytes -> number of their negation (where it is numbered).
    """
    if any(category not in CATEGORIES for category, _, _, _ in storages):
        return None
    log = frees_in_allocation_order(log, [pos for pos, kind, _ in markers if kind != "first"])
    made, freed = {}, {}
    for i, (serial, kind, number) in enumerate(log):
        size = storages[serial][3]
        if kind == "alloc" and serial not in made and number == size:
            made[serial] = i
        elif kind == "free" and serial in made and serial not in freed and number == negated.get(size):
            freed[serial] = i
        else:
            return None
    return NumberedLog(log, storages, markers, constants, made, freed)


class NumberedLog:
    """:func:`profile_of_log` of one log read at many points (a symbolic step's, :mod:`helpers.symbolic`), where only
    the sizes change: each size is a number, the position of its value in a point's table of values.

    What does not depend on the values is worked out once (:func:`numbered_log`): the frees in allocation order, each
    entry's event and category, when each storage is allocated and freed, the events but their bytes, the storages
    whose shape and bytes are constants.  :meth:`profile` then reads a point with sums instead of the replay's loop:
    the bytes allocated after each entry (``itertools.accumulate``), the peak by each event the largest of them since
    the last reset of the peak, the bytes of a category at an event the sum of its entries' changes before it, the
    storages alive at the peak those allocated before it and freed after.  That is the replay wherever each storage is
    allocated once with its bytes and freed at most once with their negation (:func:`numbered_log` checks it) and no
    storage has 0 bytes (never alive in the replay; :meth:`profile` checks it at each point).
    """

    def __init__(self, log: list, storages: list, markers: tuple, constants: dict, made: dict, freed: dict):
        self._serials, self._kinds, self._numbers = (tuple(column) for column in zip(*log)) if log else ((),) * 3
        self._marks = [(pos, kind) for pos, kind, _ in markers if kind in ("reset", "event")]
        self._positions = [pos for pos, kind in self._marks if kind == "event"]
        self._categories = tuple(storages[s][0] for s in self._serials)
        self._events = tuple(bisect.bisect_right(self._positions, i) for i in range(len(log)))
        self._of = [[] for _ in CATEGORIES]  # the entries of each category
        slot = {c: self._of[i] for i, c in enumerate(CATEGORIES)}
        for i, category in enumerate(self._categories):
            slot[category].append(i)
        self._before = [[bisect.bisect_left(of, pos) for pos in self._positions] for of in self._of]
        empty = {s for s in made if constants.get(storages[s][3], 1) == 0}  # never alive
        self._sizes = tuple({storages[s][3] for s in made} - set(constants))  # checked at each point
        self._alive = sorted((made[s], freed.get(s, len(log)), s) for s in made if s not in empty)
        self._allocated_at = [a for a, _, _ in self._alive]
        self._made_before = {pos: sum(1 for a in made.values() if a < pos)
                             for pos in {0} | {pos for pos, kind in self._marks if kind == "reset"}}
        lives = [[(s, kind, 0 if s in empty else 1 if kind == "alloc" else -1)
                  for s, kind in zip(self._serials, self._kinds)], self._positions]  # every point's events share it
        self._lives = [_LiveAt(lives, k) for k in range(len(self._positions))]
        self._storages = [Storage(s, category, dtype, tuple(constants[n] for n in shape), constants[nbytes])
                          if nbytes in constants and all(n in constants for n in shape) else
                          (s, category, dtype, shape, nbytes) for s, (category, dtype, shape, nbytes)
                          in enumerate(storages)]
        self._varying_shapes = {s[3] for s in self._storages if type(s) is not Storage}
        fields = [p for _, kind, p in markers if kind == "event"]
        self._fields = [list(column) for column in zip(*fields)][:4] if fields else [[]] * 4  # phase, module, type, note
        self._shapes = [None if p[4] is None else tuple(constants[n] for n in p[4])
                        if all(n in constants for n in p[4]) else list(p[4]) for p in fields]  # a list: numbers
        self._depths = [0 if not p[1] else p[1].count(".") + 1 for p in fields]

    def profile(self, values: list, like: StepProfile, **fields) -> StepProfile | None:
        """The profile at the point whose values (by number) are ``values``: what :func:`profile_of_log` gives of the
        log with them in; None where a storage has 0 bytes there, or no event holds the peak."""
        if any(values[n] == 0 for n in self._sizes):
            return None
        deltas = list(map(values.__getitem__, self._numbers))
        allocated = list(accumulate(deltas, initial=0))
        tops, start, top, seen = [], 0, 0, 0  # the peak by each event; the last reset; the peak by position seen - 1
        for pos, kind in self._marks:
            if pos >= seen:
                top, seen = max(top, max(allocated[seen:pos + 1])), pos + 1
            if kind == "reset":
                top, start = allocated[pos], pos
            else:
                tops.append(top)
        peak, peak_log, peak_at = max(top, max(allocated[seen:], default=top)), start, self._made_before[start] - 1
        if peak > allocated[start]:
            peak_log = allocated.index(peak, start + 1)
            peak_at = self._serials[peak_log - 1]
        if peak not in tops:  # no event holds the peak: profile_of_log says how that fails
            return None
        at_peak = tuple(s for _, f, s in self._alive[:bisect.bisect_left(self._allocated_at, peak_log)]
                        if f >= peak_log)
        events, by_category = self._replayed_events(values, deltas, allocated, tops)
        values = dict(like.__dict__, events=events, event_categories=by_category, peak_allocated_bytes=peak,
                      peak_event=tops.index(peak), categories=self._at_peak(values, at_peak, peak),
                      reserved_bytes=None, peak_allocation=peak_at, peak_serials=at_peak,
                      storages=self._storages_at(values),
                      allocation_log=list(map(_ALLOCATION, zip(self._serials, self._kinds, deltas, self._categories,
                                                               self._events))))
        values.update(fields)
        return StepProfile(**values)

    def _replayed_events(self, values: list, deltas: list, allocated: list, tops: list) -> tuple[list, list]:
        """The events, and each one's bytes by category, as :func:`profile_of_log`'s replay makes them."""
        at = list(map(allocated.__getitem__, self._positions))
        shapes = [s if type(s) is not list else tuple(map(values.__getitem__, s)) for s in self._shapes]
        events = list(map(Event, range(len(at)), *self._fields, at, map(operator.sub, at, [0] + at), tops, shapes,
                          self._depths, self._lives, self._positions))
        columns = [map(list(accumulate(map(deltas.__getitem__, of), initial=0)).__getitem__, before)
                   for of, before in zip(self._of, self._before)]
        by_category = [dict(zip(CATEGORIES, row)) for row in zip(*columns)]
        for by, allocated_then in zip(by_category, at):
            by["other"] += allocated_then - sum(by.values())
        return events, by_category

    def _at_peak(self, values: list, at_peak: tuple, peak: int) -> dict[str, int]:
        """Bytes by category of the storages alive at the peak, the rest ``other``."""
        by = dict.fromkeys(CATEGORIES, 0)
        for s in at_peak:
            storage = self._storages[s]
            if type(storage) is Storage:
                by[storage.category] += storage.nbytes
            else:
                by[storage[1]] += values[storage[4]]
        by["other"] += peak - sum(by.values())
        return by

    def _storages_at(self, values: list) -> dict[int, Storage]:
        """Every storage at this point; those whose shape and bytes are constants are made once, each shape once."""
        shapes = {numbers: tuple(map(values.__getitem__, numbers)) for numbers in self._varying_shapes}
        return {s: storage if type(storage) is Storage else
                Storage(s, storage[1], storage[2], shapes[storage[3]], values[storage[4]])
                for s, storage in enumerate(self._storages)}


#: An :class:`helpers.record.Allocation` made from one tuple of its fields, as ``Allocation._make`` makes it.
_ALLOCATION = functools.partial(tuple.__new__, Allocation)
