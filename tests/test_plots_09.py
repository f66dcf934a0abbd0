"""helpers.teaching.plots, lessons 09 and 09b's figures: fine-tuning setups against cards, the peak against the tokens."""

import pytest
from matplotlib.colors import to_hex

from helpers import GiB, fit_affine, profile_step
from helpers.gpus import CUDA_OVERHEAD_BYTES, GPU_CARDS
from helpers.palette import CATEGORY_COLORS
from helpers.teaching.plots import plot_finetune_peaks, plot_peak_vs_depth, plot_peak_vs_tokens

CARDS = {"V100 16 GB": GPU_CARDS["V100 16 GB"], "H100 80 GB": GPU_CARDS["H100 80 GB"]}


@pytest.fixture(scope="module")
def steps():
    sgd = profile_step("resnet18", 4, image_size=32, num_classes=10, device="simulated")
    adam = profile_step("resnet18", 4, image_size=32, num_classes=10, optimizer="adam", steady_state=True,
                        device="simulated")
    return {"SGD": sgd, "Adam, steady state": adam}


def test_plot_finetune_peaks_stacks_each_peak_by_category_against_each_cards_room(steps):
    fig = plot_finetune_peaks(steps, CARDS, unit="MiB", title="t")
    ax = fig.axes[0]
    for label, step in steps.items():
        y = [t.get_text() for t in ax.get_yticklabels()].index(label)
        bar = [r for r in ax.patches if abs(r.get_y() + r.get_height() / 2 - y) < 1e-9]
        assert sum(r.get_width() for r in bar) == pytest.approx(step.peak_allocated_bytes / 2**20)
        colours = {to_hex(r.get_facecolor()) for r in bar if r.get_width()}
        assert colours <= {to_hex(c) for c in CATEGORY_COLORS.values()}
    lines = sorted(line.get_xdata()[0] for line in ax.get_lines())
    assert lines == pytest.approx(sorted((c - CUDA_OVERHEAD_BYTES) / 2**20 for c in CARDS.values()))
    ends = [t.get_text() for t in ax.texts if t.get_text().startswith(" ")]
    assert any("at optimizer.step()" in e or "in backward" in e for e in ends) and len(ends) == len(steps)


def test_plot_finetune_peaks_refuses_bad_input(steps):
    with pytest.raises(ValueError, match="unit must be one of"):
        plot_finetune_peaks(steps, CARDS, unit="GB")
    with pytest.raises(ValueError, match="at least one profile"):
        plot_finetune_peaks({}, CARDS)
    with pytest.raises(ValueError, match="at most 4 cards"):
        plot_finetune_peaks(steps, dict(GPU_CARDS))


def test_plot_peak_vs_tokens_draws_the_line_the_points_and_the_answers():
    line = fit_affine([2048, 8192], [8 * GiB, 17 * GiB])
    peaks = {2048: 8 * GiB, 8192: 17 * GiB, 12032: int(line.predict(12032))}
    fig = plot_peak_vs_tokens(peaks, line, {"RTX 4090 24 GB": GPU_CARDS["RTX 4090 24 GB"]},
                              {"RTX 4090 24 GB": 12032}, title="t")
    ax = fig.axes[0]
    fitted = ax.get_lines()[0]
    assert fitted.get_ydata()[0] == pytest.approx(line.predict(0) / GiB)
    assert sorted(ax.get_lines()[1].get_xdata()) == sorted(peaks)
    assert any(t.get_text() == "12,032 tokens" for t in ax.texts)
    with pytest.raises(ValueError, match="at least two"):
        plot_peak_vs_tokens({2048: GiB}, line, {}, {})
    with pytest.raises(ValueError, match="unit must be one of"):
        plot_peak_vs_tokens(peaks, line, {}, {}, unit="GB")


def test_plot_peak_vs_depth_draws_the_traced_steps_the_line_and_the_written_one():
    line = fit_affine([6, 7], [6 * GiB, 7 * GiB])
    traced = {n: n * GiB for n in range(1, 9)}
    fig = plot_peak_vs_depth(traced, line, (48, 48 * GiB), title="t")
    ax = fig.axes[0]
    fitted, points, written = ax.get_lines()
    assert fitted.get_ydata()[0] == pytest.approx(0) and list(points.get_xdata()) == list(traced)
    assert list(written.get_xdata()) == [48] and list(written.get_ydata()) == [48.0]
    assert ax.get_xlabel() == "number of blocks" and ax.get_title() == "t"
    with pytest.raises(ValueError, match="at least two"):
        plot_peak_vs_depth({6: GiB}, line, (48, GiB))
    with pytest.raises(ValueError, match="unit must be one of"):
        plot_peak_vs_depth(traced, line, (48, GiB), unit="GB")
