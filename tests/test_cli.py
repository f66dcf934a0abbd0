"""python -m helpers profile: output, JSON, and one-line errors for bad input."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import profile_step
from helpers.__main__ import main


def test_table_ends_with_the_peak(capsys):
    assert main(["profile", "--model", "resnet18", "--batch-size", "128", "--device", "simulated"]) == 0
    out = capsys.readouterr().out.splitlines()
    conv1 = next(line for line in out if " fwd " in line and " conv1 " in line)
    assert "+392.0" in conv1 and "(128, 64, 112, 112)" in conv1
    assert out[-1] == "peak allocated: 2778.4 MiB (simulated)"
    assert any(line.startswith("whether training fits a GPU: give --steady-state") for line in out)


def test_json_has_the_documented_fields(capsys):
    assert main(["profile", "--batch-size", "8", "--image-size", "64", "--optimizer", "adam", "--json",
                 "--device", "simulated"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("backend", "model", "batch_size", "peak_allocated_bytes", "events", "categories"):
        assert key in data
    assert data["backend"] == "simulated" and data["model"] == "resnet18" and data["batch_size"] == 8
    assert set(data["categories"]) >= {"parameters", "gradients", "optimizer_states", "activations"}
    root = [e for e in data["events"] if e["module"] == ""]
    assert [e["phase"] for e in root] == ["pre", "fwd", "bwd"]
    conv1 = next(e for e in data["events"] if e["module"] == "conv1" and e["phase"] == "fwd")
    assert conv1["delta_bytes"] == 8 * 64 * 32 * 32 * 4
    for e in data["events"]:
        assert set(e) >= {"module", "phase", "allocated_bytes", "delta_bytes"}
    # The peak is reached inside an operation, between the event before peak_event and peak_event:
    # at least the highest event, and above everything allocated before that moment.
    allocated = [e["allocated_bytes"] for e in data["events"]]
    peak, at = data["peak_allocated_bytes"], data["peak_event"]
    assert peak >= max(allocated)
    assert peak > max(allocated[:at]) and allocated[at - 1] <= peak
    assert peak == profile_step("resnet18", 8, image_size=64, optimizer="adam",
                                device="simulated").peak_allocated_bytes


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "--batch-size: must be at least 1, got 0"),
    (["--batch-size", "-5"], "must be at least 1"),
    (["--batch-size", "many"], "expected an integer"),
    (["--model", "resnet1000"], "unknown model 'resnet1000'; use a preset (mlp, gpt2, gpt2-medium"),
    (["--optimizer", "lion"], "invalid choice: 'lion'"),
    (["--model", "vit_b_16", "--checkpoint", "3"], "VisionTransformer is not one"),
    (["--model", "gpt2", "--input-shape", "3"], "gpt2 takes token ids"),
    (["--model", "gpt2", "--seq-len", "8", "--num-classes", "5"], "num_classes applies to a classification loss"),
    (["--model", "resnet18", "--seq-len", "8"], "give vocab_size= (--vocab-size)"),
    (["--model", "helpers.models:no_such_function"], "'helpers.models' has no function 'no_such_function'"),
])
def test_bad_input_exits_with_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        code = main(["profile", "--device", "simulated", *args])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without a GPU")
def test_cuda_without_gpu_exits_with_one_line():
    run = subprocess.run([sys.executable, "-m", "helpers", "profile", "--device", "cuda"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "python -m helpers profile: error: device 'cuda' was asked for, but PyTorch sees no GPU here "
        "(torch.cuda.is_available() is False); use 'auto' or 'simulated'"]
    assert run.stdout == ""


def test_no_command_prints_the_usage(capsys):
    assert main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m helpers") and "profile" in out and "check" in out


def test_a_step_no_gpu_can_hold_says_so(capsys):
    assert main(["profile", "--device", "simulated", "--image-size", "100000"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m helpers profile: note: this step needs ")
    assert ("TiB (peak allocated of the whole step + 1,024.0 MiB assumed overhead), more than any GPU in helpers' "
            "list has (the largest, H100 80 GB") in err[0]
    assert main(["profile", "--device", "simulated", "--batch-size", "8", "--image-size", "64"]) == 0
    assert capsys.readouterr().err == ""


def test_step_event_labels_are_not_cut(capsys):
    assert main(["profile", "--device", "simulated", "--batch-size", "2", "--image-size", "64",
                 "--steady-state"]) == 0
    assert "[parameters, buffers, optimizer states]" in capsys.readouterr().out


def test_cli_gives_lesson_04s_figures(capsys):
    for flags, options in ((["--amp", "--checkpoint", "4"], dict(amp=True, checkpoint=4)),
                           (["--amp", "--offload"], dict(amp=True, offload=True))):
        assert main(["profile", *flags, "--device", "simulated"]) == 0
        last = capsys.readouterr().out.strip().splitlines()[-1]
        peak = profile_step("resnet18", 128, device="simulated", **options).peak_allocated_bytes
        assert last == f"peak allocated: {peak / 2**20:.1f} MiB (simulated)"
    assert main(["profile", "--amp", "--checkpoint", "4", "--reentrant", "--device", "simulated"]) == 0
    assert "39 parameters got no gradient" in capsys.readouterr().err


def test_a_learners_model_that_fails_to_build_exits_with_one_line(capsys, tmp_path, monkeypatch):
    (tmp_path / "learner_models.py").write_text("def broken():\n    raise RuntimeError('my model is broken')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["profile", "--model", "learner_models:broken", "--device", "simulated"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m helpers profile: error: building broken failed: RuntimeError: my model is broken"]


def test_gpt_presets_and_a_learners_own_model_from_the_command_line(capsys):
    assert main(["profile", "--model", "gpt2", "--seq-len", "32", "--batch-size", "2", "--device", "simulated",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "gpt2" and data["input_shape"] == [32] and data["config"]["seq_len"] == 32
    assert main(["profile", "--model", "gpt2", "--seq-len", "32", "--batch-size", "1", "--optimizer", "adam",
                 "--device", "simulated"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("model states"))
    assert line.endswith(", 16.00 bytes per parameter (124,439,808 parameters)")
    own = ["profile", "--model", "helpers.models:digits_mlp", "--batch-size", "4", "--device", "simulated"]
    assert main(own) == 2  # digits_mlp takes 64 features, not images
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "digits_mlp cannot run on input (4, 3, 224, 224)" in err[0] and "--input-shape" in err[0]
    assert main([*own, "--input-shape", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["input_shape"] == [64] and data["model"] == "digits_mlp"
    assert data["peak_allocated_bytes"] == profile_step("helpers.models:digits_mlp", 4, input_shape=(64,),
                                                        device="simulated").peak_allocated_bytes
    for bad in ("3,x", "0,4"):
        with pytest.raises(SystemExit) as exit_info:
            main([*own, "--input-shape", bad])
        assert exit_info.value.code == 2
        assert "--input-shape" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        raise SystemExit(main(["profile", "--model", "no_such_package:build", "--device", "simulated"]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot import 'no_such_package'" in err[0]


@pytest.mark.parametrize("optimizer, states", [("adam", 2), ("adamw", 2), ("sgd-momentum", 1), ("sgd", 0)])
def test_the_cli_reports_each_optimizers_states(capsys, optimizer, states):
    assert main(["profile", "--model", "mlp", "--batch-size", "8", "--optimizer", optimizer, "--steady-state",
                 "--device", "simulated", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["categories"]["optimizer_states"] == states * data["categories"]["parameters"]
    assert data["config"]["optimizer"] == optimizer


def test_reserved_replays_the_step_through_the_allocator_model(capsys):
    from helpers.allocator import replay

    assert main(["profile", "--device", "simulated", "--batch-size", "8", "--image-size", "64", "--reserved",
                 "--steady-state", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    profile = profile_step("resnet18", 8, image_size=64, device="simulated", steady_state=True)
    run = replay(profile.allocation_log)
    assert out["allocator"]["peak_reserved_bytes"] == run.peak_reserved >= out["peak_allocated_bytes"]
    assert out["allocator"]["settings"] == "defaults" and all(out["fits"]["cards"].values())
    assert out["fits"]["judged"] == ("peak reserved of the whole step (simulated allocator) + 512.0 MiB assumed "
                                     "CUDA context")
    assert main(["profile", "--device", "simulated", "--batch-size", "8", "--image-size", "64", "--reserved",
                 "--steady-state", "--alloc-conf", "expandable_segments:True"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("simulated caching allocator (expandable_segments:True): peak reserved")
    assert ("fits (peak reserved of the whole step (simulated allocator) + 512.0 MiB assumed CUDA context + the lines below): "
            "V100 16 GB, RTX 4090 24 GB, A100 40 GB, A100 80 GB, H100 80 GB") in lines


def test_the_cli_says_which_cards_a_steady_step_fits(capsys):
    from helpers.gpus import GPU_CARDS, judge

    args = ["profile", "--device", "simulated", "--model", "resnet18", "--batch-size", "800", "--steady-state"]
    assert main(args) == 0
    peak = profile_step("resnet18", 800, device="simulated", steady_state=True).peak_allocated_bytes
    fit = [card for card, capacity in GPU_CARDS.items() if judge(capacity, peak, card=card, cublas_handles=2, convolutions=True).fits]
    assert fit == ["RTX 4090 24 GB", "A100 40 GB", "A100 80 GB", "H100 80 GB"]  # about 16.7 GiB + 1 GiB: no V100
    assert ("fits (peak allocated of the whole step + 1,024.0 MiB assumed overhead + the lines below): RTX 4090 24 GB, A100 40 GB, "
            "A100 80 GB, H100 80 GB; does not fit: V100 16 GB") in capsys.readouterr().out.splitlines()
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["fits"]
    assert out["cards"] == {card: card in fit for card in GPU_CARDS} and out["overhead_bytes"] == 2**30
    assert out["need_bytes"]["V100 16 GB"] == peak + 2**30 + 2 * 8_519_680  # two cuBLAS workspaces
    # a first step is no verdict on training: its forward and backward run without the optimizer's states
    assert main(args[:-1]) == 0
    assert "whether training fits a GPU: give --steady-state" in capsys.readouterr().out
    assert main([*args[:-1], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is None


@pytest.mark.parametrize("args, message", [
    (["--alloc-conf", "expandable_segments:True"], "give --reserved too"),
    (["--reserved", "--alloc-conf", "garbage_collection_threshold:0.6"], "not modelled"),
    (["--reserved", "--alloc-conf", "max_split_size_mb:8"], ">= 20"),
])
def test_bad_allocator_settings_exit_with_one_line(capsys, args, message):
    assert main(["profile", "--device", "simulated", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


REPO = Path(__file__).resolve().parents[1]
PROG = "python -m helpers profile"


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``python -m helpers profile --device simulated ARGS`` in a fresh process, run from ``cwd``
    (a learner's folder) with this checkout's helpers."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "helpers", "profile", "--device", "simulated", *args],
                          capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


def _refused(run: subprocess.CompletedProcess) -> str:
    """The one line of a refusal: exit status 2, nothing on stdout."""
    assert run.returncode == 2 and run.stdout == "", (run.returncode, run.stdout, run.stderr)
    err = run.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{PROG}: error: "), run.stderr
    return err[0].removeprefix(f"{PROG}: error: ")


def test_a_learners_model_from_a_file_path(tmp_path):
    (tmp_path / "mymodel.py").write_text("from torch import nn\n\n\ndef build():\n"
                                         "    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))\n")
    run = _cli("--model", "./mymodel.py:build", "--input-shape", "64", "--batch-size", "4", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["model"] == "build" and data["input_shape"] == [64]
    assert data["peak_allocated_bytes"] == profile_step(f"{tmp_path / 'mymodel.py'}:build", 4, input_shape=(64,),
                                                        device="simulated").peak_allocated_bytes
    assert _refused(_cli("--model", "./mymodel.py", cwd=tmp_path)) == (
        "name the function in ./mymodel.py that returns the model: ./mymodel.py:function")
    assert _refused(_cli("--model", "./other.py:build", cwd=tmp_path)) == (
        "no file './other.py' (from --model ./other.py:build)")
    assert _refused(_cli("--model", "mymodel.py:nothing", cwd=tmp_path)) == (
        "'mymodel.py' has no function 'nothing' (from --model mymodel.py:nothing)")


def test_llama3_8b_is_a_preset_from_the_command_line():
    help_text = subprocess.run([sys.executable, "-m", "helpers", "profile", "--help"], capture_output=True,
                               text=True, timeout=120, cwd=REPO).stdout
    assert "llama3-8b" in " ".join(help_text.split())
    run = _cli("--model", "llama3-8b", "--seq-len", "16", "--batch-size", "1", "--optimizer", "adamw", "--json")
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["model"] == "llama3-8b" and data["input_shape"] == [16] and data["config"]["seq_len"] == 16
    assert data["parameter_count"] == 8_030_261_248


def test_an_unknown_model_names_the_presets_and_both_forms():
    message = _refused(_cli("--model", "resnet1000"))
    assert message.startswith("unknown model 'resnet1000'; use a preset (mlp, gpt2, gpt2-medium, gpt2-large, "
                              "gpt2-xl, llama3-8b), any torchvision classification model (")
    assert message.endswith("or your own as package.module:function or path/to/file.py:function")


@pytest.mark.parametrize("args, message", [
    (["--model", "gpt2"], "image_size (--image-size) applies to image inputs; gpt2 takes token ids"),
    (["--model", "llama3-8b", "--seq-len", "16"],
     "image_size (--image-size) applies to image inputs; llama3-8b takes token ids (seq_len=, --seq-len)"),
    (["--model", "mlp"], "image_size (--image-size) applies to image inputs; mlp takes 64 features"),
    (["--input-shape", "3,32,32"],
     "image_size (--image-size) applies to image inputs; resnet18 takes samples of input_shape (3, 32, 32) "
     "(--input-shape)"),
])
def test_image_size_is_refused_where_the_inputs_are_not_images(args, message):
    assert _refused(_cli(*args, "--image-size", "64")) == message
