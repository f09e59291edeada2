"""A stand-in for the management cluster's API server: recorded TenantControlPlane JSON
served over HTTPS the way kube-apiserver serves a list (kind TenantControlPlaneList,
metadata.resourceVersion, items; pages by limit/continue), behind bearer-token or
client-certificate authentication, and a kubeconfig that points at it."""
from __future__ import annotations

import base64
import copy
import http.server
import json
import ssl
import threading
import urllib.parse
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"   # the recorded objects live with the tests
CERT, KEY = DATA / "kubelet-selfsigned.crt", DATA / "kubelet-selfsigned.key"
TCP_LIST = DATA / "kamaji" / "tenantcontrolplanes.json"
LIST_PATH = "/apis/kamaji.clastix.io/v1alpha1/tenantcontrolplanes"
TOKEN = "sa-token-slicemeter-ingest"


def tcp_list() -> dict:
    return json.loads(TCP_LIST.read_text())


class KubeApi:
    """Serves `self.doc` (replace it to change what the next list returns); `self.status`
    other than 200 answers every request with that code."""

    def __init__(self, doc: dict | None = None, page_size: int = 3, client_cert: bool = False,
                 metrics: bytes | None = None):
        self.doc = doc if doc is not None else tcp_list()
        self.page_size = page_size
        self.status = 200
        self.requests: list[tuple[str, str | None]] = []   # (path, Authorization header)
        self.metrics = metrics
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                api.requests.append((self.path, self.headers.get("Authorization")))
                if url.path == "/metrics" and api.metrics is not None:
                    return self._send(200, api.metrics, "text/plain; version=0.0.4")
                if api.status != 200:
                    return self._json(api.status, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                   "code": api.status})
                if not client_cert and self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._json(401, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                            "reason": "Unauthorized", "code": 401})
                if url.path != LIST_PATH:
                    return self._json(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404})
                q = urllib.parse.parse_qs(url.query)
                start = int(q.get("continue", ["0"])[0])
                size = min(api.page_size, int(q.get("limit", [str(api.page_size)])[0]))
                doc = copy.deepcopy(api.doc)
                items = doc["items"][start:start + size]
                doc["items"] = items
                if start + size < len(api.doc["items"]):
                    doc["metadata"]["continue"] = str(start + size)
                return self._json(200, doc)

            def _json(self, code, body):
                self._send(code, json.dumps(body).encode(), "application/json")

            def _send(self, code, body, ctype):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(CERT, KEY)
        if client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(CERT)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "KubeApi":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, path: Path, user: dict | None = None) -> Path:
        """A kubeconfig as kubectl writes one: the server, its CA inline, a token user."""
        b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
        doc = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": "management", "cluster": {"server": self.url, "certificate-authority-data": b64(CERT)}}],
            "users": [{"name": "slicemeter-ingest", "user": user if user is not None else {"token": TOKEN}}],
            "contexts": [{"name": "slicemeter@management",
                          "context": {"cluster": "management", "user": "slicemeter-ingest", "namespace": "slicemeter"}}],
            "current-context": "slicemeter@management",
        }
        path.write_text(yaml.safe_dump(doc))
        return path

    @staticmethod
    def client_cert_user() -> dict:
        b64 = lambda p: base64.b64encode(p.read_bytes()).decode()  # noqa: E731
        return {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)}


class MetricsServer:
    """A Kamaji controller's /metrics over plain HTTP (how its metrics Service serves them)."""

    def __init__(self, body: bytes):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "MetricsServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
