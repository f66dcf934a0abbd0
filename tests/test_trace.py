"""helpers.engine.trace: the events of one step, one meaning per field."""

import torchvision

from helpers import CATEGORIES
from helpers.engine.trace import MODULE_PHASES, STEP_PHASES


def test_events_are_consistent(resnet18_b128):
    p = resnet18_b128
    previous = 0
    for event, cats in zip(p.events, p.event_categories):
        assert event.allocated_bytes == previous + event.delta_bytes
        assert sum(cats.values()) == event.allocated_bytes
        assert set(cats) == set(CATEGORIES)
        previous = event.allocated_bytes
    assert sum(p.categories.values()) == p.peak_allocated_bytes
    assert max(e.allocated_bytes for e in p.events) <= p.peak_allocated_bytes
    assert [e.phase for e in p.events if e.module is None] == [
        "model", "input", "loss", "backward", "optimizer.step", "zero_grad"]
    names = {n for n, _ in torchvision.models.resnet18().named_modules()}
    module_events = [e for e in p.events if e.module is not None]
    assert {e.module for e in module_events} == names
    for name in names:  # every module has a pre, fwd and bwd event
        phases = {e.phase for e in module_events if e.module == name}
        assert phases == {"pre", "fwd", "bwd"}, name


def test_event_labels_say_what_happened(resnet18_b128):
    p = resnet18_b128
    assert p.find("layer4.1.relu", "bwd").label == "backward of ReLU 'layer4.1.relu'"
    assert p.find("", "pre").label == "before the model (ResNet)"
    assert p.find(None, "optimizer.step").label == "optimizer.step()"
    assert p.summary().splitlines()[0] == "at the peak (reached by event 157, backward of ReLU 'layer4.1.relu'):"


def test_module_and_step_events_use_separate_fields(resnet18_b128):
    for e in resnet18_b128.events:
        if e.module is None:
            assert e.module_type is None and e.note and e.phase in STEP_PHASES and e.type == e.note
        else:
            assert e.note is None and e.module_type and e.type == e.module_type and e.phase in MODULE_PHASES
    positions = [e.log_position for e in resnet18_b128.events]
    assert positions == sorted(positions)
