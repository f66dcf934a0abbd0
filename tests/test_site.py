"""The course's website, built and opened page by page in a real browser (headless Chromium).

``make site`` builds the website from the committed notebooks (``tools/build_site.py``).
This test builds it afresh into a temporary folder with the website's environment
(``build/site-venv``, made by ``make site``), serves it on a loopback port, and
opens every page in Chromium driven by Playwright.  A page fails on

* a figure that does not load (an ``img`` with no pixels) or has no alt text;
* a broken internal link: a page or a ``#fragment`` that does not exist;
* "Error displaying widget" or raw widget JSON (a widget view the page cannot run), or
  a page that tells its reader to "Run All" (a page runs nothing);
* a long line cut: an output line wider than its box (outputs wrap), or a code line
  wider than its box that does not scroll sideways with a shadow at its hidden edge
  (``site/_static/site.css``; Chromium runs with its scrollbars shown, as a desktop
  browser draws them, for the screenshots);
* a JavaScript error (uncaught, or logged with ``console.error``), a failed request,
  or a request that leaves the machine (the site must work offline).

For every lesson it also checks the page against the notebook: as many figures as
the notebook stores, each widget's note for a reader shown (``tools/build_site.py``),
every exercise solution folded (a closed ``<details>``).  Launch links (Binder,
JupyterHub, Colab) are off until ``site/publish.cfg`` sets them: a build with them
set (of one lesson with a widget: ``build_site.py OUT LESSON``) links the lesson to
where it runs.  It saves screenshots of the landing page
and of a lesson page with a figure and a widget stand-in to ``test-artifacts/``.

Without the website's environment, the playwright package or a Chromium it is
skipped with the reason, unless ``BROWSER_TEST=required`` (``.ci/run``, which makes
the website's environment first), where it fails instead.
"""

from __future__ import annotations

import functools
import http.server
import os
import pathlib
import re
import subprocess
import sys
import threading
import urllib.parse

import pytest
from browser_env import CHROMIUM, browser_unavailable

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_site  # noqa: E402
import lesson_pages  # noqa: E402
import publish  # noqa: E402

ARTIFACTS = ROOT / "test-artifacts"
REQUIRED = os.environ.get("BROWSER_TEST") == "required"
SITE_PYTHON = ROOT / "build" / "site-venv" / "bin" / "python"
#: Bounded waits, in seconds.
BUILD, PAGE_LOAD = 300, 60
STAND_IN = "when you run the notebook"  # the notebooks' widget stand-in
NOTE = "an interactive widget"  # the page's note for it (tools/build_site.py)
SOLUTION = "Solution"


def _unavailable() -> str | None:
    if not SITE_PYTHON.exists():
        return f"no website environment at {SITE_PYTHON.parent.parent} (run make site)"
    return browser_unavailable()


def _skip_unless_available():
    reason = _unavailable()
    if reason:
        if REQUIRED:
            pytest.fail(f"browser test required but {reason}")
        pytest.skip(reason)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Serve ``html`` (a built site folder) on a loopback port; yields a function html -> base URL."""
    servers = []

    def serve(html: pathlib.Path) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(html)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/"

    yield serve
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module (system browser: Playwright cannot download its own here)."""
    _skip_unless_available()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"],
            ignore_default_args=["--hide-scrollbars"])  # scrollbars drawn, as a desktop browser draws them
        try:
            yield chromium
        finally:
            chromium.close()


def crawl(browser, base: str, html: pathlib.Path, screenshots: dict[str, str] | None = None) -> dict:
    """Open every ``*.html`` page of ``html`` (served at ``base``) and record what each shows.

    Returns ``{page name: {"problems": [...], "ids": set, "links": [...], "images": int,
    "stand_ins": int, "folds": int, "open_folds": int}}``.  ``screenshots`` maps a page
    name to a PNG path: that page is saved there (see :func:`_screenshots`).
    """
    host = urllib.parse.urlsplit(base).netloc
    seen: dict[str, dict] = {}
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    current: list[str] = []

    def problem(text: str) -> None:
        seen[current[0]]["problems"].append(text)

    def route(r):
        if urllib.parse.urlsplit(r.request.url).netloc == host or r.request.url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            problem(f"request that leaves the machine: {r.request.url}")
            r.abort()

    page.route("**/*", route)
    page.on("pageerror", lambda e: problem(f"JavaScript error: {e}"))
    page.on("console", lambda m: problem(f"console error: {m.text}") if m.type == "error" else None)
    page.on("requestfailed", lambda r: problem(f"request failed: {r.url} ({r.failure})")
            if urllib.parse.urlsplit(r.url).netloc == host else None)
    page.on("response", lambda r: problem(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    try:
        for path in sorted(html.glob("*.html")):
            current[:] = [path.name]
            seen[path.name] = {"problems": []}
            page.goto(base + path.name, wait_until="load", timeout=PAGE_LOAD * 1000)
            # Measured once the web fonts are in and the layout has settled (on a busy machine a line
            # measured in the fallback font was seen wider than its box).
            facts = page.evaluate("""async () => {
                await document.fonts.ready;
                await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
                // A cut code line must scroll sideways (overflow-x: auto draws its scrollbar) and show the
                // site's shadow at the hidden edge (site/_static/site.css). Read from the computed style: whether
                // Chromium has drawn the bar yet depends on the machine's load (a line cut by one character was
                // seen without one for over 2 s on a busy machine).
                const cut = [...document.querySelectorAll('pre')].filter(p => p.scrollWidth > p.clientWidth + 1)
                    .map(p => { const style = getComputedStyle(p);
                                return {output: !!p.closest('.cell_output'), text: p.innerText.slice(0, 60),
                                        scrolls: ['auto', 'scroll'].includes(style.overflowX),
                                        shadow: style.backgroundImage.includes('radial-gradient')}; });
                const main = document.querySelector('main') || document.body;
                const imgs = [...document.images];
                return {
                    text: [...main.querySelectorAll('.cell_output')].map(o => o.innerText).join(' '),
                    html: document.documentElement.outerHTML,
                    ids: [...document.querySelectorAll('[id]')].map(e => e.id),
                    links: [...document.querySelectorAll('a[href]')].map(a => a.href),
                    broken_images: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
                    no_alt: [...main.querySelectorAll('img')].filter(i => !(i.alt || '').trim()).map(i => i.src),
                    images: main.querySelectorAll('.cell_output img').length,
                    stand_ins: [...main.querySelectorAll('.cell_output')]
                        .filter(o => o.innerText.includes('""" + NOTE + """')).length,
                    cut,
                    folds: [...main.querySelectorAll('details')]
                        .filter(d => (d.querySelector('summary') || {}).innerText === '""" + SOLUTION + """').length,
                    open_folds: [...main.querySelectorAll('details[open]')]
                        .filter(d => (d.querySelector('summary') || {}).innerText === '""" + SOLUTION + """').length,
                };
            }""")
            record = seen[path.name]
            record.update(ids=set(facts["ids"]), links=facts["links"], images=facts["images"],
                          stand_ins=facts["stand_ins"], folds=facts["folds"], open_folds=facts["open_folds"])
            record["problems"] += [f"figure not loaded: {src}" for src in facts["broken_images"]]
            record["problems"] += [f"image without alt text: {src}" for src in facts["no_alt"]]
            if "Error displaying widget" in facts["text"]:  # in an output: where a widget fails
                problem("shows 'Error displaying widget'")
            if "application/vnd.jupyter.widget" in facts["html"] or '"model_id"' in facts["text"]:
                problem("shows raw widget JSON (a widget view or state)")
            if "Run All" in facts["text"] or "Run &gt; Run All" in facts["html"]:
                problem("tells its reader to 'Run All'")
            for cut in facts["cut"]:
                if cut["output"]:
                    problem(f"an output line cut (wider than its box, not wrapped): {cut['text']!r}")
                elif not (cut["scrolls"] and cut["shadow"]):
                    problem(f"a code line cut that does not scroll with a shadow at its edge: {cut['text']!r}")
            if screenshots and path.name in screenshots:
                _screenshots(page, pathlib.Path(screenshots[path.name]))
    finally:
        page.close()
    for name, record in seen.items():
        for link in record.get("links", []):
            parts = urllib.parse.urlsplit(link)
            if parts.netloc != host:
                continue
            target = urllib.parse.unquote(parts.path.lstrip("/")) or "index.html"
            if not (html / target).exists():
                record["problems"].append(f"broken link: {link}")
            elif parts.fragment and target in seen and parts.fragment not in seen[target]["ids"]:
                record["problems"].append(f"broken link (no #{parts.fragment} on {target}): {link}")
    return seen


def _screenshots(page, target: pathlib.Path) -> None:
    """Save the page at ``target``: whole, or, for a page with widget stand-ins, two views
    (``*_figure.png`` centred on its first figure, ``*_widget.png`` on its first stand-in)."""
    stand_in = page.locator(".cell_output", has_text=NOTE)
    if not stand_in.count():
        page.screenshot(path=str(target), full_page=True)
        return
    # The figure: the last one before the first stand-in (or the first one on the page).
    page.evaluate("""() => {
        const widget = [...document.querySelectorAll('.cell_output')].find(o => o.innerText.includes('%s'));
        const imgs = [...document.querySelectorAll('.cell_output img')];
        const before = imgs.filter(i => i.compareDocumentPosition(widget) & Node.DOCUMENT_POSITION_FOLLOWING);
        (before.length ? before[before.length - 1] : imgs[0]).scrollIntoView({block: 'center'});
    }""" % NOTE)
    page.screenshot(path=str(target.with_name(f"{target.stem}_figure.png")))
    stand_in.first.evaluate("e => e.scrollIntoView({block: 'center'})")
    page.screenshot(path=str(target.with_name(f"{target.stem}_widget.png")))


@pytest.fixture(scope="module")
def site(browser, served, tmp_path_factory):
    """The website built afresh (``tools/build_site.py``), and every page of it as Chromium showed it."""
    out = tmp_path_factory.mktemp("site")
    build = subprocess.run([str(SITE_PYTHON), str(ROOT / "tools" / "build_site.py"), str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=BUILD)
    assert build.returncode == 0, f"the website does not build:\n{build.stdout}\n{build.stderr}"
    html = out / "html"
    ARTIFACTS.mkdir(exist_ok=True)
    showcase = next((p for p in lesson_pages.lesson_paths() if _stand_ins(lesson_pages.read(p))
                     and lesson_pages.figures(lesson_pages.read(p))), None)
    shots = {"index.html": str(ARTIFACTS / "site_landing.png")}
    if showcase:
        shots[showcase.stem + ".html"] = str(ARTIFACTS / "site_lesson.png")
    return html, crawl(browser, served(html), html, shots)


def _stand_ins(nb) -> int:
    return sum(STAND_IN in "".join(o.get("data", {}).get("text/html", ""))
               for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def _folds(nb) -> int:
    return sum(c.source.count(f"<summary>{SOLUTION}</summary>") for c in nb.cells if c.cell_type == "markdown")


def test_every_page_opens_clean(site):
    html, pages = site
    for must in ("index.html", "instructor_guide.html", "references.html", "licence.html", "changelog.html"):
        assert must in pages, f"the website has no {must}"
    problems = [f"{name}: {p}" for name, record in pages.items() for p in record["problems"]]
    assert not problems, "\n".join(problems)


def test_every_lesson_is_a_page_as_its_notebook_shows_it(site):
    html, pages = site
    paths = lesson_pages.lesson_paths()
    assert paths
    for path in paths:
        nb = lesson_pages.read(path)
        record = pages.get(path.stem + ".html")
        assert record is not None, f"no page for {path.name}"
        assert record["images"] == len(lesson_pages.figures(nb)), f"{path.name}: figures on the page"
        assert record["stand_ins"] == _stand_ins(nb), f"{path.name}: widget stand-ins on the page"
        assert record["folds"] == _folds(nb), f"{path.name}: solution folds on the page"
        assert record["open_folds"] == 0, f"{path.name}: a solution is shown unfolded"
    landing = (html / "index.html").read_text()
    for path in paths:
        assert f'href="{path.stem}.html"' in landing, f"the landing page does not link {path.name}"


def test_the_landing_page_says_how_to_run_and_the_licences(site):
    html, _ = site
    landing = re.sub(r"<[^>]+>", "", (html / "index.html").read_text())
    for said in ("make lessons", "make test", "Schedule", "CC BY 4.0"):
        assert said in landing, f"the landing page does not say {said!r}"
    licence = (html / "licence.html").read_text()
    assert "MIT" in licence and "CC BY 4.0" in licence and "cff-version" in licence


def test_the_checks_catch_a_broken_page(browser, served, tmp_path):
    """The crawler finds each kind of fault it is there for, on a page made to have them all."""
    (tmp_path / "index.html").write_text(
        '<html><body><main><a href="missing.html">x</a><a href="index.html#nowhere">y</a>'
        '<img src="missing.png" alt="a figure"><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">'
        '<div class="cell_output">Error displaying widget: model not found</div>'
        '<script type="application/vnd.jupyter.widget-view+json">{"model_id": "1"}</script>'
        '<div class="cell_output"><pre style="white-space:pre;overflow:hidden">' + "an output line " * 40 + "</pre>"
        "<p>Run &gt; Run All Cells</p></div>"
        '<pre style="white-space:pre;overflow:hidden">' + "a code line " * 40 + "</pre>"
        "<script>undefined_function()</script></main></body></html>")
    problems = "\n".join(crawl(browser, served(tmp_path), tmp_path)["index.html"]["problems"])
    for fault in ("broken link: ", "no #nowhere", "figure not loaded", "image without alt text",
                  "Error displaying widget", "raw widget JSON", "JavaScript error", "HTTP 404", "'Run All'",
                  "an output line cut", "a code line cut that does not scroll"):
        assert fault in problems, f"missed {fault!r} in:\n{problems}"


# -- launch links, and a widget's note for a reader ---------------------------------------------------------------

REPOSITORY = "https://github.com/example-org/gpu-memory-lessons"
LAUNCH = (f"[publish]\nrepository_url = {REPOSITORY}\nbranch = main\nbinderhub_url = https://mybinder.org\n"
          "jupyterhub_url = https://hub.example.edu\ncolab = yes\n")


def _hrefs(page: str) -> list[str]:
    import html

    return [html.unescape(h) for h in re.findall(r'href="([^"]+)"', page)]


def test_publishing_settings_are_off_until_set(tmp_path):
    shipped = publish.settings(ROOT / "site" / "publish.cfg")
    assert shipped["repository_url"] == "" and publish.launch_services(shipped) == []
    assert publish.theme_options(shipped) == {}  # no launch menu, no repository link
    cfg = tmp_path / "publish.cfg"
    cfg.write_text(LAUNCH)
    values = publish.settings(cfg)
    assert publish.launch_services(values) == ["Binder", "JupyterHub", "Colab"]
    assert publish.theme_options(values) == {
        "repository_url": REPOSITORY, "repository_branch": "main", "path_to_docs": "lessons",
        "launch_buttons": {"notebook_interface": "jupyterlab", "binderhub_url": "https://mybinder.org",
                           "jupyterhub_url": "https://hub.example.edu", "colab_url": publish.COLAB_URL}}
    cfg.write_text(LAUNCH.replace(f"repository_url = {REPOSITORY}", "repository_url ="))
    assert publish.launch_services(publish.settings(cfg)) == []  # a service without a repository: no link
    cfg.write_text(LAUNCH.replace("https://mybinder.org", "mybinder.org"))
    with pytest.raises(ValueError, match="binderhub_url must be an https:// address"):
        publish.settings(cfg)
    with pytest.raises(ValueError, match=r"no \[publish\] section"):
        publish.settings(tmp_path / "missing.cfg")


def test_a_site_of_named_lessons_refuses_a_name_that_is_no_lesson(tmp_path):
    with pytest.raises(SystemExit, match="no lesson named 01_nothing"):
        build_site.main(tmp_path / "site", ["01_mini_batching", "01_nothing"])


def test_a_widget_becomes_a_note_for_a_reader_after_its_first_figure():
    import nbformat

    stand_in = ('<div style="border:1px dashed #999999"><b>MemoryExplorer</b>: a batch-size slider. It appears here '
                'when you run the notebook&rsquo;s cells from the top (Run &gt; Run All Cells).</div>')
    widget = nbformat.v4.new_output("display_data", data={"text/plain": "MemoryExplorer(children=(...))",
                                                          "text/html": stand_in})
    printed = nbformat.v4.new_output("stream", text="peak 2.7 GiB\n")
    staged = build_site.reader_outputs([printed, widget], [], "lesson cell 3")
    assert staged[0] == printed and len(staged) == 2
    note = staged[1]["data"]["text/html"]
    assert note.startswith('<div class="gm-widget-note"><b>MemoryExplorer</b>, an interactive widget: a batch-size '
                           'slider. It runs when the lesson runs in JupyterLab, not on this page: see <a href="index.html'
                           '#how-to-run-the-lessons">how to run the lessons</a>.')
    assert "Run All" not in note
    with_figure = nbformat.v4.new_output("display_data", data={**widget["data"], "image/png": "iVBORw0KGgo="})
    staged = build_site.reader_outputs([with_figure], ["Binder"], "lesson cell 4")
    assert staged[0]["data"] == {"image/png": "iVBORw0KGgo="}  # the widget's first state, a figure: shown
    assert "use this page's launch menu (the rocket at its top: Binder)" in staged[1]["data"]["text/html"]
    bare = nbformat.v4.new_output("display_data", data={"text/plain": "MemoryExplorer(children=(...))"})
    with pytest.raises(SystemExit, match="lesson cell 5: the widget MemoryExplorer has no text/html stand-in"):
        build_site.reader_outputs([bare], [], "lesson cell 5")


def test_launch_links_open_each_lesson_where_the_course_is_published(site, tmp_path):
    """Off in the shipped settings (the ``site`` fixture's build); set, every lesson page links to Binder,
    a JupyterHub (nbgitpuller) and Colab, each opening that lesson of the repository, and its widget's note
    names the launch menu.

    Checked on the first lesson with a widget, in a site of that lesson alone (``build_site.py OUT LESSON``: the
    same page, landing page and theme options, 4 s of CPU where the whole site's second build took 11 s)."""
    html, _ = site
    lesson = next(p for p in lesson_pages.lesson_paths() if _stand_ins(lesson_pages.read(p))).stem
    for href in _hrefs((html / f"{lesson}.html").read_text()):
        assert not any(s in href for s in ("/v2/gh/", "colab.research.google.com", "git-pull")), href
    cfg = tmp_path / "publish.cfg"
    cfg.write_text(LAUNCH)
    out = tmp_path / "launch"
    build = subprocess.run([str(SITE_PYTHON), str(ROOT / "tools" / "build_site.py"), str(out), lesson], cwd=ROOT,
                           capture_output=True, text=True, timeout=BUILD, env={**os.environ, "SITE_PUBLISH": str(cfg)})
    assert build.returncode == 0, f"the website does not build:\n{build.stdout}\n{build.stderr}"
    page = (out / "html" / f"{lesson}.html").read_text()
    hrefs = _hrefs(page)
    path = f"lessons/{lesson}.ipynb"
    assert f"https://mybinder.org/v2/gh/example-org/gpu-memory-lessons/main?urlpath=lab/tree/{path}" in hrefs
    assert f"https://colab.research.google.com/github/example-org/gpu-memory-lessons/blob/main/{path}" in hrefs
    hub = next(h for h in hrefs if h.startswith("https://hub.example.edu/hub/user-redirect/git-pull?"))
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(hub).query)
    assert query == {"repo": [REPOSITORY], "branch": ["main"], "urlpath": [f"lab/tree/gpu-memory-lessons/{path}"]}
    assert sorted(p.name for p in (out / "html").glob("[0-9]*.html")) == [f"{lesson}.html"]  # that lesson alone
    assert "launch menu (the rocket at its top: Binder, JupyterHub, Colab)" in page  # its widget's note
    assert "opens it on Binder, JupyterHub or Colab" in (out / "html" / "index.html").read_text()
