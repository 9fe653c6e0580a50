"""The dashboard in a real headless Chromium while data flows: it loads without console errors,
its charts hold data points, and a topic added through the API shows up on the page."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strait.demo import Generator, create_topic, wait_until
from strait.sandbox import Sandbox
from tests.integration.observability import ObservedFleet

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
VENDORED = Path(__file__).resolve().parents[2] / "src/strait/web/static/vendor/chart.umd.js"
CHARTS = ("chart-partitions", "chart-bytes", "chart-lag", "chart-latency")

# Points per chart, read from the page's Chart.js instances.
POINTS_JS = """() => Object.fromEntries(Object.entries(window.straitCharts || {}).map(
    ([id, chart]) => [id, chart.data.datasets.reduce((n, d) => n + d.data.length, 0)]))"""
DATASETS_JS = """(id) => (window.straitCharts[id]?.data.datasets || []).map((d) => d.label)"""


def add_topic(fleet: ObservedFleet, topic: str) -> None:
    # A topic created moments ago may not be in the controller's metadata yet (404): retry.
    assert wait_until(lambda: fleet.api().add_topic(topic) is not None, 30), f"could not add {topic}"


@pytest.fixture()
def flowing(sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ObservedFleet, Generator]]:
    src = sandbox.clusters["src"].props()
    fleet = ObservedFleet(
        zookeeper=sandbox.zookeeper,
        clusters={"src": src, "dst": sandbox.clusters["dst"].props()},
        routes=[{"name": "main", "source": "src", "destination": "dst"}],
        workdir=tmp_path_factory.mktemp("dashboard-fleet"),
    )
    generator = Generator(src, rate_per_partition=50).start()
    try:
        fleet.start_controller("c1")
        fleet.start_worker("w1")
        fleet.start_worker("w2")
        for topic in ("ui-orders", "ui-clicks"):
            create_topic(src, topic, partitions=3)
            generator.add(topic, 3)
            add_topic(fleet, topic)
        create_topic(src, "ui-added-later", partitions=2)
        generator.add("ui-added-later", 2)
        yield fleet, generator
    finally:
        generator.stop()
        fleet.stop()


def test_dashboard_shows_live_data_and_a_new_topic(flowing: tuple[ObservedFleet, Generator]) -> None:
    import playwright.sync_api as playwright_api  # a dev dependency: missing means a broken install

    _require_chromium()
    assert VENDORED.exists(), "Chart.js is not vendored: run python scripts/vendor_ui.py"
    fleet, _generator = flowing
    problems: list[str] = []
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc: problems.append(str(exc)))
            page.on("requestfailed", lambda request: problems.append(f"request failed: {request.url}"))
            page.goto(fleet.url() + "/ui", wait_until="load")

            def charts_have_points() -> bool:
                points: dict[str, Any] = page.evaluate(POINTS_JS)
                return all(points.get(chart, 0) >= 2 for chart in CHARTS)

            assert wait_until(charts_have_points, 90, interval_s=1), page.evaluate(POINTS_JS)
            assert page.locator("#workers tbody tr").count() == 2
            assert "leader c1" in page.locator("#leader").inner_text()
            # The route copies whole batches only while a partition lags (the default): this
            # trickle is caught up, copied record by record, and the copy mode table says why.
            page.locator("#copy-modes td", has_text="caught up").first.wait_for(timeout=30_000)

            add_topic(fleet, "ui-added-later")
            page.locator("#topics").get_by_text("main/ui-added-later").wait_for(timeout=30_000)
            assert wait_until(
                lambda: "main/ui-added-later" in page.evaluate(DATASETS_JS, "chart-lag"), 30, interval_s=1
            )
            page.wait_for_timeout(2500)  # one more poll, so the screenshot shows the new topic's line
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shot = ARTIFACTS / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            print(f"dashboard screenshot: {shot}")
        finally:
            browser.close()
    assert problems == [], problems
    assert shot.stat().st_size > 10_000


def _require_chromium() -> None:
    # CI installs Debian's chromium (.ci/run), so there a missing browser is a failure; on a
    # developer's machine without it the browser tests are skipped with the command to fix that.
    if not Path(CHROMIUM).exists():
        message = "Debian chromium is not installed (apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_chromium_binary_is_the_debian_one() -> None:
    _require_chromium()
    assert shutil.which("chromium") == CHROMIUM
