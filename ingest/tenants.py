"""The tenant catalog: which Kamaji TenantControlPlane (tenant) a cluster identity belongs to.

Sources: a YAML file (the `tenants:` list of a scenario), the management cluster's
TenantControlPlane API (ingest/kamaji.py) and, as a fallback, a Kamaji controller's
/metrics (`kamaji_tenant_control_plane_info`). Parsing is pure; fetching and storing are
the I/O edges. The stored catalog feeds the view slice_hour_tenant, so replacing it
re-attributes every stored rollup (unknown clusters: 'unassigned').
"""
from __future__ import annotations

import logging
import re
import urllib.request
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from slicemeter import clock
from slicemeter.store import registered, retry_conflicts, sql_text, transaction
from slicemeter.store.script import execute_script
from slicemeter.common import ConfigError, read_config_text
from slicemeter.config_schema import Schema, YamlLines, validate
from slicemeter.tenant_model import TenantList

KAMAJI_INFO = "kamaji_tenant_control_plane_info"
KAMAJI_UNKNOWN = "unknown"  # Kamaji's label value for an unset version, driver or exposure
log = logging.getLogger("slicemeter.ingest.tenants")


@dataclass(frozen=True)
class Tenant:
    name: str
    display_name: str | None = None
    tcp_namespace: str | None = None
    tcp_name: str | None = None
    api_server: str | None = None
    cost_center: str | None = None
    kubernetes_version: str | None = None
    aliases: tuple[str, ...] = ()        # more identities of the same cluster (kubelets' addresses)
    source: str = "yaml"                 # yaml | kamaji-api | kamaji-metrics
    admin_kubeconfig_secret: str | None = None
    removed_at: str | None = None        # the TenantControlPlane is being deleted / gone (ISO time)
    monthly_budget: Decimal | None = None  # in the price catalog's currency

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


class _CatalogFile(Schema):
    tenants: TenantList


def _catalog(spec: _CatalogFile) -> Catalog:
    tenants = [Tenant(name=t.name, display_name=t.display_name, api_server=t.api_server, cost_center=t.cost_center,
                      tcp_namespace=t.kamaji.namespace if t.kamaji else None,
                      tcp_name=t.kamaji.name if t.kamaji else None, aliases=tuple(t.aliases),
                      monthly_budget=t.monthly_budget)
               for t in spec.tenants]
    return Catalog(tenants=tenants, overrides=[Override(cluster=t.cluster or t.aliases[0], namespace=o.namespace, tenant=o.tenant)
                                               for t, raw in zip(tenants, spec.tenants) for o in raw.namespace_overrides])


def _tenants_only(doc):
    # a scenario is a catalog too (ingest reads it as --tenants): its other keys are not ours
    return {"tenants": doc.get("tenants")} if isinstance(doc, dict) else {} if doc is None else doc


def parse_catalog(doc) -> Catalog:
    """A catalog from a parsed YAML document (a mapping with a `tenants:` list)."""
    return _catalog(validate(_CatalogFile, _tenants_only(doc)))


def load_catalog(path: str | Path) -> Catalog:
    """The catalog file's; a mistake is a ConfigFileError naming the key and its line."""
    doc = YamlLines(read_config_text(path, "--tenants"), str(path))
    return _catalog(validate(_CatalogFile, _tenants_only(doc.data), doc))


def tenant_name(tcp_name: str) -> str:
    """A tenant name (lowercase DNS label) for a TenantControlPlane's name."""
    name = re.sub(r"[^a-z0-9-]+", "-", tcp_name.lower()).strip("-")[:63].strip("-")
    return name or "tenant"


def parse_kamaji_metrics(text: str) -> list[Tenant]:
    """Tenants from a Kamaji controller's Prometheus exposition (pure).

    The series has six labels (tcp_namespace, tcp_name, kubernetes_version,
    datastore_driver, address, exposure_strategy); address is "https://" +
    status.controlPlaneEndpoint, empty until the plane is exposed, and it is the only
    address the metric knows: kubelets on an advertise address or a certSAN do not match it."""
    found: dict[tuple[str, str], Tenant] = {}
    for family in text_string_to_metric_families(text):
        if family.name != KAMAJI_INFO and f"{family.name}_info" != KAMAJI_INFO:
            continue
        for sample in family.samples:
            labels = sample.labels
            ns, name = labels.get("tcp_namespace"), labels.get("tcp_name")
            if not ns or not name:
                continue
            version = labels.get("kubernetes_version")
            found[(ns, name)] = Tenant(
                name=tenant_name(name), display_name=name, tcp_namespace=ns, tcp_name=name,
                api_server=labels.get("address") or None,
                kubernetes_version=None if version in (None, "", KAMAJI_UNKNOWN) else version,
                source="kamaji-metrics",
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
    found = parse_kamaji_metrics(text)
    if not found:
        log.warning("--kamaji-metrics: %s serves no %s series: Kamaji before 26.4.3-edge does not export it, "
                    "and only the leader replica does; no tenant was imported (use --kamaji-kubeconfig)",
                    url, KAMAJI_INFO)
    return found


def merge(catalog: Catalog, imported: list[Tenant] | None) -> Catalog:
    """The YAML catalog wins (names, display names, cost centres); Kamaji adds its
    addresses as aliases, its details, and the TCPs the YAML does not name."""
    if not imported:
        return catalog
    tenants = list(catalog.tenants)
    by_tcp = {(t.tcp_namespace, t.tcp_name): i for i, t in enumerate(tenants) if t.tcp_namespace}
    names = {t.name for t in tenants}
    for k in imported:
        i = by_tcp.get((k.tcp_namespace, k.tcp_name))
        if i is not None:
            t = tenants[i]
            aliases = tuple(dict.fromkeys(t.aliases + ((k.api_server,) if k.api_server else ()) + k.aliases))
            tenants[i] = replace(k, name=t.name, display_name=t.display_name or k.display_name,
                                 api_server=t.api_server or k.api_server, cost_center=t.cost_center,
                                 kubernetes_version=t.kubernetes_version or k.kubernetes_version,
                                 aliases=aliases, monthly_budget=t.monthly_budget)
            continue
        name, n = k.name, 2
        while name in names:  # two TCPs of the same name in different namespaces
            name, n = f"{k.name}-{n}", n + 1
        names.add(name)
        tenants.append(replace(k, name=name))
    return Catalog(tenants=tenants, overrides=list(catalog.overrides))


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _utc_naive(iso: str | None) -> datetime | None:
    """An RFC 3339 time (Kubernetes' metadata.deletionTimestamp) as the store's naive UTC."""
    if not iso:
        return None
    try:
        return clock.parse_instant(iso).replace(tzinfo=None)
    except ValueError:
        raise ConfigError(f"tenant catalog: {iso!r} is not an RFC 3339 time") from None


def keep_names(previous: list[Tenant], imported: list[Tenant]) -> list[Tenant]:
    """Imported planes under the tenant names stored for them before (pure): a tenant's
    name is its identity in bills, so it must not move when planes come and go. A new
    plane whose name is taken (a removed plane of the same name) gets a suffix."""
    by_tcp = {(t.tcp_namespace, t.tcp_name): t.name for t in previous if t.tcp_namespace}
    taken = {t.name for t in previous}
    out = []
    for k in imported:
        name = by_tcp.get((k.tcp_namespace, k.tcp_name))
        if name is None:
            name, n = k.name, 2
            while name in taken:
                name, n = f"{k.name}-{n}", n + 1
        taken.add(name)
        out.append(replace(k, name=name))
    return out


def carry_removed(previous: list[Tenant], catalog: Catalog, now_iso: str) -> Catalog:
    """Keep the Kamaji tenants the source no longer lists, marked removed (pure): the
    catalog is a view over stored hours, and a plane's deletion must not hand its past
    hours to 'unassigned'. A YAML tenant that is gone is gone (the operator removed it)."""
    live_tcps = {(t.tcp_namespace, t.tcp_name) for t in catalog.tenants}
    names = {t.name for t in catalog.tenants}
    kept = [replace(t, removed_at=t.removed_at or now_iso) for t in previous
            if t.source.startswith("kamaji") and (t.tcp_namespace, t.tcp_name) not in live_tcps
            and t.name not in names]
    return Catalog(tenants=list(catalog.tenants) + kept, overrides=list(catalog.overrides)) if kept else catalog


def stored_tenants(con: duckdb.DuckDBPyConnection) -> list[Tenant]:
    """The catalog as stored (with sources, details and aliases)."""
    rows = con.execute(sql_text("ingest/tenants_stored.sql")).fetchall()
    return [Tenant(name=r[0], display_name=r[1], tcp_namespace=r[2], tcp_name=r[3], api_server=r[4], cost_center=r[5],
                   source=r[6] or "yaml", kubernetes_version=r[7], admin_kubeconfig_secret=r[8],
                   removed_at=r[9].replace(tzinfo=timezone.utc).isoformat() if r[9] is not None else None, aliases=tuple(r[10] or ()),
                   monthly_budget=r[11])
            for r in rows]


def _catalog_tables(catalog: Catalog) -> dict[str, pa.Table]:
    """The catalog as the rows sql/ingest/tenants_insert.sql inserts, each table's rows
    unique on the store's keys: an alias named twice once, a namespace override given
    twice the last one (what INSERT OR IGNORE / OR REPLACE did, on every backend)."""
    string = pa.string()
    tenants = pa.table({
        "tenant": pa.array([t.name for t in catalog.tenants], string),
        "display_name": pa.array([t.display_name for t in catalog.tenants], string),
        "tcp_namespace": pa.array([t.tcp_namespace for t in catalog.tenants], string),
        "tcp_name": pa.array([t.tcp_name for t in catalog.tenants], string),
        "api_server": pa.array([t.api_server for t in catalog.tenants], string),
        "cost_center": pa.array([t.cost_center for t in catalog.tenants], string),
        "source": pa.array([t.source for t in catalog.tenants], string),
        "kubernetes_version": pa.array([t.kubernetes_version for t in catalog.tenants], string),
        "admin_kubeconfig_secret": pa.array([t.admin_kubeconfig_secret for t in catalog.tenants], string),
        "removed_at": pa.array([_utc_naive(t.removed_at) for t in catalog.tenants], pa.timestamp("us")),
    })
    budgets = [(t.name, t.monthly_budget) for t in catalog.tenants if t.monthly_budget is not None]
    aliases = list(dict.fromkeys((t.name, a) for t in catalog.tenants for a in t.aliases))
    overrides = {(o.cluster, o.namespace): o.tenant for o in catalog.overrides}
    return {
        "catalog_tenants": tenants,
        "catalog_budgets": pa.table({"tenant": pa.array([n for n, _ in budgets], string),
                                     "monthly_budget": pa.array([b for _, b in budgets], pa.decimal128(38, 6))}),
        "catalog_aliases": pa.table({"tenant": pa.array([n for n, _ in aliases], string),
                                     "alias": pa.array([a for _, a in aliases], string)}),
        "catalog_overrides": pa.table({"cluster": pa.array([c for c, _ in overrides], string),
                                       "namespace": pa.array([n for _, n in overrides], string),
                                       "tenant": pa.array(list(overrides.values()), string)}),
    }


def store_catalog(con: duckdb.DuckDBPyConnection, catalog: Catalog) -> None:
    """Replace the stored catalog in one transaction (views re-attribute on the next read),
    the same statements on a file and a lake (plain deletes and inserts: a lake's tables
    have no keys). Two lake workers storing it at once conflict; the later one stores it
    again (store.retry_conflicts).

    A cluster key two live tenants claim is a ConfigError naming both; nothing is stored then."""
    tables = _catalog_tables(catalog)

    def replace_catalog() -> None:
        with transaction(con), registered(con, **tables):
            con.execute(sql_text("ingest/tenants_clear.sql"))
            execute_script(con, "ingest/tenants_insert.sql", {})
            con.execute(sql_text("ingest/tenants_yield_to_live.sql"))
            conflicts = con.execute(sql_text("ingest/tenants_conflicts.sql")).fetchall()
            if conflicts:
                raise ConfigError("tenant catalog: a cluster matches more than one tenant: " + "; ".join(
                    f"{key} is claimed by {' and '.join(names)} ({', '.join(ids)})" for key, names, ids in conflicts))

    retry_conflicts(replace_catalog)


def record_sync(con: duckdb.DuckDBPyConnection, source: str, ok: bool, catalog: Catalog | None = None,
                message: str | None = None) -> None:
    params = [source, ok, len(catalog.tenants) if catalog else None,
              sum(len(t.aliases) for t in catalog.tenants) if catalog else None, message]

    def insert() -> None:
        with transaction(con):
            con.execute(sql_text("ingest/catalog_sync_insert.sql"), params)

    retry_conflicts(insert)


def unassigned_clusters(con: duckdb.DuckDBPyConnection, start: datetime | None = None,
                        end: datetime | None = None) -> list[tuple[str, int]]:
    """(cluster, samples) of every stored cluster no tenant matches, most samples first."""
    rows = con.execute(sql_text("dashboard/catalog_unassigned.sql"),
                       {"start": start or datetime(1970, 1, 1), "end": end or datetime(9999, 1, 1)}).fetchall()
    return [(r[0], int(r[1])) for r in rows]
