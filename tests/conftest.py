"""pytest configuration shared by the unit tests and nbval.

nbval compares each stored cell output with a fresh run.  Warnings that
libraries print on stderr vary between machines and versions, so stderr is not
compared (as the MDAnalysis UserGuide does); everything else is, strictly,
after the substitutions in sanitize_output.cfg.

The unit tests share one simulated ResNet18 step at batch 128 (the lessons'
running example), made once per session, and one compiled stub driver
(``cuda_stub``), the test double of the CUDA runtime under PyTorch's own CUDA
code (issue 23).
"""

import pytest


def pytest_collectstart(collector):
    path = getattr(collector, "path", None)
    if path is not None and path.suffix == ".ipynb":
        collector.skip_compare += ("stderr",)


@pytest.fixture(scope="session")
def resnet18_b128():
    """One simulated training step of ResNet18 at batch 128 (SGD with momentum, first step)."""
    from helpers import profile_step

    return profile_step("resnet18", 128, device="simulated")


@pytest.fixture(scope="session")
def cuda_stub(tmp_path_factory):
    """The directory holding the compiled stub driver as ``libcuda.so.1`` and
    ``libnvidia-ml.so.1`` (``tests/cuda_stub/build.py``), built once per session.

    Skips, with the reason, where it cannot be built: not Linux, no C
    compiler, a CPU-only torch wheel, or no CUDA headers in the wheel's packages.
    """
    from cuda_stub import build

    reason = build.why_not()
    if reason is not None:
        pytest.skip(reason)
    try:
        return build.build(tmp_path_factory.mktemp("cuda_stub"))
    except RuntimeError as e:  # a compiler error is a failure, not a skip
        pytest.fail(str(e))


def pytest_terminal_summary(terminalreporter):
    """Say in one line what the browser test did not check when it was skipped (not just "N skipped")."""
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        if "test_browser.py" in report.nodeid and isinstance(report.longrepr, tuple):
            reason = report.longrepr[2].removeprefix("Skipped: ")
            if reason not in reasons:
                reasons.append(reason)
    for reason in reasons:
        terminalreporter.write_line(reason, yellow=True, bold=True)
