-- Every address a tenant's kubelets may use (Kamaji: the endpoint, advertise address,
-- certSANs, service DNS names; the catalog YAML: aliases), matched after normalising
-- (sql/views/010_attribution.sql, cluster_key).
CREATE TABLE IF NOT EXISTS tenant_aliases (
    tenant VARCHAR NOT NULL,
    alias  VARCHAR NOT NULL,
    PRIMARY KEY (tenant, alias)
);

-- What the catalog source said about a tenant beyond its identities. removed_at: the
-- TenantControlPlane is being deleted or no longer listed; the tenant stays so that its
-- stored hours keep their owner.
CREATE TABLE IF NOT EXISTS tenant_sources (
    tenant                  VARCHAR PRIMARY KEY,
    source                  VARCHAR NOT NULL,   -- yaml | kamaji-api | kamaji-metrics
    kubernetes_version      VARCHAR,
    admin_kubeconfig_secret VARCHAR,            -- the Secret's name only, never its content
    removed_at              TIMESTAMP
);

-- One row per catalog refresh, failed ones included (the dashboard shows the latest).
CREATE TABLE IF NOT EXISTS catalog_syncs (
    synced_at TIMESTAMP NOT NULL,
    source    VARCHAR   NOT NULL,
    ok        BOOLEAN   NOT NULL,
    tenants   INTEGER,
    aliases   INTEGER,
    message   VARCHAR
);
