"""Defects of the caching-allocator model found against PyTorch 2.14.1's own
allocator (issue 23), one test each; every rule is PyTorch's
``c10/cuda/CUDACachingAllocator.cpp`` and ``c10/core/AllocatorConfig.cpp`` of
the pinned wheel (the option checks were read off its ``libc10.so``)."""

import pytest

from helpers.allocator import AllocatorOutOfMemory, AllocatorSettings, CachingAllocator, replay, round_size

MiB = 2**20


def expandable_with_a_hole_then_a_free_page():
    """An expandable segment laid out as [unmapped 20 MiB][free 20 MiB][unmapped ...]."""
    a = CachingAllocator(capacity=1024 * MiB, settings="expandable_segments:True")
    first, second = a.malloc(20 * MiB), a.malloc(20 * MiB)
    a.free(first)
    a.empty_cache()      # the first page goes back: a hole
    a.free(second)       # the second page stays mapped, free
    assert a.reserved == 20 * MiB
    return a


def test_defect1_expandable_maps_only_the_pages_missing_after_a_free_block():
    a = expandable_with_a_hole_then_a_free_page()
    block = a.malloc(50 * MiB)  # hole (20) + free page (20) + 10 MiB more: one more 20 MiB page
    assert a.reserved == 60 * MiB and a.num_device_alloc == 4  # two pages before, two now
    assert block.address == a.segments[0].address and a.allocated == 50 * MiB


def test_defect1_the_pages_mapped_are_the_hole_and_one_after_the_free_page():
    a = expandable_with_a_hole_then_a_free_page()
    base = a.segments[0].address
    mark = len(a.trace)
    a.malloc(50 * MiB)
    assert [(e["addr"] - base, e["size"]) for e in a.trace[mark:] if e["action"] == "segment_map"] == \
        [(0, 20 * MiB), (40 * MiB, 20 * MiB)]


def test_defect2_an_expandable_segment_is_one_snapshot_entry_per_mapped_range():
    a = CachingAllocator(capacity=1024 * MiB, settings="expandable_segments:True")
    x, y, z = (a.malloc(20 * MiB) for _ in range(3))
    a.free(y)
    a.empty_cache()  # the middle page is unmapped: two mapped ranges
    snap = a.snapshot()
    assert [(s["address"] - x.address, s["total_size"], s["is_expandable"]) for s in snap] == \
        [(0, 20 * MiB, True), (40 * MiB, 20 * MiB, True)]
    assert [[b["size"] for b in s["blocks"]] for s in snap] == [[20 * MiB], [20 * MiB]]
    assert sum(s["total_size"] for s in snap) == a.reserved


def test_defect3_a_zero_byte_tensor_costs_nothing():
    a = CachingAllocator()
    empty = a.malloc(0)
    assert (a.allocated, a.requested, a.reserved, a.segments, a.trace) == (0, 0, 0, [], [])
    a.free(empty)
    assert a.trace == [] and a.allocated == 0
    r = replay([(0, "alloc", 0), (1, "alloc", 100), (0, "free", 0), (1, "free", -100)])
    assert r.allocated == [0, 512, 512, 0] and r.reserved == [0, 2 * MiB, 2 * MiB, 2 * MiB]


def test_defect4_requested_size_is_the_bytes_asked_for():
    a = CachingAllocator()
    a.malloc(100)
    a.malloc(49 * MiB + 1)
    sizes = sorted((b["requested_size"], b["size"]) for s in a.snapshot() for b in s["blocks"]
                   if b["state"] == "active_allocated")
    assert sizes == [(100, 512), (49 * MiB + 1, 50 * MiB)]
    assert a.requested == 512 + 49 * MiB + 512  # the engine's count stays rounded to 512 bytes


def test_defect5_max_split_size_accepts_20_mib_and_refuses_less():
    assert AllocatorSettings.parse("max_split_size_mb:20").max_split_size == 20 * MiB
    with pytest.raises(ValueError, match=r"^max_split_size_mb must be a whole number of MiB >= 20, got 19$"):
        AllocatorSettings.parse("max_split_size_mb:19")


def test_defect6_a_request_of_1_eb_or_more_fails_with_pytorchs_message():
    a = CachingAllocator()
    with pytest.raises(AllocatorOutOfMemory, match=r"Tried to allocate more than 1EB memory\.$"):
        a.malloc(2**60)
    assert (a.reserved, a.num_ooms, a.trace) == (0, 0, [])
    assert replay([(0, "alloc", 2**60)]).failed_at == 0


def test_defect7_roundup_power2_divisions_rounds_to_quarters_of_a_power_of_two():
    assert round_size(84 * MiB, 4) == 96 * MiB and round_size(64 * MiB, 4) == 64 * MiB
    assert round_size(65 * MiB, 4) == 80 * MiB and round_size(84 * MiB, 1) == 84 * MiB
    assert round_size(1500, 4) == 1536 and round_size(3000, 4) == 3072  # 512-byte steps up to 512 * divisions
    a = CachingAllocator(settings="roundup_power2_divisions:4")
    block = a.malloc(84 * MiB)
    assert block.size == a.allocated == a.reserved == 96 * MiB
    assert CachingAllocator().malloc(84 * MiB).size == 84 * MiB
    for bad in ("roundup_power2_divisions:3", "roundup_power2_divisions:0", "roundup_power2_divisions:[64:3]",
                "roundup_power2_divisions:[65:4]"):
        with pytest.raises(ValueError, match="power of 2|powers of 2"):
            AllocatorSettings.parse(bad)


def test_defect7_roundup_power2_divisions_per_interval():
    s = AllocatorSettings.parse("roundup_power2_divisions:[64:8,256:4,>:1]")
    # the first entry also covers every smaller interval, '>' every interval after the last one
    # named, and one not named (128-255 MiB) keeps 512-byte rounding (checked against PyTorch's
    # own allocator in test_allocator_oracle.py)
    assert [s.divisions(n * MiB) for n in (1, 64, 127, 128, 255, 256, 511, 512, 10**5)] == [8, 8, 8, 0, 0, 4, 4, 1, 1]
    assert round_size(200 * MiB + 1, s.divisions(200 * MiB + 1)) == 200 * MiB + 512
    assert str(AllocatorSettings.parse("roundup_power2_divisions:4")) == "roundup_power2_divisions:4"


def test_defect7_max_non_split_rounding_mb_is_modelled():
    a = CachingAllocator(settings="max_split_size_mb:64,max_non_split_rounding_mb:40")
    a.free(a.malloc(100 * MiB))
    a.malloc(70 * MiB)  # 100 < 70 + 40: takes the cached block whole
    assert a.reserved == 100 * MiB
    with pytest.raises(ValueError, match=">= 20"):
        AllocatorSettings.parse("max_non_split_rounding_mb:19")


@pytest.mark.parametrize("option", ["garbage_collection_threshold:0.6", "large_segment_size_mb:40",
                                    "throw_on_cudamalloc_oom:True",
                                    "release_lock_on_cudamalloc:True", "graph_capture_record_stream_reuse:True",
                                    "pinned_use_cuda_host_register:True", "pinned_num_register_threads:8",
                                    "pinned_reserve_segment_size_mb:64", "pinned_free_catch_all:True",
                                    "pinned_use_background_threads:True", "pinned_max_round_threshold_mb:4",
                                    "pinned_max_cached_size_mb:64"])
def test_defect7_every_other_option_pytorch_accepts_is_refused_by_name(option):
    key = option.split(":")[0]
    with pytest.raises(ValueError, match=rf"^allocator option {key} is not modelled: [^\n]+$"):
        AllocatorSettings.parse(option)


def test_options_are_read_as_pytorch_tokenizes_them():
    s = AllocatorSettings.parse(" max_split_size_mb : 128 , backend:native, expandable_segments:False ")
    assert str(s) == "max_split_size_mb:128"
    for bad, message in (("backend:cudaMallocAsync", "backend 'cudaMallocAsync' is not modelled"),
                         ("expandable_segments_handle_type:posix_fd", "unknown allocator option"),
                         ("max_split_size_mb", "unknown allocator option")):
        with pytest.raises(ValueError, match=message):
            AllocatorSettings.parse(bad)


# Found by the oracle (tests/test_allocator_oracle.py), beyond the list:

def test_an_expandable_segment_reserves_addresses_for_1_1_8_of_the_gpu_not_of_the_capacity():
    a = CachingAllocator(capacity=100 * MiB, settings="expandable_segments:True", total_memory=1000 * MiB)
    a.malloc(MiB + 512)
    assert sum(b.size for b in a.segments[0].blocks) == 1140 * MiB  # 1125 MiB in whole 20 MiB pages
    assert CachingAllocator(capacity=100 * MiB).total_memory == 100 * MiB  # default: the capacity


def test_a_memory_fraction_checks_the_whole_segment_size_even_with_expandable_segments():
    def after_370_mib(**kw):
        a = CachingAllocator(settings="expandable_segments:True", **kw)
        a.malloc(370 * MiB)  # 19 pages: 380 MiB reserved, a free 10 MiB tail
        return a

    fits = after_370_mib(capacity=500 * MiB)
    fits.malloc(125 * MiB)  # 10 MiB free + six more pages: 500 MiB, within the capacity
    assert fits.reserved == 500 * MiB
    capped = after_370_mib(capacity=2048 * MiB, total_memory=1000 * MiB, memory_fraction=0.5)
    with pytest.raises(AllocatorOutOfMemory):  # 380 + get_allocation_size(125 MiB) = 506 > 500 MiB allowed
        capped.malloc(125 * MiB)
    assert capped.reserved == 380 * MiB and capped.num_alloc_retries == 1
    for bad in (-0.1, 1.5, True):
        with pytest.raises(ValueError, match="memory_fraction must be a number from 0 to 1"):
            CachingAllocator(total_memory=MiB, memory_fraction=bad)
    with pytest.raises(ValueError, match="total_memory"):
        CachingAllocator(memory_fraction=0.5)


def test_per_process_memory_fraction_as_an_option_is_the_same_cap():
    by_option = CachingAllocator(capacity=2048 * MiB, settings="per_process_memory_fraction:0.25")
    assert by_option.allowed_memory_maximum == 512 * MiB
    by_option.malloc(500 * MiB)
    with pytest.raises(AllocatorOutOfMemory):
        by_option.malloc(20 * MiB)  # 500 + 20 > 512 MiB
    assert str(by_option.settings) == "per_process_memory_fraction:0.25"
    for bad in ("per_process_memory_fraction:1.5", "per_process_memory_fraction:half"):
        with pytest.raises(ValueError, match="per_process_memory_fraction must be a number from 0 to 1"):
            AllocatorSettings.parse(bad)
    with pytest.raises(ValueError, match="total_memory"):
        CachingAllocator(settings="per_process_memory_fraction:0.5")
