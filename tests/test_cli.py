"""python -m helpers profile: output, JSON, and one-line errors for bad input."""

import json
import subprocess
import sys

import pytest
import torch

from helpers.__main__ import main


def test_table_ends_with_the_peak(capsys):
    assert main(["profile", "--model", "resnet18", "--batch-size", "128", "--device", "simulated"]) == 0
    out = capsys.readouterr().out.splitlines()
    conv1 = next(line for line in out if " fwd " in line and " conv1 " in line)
    assert "+392.0" in conv1 and "(128, 64, 112, 112)" in conv1
    assert out[-1] == "peak allocated: 2778.4 MiB (simulated)"


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
    assert data["peak_allocated_bytes"] == max(e["allocated_bytes"] for e in data["events"]) or \
        data["peak_allocated_bytes"] > max(e["allocated_bytes"] for e in data["events"])


@pytest.mark.parametrize("args, message", [
    (["--batch-size", "0"], "--batch-size: must be at least 1, got 0"),
    (["--batch-size", "-5"], "must be at least 1"),
    (["--batch-size", "many"], "expected an integer"),
    (["--model", "resnet1000"], "unknown model 'resnet1000'"),
    (["--optimizer", "lion"], "invalid choice: 'lion'"),
    (["--model", "vit_b_16", "--checkpoint", "3"], "VisionTransformer is not one"),
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
