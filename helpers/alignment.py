"""Two sequences of allocations paired, the same tensor on each side (:func:`helpers.snapshot.align`).

A real GPU's trace and the same step simulated allocate mostly the same tensors in mostly the same order, with
additions on either side (a kernel's own buffer, a workspace) and some tensors made in another order.  :func:`pair`
matches them as a diff matches two texts: rare entries first, as patience diff does, then a walk between them, then
the leftovers within a window, and equal keys made together paired by lifetime.  Keys are any hashable values (here a
size and whether the tensor is kept); the sequences are plain lists.
"""

from __future__ import annotations

import bisect
from collections import defaultdict

#: An entry found this often or less, as often in each sequence, anchors the pairing (:func:`_match`).
RARE = 4
#: How far (in entries) from where the pairing expects it an entry of the same key may be and still be the same
#: tensor, made in another order.
REORDER_WINDOW = 64


def pair(a: list, b: list, lives_a: list[tuple[int, int | None]], lives_b: list[tuple[int, int | None]]
         ) -> dict[int, int]:
    """Pairs ``{i: j}`` of entries with ``a[i] == b[j]``, the same tensor on each side.

    :func:`_match` pairs them in order; an entry left on one side is then paired with one of the same key left on the
    other within :data:`REORDER_WINDOW` entries of where its paired neighbours put it; and equal keys made together
    are paired by lifetime (:func:`_by_lifetime`).

    Args:
        a, b: the two sequences of keys.
        lives_a, lives_b: per entry, when it was made and freed (None: never), in each side's own units.
    """
    pairs = _match(a, b)
    known = sorted(pairs.items())
    waiting: dict = defaultdict(list)  # key -> the unpaired positions in b, ascending
    for j in sorted(set(range(len(b))) - set(pairs.values())):
        waiting[b[j]].append(j)
    for i, key in enumerate(a):
        if i in pairs or not waiting[key]:
            continue
        k = bisect.bisect_left(known, (i, -1))
        expected = known[k - 1][1] + i - known[k - 1][0] if k else i
        at = bisect.bisect_left(waiting[key], expected)
        near = min(waiting[key][max(at - 1, 0):at + 1], key=lambda j: abs(j - expected))
        if abs(near - expected) <= REORDER_WINDOW:
            pairs[i] = near
            waiting[key].remove(near)
    _by_lifetime(pairs, a, lives_a, lives_b)
    return pairs


def _walk(a: list, b: list, window: int = REORDER_WINDOW, confirm: int = 4) -> dict[int, int]:
    """Pairs ``{i: j}`` with ``a[i] == b[j]``, in order.  Walking both lists: equal heads pair; else the nearest skip
    of at most ``window`` entries on one side after which ``confirm`` entries agree (that side allocated what the other
    did not); else both heads stay unpaired (sizes that differ, or the same tensors in another order, which
    :func:`align` pairs after).  When fewer than one head in ten has paired over the last ``window`` or so (a long
    stretch on one side only, such as a quantization the other side does not trace), one side skips to where the
    other's next ``confirm`` entries occur, the shorter skip of the two."""
    def runs(seq: list) -> dict[tuple, list[int]]:
        at: dict[tuple, list[int]] = defaultdict(list)
        for k in range(len(seq) - confirm + 1):
            at[tuple(seq[k:k + confirm])].append(k)
        return at

    def ahead(table: dict, key: list, start: int) -> int | None:
        found = table.get(tuple(key), [])
        k = bisect.bisect_left(found, start)
        return found[k] - start if k < len(found) else None

    def agrees(i: int, j: int) -> bool:
        n = min(confirm, len(a) - i, len(b) - j)
        return n > 0 and a[i:i + n] == b[j:j + n]

    in_a, in_b = runs(a), runs(b)
    pairs, i, j, rate = {}, 0, 0, 1.0  # rate: how often heads pair, recently
    while i < len(a) and j < len(b):
        rate += ((a[i] == b[j]) - rate) / window
        if a[i] == b[j]:
            pairs[i] = j
            i, j = i + 1, j + 1
            continue
        skip = next(((k, 0) if agrees(i + k, j) else (0, k) for k in range(1, window + 1)
                     if agrees(i + k, j) or agrees(i, j + k)), (1, 1))
        if skip == (1, 1) and rate < 0.1:
            far = [(k, 0) for k in [ahead(in_a, b[j:j + confirm], i)] if k] + \
                  [(0, k) for k in [ahead(in_b, a[i:i + confirm], j)] if k]
            skip, rate = min(far, key=sum, default=skip), 1.0
        i, j = i + skip[0], j + skip[1]
    return pairs


def _match(a: list, b: list) -> dict[int, int]:
    """Pairs ``{i: j}`` with ``a[i] == b[j]``, in order, much as patience diff finds them (B. Cohen's, in Bazaar and
    ``git diff --patience``): an entry found as often in each list, and at most :data:`RARE` times (once a step:
    the logits, a layer's own shapes), pairs its k-th occurrences; the longest run of those pairs whose positions rise
    on both sides fixes the rest; between two of them the search starts again, and a part without such entries is
    walked by :func:`_walk`."""
    pairs: dict[int, int] = {}
    todo = [(0, len(a), 0, len(b))]
    while todo:
        a0, a1, b0, b1 = todo.pop()
        seen_a: dict = defaultdict(list)
        seen_b: dict = defaultdict(list)
        for i in range(a0, a1):
            seen_a[a[i]].append(i)
        for j in range(b0, b1):
            seen_b[b[j]].append(j)
        unique = sorted(pair for key, where_a in seen_a.items() if len(where_a) == len(seen_b.get(key, ())) <= RARE
                        for pair in zip(where_a, seen_b[key]))
        anchors = _rising(unique)
        if not anchors:
            pairs.update((a0 + i, b0 + j) for i, j in _walk(a[a0:a1], b[b0:b1]).items())
            continue
        pairs.update(anchors)
        for (i0, j0), (i1, j1) in zip([(a0 - 1, b0 - 1), *anchors], [*anchors, (a1, b1)]):
            if i1 > i0 + 1 and j1 > j0 + 1:
                todo.append((i0 + 1, i1, j0 + 1, j1))
    return pairs


def _rising(points: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest run of ``points`` (sorted by their first number) whose second numbers rise (patience sorting)."""
    tops: list[int] = []  # the second number ending the best run of each length
    ends: list[int] = []  # the index of that point
    before = [-1] * len(points)
    for k, (_, j) in enumerate(points):
        n = bisect.bisect_left(tops, j)
        before[k] = ends[n - 1] if n else -1
        tops[n:n + 1], ends[n:n + 1] = [j], [k]
    run, k = [], ends[-1] if ends else -1
    while k >= 0:
        run.append(points[k])
        k = before[k]
    return run[::-1]


def _by_lifetime(pairs: dict[int, int], keys: list, lives_a: list, lives_b: list, near: int = 8) -> None:
    """Within each cluster of pairs of one key whose GPU allocations lie at most ``near`` apart (an operation that
    makes two tensors of one size), pair again by lifetime: the longest-lived on one side with the longest-lived on
    the other (the two sides may make them in different orders)."""
    def life(made_freed: tuple[int, int | None]) -> float:
        return float("inf") if made_freed[1] is None else made_freed[1] - made_freed[0]

    groups: list[list[int]] = []
    filling: dict = {}  # key -> its group being filled
    for i in sorted(pairs):
        group = filling.get(keys[i])
        if group is not None and i - group[-1] <= near:
            group.append(i)
        else:
            filling[keys[i]] = group = [i]
            groups.append(group)
    for group in (g for g in groups if len(g) > 1):
        sims = sorted((pairs[i] for i in group), key=lambda j: -life(lives_b[j]))
        for i, j in zip(sorted(group, key=lambda i: -life(lives_a[i])), sims):
            pairs[i] = j
