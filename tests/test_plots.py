"""helpers.teaching.plots: figures only read a profile."""

import pytest

from helpers import MiB, profile_step
from helpers.teaching.plots import plot_categories, plot_peak_bars, plot_stages, plot_timeline


@pytest.fixture(scope="module")
def small():
    return profile_step("resnet18", 2, image_size=32, num_classes=10, device="simulated")


def test_peak_bars_figure_checks_its_labels(small):
    fig = plot_peak_bars([small], ["one"])
    assert len(fig.axes[0].patches) == 6  # one bar segment per category
    with pytest.raises(ValueError, match="labels"):
        plot_peak_bars([small], ["a", "b"])


def test_timeline_leaves_room_for_the_peak_label(small):
    fig = plot_timeline([small, small], labels=["a", "b"])
    ax = fig.axes[0]
    assert ax.get_ylim()[1] > 1.1 * small.peak_allocated_bytes / MiB
    assert ax.get_legend()._loc == 2  # upper left, away from the peak
    with pytest.raises(ValueError, match="labels"):
        plot_timeline([small], labels=["a", "b"])
    assert plot_categories(small).axes and plot_stages(small).axes


def test_the_allocator_figures_read_a_replay_and_a_real_snapshot(small):
    from helpers.allocator import replay
    from helpers.teaching.plots import memory_map, plot_memory_map, plot_reserved

    run = replay(small.allocation_log)
    fig = plot_reserved([run], ["default"], marks={"start": 3})
    assert len(fig.axes[0].lines) == 3  # allocated, reserved, the mark
    with pytest.raises(ValueError, match="labels"):
        plot_reserved([run], ["a", "b"])
    reserved, blocks = memory_map(run.allocator.trace)
    allocs = sum(1 for e in run.allocator.trace if e["action"] == "alloc")
    assert len(blocks) == allocs and sum(hi - lo for lo, hi, *_ in reserved) >= run.peak_reserved
    labels = {s: st.category for s, st in small.storages.items()}
    assert plot_memory_map(run.allocator.trace, labels).axes
    # A real trace (torch.cuda.memory._snapshot()) starts after tensors and segments exist:
    # what it frees without having allocated it is drawn from the start, and the
    # snapshot's segments too.
    trace = [{"action": "free_requested", "addr": 4096, "size": 512},
             {"action": "free_completed", "addr": 4096, "size": 512},
             {"action": "alloc", "addr": 8192, "size": 1024},
             {"action": "segment_free", "addr": 2**30, "size": 2 * MiB}]
    segments = [{"address": 0, "total_size": 2 * MiB, "blocks": [
        {"address": 0, "size": 512, "state": "active_allocated"},
        {"address": 8192, "size": 1024, "state": "active_allocated"}]}]
    reserved, blocks = memory_map(trace, segments)
    assert (4096, 4608, 0, 1, None) in blocks and (0, 512, 0, 4, None) in blocks
    assert (8192, 9216, 2, 4, None) in blocks and len(blocks) == 3
    assert (2**30, 2**30 + 2 * MiB, 0, 3) in reserved and (0, 2 * MiB, 0, 4) in reserved
    assert plot_memory_map(trace, segments=segments).axes
    with pytest.raises(ValueError, match="nothing|no segment"):
        plot_memory_map([])


def test_plot_bytes_per_parameter_stacks_parts_in_category_colours_and_refuses_bad_input():
    from matplotlib.colors import to_hex

    from helpers.record import CATEGORY_COLORS
    from helpers.teaching.plots import plot_bytes_per_parameter

    bars = {"fp32 Adam": [("parameters", "param", 4), ("gradients", "grad", 4), ("optimizer_states", "Adam", 8)],
            "ZeRO": [("parameters", "fp16", 2), ("gradients", "fp16", 2), ("optimizer_states", "K", 12)]}
    fig = plot_bytes_per_parameter(bars, title="t", marks={"ZeRO": 16.0})
    ax = fig.axes[0]
    rects = [p for p in ax.patches]
    assert len(rects) == 6
    assert [r.get_width() for r in rects] == [4, 4, 8, 2, 2, 12]
    assert to_hex(rects[3].get_facecolor()) == to_hex(CATEGORY_COLORS["parameters"])
    assert max(r.get_x() + r.get_width() for r in rects) == 16
    with pytest.raises(ValueError, match="unknown category 'weights'"):
        plot_bytes_per_parameter({"x": [("weights", "w", 4)]})
    with pytest.raises(ValueError, match="negative part"):
        plot_bytes_per_parameter({"x": [("parameters", "w", -1)]})
    with pytest.raises(ValueError, match="marks for no bar: y"):
        plot_bytes_per_parameter({"x": [("parameters", "w", 4)]}, marks={"y": 4})
