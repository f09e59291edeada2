"""A real headless Chromium (Debian's) against `slicemeter dashboard` on the fixture database:
the page renders over Streamlit's websocket, shows the tenants and the fleet utilization."""
from __future__ import annotations

import time

import duckdb
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from slicemeter.dashboard import fmt
from slicemeter.testkit.browser import chromium, serve_dashboard
from slicemeter.testkit.fleet_fixture import TENANTS, build_fleet_db

pytestmark = pytest.mark.browser


@pytest.fixture
def served(tmp_path):
    db = build_fleet_db(tmp_path / "fleet.duckdb", "2026-11")
    with serve_dashboard(db, tmp_path / "dashboard.log") as url:
        yield url, db


def click_through_heatmap(page, url: str) -> None:
    """Click the heatmap row of gpu-node-3's first GPU: the page shows that GPU's slices."""
    page.goto(url + "gpus")
    page.wait_for_selector("text=Slices on a GPU", timeout=60_000)
    canvas = page.wait_for_selector(".vega-embed canvas", timeout=60_000)
    assert "node gpu-node-3" not in page.inner_text("body")   # the first GPU is shown first
    want = "node gpu-node-3 · tenant globex"
    deadline = time.monotonic() + 60
    while True:  # the chart may still be attaching its listeners: click until the page follows
        box = canvas.bounding_box()
        # rows are 24 px high from the plot's top (~10 px); gpu-node-3's first GPU is row 5
        page.mouse.click(box["x"] + box["width"] * 0.4, box["y"] + 10 + 24 * 4.5)
        try:
            page.wait_for_selector(f"text={want}", timeout=3_000)
            return
        except PlaywrightTimeout:
            assert time.monotonic() < deadline, "clicking the heatmap never selected the GPU"


def test_dashboard_in_headless_chromium(served, artifacts_dir):
    url, db = served
    con = duckdb.connect(str(db), read_only=True)
    util = con.execute("SELECT sum(sm_util_s) / sum(metered_s) FROM gpu_hour").fetchone()[0]
    con.close()
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 1500})
        page.goto(url)
        page.wait_for_selector("text=Fleet utilization", timeout=60_000)
        page.wait_for_selector("[data-testid=stTable] td", timeout=60_000)
        page.wait_for_selector("canvas, svg.marks", timeout=60_000)   # a Vega chart drew
        body = page.inner_text("body")
        assert fmt.pct(util) in body
        for tenant, display_name, *_ in TENANTS:
            assert tenant in body and display_name in body
        page.screenshot(path=str(artifacts_dir / "dashboard-fleet.png"), full_page=True)
        for name, marker in (("tenants", "GPU-hours by tenant"), ("waste", "Idle reservations")):
            page.goto(url + name)
            page.wait_for_selector(f"text={marker}", timeout=60_000)
            page.wait_for_selector("canvas, svg.marks", timeout=60_000)
            page.screenshot(path=str(artifacts_dir / f"dashboard-{name}.png"), full_page=True)
        click_through_heatmap(page, url)
        page.screenshot(path=str(artifacts_dir / "dashboard-gpus.png"), full_page=True)
    assert (artifacts_dir / "dashboard-fleet.png").stat().st_size > 10_000
