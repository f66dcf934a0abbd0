"""helpers.record: a step's profile and the questions it answers."""

import json

import pytest
import torch
from torch import nn

from helpers import MiB, profile_step
from helpers.allocator import replay
from helpers.record import CATEGORIES, Storage


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
                "categories", "paged_bytes", "params_without_grad", "events", "config"):
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


@pytest.fixture(scope="module")
def three_layers():
    """Linear(64, 256), GELU, Linear(256, 10) at batch 8: every tensor of the step can be named."""
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 10))
    return profile_step(model, 8, input_shape=(64,), device="simulated")


def test_kept_between_gives_what_a_window_made_that_is_still_alive(three_layers):
    p = three_layers
    end_of_forward = p.find("", "fwd")
    kept = p.kept_between(p.find("0", "pre"), p.find("1", "fwd"), until=end_of_forward)
    # Linear 0's output (GELU saves it) and GELU's output (Linear 2 saves it): 8 x 256 float32, 8 KiB each
    assert [(s.category, s.dtype, s.shape, s.nbytes) for s in kept] == [
        ("activations", torch.float32, (8, 256), 8192)] * 2
    assert [p.allocation_event(s).label for s in kept] == ["forward of Linear '0'", "forward of GELU '1'"]
    # The logits: 8 x 10 float32 = 320 bytes, one 512-byte block; alive when Linear 2 returns (until defaults to
    # last), an "other" tensor nothing saves, freed once the loss has its log-softmax.
    window = p.find("2", "pre"), p.find("2", "fwd")
    assert [(s.category, s.shape, s.nbytes) for s in p.kept_between(*window)] == [("other", (8, 10), 512)]
    assert p.kept_between(*window, until=p.find(None, "loss")) == []
    # Over the whole forward pass, nothing made before it is freed: the kept bytes are its growth.
    start = p.find("", "pre")
    whole = p.kept_between(start, end_of_forward)
    assert sum(s.nbytes for s in whole) == end_of_forward.allocated_bytes - start.allocated_bytes == 2 * 8192 + 512
    assert p.kept_between(start, end_of_forward, until=p.find(None, "zero_grad")) == []  # all freed by then


def test_kept_between_and_allocation_event_reject_what_is_not_this_step(three_layers, resnet18_b128):
    p = three_layers
    first, last = p.find("0", "pre"), p.find("0", "fwd")
    with pytest.raises(ValueError, match="must come after first"):
        p.kept_between(last, first)
    with pytest.raises(ValueError, match="must come after first"):
        p.kept_between(first, first)
    with pytest.raises(ValueError, match="until .* must not come before last"):
        p.kept_between(first, last, until=first)
    with pytest.raises(ValueError, match="not an event of this step"):
        p.kept_between(first, resnet18_b128.find("conv1", "fwd"))
    with pytest.raises(KeyError, match="not a storage of this step"):
        p.allocation_event(Storage(10**6, "other", torch.float32, (1,), 512))
    weight = p.storages[0]  # the model's first parameter, placed before the first event
    assert (weight.category, weight.shape) == ("parameters", (256, 64)) and p.allocation_event(weight) is p.events[0]


def test_categories_by_serial_label_a_replay_of_the_log(three_layers):
    p = three_layers
    labels = p.categories_by_serial()
    trace = replay(p.allocation_log).allocator.trace
    served = {e["serial"] for e in trace if e["action"] == "alloc"}
    assert served == set(labels) == {a.serial for a in p.allocation_log}
    kept = p.kept_between(p.find("0", "pre"), p.find("1", "fwd"), until=p.find("", "fwd"))
    assert [labels[s.serial] for s in kept] == ["activations", "activations"]
    by_category = {}
    for s in p.storages.values():
        by_category[labels[s.serial]] = by_category.get(labels[s.serial], 0) + s.nbytes
    # parameters 64·256·4 + 1 KiB + 256·10·4 + 512; their gradients and momentum buffers the same
    assert by_category["parameters"] == by_category["optimizer_states"] == 65536 + 1024 + 10240 + 512


# lesson 04's reentrant trap, run on purpose: PyTorch's warning about it is expected here
@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad=True:UserWarning")
def test_the_options_are_the_configs_and_read_only(resnet18_b128):
    p = resnet18_b128
    assert (p.batch_size, p.amp, p.checkpoint, p.optimizer, p.steady_state, p.reentrant, p.offload) == (
        128, False, 0, "sgd-momentum", False, False, False)
    with pytest.raises(AttributeError):
        p.batch_size = 64
    q = profile_step("mlp", 4, amp=True, checkpoint=2, reentrant=True, optimizer="adam", steady_state=True,
                     device="simulated")
    assert (q.batch_size, q.amp, q.checkpoint, q.optimizer, q.steady_state, q.reentrant) == (
        4, True, 2, "adam", True, True)
    assert q.config.input_shape is None and q.input_shape == (64,)  # the MLP's own: what the step fed it


def test_repr_is_short_and_names_the_peak(resnet18_b128):
    text = repr(resnet18_b128)
    assert len(text) < 400 and len(text.splitlines()) <= 3
    assert text.startswith("<StepProfile resnet18 (simulated):")
    assert "peak 2778.4 MiB" in text and resnet18_b128.peak.label in text
    assert "activations 2633.8" in text and "parameters 44.6" in text
    assert "optimizer_states" not in text  # none at the peak of a first step: zero categories are left out
    for default in ("batch_size", "amp", "optimizer", "checkpoint", "device"):  # options at their default
        assert default not in text


def test_repr_names_the_options_that_differ_from_the_defaults():
    p = profile_step("mlp", 4, amp=True, optimizer="adam", steady_state=True, loss=lambda out: out.sum(),
                     device="simulated")
    text = repr(p)
    assert "(simulated, batch_size=4, loss=<lambda>, amp=True, optimizer=adam, steady_state=True)" in text
    assert "checkpoint" not in text and "amp_dtype" not in text and "set_to_none" not in text
    assert "optimizer_states" in text
    html = p._repr_html_()
    assert html.startswith("<table>") and html.endswith("</table>") and len(html) < 2000
    assert "batch_size=4, loss=&lt;lambda&gt;, amp=True" in html
    assert html.count("<tr>") == 3 + sum(1 for v in p.categories.values() if v)


def test_html_repr_is_a_small_table(resnet18_b128):
    html = resnet18_b128._repr_html_()
    assert html.startswith("<table>") and len(html) < 2000
    assert "2778.4 MiB" in html and "backward of ReLU &#x27;layer4.1.relu&#x27;" in html
    assert "(simulated)" in html and "batch_size" not in html


def test_every_category_has_its_own_okabe_ito_colour():
    from helpers.palette import CATEGORY_COLORS, LINE_COLORS, OKABE_ITO, PART_COLORS

    # The palette's published values (Wong, Nature Methods 8, 441, 2011), plus grey for "other".
    published = {"#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"}
    assert set(OKABE_ITO.values()) == published | {"#999999"}
    assert set(CATEGORY_COLORS) == set(CATEGORIES)
    colours = [CATEGORY_COLORS[name].upper() for name in CATEGORIES]
    assert set(colours) <= set(OKABE_ITO.values()) and len(set(colours)) == len(colours)
    assert CATEGORY_COLORS["other"] == OKABE_ITO["grey"]
    assert set(LINE_COLORS) | set(PART_COLORS) <= set(OKABE_ITO.values())
