"""The HTML reports in a real browser: Debian's headless Chromium, driven by playwright.

Chromium is a test dependency (`make test` installs it with apt-get): a missing browser
fails this test, unless EMBEDLAB_ALLOW_NO_BROWSER=1 says to skip. Playwright never
downloads a browser here; it drives the system one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .browser import chromium, shoot

pytestmark = pytest.mark.browser

IMAGES = (
    "Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete, width: i.naturalWidth,"
    " shown: i.clientWidth, css: i.width}))"
)
NBCONVERT_ALT = "No description has been provided for this image"
# Screenshots for people to look at (the report's head, a figure): outside the repo.
SHOTS = Path(os.environ.get("EMBEDLAB_REPORT_SHOTS") or "/tmp/report-shots")
# The scroll box of the first table wide enough to need one, how far it scrolls, and whether
# the page itself is wider than the window (then the table, or something else, is cut).
WIDE_TABLE = """() => {
    const boxes = [...document.querySelectorAll('.embedlab-table > div')];
    const box = boxes.find(b => b.scrollWidth > b.clientWidth);
    const page = document.documentElement;
    if (!box) return {boxes: boxes.length, page: page.scrollWidth, window: window.innerWidth};
    const right = box.getBoundingClientRect().right;
    box.scrollLeft = box.scrollWidth;
    const last = [...box.querySelectorAll('th')].pop().getBoundingClientRect();
    return {boxes: boxes.length, scroll: box.scrollWidth, client: box.clientWidth, style: getComputedStyle(box).overflowX,
            right, last_th: last.right, last_name: [...box.querySelectorAll('th')].pop().innerText,
            page: page.scrollWidth, window: window.innerWidth};
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from chromium()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    yield from offline_page(browser)


@pytest.fixture
def hidpi_page(browser: Any) -> Iterator[Any]:
    """A 2x display, as a colleague's laptop: a 1x figure would look soft here."""
    yield from offline_page(browser, device_scale_factor=2)


def offline_page(browser: Any, **options: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1300, "height": 900}, **options)
    page = context.new_page()
    # A shareable report loads nothing from the network: refuse and remember any attempt.
    page.external = []
    page.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith(("file:", "data:"))
            else (page.external.append(route.request.url), route.abort())
        ),
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
    described_at_2x(page)
    # The index says what ran it, when, and how long each notebook took.
    meta = page.inner_text(".meta.command")
    assert meta.startswith("command embedlab regress --matrix ") and "--out " in meta, meta
    assert re.search(r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page.inner_text("p.meta"))
    assert re.search(r"PASSED\n[\d.]+ s", page.inner_text("table")), "each run's own time, under its verdict"
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
    assert "PASSED" in banner and 'parameters in effect: stack="embedded"' in banner, banner
    shoot(page, tmp_path, "scenario.png")
    assert page.external == [], f"the reports tried to load {page.external}"


def described_at_2x(page: Any) -> list[dict[str, Any]]:
    """Every image says what it shows and is drawn at twice the size it is shown at."""
    images = page.evaluate(IMAGES)
    for image in images:
        assert image["alt"] and image["alt"] != NBCONVERT_ALT and len(image["alt"]) > 30, image["alt"]
        assert image["width"] // 2 == image["css"], image
        assert abs(image["shown"] - image["css"]) <= 1 or image["shown"] < image["css"], "never shown wider"
    return images


def test_a_report_heads_with_what_ran_and_keeps_wide_tables_in_their_box(
    regress_run, hidpi_page: Any
) -> None:  # type: ignore[no-untyped-def]
    """Issue 28's report: a title, the date, the run time and the command at the top; figures
    described and sharp; a table wider than the window scrolls in its box, the page does not."""
    proc, index = regress_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = index.parent
    results = json.loads((run / "results.json").read_text())
    scenario = next(s for s in results["scenarios"] if s["name"] == "same_model_load_balance--embedded-hash")
    page = hidpi_page

    page.goto((run / scenario["report_html"]).as_uri(), wait_until="load")
    assert page.title() == "same_model_load_balance — embedded-hash"
    assert page.inner_text(".embedlab-banner h1") == "same_model_load_balance — embedded-hash"
    meta = page.inner_text(".embedlab-banner .meta")
    assert re.fullmatch(r"ran \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC in [\d.]+ s by embedlab regress .+", meta), (
        meta
    )
    shown = re.search(r" in ([\d.]+) s by (.*)", meta)
    assert shown and shown.group(2) == results["command"], (meta, results["command"])
    assert abs(float(shown.group(1)) - scenario["seconds"]) <= 0.051, "the run time results.json records"
    images = described_at_2x(page)
    assert len(images) == 2 and images[0]["alt"].startswith(
        "same-model on embedded (hash): PASSED. Panel 1: burst"
    )

    SHOTS.mkdir(parents=True, exist_ok=True)
    page.locator(".embedlab-banner").screenshot(path=str(SHOTS / "report-head.png"))
    page.locator("img").first.screenshot(path=str(SHOTS / "report-figure.png"))
    page.set_viewport_size({"width": 900, "height": 1200})
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(SHOTS / "report-top.png"))

    # A window narrower than the per-worker table: it scrolls in its own box, to its last column.
    page.set_viewport_size({"width": 640, "height": 900})
    wide = page.evaluate(WIDE_TABLE)
    assert wide["boxes"] >= 1 and "scroll" in wide, f"no table wider than its box: {wide}"
    assert wide["scroll"] > wide["client"] and wide["style"] == "auto", wide
    assert wide["right"] <= wide["window"], f"the box itself runs past the window: {wide}"
    assert wide["last_th"] <= wide["right"] + 1, (
        f"scrolled, its last column {wide['last_name']!r} is in view: {wide}"
    )
    assert wide["page"] <= wide["window"], f"the page is wider than the window: something is cut: {wide}"
    page.locator(".embedlab-table").first.screenshot(path=str(SHOTS / "report-table-scrolled.png"))
    assert page.external == [], f"the report tried to load {page.external}"
