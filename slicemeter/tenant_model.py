"""The tenant as a config file declares it: one model for the tenant catalog and scenarios.

A scenario's `tenants:` list is the catalog format (ingest reads a scenario as its
`--tenants`), so both validate a tenant by the same rules; a scenario additionally needs
each tenant's api_server, the cluster identity its simulated nodes report.
"""
from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, model_validator

from slicemeter.config_schema import Amount, DnsLabel, NonEmpty, Schema, invalid, matching

# an http(s) URL of a host name, IPv4 or [IPv6] address, optional port: a kube-apiserver
# address as a kubeconfig's `server:` names it
_API_SERVER = re.compile(r"^https?://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(:\d+)?/?$")
ApiServer = matching(_API_SERVER, "an https://host:port URL")


class KamajiRef(Schema):
    """The TenantControlPlane (namespace/name) in the management cluster."""
    namespace: NonEmpty
    name: NonEmpty


class NamespaceOverride(Schema):
    """Pods of `namespace` on this tenant's cluster are billed to `tenant` (a shared namespace)."""
    namespace: NonEmpty
    tenant: NonEmpty


class TenantSpec(Schema):
    name: DnsLabel
    display_name: str | None = None
    api_server: ApiServer | None = None
    kamaji: KamajiRef | None = None
    cost_center: str | None = None       # a string: an unquoted 007 would be the integer 7
    aliases: list[NonEmpty] = []         # more identities of the same cluster (kubelets' addresses)
    namespace_overrides: list[NamespaceOverride] = []
    monthly_budget: Amount | None = None   # in the price catalog's currency (docs/live-bill.md)

    @model_validator(mode="after")
    def _matches_something(self):
        if not (self.api_server or self.aliases or self.kamaji):
            raise invalid("needs api_server, aliases or kamaji {namespace, name} to match clusters")
        return self


class ScenarioTenant(TenantSpec):
    api_server: ApiServer


def _one_name_each(tenants: list[TenantSpec]) -> list[TenantSpec]:
    """Names are unique, and every namespace override names a tenant of the list."""
    names = [t.name for t in tenants]
    for i, t in enumerate(tenants):
        if names.index(t.name) != i:
            raise invalid(f"tenant {t.name!r} defined twice", i, "name")
    for i, t in enumerate(tenants):
        for j, o in enumerate(t.namespace_overrides):
            if o.tenant not in names:
                raise invalid(f"unknown tenant {o.tenant!r} (tenants: {', '.join(names)})", i, "namespace_overrides", j, "tenant")
    return tenants


TenantList = Annotated[list[TenantSpec], AfterValidator(_one_name_each)]
ScenarioTenantList = Annotated[list[ScenarioTenant], AfterValidator(_one_name_each)]
