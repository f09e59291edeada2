"""Who may see which tenant: the dashboard's tenant scope (pure: no Streamlit, no I/O but
reading the access file).

A scope is one tenant id, or None for every tenant. It comes from `--tenant T` (the whole
dashboard serves T), from the identity an authenticating proxy puts in the request headers
(`--access FILE` maps the user's groups to tenants), or both (then the user must be
allowed T). docs/dashboard.md, "Access", says why headers and which proxy.

Groups arrive as oauth2-proxy sends them: one header line per group, which some servers
fold into one comma-separated value; both forms are read, so a group name cannot contain
a comma.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from slicemeter.chargeback.exports import check_tenant  # noqa: F401  (the tenant id format; data.py and cli.py use it)
from slicemeter.common import ConfigError, read_yaml_file

ALL_TENANTS = "*"   # in the access file: a group that sees every tenant (platform operators)


class Denied(PermissionError):
    """This request may see nothing; the text says why (shown to the user, no data in it)."""


class Headers(Protocol):
    def get_all(self, key: str) -> list[str]: ...


@dataclass(frozen=True)
class AccessConfig:
    # group -> tenants it may see; None: every tenant
    groups: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    user_header: str = "X-Forwarded-Email"
    groups_header: str = "X-Forwarded-Groups"


def parse_access(doc: object, where: str = "access file") -> AccessConfig:
    """The access file's content: {user_header?, groups_header?, groups: {group: [tenant, ...] | "*"}}."""
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), dict) or not doc["groups"]:
        raise ConfigError(f"{where}: needs `groups:`, a mapping of group name to a list of tenants (or \"*\")")
    unknown = set(doc) - {"groups", "user_header", "groups_header"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    groups: dict[str, frozenset[str] | None] = {}
    for group, tenants in doc["groups"].items():
        if not isinstance(group, str) or not group.strip() or "," in group:
            raise ConfigError(f"{where}: group {group!r}: a non-empty name without commas")
        if tenants == ALL_TENANTS:
            groups[group] = None
            continue
        if not isinstance(tenants, list) or not tenants or not all(isinstance(t, str) for t in tenants):
            raise ConfigError(f"{where}: group {group!r}: a list of tenant ids, or \"*\"")
        for t in tenants:
            try:
                check_tenant(t)
            except ConfigError:
                raise ConfigError(f"{where}: group {group!r}: not a tenant id (lowercase DNS label): {t!r}") from None
        groups[group] = frozenset(tenants)
    names = {k: doc.get(k, AccessConfig.__dataclass_fields__[k].default) for k in ("user_header", "groups_header")}
    for key, name in names.items():
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"{where}: {key}: a header name")
    return AccessConfig(groups, **names)


def load_access(path: str | Path) -> AccessConfig:
    return parse_access(read_yaml_file(path, "--access"), f"--access {path}")


def header_values(headers: Headers, name: str) -> list[str]:
    """Every value of a repeated or comma-folded header, stripped, empty ones dropped."""
    return [v.strip() for line in headers.get_all(name) for v in line.split(",") if v.strip()]


def allowed_tenants(cfg: AccessConfig, headers: Headers) -> tuple[str, frozenset[str] | None]:
    """(user, the tenants the user's groups grant; None: every tenant). Denied without a
    user (the request did not come through the proxy) or without a granting group."""
    users = header_values(headers, cfg.user_header)
    if len(users) != 1:
        raise Denied(f"No single signed-in user ({cfg.user_header}): this dashboard is served "
                     "behind an authenticating proxy.")
    user = users[0]
    granted: set[str] = set()
    for group in header_values(headers, cfg.groups_header):
        if group not in cfg.groups:
            continue
        if cfg.groups[group] is None:
            return user, None
        granted |= cfg.groups[group]
    if not granted:
        raise Denied(f"{user}: none of your groups may see a tenant on this dashboard.")
    return user, frozenset(granted)


def resolve_scope(fixed: str | None, allowed: frozenset[str] | None, choice: str | None = None) -> str | None:
    """The tenant a request sees: `fixed` (--tenant) if allowed, else the user's choice
    among the allowed ones (the first, sorted, when the choice is not one of them)."""
    if fixed is not None:
        if allowed is not None and fixed not in allowed:
            raise Denied(f"This dashboard serves tenant {fixed}, which your groups do not grant.")
        return fixed
    if allowed is None:
        return None
    options = choices(allowed)
    return choice if choice in options else options[0]


def choices(allowed: Iterable[str]) -> list[str]:
    return sorted(allowed)
