"""helpers.teaching.widgets and views: the batch-size widget, its controls and its pure view."""

import datetime
import re

import ipywidgets
import pytest
from torch import nn

from helpers import profile_step
from helpers.batch import Estimate
from helpers.teaching.views import render, verdict
from helpers.teaching.widgets import IMAGE_SIZES, PARAMETER_COUNT, SEQ_LENS, MemoryExplorer, WillItFit
from helpers.units import MiB, fmt_mib


def test_widget_shows_what_a_direct_measurement_gives():
    """The slider ends at 900: each configuration is traced at its ends, batch 1 and 900, and where the widget
    cannot interpolate (128: batch 1's peak comes at another moment of the step); 500, between 128 and 900 whose
    peaks come at the same allocation, is interpolated, and checked against a direct trace, by category too.  A
    direct profile_step of a step the widget traced recalls the widget's trace (kept): equal where it is that step."""
    w = MemoryExplorer(device="simulated", batch_size=128, max_batch_size=900)
    shown = [int(v) for v in re.findall(r'class="gm-peak" data-bytes="(\d+)"', w.view.value)]
    direct = profile_step("resnet18", 128, device="simulated", steady_state=True)
    assert shown == [direct.peak_allocated_bytes]
    assert w.message.startswith("fits in V100 16 GB")
    assert "gpt2" in w.model.options and "llama3-8b" not in w.model.options  # 131,072 tokens fit no card

    w.batch_size.value = 500  # the slider moves: the view follows
    direct = profile_step("resnet18", 500, device="simulated", steady_state=True)
    shown = int(re.search(r'class="gm-peak" data-bytes="(\d+)"', w.view.value).group(1))
    assert abs(shown - direct.peak_allocated_bytes) < 4096 and 500 not in w.curve().traces  # interpolated
    assert w.result.batch_size == 500 and w.batch_box.value == 500
    for name in ("parameters", "gradients", "optimizer_states", "activations"):
        value = int(re.search(rf'data-category="{name}" data-bytes="(\d+)"', w.view.value).group(1))
        assert abs(value - direct.categories[name]) < 4096
    w.batch_size.value = 900
    assert w.result.peak_bytes == profile_step("resnet18", 900, device="simulated",
                                               steady_state=True).peak_allocated_bytes
    assert w.message.startswith("does not fit in V100 16 GB")  # 900 * 21.3 MiB > 14.8 GiB
    w.capacity.value = "RTX 4090 24 GB"
    assert w.message.startswith("fits in RTX 4090 24 GB")

    w.amp.value = True  # a new configuration, traced at the slider's ends: 900 is one
    amp = profile_step("resnet18", 900, device="simulated", steady_state=True, amp=True)
    assert w.result.peak_bytes == amp.peak_allocated_bytes

    w.batch_size.value = 0  # cannot be entered: the slider clamps to its minimum
    assert w.batch_size.value == 1 and w.result.batch_size == 1

    w.model.value = "squeezenet1_1"  # no sequence of modules, as DenseNet-121, but traced in 1 s where it takes 15 s
    w.checkpoint.value = 4  # refused clearly, not with a traceback
    assert w.result is None and "cannot run this configuration" in w.message
    assert "SqueezeNet is not one" in w.view.value
    w.checkpoint.value = 0
    assert w.result is not None


def test_widget_refuses_bad_initial_values():
    with pytest.raises(ValueError, match="batch_size"):
        MemoryExplorer(device="simulated", batch_size=0)
    with pytest.raises(ValueError, match="unknown model"):
        MemoryExplorer(device="simulated", model="resnet19")
    with pytest.raises(ValueError, match="capacity"):
        MemoryExplorer(device="simulated", capacity="this GPU")
    with pytest.raises(ValueError, match=r"^batch_size must be an integer from 1 to 64, got 65$"):
        MemoryExplorer(device="simulated", batch_size=65, max_batch_size=64)


@pytest.mark.parametrize("options, message", [
    (dict(optimizer="lion"),
     r"^unknown optimizer 'lion'; use one of sgd, sgd-momentum, adam, adamw, adamw8bit, bnb-adamw8bit, paged-adamw, "
     r"paged-adamw8bit$"),
    (dict(amp="yes"), r"^amp must be True or False, got 'yes'$"),
    (dict(checkpoint=-2), r"^checkpoint must be an integer >= 0, got -2$"),
    (dict(checkpoint=3), r"^checkpoint must be 0, 2, 4 or 8, got 3$"),  # the menu's own choices
    (dict(device="tpu"), r"^unknown device 'tpu'"),
    (dict(model="gpt2", image_size=64), r"applies to image inputs; gpt2 takes token ids$"),
    (dict(attention="ring"), r"^unknown attention 'ring'"),
])
def test_the_widgets_options_are_checked_by_step_config(options, message):
    with pytest.raises(ValueError, match=message):
        MemoryExplorer(**{"device": "simulated", **options})
    if set(options) <= {"optimizer", "device"}:
        with pytest.raises(ValueError, match=message):
            WillItFit(**{"device": "simulated", **options})


def test_sizes_are_written_as_the_lessons_show_them():
    assert fmt_mib(16160 * MiB) == "16,160.0 MiB" and fmt_mib(2 * MiB) == "2.0 MiB" and fmt_mib(0) == "0.0 MiB"


def test_the_view_is_a_pure_function_of_the_estimate():
    small = Estimate(4, 2 * 2**20, {"parameters": 2**20, "activations": 2**20}, "backward of ReLU '1'", True, "simulated")
    message, view = render(small, "H100 80 GB", 80 * 2**30)
    assert message == ("fits in H100 80 GB: peak allocated of the whole step + 1,024.0 MiB assumed overhead + cuBLAS workspaces = "
                       "2.0 + 1,024.0 + 64.0 = 1,090.0 MiB <= 81,920.0 MiB")
    assert "CUDA context (assumed)" in view and "allocator cache (assumed)" in view  # the two parts of the overhead
    assert 'class="gm-zoom"' in view  # too thin: zoomed
    assert "peak of the whole step at the backward of ReLU &#x27;1&#x27;" in view
    assert render(small, "H100 80 GB", 80 * 2**30) == (message, view)
    big = Estimate(4, 20 * 2**30, {"activations": 20 * 2**30}, "x", True, "simulated")
    ok, text = verdict(big, "V100 16 GB", 16 * 2**30, False)
    assert not ok and text.startswith("does not fit in V100 16 GB") and 'gm-zoom' not in render(big, "V100", 16 * 2**30)[1]
    failed = Estimate(4, None, backend="cuda", error="CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert verdict(failed, "this GPU", 16 * 2**30, True) == (
        False, "does not fit: batch 4 ran out of memory on this GPU (CUDA out of memory. Tried to allocate 2.00 GiB.)")


def test_a_learners_own_model_and_a_gpt_preset():
    """The slider ends at batch 1, the batch shown: each configuration is traced once (the subject is which model and
    inputs the widget steps, not the slider; GPT-2's 12 blocks at 1,024 tokens are the costly trace)."""
    mine = nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))
    w = MemoryExplorer(model=mine, batch_size=1, max_batch_size=1, device="simulated", input_shape=(1, 28, 28))
    assert w.model.value == "Sequential" and "Sequential" in w.model.options and w.result is not None
    direct = profile_step(mine, 1, input_shape=(1, 28, 28), device="simulated", steady_state=True)
    assert abs(w.result.peak_bytes - direct.peak_allocated_bytes) < 4096
    w.model.value = "gpt2"  # a preset, at its full context: input_shape= belonged to the learner's model
    assert w.result is not None and w.result.peak_bytes > 2**30 and w.config().input_shape is None
    assert w.config().seq_len is None and w.config().model == "gpt2"
    w.model.value = "Sequential"  # and comes back with it
    assert w.config().input_shape == (1, 28, 28) and w.result.peak_bytes == w.curve().estimate(1).peak_bytes


def test_a_new_trace_first_says_it_is_working():
    w = MemoryExplorer(model="mlp", device="simulated", max_batch_size=64, batch_size=8)
    shown = []
    w.view.observe(lambda change: shown.append(change["new"]), names="value")
    w.amp.value = True  # a configuration not traced yet
    assert 'class="gm-busy"' in shown[0] and "tracing mlp (AMP" in shown[0]
    assert 'class="gm-explorer"' in shown[-1]
    shown.clear()
    w.batch_size.value = 9  # same configuration: no new trace, no busy view
    assert len(shown) == 1 and "gm-busy" not in shown[0]


def test_will_it_fit_answers_for_presets_and_for_a_parameter_count():
    # the slider ends at batch 1, the batch shown: a new configuration is traced once, at batch 1 (both its ends)
    w = WillItFit(model="gpt2", batch_size=1, max_batch_size=1, size=128, optimizer="adam", device="simulated")
    direct = profile_step("gpt2", 1, seq_len=128, amp=True, optimizer="adam", steady_state=True, device="simulated")
    assert w.result.peak_bytes == direct.peak_allocated_bytes and w.summary().startswith(w.message)
    shown = []
    w.view.observe(lambda change: shown.append(change["new"]), names="value")
    w.model.value = "resnet18"  # its own sizes, set quietly: one busy view, then one result
    assert w.size.options == IMAGE_SIZES and w.size.value == 224 and w.size.description == "image size"
    assert len(shown) == 2 and "gm-busy" in shown[0] and "gm-explorer" in shown[1]
    w.model.value = PARAMETER_COUNT
    w.parameters.value = 1_000_000_000
    w.capacity.value = "RTX 4090 24 GB"
    assert w.result.peak_bytes == 20 * 10**9
    # a parameter count says nothing of the activations: only the model states can be said to fit
    assert w.message == ("model states fit in RTX 4090 24 GB, activations not counted: model states at "
                         "optimizer.step() + 1.0 GiB assumed overhead + cuBLAS workspaces = 18.6 + 1.0 + 0.02 = 19.6 GiB <= 24.0 GiB")
    w.parameters.value = 2_000_000_000  # 40 GB of model states: that alone decides
    assert w.message.startswith("does not fit in RTX 4090 24 GB: model states alone")
    w.parameters.value = 1_000_000_000
    assert "from the parameter count" in w.view.value and w.size.layout.display == "none"
    w.optimizer.value = "sgd"
    assert w.result.peak_bytes == 8 * 10**9
    with pytest.raises(ValueError, match="unknown precision"):
        WillItFit(precision="fp8", device="simulated")
    with pytest.raises(ValueError, match="size must be one of"):
        WillItFit(model="gpt2", size=100, device="simulated")


def test_will_it_fit_offers_llama3_8b_as_a_language_model():
    w = WillItFit(model=PARAMETER_COUNT, device="simulated")
    assert "llama3-8b" in w.model.options
    assert WillItFit._sizes("llama3-8b") == SEQ_LENS and WillItFit._size_name("llama3-8b") == "sequence"
    w.model.unobserve(w._on_model, names="value")  # the controls only: no trace of an 8-billion-parameter model
    w._quiet = True
    w.model.value = "llama3-8b"
    w.size.options, w.size.value = SEQ_LENS, 512
    config = w.config()
    assert config.model == "llama3-8b" and config.seq_len == 512 and config.image_size == 224


def test_the_reserved_toggle_judges_the_fit_by_the_allocator_model():
    from helpers.allocator import replay_on_gpu
    from helpers.gpus import CUDA_CONTEXT_BYTES, GPU_CARDS

    w = MemoryExplorer(device="simulated", batch_size=64, max_batch_size=1000, reserved=True)  # 1000: a traced end
    direct = profile_step("resnet18", 64, device="simulated", steady_state=True)
    run = replay_on_gpu(direct.allocation_log, GPU_CARDS["V100 16 GB"])
    shown = int(re.search(r'class="gm-reserved" data-bytes="(\d+)"', w.view.value).group(1))
    assert shown == w.result.reserved_bytes == run.peak_reserved > direct.peak_allocated_bytes
    assert w.message.startswith("fits in V100 16 GB: peak reserved of the whole step (simulated allocator) + "
                                f"{CUDA_CONTEXT_BYTES / 2**20:,.1f} MiB assumed CUDA context + cuBLAS workspaces = ")
    assert "reserved (sim.)" in w.summary()
    w.batch_size.value = 1000  # about 21 GB of tensors: more than a V100 holds
    assert w.message.startswith("does not fit in V100 16 GB: peak reserved of the whole step (simulated allocator) "
                                "+ 512.0 MiB assumed CUDA context + cuBLAS workspaces: the simulated allocator ran out of memory "
                                "within 16,160.0 - 512.0 = 15,648.0 MiB, before the 16.2 MiB of cuBLAS workspaces (tried to "
                                "allocate ")
    assert w.result.reserved_bytes is None and w.result.allocator_error
    w.reserved.value = False  # back to the assumed 1 GiB overhead
    assert w.message.startswith("does not fit in V100 16 GB: peak allocated of the whole step + 1,024.0 MiB assumed "
                                "overhead + cuBLAS workspaces = ") and w.result.reserved_bytes is None
    with pytest.raises(ValueError, match="reserved"):
        MemoryExplorer(device="simulated", reserved="yes")


def test_the_sequence_explorer_judges_the_whole_step_not_the_end_of_the_forward_pass():
    """Issue 22: it said "fits" for GPT-2 1.5B at batch 19 and 1024 tokens on an H100 (end of forward
    77,637.9 MiB) where the step peaks at 81,698.5 MiB, and at 512 tokens on an RTX 4090 (22,139.3 MiB)
    where the step peaks at 29,709.5 MiB at optimizer.step()."""
    from helpers.teaching.widgets import SequenceExplorer
    from helpers.transformer import transformer_step

    explorer = SequenceExplorer(model="gpt2-xl", seq=1024, batch_size=19)
    assert isinstance(explorer, ipywidgets.VBox) and explorer.view in explorer.children
    direct = profile_step(transformer_step("gpt2-xl", 1024, 19))
    assert explorer.result.peak_bytes == direct.peak_allocated_bytes == 85_667_075_584  # 81,698.5 MiB
    assert explorer.message == ("does not fit in H100 80 GB: peak allocated of the whole step + 1.0 GiB assumed "
                                "overhead + cuBLAS workspaces = 79.8 + 1.0 + 0.06 = 80.8 GiB > 79.2 GiB")  # lesson 08b writes GiB
    assert "  optimizer states        11.6 GiB" in explorer.summary().splitlines()
    assert "peak of the whole step at the backward of LayerNorm" in explorer.view.value
    assert explorer.summary().splitlines()[0] == explorer.message

    shown = []
    explorer.view.observe(lambda change: shown.append(change["new"]), names="value")
    explorer.capacity.value = "RTX 4090 24 GB"  # same step: no new trace
    assert len(shown) == 1 and "gm-busy" not in shown[0]
    # batch 1 and 512 tokens set as one change (quietly, as WillItFit sets a new model's sizes): the step at batch 1
    # and 1,024 tokens between the two is no subject here, and would be a third step of 48 blocks written
    explorer._quiet = True
    explorer.batch_size.value = 1
    explorer._quiet = False
    explorer.seq.value = 512  # a new step: it says first that it is working
    assert len(shown) == 3 and "gm-busy" in shown[1] and "gm-explorer" in shown[2]
    assert explorer.result.peak_bytes == 31_152_668_160 and explorer.result.where == "optimizer.step()"  # 29,709.5 MiB
    assert explorer.message.startswith("does not fit in RTX 4090 24 GB")

    shown.clear()
    explorer.policy.value = "full"  # a policy applies to every block: the step is profile_step's
    assert len(shown) == 2 and "gm-busy" in shown[0] and "gm-explorer" in shown[1]  # another new step: so does it
    full = profile_step(transformer_step("gpt2-xl", 512, 1, policy="full"))
    assert explorer.result.peak_bytes == full.peak_allocated_bytes
    with pytest.raises(ValueError, match="seq must be one of"):
        SequenceExplorer(seq=1000)
    with pytest.raises(ValueError, match="unknown checkpointing policy"):
        SequenceExplorer(policy="some")


def test_every_widget_gives_a_readable_stand_in_for_a_notebook_opened_unrun():
    w = WillItFit(model=PARAMETER_COUNT, device="simulated")
    bundle = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # the live widget, when a kernel runs it
    assert bundle["text/html"].startswith("<div") and "<b>WillItFit</b>" in bundle["text/html"]
    assert "Run All Cells" in bundle["text/html"] and "whether a training step fits" in bundle["text/html"]


def test_a_refused_snapshot_hides_the_figures_before_it_shows_the_refusal():
    """Lesson 06b's widget: each trait change is one message to the browser, applied in order; after a refused upload
    no step may show the refusal beside a picture of before (or a broken icon), and a new snapshot's name comes after
    its own figures.  The menu holds the dropout MLP's snapshot alone: the order of the messages is the subject, not
    which snapshot is drawn, and the default menu's first one, Llama-3.1 8B's (3.5 s more of CPU to read and draw), is
    lesson 06b's, run under nbval."""
    from helpers.teaching.widgets import SHIPPED, SnapshotExplorer

    name = "dropout MLP, C++ stacks (H200)"
    w = SnapshotExplorer(shipped={name: SHIPPED[name]})
    changes = []
    for part, image in (("timeline", w.timeline), ("map", w.memory_map)):
        image.observe(lambda c, p=part: changes.append((p, "shown" if c["new"] else "empty")), names="value")
        image.layout.observe(lambda c, p=part: changes.append((p, "hidden" if c["new"] else "visible")),
                             names="display")
    w.view.observe(lambda c: changes.append(("view", "busy" if "gm-busy" in c["new"] else
                                                      "refused" if "gm-refused" in c["new"] else "named")), names="value")
    content = b"not a snapshot\n"  # a file as the browser sends it (ipywidgets' FileUpload value)
    w.upload.value = ({"name": "notes.pickle", "type": "", "size": len(content), "content": memoryview(content),
                       "last_modified": datetime.datetime.now(datetime.timezone.utc)},)
    assert w.report is None and w.message.startswith("notes.pickle: not a memory snapshot")
    assert changes == [("view", "busy"), ("timeline", "hidden"), ("timeline", "empty"), ("map", "hidden"),
                       ("map", "empty"), ("view", "refused")], changes
    assert [i.layout.display for i in (w.timeline, w.memory_map)] == ["none", "none"] and w.choice.index is None
    changes.clear()
    w.choice.value = name
    assert changes == [("view", "busy"), ("timeline", "shown"), ("timeline", "visible"), ("map", "shown"),
                       ("map", "visible"), ("view", "named")], changes
    assert w.report.peak_bytes > 0 and f'data-name="{name}"' in w.view.value and SHIPPED[name].exists()
