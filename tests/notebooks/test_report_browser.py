"""The HTML reports in a real browser: Debian's headless Chromium, driven by playwright.

Chromium is a test dependency (`make test` installs it with apt-get): a missing browser
fails this test, unless EMBEDLAB_ALLOW_NO_BROWSER=1 says to skip. Playwright never
downloads a browser here; it drives the system one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from .browser import chromium, shoot

pytestmark = pytest.mark.browser

IMAGES = "Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth}))"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    # A shareable report loads nothing from the network: refuse and remember any attempt.
    page.external = []
    page.route(
        "**/*",
        lambda route: route.continue_() if route.request.url.startswith(("file:", "data:"))
        else (page.external.append(route.request.url), route.abort()),
    )
    try:
        yield page
    finally:
        context.close()


def assert_images_loaded(page: Any, at_least: int) -> None:
    images = page.evaluate(IMAGES)
    assert len(images) >= at_least, images
    broken = [i["alt"] for i in images if not (i["complete"] and i["width"] > 0)]
    assert broken == [], f"images that did not load: {broken}"


def test_index_and_a_scenario_page_render_with_their_figures(regress_run, page: Any, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    proc, index = regress_run
    assert proc.returncode == 0, proc.stderr[-3000:]

    page.goto(index.as_uri(), wait_until="load")
    assert_images_loaded(page, at_least=8)  # two figures per run
    text = page.inner_text("body")
    assert "NO FAILURES" in text and text.count("PASSED") >= 3
    # A report is never drawn as a pass: its badge is not the green of one.
    colours = page.evaluate(
        "['passed', 'reported'].map(v => getComputedStyle(document.querySelector('td .verdict.' + v)).backgroundColor)"
    )
    assert colours[0] == "rgb(46, 125, 50)" and colours[1] not in (colours[0], "rgba(0, 0, 0, 0)"), colours
    figure = page.locator("img").first.bounding_box()
    assert figure is not None and figure["width"] > 300 and figure["height"] > 150
    shot = shoot(page, tmp_path, "index.png")
    assert shot.stat().st_size > 50_000, "a page of figures, not a blank screenshot"

    page.locator("a", has_text="report").first.click()
    page.wait_for_load_state("load")
    assert page.url.endswith("--embedded-hash.html"), page.url
    assert_images_loaded(page, at_least=2)
    banner = page.inner_text(".embedlab-banner")
    assert "PASSED" in banner and "stack=embedded" in banner
    shoot(page, tmp_path, "scenario.png")
    assert page.external == [], f"the reports tried to load {page.external}"
