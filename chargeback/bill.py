"""Chargeback: a month's GPU cost split into tenant charges, idle and corrections.

Definitions (docs/chargeback.md): per GPU-hour,
each slice pays price x its share-hours on the chosen basis, shares scaled so that a
GPU-hour is never billed above its metered time; what nobody paid for is idle, kept on a
platform line or shared to tenants in proportion to their charges. The SQL macros in
sql/views/100_chargeback.sql produce exact integer raw amounts (chargeback/money.py); this
module applies the idle policy, closed-month corrections and the one cent rounding pass,
and checks the invariant (InvariantError) before any caller can write a file.

`chargeback(con, month, ...)` is the API the exports and the dashboard use.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal
from operator import itemgetter

import pandas as pd
import pyarrow as pa

from slicemeter.chargeback import money
from slicemeter.chargeback.kept import kept_current, unverified_slice_hours
from slicemeter.chargeback.prices import DEFAULT_PRICES, PriceCatalog, load_prices, parse_prices_text
from slicemeter.store import is_reader_file, registered, sql_text
from slicemeter.common import ConfigError, check_choice, month_bounds, named

BASES = ("allocation", "usage", "max")
IDLE_POLICIES = ("platform", "shared")
SHARES = ("dominant", "memory", "cores")
PLATFORM_TENANT = "platform"
IDLE_NAMESPACE = "(idle)"        # not a valid Kubernetes namespace, so never a real one

# Raw line fields that are summed and differenced (all exact ints).
_SUMS = ("cost_raw", "charge_raw", "waste_raw", "alloc_u", "used_u", "billed_u", "idle_u", "energy_mj", "unverified_u",
         "unknown_u", "unverified_alloc_u")
# A line's identity inside a month.
_KEY = ("kind", "tenant", "namespace", "pod", "pod_uid", "container", "cluster", "node", "gpu_uuid", "model")
_line_key = itemgetter(*_KEY)
# What a line says beside its identity and sums: its price, and the DRA claim and driver of
# its slices ('' for the device plugin's) or, on an idle line, of its GPU
_LABELS = ("price_micro", "claim", "driver")


parse_month = month_bounds   # '2026-11' -> (2026-11-01, 2026-12-01); ValueError names a bad value


def month_str(d: date) -> str:
    return f"{d.year:04d}-{d.month:02d}"


def billed_basis(basis: str, catalog: PriceCatalog) -> str:
    """The basis the SQL bills (sql/views/100_chargeback.sql cb_slice_shares): the usage basis
    under the catalog's `unverified_usage: allocation` is `usage_checked`, where a slice-hour's
    unchecked usage is billed at least at its allocation share."""
    return "usage_checked" if basis == "usage" and catalog.unverified_usage == "allocation" else basis


def check_options(basis: str, idle: str, share: str) -> None:
    for name, value, choices in (("basis", basis, BASES), ("idle", idle, IDLE_POLICIES), ("share", share, SHARES)):
        with named(name):
            check_choice(value, choices)


# ---------------------------------------------------------------- pure money steps

def apply_idle(slice_lines: list[dict], gpu_lines: list[dict], idle: str) -> list[dict]:
    """Raw month lines from slice and GPU aggregates under an idle policy (pure).
    platform: each GPU's idle is a platform line. shared: the month's idle is split over
    the slice lines in proportion to their charges (exactly, by largest remainder); with
    no charges at all it stays on the platform lines."""
    lines = [dict(s, kind="usage", cost_raw=s["charge_raw"], idle_u=0) for s in slice_lines]
    idle_total = sum(g["idle_raw"] for g in gpu_lines)
    parts = []
    if idle == "shared" and idle_total:
        parts = money.split_proportional(idle_total, [ln["charge_raw"] for ln in lines])
        for ln, part in zip(lines, parts):
            ln["cost_raw"] += part
    for g in gpu_lines:
        lines.append({
            "kind": "idle", "tenant": PLATFORM_TENANT, "namespace": IDLE_NAMESPACE, "pod": "",
            "pod_uid": "", "container": "", "cluster": g["cluster"], "node": g["node"],
            "gpu_uuid": g["gpu_uuid"], "model": g["model"], "price_micro": g["price_micro"],
            "cost_raw": 0 if parts else g["idle_raw"], "charge_raw": 0, "waste_raw": 0,
            "alloc_u": 0, "used_u": 0, "billed_u": 0, "idle_u": g["idle_u"],
            "energy_mj": g["idle_energy_mj"], "unverified_u": 0, "unknown_u": 0, "unverified_alloc_u": 0,
            "claim": "", "driver": g.get("driver", ""),
        })
    return lines


def diff_lines(new: list[dict], old: list[dict]) -> list[dict]:
    """Correction lines: new - old per line identity, non-zero ones only (pure). Labels
    (_LABELS) are the new line's where there is one."""
    index: dict[tuple, dict] = {}
    for ln in old:
        k = _line_key(ln)
        index[k] = {c: -ln.get(c, 0) for c in _SUMS} | {c: ln[c] for c in _KEY} | _labels(ln)
    for ln in new:
        k = _line_key(ln)
        cur = index.setdefault(k, {c: 0 for c in _SUMS} | {c: ln[c] for c in _KEY})
        for c in _SUMS:
            cur[c] += ln.get(c, 0)
        cur.update(_labels(ln))
    out = [v for v in index.values() if any(v[c] for c in _SUMS)]
    return sorted(out, key=_line_key)


def _labels(line: dict) -> dict:
    return {c: line.get(c, "") for c in _LABELS}


def credit_lines(degraded: list[dict], fraction: Decimal) -> list[dict]:
    """Credit lines (pure): per slice line billed on degraded GPU-hours (`degraded_u`
    micro-seconds at `price_micro`), `fraction` of that charge given back, floored to whole
    raw units, as a negative line of kind credit with no GPU-hours (docs/health.md)."""
    f = money.price_to_micro(fraction)
    out = []
    for d in degraded:
        raw = d["price_micro"] * d["degraded_u"] * f // money.PRICE_SCALE
        if raw:
            out.append({c: d[c] for c in _KEY[1:]} | {
                "kind": "credit", "price_micro": d["price_micro"], "cost_raw": -raw, "charge_raw": -raw,
                "waste_raw": 0, "alloc_u": 0, "used_u": 0, "billed_u": 0, "idle_u": 0, "energy_mj": 0,
                "unverified_u": 0, "unverified_alloc_u": 0})
    return out


def check_credit_basis(degraded: list[dict], gpu_degraded: list[dict]) -> None:
    """Per GPU placement: what the slice lines were billed on degraded GPU-hours == what the
    GPU-hours say their slices were billed then (pure). InvariantError naming them."""
    lines: dict[tuple, int] = {}
    for d in degraded:
        lines[_placement_of(d)] = lines.get(_placement_of(d), 0) + d["degraded_u"]
    gpus = {_placement_of(g): g["degraded_u"] for g in gpu_degraded}
    bad = [f"{k[2]} on {k[0]} / {k[1]}: slices {lines.get(k, 0)}, GPU-hours {gpus.get(k, 0)}"
           for k in sorted(lines.keys() | gpus.keys()) if lines.get(k, 0) != gpus.get(k, 0)]
    if bad:
        raise InvariantError("micro-GPU-seconds billed on degraded GPU-hours differ for " + "; ".join(bad))


# ---------------------------------------------------------------- database steps

class InvariantError(Exception):
    """The bill does not add up (the invariant of docs/chargeback.md): an engine defect,
    never a reason to write files. The message names the GPUs and hours."""


def _hours_text(hours) -> str:
    hs = sorted(hours)
    shown = ", ".join(h.strftime("%Y-%m-%dT%H:00") for h in hs[:6])
    return shown + (f" and {len(hs) - 6} more hours" if len(hs) > 6 else "")


def _register_prices(con, catalog: PriceCatalog) -> None:
    combos = con.execute("SELECT DISTINCT cluster, node, model FROM cb_place_t ORDER BY ALL").fetchall()
    rows = []
    for c, n, m in combos:
        if m is None:
            unknown = con.execute(
                "SELECT h.hour, p.gpu_uuid FROM cb_hour_t h JOIN cb_place_t p USING (pid) "
                "WHERE p.cluster = ? AND p.node = ? AND p.model IS NULL ORDER BY h.hour", [c, n]).fetchall()
            gpus = sorted({g for _, g in unknown})
            raise ConfigError(f"GPU model unknown for {', '.join(gpus)} on node {n!r} "
                              f"(hours {_hours_text([h for h, _ in unknown])}): "
                              "no sample ever named it, so no price applies")
        rows.append((c, n, m, money.price_to_micro(catalog.price(m, n, c))))
    table = pa.table({
        "cluster": pa.array([r[0] for r in rows], pa.string()),
        "node": pa.array([r[1] for r in rows], pa.string()),
        "model": pa.array([r[2] for r in rows], pa.string()),
        "price_micro": pa.array([r[3] for r in rows], pa.int64()),
    })
    with registered(con, cb_price_arrow=table):
        con.execute("DELETE FROM cb_price")
        con.execute("INSERT INTO cb_price BY NAME SELECT * FROM cb_price_arrow")


def _fetch_dicts(cur) -> list[dict]:
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def _ints(rows: list[dict], cols: tuple[str, ...]) -> list[dict]:
    for r in rows:
        for c in cols:
            r[c] = int(r[c])
    return rows


_PLACEMENT = ("cluster", "node", "gpu_uuid", "model")
_placement_of = itemgetter(*_PLACEMENT)


def check_gpu_lines(slice_lines: list[dict], gpu_lines: list[dict]) -> None:
    """Per GPU placement: the slices' detail lines + the idle summed from GPU-hours ==
    price x metered time, in exact raw units (pure). Raises InvariantError naming them."""
    charged: dict[tuple, int] = {}
    for s in slice_lines:
        k = _placement_of(s)
        charged[k] = charged.get(k, 0) + s["charge_raw"]
    bad = []
    known = set()
    for g in gpu_lines:
        k = _placement_of(g)
        known.add(k)
        if charged.get(k, 0) + g["idle_raw"] != g["cost_raw"] or g["idle_raw"] < 0:
            bad.append(f"{g['gpu_uuid']} on {g['cluster']} / {g['node']} "
                       f"(hours {g['first_hour']:%Y-%m-%dT%H:00} to {g['last_hour']:%Y-%m-%dT%H:00}): "
                       f"charges {charged.get(k, 0)} + idle {g['idle_raw']} != cost {g['cost_raw']} raw")
    bad += [f"{k[2]} on {k[0]} / {k[1]}: charges {v} raw on no metered GPU-hour"
            for k, v in sorted(charged.items()) if k not in known and v]
    if bad:
        raise InvariantError("charges + idle != price x metered time for " + "; ".join(bad))


def check_gpu_hours(violations: list[tuple]) -> None:
    """(gpu_uuid, hour, problem) rows from cb_hour_overpaid or cb_hour_unbilled -> InvariantError (pure)."""
    if not violations:
        return
    by_gpu: dict[str, list] = {}
    for gpu, hour, problem in violations:
        by_gpu.setdefault(gpu, []).append((hour, problem))
    parts = [f"{gpu} at {_hours_text([h for h, _ in rows])} ({rows[0][1]})" for gpu, rows in sorted(by_gpu.items())]
    raise InvariantError("GPU-hours that do not add up: " + "; ".join(parts))


def _slice_lines(con) -> list[dict]:
    """The month's slice lines from cb_detail_t, in a fixed order."""
    return _ints(_fetch_dicts(con.execute(
        "SELECT * EXCLUDE (slice_hours) FROM cb_detail_t "
        "ORDER BY tenant, namespace, pod, pod_uid, container, cluster, node, gpu_uuid, model")),
        ("alloc_u", "used_u", "billed_u", "charge_raw", "waste_raw", "energy_mj"))


# GPU-hours per pass over the slice-hours: the month is computed in spans of hours of about
# this many GPU-hours, so that the per-GPU-hour hash tables of a pass stay in memory (and in
# cache) whatever the fleet's size; per-slice sums of the spans are added up afterwards.
SPAN_GPU_HOURS = 1_500_000


def hour_spans(m_start: date, m_end: date, gpus: int) -> list[tuple[datetime, datetime]]:
    """[m_start, m_end) cut into consecutive spans of whole hours, each about SPAN_GPU_HOURS
    GPU-hours of `gpus` GPUs (pure)."""
    start, end = datetime.combine(m_start, time()), datetime.combine(m_end, time())
    step = timedelta(hours=max(1, SPAN_GPU_HOURS // max(gpus, 1)))
    spans = []
    while start < end:
        spans.append((start, min(start + step, end)))
        start += step
    return spans


_FIX_PLACES = """
INSERT INTO cb_place_t
SELECT (SELECT coalesce(max(pid), 0) FROM cb_place_t) + row_number() OVER (ORDER BY cluster, node, gpu_uuid, model),
       cluster, node, gpu_uuid, model, gid
FROM (SELECT DISTINCT f.cluster, f.node, f.gpu_uuid, f.model, f.gid FROM cb_fix_t f
      WHERE NOT EXISTS (SELECT 1 FROM cb_place_t p WHERE p.cluster = f.cluster AND p.node = f.node
                        AND p.gpu_uuid = f.gpu_uuid AND p.model IS NOT DISTINCT FROM f.model));
UPDATE cb_hour_t h SET pid = x.pid
FROM (SELECT f.hour, f.gid, p.pid FROM cb_fix_t f JOIN cb_place_t p ON p.cluster = f.cluster AND p.node = f.node
      AND p.gpu_uuid = f.gpu_uuid AND p.model IS NOT DISTINCT FROM f.model) x
WHERE x.hour = h.hour AND x.gid = h.gid;
DELETE FROM cb_place_t WHERE pid NOT IN (SELECT DISTINCT pid FROM cb_hour_t WHERE pid IS NOT NULL);
"""


def fill_hours(con, args: list, share: str = "dominant", basis: str = "allocation", kept: bool = False,
               hours: bool = True) -> list[tuple]:
    """cb_hour_t: the month's GPU-hours (args: month start, end, src_asof), placed and with
    a model, with their slices' share totals; cb_gpu_id_t and cb_place_t: the GPUs and
    placements they name; `kept`: from the money kept per hour (chargeback/kept.py);
    `hours=False`: cb_hour_t left empty (a bill from the kept days). The look-ups for hours
    no GPU row placed run only where there are such hours. Returns the spans of hours the
    month is computed in (hour_spans)."""
    m_start, m_end, src = args
    fills = (("cb_gpu_id_t", "kept_gpu_ids"), ("cb_place_t", "kept_gpu_places")) if kept else (
        ("cb_gpu_id_t", "cb_gpu_ids"), ("cb_place_t", "cb_gpu_places"))
    for table, fill in fills:
        con.execute(f"DELETE FROM {table}")
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {fill}(?, ?{'' if kept else ', ?'})",
                    args[:2] if kept else args)
    con.execute("DELETE FROM cb_hour_t")
    spans = hour_spans(m_start, m_end, con.execute("SELECT count(*) FROM cb_gpu_id_t").fetchone()[0])
    if not hours:
        return spans
    if kept:
        con.execute("INSERT INTO cb_hour_t BY NAME SELECT * FROM kept_hours_placed(?, ?, ?, ?)",
                    [m_start, m_end, share, basis])
    for s_start, s_end in [] if kept else spans:
        con.execute("INSERT INTO cb_hour_t BY NAME SELECT * FROM cb_hours_placed(?, ?, ?, ?, ?)",
                    [s_start, s_end, src, share, basis])
    if not con.execute("SELECT EXISTS (SELECT 1 FROM cb_hour_t WHERE pid IS NULL) "
                       "OR EXISTS (SELECT 1 FROM cb_place_t WHERE model IS NULL)").fetchone()[0]:
        return spans
    con.execute("DELETE FROM cb_fix_t")
    con.execute("INSERT INTO cb_fix_t BY NAME SELECT * FROM cb_hours_to_fix()")
    if con.execute("SELECT EXISTS (SELECT 1 FROM cb_fix_t WHERE cluster IS NULL)").fetchone()[0]:
        con.execute("UPDATE cb_fix_t f SET cluster = p.cluster, node = p.node FROM cb_slice_placement(?, ?, ?) p "
                    "WHERE p.hour = f.hour AND p.gpu_uuid = f.gpu_uuid", args)
    if con.execute("SELECT EXISTS (SELECT 1 FROM cb_fix_t WHERE model IS NULL)").fetchone()[0]:
        con.execute("UPDATE cb_fix_t f SET model = m.model FROM cb_hour_models(?, ?, ?) m "
                    "WHERE m.hour = f.hour AND m.gpu_uuid = f.gpu_uuid", args)
    con.execute(_FIX_PLACES)
    return spans


def check_priced(con, month_start: date, src_asof: date | None, catalog: PriceCatalog) -> None:
    """ConfigError naming the GPUs and hours of a month (live, or its frozen copy src_asof)
    that no price applies to: a GPU-hour whose model no sample named, in the month or
    before it, or a model the catalog does not price."""
    fill_hours(con, [month_start, parse_month(month_str(month_start))[1], src_asof])
    _register_prices(con, catalog)


def month_lines(con, month_start: date, src_asof: date | None, catalog: PriceCatalog,
                basis: str, idle: str, share: str, use_kept: bool = False,
                by_day: bool = False, report_hours: bool = True) -> tuple[list[dict], list[dict]]:
    """Raw lines of one month's data (live rollups, or a frozen copy when src_asof is set),
    and the per-placement GPU aggregates, checked against each other before returning.
    `use_kept`: live rollups are read through the money kept per hour where it is current.
    `by_day`: on a readers' file, from the kept money summed per day where it can be
    (docs/live-bill.md, Readers' day figures). The month's GPU-hours are left in cb_hour_t
    for the unmetered report; a bill from the kept days leaves it empty unless
    `report_hours`."""
    m_end = parse_month(month_str(month_start))[1]
    args = [month_start, m_end, src_asof]
    basis = billed_basis(basis, catalog)
    # the kept hours keep usage as reported: a month with usage NVML could not check is billed
    # from the rollups where the basis puts the allocation in its place
    kept = (use_kept and src_asof is None and kept_current(con, month_start, m_end)
            and not (basis == "usage_checked" and unverified_slice_hours(con, month_start, m_end)))
    days = (kept and by_day and catalog.credit_degraded_hour is None and is_reader_file(con)
            and con.execute("SELECT kept_days_billable(?, ?)", [month_start, m_end]).fetchone()[0])
    spans = fill_hours(con, args, share, basis, kept, hours=not days or report_hours)
    _register_prices(con, catalog)
    if days and con.execute("SELECT bool_or(price_micro < 0) FROM cb_price").fetchone()[0]:
        days = False   # kept_gpu_agg_days counts no overpaid GPU-hour, which a negative price makes
        spans = fill_hours(con, args, share, basis, kept)
        _register_prices(con, catalog)
    con.execute("DELETE FROM cb_calc_sum_t")
    con.execute("DELETE FROM cb_hour_charge_t")
    if kept:
        con.execute("INSERT INTO cb_calc_sum_t BY NAME SELECT * FROM kept_calc_sums(?, ?, ?, ?)",
                    [month_start, m_end, share, basis])
        if not days and con.execute("SELECT kept_any_over(?, ?)", [month_start, m_end]).fetchone()[0]:
            con.execute("INSERT INTO cb_hour_charge_t BY NAME SELECT * FROM kept_hour_charge(?, ?, ?, ?)",
                        [month_start, m_end, share, basis])
    for s_start, s_end in [] if kept else spans:
        for table, sums in (("cb_calc_sum_t", "cb_calc_sums"), ("cb_hour_charge_t", "cb_hour_charge")):
            con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM {sums}(?, ?, ?, ?, ?)",
                        [s_start, s_end, src_asof, share, basis])
    con.execute("DELETE FROM cb_detail_t")
    con.execute("INSERT INTO cb_detail_t BY NAME SELECT * FROM cb_detail()")
    con.execute("DELETE FROM cb_calc_sum_t")
    agg = con.execute("SELECT * FROM kept_gpu_agg_days(?, ?, ?, ?)", [month_start, m_end, share, basis]) if days \
        else con.execute("SELECT * FROM cb_gpu_agg()")
    gpus = _ints(_fetch_dicts(agg),
                 ("metered_u", "cost_raw", "charged_raw", "idle_raw", "idle_u", "energy_mj", "idle_energy_mj"))
    if any(g["overpaid_hours"] for g in gpus):
        check_gpu_hours(con.execute("SELECT * FROM cb_hour_overpaid()").fetchall())
    stored = con.execute("SELECT count(*) FROM cb_slice_src(?, ?, ?)", args).fetchone()[0]
    billed = con.execute("SELECT coalesce(sum(slice_hours), 0) FROM cb_detail_t").fetchone()[0]
    if stored != billed:
        if not days:   # the GPU-hours that tell where, when they are at hand
            check_gpu_hours(con.execute("SELECT * FROM cb_hour_unbilled(?, ?, ?)", args).fetchall())
        raise InvariantError(f"{stored} slice-hours stored, {billed} billed")
    slices = _slice_lines(con)
    credits = (_credit_lines(con, args, spans, catalog, share, basis)
               if catalog.credit_degraded_hour is not None else [])
    con.execute("DELETE FROM cb_detail_t")
    con.execute("DELETE FROM cb_hour_charge_t")
    check_gpu_lines(slices, gpus)
    notes = _notes_by_line(con, args, days)
    for s in slices:
        s["idle_u"] = 0
        unverified_u, s["unknown_u"], s["claim"], s["driver"] = notes.get(_slice_key(s), _NO_NOTES)
        # the allocation basis rests on no usage, checked or not
        s["unverified_u"] = unverified_u if basis != "allocation" else 0
        # on `usage_checked` every unchecked second was billed at least at the allocation share
        s["unverified_alloc_u"] = unverified_u if basis == "usage_checked" else 0
    drivers = _gpu_drivers(con, args, days)
    for g in gpus:
        g["driver"] = drivers.get(_placement_of(g), "")
    for c in credits:          # a credit line names its slice's claim and driver, as its charge does
        _, _, c["claim"], c["driver"] = notes.get(_slice_key(c), _NO_NOTES)
        c["unknown_u"] = 0
    return apply_idle(slices, gpus, idle) + credits, gpus


def _credit_lines(con, args: list, spans: list, catalog: PriceCatalog, share: str, basis: str) -> list[dict]:
    """The month's credit lines under the catalog's credit policy, checked against the
    GPU-hours (sql/views/110_credits.sql; month_lines' working tables filled)."""
    m_start, m_end, src = args
    con.execute("DELETE FROM cb_degraded_t")
    con.execute("INSERT INTO cb_degraded_t SELECT * FROM cb_degraded_src(?, ?, ?, ?)",
                [m_start, m_end, src, catalog.throttled_share])
    sums: dict[tuple, dict] = {}
    for s_start, s_end in spans:
        for row in _fetch_dicts(con.execute(sql_text("chargeback/credit_lines.sql"),
                                            [s_start, s_end, src, share, basis])):
            cur = sums.setdefault(_slice_key(row) + (row["price_micro"],), dict(row, degraded_u=0))
            cur["degraded_u"] += int(row["degraded_u"])
    degraded = sorted(sums.values(), key=_slice_key)
    check_credit_basis(degraded, _ints(_fetch_dicts(con.execute("SELECT * FROM cb_gpu_degraded()")), ("degraded_u",)))
    return credit_lines(degraded, catalog.credit_degraded_hour)


_SLICE_KEY = _KEY[1:]   # a slice line's identity without its kind
_slice_key = itemgetter(*_SLICE_KEY)


_NO_NOTES = (0, 0, "", "")


def _notes_by_line(con, args: list, days: bool = False) -> dict[tuple, tuple[int, int, str, str]]:
    """Slice line identity -> (micro-seconds of its usage no NVML check covered, micro-seconds
    no reader measured its usage, DRA claim, DRA driver), for the lines with any
    (sql/chargeback/slice_line_notes.sql; `days`: from the kept slice-days)."""
    m_start, m_end, src = args
    cur = con.execute("SELECT * FROM kept_notes_days(?, ?)", [m_start, m_end]) if days else \
        con.execute(sql_text("chargeback/slice_line_notes.sql"), {"m_start": m_start, "m_end": m_end, "src_asof": src})
    return {_slice_key(r): (int(r["unverified_u"]), int(r["unknown_u"]), r["claim"], r["driver"])
            for r in _fetch_dicts(cur)}


def _gpu_drivers(con, args: list, days: bool = False) -> dict[tuple, str]:
    """GPU placement -> its DRA driver, for the GPUs published through DRA (`days`: from the
    kept GPU-days)."""
    m_start, m_end, src = args
    cur = con.execute("SELECT * FROM kept_drivers_days(?, ?)", [m_start, m_end]) if days else \
        con.execute(sql_text("chargeback/dra_gpu_drivers.sql"), {"m_start": m_start, "m_end": m_end, "src_asof": src})
    return {_placement_of(r): r["driver"] for r in _fetch_dicts(cur)}


def closed_months(con) -> dict[date, str]:
    """Closed month -> the price catalog text it was closed with."""
    return {r[0]: r[1] for r in con.execute("SELECT month, prices_yaml FROM closed_months ORDER BY month").fetchall()}


def next_open_month(after: date, closed: set[date]) -> date:
    d = parse_month(month_str(after))[1]
    while d in closed:
        d = parse_month(month_str(d))[1]
    return d


def _latest_asof_before(con, data_month: date, before: date) -> date | None:
    row = con.execute(
        "SELECT max(as_of) FROM frozen_gpu_hour WHERE data_month = ? AND as_of < ?", [data_month, before]
    ).fetchone()
    return row[0] if row else None


def _has_frozen(con, data_month: date, as_of: date) -> bool:
    row = con.execute(
        "SELECT count(*) FROM frozen_gpu_hour WHERE data_month = ? AND as_of = ?", [data_month, as_of]
    ).fetchone()
    return bool(row[0])


@dataclass
class Bill:
    """A month's bill: detail lines (per slice and placement / per GPU idle), the invoice
    (per tenant, namespace, model: sums of the detail lines), unmetered GPU time (per GPU,
    and per GPU-hour with the reason), totals. Money columns are Decimal."""
    month: str
    currency: str
    basis: str
    idle: str
    share: str
    detail: pd.DataFrame
    invoice: pd.DataFrame
    unmetered: pd.DataFrame
    gpu_cost: Decimal            # Σ price x metered hours of the month's own GPU-hours
    total: Decimal               # Σ detail = Σ invoice (gpu_cost - credits + corrections)
    closed: bool
    catalog: PriceCatalog = field(repr=False, default=None)
    # per GPU-hour not fully metered, as DuckDB returned it: a month of a large fleet has
    # hundreds of thousands of such hours, which the export writes from the table directly
    unmetered_hours_table: pa.Table = field(repr=False, default=None)
    # the detail as plain records (what `detail` holds): the export files are written from
    # these, not by iterating the frame, which costs seconds at fleet scale
    detail_records: list[dict] = field(repr=False, default=None)
    _unmetered_frame: pd.DataFrame = field(repr=False, default=None, init=False, compare=False)
    credits: Decimal = Decimal("0.00")   # the month's own credit lines, as a positive amount

    @property
    def unmetered_hours(self) -> pd.DataFrame:
        """unmetered_hours_table as a data frame (converted on first use)."""
        if self._unmetered_frame is None and self.unmetered_hours_table is not None:
            self._unmetered_frame = self.unmetered_hours_table.to_pandas()
        return self._unmetered_frame


_MJ_PER_KWH = Decimal(3_600_000_000)
_KWH_PLACES, _GCO2E_PLACES = Decimal("0.000001"), Decimal("0.1")


def _kwh(mj: int) -> Decimal:
    return (Decimal(mj) / _MJ_PER_KWH).quantize(_KWH_PLACES, rounding=ROUND_HALF_UP)


_DETAIL_ORDER = ["charge_class", "charge_period", "kind", "tenant", "namespace", "model", "cluster", "node",
                 "gpu_uuid", "pod", "pod_uid", "container"]
# a detail line's columns: its identity in the detail's order, then what it says of DRA
_DETAIL_KEYS = _DETAIL_ORDER + ["claim", "driver"]
INVOICE_GROUP = ["charge_class", "charge_period", "kind", "tenant", "namespace", "model"]
_invoice_group = itemgetter(*INVOICE_GROUP)
_MONEY = ("charge", "idle_share", "cost", "waste")


def round_lines(lines: list[dict]) -> list[dict]:
    """The one rounding pass (pure): raw lines in the detail's fixed order get cents.
    Per charge class and period the total is rounded half-up; it is shared out to the
    tenants (each tenant's invoice) by largest remainder, and each tenant's amount to its
    lines the same way; waste likewise. A line's idle_share is its shared idle rounded
    and kept within [0, cost] (sign of cost on corrections); charge = cost - idle_share."""
    lines = sorted(lines, key=itemgetter(*_DETAIL_ORDER))
    paths = [(ln["charge_class"], ln["charge_period"], ln["kind"] == "credit", ln["tenant"]) for ln in lines]
    # top level: each charge class and period rounded on its own, so the Regular lines
    # add up to the month's rounded GPU cost; credits apart from them, likewise
    pools: dict[tuple, list[int]] = {}
    for i, p in enumerate(paths):
        pools.setdefault(p[:3], []).append(i)
    cost, waste = [0] * len(lines), [0] * len(lines)
    for idx in pools.values():
        sub = [paths[i][3:] for i in idx]
        for col, out in (("cost_raw", cost), ("waste_raw", waste)):
            for i, v in zip(idx, money.nested_largest_remainder([lines[i][col] for i in idx], sub,
                                                                 money.RAW_PER_CENT)):
                out[i] = v
    rounded = []
    for ln, c, w in zip(lines, cost, waste):
        shared_raw = ln["cost_raw"] - ln["charge_raw"] if ln["kind"] == "usage" else 0
        charge, idle_share = money.split_rounded(c, shared_raw, money.RAW_PER_CENT)
        rounded.append(dict(ln, charge=Decimal(charge) * money.CENT, idle_share=Decimal(idle_share) * money.CENT,
                            cost=Decimal(c) * money.CENT, waste=Decimal(w) * money.CENT))
    return rounded


def _line_records(rows: list[dict], keys: list[str], catalog: PriceCatalog, with_price: bool) -> list[dict]:
    """Rounded lines as the bill's output records: GPU-hours, kWh and money as Decimal."""
    out = []
    for ln in rows:
        kwh = _kwh(ln["energy_mj"])
        row = {k: ln[k] for k in keys}
        if with_price:
            row["gpu_hour_price"] = Decimal(ln["price_micro"]) / money.PRICE_SCALE
        row.update({
            "gpu_hours_allocated": money.micro_share_to_hours(ln["alloc_u"]),
            "gpu_hours_used": money.micro_share_to_hours(ln["used_u"]),
            "gpu_hours_billed": money.micro_share_to_hours(ln["billed_u"]),
            "gpu_hours_idle": money.micro_share_to_hours(ln["idle_u"]),
            **{m: ln[m] for m in _MONEY},
            "kwh": kwh,
            "energy_cost": (kwh * catalog.price_per_kwh).quantize(money.CENT, rounding=ROUND_HALF_UP),
            "gco2e": (kwh * catalog.carbon_g_per_kwh).quantize(_GCO2E_PLACES, rounding=ROUND_HALF_UP),
            "currency": catalog.currency,
            # hours of the line's slices whose usage nobody could check (usage and max bases)
            "usage_unverified_hours": money.micro_share_to_hours(ln["unverified_u"]),
            # hours of the line's slices whose usage no reader measured (allocation stood in)
            "usage_unknown_hours": money.micro_share_to_hours(ln["unknown_u"]),
            # of its unverified hours, those billed at least at the allocation share (the usage
            # basis under `unverified_usage: allocation`)
            "unverified_at_allocation_hours": money.micro_share_to_hours(ln["unverified_alloc_u"]),
            "cost_raw": ln["cost_raw"],
        })
        out.append(row)
    return out


def _frame(records: list[dict], keys: list[str], with_price: bool) -> pd.DataFrame:
    cols = keys + (["gpu_hour_price"] if with_price else []) + [
        "gpu_hours_allocated", "gpu_hours_used", "gpu_hours_billed", "gpu_hours_idle", *_MONEY,
        "kwh", "energy_cost", "gco2e", "currency", "usage_unverified_hours", "usage_unknown_hours",
        "unverified_at_allocation_hours", "cost_raw"]
    return pd.DataFrame(records, columns=cols)


def _invoice_rows(rounded: list[dict]) -> list[dict]:
    """Invoice lines: sums of the rounded detail lines per INVOICE_GROUP (pure)."""
    acc: dict[tuple, dict] = {}
    for ln in rounded:
        k = _invoice_group(ln)
        cur = acc.setdefault(k, {c: ln[c] for c in INVOICE_GROUP} | {c: 0 for c in _SUMS}
                             | {m: Decimal("0.00") for m in _MONEY})
        for c in _SUMS + _MONEY:
            cur[c] += ln[c]
    return list(acc.values())


def check_rounded(rounded: list[dict], gpu_cost_raw: int) -> None:
    """After rounding (pure): the Regular lines add up to the rounded GPU cost (and their raw
    amounts to the exact cost); every line has cost = charge + idle_share with neither of
    the opposite sign to cost. InvariantError naming the lines otherwise."""
    regular = [ln for ln in rounded if ln["charge_class"] == "Regular" and ln["kind"] != "credit"]
    raw = sum(ln["cost_raw"] for ln in regular)
    if raw != gpu_cost_raw:
        raise InvariantError(f"the month's lines hold {raw} raw units, its GPU-hours cost {gpu_cost_raw}")
    cents = sum(ln["cost"] for ln in regular)
    want = Decimal(money.round_half_up_div(gpu_cost_raw, money.RAW_PER_CENT)) * money.CENT
    if cents != want:
        raise InvariantError(f"the month's rounded lines add up to {cents}, its rounded GPU cost is {want}")
    credits = [ln for ln in rounded if ln["charge_class"] == "Regular" and ln["kind"] == "credit"]
    credit_cents = sum((ln["cost"] for ln in credits), Decimal("0.00"))
    credit_want = Decimal(money.round_half_up_div(sum(ln["cost_raw"] for ln in credits), money.RAW_PER_CENT)) * money.CENT
    if credit_cents != credit_want or any(ln["cost"] > 0 or ln["idle_share"] for ln in credits):
        raise InvariantError(f"the month's rounded credits add up to {credit_cents}, its credits are {credit_want}")
    bad = [ln for ln in rounded
           if ln["charge"] + ln["idle_share"] != ln["cost"]
           or (ln["cost"] >= 0 and (ln["charge"] < 0 or ln["idle_share"] < 0))
           or (ln["cost"] < 0 and (ln["charge"] > 0 or ln["idle_share"] > 0))]
    if bad:
        raise InvariantError("lines whose charge and idle_share do not make up their cost: " + "; ".join(
            f"{ln['tenant']} {ln['pod']} on {ln['gpu_uuid']}: {ln['charge']} + {ln['idle_share']} != {ln['cost']}"
            for ln in bad[:5]))


def _unmetered_report(con, m_start: date, m_end: date) -> tuple[pd.DataFrame, pa.Table]:
    """Per GPU, and per GPU-hour with the reason, of the GPU-hours month_lines left in cb_hour_t."""
    return (con.execute("SELECT * FROM cb_unmetered(?, ?)", [m_start, m_end]).df(),
            con.sql("SELECT * FROM cb_unmetered_hours(?, ?)", params=[m_start, m_end]).to_arrow_table())


def compute_bill(con, month: str, basis: str = "allocation", idle: str = "platform",
                 share: str = "dominant", prices: PriceCatalog | str | None = None,
                 tenant: str | None = None, unmetered: bool = True, detail_lines: bool = True) -> Bill:
    """The whole bill of an invoice month: its own data (Regular lines) plus corrections
    for closed months whose next open month it is. A closed month is computed from its
    frozen copy with the catalog it was closed with, so it never changes. Raises
    InvariantError (and nothing is to be written) when the money does not add up.
    `unmetered=False` leaves out the unmetered GPU-time report (empty frames), which the
    money does not depend on: readers of the invoice alone skip a month-long pass (on a
    readers' file the money comes from its kept days either way); `detail_lines=False` leaves out
    the detail (an empty frame; the invoice is computed from the same rounded lines)."""
    check_options(basis, idle, share)
    with named("month"):
        m_start, m_end = parse_month(month)
    closed = closed_months(con)
    if m_start in closed:
        catalog = parse_prices_text(closed[m_start], f"closed month {month} prices")
        src = m_start
    else:
        catalog = prices if isinstance(prices, PriceCatalog) else load_prices(prices or DEFAULT_PRICES)
        src = None
    # corrections (closed months C < M whose late data this invoice carries) come first: the
    # month's own computation leaves its GPU-hours in the working tables for the unmetered report
    corrections = []
    for c_month in sorted(closed):
        if c_month >= m_start:
            continue
        if m_start in closed:
            if not _has_frozen(con, c_month, m_start):
                continue
            new_src = m_start
        else:
            if next_open_month(c_month, set(closed)) != m_start:
                continue
            new_src = None
        old_src = _latest_asof_before(con, c_month, m_start)
        c_catalog = parse_prices_text(closed[c_month], f"closed month {month_str(c_month)} prices")
        new, _ = month_lines(con, c_month, new_src, c_catalog, basis, idle, share)
        old, _ = month_lines(con, c_month, old_src, c_catalog, basis, idle, share)
        for ln in diff_lines(new, old):
            ln["charge_class"], ln["charge_period"] = "Correction", month_str(c_month)
            corrections.append(ln)

    # a readers' file bills from its kept days; the unmetered report reads the month's GPU-hours
    lines, gpus = month_lines(con, m_start, src, catalog, basis, idle, share, use_kept=True, by_day=True,
                              report_hours=unmetered)
    for ln in lines:
        ln["charge_class"], ln["charge_period"] = "Regular", month
    lines += corrections
    gpu_cost_raw = sum(g["cost_raw"] for g in gpus)
    # DuckDB releases the GIL: the unmetered report runs beside the rounding, which is
    # Python only; the connection is the worker's alone until it is done
    with ThreadPoolExecutor(max_workers=1) as pool:
        report = pool.submit(_unmetered_report, con, m_start, m_end) if unmetered else None
        rounded = round_lines(lines)
        check_rounded(rounded, gpu_cost_raw)
        invoice_rows = _invoice_rows(rounded)
        total = sum((ln["cost"] for ln in rounded), Decimal("0.00"))
        credits = -sum((ln["cost"] for ln in rounded if ln["kind"] == "credit" and ln["charge_class"] == "Regular"),
                       Decimal("0.00"))
        if tenant is not None:
            rounded = [ln for ln in rounded if ln["tenant"] == tenant]
            invoice_rows = [ln for ln in invoice_rows if ln["tenant"] == tenant]
        detail = _line_records(rounded, _DETAIL_KEYS, catalog, True) if detail_lines else []
        invoice = _line_records(invoice_rows, INVOICE_GROUP, catalog, False)
        detail_frame, invoice_frame = _frame(detail, _DETAIL_KEYS, True), _frame(invoice, INVOICE_GROUP, False)
        unmet, unmet_hours = report.result() if report else (pd.DataFrame(), None)
    return Bill(month, catalog.currency, basis, idle, share, detail_frame, invoice_frame,
                unmet, Decimal(money.round_half_up_div(gpu_cost_raw, money.RAW_PER_CENT)) * money.CENT,
                total, m_start in closed, catalog, unmet_hours, detail, credits=credits)


def chargeback(con, month: str, basis: str = "allocation", idle: str = "platform",
               share: str = "dominant", tenant: str | None = None,
               prices: PriceCatalog | str | None = None) -> pd.DataFrame:
    """One row per (charge class, period, line kind, tenant, namespace, GPU model) with
    Decimal money columns (charge, idle_share, cost, waste, energy_cost) and GPU-hours,
    kWh and gCO2e. The platform's idle is tenant 'platform', namespace '(idle)'."""
    return compute_bill(con, month, basis, idle, share, prices, tenant, unmetered=False, detail_lines=False).invoice
