"""The node's ResourceClaims and ResourceSlices, read off the Tick path (docs/dra.md).

- `DraCache`: the latest parsed lists, refreshed by `refresh()` or its own timer like the pod
  list, so a slow API server never delays a Tick; a failed refresh keeps the last good lists
  and counts an error, and a bad claim or device costs only itself (counted too).
- Fetchers, each a callable returning (ResourceClaimList JSON, ResourceSliceList JSON):
  `files_fetcher` (two files, tests and the simulator) and `api_fetcher` (the API server:
  the node's slices by field selector, every claim, following `continue` pages).
"""
from __future__ import annotations

import json
import logging
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable

from slicemeter.exporter.sources.dra import ResourceClaim, ResourceSlice, parse_claims, parse_resource_slices
from slicemeter.exporter.sources.pods import Refreshed, get_json, tls_context

log = logging.getLogger(__name__)

DraFetch = Callable[[], tuple[Any, Any]]   # () -> (ResourceClaimList, ResourceSliceList) JSON

IN_CLUSTER_API = "https://kubernetes.default.svc"
CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
PAGE_LIMIT = 500
MAX_PAGES = 1000   # 500,000 objects: beyond that a `continue` loop is a broken server, not a cluster


@dataclass(frozen=True, slots=True)
class DraSnapshot:
    claims: tuple[ResourceClaim, ...] = ()
    slices: tuple[ResourceSlice, ...] = ()
    fetched: bool = False     # False: never got both lists (DRA slices are unknown, not none)


class DraCache(Refreshed):
    """The node's latest claims and slices (`get()`). `node`: only claims allocated on it (or
    with no node: network devices) and slices published for it are kept."""

    what = "DRA claims and slices"

    def __init__(self, fetch: DraFetch, node: str, refresh_s: float = 10.0):
        super().__init__(refresh_s, DraSnapshot())
        self.fetch, self.node = fetch, node

    def read(self) -> tuple[DraSnapshot, int]:
        claims_doc, slices_doc = self.fetch()
        claims, slices = parse_claims(claims_doc), parse_resource_slices(slices_doc)
        for err in claims.errors + slices.errors:
            log.warning("DRA: %s", err)
        return DraSnapshot(tuple(c for c in claims.items if c.node_name in (None, self.node)),
                           tuple(s for s in slices.items if s.node_name == self.node), fetched=True), \
            len(claims.errors) + len(slices.errors)

    def get(self) -> DraSnapshot:
        return super().get()


def files_fetcher(claims_path: str, slices_path: str) -> DraFetch:
    def fetch() -> tuple[Any, Any]:
        with open(claims_path, encoding="utf-8") as c, open(slices_path, encoding="utf-8") as s:
            return json.load(c), json.load(s)
    return fetch


def api_fetcher(base_url: str, node: str, token_path: str | None = None, ca_path: str | None = None,
                timeout: float = 10.0) -> DraFetch:
    """GET the node's ResourceSlices (`fieldSelector=spec.nodeName=<node>`) and the cluster's
    ResourceClaims (no field selects a claim's node: the cache keeps this node's). The token
    file is read on every request: projected service-account tokens are rotated."""
    base = base_url.rstrip("/")
    ctx = tls_context(ca_path) if base.startswith("https://") else None

    def listing(path: str, query: dict[str, str]) -> dict:
        items: list = []
        doc: dict = {}
        for _ in range(MAX_PAGES):
            doc = get_json(f"{base}{path}?{urllib.parse.urlencode(query | {'limit': str(PAGE_LIMIT)})}",
                           token_path, ctx, timeout)
            page = doc.get("items") if isinstance(doc, dict) else None
            if not isinstance(page, list):
                return doc   # a Status or garbage: the parser names it
            items += page
            token = (doc.get("metadata") or {}).get("continue")
            if not token:
                return doc | {"items": items}
            query = query | {"continue": str(token)}
        raise ValueError(f"{path}: more than {MAX_PAGES} pages")

    def fetch() -> tuple[Any, Any]:
        return listing(CLAIMS_PATH, {}), listing(SLICES_PATH, {"fieldSelector": f"spec.nodeName={node}"})
    return fetch
