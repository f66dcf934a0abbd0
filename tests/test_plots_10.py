"""helpers.teaching.plots, lesson 10's figures: a generation's timeline, vLLM's start-up accounts, requests that fit,
the profile run's activation peak.  On accounts and profiles written by hand: nothing is traced."""

import pytest
from matplotlib.colors import to_hex

from helpers import GiB
from helpers.generation import GenerationProfile
from helpers.palette import CATEGORY_COLORS, SERVING_COLORS
from helpers.serving import StartupAccount
from helpers.teaching.plots import (plot_activation_peak, plot_concurrency, plot_generation_timeline,
                                    plot_startup_accounts)


def _account(total=80 * GiB, weights=15 * GiB, activations=GiB, kv_per_token=128 * 1024, max_model_len=4096):
    return StartupAccount(model="m", version="0.11", gpu="card", total_bytes=total, gpu_memory_utilization=0.9,
                          dtype="bfloat16", quantization="none", kv_cache_dtype="auto", block_size=16,
                          max_model_len=max_model_len, max_num_batched_tokens=8192, max_num_seqs=1024, num_reqs=1024,
                          parameter_count=8 * 10**9, weights_bytes=weights, activation_peak_bytes=activations,
                          non_torch_bytes=0, kv_bytes_per_token=kv_per_token)


def test_plot_generation_timeline_stacks_weights_what_stays_and_what_the_moment_held():
    timeline = (("weights", 10 * GiB, 10 * GiB), ("prefill", 12 * GiB, 15 * GiB), ("decode 1", 12 * GiB, 12 * GiB))
    profile = GenerationProfile(model="m", batch_size=1, prompt_len=8, new_tokens=2, cache="dynamic",
                                quantization="none", logits="last", weights_bytes=10 * GiB, kv_cache_bytes=2 * GiB,
                                prefill_peak_bytes=15 * GiB, decode_peak_bytes=12 * GiB, timeline=timeline)
    ax = plot_generation_timeline(profile, title="t").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["weights", "prefill", "decode 1"]
    prefill = sorted((r for r in ax.patches if abs(r.get_x() + r.get_width() / 2 - 1) < 1e-9), key=lambda r: r.get_y())
    assert [r.get_height() for r in prefill] == pytest.approx([10, 2, 3])  # weights, KV cache, the moment's own
    assert [to_hex(r.get_facecolor()) for r in prefill] == [
        to_hex(c) for c in (CATEGORY_COLORS["parameters"], SERVING_COLORS["kv_cache"], CATEGORY_COLORS["activations"])]
    with pytest.raises(ValueError, match="unit must be one of"):
        plot_generation_timeline(profile, unit="GB")


def test_plot_startup_accounts_fills_each_card_and_says_what_the_cache_holds():
    fits, refused = _account(), _account(total=16 * GiB)
    assert fits.refusal is None and refused.refusal is not None
    ax = plot_startup_accounts({"fits": fits, "refused": refused}, unit="GiB", title="t").axes[0]
    for label, account in (("fits", fits), ("refused", refused)):
        y = [t.get_text() for t in ax.get_yticklabels()].index(label)
        bar = [r for r in ax.patches if abs(r.get_y() + r.get_height() / 2 - y) < 1e-9]
        drawn = sum(r.get_width() for r in bar)
        assert drawn == pytest.approx(max(account.total_bytes, account.non_kv_cache_bytes) / GiB)  # the card, or more
        kv = [r for r in bar if to_hex(r.get_facecolor()) == to_hex(SERVING_COLORS["kv_cache"])]
        assert kv[0].get_width() == pytest.approx(account.kv_cache_bytes / GiB)
    texts = [t.get_text() for t in ax.texts]
    assert f" {fits.kv_tokens:,} tokens" in texts and " would not start" in texts
    with pytest.raises(ValueError, match="at least one"):
        plot_startup_accounts({})


def test_plot_concurrency_labels_each_bar_and_each_refusal():
    grid = {"24 GB": {4096: 12.5, 131072: None}, "80 GB": {4096: 110.5, 131072: 3.5}}
    ax = plot_concurrency(grid, title="t").axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert {"12.5", "110.5", "3.5"} <= set(texts) and "would not\nstart" in texts
    assert ax.get_yscale() == "log" and len(ax.get_legend().get_texts()) == 2
    with pytest.raises(ValueError, match="same max_model_len"):
        plot_concurrency({"a": {4096: 1.0}, "b": {8192: 1.0}})
    with pytest.raises(ValueError, match="at least one card"):
        plot_concurrency({})


def test_plot_activation_peak_draws_the_points_and_the_floor():
    peaks = {2048: GiB, 8192: 2 * GiB, 16384: 4 * GiB}
    ax = plot_activation_peak(peaks, floor=GiB, title="t").axes[0]
    points, floor = ax.get_lines()
    assert list(points.get_xdata()) == sorted(peaks) and list(points.get_ydata()) == [1, 2, 4]
    assert list(floor.get_ydata()) == [1, 1]
    with pytest.raises(ValueError, match="at least two"):
        plot_activation_peak({2048: GiB})
    with pytest.raises(ValueError, match="unit must be one of"):
        plot_activation_peak(peaks, unit="GB")


def test_plot_engine_beside_logs_marks_each_ratio_and_skips_a_cache_vllm_did_not_log():
    from types import SimpleNamespace

    from helpers.teaching.plots import plot_engine_beside_logs
    from helpers.teaching.plots.serving import kv_ratio

    def row(name, logged, engine, refused=False):
        log = SimpleNamespace(name=name, gpu="card", logged=logged, refused=refused)
        return SimpleNamespace(log=log, engine=lambda: engine, refusal="no" if refused else None)

    rows = [row("a", dict(weights=10, activation=2, kv=50, tokens=1000), dict(weights=10, activation=1, kv=51,
                                                                              tokens=1020)),
            row("b", dict(weights=5, activation=1, kv=-1, blocks=0), dict(weights=5, activation=0.5, kv=-0.5,
                                                                          blocks=0), refused=True)]
    assert kv_ratio(rows[0].log.logged, rows[0].engine()) == pytest.approx(1.02)
    assert kv_ratio(rows[1].log.logged, rows[1].engine()) is None
    ax = plot_engine_beside_logs(rows, title="t").axes[0]
    xs = sorted(x for line in ax.get_lines()[:-1] for x in line.get_xdata())  # the last line: the one at 1
    assert xs == pytest.approx([0.5, 0.5, 1, 1, 1.02])
    assert [t.get_text() for t in ax.get_yticklabels()] == ["b · card · no request fits (engine: none either)",
                                                           "a · card"]
    with pytest.raises(ValueError, match="at least one row"):
        plot_engine_beside_logs([])


def test_plot_activation_peak_labels_no_two_points_on_top_of_each_other():
    """1,024 and 2,048 tokens are 3% of a 32,768-token axis apart: only the first is labelled; equal labels once."""
    peaks = {1024: 1.80 * GiB, 2048: 1.801 * GiB, 4096: 1.81 * GiB, 8192: 1.812 * GiB, 32768: 3.6 * GiB}
    ax = plot_activation_peak(peaks).axes[0]
    assert [t.get_text() for t in ax.texts] == ["1.80", "1.81", "3.60"]
