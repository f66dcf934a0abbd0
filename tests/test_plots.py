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


def test_figures_draw_in_the_okabe_ito_palette(small):
    from matplotlib.colors import to_hex

    from helpers.allocator import replay
    from helpers.palette import OKABE_ITO
    from helpers.teaching.plots import plot_reserved

    palette = {c.lower() for c in OKABE_ITO.values()}
    lines = plot_timeline([small, small], labels=["a", "b"]).axes[0].lines
    lines += plot_reserved([replay(small.allocation_log)] * 2, ["a", "b"]).axes[0].lines
    assert {to_hex(line.get_color()) for line in lines} <= palette
    bars = plot_peak_bars([small], ["one"]).axes[0].patches
    assert {to_hex(bar.get_facecolor()) for bar in bars} <= palette


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


def test_the_memory_map_tells_the_first_step_apart_and_shows_small_long_lived_blocks():
    import numpy as np
    from matplotlib.colors import to_hex

    from helpers.allocator import replay
    from helpers.palette import CATEGORY_COLORS, OKABE_ITO
    from helpers.teaching.plots import plot_memory_map

    step = profile_step("resnet18", 2, image_size=32, num_classes=10, device="simulated", steady_state=True)
    run = replay(step.allocation_log)
    second = run.trace_position(step.events[0].log_position)
    assert 0 < second < len(run.allocator.trace)

    def drawn(fig):
        ax = fig.axes[0]
        return [(to_hex(c), float(np.ptp(p.vertices[:, 1]))) for coll in ax.collections[1:]
                for c, p in zip(coll.get_facecolors(), coll.get_paths())]

    labels = step.categories_by_serial()
    plain = drawn(plot_memory_map(run.allocator.trace, labels, min_height=0))
    marked = plot_memory_map(run.allocator.trace, labels, first_step_until=second)
    assert OKABE_ITO["sky blue"].lower() not in {c for c, _ in plain}
    assert OKABE_ITO["sky blue"].lower() in {c for c, _ in drawn(marked)}
    assert "first step" in [t.get_text() for t in marked.axes[0].get_legend().get_texts()]
    # A momentum buffer of this tiny model is far below 0.8% of the map's height at scale,
    # and at least that high with the default min_height.
    purple = CATEGORY_COLORS["optimizer_states"].lower()
    height = marked.axes[0].get_ylim()[1]
    assert min(h for c, h in plain if c == purple) < 0.008 * height
    assert min(h for c, h in drawn(marked) if c == purple) >= 0.008 * height * 0.999


def test_reserved_bars_draw_four_bars_per_step_and_check_their_inputs(small):
    from helpers.allocator import replay
    from helpers.teaching.plots import plot_reserved_bars

    run = replay(small.allocation_log)
    fig = plot_reserved_bars(["a", "b"], [small.peak_allocated_bytes] * 2, [run, run], [run, run])
    assert len(fig.axes[0].patches) == 8
    assert [t.get_text() for t in fig.axes[0].texts] == [f"×{run.peak_reserved / run.peak_allocated:.2f}"] * 2
    with pytest.raises(ValueError, match="one of each"):
        plot_reserved_bars(["a"], [1, 2], [run], [run])


def test_plot_bytes_per_parameter_stacks_parts_in_category_colours_and_refuses_bad_input():
    from matplotlib.colors import to_hex

    from helpers.palette import CATEGORY_COLORS
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
