"""A real headless Chromium against `slicemeter dashboard --tenant acme` and against the
dashboard signed in through proxy headers: tenant acme's view shows no row, total or
download of another tenant, on every page.

Tables drawn on a canvas (st.dataframe) and charts have no text in the page, so besides
the page's text every websocket frame the server sends the browser is searched: another
tenant's rows would have to travel in one of them."""
from __future__ import annotations

import contextlib
import csv
import io
from decimal import Decimal

import pyarrow.parquet as pq
import pytest

from slicemeter.dashboard import fmt
from slicemeter.testkit.fleet_fixture import NODES, SLICES, TENANTS, build_fleet_db
from slicemeter.chargeback.bill import compute_bill
from slicemeter.store import connect
from slicemeter.testkit.browser import chromium, serve_dashboard

pytestmark = pytest.mark.browser
MONTH = "2026-11"
# what would show that another tenant's data reached acme's view
OTHERS = sorted({w for t, name, _api, cc in TENANTS[1:] for w in (t, name, cc)}
                | {n for n, (t, _m) in NODES.items() if t != "acme"}
                | {s.pod for n, specs in SLICES.items() if NODES[n][0] != "acme" for s in specs})
ACME_PODS = {s.pod for n, specs in SLICES.items() if NODES[n][0] == "acme" for s in specs}
# each page, and what shows that it has rendered to its end (Streamlit draws as the script runs)
PAGES = [("", ["text=Fleet utilization", "[data-testid=stTable] td", "canvas, svg.marks"]),
         ("tenants", ["text=Total (", "text=By namespace", "canvas, svg.marks"]),
         ("problems", ["text=/Allocated but idle: allocated at least/"]),
         ("gpus", ["text=Slices on a GPU", "text=/· tenant acme ·/", "canvas, svg.marks"]),
         ("waste", ["text=Energy and emissions by tenant", "text=kgCO2e", "canvas, svg.marks"]),
         ("right-sizing", ["text=GPUs freeable", "text=Placement per GPU"]),
         ("exports", ["text=Cost basis", "text=Write the"])]


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory):
    return build_fleet_db(tmp_path_factory.mktemp("browser-access") / "fleet.duckdb", MONTH)


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def seen(text: str) -> list[str]:
    return [w for w in OTHERS if w in text]


def acme_figures(db) -> tuple[str, str]:
    con = connect(db, read_only=True)
    util = con.execute("SELECT sum(sm_util_s) / sum(metered_s) FROM gpu_hour_tenant WHERE tenant = 'acme'").fetchone()[0]
    invoice = compute_bill(con, MONTH, "allocation", "platform", tenant="acme").invoice
    con.close()
    return fmt.pct(util), fmt.money(sum(invoice["cost"], Decimal(0)))


def record_frames(page) -> list[bytes]:
    """Every websocket frame the server sends this page, from now on."""
    frames: list[bytes] = []
    page.on("websocket", lambda ws: ws.on(
        "framereceived", lambda payload: frames.append(payload if isinstance(payload, bytes) else payload.encode())))
    return frames


def visit_every_page(page, url: str, artifacts_dir, name: str, pages=PAGES) -> dict[str, str]:
    texts = {}
    frames = record_frames(page)
    for path, markers in pages:
        page.goto(url + path)
        for marker in markers:
            page.wait_for_selector(marker, timeout=60_000)
        texts[path or "fleet"] = page.inner_text("body")
        page.screenshot(path=str(artifacts_dir / f"{name}-{path or 'fleet'}.png"), full_page=True)
    texts["websocket"] = b"".join(frames).decode("utf-8", "replace")
    return texts


def download_exports(page, url: str) -> dict[str, bytes]:
    page.goto(url + "exports")
    page.get_by_role("button", name=f"Write the {MONTH} files").click()
    page.wait_for_selector("text=Download invoice", timeout=120_000)
    files = {}
    for button in page.get_by_role("button", name="Download").all():
        with page.expect_download() as dl:
            button.click()
        d = dl.value
        files[d.suggested_filename] = open(d.path(), "rb").read()
    return files


def cells(name: str, blob: bytes) -> list[str]:
    if name.endswith(".csv"):
        return [c for row in csv.reader(io.StringIO(blob.decode())) for c in row]
    return [str(v) for col in pq.read_table(io.BytesIO(blob)).columns for v in col.to_pylist()]


def test_tenant_dashboard_shows_and_exports_only_that_tenant(fleet_db, browser, artifacts_dir, tmp_path):
    util, total = acme_figures(fleet_db)
    with serve_dashboard(fleet_db, tmp_path / "dashboard.log", "--tenant", "acme") as url:
        page = browser.new_page(viewport={"width": 1440, "height": 1500})
        texts = visit_every_page(page, url, artifacts_dir, "dashboard-tenant-acme")
        files = download_exports(page, url)
    assert util in texts["fleet"] and "ACME Research" in texts["fleet"]     # acme's own figures
    assert total in texts["tenants"]                                          # acme's bill, not the fleet's
    assert "Tenant: acme" in texts["fleet"]
    assert {p: seen(t) for p, t in texts.items() if seen(t)} == {}
    # the frames carry the canvas tables' rows: acme's slices are there, nobody else's
    assert ACME_PODS <= {p for p in ACME_PODS if p in texts["websocket"]} and len(texts["websocket"]) > 10_000
    assert sorted(files) == [f"detail-{MONTH}-acme.parquet", f"focus-{MONTH}-acme.csv",
                             f"focus-{MONTH}-acme.parquet", f"invoice-{MONTH}-acme.csv"]
    for name, blob in files.items():
        c = cells(name, blob)
        # no other tenant's cell, nor the platform's idle line (the fleet's capacity nobody paid)
        assert "acme" in c and not [x for x in c if x in {*OTHERS, "platform"} or seen(x)], name
    inv = list(csv.DictReader(io.StringIO(files[f"invoice-{MONTH}-acme.csv"].decode())))
    assert fmt.money(sum(Decimal(r["cost"]) for r in inv)) == total
    focus = list(csv.DictReader(io.StringIO(files[f"focus-{MONTH}-acme.csv"].decode())))
    assert {r["ResourceName"].split("/")[1] for r in focus} == ACME_PODS   # every acme slice, no other


@contextlib.contextmanager
def signed_in(browser, email: str, groups: str):
    """A page whose requests carry the sign-in proxy's headers for `email` in `groups`."""
    context = browser.new_context(extra_http_headers={"X-Forwarded-Email": email, "X-Forwarded-Groups": groups})
    try:
        yield context.new_page()
    finally:
        context.close()


def test_signed_in_user_sees_the_tenants_of_their_groups(fleet_db, browser, artifacts_dir, tmp_path):
    cfg = tmp_path / "access.yaml"
    cfg.write_text("groups:\n  acme-finops: [acme]\n  finance: [acme, globex]\n  platform-ops: '*'\n")
    with serve_dashboard(fleet_db, tmp_path / "dashboard.log", "--access", str(cfg)) as url:
        ann = browser.new_context(viewport={"width": 1440, "height": 1500}, extra_http_headers={
            "X-Forwarded-Email": "ann@acme.example", "X-Forwarded-Groups": "staff,acme-finops"})
        texts = visit_every_page(ann.new_page(), url, artifacts_dir, "dashboard-signed-in-acme")
        ann.close()
        anonymous = browser.new_page()
        anonymous.goto(url)
        anonymous.wait_for_selector("text=No single signed-in user", timeout=60_000)
        nobody_text = anonymous.inner_text("body")
        with signed_in(browser, "eve@example", "staff") as eve_page:
            eve_page.goto(url + "tenants")
            eve_page.wait_for_selector("text=none of your groups may see a tenant", timeout=60_000)
            eve_text = eve_page.inner_text("body")
        with signed_in(browser, "op@platform", "platform-ops") as ops_page:
            ops_page.goto(url)
            ops_page.wait_for_selector("[data-testid=stTable] td", timeout=60_000)
            ops_text = ops_page.inner_text("body")
        # granted two tenants: a picker, acme first; choosing globex shows globex alone
        with signed_in(browser, "fin@corp", "finance") as fin_page:
            fin_page.goto(url)
            fin_page.wait_for_selector("[data-testid=stTable] td", timeout=60_000)
            fin_acme = fin_page.inner_text("[data-testid=stTable]")
            fin_page.locator("[data-testid=stSidebar] [data-testid=stSelectbox]").filter(has_text="Tenant").click()
            fin_page.get_by_role("option", name="globex").click()
            fin_page.wait_for_selector("text=Tenant: globex", timeout=60_000)
            fin_page.wait_for_selector("[data-testid=stTable] td:has-text('Globex Inference')", timeout=60_000)
            fin_globex = fin_page.inner_text("[data-testid=stTable]")
    assert "Signed in as ann@acme.example" in texts["fleet"] and "Tenant: acme" in texts["fleet"]
    assert {p: seen(t) for p, t in texts.items() if seen(t)} == {}
    for text in (nobody_text, eve_text):
        assert "ACME Research" not in text and "Fleet utilization" not in text and not seen(text)
    assert all(name in ops_text for _t, name, *_ in TENANTS)   # the platform group sees every tenant
    assert "ACME Research" in fin_acme and "Globex" not in fin_acme
    assert "Globex Inference" in fin_globex and "ACME" not in fin_globex and "Initech" not in fin_globex
