"""helpers.record: a step's profile and the questions it answers."""

import json

import pytest
import torch

from helpers import MiB, profile_step


def test_storages_at_the_peak_add_up_and_carry_dtypes(resnet18_b128):
    p = resnet18_b128
    at_peak = p.at_peak()
    assert sum(s.nbytes for s in at_peak) == p.peak_allocated_bytes
    by_category = {}
    for s in at_peak:
        by_category[s.category] = by_category.get(s.category, 0) + s.nbytes
    assert by_category == {k: v for k, v in p.categories.items() if v}
    # MaxPool's int64 indices: the only int64 activation, 196 MiB at batch 128.
    indices = [s for s in at_peak if s.category == "activations" and s.dtype == torch.int64]
    assert [(s.shape, s.nbytes) for s in indices] == [((128, 64, 56, 56), 196 * MiB)]


def test_the_allocation_log_replays_every_event(resnet18_b128):
    p = resnet18_b128
    log = p.allocation_log
    assert log and {a.kind for a in log} <= {"alloc", "free", "resize"}
    # Summing the log up to each event gives that event's allocated bytes.
    running, entry = 0, 0
    for event in p.events:
        while entry < len(log) and log[entry].event <= event.index:
            running += log[entry].nbytes
            entry += 1
        assert running == event.allocated_bytes, event.label
    assert max(_prefix_sums(log)) == p.peak_allocated_bytes
    assert all(a.category == p.storages[a.serial].category for a in log)


def _prefix_sums(log):
    total = 0
    for a in log:
        total += a.nbytes
        yield total


def test_find_table_summary_and_peak(resnet18_b128):
    p = resnet18_b128
    assert p.find("conv1", "fwd").delta_bytes == 392 * MiB and p.peak is p.events[p.peak_event]
    with pytest.raises(KeyError, match="no event #0 for module 'nope'"):
        p.find("nope", "fwd")
    with pytest.raises(ValueError, match="phase must be"):
        p.stage_deltas("bwdx")
    table = p.table(phases=("fwd",), min_delta=MiB)
    assert "conv1" in table and " pre " not in table
    assert p.summary().splitlines()[-1] == "peak allocated: 2778.4 MiB (simulated)"


def test_to_dict_is_json_with_the_documented_keys_and_the_config(resnet18_b128):
    data = json.loads(json.dumps(resnet18_b128.to_dict()))
    for key in ("backend", "model", "batch_size", "input_shape", "amp", "checkpoint", "optimizer", "steady_state",
                "reentrant", "offload", "parameter_count", "peak_allocated_bytes", "peak_event", "reserved_bytes",
                "categories", "params_without_grad", "events", "config"):
        assert key in data, key
    assert data["config"]["model"] == "resnet18" and data["config"]["batch_size"] == 128
    assert data["events"][0]["type"] == "parameters and buffers" and data["events"][0]["module"] is None


def test_peak_during_replays_the_log_inside_an_event():
    p = profile_step("resnet18", 2, image_size=32, optimizer="adam", steady_state=True, device="simulated")
    step = p.find(None, "optimizer.step")
    before = p.events[step.index - 1].allocated_bytes
    assert p.peak_during(step) == p.peak_allocated_bytes > before  # the foreach temporary, freed by the event
    assert p.peak_during(p.events[1]) >= p.events[1].allocated_bytes
    with pytest.raises(ValueError, match="first event"):
        p.peak_during(p.events[0])
