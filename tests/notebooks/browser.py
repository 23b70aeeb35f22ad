"""Headless Chromium for the browser tests: Debian's own, driven by playwright, never downloaded.

Chromium is a test dependency (`make test` installs it with apt-get): a missing browser
fails a browser test, unless EMBEDLAB_ALLOW_NO_BROWSER=1 says to skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path(shutil.which("chromium") or "/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def unavailable(why: str) -> None:
    if os.environ.get("EMBEDLAB_ALLOW_NO_BROWSER") == "1":
        pytest.skip(why)
    pytest.fail(
        f"{why} (`make test` installs it; `make test EMBEDLAB_ALLOW_NO_BROWSER=1` skips this on purpose)"
    )


def chromium() -> Iterator[Any]:
    """The system Chromium under playwright, closed afterwards (a generator for a fixture)."""
    if not CHROMIUM.exists():
        unavailable("headless Chromium is not installed: apt-get install -y chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("the playwright package is missing: pip install -e '.[dev]'")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def keep_screenshot(shot: Path) -> Path:
    """Copy a screenshot to outputs/screenshots/ (git-ignored) for people and CI."""
    keep = Path(os.environ.get("EMBEDLAB_SCREENSHOT_DIR") or REPO / "outputs" / "screenshots")
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, keep / shot.name)
    return keep / shot.name


def shoot(page: Any, tmp_path: Path, name: str) -> Path:
    """Full-page screenshot under the test's tmp dir, kept in outputs/screenshots/."""
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    keep_screenshot(shot)
    return shot
