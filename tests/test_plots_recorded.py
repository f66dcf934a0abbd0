"""helpers.teaching.plots.recorded: a GPU's recorded runs against the simulation, and what a snapshot holds that its
simulated twin does not (lessons 06 and 06b)."""

from types import SimpleNamespace

import pytest

from helpers.snapshot import Block
from helpers.teaching.plots import (gpu_only_bytes, plot_gpu_only, plot_recorded_runs, recorded_excess,
                                    recorded_label)
from helpers.teaching.reference import load_reference

MiB = 2**20


def _run(model="resnet18", config="baseline", **figures):
    run = {"model": model, "batch_size": 128, "config": config, "cuda_peak_bytes": 110 * MiB,
           "simulated_allocated_bytes": 100 * MiB, "cuda_reserved_bytes": 150 * MiB,
           "simulated_reserved_bytes": 100 * MiB, "error": None}
    return {**run, **figures}


def test_the_excess_is_the_gpu_figure_over_the_simulated_one():
    assert recorded_excess(_run()) == pytest.approx({"peak allocated": 0.10, "peak reserved": 0.50})
    assert recorded_label(_run(model="meta-llama/Llama-3.1-8B", config="LoRA r16")) == "Llama-3.1-8B b128 LoRA r16"
    with pytest.raises(ValueError, match="has no figures: out of memory"):
        recorded_excess(_run(error="out of memory"))
    with pytest.raises(ValueError, match="lacks simulated_reserved_bytes"):
        recorded_excess(_run(simulated_reserved_bytes=None))


def test_the_runs_figure_has_a_row_per_run_with_figures_and_refuses_none():
    fig = plot_recorded_runs([_run(), _run(config="AMP"), _run(error="out of memory"), _run(model="gpt2")])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["resnet18 b128 baseline", "resnet18 b128 AMP",
                                                             "gpt2 b128 baseline"]
    allocated, reserved = (line for line in ax.lines if line.get_linestyle() == "None")
    assert list(allocated.get_xdata()) == pytest.approx([10.0] * 3) and list(reserved.get_xdata()) == pytest.approx([50.0] * 3)
    with pytest.raises(ValueError, match="no recorded run"):
        plot_recorded_runs([_run(error="out of memory")])


def test_the_shipped_recording_draws_31_rows():
    reference = load_reference()
    if reference is None:
        pytest.skip("no GPU recording in lessons/data/gpu_reference.json")
    fig = plot_recorded_runs(reference["runs"])
    assert len(fig.axes[0].get_yticklabels()) == sum(not r.get("error") for r in reference["runs"]) == 31


def test_gpu_only_bytes_follow_the_blocks_without_a_twin():
    """A block made before the recording (allocated None), live from the start and freed at entry 3; one made at
    entry 1 with a twin (not counted); a GPU-only block made at 2 and freed at 4; and one made at 3 that the
    alignment left unpaired beside an unpaired simulated allocation of its size (not counted either)."""
    before = Block(0, 64 * MiB, None, 3)
    twinned = Block(1 << 30, 8 * MiB, 1, None, twin=5)
    extra = Block(1 << 31, 32 * MiB, 2, 4)
    unpaired = Block(1 << 32, 1000, 3, None)
    log = [SimpleNamespace(nbytes=512), SimpleNamespace(nbytes=1024)]
    twin = SimpleNamespace(extra=[extra, unpaired], missing=[1], measured=2, profile=SimpleNamespace(allocation_log=log))
    report = SimpleNamespace(entries=6, blocks=[before, twinned, extra, unpaired], twin=twin)
    assert gpu_only_bytes(report) == ([64 * MiB] * 3 + [0] * 3, [0, 0, 32 * MiB, 32 * MiB, 0, 0])
    twin.missing = [0]  # a simulated allocation of another size: the 1,000 bytes count
    assert gpu_only_bytes(report)[1] == [0, 0, 32 * MiB, 32 * MiB + 1000, 1000, 1000]
    assert plot_gpu_only(report).axes
    with pytest.raises(ValueError, match="no simulated twin"):
        gpu_only_bytes(SimpleNamespace(entries=1, blocks=[], twin=None))
