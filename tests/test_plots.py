"""helpers.plots: figures only read a profile."""

import pytest

from helpers import MiB, profile_step
from helpers.plots import plot_categories, plot_peak_bars, plot_stages, plot_timeline


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
