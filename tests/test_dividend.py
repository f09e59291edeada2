"""The sharing dividend against a scenario computed by hand, on a real DuckDB store:
12 containers on 4 A100s (3 per GPU) that would need 12 whole GPUs, beside one A100 of
another tenant with no container, for all of November (720 hours)."""
from __future__ import annotations

import subprocess
import sys
from decimal import Decimal

import pytest

from slicemeter.testkit.cb_rows import A100, A100_BYTES, ACME, GLOBEX, open_store
from slicemeter.chargeback import report
from slicemeter.chargeback.dividend import dividend, in_band
from slicemeter.chargeback.prices import parse_prices_text

PRICES = parse_prices_text("""
currency: USD
gpu_hour: {"NVIDIA A100-SXM4-80GB": "2.40"}
electricity: {price_per_kwh: "0.14", carbon_g_per_kwh: 320}
""")


def fill(con, hours: int) -> None:
    """Busy GPUs draw 200 W and run 30 % SM; the idle one draws 60 W (the idle floor)."""
    con.execute("""
        INSERT INTO gpu_hour (hour, cluster, node, gpu_uuid, model, memory_total_bytes, metered_s,
                              sample_count, sm_util_s, memory_used_byte_s, energy_joules)
        SELECT TIMESTAMP '2026-11-01' + INTERVAL (h) HOUR, c, n, 'GPU-' || g, $model, $bytes, 3600, 360,
               CASE WHEN g < 4 THEN 0.3 * 3600 ELSE 0 END, 0, CASE WHEN g < 4 THEN 200 ELSE 60 END * 3600
        FROM range($hours) t(h),
             (VALUES (0, $acme, 'node-a'), (1, $acme, 'node-a'), (2, $acme, 'node-a'), (3, $acme, 'node-a'),
                     (4, $globex, 'node-g')) gpus(g, c, n)""",
                {"model": A100, "bytes": A100_BYTES, "hours": hours, "acme": ACME, "globex": GLOBEX})
    con.execute("""
        INSERT INTO slice_hour (hour, cluster, node, gpu_uuid, namespace, pod, pod_uid, container, whole_gpu,
               metered_s, sample_count, alloc_memory_bytes, alloc_cores_ratio, alloc_mem_share_s,
               alloc_cores_share_s, alloc_dominant_share_s, used_mem_share_s, used_sm_share_s, usage_share_s,
               memory_used_byte_s, hami_nvml_disagree_s)
        SELECT TIMESTAMP '2026-11-01' + INTERVAL (h) HOUR, $acme, 'node-a', 'GPU-' || (k // 3), 'ml',
               'pod-' || k, 'uid-' || k, 'main', false, 3600, 360, 0, 0.25, 900, 900, 900, 360, 360, 360, 0, 0
        FROM range($hours) t(h), range(12) c(k)""", {"hours": hours, "acme": ACME})


@pytest.fixture
def store(tmp_path):
    with open_store(tmp_path / "s.duckdb") as con:
        yield con


def test_twelve_containers_on_four_gpus(store):
    fill(store, 720)
    rep = dividend(store, "2026-11", PRICES)
    f = rep.fleet
    assert (f.hours, f.gpus, f.containers) == (720, 5, 12)
    assert f.gpus_in_use == pytest.approx(4.0) and f.gpus_needed == pytest.approx(12.0)
    assert f.sharing_factor == pytest.approx(3.0)                  # 3.0x the users on the same hardware
    assert f.gpus_avoided == pytest.approx(8.0)
    assert f.containers_per_gpu == pytest.approx(12 / 5)          # the idle GPU counts as hardware
    assert f.cost_avoided == Decimal("13824.00")                  # 8 GPUs x $2.40 x 720 h
    assert f.monthly_cost_avoided == Decimal("13824.00")          # a complete month: the same
    assert f.gpu_cost == Decimal("8640.00")                       # 5 GPUs x $2.40 x 720 h
    assert rep.idle_watts == {A100: pytest.approx(60.0)}
    assert f.kwh_avoided == pytest.approx(8 * 720 * 60 / 1000)    # 345.6 kWh at the idle floor
    assert f.co2e_kg_avoided == pytest.approx(345.6 * 320 / 1000)
    assert f.utilization == pytest.approx(4 * 0.3 / 5)            # 24 %: within the band
    assert in_band(f.utilization) == "within"
    assert f.utilization_unshared == pytest.approx(4 * 0.3 / 12)  # 10 % on whole GPUs
    acme, globex = rep.tenants
    assert (acme.scope, acme.sharing_factor, acme.cost_avoided) == ("acme", pytest.approx(3.0), Decimal("13824.00"))
    assert (globex.scope, globex.sharing_factor, globex.gpus_avoided, globex.containers) == ("globex", None, 0.0, 0)
    assert len(rep.daily) == 30 and rep.daily["sharing_factor"].tolist() == pytest.approx([3.0] * 30)
    assert rep.daily["gpus_avoided"].tolist() == pytest.approx([8.0] * 30)


def test_month_to_date_runs_the_rate_over_the_month(store):
    fill(store, 36)
    f = dividend(store, "2026-11", PRICES).fleet
    assert f.hours == 36 and f.sharing_factor == pytest.approx(3.0)
    assert f.cost_avoided == Decimal("691.20")                    # 8 x 2.40 x 36
    assert f.monthly_cost_avoided == Decimal("13824.00")          # its rate over 720 hours


def test_report_text_markdown_and_html(store, tmp_path):
    fill(store, 24)
    rep = dividend(store, "2026-11", PRICES)
    text = report.render_text(rep)
    assert "3.0x the users" in text and "8.0 GPUs avoided" in text and "13,824.00 USD a month" in text
    md = report.render_markdown(rep)
    assert md.startswith("# Sharing dividend, 2026-11") and "| fleet | 5 | 12 | 4.0 | 12.0 | 3.00x |" in md
    assert "<td>3.00x</td>" in report.render_html(rep)


def test_report_cli_writes_the_files(store, tmp_path):
    fill(store, 24)
    store.close()
    prices = tmp_path / "prices.yaml"
    prices.write_text('currency: EUR\ngpu_hour: {"NVIDIA A100-SXM4-80GB": "2.00"}\n'
                      'electricity: {carbon_g_per_kwh: 50}\n')
    cli = [sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())", "report"]
    md, page = tmp_path / "r" / "dividend.md", tmp_path / "r" / "dividend.html"
    done = subprocess.run([*cli, "--db", str(tmp_path / "s.duckdb"), "--month", "2026-11", "--prices", str(prices),
                           "--out", str(md), "--out", str(page)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "11,520.00 EUR a month" in done.stdout                # 8 x 2.00 x 720
    assert "50 gCO2e/kWh" in done.stdout                         # the configured carbon intensity
    assert md.read_text().startswith("# Sharing dividend") and page.read_text().startswith("<!doctype html>")
    bad = subprocess.run([*cli, "--db", str(tmp_path / "s.duckdb"), "--month", "2026-13"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--month" in bad.stderr
