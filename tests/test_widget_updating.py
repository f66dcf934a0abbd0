"""The widgets say that they are working while a change takes time (issue 22, section 6).

Lesson 06a's reserved view traces each batch size exactly and replays it
through the allocator model: 1-2 s in which the old figures used to look
current.  Every widget (``_StepWidget``) now first shows :func:`working`: the
previous figures dimmed under "updating...", until the new ones replace them.
A change answered at once (an interpolated batch size, another GPU) shows no
such state.
"""

import re

import pytest

from helpers.teaching.views import working
from helpers.teaching.widgets import MemoryExplorer, base


def _shown(widget) -> list[str]:
    """Every value the widget's view takes from now on."""
    values: list[str] = []
    widget.view.observe(lambda change: values.append(change["new"]), names="value")
    return values


def test_the_reserved_view_dims_its_old_figures_while_it_traces_and_replays():
    w = MemoryExplorer("mlp", batch_size=8, max_batch_size=64, reserved=True, device="simulated")
    before = w.view.value
    assert 'data-batch="8"' in before and "gm-busy" not in before
    shown = _shown(w)
    w.batch_size.value = 9  # the reserved view traces each batch size exactly: it takes time
    assert len(shown) == 2, shown
    busy, after = shown
    assert busy.startswith('<div class="gm-busy" aria-busy="true">')
    assert "updating&hellip; tracing mlp (checkpointing off, sgd-momentum) at batch 9</div>" in busy
    stale = re.search(r'<div class="gm-stale" style="([^"]*)">(.*)</div></div>$', busy, re.S)
    assert stale and "opacity:0.35" in stale.group(1) and stale.group(2) == before  # the old figures, dimmed
    assert "gm-busy" not in after and 'data-batch="9"' in after and w.view.value == after
    assert int(re.search(r'class="gm-reserved" data-bytes="(\d+)"', after).group(1)) == w.result.reserved_bytes


def test_a_change_answered_at_once_shows_no_working_state():
    w = MemoryExplorer("mlp", batch_size=8, max_batch_size=64, device="simulated")
    shown = _shown(w)
    w.batch_size.value = 40  # its peak is another moment than batch 1's: traced, and said
    assert len(shown) == 2 and "tracing mlp (checkpointing off, sgd-momentum) at batch 40</div>" in shown[0]
    shown.clear()
    w.batch_size.value = 41  # between 40 and 64, which peak at the same moment: interpolated
    w.capacity.value = "A100 40 GB"  # the same step on another card
    assert not w.result.traced and len(shown) == 2 and not any("gm-busy" in v for v in shown)
    w.amp.value = True  # a new configuration: its ends are traced, said once, without a batch size
    assert len(shown) == 4 and "gm-busy" in shown[2] and "gm-busy" not in shown[3]
    assert "tracing mlp (AMP, checkpointing off, sgd-momentum)</div>" in shown[2]


def test_the_curve_driven_from_code_leaves_the_view_alone():
    """Lesson 01b traces the widget's curve from code: the view must not stay 'updating'."""
    w = MemoryExplorer("mlp", batch_size=8, max_batch_size=64, device="simulated")
    view = w.view.value
    w.curve().trace(40)
    assert w.view.value == view


def test_an_interrupted_update_does_not_stay_updating(monkeypatch):
    w = MemoryExplorer("mlp", batch_size=8, max_batch_size=64, reserved=True, device="simulated")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(base, "reserved_estimate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        w.batch_size.value = 10
    assert "gm-busy" not in w.view.value and w.result is None
    assert w.message == "stopped before the new figures were in (KeyboardInterrupt)"
    monkeypatch.undo()
    w.batch_size.value = 11  # and the next change works again
    assert w.result.batch_size == 11 and 'data-batch="11"' in w.view.value


def test_the_working_view_escapes_its_note_and_keeps_the_old_view():
    assert working("tracing a<b") == ('<div class="gm-busy" aria-busy="true"><div class="gm-updating" '
                                      'style="font-weight:bold;color:#555">updating&hellip; tracing a&lt;b'
                                      '</div></div>')
    assert working("x", "<p>old</p>").endswith('<div class="gm-stale" style="opacity:0.35;filter:grayscale(100%)">'
                                                "<p>old</p></div></div>")


def test_the_view_carries_its_batch_size_and_gpu_as_data():
    w = MemoryExplorer("mlp", batch_size=8, max_batch_size=64, capacity="A100 40 GB", device="simulated")
    from helpers.gpus import GPU_CARDS

    assert w.view.value.startswith(f'<div class="gm-explorer" data-batch="8" data-gpu="A100 40 GB" '
                                   f'data-capacity="{GPU_CARDS["A100 40 GB"]}">')
