"""Prometheus text format (0.0.4) for the exporter's families, fast enough for a busy node.

prometheus_client's generate_latest escapes and joins every label set of every sample;
on a node with 128 slices that is ~2,000 samples x 8 labels per scrape. The Collector
shares one label dict per slice across its families, so this renderer escapes each label
set once per scrape. Output is the same text (the tests compare both renderings).
Only gauge, counter and untyped families are handled: the exporter emits nothing else.
"""
from __future__ import annotations

import http.server
import threading
from typing import Callable, Iterable

import math

from prometheus_client.core import Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


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


def render(families: Iterable[Metric]) -> bytes:
    out: list[str] = []
    families = list(families)          # keep every labels dict alive: the cache below is keyed by id()
    label_text: dict[int, str] = {}
    for m in families:
        if m.type not in ("gauge", "counter", "unknown"):
            raise ValueError(f"{m.name}: type {m.type} is not rendered here")
        name = m.name + "_total" if m.type == "counter" else m.name
        doc = m.documentation.replace("\\", r"\\").replace("\n", r"\n")
        kind = "untyped" if m.type == "unknown" else m.type
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        for s in m.samples:
            labels = s.labels
            if labels:
                text = label_text.get(id(labels))
                if text is None:
                    text = "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(labels.items())) + "}"
                    label_text[id(labels)] = text
            else:
                text = ""
            out.append(f"{s.name}{text} {_num(s.value)}\n")
    return "".join(out).encode()


def serve(collect: Callable[[], Iterable[Metric]], port: int, addr: str = "127.0.0.1") -> http.server.ThreadingHTTPServer:
    """GET /metrics (and /) -> render(collect()); runs in a daemon thread, returns the server."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            try:
                body = render(collect())
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
