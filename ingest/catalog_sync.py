"""Keeping the stored tenant catalog current while ingest runs.

Each round reads the YAML catalog and the Kamaji source (the TenantControlPlane API, else
the controller's /metrics), merges them, keeps planes that disappeared as removed
tenants, stores the result and records the round in catalog_syncs (the dashboard shows
the latest). A failed round keeps the stored catalog and is recorded as failed; only the
first round, at start-up, stops ingest.

The thread writes a few rows through its own cursor: they go to the WAL, never straight
into the main file the snapshot copies, and touch no table the consumer writes.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb

from slicemeter import store
from slicemeter.ingest import tenants
from slicemeter.common import ConfigError

log = logging.getLogger("slicemeter.ingest.catalog")


@dataclass(frozen=True)
class Source:
    name: str                                   # kamaji-api | kamaji-metrics
    fetch: Callable[[], list[tenants.Tenant]]


def log_unassigned(con: duckdb.DuckDBPyConnection, context: str) -> None:
    """Say which stored clusters no tenant matches (they bill as 'unassigned'), or that
    every one matched."""
    unassigned = tenants.unassigned_clusters(con)
    if unassigned:
        log.warning("%s; %d stored cluster(s) match none and bill as 'unassigned': %s", context, len(unassigned),
                    ", ".join(f"{c} ({n} samples)" for c, n in unassigned[:10]))
    else:
        log.info("%s, every stored cluster matched", context)


class CatalogSync:
    def __init__(self, con: duckdb.DuckDBPyConnection, yaml_path: Path | None, sources: list[Source],
                 interval_s: float = 0.0):
        self.con = con
        store.apply_views(con)  # a cursor is a connection of its own: TEMP views are per connection
        self.yaml_path = yaml_path
        self.sources = sources
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _imported(self) -> tuple[str, list[tenants.Tenant] | None]:
        """The first source that answers; a ConfigError naming every failure if none does."""
        if not self.sources:
            return "yaml", None
        errors = []
        for source, fallback in zip(self.sources, self.sources[1:] + [None]):
            try:
                return source.name, source.fetch()
            except ConfigError as exc:
                errors.append(str(exc))
                if fallback is not None:
                    log.warning("%s; trying %s", exc, fallback.name)
        raise ConfigError("; ".join(errors))

    def sync_once(self) -> tenants.Catalog:
        source = self.sources[0].name if self.sources else "yaml"
        try:
            catalog = tenants.load_catalog(self.yaml_path) if self.yaml_path else tenants.Catalog()
            source, imported = self._imported()
            if imported is None:
                merged = tenants.merge(catalog, None)
            else:
                previous = tenants.stored_tenants(self.con)
                merged = tenants.merge(catalog, tenants.keep_names(previous, imported))
                merged = tenants.carry_removed(previous, merged, tenants.utc_now_iso())
            tenants.store_catalog(self.con, merged)
        except ConfigError as exc:
            tenants.record_sync(self.con, source, False, message=str(exc))
            raise
        removed = sum(1 for t in merged.tenants if t.removed_at)
        tenants.record_sync(self.con, source, True, merged,
                            message=f"{removed} removed plane(s) kept for their stored hours" if removed else None)
        log_unassigned(self.con, f"tenant catalog ({source}): {len(merged.tenants)} tenants")
        return merged

    def start(self) -> "CatalogSync":
        if self.interval_s > 0:
            self._thread = threading.Thread(target=self._loop, name="catalog-sync", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sync_once()
            except ConfigError as exc:
                log.error("tenant catalog refresh failed, keeping the stored catalog: %s", exc)
            except Exception:  # a failed round costs this round, never ingest
                log.exception("tenant catalog refresh failed, keeping the stored catalog")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
