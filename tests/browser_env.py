"""What the tests that drive a real browser need: Playwright and a Chromium (tests/test_browser.py, tests/test_site.py)."""

from __future__ import annotations

import os

#: The system Chromium (Playwright cannot download its own here), or the one in ``$CHROMIUM``.
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")


def browser_unavailable() -> str | None:
    """Why a real browser cannot be driven here, in one line, or None when it can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -r requirements.txt)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CHROMIUM)"
    return None
