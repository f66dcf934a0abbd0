"""helpers.teaching.plots, lesson 05b's figures: gradient accumulation, inference and leaks."""

import pytest
from matplotlib.colors import to_hex

from helpers import GiB, profile_step
from helpers.palette import CATEGORY_COLORS, OKABE_ITO
from helpers.record import CATEGORIES
from helpers.teaching.plots import plot_accumulation, plot_inference_and_leaks


@pytest.fixture(scope="module")
def steps():
    whole = profile_step("resnet18", 4, image_size=32, num_classes=10, optimizer="adam", device="simulated")
    split = profile_step("resnet18", 2, image_size=32, num_classes=10, optimizer="adam", accumulation_steps=2,
                         device="simulated")
    return whole, split


def test_plot_accumulation_stacks_each_peak_by_category_in_its_colour(steps):
    fig = plot_accumulation(list(steps), ["1 × 4", "2 × 2"], unit="MiB")
    ax = fig.axes[0]
    rects = ax.patches
    assert len(rects) == 2 * len(CATEGORIES)  # one segment per category and bar
    for i, step in enumerate(steps):
        column = rects[i::2]  # the bars are drawn category by category
        assert sum(r.get_height() for r in column) == pytest.approx(step.peak_allocated_bytes / 2**20)
        for rect, name in zip(column, CATEGORIES):
            assert to_hex(rect.get_facecolor()) == to_hex(CATEGORY_COLORS[name])
    assert [t.get_text() for t in ax.texts] == [f"{s.peak_allocated_bytes / 2**20:.2f}" for s in steps]
    assert "MiB" in ax.get_ylabel()


def test_plot_accumulation_refuses_bad_input(steps):
    with pytest.raises(ValueError, match="labels"):
        plot_accumulation(list(steps), ["one"])
    with pytest.raises(ValueError, match="at least one"):
        plot_accumulation([], [])
    with pytest.raises(ValueError, match="unit must be one of"):
        plot_accumulation(list(steps), ["a", "b"], unit="GB")


FORWARD = {"a": {"training": 3 * GiB, "no_grad": GiB}, "b": {"training": 2 * GiB, "no_grad": GiB // 2}}
LOOPS = {"leaks": [GiB, 2 * GiB, 3 * GiB], "flat": [GiB // 4] * 3}


def test_plot_inference_and_leaks_draws_bars_per_mode_and_a_line_per_loop():
    fig = plot_inference_and_leaks(FORWARD, LOOPS, title="t")
    bars, lines = fig.axes
    assert [r.get_height() for r in bars.patches] == [3, 2, 1, 0.5]  # mode by mode, in GiB
    assert to_hex(bars.patches[0].get_facecolor()) != to_hex(bars.patches[2].get_facecolor())
    assert [list(line.get_ydata()) for line in lines.lines] == [[1, 2, 3], [0.25] * 3]
    palette = {c.lower() for c in OKABE_ITO.values()}
    used = {to_hex(r.get_facecolor()) for r in bars.patches} | {to_hex(line.get_color()) for line in lines.lines}
    assert used <= palette
    # a loop never takes a grad mode's colour
    assert not {to_hex(line.get_color()) for line in lines.lines} & {to_hex(r.get_facecolor()) for r in bars.patches}


def test_plot_inference_and_leaks_refuses_bad_input():
    with pytest.raises(ValueError, match="grad modes"):
        plot_inference_and_leaks({"a": {"training": 1}, "b": {"no_grad": 1}}, LOOPS)
    with pytest.raises(ValueError, match="at least one"):
        plot_inference_and_leaks({}, LOOPS)
    with pytest.raises(ValueError, match="unit must be one of"):
        plot_inference_and_leaks(FORWARD, LOOPS, unit="GB")
