"""What ingest believes a message may say (docs/security.md).

- Publishers (`--publishers FILE`): which signing key may speak for which tenant clusters.
  With the file, every message must carry a valid signature (slicemeter/signing.py) from
  a known key, and every row's cluster must be one of that key's.
- Bindings: a GPU UUID and a node belong to the cluster that first reported them; a
  message from another cluster naming them is a dead letter until an operator moves the
  binding (`slicemeter bindings move`).
- Instants: a node reports each instant once; a message repeating an instant of its node
  already taken in (the producer's resend, a replayed spool, a captured Tick sent again
  under any key, on any partition) is a duplicate.

Each check returns the reason a message is refused, or None; the consumer dead-letters it.
"""
from __future__ import annotations

import hmac
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slicemeter import signing
from slicemeter.store import sql_text
from slicemeter.common import ConfigError, cluster_key, read_yaml_file
from slicemeter.tick import TickBatch


@dataclass(frozen=True)
class Publisher:
    key_id: str
    key: bytes = field(repr=False)
    clusters: frozenset[str]   # cluster_key of each identity the key may speak for


def load_publishers(path: Path) -> dict[str, Publisher]:
    """`publishers:` list of {key_id, key_file, clusters: [...]}; key files relative to the
    config file's folder. Raises ConfigError naming the bad entry."""
    doc = read_yaml_file(path, "--publishers")
    entries = doc.get("publishers") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"--publishers {path}: expected a non-empty 'publishers:' list")
    out: dict[str, Publisher] = {}
    for i, e in enumerate(entries):
        where = f"--publishers {path}: publishers[{i}]"
        if not isinstance(e, dict) or not {"key_id", "key_file", "clusters"} <= set(e):
            raise ConfigError(f"{where}: needs key_id, key_file and clusters")
        clusters = e["clusters"]
        if not isinstance(clusters, list) or not clusters or not all(isinstance(c, str) and c for c in clusters):
            raise ConfigError(f"{where}.clusters: a non-empty list of cluster identities")
        try:
            key_id = signing.check_key_id(str(e["key_id"]))
            key = signing.load_key(str(Path(path).parent / str(e["key_file"])))
        except signing.SigningError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if key_id in out:
            raise ConfigError(f"{where}: key_id {key_id!r} listed twice")
        out[key_id] = Publisher(key_id, key, frozenset(map(cluster_key, clusters)))
    return out


def verify(publishers: dict[str, Publisher], headers, value: bytes) -> tuple[Publisher | None, str | None]:
    """(the publisher that signed `value`, None) or (None, why not)."""
    key_id = signing.header(headers, signing.KEY_ID_HEADER)
    sig = signing.header(headers, signing.SIGNATURE_HEADER)
    if key_id is None or sig is None:
        return None, "unsigned message (no slicemeter-key-id / slicemeter-signature header)"
    name = key_id.decode("utf-8", "replace")
    pub = publishers.get(name)
    if pub is None:
        return None, f"unknown signing key id {name[:128]!r}"
    if not hmac.compare_digest(sig, signing.signature(pub.key, value)):
        return None, f"bad signature for key id {name!r}"
    return pub, None


def _names(*columns: pa.ChunkedArray) -> set[str]:
    return {v for col in columns for v in pc.unique(col).to_pylist()}


class Bindings:
    """GPU UUID -> cluster and node -> cluster, as the store holds them plus what the
    batches in hand add (written with their batch: `take_pending`)."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.owner: dict[tuple[str, str], str] = {
            (k, n): c for k, n, c in con.execute("SELECT kind, name, cluster FROM ingest_bindings").fetchall()}
        self.pending: list[dict] = []

    def check(self, batch: TickBatch, publisher: Publisher | None) -> str | None:
        clusters = _names(batch.gpus.column("cluster"), batch.slices.column("cluster"))
        if len(clusters) != 1:
            return f"a message speaks for one cluster, this one names {sorted(clusters)[:4]}"
        (cluster,) = clusters
        if publisher is not None and cluster_key(cluster) not in publisher.clusters:
            return f"cluster {cluster!r} is not one key id {publisher.key_id!r} may speak for"
        claims = [("node", n) for n in _names(batch.gpus.column("node"), batch.slices.column("node"))]
        claims += [("gpu", g) for g in _names(batch.gpus.column("gpu_uuid"), batch.slices.column("gpu_uuid"))]
        new = []
        for claim in claims:
            owner = self.owner.get(claim)
            if owner is None:
                new.append(claim)
            elif cluster_key(owner) != cluster_key(cluster):   # one cluster, however spelt
                return (f"{claim[0]} {claim[1]!r} belongs to cluster {owner!r}, not {cluster!r} "
                        "(an operator moves it: slicemeter bindings move)")
        for claim in new:
            self.owner[claim] = cluster
            self.pending.append({"kind": claim[0], "name": claim[1], "cluster": cluster})
        return None

    def take_pending(self) -> list[dict]:
        pending, self.pending = self.pending, []
        return pending


def stored_instants(con: duckdb.DuckDBPyConnection, node: str, instants: np.ndarray) -> list[int]:
    """The first few of `instants` (sorted) that the store holds for `node` already."""
    return [t for (t,) in con.execute(sql_text("ingest/stored_instants.sql"), {
        "node": node, "instants": instants.tolist(), "lo": int(instants[0]), "hi": int(instants[-1])}).fetchall()]


class RecentInstants:
    """The instants (ts_ms) each node reported within `window_ms` of its latest one, in
    memory; older ones, and those of a node it does not know, are looked up in the store
    (ingest_instants, kept as long as the timestamp window accepts them), so a Tick is
    refused however late it comes back. Live Ticks cost no lookup."""

    def __init__(self, con: duckdb.DuckDBPyConnection, window_ms: int):
        self.con = con
        self.window_ms = window_ms
        self.latest: dict[str, int] = {}
        self.pruned_at: dict[str, int] = {}
        self.seen: dict[str, set[int]] = defaultdict(set)
        rows = con.execute(sql_text("ingest/recent_instants.sql"), {"w": window_ms}).fetchall()
        by_node: dict[str, list[int]] = defaultdict(list)
        for node, ts in rows:
            by_node[node].append(ts)
        for node, instants in by_node.items():
            self._remember(node, instants)

    def _remember(self, node: str, instants: list[int]) -> None:
        seen = self.seen[node]
        seen.update(instants)
        latest = max(self.latest.get(node, instants[0]), max(instants))
        self.latest[node] = latest
        horizon = latest - self.window_ms
        if horizon - self.pruned_at.setdefault(node, horizon) >= self.window_ms // 4:
            seen.difference_update([t for t in seen if t < horizon])
            self.pruned_at[node] = horizon

    def check(self, batch: TickBatch, ask_store: bool = False) -> str | None:
        """Why `batch` repeats instants already taken in, or None (and they are remembered).
        One repeated instant refuses the whole message. `ask_store`: look in the store even
        where memory covers the instants (another writer may have stored them)."""
        node, instants = batch.node_instants()
        if node is None:
            return None
        seen = self.seen.get(node)
        repeated = [int(t) for t in instants if int(t) in seen] if seen else []
        if not repeated and (ask_store or seen is None or instants[0] < self.latest[node] - self.window_ms):
            repeated = stored_instants(self.con, node, instants)
        if repeated:
            return f"duplicate: node {node!r} already reported instant(s) {repeated[:3]} (ts_ms)"
        self._remember(node, instants.tolist())
        return None
