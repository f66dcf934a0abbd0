"""The lessons in a real JupyterLab, in a real browser: what a learner sees (issue 22, section 6).

nbval proves that the notebooks run; this proves that a learner who opens them
in JupyterLab sees no broken widget, and widgets that work.  One JupyterLab
server (on copies of the lessons, in a temporary folder) and one headless
Chromium, driven by Playwright (the system browser: Playwright cannot download
its own here), serve every check:

1. **Every committed lesson, opened unrun** (``lessons/*.ipynb`` as committed,
   stored outputs, no cell run, trusted as a notebook its user ran is, so that
   a stored widget view would be rendered): no "Error displaying widget", no
   "model not found", no raw widget JSON or ``VBox(children=...)`` text, no
   console or page error; where a widget goes, its readable stand-in
   (``helpers.teaching.widgets``' ``text/html``) is visible.  Screenshot
   ``test-artifacts/unrun_<lesson>.png``.  Each lesson connects to one idle
   kernel started for them all (``idle_kernel``: it runs nothing, so it holds
   no widget model, as a new kernel holds none), rather than starting its own.
2. **Every widget a lesson displays, driven** (found by its stored output, so
   lesson 05's split into 05a/05b needs no change here): a trimmed copy of its
   lesson runs in the kernel (the setup cells before section 1, and the cells
   the widget's cell needs, found by the names they read before they bind them and those they bind: lesson 08,
   before its split into 08 and 08b, took 75 s run whole, lesson 05 105 s; this keeps the test near 4 minutes);
   they all start at once, each in its own tab, and compute while the lessons
   are opened unrun.  Then, in each, one control changes as a learner would change it (the batch-size slider in
   lessons 01 and 05, the batch-size box in lesson 06a, whose reserved view
   traces each batch size, the attention menu in lesson 08b, the method menu in lesson 09b); once the view has
   updated, its figures (peak, categories, reserved, verdict), read from the
   view's data attributes, must equal a direct ``profile_step`` (and, for the
   reserved view, ``replay_on_gpu``) with the settings its controls show,
   judged by ``helpers.batch.Estimate.verdict`` (the widgets' rule).  A change that traces must first show the
   "updating..." state, which must then go.  Screenshots
   ``test-artifacts/widget_<lesson>.png`` (and ``..._updating.png`` while it
   works, when caught).  Lesson 10b's ``ServingFit`` answers with vLLM's
   start-up account instead of a step: its batch-budget menu (a new profile
   run, "updating...") and then its context menu (arithmetic, at once) change,
   and the account it shows must be ``helpers.serving.vllm_startup``'s for the
   options its controls show.

Each wait is bounded and says which one ran out.  It needs the ``playwright``
package and a Chromium (``/usr/bin/chromium``, or the path in ``$CHROMIUM``).
Without them every test here is skipped, and ``tests/conftest.py`` prints one
line that says what was not checked; with ``BROWSER_TEST=required`` (set by
``.ci/run``) they fail instead.
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
from html.parser import HTMLParser

import nbformat
import pytest
from nbformat.sign import NotebookNotary
from browser_env import CHROMIUM, browser_unavailable

from helpers import profile_step
from helpers.allocator import replay_on_gpu
from helpers.batch import Estimate, reserved_estimate
from helpers.config import OPTIMIZER_NAMES
from helpers.gpus import GPU_CARDS
from helpers.models import LANGUAGE_PRESETS
from helpers.serving import WouldNotStart, vllm_startup
from helpers.teaching.views import STARTUP_DATA, startup_answer
from helpers.teaching.widgets import (BUDGETS, FINETUNE_LOSSES, FINETUNE_METHODS, FINETUNE_OPTIMIZERS, PRECISIONS,
                                      SEGMENTS, SERVING_WEIGHTS)
from helpers.transformer import transformer_step
from lesson_runner import reads_and_binds, sections

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
from learner_copies import copy_lessons  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
REQUIRED = os.environ.get("BROWSER_TEST") == "required"
VIEW = "application/vnd.jupyter.widget-view+json"

#: Where the lab's folder keeps the learner's copies (tools/learner_copies.py), and a paired notebook.
LEARNER, PAIRED = "my-lessons", "paired"
#: The lesson saved from both (the smallest).
SAVED = "00_setup_check.ipynb"

#: Bounded waits, in seconds: each failure says which one ran out.
SERVER_START, PAGE_LOAD, KERNEL_IDLE, RUN_CELLS, WIDGET_UPDATE = 90, 120, 120, 300, 120


# -- what there is to check, from the committed notebooks ------------------------------------------------------

def _widget_class(output) -> str | None:
    """The class of a displayed widget (``MemoryExplorer``), from a stored output; None for other outputs."""
    data = output.get("data", {})
    match = re.match(r"(\w+)\(children=\(", data.get("text/plain", ""))
    if match or VIEW in data:
        return match.group(1) if match else "a widget"
    return None


def _widgets(nb) -> list[tuple[int, str, str | None]]:
    """``(cell index, widget class, stored text/html stand-in or None)`` for each widget the notebook displays."""
    return [(i, cls, output.get("data", {}).get("text/html"))
            for i, cell in enumerate(nb.cells) for output in cell.get("outputs", [])
            if (cls := _widget_class(output))]


LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))
WIDGETS = [(path, index, cls) for path in LESSONS
           for index, cls, _ in _widgets(nbformat.read(path, as_version=4))]


def trimmed(nb, index: int):
    """A copy of ``nb`` that keeps its setup cells (before section 1), the code cell ``index`` and, going back
    from it, each code cell that binds a name a kept cell reads; outputs cleared.

    A cell's reads are those it makes before binding them (``lesson_runner.reads_and_binds``, the short paths' name
    check: IPython's ``%`` and ``!`` lines read as IPython reads them): lesson 08b's widget cell reads ``states`` only
    after it sets it, so the cells before the sweep that sets another ``states`` (Llama-3 8B's blocks by sequence
    length) are not kept: its kernel's 16 CPU seconds become 7.5 (measured under CI's CPU setting)."""
    setup = {id(cell) for cell in sections(nb)[0][1]}
    keep, need = {index}, reads_and_binds(nb.cells[index].source)[0]
    for j in range(index - 1, -1, -1):
        cell = nb.cells[j]
        if cell.cell_type != "code":
            continue
        read, defined = reads_and_binds(cell.source)
        if id(cell) in setup or defined & need:
            keep.add(j)
            need = (need - defined) | read
    copy = nbformat.v4.new_notebook(metadata=nb.metadata)
    copy.cells = [nbformat.v4.new_code_cell(nb.cells[j].source) for j in sorted(keep)]
    return copy


class _Text(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data):
        self.parts.append(data)


def _visible_text(markup: str) -> str:
    """The text an HTML fragment shows, whitespace collapsed."""
    parser = _Text()
    parser.feed(markup)
    return " ".join("".join(parser.parts).split())


# -- the server, the browser ----------------------------------------------------------------------------------

def not_checked() -> str:
    """What these tests check, for the line that says it was not checked."""
    lessons = sorted({path.name[:2] for path, _, _ in WIDGETS})
    return (f"{len(LESSONS)} lessons not opened in JupyterLab, widgets of lessons {'/'.join(lessons)} not driven, "
            f"'updating...' not seen")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on copies of the lessons and of the widgets' trimmed lessons; always stopped.

    Yields ``(base URL, token, folder)``; the app is exposed as ``window.jupyterapp`` so that the test opens
    notebooks with JupyterLab's own commands (those of a double click in the file browser).
    """
    reason = browser_unavailable()
    if reason:
        if REQUIRED:
            pytest.fail(f"browser test required (BROWSER_TEST=required) but {reason}")
        pytest.skip(f"browser test skipped: {reason}; {not_checked()}")
    tmp = tmp_path_factory.mktemp("jupyterlab")
    work = tmp / "work"
    work.mkdir()
    for path in LESSONS:
        shutil.copy(path, work)
    for path, index, cls in WIDGETS:
        nbformat.write(trimmed(nbformat.read(path, as_version=4), index), work / _drive_name(path, index))
    copy_lessons(ROOT / "lessons", work / LEARNER)  # the learner's copies, as make lessons makes them
    paired = nbformat.read(ROOT / "lessons" / SAVED, as_version=4)  # and a paired notebook, to show what pairing does
    paired.metadata["jupytext"] = {"formats": "ipynb,py:percent"}
    (work / PAIRED).mkdir()
    nbformat.write(paired, work / PAIRED / SAVED)
    settings = tmp / "settings"
    file = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps({"windowingMode": "none"}))  # every cell rendered (no windowing)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = secrets.token_hex(16)
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
               JUPYTER_CONFIG_DIR=str(tmp / "config"), JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
               JUPYTER_DATA_DIR=str(tmp / "data"),  # its own notary (trusted notebooks), not the user's
               JUPYTER_CONFIG_PATH=str(ROOT / "tools" / "jupyter-config"),  # the course's settings, as make lessons
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),  # a kernel per lesson: one thread each
               PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    # Trust the lessons, as JupyterLab does a notebook its user has run and saved (and nbconvert one it ran):
    # only then does it render a stored widget view ("Error displaying widget" without its kernel's model);
    # a notebook not trusted falls back to the next output format.  The check must see the worse case.
    # Signed here, as ``jupyter trust`` signs them (nbformat's notary, on the lab's own data folder), without the
    # start-up of a second Python process for it.
    (tmp / "data").mkdir()
    notary = NotebookNotary(data_dir=env["JUPYTER_DATA_DIR"])
    try:
        for path in LESSONS:
            nb = nbformat.read(work / path.name, as_version=nbformat.NO_CONVERT)
            if not notary.check_signature(nb):
                notary.sign(nb)
    finally:
        notary.store.close()
    log_path = tmp / "jupyterlab.log"
    log = open(log_path, "w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ServerApp.ip=127.0.0.1",
         f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={work}", "--LabApp.expose_app_in_browser=True"],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with {server.returncode}: {log_path.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"wait for the JupyterLab server: no answer within {SERVER_START} s")
                time.sleep(0.5)
        yield base, token, work
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


#: What JupyterLab's debugger logs when :meth:`Browser.close` shuts down a kernel that started seconds
#: before: the debugger's own request to restore its state, sent when the kernel became ready, is
#: cancelled by the shutdown (seen in .ci/run when a learner's copy is opened, saved and closed at once).
#: It comes from this test's shutdown, not from the lessons or the widgets.
OWN_SHUTDOWN = "console error: Could not restore the debugger state: Canceled future for debug_request message"


class Browser:
    """One Chromium page on JupyterLab, with the console and page errors it logged since :meth:`errors` last."""

    def __init__(self, page):
        self.page = page
        self._errors: list[str] = []
        page.on("pageerror", lambda e: self._errors.append(f"page error: {e}"))
        page.on("console", lambda m: self._errors.append(f"console error: {m.text}") if m.type == "error" else None)

    def errors(self) -> list[str]:
        """The errors logged since the last call, less :data:`OWN_SHUTDOWN`'s."""
        errors, self._errors = self._errors, []
        return [e for e in errors if not e.startswith(OWN_SHUTDOWN)]

    def wait(self, what: str, script: str, arg=None, timeout: float = WIDGET_UPDATE):
        """``page.wait_for_function(script, arg)``, failing with ``what`` when ``timeout`` seconds run out."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        try:
            return self.page.wait_for_function(script, arg=arg, timeout=timeout * 1000, polling=100)
        except PlaywrightTimeout:
            pytest.fail(f"wait for {what}: not within {timeout} s")

    def run(self, what: str, script: str, arg=None, timeout: float = PAGE_LOAD) -> None:
        """Call the page's (async) function ``script`` with ``arg`` and wait until what it returns settles;
        fail with ``what`` and the page's error if it rejects.

        The page keeps the promise (``window.__task``) and this polls for it: a promise handed back to
        ``page.evaluate`` is held only through a weak handle of V8's inspector, and one was collected before it
        settled under load in .ci/run ("Resulting promise was garbage collected")."""
        self.page.evaluate("""arg => {
            const task = window.__task = {done: false, error: null};
            Promise.resolve().then(() => (""" + script + """)(arg)).then(
                () => { task.done = true; }, e => { task.error = String((e && e.stack) || e); task.done = true; });
        }""", arg)
        self.wait(what, "() => window.__task.done", timeout=timeout)
        error = self.page.evaluate("() => window.__task.error")
        if error:
            pytest.fail(f"{what}: {error}")

    def open(self, name: str, cells: int, kernel: dict | None = None) -> None:
        """Open a notebook as a double click in the file browser does, and wait until all its ``cells`` are
        on the page and its kernel is idle: a new kernel, or the running ``kernel`` (``{"id", "name"}``), as
        JupyterLab's "select kernel" menu connects a notebook to one already running."""
        self.run(f"JupyterLab to open {name}",
                 "([name, kernel]) => window.jupyterapp.commands.execute('docmanager:open', "
                 "kernel ? {path: name, kernel} : {path: name})", [name, kernel])
        self.wait(f"{name} to open with its {cells} cells and an idle kernel", """([name, cells]) => {
            const w = window.jupyterapp.shell.currentWidget;
            return w && w.context && w.context.path === name && w.context.isReady && w.content
                && w.content.widgets.length === cells
                && w.node.querySelectorAll('.jp-Cell').length === cells
                && w.sessionContext.session && w.sessionContext.session.kernel
                && w.sessionContext.session.kernel.status === 'idle';
        }""", [name, cells], timeout=KERNEL_IDLE)

    def activate(self, name: str) -> None:
        """Bring the open notebook ``name`` to the front."""
        self.page.evaluate("""name => {
            const app = window.jupyterapp;
            const w = [...app.shell.widgets('main')].find(w => w.context && w.context.path === name);
            app.shell.activateById(w.id);
        }""", name)
        self.wait(f"{name} to come to the front",
                  "name => window.jupyterapp.shell.currentWidget.context.path === name", name, timeout=PAGE_LOAD)

    def close(self, shutdown: bool = True) -> None:
        """Shut down the current notebook's kernel (unless not ``shutdown``: a kernel other notebooks share) and
        close it, unsaved: the copy is thrown away."""
        self.run("the current notebook's kernel to shut down and its tab to close", """async (shutdown) => {
            const w = window.jupyterapp.shell.currentWidget;
            if (shutdown) await w.sessionContext.shutdown();
            w.context.model.dirty = false;
            w.close();
        }""", shutdown, timeout=KERNEL_IDLE)

    def cell(self, index: int):
        return self.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").nth(index)


@pytest.fixture(scope="module")
def browser(lab):
    """One headless Chromium on the lab's JupyterLab, for every test of this module."""
    from playwright.sync_api import sync_playwright

    base, token, _ = lab
    ARTIFACTS.mkdir(exist_ok=True)
    pw = sync_playwright().start()
    chromium = None
    try:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        page = chromium.new_page(viewport={"width": 1400, "height": 1000})
        b = Browser(page)
        page.goto(f"{base}/lab?reset&token={token}", timeout=PAGE_LOAD * 1000)
        b.wait("JupyterLab to start in the browser", "() => window.jupyterapp && window.jupyterapp.shell",
               timeout=PAGE_LOAD)
        page.wait_for_selector(".jp-DirListing-content", timeout=PAGE_LOAD * 1000)
        b.errors()  # nothing opened yet: what JupyterLab logs at start is not a lesson's
        yield b
    finally:
        if chromium is not None:
            chromium.close()
        pw.stop()


@pytest.fixture(scope="module")
def running(browser):
    """The widgets' trimmed lessons, each opened in its own tab and set running at once: their kernels
    compute while the lessons are opened unrun.  Yields their names."""
    names = []
    for path, index, _ in WIDGETS:
        name = _drive_name(path, index)
        browser.open(name, len(trimmed(nbformat.read(path, as_version=4), index).cells))
        browser.page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        names.append(name)
    yield names


# -- 1. every committed lesson, opened unrun --------------------------------------------------------------------

@pytest.fixture(scope="module")
def idle_kernel(browser):
    """One python3 kernel that runs nothing, started once for the lessons opened unrun (``{"id", "name"}``): each
    lesson connects to it as a notebook connects to a new one, and finds in it what it would find in a new one, no
    widget model (nothing ever runs in it), so that a stored widget view has none to show: one kernel's start-up
    and shutdown for all the lessons instead of one per lesson.  Shut down at the end."""
    browser.run("a kernel to start for the lessons opened unrun", """async () => {
        const kernel = await window.jupyterapp.serviceManager.kernels.startNew({name: 'python3'});
        window.__idleKernel = {id: kernel.id, name: kernel.name};
    }""", timeout=KERNEL_IDLE)
    kernel = browser.page.evaluate("() => window.__idleKernel")
    yield kernel
    browser.run("the lessons' idle kernel to shut down",
                "id => window.jupyterapp.serviceManager.kernels.shutdown(id)", kernel["id"], timeout=KERNEL_IDLE)


BROKEN = ("Error displaying widget", "model not found", '"model_id"', VIEW)


#: A cell's last output shows something (for a widget: its stand-in, or an error once the widget manager
#: has looked for the model of a stored view).
_RENDERED = """(index) => {
    const cell = document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell')[index];
    const outputs = cell ? cell.querySelectorAll('.jp-OutputArea-output') : [];
    return outputs.length > 0 && outputs[outputs.length - 1].innerText.trim().length > 0;
}"""


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_a_lesson_opened_unrun_shows_no_broken_widget(browser, running, idle_kernel, path):
    nb = nbformat.read(path, as_version=4)
    widgets = _widgets(nb)
    browser.open(path.name, len(nb.cells), idle_kernel)
    try:
        for index, cls, _ in widgets:
            browser.wait(f"{path.name} cell {index} to show {cls}'s place", _RENDERED, index, timeout=PAGE_LOAD)
        cells = browser.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell")
        (browser.cell(widgets[0][0]) if widgets else cells.first).scroll_into_view_if_needed()
        browser.page.screenshot(path=str(ARTIFACTS / f"unrun_{path.stem}.png"))
        text = browser.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden)").inner_text()
        for broken in BROKEN:
            assert broken not in text, f"{path.name} opened unrun shows {broken!r}"
        for index, cls, stand_in in widgets:
            assert stand_in, f"{path.name} cell {index}: {cls} has no text/html stand-in stored"
            output = browser.cell(index).locator(".jp-OutputArea-output").last
            output.scroll_into_view_if_needed()
            shown = " ".join(output.inner_text().split())
            assert output.is_visible() and _visible_text(stand_in) in shown, (
                f"{path.name} cell {index}: {cls}'s stand-in is not shown where the widget goes; shown: {shown[:300]!r}")
            assert not re.search(r"\w+\(children=\(", shown), f"{path.name} cell {index}: raw repr {shown[:200]!r}"
    finally:
        browser.close(shutdown=False)  # the idle kernel stays for the next lesson
        # drained even after a failure, so that the next lesson starts clean; and only now, after the screenshot,
        # the checks and the tab's closing: a console error logged a moment after the lesson rendered is its own
        errors = browser.errors()
    assert errors == [], f"{path.name} opened unrun (or a widget's lesson running in another tab)"


# -- 2. every widget, driven ------------------------------------------------------------------------------------

def _drive_name(path: pathlib.Path, index: int) -> str:
    return f"drive_{path.stem}_cell{index}.ipynb"


#: The widget's controls as shown: label -> selected text, checkbox state, slider readout or box value.
_CONTROLS = """(root) => {
    const out = {};
    const text = (el) => el.textContent.replace(/\u00a0/g, ' ').trim();  // menus show non-breaking spaces
    const label = (el) => { const l = el.querySelector('.widget-label'); return l ? text(l) : ''; };
    for (const d of root.querySelectorAll('.widget-dropdown')) {
        const s = d.querySelector('select');
        out[label(d)] = text(s.options[s.selectedIndex]);
    }
    for (const c of root.querySelectorAll('.widget-checkbox')) out[text(c.querySelector('.widget-label-basic span'))] = c.querySelector('input').checked;
    for (const s of root.querySelectorAll('.widget-hslider')) out[label(s)] = text(s.querySelector('.widget-readout'));
    for (const t of root.querySelectorAll('.widget-text')) if (label(t)) out[label(t)] = t.querySelector('input').value;
    return out;
}"""

#: The widget's figures as shown (none while it says "updating"): from the view's data attributes.
_FIGURES = """(root) => {
    if (root.querySelector('.gm-busy')) return null;
    const view = root.querySelector('.gm-explorer');
    if (!view) return null;
    const bytes = (sel) => { const e = view.querySelector(sel); return e ? Number(e.dataset.bytes) : null; };
    const categories = {};
    for (const e of view.querySelectorAll('.gm-bytes')) categories[e.dataset.category] = Number(e.dataset.bytes);
    const verdict = view.querySelector('.gm-verdict');
    return {batch: Number(view.dataset.batch), gpu: view.dataset.gpu, capacity: Number(view.dataset.capacity),
            fits: verdict.dataset.fits === 'true', verdict: verdict.textContent.trim(),
            peak: bytes('.gm-peak'), reserved: bytes('.gm-reserved'), categories};
}"""

#: Record, from now on, whether the view shows its "updating" state (and when it goes).
_WATCH = """(root) => {
    root.__busy = {seen: false};
    new MutationObserver(() => { if (root.querySelector('.gm-busy')) root.__busy.seen = true; })
        .observe(root, {childList: true, subtree: true, characterData: true});
}"""


def _direct(cls: str, controls: dict, figures: dict):
    """``(profile, replay or None)``: the step the controls show, computed directly."""
    batch = figures["batch"]
    if cls == "FineTuneFit":
        method, options = FINETUNE_METHODS[controls["method"]], dict(FINETUNE_OPTIMIZERS[controls["optimizer"]])
        options.update({k: v for k, v in method.items() if k in ("quantization", "double_quant")})
        if controls["weights"] != "float32":
            options["param_dtype"] = controls["weights"]
        if method.get("lora"):
            options.update(lora_dtype=controls["adapters"], dora=controls["DoRA"])
        if method.get("quantization"):
            options["prepare_kbit"] = controls["k-bit preparation (peft)"]
        return profile_step(controls["model"], batch, seq_len=int(controls["sequence"]), amp=True,
                            amp_dtype="bfloat16", checkpoint=1 if controls["gradient checkpointing"] else 0,
                            loss=FINETUNE_LOSSES[controls["loss"]],
                            lora_rank=int(controls["LoRA rank"]) if method.get("lora") else 0, steady_state=True,
                            device="simulated", **options), None
    if cls == "SequenceExplorer":
        return profile_step(transformer_step(controls["model"], int(controls["sequence"]), batch,
                                             amp=controls["AMP (float16)"], attention=controls["attention"],
                                             policy=controls["checkpointing"])), None
    optimizer = {label: name for name, label in OPTIMIZER_NAMES.items()}[controls["optimizer"]]
    if cls == "WillItFit":
        model, dtype = controls["model"], PRECISIONS[controls["precision"]]
        size = {"seq_len": int(controls["sequence"])} if model in LANGUAGE_PRESETS else \
            {"image_size": int(controls["image size"])}
        return profile_step(model, batch, optimizer=optimizer, amp=dtype is not None, amp_dtype=dtype or "float16",
                            steady_state=True, device="simulated", **size), None
    assert cls == "MemoryExplorer", f"no direct computation for {cls}: add one"
    step = profile_step(controls["model"], batch, amp=controls["AMP (autocast)"],
                        checkpoint=SEGMENTS[controls["checkpointing"]], optimizer=optimizer, steady_state=True,
                        device="simulated")
    if controls["reserved (simulated allocator)"]:
        return step, replay_on_gpu(step.allocation_log, GPU_CARDS[figures["gpu"]])
    return step, None


def _drag_slider(page, root, fraction: float) -> None:
    track, handle = root.locator(".widget-hslider .noUi-target").first, root.locator(".widget-hslider .noUi-handle").first
    box, grip = track.bounding_box(), handle.bounding_box()
    page.mouse.move(grip["x"] + grip["width"] / 2, grip["y"] + grip["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + fraction * box["width"], grip["y"] + grip["height"] / 2, steps=12)
    page.mouse.up()


def _ran(browser, name: str, cells: int):
    """Wait for the ``cells`` cells of the drive notebook ``name`` to have run; the widget cell's output area."""
    browser.wait(f"the {cells} cells of {name} to run", """(cells) => {
        const w = window.jupyterapp.shell.currentWidget;
        const prompts = [...w.node.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
        return prompts.length === cells && prompts.every(p => /\\[\\d+\\]/.test(p.textContent))
            && w.sessionContext.session.kernel.status === 'idle';
    }""", cells, timeout=RUN_CELLS)
    stderr = browser.page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output"
                                  "[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
    assert not any("Traceback" in t or "Error" in t for t in stderr), f"a cell of {name} raised: {stderr}"
    return browser.cell(cells - 1).locator(".jp-OutputArea-output").last


#: The widgets of a training step (all but the snapshot and serving widgets, driven by their own tests below).
STEPS = [(p, i, c) for p, i, c in WIDGETS if c not in ("SnapshotExplorer", "ServingFit")]


@pytest.mark.parametrize("path, index, cls", STEPS, ids=[f"{p.stem.split('_')[0]}-{c}" for p, _, c in STEPS])
def test_a_widget_driven_shows_what_profile_step_gives(browser, running, path, index, cls):
    page = browser.page
    name = _drive_name(path, index)
    cells = len(trimmed(nbformat.read(path, as_version=4), index).cells)
    browser.activate(name)  # set running by the fixture
    try:
        root = _ran(browser, name, cells)
        root.locator(".widget-vbox").first.wait_for(timeout=WIDGET_UPDATE * 1000)
        handle = root.element_handle()
        before = browser.wait(f"{cls}'s first figures", f"(root) => ({_FIGURES})(root)", handle).json_value()
        root.scroll_into_view_if_needed()
        page.evaluate(_WATCH, handle)

        # One control changes, as a learner changes it.
        reserved = before["reserved"] is not None
        if cls == "SequenceExplorer":  # the lesson's first suggestion: the math kernel
            root.locator(".widget-dropdown", has_text="attention").locator("select").select_option(label="math")
            expect = "the attention menu on math"
        elif cls == "FineTuneFit":  # lesson 09b: from LoRA to QLoRA, a new trace of an 8B model
            root.locator(".widget-dropdown", has_text="method").locator("select").select_option(
                label="QLoRA (bitsandbytes' NF4 base)")
            expect = "the method menu on QLoRA"
        elif reserved:  # lesson 06a: each batch size is traced and replayed; type one
            box = root.locator(".widget-text input").first
            box.fill(str(before["batch"] + 72))
            box.press("Enter")
            expect = f"batch {before['batch'] + 72}"
        else:
            _drag_slider(page, root, 0.6)
            expect = "the slider's new batch size"
        traces = cls in ("SequenceExplorer", "FineTuneFit") or reserved  # these changes need a new trace: "updating" must show
        if traces:
            try:
                page.wait_for_function("(root) => root.__busy.seen", arg=handle, timeout=10_000, polling=50)
                page.screenshot(path=str(ARTIFACTS / f"widget_{path.stem}_updating.png"))
            except Exception:  # a fast trace may come and go before a screenshot: the observer still saw it
                pass
        changed = """([root, before]) => {
            const now = (%s)(root);
            const controls = (%s)(root);
            const batch = controls['batch size'];
            return now && (JSON.stringify(now) !== JSON.stringify(before)) && String(now.batch) === String(batch);
        }""" % (_FIGURES, _CONTROLS)
        browser.wait(f"{cls} in {path.name} to show its figures for {expect}", changed, [handle, before])
        if cls not in ("SequenceExplorer", "FineTuneFit") and not reserved:
            time.sleep(1.0)  # a slider sends its last values after the drag: let them arrive
            browser.wait(f"{cls} in {path.name} to settle on the slider's last value", changed, [handle, before])
        after = page.evaluate(f"(root) => ({_FIGURES})(root)", handle)
        controls = page.evaluate(_CONTROLS, handle)
        busy_seen = page.evaluate("(root) => root.__busy.seen", handle)
        boxes = [(b["x"], b["width"]) for b in (box.bounding_box() for box in
                                               root.locator(".widget-text input").all() if box.is_visible())]
    finally:
        page.screenshot(path=str(ARTIFACTS / f"widget_{path.stem}.png"))  # after the update, or at a failure
        browser.close()
        errors = browser.errors()  # drained even after a failure

    assert all(width >= 40 for _, width in boxes), f"{cls}: a number box too narrow to read: {boxes}"
    if cls == "SequenceExplorer":
        assert controls["attention"] == "math" and after["batch"] == before["batch"]
    elif cls == "FineTuneFit":
        assert controls["method"] == "QLoRA (bitsandbytes' NF4 base)" and after["batch"] == before["batch"]
    elif reserved:
        assert after["batch"] == before["batch"] + 72
    else:
        assert after["batch"] > before["batch"], (before, after)
    if traces:
        assert busy_seen, f"{cls} in {path.name}: no 'updating...' state while it traced"
    assert after["gpu"] in GPU_CARDS and after["capacity"] == GPU_CARDS[after["gpu"]] and after["gpu"] == controls["GPU"]

    step, replay = _direct(cls, controls, after)
    tolerance = 4096  # an interpolated batch size rounds each tensor up to 512 bytes; a traced one is exact
    assert abs(after["peak"] - step.peak_allocated_bytes) < tolerance, (after["peak"], step.peak_allocated_bytes)
    for category, nbytes in step.categories.items():
        assert abs(after["categories"].get(category, 0) - nbytes) < tolerance, category
    # The verdict read from the one rule the widgets and the command line use (Estimate.verdict), not rebuilt from
    # judge(): a step with convolutions carries its cuDNN bound line (workspaces, cudnn_bound) only through it.
    if replay is None:
        estimate = Estimate.of(step)
    else:
        assert after["reserved"] == replay.peak_reserved
        estimate = reserved_estimate(step, after["capacity"])
        assert estimate.reserved_bytes == replay.peak_reserved
    verdict = estimate.verdict(after["capacity"], after["gpu"])
    assert after["fits"] == verdict.fits, (after["verdict"], verdict)
    if after["peak"] == step.peak_allocated_bytes:  # traced: the very sentence of the rule
        unit = {"WillItFit": "GiB", "SequenceExplorer": "GiB", "FineTuneFit": "GiB"}.get(cls, "MiB")  # the lesson's unit
        assert after["verdict"] == verdict.sentence(after["gpu"], unit=unit), (after["verdict"], verdict)
    assert errors == [], f"{cls} in {path.name}"


#: The snapshot widget's view as shown: the snapshot's name and peak, or the refusal (None while it reads).
_SNAPSHOT = """(root) => {
    if (root.querySelector('.gm-busy')) return null;
    const view = root.querySelector('.gm-snapshot');
    if (view) {
        const images = [...root.querySelectorAll('img')].filter(i => i.naturalWidth > 300 && i.offsetWidth > 0);
        return {name: view.dataset.name, peak: Number(view.dataset.peak), images: images.length};
    }
    const refused = root.querySelector('.gm-refused');
    if (!refused) return null;
    const shown = [...root.querySelectorAll('img')].filter(i => i.offsetWidth > 0 || i.offsetHeight > 0);
    const menu = root.querySelector('.widget-dropdown select');
    return {refused: refused.textContent.trim(), images: shown.length, menu: menu ? menu.selectedIndex : null,
            names: root.textContent.includes('ResNet18, batch 128')};
}"""


def _until(test: str) -> str:
    """A function of the widget's root that returns its view (:data:`_SNAPSHOT`) once ``test`` (of ``v``) holds."""
    return "(root) => { const v = (" + _SNAPSHOT + ")(root); return v && (" + test + ") ? v : null; }"


@pytest.mark.parametrize("path, index", [(p, i) for p, i, c in WIDGETS if c == "SnapshotExplorer"],
                         ids=lambda v: getattr(v, "stem", str(v)).split("_")[0])
def test_the_snapshot_widget_explains_a_chosen_snapshot_and_an_uploaded_file(browser, running, path, index, tmp_path):
    """Lesson 06b's widget: another shipped snapshot chosen from its menu, a file that is no snapshot uploaded (one
    line refuses it, with no figure and no menu entry left from before), then a real one uploaded; each view's peak is
    ``explain_snapshot``'s, with its two figures."""
    from helpers.snapshot import explain_snapshot
    from helpers.teaching.widgets import SHIPPED

    page = browser.page
    name = _drive_name(path, index)
    browser.activate(name)
    seen, bad = [], tmp_path / "notes.pickle"
    bad.write_bytes(b"not a snapshot\n")
    upload = SHIPPED["dropout MLP, C++ stacks (H200)"]
    try:
        root = _ran(browser, name, len(trimmed(nbformat.read(path, as_version=4), index).cells))
        root.locator(".gm-snapshot").wait_for(timeout=WIDGET_UPDATE * 1000)
        handle = root.element_handle()
        root.scroll_into_view_if_needed()
        seen.append(browser.wait("the first snapshot's figures", _until("v.images === 2"), handle).json_value())
        root.locator(".widget-dropdown select").select_option(label="ResNet18, batch 128 (H200)")
        for step, expect in (("menu", "ResNet18, batch 128 (H200)"), ("bad", None), ("upload", upload.name)):
            if step != "menu":  # the upload button opens the browser's file chooser, as a learner's click does
                with page.expect_file_chooser() as chooser:
                    root.locator(".widget-upload").click()
                chooser.value.set_files(str(bad if step == "bad" else upload))
            test = "v.refused" if expect is None else f"v.name === {json.dumps(expect)} && v.images === 2"
            seen.append(browser.wait(f"the snapshot widget after the {step}", _until(test), handle).json_value())
    finally:
        page.screenshot(path=str(ARTIFACTS / f"widget_{path.stem}.png"))
        browser.close()
        errors = browser.errors()
    first, chosen, refused, uploaded = seen
    assert first["peak"] == explain_snapshot(SHIPPED[first["name"]]).peak_bytes
    assert chosen["peak"] == explain_snapshot(SHIPPED[chosen["name"]]).peak_bytes
    assert refused["refused"].startswith("notes.pickle: not a memory snapshot") and "\n" not in refused["refused"]
    # issue 52.16: after a refused upload, no broken-image icons, and nothing names the snapshot shown before it
    assert refused["images"] == 0 and refused["menu"] == -1 and not refused["names"], refused
    assert uploaded["peak"] == explain_snapshot(upload).peak_bytes
    assert errors == [], f"SnapshotExplorer in {path.name}"


#: The serving widget's account as shown (None while it says "updating"): ``.gm-serving``'s data, and its answer.
_SERVING = """(root) => {
    if (root.querySelector('.gm-busy')) return null;
    const view = root.querySelector('.gm-serving');
    if (!view) return null;
    const answer = view.querySelector('.gm-answer');
    return {data: {...view.dataset}, answer: answer.textContent.trim(), starts: answer.dataset.starts === 'true'};
}"""


#: The texts of a widget's control labels that do not fit their box (ipywidgets cuts them with an ellipsis).
_CUT_LABELS = """(root) => [...root.querySelectorAll('.widget-label')]
    .filter(label => label.offsetParent !== null && label.scrollWidth > label.clientWidth + 1)
    .map(label => label.textContent)"""


def _serving_until(test: str) -> str:
    """A function of the widget's root that returns its account (:data:`_SERVING`) once ``test`` (of ``v``) holds."""
    return "(root) => { const v = (" + _SERVING + ")(root); return v && (" + test + ") ? v : null; }"


def _direct_startup(controls: dict):
    """vLLM's start-up account for the options the serving widget's controls show, computed directly."""
    options = dict(model=controls["model"], gpu=controls["GPU"],
                   gpu_memory_utilization=float(controls["gpu_memory_utilization"]),
                   max_model_len=int(controls["max_model_len"].replace(",", "")),
                   max_num_batched_tokens=BUDGETS[controls["max_num_batched_tokens"]],
                   kv_cache_dtype=controls["kv_cache_dtype"], tensor_parallel_size=int(controls["GPUs"]),
                   **SERVING_WEIGHTS[controls["weights"]])
    try:
        return vllm_startup(**options)
    except WouldNotStart as e:
        return e.account


@pytest.mark.parametrize("path, index", [(p, i) for p, i, c in WIDGETS if c == "ServingFit"],
                         ids=lambda v: getattr(v, "stem", str(v)).split("_")[0])
def test_the_serving_widget_shows_vllm_startups_account(browser, running, path, index):
    """Lesson 10b's widget: the batch-budget menu on 16,384 tokens (a new profile run: "updating..." must show), then
    the context menu on 8,192 tokens (vLLM's arithmetic on the kept run), or 4,096 where the lesson shows those
    already, then the GPUs menu on 2 (one GPU's shard: a new profile run, "updating..." again); each account shown is ``vllm_startup``'s for the options its controls show, its answer
    :func:`helpers.teaching.views.startup_answer`'s; no control's label is cut (:data:`_CUT_LABELS`)."""
    page = browser.page
    name = _drive_name(path, index)
    browser.activate(name)
    seen = []
    try:
        root = _ran(browser, name, len(trimmed(nbformat.read(path, as_version=4), index).cells))
        root.locator(".gm-serving").wait_for(timeout=WIDGET_UPDATE * 1000)
        handle = root.element_handle()
        root.scroll_into_view_if_needed()
        browser.wait("the serving widget's first account", _serving_until("true"), handle)
        cut = page.evaluate(_CUT_LABELS, handle)
        for menu, wanted, attribute in (("max_num_batched_tokens", ("16,384", "4,096"), "batchedTokens"),
                                        ("max_model_len", ("8,192", "4,096"), "maxModelLen"),
                                        ("GPUs", ("2", "4"), "gpus")):
            select = root.locator(".widget-dropdown", has_text=menu).locator("select")
            label = next(label for label in wanted if label != page.evaluate(_CONTROLS, handle)[menu])  # a change
            page.evaluate(_WATCH, handle)
            select.select_option(label=label)
            if menu == "max_num_batched_tokens":
                try:
                    page.wait_for_function("(root) => root.__busy.seen", arg=handle, timeout=10_000, polling=50)
                    page.screenshot(path=str(ARTIFACTS / f"widget_{path.stem}_updating.png"))
                except Exception:  # a fast trace may come and go before a screenshot: the observer still saw it
                    pass
            shown = browser.wait(f"the serving widget's account for the {menu} menu on {label}", _serving_until(
                f"v.data.{attribute} === {json.dumps(label.replace(',', ''))}"), handle).json_value()
            seen.append((menu, shown, page.evaluate(_CONTROLS, handle), page.evaluate("(root) => root.__busy.seen",
                                                                                     handle)))
    finally:
        page.screenshot(path=str(ARTIFACTS / f"widget_{path.stem}.png"))
        browser.close()
        errors = browser.errors()
    assert cut == [], f"labels cut in {path.name}: {cut}"  # "max_num_batched_tokens" shown whole
    for menu, shown, controls, busy_seen in seen:
        account = _direct_startup(controls)
        camel = lambda name: re.sub(r"-(\w)", lambda m: m.group(1).upper(), name)  # noqa: E731 (dataset's keys)
        assert shown["data"] == {camel(name): str(getattr(account, attr)) for name, attr in STARTUP_DATA.items()}, menu
        assert shown["answer"] == startup_answer(account) and shown["starts"] == (account.refusal is None), menu
        assert busy_seen == (menu != "max_model_len"), f"{menu}: 'updating...' seen {busy_seen}"
    assert [controls["GPUs"] for _, _, controls, _ in seen] == ["1", "1", "2"]  # the last account is one GPU's of 2
    assert errors == [], f"ServingFit in {path.name}"


# -- 3. a learner's copy saved, and the course's JupyterLab settings ---------------------------------------------

def _save(browser, path: str, cells: int, kernel: dict) -> None:
    """Open ``path`` as a double click does (on the idle ``kernel``: what is saved does not depend on a kernel),
    change its first cell as a learner would, save it (Ctrl+S's command), and close it."""
    browser.open(path, cells, kernel)
    try:
        browser.run(f"{path} to be saved", """async () => {
            const w = window.jupyterapp.shell.currentWidget;
            const cell = w.content.widgets[0].model.sharedModel;
            cell.setSource(cell.getSource() + '\\n\\nMy note.');
            await window.jupyterapp.commands.execute('docmanager:save');
        }""")
        browser.wait(f"{path} to be saved", "() => !window.jupyterapp.shell.currentWidget.context.model.dirty",
                     timeout=PAGE_LOAD)
    finally:
        browser.close(shutdown=False)


def test_saving_a_learners_copy_writes_no_other_file(browser, lab, idle_kernel):
    """make lessons' copies are plain notebooks: saving one in JupyterLab (with jupytext's extension, as
    installed) writes that notebook and nothing beside it; a paired notebook, saved the same way, gets its .py."""
    _, _, work = lab
    cells = len(nbformat.read(ROOT / "lessons" / SAVED, as_version=4).cells)
    for folder, pair in ((LEARNER, None), (PAIRED, pathlib.Path(SAVED).with_suffix(".py").name)):
        before = {p.name: p.stat().st_mtime_ns for p in (work / folder).iterdir()}
        _save(browser, f"{folder}/{SAVED}", cells, idle_kernel)
        after = {p.name: p.stat().st_mtime_ns for p in (work / folder).iterdir()}
        assert after[SAVED] != before[SAVED] and "My note." in (work / folder / SAVED).read_text(), f"{folder}: not saved"
        new = sorted(set(after) - set(before) - {".ipynb_checkpoints"})
        assert new == ([pair] if pair else []), f"saving {folder}/{SAVED} wrote {new}"
    saved = nbformat.read(work / LEARNER / SAVED, as_version=4)
    assert "jupytext" not in saved.metadata, saved.metadata
    assert browser.errors() == []


def test_jupyterlab_starts_without_the_news_pop_up(browser):
    """The course's page config (tools/jupyter-config, which make lessons applies) turns off JupyterLab's
    announcements: no "official Jupyter news?" pop-up on a fresh start, no update check; the other
    notification plugins run."""
    page = browser.page
    plugins = page.evaluate("""() => ['@jupyterlab/apputils-extension:announcements',
                                      '@jupyterlab/apputils-extension:notification']
                                     .map(id => window.jupyterapp.isPluginActivated(id))""")
    assert plugins == [False, True]
    assert "Jupyter news" not in page.locator("body").inner_text()
