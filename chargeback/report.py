"""The sharing dividend as text a platform team can send round: a terminal table, Markdown
and HTML (pure: a Report in, a string out)."""
from __future__ import annotations

import html
from decimal import Decimal

from slicemeter.chargeback.dividend import ENTERPRISE_BAND, Figures, Report, in_band

# (column heading, how one scope's figures read in it)
COLUMNS: list[tuple[str, object]] = [
    ("scope", lambda f, r: f.scope),
    ("GPUs", lambda f, r: str(f.gpus)),
    ("containers", lambda f, r: str(f.containers)),
    ("in use", lambda f, r: f"{f.gpus_in_use:.1f}"),
    ("whole-GPU need", lambda f, r: f"{f.gpus_needed:.1f}"),
    ("sharing", lambda f, r: _x(f.sharing_factor)),
    ("per GPU", lambda f, r: "–" if f.containers_per_gpu is None else f"{f.containers_per_gpu:.2f}"),
    ("utilization", lambda f, r: _pct(f.utilization)),
    ("unshared", lambda f, r: _pct(f.utilization_unshared)),
    ("GPUs avoided", lambda f, r: f"{f.gpus_avoided:.1f}"),
    ("cost avoided / month", lambda f, r: _money(f.monthly_cost_avoided, f.currency)),
    ("kWh avoided", lambda f, r: f"{f.kwh_avoided:,.1f}"),
    ("kgCO2e avoided", lambda f, r: f"{f.co2e_kg_avoided:,.1f}"),
    ("GPU cost", lambda f, r: _money(f.gpu_cost, f.currency)),
]


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}x"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v * 100:.1f} %"


def _money(v: Decimal, currency: str | None) -> str:
    return "–" if currency is None else f"{v:,.2f} {currency}"


def headline(report: Report) -> str:
    """One sentence: the figure the platform exists for."""
    f = report.fleet
    if f.sharing_factor is None:
        return f"{report.month}: no container slices metered."
    lo, hi = ENTERPRISE_BAND
    return (f"{report.month}: {f.containers} containers on {f.gpus_in_use:.1f} GPUs in use, "
            f"{f.sharing_factor:.1f}x the users the same hardware serves with whole GPUs; "
            f"{f.gpus_avoided:.1f} GPUs avoided ({_money(f.monthly_cost_avoided, f.currency)} a month at catalog "
            f"prices, {f.kwh_avoided:,.0f} kWh, {f.co2e_kg_avoided:,.0f} kgCO2e); utilization "
            f"{_pct(f.utilization)}, {in_band(f.utilization)} the {lo * 100:.0f}-{hi * 100:.0f} % enterprise band "
            f"(it would be {_pct(f.utilization_unshared)} on whole GPUs).")


def rows(report: Report) -> list[list[str]]:
    scopes: list[Figures] = [report.fleet, *report.tenants]
    return [[fn(f, report) for _, fn in COLUMNS] for f in scopes]


def degraded_note(degraded: list[tuple[str, float, int]]) -> str:
    """Each tenant's (tenant, allocated GPU-hours on degraded GPU-hours, degraded GPU-hours
    touched) as one sentence (docs/health.md)."""
    listed = ", ".join(f"{t} {h:,.2f} GPU-h on {n} degraded GPU-hours" for t, h, n in degraded if n)
    return ("Degraded GPUs (a critical Xid, an uncorrectable ECC error, lost, or throttled past the catalog's "
            f"share of the hour): {listed or 'no tenant sat on one'}.")


def notes(report: Report, degraded: list[tuple[str, float, int]] | None = None) -> list[str]:
    out = [f"Period: {report.month}, {report.fleet.hours} of {report.month_hours} hours metered; "
           "monthly figures are this period's rate over the whole month.",
           f"Carbon intensity: {report.carbon_g_per_kwh:g} gCO2e/kWh (the price catalog's "
           "electricity.carbon_g_per_kwh).",
           "Idle power per avoided GPU (measured floor): "
           + (", ".join(f"{m} {w:.0f} W" for m, w in sorted(report.idle_watts.items())) or "none measured") + "."]
    if report.unpriced_models:
        out.append(f"No catalog price for: {', '.join(report.unpriced_models)} (left out of the money).")
    if degraded is not None:
        out.append(degraded_note(degraded))
    return out


def render_text(report: Report, degraded: list[tuple[str, float, int]] | None = None) -> str:
    table = [[h for h, _ in COLUMNS], *rows(report)]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join([headline(report), "", *lines, "", *notes(report, degraded)]) + "\n"


def render_markdown(report: Report, degraded: list[tuple[str, float, int]] | None = None) -> str:
    head = [h for h, _ in COLUMNS]
    out = [f"# Sharing dividend, {report.month}", "", headline(report), "",
           "| " + " | ".join(head) + " |", "|" + "|".join([" --- "] + [" ---: "] * (len(head) - 1)) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows(report)]
    out += ["", *(f"- {n}" for n in notes(report, degraded)), "",
            "Definitions: docs/dividend.md in the slicemeter repository."]
    return "\n".join(out) + "\n"


def render_html(report: Report, degraded: list[tuple[str, float, int]] | None = None) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h, _ in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows(report))
    items = "".join(f"<li>{e(n)}</li>" for n in notes(report, degraded))
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Sharing dividend, {e(report.month)}</title>"
            "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}"
            "td:first-child,th:first-child{text-align:left}table{border-collapse:collapse}"
            "tr:nth-child(even){background:#f4f4f4}</style></head><body>"
            f"<h1>Sharing dividend, {e(report.month)}</h1><p>{e(headline(report))}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table><ul>{items}</ul>"
            "</body></html>\n")
