"""Without a browser, the browser test says in one line what it did not check (issue 22, section 6).

``make test`` runs with ``-q``: a skipped browser test used to show as "2
skipped", no reason.  tests/conftest.py now prints one line; with
``BROWSER_TEST=required`` (CI) the test fails instead.

Each case is a whole ``pytest -q tests/test_browser.py`` session, run in this process (``pytest.main``: the
terminal summary is pytest's, not a process's), with the environment set before ``tests/test_browser.py`` and
``tests/browser_env.py`` are imported afresh (they read ``$CHROMIUM`` and ``$BROWSER_TEST`` on import).
"""

import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: The modules that read the environment on import: imported afresh by each inner session.
_FRESH = ("test_browser", "browser_env")


def _pytest(monkeypatch, capsys, **env) -> tuple[int, str]:
    """``pytest -q -p no:xdist tests/test_browser.py`` from the repository, no Chromium: exit status and stdout."""
    monkeypatch.delenv("BROWSER_TEST", raising=False)
    for name, value in {"CHROMIUM": "/nonexistent/chromium", **env}.items():
        monkeypatch.setenv(name, value)
    for name in _FRESH:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.chdir(ROOT)
    before = set(sys.modules)
    capsys.readouterr()
    try:
        # no:unraisableexception: its full garbage collections at the end (a second or two, with torch's objects
        # alive in this process) check nothing this file asks about
        code = pytest.main(["-q", "-p", "no:xdist", "-p", "no:unraisableexception", "tests/test_browser.py"])
    finally:
        for name in set(sys.modules) - before:  # the inner session's imports: none outlives it
            if name in _FRESH:
                del sys.modules[name]
    return int(code), capsys.readouterr().out


def test_without_chromium_the_quiet_output_says_what_was_not_checked(monkeypatch, capsys):
    code, out = _pytest(monkeypatch, capsys)
    assert code == 0, out[-2000:]
    lines = [line for line in out.splitlines() if line.startswith("browser test skipped:")]
    assert len(lines) == 1, out[-2000:]
    assert lines[0].startswith("browser test skipped: no Chromium at /nonexistent/chromium")
    assert "lessons not opened in JupyterLab" in lines[0] and "not driven" in lines[0]


def test_with_browser_test_required_it_fails_instead(monkeypatch, capsys):
    code, out = _pytest(monkeypatch, capsys, BROWSER_TEST="required")
    assert code != 0 and "browser test required (BROWSER_TEST=required) but no Chromium" in out, out[-2000:]
    assert "browser test skipped:" not in out
