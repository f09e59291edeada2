"""Prometheus text format (0.0.4) for the exporter's families, fast enough for a busy node.

A collector fills one `Samples` per catalogue family: rows of (label values in the
catalogue's label order, value). The same rows become prometheus_client families for a
registry (`to_metric`) or text here. On a node with 128 slices that is ~2,500 samples of
up to 10 labels per scrape; a series' label text is escaped and joined once and then reused
from `LabelText` for as long as the series exists, so a scrape formats only the values.
The text is what prometheus_client's generate_latest writes, labels sorted by name as the
Go client does (the tests compare both).
"""
from __future__ import annotations

import http.server
import math
import struct
import threading
from operator import itemgetter
from typing import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, UntypedMetricFamily

from slicemeter.exporter.serve.catalogue import Family

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_METRIC_TYPES = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily, "untyped": UntypedMetricFamily}


class Samples:
    """One family's samples for one scrape."""

    __slots__ = ("family", "rows")

    def __init__(self, family: Family):
        self.family = family
        self.rows: list[tuple[tuple[str, ...], float]] = []

    def add(self, values: tuple[str, ...], value: float) -> None:
        self.rows.append((values, value))

    def to_metric(self) -> Metric:
        """A fresh prometheus_client family holding the same samples."""
        f = self.family
        m = _METRIC_TYPES[f.type](f.name, f.help, labels=list(f.labels))
        for values, value in self.rows:
            m.add_metric(list(values), value)
        return m


def _esc(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _num(v: float) -> str:
    """Sample value as Prometheus parses it (Go's ParseFloat): ints plainly, floats by repr."""
    if type(v) is int:
        return str(v)
    v = float(v)
    if math.isfinite(v):
        return repr(v)
    return "NaN" if v != v else ("+Inf" if v > 0 else "-Inf")


class LabelText:
    """`{a="x",b="y"}` per (label names, values), kept across scrapes; cleared when it outgrows
    `limit` entries so that series of deleted pods do not pile up."""

    def __init__(self, limit: int = 200_000):
        self.limit = limit
        self._by_names: dict[tuple[str, ...], dict[tuple[str, ...], str]] = {}
        self._size = 0

    def table(self, names: tuple[str, ...]) -> dict[tuple[str, ...], str]:
        t = self._by_names.get(names)
        if t is None:
            t = self._by_names[names] = {}
        return t

    def make(self, names: tuple[str, ...], values: tuple[str, ...], table: dict[tuple[str, ...], str]) -> str:
        if self._size >= self.limit:
            for t in self._by_names.values():
                t.clear()
            self._size = 0
        text = "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(zip(names, values))) + "}" if names else ""
        table[values] = text
        self._size += 1
        return text


_HEADERS: dict[str, str] = {}


def _header(f: Family) -> str:
    text = _HEADERS.get(f.name)
    if text is None:
        doc = f.help.replace("\\", r"\\").replace("\n", r"\n")
        text = _HEADERS[f.name] = f"# HELP {f.sample_name} {doc}\n# TYPE {f.sample_name} {f.type}\n"
    return text


class FamilyTexts:
    """Each family's text as last rendered, with the rows it was rendered from.

    From one Tick to the next most families hold exactly the same rows (limits, grants, an
    idle slice's figures), and their text is reused rather than formatted again. Exactly is
    stricter than ==, which holds for 1 and 1.0 or 0.0 and -0.0 whose texts differ: the
    values' types and their bits as doubles must match as well."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[list, str, tuple | None]] = {}   # name -> (rows, text, their kinds)

    def reuse(self, fam: Samples) -> str | None:
        last = self._last.get(fam.family.name)
        if last is None or fam.rows != last[0]:
            return None
        rows, text, kinds = last
        if kinds is None:
            kinds = _kinds(rows)
            self._last[fam.family.name] = (rows, text, kinds)
        return text if kinds[1] is not None and _kinds(fam.rows) == kinds else None

    def keep(self, fam: Samples, text: str) -> None:
        self._last[fam.family.name] = (fam.rows, text, None)


_VALUE = itemgetter(1)


def _kinds(rows: list) -> tuple[tuple[type, ...], bytes | None]:
    values = list(map(_VALUE, rows))
    try:
        bits = struct.pack(f"<{len(values)}d", *values)
    except (OverflowError, TypeError, struct.error):
        bits = None   # not all doubles: never reused
    return tuple(map(type, values)), bits


def render(families: Iterable[Samples], labels: LabelText | None = None, texts: FamilyTexts | None = None) -> str:
    """The families' text; `texts`: reuse the text of a family whose rows are exactly the last render's."""
    labels = labels or LabelText()
    out: list[str] = []
    families = list(families)   # the rows' tuples stay alive while `seen` is keyed by their id()
    seen_by_names: dict[tuple[str, ...], dict[int, str]] = {}
    floats: dict[float, str] = {}   # the same ratio recurs across series: formatted once per render
    for fam in families:
        text = texts.reuse(fam) if texts is not None else None
        if text is None:
            text = _family_text(fam, labels, seen_by_names.setdefault(fam.family.labels, {}), floats)
            if texts is not None:
                texts.keep(fam, text)
        out.append(text)
    return "".join(out)


def _family_text(fam: Samples, labels: LabelText, seen: dict[int, str], floats: dict[float, str]) -> str:
    f = fam.family
    out = [_header(f)]
    append = out.append
    name, names = f.sample_name, f.labels
    table = labels.table(names)
    for values, value in fam.rows:
        # a slice's label tuple is shared by its families: by identity first, then by value
        text = seen.get(id(values))
        if text is None:
            text = table.get(values)
            if text is None:
                text = labels.make(names, values, table)
            seen[id(values)] = text
        t = type(value)
        if t is int:
            append(f"{name}{text} {value}\n")
        elif t is float and value:   # not 0.0: -0.0 is an equal key with another text
            num = floats.get(value)
            if num is None:
                num = floats[value] = _num(value)
            append(f"{name}{text} {num}\n")
        else:
            append(f"{name}{text} {_num(value)}\n")
    return "".join(out)


def serve(exposition: Callable[[], bytes], port: int, addr: str = "127.0.0.1") -> http.server.ThreadingHTTPServer:
    """GET /metrics (and /) -> exposition(); runs in a daemon thread, returns the server."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            try:
                body = exposition()
            except Exception as exc:   # never take the server down; report it to the scraper
                self.send_error(500, explain=str(exc)[:200])
                return
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer((addr, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
