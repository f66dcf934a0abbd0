"""The caching-allocator model (helpers.allocator): one test per rule of
c10/cuda/CUDACachingAllocator.cpp that it models, and replays of real logs."""

import pytest

from helpers import profile_step
from helpers.allocator import (AllocatorOutOfMemory, AllocatorSettings, CachingAllocator, replay, round_size,
                               get_allocation_size)

MiB = 2**20


def blocks(alloc):
    """(size, allocated) of every mapped block, segment by segment."""
    return [[(b.size, b.allocated) for b in s.blocks if b.mapped] for s in alloc.segments]


def test_rule1_sizes_round_up_to_512_bytes():
    assert [round_size(n) for n in (0, 1, 512, 513, 4000)] == [512, 512, 512, 1024, 4096]
    a = CachingAllocator()
    a.malloc(4)
    assert a.allocated == 512 and a.requested == 512
    with pytest.raises(ValueError, match=">= 0"):
        round_size(-1)


def test_rules2_3_pools_and_get_allocation_sizes():
    assert get_allocation_size(MiB) == 2 * MiB                  # small pool: 2 MiB segments
    assert get_allocation_size(MiB + 512) == 20 * MiB           # 1-10 MiB: 20 MiB segments
    assert get_allocation_size(10 * MiB - 512) == 20 * MiB
    assert get_allocation_size(10 * MiB) == 10 * MiB            # larger: rounded up to 2 MiB
    assert get_allocation_size(49 * MiB) == 50 * MiB
    a = CachingAllocator()
    a.malloc(MiB)        # small pool
    a.malloc(MiB + 512)  # large pool: does not share the small segment
    assert [s.small for s in a.segments] == [True, False]
    assert a.reserved == 22 * MiB


def test_small_requests_share_a_2_mib_segment():
    a = CachingAllocator()
    for _ in range(5):
        a.malloc(512 * 1024)  # four fill the first segment, the fifth opens a second
    assert len(a.segments) == 2 and a.reserved == 4 * MiB and a.allocated == 5 * 512 * 1024


def test_rule4_best_fit_takes_the_smallest_free_block_that_fits():
    a = CachingAllocator()
    big, small = a.malloc(60 * MiB), a.malloc(30 * MiB)
    a.free(big)
    a.free(small)
    chosen = a.malloc(25 * MiB)
    assert chosen.segment is small.segment
    assert a.reserved == 90 * MiB  # no new segment


def test_rule5_a_large_rest_of_1_mib_or_less_is_not_split():
    a = CachingAllocator()
    b = a.malloc(49 * MiB)  # a 50 MiB segment; the 1 MiB rest stays in the block
    assert b.size == 50 * MiB and a.allocated == 50 * MiB and a.requested == 49 * MiB
    a.free(b)
    c = a.malloc(40 * MiB)  # rest 10 MiB: split
    assert c.size == 40 * MiB and blocks(a) == [[(40 * MiB, True), (10 * MiB, False)]]


def test_rule5_small_pool_splits_any_rest_of_512_bytes():
    a = CachingAllocator()
    a.malloc(MiB)
    a.malloc(MiB - 512)  # the rest of the 2 MiB segment is 512 bytes: still split off
    assert blocks(a) == [[(MiB, True), (MiB - 512, True), (512, False)]]


def test_rule6_freed_neighbours_merge():
    a = CachingAllocator()
    x = a.malloc(40 * MiB)
    a.free(x)
    parts = [a.malloc(10 * MiB) for _ in range(4)]
    assert len(blocks(a)[0]) == 4
    a.free(parts[1])
    a.free(parts[2])
    assert blocks(a)[0] == [(10 * MiB, True), (20 * MiB, False), (10 * MiB, True)]
    a.free(parts[0])
    a.free(parts[3])
    assert blocks(a) == [[(40 * MiB, False)]]


def test_rule7_8_a_failed_cudamalloc_frees_the_cache_and_retries():
    a = CachingAllocator(capacity=100 * MiB)
    x = a.malloc(60 * MiB)
    a.free(x)                       # cached, reserved
    y = a.malloc(70 * MiB)          # 60 cached + 70 > 100: empty the cache, retry
    assert a.num_alloc_retries == 1 and a.reserved == 70 * MiB and y.size == 70 * MiB
    assert [e["action"] for e in a.trace] == ["segment_alloc", "alloc", "free_completed", "segment_free",
                                              "segment_alloc", "alloc"]


def test_fragmentation_out_of_memory_with_free_memory_left():
    a = CachingAllocator(capacity=1024 * MiB)
    a.free(a.malloc(1000 * MiB))
    parts = [a.malloc(98 * MiB) for _ in range(10)]  # all inside the cached 1000 MiB segment
    for p in parts[::2]:
        a.free(p)
    assert a.reserved - a.allocated == 510 * MiB and a.largest_free() == 98 * MiB
    with pytest.raises(AllocatorOutOfMemory, match="Tried to allocate 150.00 MiB") as err:
        a.malloc(150 * MiB)
    assert (err.value.reserved, err.value.allocated, err.value.largest_free) == (1000 * MiB, 490 * MiB, 98 * MiB)
    assert a.num_ooms == 1


def test_max_split_size_keeps_oversize_blocks_whole():
    a = CachingAllocator(capacity=1024 * MiB, settings="max_split_size_mb:512")
    a.free(a.malloc(1000 * MiB))
    parts = [a.malloc(98 * MiB) for _ in range(10)]  # may not split the 1000 MiB block: it is released
    assert a.num_device_free == 1 and all(len(s.blocks) == 1 for s in a.segments)
    for p in parts[::2]:
        a.free(p)
    a.malloc(150 * MiB)  # the five free 98 MiB segments go back on the retry
    assert a.reserved == 640 * MiB


def test_max_split_size_oversize_request_takes_a_block_only_within_20_mib():
    a = CachingAllocator(settings=AllocatorSettings(max_split_size_mb=64))
    a.free(a.malloc(100 * MiB))
    a.malloc(70 * MiB)  # 100 >= 70 + 20: not this block
    assert a.reserved == 170 * MiB
    b = CachingAllocator(settings=AllocatorSettings(max_split_size_mb=64))
    b.free(b.malloc(100 * MiB))
    got = b.malloc(85 * MiB)  # within 20 MiB: takes it whole
    assert b.reserved == 100 * MiB and got.size == 100 * MiB and b.allocated == 100 * MiB


def test_expandable_segments_grow_one_segment_and_give_free_pages_back():
    a = CachingAllocator(capacity=1024 * MiB, settings="expandable_segments:True")
    a.free(a.malloc(1000 * MiB))
    assert a.reserved == 1000 * MiB  # 50 pages of 20 MiB
    parts = [a.malloc(98 * MiB) for _ in range(10)]
    for p in parts[::2]:
        a.free(p)
    a.malloc(150 * MiB)  # the free pages inside the holes are unmapped and mapped again at the end
    assert a.num_alloc_retries == 1 and a.reserved <= 1024 * MiB
    assert len(a.segments) == 1 and a.segments[0].expandable
    assert a.allocated == 5 * 98 * MiB + 150 * MiB  # blocks split exactly: no unsplit rests


def test_expandable_segments_map_only_what_the_request_needs():
    a = CachingAllocator(settings="expandable_segments:True")
    a.malloc(30 * MiB)
    assert a.reserved == 40 * MiB  # two 20 MiB pages
    a.malloc(5 * MiB)  # fits the mapped rest
    assert a.reserved == 40 * MiB and a.num_device_alloc == 1


def test_empty_cache_keeps_segments_with_a_live_block():
    a = CachingAllocator()
    x, y = a.malloc(40 * MiB), a.malloc(40 * MiB)
    a.free(x)
    a.free(y)
    z = a.malloc(10 * MiB)  # splits y's segment
    assert a.empty_cache() == 40 * MiB  # x's segment goes; y's stays (z lives in it)
    assert a.reserved == 40 * MiB
    a.free(z)
    assert a.empty_cache() == 40 * MiB and a.reserved == 0


def test_settings_are_validated_in_one_place():
    assert str(AllocatorSettings.parse("max_split_size_mb:128,expandable_segments:True")) == \
        "max_split_size_mb:128,expandable_segments:True"
    assert str(AllocatorSettings.parse("")) == "defaults"
    for bad, message in (("garbage_collection_threshold:0.6", "garbage_collection_threshold is not modelled"),
                         ("max_split_size_mb:lots", "whole number"), ("max_split_size_mb:19", ">= 20"),
                         ("expandable_segments:yes", "True or False")):
        with pytest.raises(ValueError, match=message):
            AllocatorSettings.parse(bad)
    with pytest.raises(ValueError, match="capacity"):
        CachingAllocator(capacity=0)
    for m in (19, True, 64.0):
        with pytest.raises(ValueError, match=rf"^max_split_size_mb must be a whole number of MiB >= 20, got {m!r}$"):
            AllocatorSettings(max_split_size_mb=m)
    assert AllocatorSettings(max_split_size_mb=20).max_split_size_mb == 20
    for capacity in (0, True, 1.5):
        with pytest.raises(ValueError, match=rf"^capacity must be a positive number of bytes or None, "
                                             rf"got {capacity!r}$"):
            CachingAllocator(capacity=capacity)


def test_bad_logs_get_one_line_errors():
    with pytest.raises(ValueError, match="never allocated"):
        replay([(0, "free", -512)])
    with pytest.raises(ValueError, match="unknown kind"):
        replay([(0, "grow", 512)])
    a = CachingAllocator()
    b = a.malloc(512)
    a.free(b)
    with pytest.raises(ValueError, match="not allocated"):
        a.free(b)


def test_resize_allocates_the_new_size_before_freeing_the_old():
    r = replay([(0, "alloc", 30 * MiB), (0, "resize", 30 * MiB), (0, "resize", -60 * MiB)])
    assert r.allocated == [30 * MiB, 60 * MiB, 0] and r.peak_allocated == 90 * MiB


@pytest.fixture(scope="module")
def resnet_step():
    return profile_step("resnet18", 32, device="simulated", steady_state=True)


@pytest.mark.parametrize("conf", ["", "max_split_size_mb:64", "expandable_segments:True"])
def test_a_replayed_step_keeps_reserved_at_or_above_allocated(resnet_step, conf):
    r = replay(resnet_step.allocation_log, settings=conf)
    assert r.error is None and len(r.allocated) == len(resnet_step.allocation_log)
    assert all(req <= a <= res for req, a, res in zip(r.requested, r.allocated, r.reserved))
    # requested bytes are the engine's count, event by event
    assert max(r.requested) == resnet_step.peak_allocated_bytes
    for seg in r.allocator.segments:  # blocks tile their segment
        mapped = [b for b in seg.blocks if b.mapped]
        assert all(x.address + x.size == y.address for x, y in zip(seg.blocks, seg.blocks[1:]))
        assert sum(b.size for b in mapped) == seg.size


def test_the_second_iteration_asks_the_driver_for_nothing(resnet_step):
    r = replay(resnet_step.allocation_log)
    start = resnet_step.events[0].log_position  # the traced (second) step
    assert r.segments_opened(0, start) > 0 and r.segments_opened(start) == 0
    assert r.reserved[start - 1] == r.reserved[-1] == r.peak_reserved


def test_snapshot_is_shaped_like_torch_cuda_memory_snapshot(resnet_step):
    r = replay(resnet_step.allocation_log)
    snap = r.allocator.snapshot()
    assert sum(s["total_size"] for s in snap) == r.allocator.reserved
    assert sum(s["allocated_size"] for s in snap) == r.allocator.allocated
    assert {b["state"] for s in snap for b in s["blocks"]} <= {"active_allocated", "inactive"}


def test_smallest_capacity_scans_up_to_the_first_that_works():
    from helpers.allocator import smallest_capacity

    log = [(0, "alloc", 1000 * MiB), (0, "free", -1000 * MiB)] + [(1 + i, "alloc", 98 * MiB) for i in range(10)] + \
          [(1 + i, "free", -98 * MiB) for i in range(0, 10, 2)] + [(11, "alloc", 150 * MiB)]
    need = smallest_capacity(log, start=980 * MiB)
    assert replay(log, capacity=need).error is None and replay(log, capacity=need - 2 * MiB).error is not None
    assert need == 1150 * MiB  # the 150 MiB segment beside the pinned 1000 MiB one
    assert smallest_capacity(log, "expandable_segments:True", start=980 * MiB) < need
    with pytest.raises(ValueError, match="step"):
        smallest_capacity(log, step=0)
