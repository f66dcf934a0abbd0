"""Without a browser, the browser test says in one line what it did not check (issue 22, section 6).

``make test`` runs with ``-q``: a skipped browser test used to show as "2
skipped", no reason.  tests/conftest.py now prints one line; with
``BROWSER_TEST=required`` (CI) the test fails instead.
"""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _pytest(**env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "BROWSER_TEST"}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "tests/test_browser.py"],
                          cwd=ROOT, env={**environ, "CHROMIUM": "/nonexistent/chromium", **env},
                          capture_output=True, text=True, timeout=300)


def test_without_chromium_the_quiet_output_says_what_was_not_checked():
    run = _pytest()
    assert run.returncode == 0, run.stdout[-2000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith("browser test skipped:")]
    assert len(lines) == 1, run.stdout[-2000:]
    assert lines[0].startswith("browser test skipped: no Chromium at /nonexistent/chromium")
    assert "lessons not opened in JupyterLab" in lines[0] and "not driven" in lines[0]


def test_with_browser_test_required_it_fails_instead():
    run = _pytest(BROWSER_TEST="required")
    assert run.returncode != 0 and "browser test required (BROWSER_TEST=required) but no Chromium" in run.stdout
    assert "browser test skipped:" not in run.stdout
