"""`slicemeter ingest`: consume Ticks from Kafka into DuckDB (ingest/consumer.py)."""
from __future__ import annotations

import argparse
import logging
import signal
from pathlib import Path

from slicemeter import kafka_security
from slicemeter.common import ConfigError, is_lake, on_stop_signals

log = logging.getLogger("slicemeter.ingest")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kafka", required=True, metavar="HOST:PORT", help="bootstrap server(s), comma separated")
    p.add_argument("--db", required=True, type=_store_target,
                   help="DuckDB file (created and migrated if new), or a DuckLake ducklake:postgres:CONNINFO "
                        "that several ingest workers share (docs/ingest.md, Scaling past one process)")
    p.add_argument("--lake-data", type=Path, metavar="DIR",
                   help="the lake's Parquet folder, needed when --db names a lake that does not exist yet")
    p.add_argument("--tenants", type=Path, help="tenant catalog YAML (a scenario's tenants: list)")
    p.add_argument("--kamaji-kubeconfig", type=Path, metavar="FILE",
                   help="import tenants from the management cluster's TenantControlPlanes (docs/ingest.md)")
    p.add_argument("--kamaji-in-cluster", action="store_true",
                   help="as --kamaji-kubeconfig, with this pod's service account")
    p.add_argument("--kamaji-context", metavar="NAME", help="kubeconfig context (default: current-context)")
    p.add_argument("--kamaji-metrics", metavar="URL",
                   help="fallback: import tenants from a Kamaji controller's /metrics (endpoint addresses only)")
    p.add_argument("--catalog-interval", type=float, default=300.0, metavar="S",
                   help="re-read the tenant catalog sources every S seconds; 0 = at start only")
    p.add_argument("--topic", default="slicemeter.ticks")
    p.add_argument("--group", default="slicemeter-ingest",
                   help="consumer group; '' assigns every partition to this process without a group")
    p.add_argument("--instance-id", metavar="NAME",
                   help="a stable identity in the group (static membership; the deploy manifest passes the "
                        "pod's name): restarted with it, ingest takes its partitions back without waiting "
                        "for its old session to time out")
    p.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on this port")
    p.add_argument("--metrics-listen", default="127.0.0.1", metavar="ADDR",
                   help="metrics bind address (default 127.0.0.1; 0.0.0.0 where Prometheus scrapes the pod)")
    p.add_argument("--snapshot", type=Path, metavar="PATH", help="keep a consistent read-only copy here")
    p.add_argument("--snapshot-interval", type=float, default=60.0, metavar="S")
    p.add_argument("--raw-retention-days", type=float, default=35.0, help="keep raw samples this long (rollups: for ever)")
    p.add_argument("--batch-samples", type=int, default=250_000, help="samples per DuckDB transaction")
    p.add_argument("--batch-max-seconds", type=float, default=1.0)
    p.add_argument("--max-poll-records", type=int, default=200)
    p.add_argument("--duckdb-memory", default=None, metavar="SIZE",
                   help="DuckDB's memory limit, e.g. 300MB (default: see docs/ingest.md, Performance)")
    p.add_argument("--session-timeout-ms", type=int, default=10_000,
                   help="group session timeout: how soon a dead worker's partitions move")
    p.add_argument("--until-idle", type=float, metavar="S", nargs="?", const=5.0,
                   help="drain and exit: stop once every partition of the topic is stored up to its end "
                        "(or after S seconds without a record); exit 1 naming what is left if any is not, "
                        "or if the store rejected a message")
    p.add_argument("--drain-wait", type=float, metavar="S",
                   help="with --until-idle: once idle, wait up to S seconds for partitions other members hold "
                        "(a dead member's come when its session times out) before exiting 1 naming them "
                        "(default: twice --session-timeout-ms)")
    p.add_argument("--recommend-interval", type=float, default=0.0, metavar="S",
                   help="serve the current month's right-sizing and sharing-dividend figures "
                        "(slicemeter_recommend_*, slicemeter_dividend_*), "
                        "replanned from the snapshot after each of its refreshes and at least every S seconds, "
                        "the plan kept beside it for the dashboard (SNAPSHOT.plan); 0 = off (default)")
    p.add_argument("--bill-interval", type=float, default=0.0, metavar="S",
                   help="serve each tenant's month-to-date money, forecast and budget (slicemeter_tenant_month_*), "
                        "recomputed from the snapshot every S seconds; 0 = off (default; docs/live-bill.md)")
    p.add_argument("--bill-basis", action="append", choices=("allocation", "usage", "max"), metavar="BASIS",
                   help="a cost basis the live bill serves (repeat for more; default allocation, as the export)")
    p.add_argument("--bill-idle", choices=("platform", "shared"), default="platform",
                   help="the live bill's idle policy (default platform, as the export)")
    p.add_argument("--publishers", type=Path, metavar="FILE",
                   help="signing keys and the clusters each may speak for; with it, unsigned or foreign "
                        "Ticks are dead letters (docs/security.md)")
    p.add_argument("--max-interval-seconds", type=float, default=3600.0,
                   help="longest interval one sample may stand for (default: one hour, the rollup bucket)")
    p.add_argument("--clock-slack-seconds", type=float, default=600.0,
                   help="samples may be this far ahead of ingest's clock (and older than the raw retention by as much)")
    p.add_argument("--dedupe-window-seconds", type=float, default=3600.0,
                   help="a node's instants checked in memory this long (older ones in the store): "
                        "a Tick repeating one is a duplicate")
    kafka_security.add_options(p)
    p.add_argument("--prices", type=Path, metavar="FILE",
                   help="price catalog for --recommend-interval and --bill-interval "
                        "(default examples/prices.yaml when present)")


def _store_target(value: str) -> Path | str:
    """A file as a Path; a lake's name as it is (a path would fold a URI's slashes)."""
    return value if is_lake(value) else Path(value)


def _check(args: argparse.Namespace) -> None:
    if is_lake(args.db):
        if args.snapshot or args.recommend_interval or args.bill_interval:
            raise ConfigError("--snapshot, --recommend-interval and --bill-interval read a reader file of a DuckDB file; "
                              "readers of a lake attach the lake itself (--db ducklake:...)")
    elif args.lake_data:
        raise ConfigError("--lake-data goes with --db ducklake:postgres:CONNINFO")
    if args.snapshot_interval <= 0:
        raise ConfigError(f"--snapshot-interval must be > 0, got {args.snapshot_interval}")
    if args.raw_retention_days <= 0:
        raise ConfigError(f"--raw-retention-days must be > 0, got {args.raw_retention_days}")
    if args.batch_samples <= 0:
        raise ConfigError(f"--batch-samples must be > 0, got {args.batch_samples}")
    if args.snapshot and args.snapshot.resolve() == args.db.resolve():
        raise ConfigError("--snapshot must differ from --db")
    if args.instance_id is not None and not args.group:
        raise ConfigError("--instance-id needs --group: it names this worker in the group")
    if args.kamaji_kubeconfig and args.kamaji_in_cluster:
        raise ConfigError("--kamaji-kubeconfig and --kamaji-in-cluster: choose one")
    if args.kamaji_context and not args.kamaji_kubeconfig:
        raise ConfigError("--kamaji-context needs --kamaji-kubeconfig")
    if args.catalog_interval < 0:
        raise ConfigError(f"--catalog-interval must be >= 0, got {args.catalog_interval}")
    for name in ("max_interval_seconds", "clock_slack_seconds", "dedupe_window_seconds"):
        if getattr(args, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be > 0, got {getattr(args, name)}")
    if args.drain_wait is not None and (args.drain_wait < 0 or args.until_idle is None):
        raise ConfigError(f"--drain-wait must be >= 0 and goes with --until-idle, got {args.drain_wait}")
    if args.recommend_interval < 0:
        raise ConfigError(f"--recommend-interval must be >= 0, got {args.recommend_interval}")
    if args.recommend_interval and not args.snapshot:
        raise ConfigError("--recommend-interval needs --snapshot: the plan reads the snapshot, not the live file")
    if args.recommend_interval and not args.metrics_port:
        raise ConfigError("--recommend-interval needs --metrics-port: the figures are served there")
    if args.bill_interval < 0:
        raise ConfigError(f"--bill-interval must be >= 0, got {args.bill_interval}")
    if args.bill_interval and not (args.snapshot and args.metrics_port):
        raise ConfigError("--bill-interval needs --snapshot (it reads the snapshot) and --metrics-port "
                          "(the figures are served there)")


def catalog_sources(args: argparse.Namespace) -> list:
    """The Kamaji sources in the order tried: the TenantControlPlane API, then /metrics."""
    from slicemeter.ingest import kamaji, tenants
    from slicemeter.ingest.catalog_sync import Source

    sources = []
    if args.kamaji_kubeconfig or args.kamaji_in_cluster:
        access = (kamaji.load_kubeconfig(args.kamaji_kubeconfig, args.kamaji_context) if args.kamaji_kubeconfig
                  else kamaji.in_cluster_access())
        sources.append(Source("kamaji-api", lambda: kamaji.fetch_tenants(access)))
    if args.kamaji_metrics:
        url = args.kamaji_metrics
        sources.append(Source("kamaji-metrics", lambda: tenants.fetch_kamaji_tenants(url)))
    return sources


def run(args: argparse.Namespace) -> int:
    from slicemeter import store
    from slicemeter.ingest.catalog_sync import CatalogSync, log_unassigned
    from slicemeter.ingest.consumer import DEFAULT_DUCKDB_MEMORY, IngestConfig, Ingestor
    from slicemeter.ingest.metrics import IngestMetrics
    from slicemeter.chargeback.prices import load_prices_or_default
    from slicemeter.ingest.trust import load_publishers
    from slicemeter.tick import Limits

    ingestor = None

    def stop(signum, frame):
        # before the ingestor exists nothing is consumed, and loading a config or attaching
        # a store may take long: end at once, not at the end of start-up; then stop cleanly
        if ingestor is None:
            log.warning("stopped by %s during start-up: nothing was consumed", signal.Signals(signum).name)
            raise SystemExit(128 + signum)
        ingestor.stopping = True
    on_stop_signals(stop)   # Ctrl-C too: a KeyboardInterrupt would land mid-batch
    _check(args)
    security = kafka_security.settings(args)
    publishers = load_publishers(args.publishers) if args.publishers else None
    slack_ms = int(args.clock_slack_seconds * 1000)
    limits = Limits(max_interval_ms=int(args.max_interval_seconds * 1000),
                    max_age_ms=int(args.raw_retention_days * 86_400_000) + slack_ms, future_slack_ms=slack_ms)
    prices = load_prices_or_default(args.prices) if args.recommend_interval or args.bill_interval else None
    if args.bill_interval and prices is None:
        raise ConfigError("--bill-interval needs a price catalog: --prices FILE")
    sources = catalog_sources(args)
    # the memory limit from the first statement: a migration at start runs within it (and
    # checkpoints, so that no migrated table is left pinned in memory past the limit)
    con = store.connect(args.db, lake_data=args.lake_data, upgrade=True,
                        memory_limit=args.duckdb_memory or DEFAULT_DUCKDB_MEMORY)
    catalog_sync = None
    if args.tenants or sources:
        catalog_sync = CatalogSync(con.cursor(), args.tenants, sources, args.catalog_interval)
        catalog_sync.sync_once()  # a bad catalog or an unreachable source stops here, before any Tick
    metrics = IngestMetrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port, args.metrics_listen)
    refresher = None
    if args.recommend_interval:
        from slicemeter.ingest.headlines import HeadlineRefresher
        refresher = HeadlineRefresher(args.snapshot, args.recommend_interval, metrics.recommend, prices,
                                       dividend=metrics.dividend).start()
    bill = None
    if args.bill_interval:
        from slicemeter.ingest.headlines import LiveBillRefresher
        bill = LiveBillRefresher(args.snapshot, args.bill_interval, metrics.live_bill, prices,
                                 tuple(dict.fromkeys(args.bill_basis or ["allocation"])), args.bill_idle).start()
    cfg = IngestConfig(
        bootstrap=args.kafka, db=args.db, topic=args.topic, group=args.group or None,
        group_instance_id=args.instance_id or None,
        batch_samples=args.batch_samples, batch_max_s=args.batch_max_seconds,
        max_poll_records=args.max_poll_records, until_idle_s=args.until_idle, drain_wait_s=args.drain_wait,
        **({"duckdb_memory": args.duckdb_memory} if args.duckdb_memory else {}),
        raw_retention_days=args.raw_retention_days, snapshot=args.snapshot,
        snapshot_interval_s=args.snapshot_interval, session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=max(100, args.session_timeout_ms // 3),
        limits=limits, publishers=publishers, dedupe_window_s=args.dedupe_window_seconds, kafka_security=security,
    )
    ingestor = Ingestor(cfg, metrics=metrics, con=con)
    if catalog_sync:
        catalog_sync.start()
    try:
        rc = ingestor.run()
    finally:
        if refresher:
            refresher.stop()
        if bill:
            bill.stop()
        if catalog_sync:
            catalog_sync.stop()
    secs = ingestor.active_seconds()
    # one parseable line: bench/bench_ingest.py reads it
    log.info("ingest done: samples=%d active_seconds=%.3f rate=%.0f", ingestor.samples_written, secs,
             ingestor.samples_written / secs if secs else 0.0)
    log_unassigned(con, "ingest done")   # the start-up check saw the store before this run's Ticks
    con.close()
    return rc
