"""Lesson 01's batch-size widget in a real JupyterLab, driven in a real browser.

nbval proves that the notebooks run; this proves that a learner who opens
lesson 01 in JupyterLab sees a widget that works.  The test

1. starts JupyterLab (from this environment) on a free loopback port with a
   random token, on a copy of lesson 01 in a temporary folder;
2. opens the notebook in headless Chromium driven by Playwright (the system
   browser: Playwright cannot download its own here), runs all cells;
3. drags the batch-size slider and waits for the widget's figures to change;
4. checks the shown peak and categories against a direct ``profile_step``
   at the batch size the slider now shows;
5. saves a screenshot to ``test-artifacts/lesson01_widget.png``, fails on
   JavaScript errors from the page or the widget manager, and always stops the
   browser and the server.

It needs the ``playwright`` package and a Chromium (``/usr/bin/chromium``, or
the path in ``$CHROMIUM``).  Without them it is skipped, with the reason,
unless ``BROWSER_TEST=required`` (set by ``.ci/run``), where it fails instead.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from helpers import profile_step

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
REQUIRED = os.environ.get("BROWSER_TEST") == "required"

#: Bounded waits, in seconds: each failure says which one ran out.
SERVER_START, PAGE_LOAD, RUN_ALL, WIDGET_UPDATE = 90, 120, 420, 60


def _unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements.txt)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CHROMIUM)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _settings(folder: pathlib.Path) -> None:
    """User settings: render every cell (no windowing), fetch no news (no network)."""
    for plugin, values in (("notebook-extension/tracker", {"windowingMode": "none"}),
                           ("apputils-extension/notification", {"fetchNews": "false", "checkForUpdates": False})):
        path = folder / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


@pytest.fixture
def jupyterlab(tmp_path):
    """A JupyterLab server on lesson 01 (copied); yields its base URL and token; always stopped."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ROOT / "lessons" / "01_mini_batching.ipynb", work)
    _settings(tmp_path / "settings")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
    log = open(tmp_path / "jupyterlab.log", "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={work}"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode}: {(tmp_path / 'jupyterlab.log').read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer within {SERVER_START} s")
                time.sleep(0.5)
        yield base, token
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def _menu(page, menu: str, item: str) -> None:
    """Click a JupyterLab main-menu entry, e.g. Run > Run All Cells."""
    page.locator(".lm-MenuBar-itemLabel", has_text=menu).first.click()
    page.locator(".lm-Menu-itemLabel", has_text=item).first.click()


def _shown(page) -> dict[str, int]:
    """The widget's figures as displayed: batch size, peak and bytes by category."""
    view = page.locator(".gm-explorer").last
    html = view.inner_html()
    figures = {"batch": int(re.search(r"batch (\d+);", html).group(1)),
               "peak": int(re.search(r'class="gm-peak" data-bytes="(\d+)"', html).group(1))}
    for name, value in re.findall(r'data-category="(\w+)" data-bytes="(\d+)"', html):
        figures[name] = int(value)
    return figures


def test_batch_size_widget_in_jupyterlab(jupyterlab):
    reason = _unavailable()
    if reason:
        if REQUIRED:
            pytest.fail(f"browser test required but {reason}")
        pytest.skip(reason)
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    base, token = jupyterlab
    ARTIFACTS.mkdir(exist_ok=True)
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.on("console", lambda m: errors.append(f"console: {m.text}")
                    if m.type == "error" and re.search(r"widget", m.text, re.I) else None)
            try:
                page.goto(f"{base}/lab/tree/01_mini_batching.ipynb?token={token}", timeout=PAGE_LOAD * 1000)
                page.locator(".jp-Notebook").wait_for(timeout=PAGE_LOAD * 1000)
                # JupyterLab may ask which kernel to start: take the notebook's own (python3).
                dialog = page.locator(".jp-Dialog button.jp-mod-accept")
                try:
                    dialog.wait_for(timeout=15_000)
                    dialog.click()
                except PlaywrightTimeout:
                    pass
                page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(
                    timeout=PAGE_LOAD * 1000)
                # Clear the stored outputs (and execution counts), then run everything, as a learner would.
                _menu(page, "Edit", "Clear Outputs of All Cells")
                page.wait_for_function(
                    """() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]
                             .every(p => !/\\[\\d+\\]/.test(p.textContent))""", timeout=PAGE_LOAD * 1000)
                _menu(page, "Run", "Run All Cells")
                # Every code cell has an execution count once the kernel has run them all.
                page.wait_for_function(
                    """() => {
                        const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
                        return prompts.length > 20 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
                    }""", timeout=RUN_ALL * 1000)
                page.locator(".jp-Notebook-ExecutionIndicator[data-status='idle']").wait_for(timeout=RUN_ALL * 1000)
                assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                                    " >> text=Traceback").count() == 0, "a cell raised an error"

                explorer = page.locator(".gm-explorer").last
                explorer.scroll_into_view_if_needed()
                before = _shown(page)
                assert before["batch"] == 128, before

                track = page.locator(".widget-hslider .noUi-target").last
                handle = page.locator(".widget-hslider .noUi-handle").last
                box, grip = track.bounding_box(), handle.bounding_box()
                page.mouse.move(grip["x"] + grip["width"] / 2, grip["y"] + grip["height"] / 2)
                page.mouse.down()
                page.mouse.move(box["x"] + 0.6 * box["width"], grip["y"] + grip["height"] / 2, steps=12)
                page.mouse.up()
                page.wait_for_function(
                    """(peak) => {
                        const shown = [...document.querySelectorAll('.gm-peak')].pop();
                        return shown && shown.dataset.bytes !== String(peak);
                    }""", arg=before["peak"], timeout=WIDGET_UPDATE * 1000)
                time.sleep(1.0)  # let a last slider value arrive
                page.wait_for_function(
                    """() => {
                        const readout = [...document.querySelectorAll('.widget-hslider .widget-readout')].pop();
                        const note = [...document.querySelectorAll('.gm-explorer')].pop();
                        return readout && note && note.textContent.includes('batch ' + readout.textContent.trim() + ';');
                    }""", timeout=WIDGET_UPDATE * 1000)
                after = _shown(page)
            finally:
                page.screenshot(path=str(ARTIFACTS / "lesson01_widget.png"), full_page=False)
        finally:
            browser.close()

    assert after["batch"] > before["batch"], (before, after)
    direct = profile_step("resnet18", after["batch"], device="simulated", steady_state=True)
    assert abs(after["peak"] - direct.peak_allocated_bytes) < 4096, (after, direct.peak_allocated_bytes)
    for name in ("parameters", "gradients", "optimizer_states", "activations"):
        assert abs(after[name] - direct.categories[name]) < 4096, name
    assert errors == [], errors
