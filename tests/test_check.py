"""The workshop pre-flight check: ``python -m helpers check``."""

import subprocess
import sys

import pytest

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
    monkeypatch.setitem(check.PINS, "matplotlib", "0.1")
    status, text = run()
    assert status == 0 and "(requirements.txt pins 0.1)" in text and "warning: matplotlib" in text


def test_the_command_runs_even_when_torchvision_cannot_be_imported():
    code = ("import sys; sys.modules['torchvision'] = None\n"
            "from helpers.__main__ import main\n"
            "sys.exit(main(['check']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "torchvision  BROKEN" in result.stdout and "matching pair" in result.stdout


def test_the_resnet18_verdict_is_the_rule_of_every_widget():
    """The check judges a steady-state step on each card by helpers.gpus.judge, as the widgets and the CLI do."""
    import torch

    from helpers import profile_step
    from helpers.gpus import GPU_CARDS, judge
    from helpers.units import fmt_mib

    if torch.cuda.is_available():
        pytest.skip("on a GPU the check measures the step: there is no assumed overhead to judge by")
    status, text = run()
    step = profile_step("resnet18", 128, device="simulated", steady_state=True)
    fit = [card for card, capacity in GPU_CARDS.items() if judge(capacity, step.peak_allocated_bytes).fits]
    assert fit and status == 0
    assert (f"ResNet18     batch 128: whole-step peak {fmt_mib(step.peak_allocated_bytes)} simulated; "
            f"fits {', '.join(fit)} (peak allocated of the whole step + 1,024.0 MiB assumed overhead)") in text


def test_the_lesson_libraries_are_checked_with_the_lessons_that_need_them(monkeypatch):
    """transformers, peft, accelerate, torchao and bitsandbytes: each version against its pin, the lessons that need
    it beside it; one that does not import is a problem whose fix names its pin and its lessons."""
    import importlib

    status, text = run()
    for name in ("transformers", "peft", "accelerate", "torchao", "bitsandbytes"):
        version = importlib.import_module(name).__version__
        lessons, why = check.LESSON_PACKAGES[name]
        assert f"  {name:<12} {version}  for {lessons}: {why}" in text
    assert status == 0
    real = check._try_import
    monkeypatch.setattr(check, "_try_import",
                        lambda name: ModuleNotFoundError("No module named 'peft'") if name == "peft" else real(name))
    status, text = run()
    assert status == 1 and "peft         BROKEN: ModuleNotFoundError: No module named 'peft'" in text
    assert ("problem: peft does not import. Fix: pip install peft==0.21.2 (lessons 06b, 09 and 09b need it; the others "
            "run without it)") in text
