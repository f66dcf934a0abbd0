"""pytest configuration shared by the unit tests and nbval.

nbval compares each stored cell output with a fresh run.  Warnings that
libraries print on stderr vary between machines and versions, so stderr is not
compared (as the MDAnalysis UserGuide does); everything else is, strictly,
after the substitutions in sanitize_output.cfg.

The unit tests share one simulated ResNet18 step at batch 128 (the lessons'
running example), made once per session.
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
