"""A log read at a point as sums (:class:`helpers.written.NumberedLog`, what a symbolic step's evaluation uses) gives the
profile that the replay of :func:`helpers.written.profile_of_log` gives of the same log with the values put in, in
every compared field (:func:`helpers.evaluated.differs`) and in each event's live storages, over random logs drawn
by hypothesis: storages of every category allocated and freed in random order (runs of frees put in allocation
order), events and resets of the peak anywhere (two at one position, one before the first entry, one after the
last), storages whose bytes are constants, and bytes of 0 at the point, where it must decline (None) rather than
differ.  ``tests/test_symbolic*.py`` compare both with concrete traces of real steps.
"""

import torch
from hypothesis import event, given, settings, strategies as st

from helpers.config import StepConfig
from helpers.evaluated import differs
from helpers.record import CATEGORIES, StepProfile
from helpers.written import numbered_log, profile_of_log

_LIKE = StepProfile(backend="simulated", model="drawn", config=StepConfig(device="simulated"), input_shape=(),
                    parameter_count=0, events=[], event_categories=[], peak_allocated_bytes=0, peak_event=0,
                    categories={}, reserved_bytes=None)


@st.composite
def numbered_logs(draw):
    """``(log, storages, markers, constants, negated, values)`` in :func:`numbered_log`'s form: each storage's bytes
    a number of ``values`` and its negation another, some numbers constants."""
    n = draw(st.integers(1, 12))
    sizes = draw(st.lists(st.sampled_from([512, 1024, 4096, 2**20, 3 * 2**20]), min_size=n, max_size=n))
    if draw(st.integers(0, 3)) == 0:  # a storage of 0 bytes (never alive)
        sizes[draw(st.integers(0, n - 1))] = 0
    values = [v for size in sizes for v in (size, -size)]  # storage s: bytes 2s, their negation 2s + 1
    constant = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    constants = {i: values[i] for s in range(n) if constant[s] for i in (2 * s, 2 * s + 1)}
    storages = [(draw(st.sampled_from(CATEGORIES)), torch.float32, (2 * s,), 2 * s) for s in range(n)]
    log, live = [], []
    for s in range(n):
        log.append((s, "alloc", 2 * s))
        live.append(s)
        for _ in range(draw(st.integers(0, len(live)))):
            freed = live.pop(draw(st.integers(0, len(live) - 1)))
            log.append((freed, "free", 2 * freed + 1))
    positions = sorted(draw(st.lists(st.integers(0, len(log)), min_size=1, max_size=2 * len(log) + 2)))
    markers = tuple((pos, draw(st.sampled_from(["event", "event", "reset", "first"])),
                     ("fwd", draw(st.sampled_from(["", "a", "a.b"])), "Linear", None, (2 * draw(st.integers(0, n - 1)),)))
                    for pos in positions)
    markers = tuple((pos, kind, None if kind == "reset" else payload) for pos, kind, payload in markers)
    if draw(st.booleans()):  # an event at the end, as a step has (else the peak may come after the last one)
        markers += ((len(log), "event", ("bwd", "", "Linear", None, None)),)
    return log, storages, markers, constants, {2 * s: 2 * s + 1 for s in range(n)}, values


def _with_values(log, storages, markers, values):
    return ([(s, kind, values[i]) for s, kind, i in log],
            [(c, dtype, tuple(values[i] for i in shape), values[nbytes]) for c, dtype, shape, nbytes in storages],
            [(pos, kind, p if p is None or p[4] is None else (*p[:4], tuple(values[i] for i in p[4])))
             for pos, kind, p in markers])


@settings(max_examples=300, derandomize=True, deadline=None)
@given(numbered_logs())
def test_a_log_read_as_sums_is_the_replay(drawn):
    log, storages, markers, constants, negated, values = drawn
    read = numbered_log(log, storages, markers, constants, negated)
    assert read is not None
    got = read.profile(values, _LIKE)
    try:
        replayed = profile_of_log(*_with_values(log, storages, markers, values), _LIKE)
    except StopIteration:  # no event holds the peak (or there is no event)
        assert got is None
        event('no event holds the peak')
        return
    if got is None:  # declined: only where an allocated storage has 0 bytes at this point
        assert any(values[storages[s][3]] == 0 and (s, "alloc", storages[s][3]) in log
                   for s in range(len(storages)) if storages[s][3] not in constants)
        event('declined: 0 bytes')
        return
    event(f'compared, {sum(k == "reset" for _, k, _ in markers)} resets')
    assert differs(got, replayed) is None, differs(got, replayed)
    assert [e.live[:] for e in got.events] == [e.live[:] for e in replayed.events]


def test_a_log_that_is_not_a_sum_of_its_changes_is_not_numbered():
    storages = [("other", torch.float32, (0,), 0)]
    markers = ((2, "event", ("fwd", "", "Linear", None, None)),)
    for log in ([(0, "alloc", 0), (0, "alloc", 0)],  # allocated twice
                [(0, "free", 1), (0, "alloc", 0)],  # freed before it is allocated
                [(0, "alloc", 1), (0, "free", 1)],  # an allocation that is not its bytes
                [(0, "alloc", 0), (0, "free", 0)],  # a free that is not their negation
                [(0, "alloc", 0), (0, "resize", 1)]):
        assert numbered_log(log, storages, markers, {}, {0: 1}) is None, log
    assert numbered_log([(0, "alloc", 0), (0, "free", 1)], storages, markers, {}, {0: 1}) is not None
    weights = [("weights", torch.float32, (0,), 0)]  # no category of CATEGORIES: the replay fails on it
    assert numbered_log([(0, "alloc", 0), (0, "free", 1)], weights, markers, {}, {0: 1}) is None
