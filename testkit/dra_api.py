"""A stand-in for a cluster's API server serving `resource.k8s.io/v1`: recorded ResourceClaim
and ResourceSlice lists over HTTPS, as kube-apiserver serves them (a List with
metadata.resourceVersion and items; `fieldSelector=spec.nodeName=<node>` on slices; pages by
limit/continue), behind a bearer token. Every request is recorded with its query."""
from __future__ import annotations

import copy
import http.server
import json
import ssl
import threading
import urllib.parse

from slicemeter.testkit.kube_api import CERT, KEY

CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
TOKEN = "sa-token-slicemeter-exporter"


class DraApi:
    """Serves `self.claims` and `self.slices` (replace or edit them to change the next list);
    `self.status` other than 200 answers every request with that code and a Status."""

    def __init__(self, claims: dict, slices: dict, page_size: int = 3):
        self.claims, self.slices, self.page_size = claims, slices, page_size
        self.status = 200
        self.requests: list[tuple[str, dict[str, list[str]], str | None]] = []   # (path, query, Authorization)
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                q = urllib.parse.parse_qs(url.query)
                api.requests.append((url.path, q, self.headers.get("Authorization")))
                if api.status != 200:
                    return self._json(api.status, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                   "code": api.status})
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._json(401, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 401})
                docs = {CLAIMS_PATH: api.claims, SLICES_PATH: api.slices}
                if url.path not in docs:
                    return self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404})
                doc = copy.deepcopy(docs[url.path])
                items = doc["items"]
                for selector in q.get("fieldSelector", []):
                    key, _, value = selector.partition("=")
                    if key != "spec.nodeName":
                        return self._json(400, {"kind": "Status", "status": "Failure", "code": 400,
                                                "message": f"field label not supported: {key}"})
                    items = [i for i in items if i["spec"].get("nodeName") == value]
                start = int(q.get("continue", ["0"])[0])
                size = min(api.page_size, int(q.get("limit", [str(api.page_size)])[0]))
                doc["items"] = items[start:start + size]
                if start + size < len(items):
                    doc["metadata"]["continue"] = str(start + size)
                return self._json(200, doc)

            def _json(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(CERT, KEY)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "DraApi":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
