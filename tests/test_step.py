"""helpers.step: one traced training step, for any model and input; figures derived from shapes."""

import math
import warnings

import pytest
import torch
import torchvision
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from helpers import DoesNotFit, GiB, MiB, StepConfig, profile_step, round_up, time_step
from helpers.__main__ import main
from helpers.techniques import make_optimizer


def nbytes(shape, dtype=torch.float32):
    return round_up(math.prod(shape) * dtype.itemsize)


def test_published_resnet18_deltas_follow_from_shapes(resnet18_b128):
    p = resnet18_b128
    stem = (128, 64, 112, 112)
    assert p.find("conv1", "fwd").delta_bytes == nbytes(stem) == 392 * MiB
    # BatchNorm keeps its output plus per-channel mean and inverse std (64 floats each).
    assert p.find("bn1", "fwd").delta_bytes == nbytes(stem) + 2 * nbytes((64,))
    assert p.find("relu", "fwd").delta_bytes == 0  # in place
    pooled = (128, 64, 56, 56)
    assert p.find("maxpool", "fwd").delta_bytes == nbytes(pooled) + nbytes(pooled, torch.int64) == 294 * MiB
    assert p.find("layer1.0.conv1", "fwd").delta_bytes == nbytes(pooled) == 98 * MiB
    assert p.find("layer1.0.conv2", "fwd").delta_bytes == 98 * MiB
    assert p.find("layer1.0.relu", "fwd", nth=1).delta_bytes == 0


def test_categories_at_known_moments(resnet18_b128):
    p = resnet18_b128
    model = torchvision.models.resnet18()
    param_bytes = sum(round_up(t.numel() * t.element_size()) for t in model.parameters())
    buffer_bytes = sum(round_up(t.numel() * t.element_size()) for t in model.buffers())
    assert p.categories["parameters"] == param_bytes + buffer_bytes
    assert p.categories["input"] == nbytes((128, 3, 224, 224)) + nbytes((128,), torch.int64)
    assert p.categories["activations"] > 0.9 * p.peak_allocated_bytes
    end = p.event_categories[-1]
    assert end["gradients"] == 0  # zero_grad(set_to_none=True)
    assert end["optimizer_states"] == param_bytes  # one momentum buffer per parameter
    assert end["activations"] == 0
    after_backward = p.event_categories[p.find(None, "backward").index]
    assert after_backward["gradients"] == param_bytes


def test_peak_agrees_with_memtracker(resnet18_b128):
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        model = torchvision.models.resnet18()
        optimizer = make_optimizer("sgd-momentum", model.parameters())
        tracker = MemTracker()
        tracker.track_external(model, optimizer)
        with tracker:
            x = torch.randn(128, 3, 224, 224)
            y = torch.randint(0, 1000, (128,))
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    reference = sum(snapshot["Total"] for snapshot in tracker.get_tracker_snapshot("peak").values())
    # MemTracker counts exact storage bytes, we round each up to 512 (README: within 0.01%).
    assert abs(resnet18_b128.peak_allocated_bytes - reference) / reference < 1e-4


def test_adam_keeps_two_states_per_parameter():
    p = profile_step("resnet18", 2, image_size=64, optimizer="adam", device="simulated")
    param_bytes = sum(round_up(t.numel() * 4) for t in torchvision.models.resnet18().parameters())
    # Adam's step counters are host tensors on a GPU (not fused, not capturable): not counted.
    assert p.event_categories[-1]["optimizer_states"] == 2 * param_bytes


def test_steady_state_adds_exactly_the_optimizer_states(resnet18_b128):
    first = resnet18_b128  # profile_step("resnet18", 128, device="simulated"), the session's
    steady = profile_step("resnet18", 128, device="simulated", steady_state=True)
    assert first.categories["optimizer_states"] == 0  # momentum is created inside optimizer.step()
    momentum = sum(round_up(p.numel() * 4) for p in torchvision.models.resnet18().parameters())
    assert steady.categories["optimizer_states"] == momentum  # one fp32 buffer per parameter
    assert steady.event_categories[0]["optimizer_states"] == momentum  # there from the start
    assert steady.peak_allocated_bytes - first.peak_allocated_bytes == momentum
    assert steady.peak_event == first.peak_event


def test_amp_and_checkpointing_lower_the_peak_and_keep_every_gradient(resnet18_b128):
    base = resnet18_b128.peak_allocated_bytes
    amp = profile_step("resnet18", 128, amp=True, device="simulated")
    ckpt = profile_step("resnet18", 128, checkpoint=4, device="simulated")
    both = profile_step("resnet18", 128, amp=True, checkpoint=4, device="simulated")
    assert both.peak_allocated_bytes < amp.peak_allocated_bytes < base
    assert both.peak_allocated_bytes < ckpt.peak_allocated_bytes < base
    for p in (amp, ckpt, both):
        assert p.params_without_grad == []
    assert any(e.phase == "recompute" for e in ckpt.events)
    # AMP (bfloat16 when simulated): conv1 keeps a half-size output, plus the
    # low-precision copies of its input batch and weight that autocast makes.
    half = torch.bfloat16
    assert amp.find("conv1", "fwd").delta_bytes == (
        nbytes((128, 64, 112, 112), half) + nbytes((128, 3, 224, 224), half) + nbytes((64, 3, 7, 7), half))


def test_huge_batch_is_simulated_without_allocating():
    p = profile_step("resnet18", 4096, device="simulated")
    assert p.find("conv1", "fwd").delta_bytes == nbytes((4096, 64, 112, 112))  # 12.25 GiB
    assert p.peak_allocated_bytes > 80 * 2**30  # far beyond this machine's RAM


def test_any_classification_model_and_a_custom_one():
    assert profile_step("mobilenet_v3_small", 4, image_size=96, device="simulated").peak_allocated_bytes > 0

    def mlp():
        return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))

    p = profile_step(mlp, 16, input_shape=(64,), num_classes=10, device="simulated")
    assert p.model == "mlp"
    assert p.find("1", "fwd").delta_bytes == nbytes((16, 32))


def test_a_model_instance_is_profiled_on_a_copy():
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    p = profile_step(model, 256, input_shape=(784,), device="simulated")
    assert p.model == "Sequential" and p.find("0", "fwd").delta_bytes == nbytes((256, 256))
    assert {t.device.type for t in model.parameters()} == {"cpu"} and model[0].weight.grad is None
    assert profile_step(model, 256, input_shape=(784,), device="simulated", name="mine").model == "mine"


def test_token_inputs_and_next_token_loss_for_a_gpt():
    p = profile_step("gpt2", 2, seq_len=64, device="simulated")
    assert p.input_shape == (64,)
    inputs = [(s.shape, s.dtype) for s in p.storages.values() if s.category == "input"]
    assert inputs == [((2, 64), torch.int64)] * 2  # the token ids, and the next tokens as targets
    logits = next(e for e in p.events if e.module == "" and e.phase == "fwd")
    assert logits.shape == (2, 64, 50257)
    with pytest.raises(ValueError, match="longer than the model's context"):
        profile_step("gpt2", 1, seq_len=2048, device="simulated")


def test_gpt2_xl_model_states_are_16_bytes_per_parameter():
    """fp32 Adam (torch.autocast keeps no master copy): 4 + 4 + 8 bytes per parameter, at the optimizer step."""
    p = profile_step("gpt2-xl", 1, seq_len=1024, amp=True, optimizer="adam", steady_state=True, device="simulated")
    states = p.categories["parameters"] + p.categories["gradients"] + p.categories["optimizer_states"]
    assert p.parameter_count == 1_557_611_200 and p.peak.phase == "optimizer.step"
    assert p.model_state_bytes == states and states / p.parameter_count == pytest.approx(16, abs=0.001)
    # On top, at the peak: foreach Adam's one float32 temporary per parameter (the square root of exp_avg_sq),
    # and three 512-byte scalars.
    assert p.categories["other"] == p.categories["parameters"] + 3 * 512


def test_custom_inputs_and_a_custom_loss():
    def pair(batch_size, device):
        return torch.randn(batch_size, 8, device=device), torch.randn(batch_size, 8, device=device)

    class Bilinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = nn.Bilinear(8, 8, 4)

        def forward(self, a, b):
            return self.layer(a, b)

    p = profile_step(Bilinear, 32, inputs=pair, loss=lambda out: out.square().mean(), device="simulated")
    assert p.find(None, "loss").type == "loss" and p.categories["input"] == 2 * nbytes((32, 8))
    with pytest.raises(ValueError, match="must return a scalar tensor"):
        profile_step(Bilinear, 32, inputs=pair, loss=lambda out: out, device="simulated")


def test_a_classifier_whose_classes_differ_from_num_classes_is_refused():
    def ten_classes():
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))

    assert profile_step(ten_classes, 4, input_shape=(64,), device="simulated").peak_allocated_bytes > 0
    with pytest.raises(ValueError, match="output has 10 classes, but num_classes is 1000"):
        profile_step(ten_classes, 4, input_shape=(64,), num_classes=1000, device="simulated")
    with pytest.raises(ValueError, match="expects \\(batch, classes\\) logits"):
        profile_step("gpt2", 1, seq_len=8, loss="classification", device="simulated")


@pytest.mark.parametrize("kwargs, message", [
    (dict(batch_size=0), "batch_size must be an integer >= 1"),
    (dict(batch_size=-3), "batch_size must be"),
    (dict(model="resnet-18"), "unknown model 'resnet-18'"),
    (dict(optimizer="lion"), "unknown optimizer 'lion'"),
    (dict(model="densenet121", checkpoint=2), "DenseNet is not one"),
    (dict(checkpoint=11), "between 1 and 10"),
    (dict(batch_size=1, image_size=32), "cannot run on input .*1 value per channel"),
    (dict(model="vgg11", image_size=8), "vgg11 cannot run on input"),
])
def test_bad_input_gives_a_clear_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        profile_step(**{"device": "simulated", **kwargs})


def test_a_model_that_cannot_be_built_is_one_line_and_one_that_needs_values_builds_on_the_cpu():
    def broken():
        raise RuntimeError("my model is broken\nsecond line")

    with pytest.raises(ValueError, match="^building broken failed: RuntimeError: my model is broken$"):
        profile_step(broken, 2, device="simulated")

    def reads_values():  # needs real numbers, so it cannot be built on the meta device
        layer = nn.Linear(4, 4)
        assert float(layer.weight.abs().sum()) > 0
        return layer

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the failed attempt on meta warns nothing
        p = profile_step(reads_values, 2, input_shape=(4,), device="simulated")
    assert p.categories["parameters"] == 2 * 512  # weight and bias, each a 512-byte block


@pytest.mark.parametrize("kwargs, message", [
    (dict(model="gpt2", input_shape=(3,)), "gpt2 takes token ids: give their number with seq_len="),
    (dict(model="gpt2", seq_len=8, num_classes=5), "num_classes applies to a classification loss"),
    (dict(model="resnet18", seq_len=8), "token inputs need a vocabulary: give vocab_size="),
])
def test_inputs_that_do_not_match_the_model_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        profile_step(**{"device": "simulated", "batch_size": 1, **kwargs})


def test_unknown_options_are_named():
    with pytest.raises(ValueError, match="unknown option 'batchsize'"):
        profile_step("resnet18", batchsize=4)
    assert profile_step(StepConfig(model="resnet18", batch_size=2, image_size=32, device="simulated")).batch_size == 2


def test_out_of_memory_is_reported_as_does_not_fit(resnet18_b128):
    """Running out of memory (a simulated 1.5 GiB GPU) becomes DoesNotFit, with CUDA's first line."""
    with pytest.raises(DoesNotFit) as info:
        profile_step("resnet18", 128, device="simulated", capacity=3 * GiB // 2)
    # 1.5 GiB - 1 GiB of assumed overhead: conv1's 392 MiB output fits, bn1's does not.
    assert str(info.value).startswith("resnet18 at batch size 128 does not fit: Simulated CUDA out of memory. "
                                      "Tried to allocate 392.00 MiB. GPU 0 has a total capacity of 1.50 GiB")
    assert info.value.cuda_message == str(info.value).split(" does not fit: ")[1]
    assert "\n" not in info.value.cuda_message
    assert info.value.requested == 392 * MiB
    assert info.value.allocated == resnet18_b128.find("conv1", "fwd").allocated_bytes


def test_time_step_times_the_same_step_untraced():
    seconds = time_step("resnet18", 2, image_size=32, num_classes=10, device="simulated", repeats=2)
    assert 0 < seconds < 60
    assert time_step("gpt2", 1, seq_len=16, amp=True, optimizer="adam", device="simulated", repeats=1) > 0
    with pytest.raises(ValueError, match="repeats must be an integer >= 1"):
        time_step("resnet18", 2, repeats=0, device="simulated")
    with pytest.raises(ValueError, match="unknown option 'batchsize' for time_step"):
        time_step("resnet18", batchsize=2)


def test_amp_with_gradient_accumulation_autocasts_every_micro_batch():
    """Each micro-batch gets a fresh autocast context: the simulated one (a generator) cannot be entered twice."""
    p = profile_step("resnet18", 4, amp=True, accumulation_steps=2, device="simulated")
    assert [e.phase for e in p.events if e.module is None] == [
        "model", "input", "loss", "backward", "input", "loss", "backward", "optimizer.step", "zero_grad"]
    # conv1 under float16 autocast: 16-bit copies of the input and the weight, a 16-bit output, in both.
    half = torch.float16
    conv1 = nbytes((4, 3, 224, 224), half) + nbytes((64, 3, 7, 7), half) + nbytes((4, 64, 112, 112), half)
    assert [p.find("conv1", "fwd", nth=i).delta_bytes for i in (0, 1)] == [conv1, conv1]
    assert time_step("mlp", 8, amp=True, accumulation_steps=2, device="simulated", repeats=1) > 0


def test_the_command_line_runs_amp_with_gradient_accumulation(capsys):
    assert main(["profile", "--model", "resnet18", "--batch-size", "4", "--amp", "--accumulation-steps", "2",
                 "--device", "simulated"]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("peak allocated: ")


def test_the_runner_is_the_step_in_parts():
    """StepRunner's parts, called by hand, are the step run() runs; its contexts are new at each call."""
    from helpers.step import StepRunner

    runner = StepRunner(StepConfig(model="mlp", batch_size=32, amp=True, device="simulated"))
    assert runner.autocast() is not runner.autocast()
    with runner.meter:
        model = runner.place()
        runner.run()
        after_run = runner.meter.allocated()
        batch = runner.batch()
        loss = runner.forward(batch)
        assert loss.dtype == torch.float32 and batch.targets.shape == (32,)
        runner.backward(loss)
        runner.step()
        runner.zero_grad()
        del batch, loss
        assert runner.meter.allocated() == after_run
    assert all(p.grad is None for p in model.parameters())


def test_a_resnet_step_runs_no_hugging_face_code():
    """The recipe's LoRA and QLoRA steps do nothing for a ResNet: transformers, peft and torchao stay unimported."""
    import subprocess
    import sys

    code = ("import sys; from helpers import profile_step; profile_step('resnet18', 2, image_size=32, "
            "device='simulated'); print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('transformers', 'peft', 'torchao', 'bitsandbytes') or m == 'helpers.models.hf'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_recipe_prepares_before_placing_and_counts_from_placing_on():
    """Every step before "place on the device" runs when the runner is made (nothing counted, the model on
    meta); placing, the optimizer and the GradScaler are counted inside the meter, in the recipe's order."""
    from helpers.step import RECIPE, StepRunner

    names = [name for name, _ in RECIPE]
    assert names.index("build") == 0 and names.index("LoRA adapters") < names.index("place on the device")
    assert names.index("place on the device") < names.index("quantize") < names.index(
        "optimizer")
    runner = StepRunner(StepConfig(model="resnet18", batch_size=2, image_size=32, checkpoint=2, amp=True,
                                   optimizer="adam", device="simulated"))
    assert {p.device.type for p in runner.model.parameters()} == {"meta"}
    assert runner.segments is not None and runner.module is runner.segments  # checkpointed by segments
    assert runner.optimizer is None and runner.scaler is None
    with runner.meter:
        runner.place()
        placed = runner.meter.allocated()
        assert placed == sum(round_up(t.untyped_storage().nbytes()) for t in
                             (*runner.model.parameters(), *runner.model.buffers()))
        assert runner.optimizer is not None and runner.scaler is not None  # float16 AMP


def test_a_simulated_step_asked_for_again_is_kept_and_equals_a_fresh_trace(monkeypatch):
    """profile_step keeps simulated profiles of plain options (helpers.profile.KEPT): the same config gives the
    same object, equal to a fresh trace; a learner's nn.Module, a function of theirs, a GPU are traced anew.  The
    least recently used are dropped first: checked with KEPT at 4 (helpers.profile.keep reads it at each call), 5 steps
    traced rather than the 17 that the default of 16 needs."""
    from helpers import profile

    monkeypatch.setattr(profile, "KEPT", 4)

    kept = profile_step("mlp", 32, optimizer="adam", device="simulated")
    assert profile_step("mlp", 32, optimizer="adam", device="simulated") is kept
    assert profile_step("mlp", 16, optimizer="adam", device="simulated") is not kept
    profile.forget_kept()
    fresh = profile_step("mlp", 32, optimizer="adam", device="simulated")
    assert fresh is not kept
    for name in ("events", "event_categories", "peak_allocated_bytes", "categories", "storages", "allocation_log"):
        assert getattr(fresh, name) == getattr(kept, name), name
    model = nn.Linear(64, 10)
    assert profile_step(model, 4, input_shape=(64,), device="simulated") is not profile_step(
        model, 4, input_shape=(64,), device="simulated")
    config = StepConfig("mlp", 4, loss=lambda out, target: out.sum(), device="simulated")
    auto = config.replace(loss="auto")
    assert profile._kept_key(config) is None and profile._kept_key(auto) == ("profile_step", auto)
    assert profile._kept_key(config.replace(loss="auto", device="cuda")) is None
    assert profile._kept_key(config.replace(loss="auto", model="./mymodel.py:build")) is None
    for batch in range(100, 101 + profile.KEPT):  # the least recently used are dropped first
        profile_step("mlp", batch, device="simulated")
    assert [c.batch_size for _, c in profile._KEPT] == list(range(101, 101 + profile.KEPT))


def test_no_storage_of_a_simulated_step_waits_for_the_cycle_collector(monkeypatch):
    """A simulated step runs with Python's cycle collector paused (helpers.engine.backends.collector_paused): that
    changes no byte only if reference counting frees every storage of the step.  Here the collector runs as usual,
    and also at every 100th allocation or free and as each step ends (what existed before is frozen, so each pass is
    short): it frees no storage of a step, and does free one that a model keeps in a reference cycle."""
    import contextlib
    import gc

    from helpers import profile
    from helpers.engine import backends
    from helpers.engine.counting import StorageTracker
    from helpers.fsdp import sharded_step

    active, collecting, freed, changes = set(), [False], [], [0]
    enter, leave, free, change = (StorageTracker.__enter__, StorageTracker.__exit__, StorageTracker._free,
                                  StorageTracker._change)

    def entering(self):
        active.add(self)
        return enter(self)

    def leaving(self, *exc):
        gc.collect()
        active.discard(self)
        return leave(self, *exc)

    def freeing(self, key):
        if collecting[0] and self in active:
            freed.append(self.shapes[self._live[key]])
        free(self, key)

    def changing(self, serial, kind, delta):
        change(self, serial, kind, delta)
        changes[0] += 1
        if changes[0] % 100 == 0:
            gc.collect()

    def watch(phase, info):
        collecting[0] = phase == "start"

    for name, patched in [("__enter__", entering), ("__exit__", leaving), ("_free", freeing), ("_change", changing)]:
        monkeypatch.setattr(StorageTracker, name, patched)
    monkeypatch.setattr(backends, "collector_paused", contextlib.nullcontext)
    monkeypatch.setattr(profile, "collector_paused", contextlib.nullcontext)

    class Cyclic(nn.Module):  # keeps its output's double in a list that holds itself
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            y = self.fc(x)
            box = [y * 2]
            box.append(box)
            return y

    tiny = {"model_type": "llama", "vocab_size": 96, "hidden_size": 128, "intermediate_size": 256,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}
    profile.forget_kept()
    import peft, torchao.dtypes, transformers  # noqa: F401, E401  (imported before the freeze)
    gc.collect()
    gc.freeze()
    gc.callbacks.append(watch)
    try:
        profile_step("resnet18", 2, image_size=32, amp=True, amp_dtype="float16", checkpoint=2, steady_state=True,
                     device="simulated")
        profile_step("gpt2", 2, seq_len=32, offload=True, device="simulated")
        profile_step("mlp", 4, optimizer="adamw", step_in_backward=True, steady_state=True, device="simulated")
        profile_step(tiny, 1, seq_len=32, quantization="torchao-nf4", lora_rank=4, amp=True, amp_dtype="bfloat16",
                     checkpoint=1, steady_state=True, device="simulated")
        profile_step(tiny, 1, seq_len=32, quantization="nf4", double_quant=True, lora_rank=4, amp=True,
                     amp_dtype="bfloat16", optimizer="paged-adamw8bit", checkpoint=1, steady_state=True,
                     device="simulated")
        sharded_step("mlp", 2, batch_size=4)
        assert freed == []
        profile_step(Cyclic(), 4, input_shape=(64,), device="simulated")
        assert freed == [(4, 10)]
    finally:
        gc.callbacks.remove(watch)
        gc.unfreeze()
