"""The tenant catalog: which Kamaji TenantControlPlane (tenant) a cluster identity belongs to.

Sources: a YAML file (the `tenants:` list of a scenario, BRIEF format) and/or a Kamaji
controller's /metrics (`kamaji_tenant_control_plane_info`). Parsing is pure; fetching and
storing are the I/O edges. The stored catalog feeds the view slice_hour_tenant, so
replacing it re-attributes every stored rollup (unknown clusters: 'unassigned').
"""
from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

import duckdb
from prometheus_client.parser import text_string_to_metric_families

from ingest.store import sql_text
from slicemeter.cli import ConfigError, read_yaml_file

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
KAMAJI_INFO = "kamaji_tenant_control_plane_info"


@dataclass(frozen=True)
class Tenant:
    name: str
    display_name: str | None = None
    tcp_namespace: str | None = None
    tcp_name: str | None = None
    api_server: str | None = None
    cost_center: str | None = None
    kubernetes_version: str | None = None

    @property
    def cluster(self) -> str | None:
        """The cluster identity Ticks carry for this tenant (API server URL preferred)."""
        if self.api_server:
            return self.api_server
        if self.tcp_namespace and self.tcp_name:
            return f"{self.tcp_namespace}/{self.tcp_name}"
        return None


@dataclass(frozen=True)
class Override:
    cluster: str
    namespace: str
    tenant: str


@dataclass
class Catalog:
    tenants: list[Tenant] = field(default_factory=list)
    overrides: list[Override] = field(default_factory=list)


def _str(value, key: str, required: bool = False) -> str | None:
    if value is None:
        if required:
            raise ConfigError(f"{key}: required")
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise ConfigError(f"{key}: expected a string, got {type(value).__name__}")
    text = str(value)
    if required and not text.strip():
        raise ConfigError(f"{key}: must not be empty")
    return text


def _mapping(value, key: str) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
    return value


def parse_catalog(doc) -> Catalog:
    """A catalog from a parsed YAML document (a mapping with a `tenants:` list)."""
    doc = _mapping(doc if doc is not None else {}, "(document)")
    items = doc.get("tenants")
    if not isinstance(items, list):
        raise ConfigError("tenants: expected a list of tenants")
    tenants: list[Tenant] = []
    pending_overrides: list[tuple[str, dict, str]] = []
    for i, raw in enumerate(items):
        key = f"tenants[{i}]"
        raw = _mapping(raw, key)
        name = _str(raw.get("name"), f"{key}.name", required=True)
        if not _DNS_LABEL.match(name):
            raise ConfigError(f"{key}.name: {name!r} is not a lowercase DNS label")
        kamaji = _mapping(raw.get("kamaji") or {}, f"{key}.kamaji")
        t = Tenant(
            name=name,
            display_name=_str(raw.get("display_name"), f"{key}.display_name"),
            tcp_namespace=_str(kamaji.get("namespace"), f"{key}.kamaji.namespace", required=bool(kamaji)),
            tcp_name=_str(kamaji.get("name"), f"{key}.kamaji.name", required=bool(kamaji)),
            api_server=_str(raw.get("api_server"), f"{key}.api_server"),
            cost_center=_str(raw.get("cost_center"), f"{key}.cost_center"),
        )
        if t.cluster is None:
            raise ConfigError(f"{key}: needs api_server or kamaji {{namespace, name}} to match clusters")
        if any(o.name == name for o in tenants):
            raise ConfigError(f"{key}.name: duplicate tenant {name!r}")
        tenants.append(t)
        overrides = raw.get("namespace_overrides") or []
        if not isinstance(overrides, list):
            raise ConfigError(f"{key}.namespace_overrides: expected a list")
        for j, o in enumerate(overrides):
            pending_overrides.append((f"{key}.namespace_overrides[{j}]", _mapping(o, f"{key}.namespace_overrides[{j}]"), t.cluster))
    names = {t.name for t in tenants}
    overrides_out = []
    for key, o, cluster in pending_overrides:
        ns = _str(o.get("namespace"), f"{key}.namespace", required=True)
        target = _str(o.get("tenant"), f"{key}.tenant", required=True)
        if target not in names:
            raise ConfigError(f"{key}.tenant: unknown tenant {target!r}")
        overrides_out.append(Override(cluster=cluster, namespace=ns, tenant=target))
    return Catalog(tenants=tenants, overrides=overrides_out)


def load_catalog(path: str | Path) -> Catalog:
    return parse_catalog(read_yaml_file(path, "--tenants"))


def _tenant_name(tcp_name: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", tcp_name.lower()).strip("-")[:63].strip("-")
    return name or "tenant"


def parse_kamaji_metrics(text: str) -> list[Tenant]:
    """Tenants from a Kamaji controller's Prometheus exposition (pure)."""
    found: dict[tuple[str, str], Tenant] = {}
    for family in text_string_to_metric_families(text):
        if family.name != KAMAJI_INFO and f"{family.name}_info" != KAMAJI_INFO:
            continue
        for sample in family.samples:
            labels = sample.labels
            ns, name = labels.get("tcp_namespace"), labels.get("tcp_name")
            if not ns or not name:
                continue
            found[(ns, name)] = Tenant(
                name=_tenant_name(name), display_name=name, tcp_namespace=ns, tcp_name=name,
                api_server=labels.get("address") or None, kubernetes_version=labels.get("kubernetes_version") or None,
            )
    return [found[k] for k in sorted(found)]


def fetch_kamaji_tenants(url: str, timeout: float = 10.0) -> list[Tenant]:
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"--kamaji-metrics: {url!r} is not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - scheme checked above
            text = resp.read().decode("utf-8", "replace")
    except OSError as exc:
        raise ConfigError(f"--kamaji-metrics: cannot fetch {url}: {exc}") from None
    return parse_kamaji_metrics(text)


def merge(catalog: Catalog, imported: list[Tenant] | None) -> Catalog:
    """The YAML catalog wins; Kamaji fills in missing addresses and adds unknown TCPs."""
    if not imported:
        return catalog
    tenants = list(catalog.tenants)
    by_tcp = {(t.tcp_namespace, t.tcp_name): i for i, t in enumerate(tenants) if t.tcp_namespace}
    names = {t.name for t in tenants}
    for k in imported:
        i = by_tcp.get((k.tcp_namespace, k.tcp_name))
        if i is not None:
            t = tenants[i]
            tenants[i] = replace(t, api_server=t.api_server or k.api_server,
                                 kubernetes_version=t.kubernetes_version or k.kubernetes_version)
            continue
        name, n = k.name, 2
        while name in names:  # two TCPs of the same name in different namespaces
            name, n = f"{k.name}-{n}", n + 1
        names.add(name)
        tenants.append(replace(k, name=name))
    return Catalog(tenants=tenants, overrides=list(catalog.overrides))


def store_catalog(con: duckdb.DuckDBPyConnection, catalog: Catalog) -> None:
    """Replace the stored catalog in one transaction (views re-attribute on the next read)."""
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(sql_text("ingest/tenants_clear.sql"))
        if catalog.tenants:
            con.executemany(sql_text("ingest/tenants_insert.sql"),
                            [[t.name, t.display_name, t.tcp_namespace, t.tcp_name, t.api_server, t.cost_center]
                             for t in catalog.tenants])
        if catalog.overrides:
            con.executemany(sql_text("ingest/tenant_override_insert.sql"),
                            [[o.cluster, o.namespace, o.tenant] for o in catalog.overrides])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
