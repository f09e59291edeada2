"""Monthly export files: invoice CSV, Parquet detail, FOCUS 1.2 CostAndUsage (CSV, Parquet).

Everything here is a function of the Bill (slicemeter.chargeback.bill) and so of the database and
the options: rows in a fixed order, no "now" anywhere in the content, Decimal money written
as plain text (CSV) or decimal128 (Parquet), and fixed Parquet writer settings, so the same
database and options give byte-identical files. Column mapping: docs/chargeback.md.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from decimal import ROUND_HALF_UP, Decimal
from json.encoder import encode_basestring_ascii
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from slicemeter.chargeback.bill import IDLE_NAMESPACE, Bill, parse_month
from slicemeter.csv_cells import FORMULA_LEAD, neutralise_csv_cell
from slicemeter.common import DNS_LABEL_RE, ConfigError, fsync_path
from slicemeter.store import registered, sql_text

PROVIDER = "slicemeter"
TAG_PREFIX = "slicemeter/"   # provider-defined tag keys (FOCUS Tags-C-012-M)

INVOICE_COLUMNS = [
    ("charge_class", "charge_class"), ("charge_period", "charge_period"), ("line", "kind"),
    ("tenant", "tenant"), ("namespace", "namespace"), ("gpu_model", "model"),
    ("gpu_hours_allocated", "gpu_hours_allocated"), ("gpu_hours_used", "gpu_hours_used"),
    ("gpu_hours_billed", "gpu_hours_billed"), ("gpu_hours_idle", "gpu_hours_idle"),
    ("charge", "charge"), ("idle_share", "idle_share"), ("cost", "cost"), ("waste", "waste"),
    ("kwh", "kwh"), ("energy_cost", "energy_cost"), ("gco2e", "gco2e"), ("currency", "currency"),
    ("usage_unverified_hours", "usage_unverified_hours"), ("usage_unknown_hours", "usage_unknown_hours"),
    ("unverified_at_allocation_hours", "unverified_at_allocation_hours"),
]


def check_tenant(tenant: str | None) -> str | None:
    """A tenant goes into file names: only a DNS label (the tenant id format) is accepted."""
    if tenant is not None and not DNS_LABEL_RE.match(tenant):
        raise ConfigError(f"tenant {tenant!r} is not a tenant id (lowercase DNS label)")
    return tenant


def _text(v) -> str:
    if v is None:
        return ""
    if isinstance(v, Decimal):
        return format(v, "f")
    return str(v)


_NEEDS_QUOTES = re.compile(r'[,"\r\n]')


def _csv_quoted(text: str) -> str:
    """text as csv.writer (minimal quoting, lineterminator \\n) writes one cell of a row of
    several: quoted, with quotes doubled, where it holds a comma, quote or newline. A carriage
    return is left to the writer itself (whether it quotes one differs between Pythons)."""
    if _NEEDS_QUOTES.search(text) is None:
        return text
    if "\r" in text:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([text, ""])
        return buf.getvalue()[:-2]
    return '"' + text.replace('"', '""') + '"'


class _Cells(dict):
    """text -> its cell (spreadsheet-safe, quoted), made on first look-up."""

    def __missing__(self, text: str) -> str:
        cell = self[text] = _csv_quoted(neutralise_csv_cell(text))
        return cell


# A cell that begins with one of these, after the NUL that a column's texts are joined with
_FORMULA_LEAD_AFTER_NUL = re.compile("\\x00[" + re.escape("".join(FORMULA_LEAD)) + "]")


def _csv_column(values) -> list[str]:
    """A column's cells: text, spreadsheet-safe, quoted. Most columns need neither, which a
    few searches over the joined column tell; elsewhere each distinct text (a file repeats
    few: names, dates, amounts) is made a cell once."""
    texts = [v if type(v) is str else _text(v) for v in values]
    joined = "\x00" + "\x00".join(texts)
    if _NEEDS_QUOTES.search(joined) is None and _FORMULA_LEAD_AFTER_NUL.search(joined) is None:
        return texts
    cells = _Cells()
    return [cells[t] for t in texts]


def _csv_file(header: list[str], lines) -> bytes:
    """The header and the rows (each its cells joined by commas) as csv.writer writes them."""
    return ("\n".join([",".join(_csv_quoted(h) for h in header), *lines]) + "\n").encode()


def _csv_columns_bytes(header: list[str], columns: list[list]) -> bytes:
    """A CSV file from its columns' values (one list per header name)."""
    cells = [_csv_column(col) for col in columns]
    if len(header) == 1:   # a row of one empty cell is written as ""
        cells = [['""' if c == "" else c for c in col] for col in cells]
    return _csv_file(header, map(",".join, zip(*cells)))


def _csv_bytes(header: list[str], rows: list[list]) -> bytes:
    return _csv_columns_bytes(header, [list(col) for col in zip(*rows)])


def invoice_csv(bill: Bill) -> bytes:
    inv = bill.invoice
    rows = [[rec[src] for _, src in INVOICE_COLUMNS] for rec in inv.to_dict("records")]
    return _csv_bytes([name for name, _ in INVOICE_COLUMNS], rows)


def _decimal_array(values, scale: int) -> pa.Array:
    return pa.array([None if v is None else Decimal(v) for v in values], pa.decimal128(18, scale))


def _write_parquet(table: pa.Table, path: Path) -> None:
    # Fixed settings: no pandas metadata, one row group, zstd, statistics on. The writer's
    # created_by string is the only environment-dependent byte (the pyarrow version).
    pq.write_table(table.replace_schema_metadata(None), path, compression="zstd", compression_level=3,
                   row_group_size=max(1, table.num_rows), use_dictionary=True, write_statistics=True)


DETAIL_MONEY = {"gpu_hour_price": 6, "charge": 2, "idle_share": 2, "cost": 2, "waste": 2, "energy_cost": 2}
DETAIL_DEC = {"gpu_hours_allocated": 4, "gpu_hours_used": 4, "gpu_hours_billed": 4, "gpu_hours_idle": 4,
              "kwh": 6, "gco2e": 1, "usage_unverified_hours": 4,
              "usage_unknown_hours": 4, "unverified_at_allocation_hours": 4}


def detail_records(bill: Bill) -> list[dict]:
    """The bill's detail lines as records (a Bill built by hand may hold only the frame)."""
    return bill.detail_records if bill.detail_records is not None else bill.detail.to_dict("records")


def detail_table(bill: Bill) -> pa.Table:
    records = detail_records(bill)
    cols = {}
    for name in bill.detail.columns:
        if name == "cost_raw":
            continue
        values = [r[name] for r in records]
        if name in DETAIL_MONEY:
            cols[name] = _decimal_array(values, DETAIL_MONEY[name])
        elif name in DETAIL_DEC:
            cols[name] = _decimal_array(values, DETAIL_DEC[name])
        else:
            cols[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
    return pa.table(cols)


# ------------------------------------------------------------------ FOCUS 1.2

FOCUS_COLUMNS = [
    "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
    "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargeFrequency",
    "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountStatus", "ConsumedQuantity", "ConsumedUnit",
    "ContractedCost", "ContractedUnitPrice", "EffectiveCost", "InvoiceId", "InvoiceIssuerName", "ListCost",
    "ListUnitPrice", "PricingQuantity", "PricingUnit",
    "ProviderName", "PublisherName", "ResourceId", "ResourceName", "ResourceType", "ServiceCategory",
    "ServiceName", "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceDetails", "SkuPriceId",
    "SubAccountId", "SubAccountName", "Tags",
    # provider-defined (custom) columns after all FOCUS columns: the Kubernetes and GPU
    # dimensions as plain columns, so they group and filter without parsing Tags
    "x_Cluster", "x_Namespace", "x_Pod", "x_Container", "x_Node", "x_GpuUuid", "x_GpuModel",
    # slice-hours of the line whose usage could not be checked against NVML (docs/chargeback.md)
    "x_UsageUnverifiedHours",
    # the DRA claim and driver of the line's slices (of its GPU on an idle line; null for the
    # device plugin's), and its slice-hours whose usage no reader measured (docs/dra.md)
    "x_Claim", "x_Driver", "x_UsageUnknownHours",
    # of x_UsageUnverifiedHours, the hours billed at least at the allocation share (the usage
    # basis under the catalog's `unverified_usage: allocation`)
    "x_UnverifiedAtAllocationHours",
]
_FOCUS_MONEY = {"BilledCost", "ContractedCost", "EffectiveCost", "ListCost"}
_FOCUS_PRICE = {"ContractedUnitPrice", "ListUnitPrice"}
_FOCUS_QTY = {"ConsumedQuantity", "x_UsageUnverifiedHours", "x_UsageUnknownHours", "x_UnverifiedAtAllocationHours"}
# PricingQuantity = cost / unit price: 12 decimals keep ListUnitPrice x PricingQuantity
# within 1e-9 of ListCost for any catalog price below 2000 per GPU-hour
PRICING_QUANTITY_PLACES = 12
_PRICING_QTY = Decimal(1).scaleb(-PRICING_QUANTITY_PLACES)
_FOCUS_TIME = {"BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart"}


def _iso(d) -> str:
    return f"{d.isoformat()}T00:00:00Z"


def pricing_quantity(cost: Decimal, unit_price: Decimal, hours: Decimal) -> Decimal:
    """GPU-hours at the unit price that make up the row's cost (the shared idle policy
    adds idle hours to a tenant's); a free GPU's rows keep their GPU-hours."""
    if unit_price == 0:
        return hours
    return (cost / unit_price).quantize(_PRICING_QTY, rounding=ROUND_HALF_UP)


_JSON_TAG_KEYS: dict[str, str] = {}


def tags_json(tags: dict) -> str:
    """The Tags cell: tags under TAG_PREFIX, as json.dumps(sort_keys=True, separators=(",", ":"))
    writes them, at a fraction of its cost per row (string and null values; anything else
    through json.dumps)."""
    items = []
    for name in sorted(tags):
        key = _JSON_TAG_KEYS.get(name)
        if key is None:
            key = _JSON_TAG_KEYS[name] = encode_basestring_ascii(TAG_PREFIX + name) + ":"
        v = tags[name]
        items.append(key + (encode_basestring_ascii(v) if type(v) is str else json.dumps(v)))
    return "{" + ",".join(items) + "}"


def focus_rows(bill: Bill, names: dict[str, str]) -> list[dict]:
    """One FOCUS row per detail line. names: tenant -> display name (BillingAccountName)."""
    b_start, b_end = (_iso(d) for d in parse_month(bill.month))
    periods: dict[str, tuple[str, str]] = {}   # a bill has one period per month it charges
    skus: dict[tuple, tuple[str, str, str]] = {}
    out = []
    for r in detail_records(bill):
        period = periods.get(r["charge_period"])
        if period is None:
            period = periods[r["charge_period"]] = tuple(_iso(d) for d in parse_month(r["charge_period"]))
        idle, credit = r["kind"] == "idle", r["kind"] == "credit"
        if idle:
            qty = r["gpu_hours_idle"]
            desc = f"Idle (unallocated) capacity of GPU {r['gpu_uuid']} ({r['model']})"
            res_id = f"{r['cluster']}/{r['node']}/{r['gpu_uuid']}"
            res_name, res_type = r["gpu_uuid"], "GPU"
        else:
            qty = None if credit else r["gpu_hours_billed"]
            desc = (f"Credit for degraded hours of GPU {r['gpu_uuid']} ({r['model']})" if credit else
                    f"Fractional GPU ({bill.basis} basis) of {r['model']}") + \
                f" for {r['namespace']}/{r['pod']}/{r['container']}"
            res_id = f"{r['cluster']}/{r['namespace']}/{r['pod_uid']}/{r['container']}/{r['gpu_uuid']}"
            res_name, res_type = f"{r['namespace']}/{r['pod']}/{r['container']}", "GPU slice"
        tags = {
            "gpu-model": r["model"], "node": r["node"], "gpu-uuid": r["gpu_uuid"], "basis": bill.basis,
            "idle-policy": bill.idle, "gpu-hours-allocated": _text(r["gpu_hours_allocated"]),
            "gpu-hours-used": _text(r["gpu_hours_used"]), "waste": _text(r["waste"]),
            "idle-share": _text(r["idle_share"]), "kwh": _text(r["kwh"]), "gco2e": _text(r["gco2e"]),
        }
        if r["unverified_at_allocation_hours"]:
            # the line's unchecked usage was billed at its allocation share (docs/chargeback.md)
            tags["unverified-usage"] = "allocation"
        price = _text(r["gpu_hour_price"])
        sku_key = (r["model"], price)
        if sku_key not in skus:
            sku = "gpu-hour:" + re.sub(r"[^A-Za-z0-9]+", "-", r["model"] or "unknown").strip("-").lower()
            skus[sku_key] = (sku, f"{sku}@{price}", json.dumps(
                {"GpuModel": r["model"], "PricePerGpuHour": price, "Currency": bill.currency},
                sort_keys=True, separators=(",", ":")))
        sku, sku_price_id, sku_details = skus[sku_key]
        unit_price = Decimal(r["gpu_hour_price"])
        out.append({
            "CommitmentDiscountStatus": None,
            "SkuId": sku, "SkuMeter": "GPU-Hours", "SkuPriceId": sku_price_id, "SkuPriceDetails": sku_details,
            "BilledCost": r["cost"], "ContractedCost": r["cost"], "EffectiveCost": r["cost"], "ListCost": r["cost"],
            "BillingAccountId": r["tenant"], "BillingAccountName": names.get(r["tenant"], r["tenant"]),
            "BillingCurrency": bill.currency,
            "BillingPeriodStart": b_start, "BillingPeriodEnd": b_end,
            "ChargePeriodStart": period[0], "ChargePeriodEnd": period[1],
            "ChargeCategory": "Credit" if credit else "Usage",
            "ChargeClass": "Correction" if r["charge_class"] == "Correction" else None,
            "ChargeDescription": desc, "ChargeFrequency": "Usage-Based",
            "ConsumedQuantity": qty, "ConsumedUnit": None if credit else "GPU-Hours",
            "PricingQuantity": pricing_quantity(r["cost"], unit_price, qty), "PricingUnit": "GPU-Hours",
            "ListUnitPrice": unit_price, "ContractedUnitPrice": unit_price,
            "InvoiceId": f"{r['tenant']}-{bill.month}", "InvoiceIssuerName": PROVIDER,
            "ProviderName": PROVIDER, "PublisherName": PROVIDER,
            "ResourceId": res_id, "ResourceName": res_name, "ResourceType": res_type,
            "ServiceCategory": "Compute", "ServiceSubcategory": "Containers", "ServiceName": "Fractional GPU",
            "SubAccountId": f"{r['tenant']}/{r['namespace']}" if r["namespace"] != IDLE_NAMESPACE else f"{r['tenant']}/idle",
            "SubAccountName": r["namespace"] if r["namespace"] != IDLE_NAMESPACE else "idle",
            "Tags": tags_json(tags),
            "x_Cluster": r["cluster"], "x_Node": r["node"], "x_GpuUuid": r["gpu_uuid"], "x_GpuModel": r["model"],
            "x_Namespace": None if idle else r["namespace"], "x_Pod": None if idle else r["pod"],
            "x_Container": None if idle else r["container"],
            "x_UsageUnverifiedHours": None if idle else r["usage_unverified_hours"],
            "x_Claim": r["claim"] or None, "x_Driver": r["driver"] or None,
            "x_UsageUnknownHours": None if idle else r["usage_unknown_hours"],
            "x_UnverifiedAtAllocationHours": None if idle else r["unverified_at_allocation_hours"],
        })
    return out


def focus_columns(rows: list[dict]) -> dict[str, list]:
    """focus_rows by column, what both FOCUS files are made from."""
    return {c: [r[c] for r in rows] for c in FOCUS_COLUMNS}


def focus_csv(columns: dict[str, list]) -> bytes:
    return _csv_columns_bytes(FOCUS_COLUMNS, [columns[c] for c in FOCUS_COLUMNS])


def focus_table(columns: dict[str, list]) -> pa.Table:
    cols = {}
    for c in FOCUS_COLUMNS:
        vals = columns[c]
        if c in _FOCUS_MONEY:
            cols[c] = _decimal_array(vals, 2)
        elif c in _FOCUS_QTY:
            cols[c] = _decimal_array(vals, 4)
        elif c in _FOCUS_PRICE:
            cols[c] = _decimal_array(vals, 6)
        elif c == "PricingQuantity":
            cols[c] = pa.array([Decimal(v) for v in vals], pa.decimal128(24, PRICING_QUANTITY_PLACES))
        elif c in _FOCUS_TIME:
            cols[c] = pa.array(vals, pa.string()).cast(pa.timestamp("s", tz="UTC")) if vals else pa.array([], pa.timestamp("s", tz="UTC"))
        else:
            cols[c] = pa.array(vals, pa.string())
    return pa.table(cols)


UNMETERED_COLUMNS = ["hour", "cluster", "node", "gpu_uuid", "gpu_model", "metered_s", "nvml_metered_s",
                     "unmetered_s", "reason"]


def unmetered_csv(con, bill: Bill) -> bytes:
    """Per GPU and hour not fully metered by NVML: seconds seen (by any sample), seconds
    NVML saw, seconds nothing saw, and why (docs/chargeback.md)."""
    u = bill.unmetered_hours_table
    # times and seconds are formatted by DuckDB (never formula-like); each distinct name once
    with registered(con, cb_unmetered_arrow=u):
        formatted = con.sql(sql_text("chargeback/unmetered_csv.sql")).to_arrow_table().combine_chunks()
    texts = {}
    for c in ("cluster", "node", "gpu_uuid", "model", "reason"):
        coded = pc.dictionary_encode(pc.fill_null(u[c], "")).combine_chunks()
        cells = pa.array(_csv_column(coded.dictionary.to_pylist()), pa.string())
        texts[c] = pc.take(cells, coded.indices)
    seconds = [formatted[c].combine_chunks() for c in ("metered_s", "gpu_metered_s", "unmetered_s")]
    columns = [formatted["hour"].combine_chunks(), texts["cluster"], texts["node"], texts["gpu_uuid"], texts["model"],
               *seconds, texts["reason"]]
    header = _csv_file(UNMETERED_COLUMNS, [])
    if not len(u):
        return header
    # each row's line and its newline joined by Arrow: the file's body is the array's data
    # buffer, hundreds of thousands of lines that never become Python strings
    return b"".join([header, _concatenated(pc.binary_join_element_wise(pc.binary_join_element_wise(*columns, ","),
                                                                        "", "\n"))])


def _concatenated(texts: pa.StringArray) -> memoryview:
    """A string array's texts one after the other: its data buffer between its first and last
    offset, not copied."""
    _, offsets_buffer, data = texts.buffers()
    offsets = pa.Array.from_buffers(pa.int32(), len(texts) + 1, [None, offsets_buffer], offset=texts.offset)
    return memoryview(data)[offsets[0].as_py():offsets[-1].as_py()]


def tenant_names(con) -> dict[str, str]:
    return {t: (n or t) for t, n in con.execute("SELECT tenant, display_name FROM tenants ORDER BY tenant").fetchall()}


class ExportNotWritten(Exception):
    """Files an export could not write: the previous ones under their names are unchanged."""

    def __init__(self, paths: list[Path], error: BaseException):
        self.paths = paths
        super().__init__(f"not written: {', '.join(str(p) for p in paths)} ({error}); "
                         "files already there are unchanged")


def _temporary(path: Path) -> Path:
    """Where `path` is written until it is whole: the same folder, so the rename is atomic
    (a later export overwrites what a killed one left)."""
    return path.with_name(f".{path.name}.tmp")


def write_exports(con, bill: Bill, out_dir: str | Path, tenant: str | None = None) -> list[Path]:
    """Write the month's files into out_dir; returns their paths (sorted). Every file is
    written under a temporary name first and all are renamed once all are whole; on a
    failure (a full disk, say) ExportNotWritten names them and the folder is as it was."""
    check_tenant(tenant)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    suffix = f"{bill.month}" + (f"-{tenant}" if tenant else "")
    paths = {
        "invoice": out / f"invoice-{suffix}.csv",
        "detail": out / f"detail-{suffix}.parquet",
        "focus_csv": out / f"focus-{suffix}.csv",
        "focus_parquet": out / f"focus-{suffix}.parquet",
        "unmetered": out / f"unmetered-{suffix}.csv",
    }
    if tenant is not None:
        del paths["unmetered"]   # GPU coverage is the platform's, not a tenant's
    published: list[Path] = []
    try:
        _write_files(con, bill, {kind: _temporary(path) for kind, path in paths.items()}, tenant)
        for path in paths.values():
            fsync_path(_temporary(path))
        for path in paths.values():   # a reader sees the previous file or the new one, never a part
            os.replace(_temporary(path), path)
            published.append(path)
    except BaseException as exc:
        left = [path for path in paths.values() if path not in published]
        for path in left:
            _temporary(path).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ExportNotWritten(sorted(left), exc) from exc
        raise
    return sorted(paths.values())


def _write_files(con, bill: Bill, paths: dict[str, Path], tenant: str | None) -> None:
    names = tenant_names(con)
    # DuckDB (formatting the unmetered report), the Parquet writer and file writes release
    # the GIL: they run in workers beside the Python that makes the other files' rows; the
    # connection is the unmetered report's alone until it is done
    with ThreadPoolExecutor(max_workers=2) as pool:
        written = [pool.submit(lambda: paths["unmetered"].write_bytes(unmetered_csv(con, bill)))] \
            if tenant is None else []
        paths["invoice"].write_bytes(invoice_csv(bill))
        written.append(pool.submit(_write_parquet, detail_table(bill), paths["detail"]))
        focus = focus_columns(focus_rows(bill, names))
        written.append(pool.submit(paths["focus_csv"].write_bytes, focus_csv(focus)))
        written.append(pool.submit(_write_parquet, focus_table(focus), paths["focus_parquet"]))
        for done in written:
            done.result()
