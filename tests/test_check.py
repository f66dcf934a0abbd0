"""The workshop pre-flight check: ``python -m helpers check``."""

import subprocess
import sys

import helpers.check as check


def run():
    lines = []
    status = check.run_check(out=lines.append)
    return status, "\n".join(lines)


def test_ready_environment_reports_versions_device_backend_and_resnet18():
    status, text = run()
    assert status == 0 and text.endswith("result: ready for the lessons")
    import torch
    import torchvision
    assert f"torch        {torch.__version__}" in text and f"torchvision  {torchvision.__version__}" in text
    backend = "cuda" if torch.cuda.is_available() else "simulated"
    assert f"backend      {backend}" in text
    assert "ResNet18     batch 128" in text and "problem:" not in text


def test_broken_torchvision_names_the_fix(monkeypatch):
    real = check._try_import

    def fake(name):
        if name == "torchvision":
            return RuntimeError("operator torchvision::nms does not exist")
        return real(name)

    monkeypatch.setattr(check, "_try_import", fake)
    status, text = run()
    assert status == 1
    assert "torchvision  BROKEN: RuntimeError: operator torchvision::nms does not exist" in text
    assert "torchvision==0.29.1" in text and text.endswith("result: BROKEN, see the problems above")


def test_unpinned_version_is_a_warning_not_a_failure(monkeypatch):
    monkeypatch.setattr(check, "_pins", lambda: {"matplotlib": "0.1"})
    status, text = run()
    assert status == 0 and "(requirements.txt pins 0.1)" in text and "warning: matplotlib" in text


def test_the_command_runs_even_when_torchvision_cannot_be_imported():
    code = ("import sys; sys.modules['torchvision'] = None\n"
            "from helpers.__main__ import main\n"
            "sys.exit(main(['check']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "torchvision  BROKEN" in result.stdout and "matching pair" in result.stdout
