"""Tenants from the Kamaji management cluster's TenantControlPlane API.

`GET /apis/kamaji.clastix.io/v1alpha1/tenantcontrolplanes` (a TenantControlPlaneList,
paged with limit/continue) with a kubeconfig's or the pod's service-account credentials,
over plain HTTPS. Reading the list into tenants is pure (`parse_tcp_list`): every address
a tenant's kubelets may use becomes an alias of that tenant. Field meanings follow
Kamaji's api/v1alpha1 types (docs/upstream.md, Kamaji).
"""
from __future__ import annotations

import base64
import ipaddress
import json
import os
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from slicemeter.ingest.tenants import Tenant, tenant_name
from slicemeter.common import ConfigError, read_yaml_file

GROUP_VERSION = "kamaji.clastix.io/v1alpha1"
LIST_PATH = "/apis/kamaji.clastix.io/v1alpha1/tenantcontrolplanes"
DEFAULT_PORT = 6443              # spec.networkProfile.port default
DEFAULT_CLUSTER_DOMAIN = "cluster.local"  # spec.networkProfile.clusterDomain default
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
PAGE_SIZE = 500
MAX_PAGE_BYTES = 64 << 20   # 500 planes are a few MB; more is not a TenantControlPlane page


@dataclass(frozen=True)
class ApiAccess:
    """How to reach one API server: URL, trust and credentials (a token or a client cert)."""
    server: str
    ca_pem: str | None = None
    insecure: bool = False
    token: str | None = None
    token_file: Path | None = None   # re-read per request: projected tokens rotate
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = None
    source: str = "kubeconfig"

    def bearer(self) -> str | None:
        if self.token_file is not None:
            try:
                return self.token_file.read_text().strip()
            except OSError as exc:
                raise ConfigError(f"{self.source}: cannot read token {self.token_file}: {exc.strerror}") from None
        return self.token


# ---- credentials -------------------------------------------------------------------------

def _named(items, kind: str, name: str, where: str) -> dict:
    for item in items or []:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(kind)
            if not isinstance(body, dict):
                raise ConfigError(f"{where}: {kind} {name!r} has no {kind}: mapping")
            return body
    raise ConfigError(f"{where}: no {kind} named {name!r}")


def _data_or_file(body: dict, key: str, base: Path, where: str) -> bytes | None:
    """A kubeconfig's `<key>-data` (base64) or `<key>` (a path, relative to the file)."""
    if body.get(f"{key}-data"):
        try:
            return base64.b64decode(body[f"{key}-data"], validate=True)
        except (ValueError, TypeError):
            raise ConfigError(f"{where}: {key}-data is not base64") from None
    if body.get(key):
        path = Path(os.path.expanduser(str(body[key])))
        path = path if path.is_absolute() else base / path
        try:
            return path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"{where}: {key} {path}: {exc.strerror}") from None
    return None


def access_from_kubeconfig(doc, base_dir: Path, where: str = "--kamaji-kubeconfig",
                           context: str | None = None) -> ApiAccess:
    """The current (or the named) context's server, CA and credentials (pure but for
    files the kubeconfig names)."""
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: not a kubeconfig (expected a mapping)")
    context = context or doc.get("current-context")
    if not context:
        raise ConfigError(f"{where}: no current-context")
    ctx = _named(doc.get("contexts"), "context", context, where)
    cluster = _named(doc.get("clusters"), "cluster", ctx.get("cluster"), where)
    user = _named(doc.get("users"), "user", ctx.get("user"), where) if ctx.get("user") else {}
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://"):
        raise ConfigError(f"{where}: cluster {ctx.get('cluster')!r}: server {server!r} is not an https:// URL")
    if "exec" in user or "auth-provider" in user:
        raise ConfigError(f"{where}: user {ctx.get('user')!r}: exec and auth-provider credentials are not "
                          "supported; use a service-account token or a client certificate")
    ca = _data_or_file(cluster, "certificate-authority", base_dir, where)
    token = user.get("token")
    token_file = None
    if not token and user.get("tokenFile"):
        token_file = Path(user["tokenFile"])
        token_file = token_file if token_file.is_absolute() else base_dir / token_file
    cert = _data_or_file(user, "client-certificate", base_dir, where)
    key = _data_or_file(user, "client-key", base_dir, where)
    if (cert is None) != (key is None):
        raise ConfigError(f"{where}: user {ctx.get('user')!r}: a client certificate needs both cert and key")
    return ApiAccess(server=server.rstrip("/"), ca_pem=ca.decode("ascii", "replace") if ca else None,
                     insecure=bool(cluster.get("insecure-skip-tls-verify")), token=token,
                     token_file=token_file, client_cert_pem=cert, client_key_pem=key, source=where)


def load_kubeconfig(path: str | Path, context: str | None = None) -> ApiAccess:
    path = Path(path)
    return access_from_kubeconfig(read_yaml_file(path, "--kamaji-kubeconfig"), path.parent, context=context)


def in_cluster_access(environ=os.environ, sa_dir: Path = SERVICE_ACCOUNT_DIR) -> ApiAccess:
    """The pod's own service account, as client-go's rest.InClusterConfig finds it."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    where = "--kamaji-in-cluster"
    if not host or not port:
        raise ConfigError(f"{where}: KUBERNETES_SERVICE_HOST/PORT are not set (not running in a pod?)")
    try:
        ca = (sa_dir / "ca.crt").read_text()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {sa_dir / 'ca.crt'}: {exc.strerror}") from None
    if not (sa_dir / "token").is_file():
        raise ConfigError(f"{where}: no service-account token in {sa_dir} (automountServiceAccountToken off?)")
    return ApiAccess(server=f"https://{_join(host, int(port))}", ca_pem=ca, token_file=sa_dir / "token",
                     source=where)


# ---- the list request ---------------------------------------------------------------------

def _ssl_context(access: ApiAccess, tmp: Path) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if access.insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif access.ca_pem:
        ctx = ssl.create_default_context(cadata=access.ca_pem)
    if access.client_cert_pem:
        # ssl loads a key pair only from files: a private directory, gone after the request
        cert, key = tmp / "client.crt", tmp / "client.key"
        for path, data in ((cert, access.client_cert_pem), (key, access.client_key_pem)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ctx.load_cert_chain(cert, key)
    return ctx


def fetch_tcp_list(access: ApiAccess, timeout: float = 10.0) -> dict:
    """Every TenantControlPlane, one TenantControlPlaneList (pages joined)."""
    items: list = []
    cont = None
    with tempfile.TemporaryDirectory(prefix="slicemeter-kube-") as tmp:
        try:
            ctx = _ssl_context(access, Path(tmp))
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"{access.source}: bad certificate data: {exc}") from None
        while True:
            query = {"limit": str(PAGE_SIZE)} | ({"continue": cont} if cont else {})
            url = f"{access.server}{LIST_PATH}?{urllib.parse.urlencode(query)}"
            req = urllib.request.Request(url, headers={"Accept": "application/json"})
            if (token := access.bearer()):
                req.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(req, timeout=timeout, context=ctx) as resp:  # noqa: S310 - https only
                    body = resp.read(MAX_PAGE_BYTES + 1)
                if len(body) > MAX_PAGE_BYTES:
                    raise ConfigError(f"{access.source}: GET {LIST_PATH}: a page over {MAX_PAGE_BYTES} bytes")
                page = json.loads(body)
            except urllib.error.HTTPError as exc:
                raise ConfigError(f"{access.source}: GET {LIST_PATH}: HTTP {exc.code} {exc.reason}"
                                  + (" (RBAC: list tenantcontrolplanes.kamaji.clastix.io)" if exc.code == 403 else "")) from None
            except (OSError, ValueError) as exc:
                raise ConfigError(f"{access.source}: GET {access.server}{LIST_PATH}: {exc}") from None
            if not isinstance(page, dict) or page.get("kind") != "TenantControlPlaneList":
                raise ConfigError(f"{access.source}: GET {LIST_PATH}: expected kind TenantControlPlaneList, "
                                  f"got {page.get('kind') if isinstance(page, dict) else type(page).__name__!r}")
            if not isinstance(page.get("items"), list):
                raise ConfigError(f"{access.source}: TenantControlPlaneList.items is not a list")
            items += page["items"]
            meta = page.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                return {"kind": "TenantControlPlaneList", "apiVersion": page.get("apiVersion"),
                        "metadata": {"resourceVersion": meta.get("resourceVersion")}, "items": items}


# ---- TenantControlPlane -> tenant ---------------------------------------------------------

def _join(host: str, port: int) -> str:
    """host:port as Go's net.JoinHostPort writes it (IPv6 in brackets), IPs canonical."""
    try:
        host = ipaddress.ip_address(host.strip("[]")).compressed
    except ValueError:
        host = host.lower()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _split_endpoint(endpoint: str) -> tuple[str, int] | None:
    """status.controlPlaneEndpoint (net.JoinHostPort form) -> (host, port); None if malformed,
    as Kamaji's AssignedControlPlaneAddress treats it."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    if host.startswith("["):
        if not host.endswith("]"):
            return None
        host = host[1:-1]
    elif ":" in host:
        return None
    return host, int(port)


def _hostname_port(hostname: str, default: int) -> tuple[str, int]:
    """Kamaji's GetControlPlaneAddressAndPortFromHostname: "host[:port]"."""
    parts = hostname.split(":")
    port = int(parts[1]) if len(parts) == 2 and parts[1].isdigit() and int(parts[1]) > 0 else default
    return parts[0], port


def _field(obj, path: str, kind: type, where: str):
    cur = obj
    for key in path.split("."):
        if cur is None:
            return None
        if not isinstance(cur, dict):
            raise ConfigError(f"{where}.{path}: expected an object on the way, got {type(cur).__name__}")
        cur = cur.get(key)
    if cur is not None and not isinstance(cur, kind):
        raise ConfigError(f"{where}.{path}: expected {kind.__name__}, got {type(cur).__name__}")
    return cur


@dataclass(frozen=True)
class ControlPlane:
    namespace: str
    name: str
    kubernetes_version: str | None
    endpoint: str | None          # status.controlPlaneEndpoint; None until exposed
    admin_kubeconfig_secret: str | None
    deleting_since: str | None    # metadata.deletionTimestamp
    aliases: tuple[str, ...]

    def tenant(self) -> Tenant:
        return Tenant(name=tenant_name(self.name), display_name=self.name, tcp_namespace=self.namespace,
                      tcp_name=self.name, api_server=f"https://{self.endpoint}" if self.endpoint else None,
                      kubernetes_version=self.kubernetes_version, aliases=self.aliases, source="kamaji-api",
                      admin_kubeconfig_secret=self.admin_kubeconfig_secret, removed_at=self.deleting_since)


def parse_tcp(item, where: str) -> ControlPlane:
    if not isinstance(item, dict):
        raise ConfigError(f"{where}: expected a TenantControlPlane object")
    if item.get("kind") not in (None, "TenantControlPlane"):
        raise ConfigError(f"{where}.kind: {item.get('kind')!r} is not TenantControlPlane")
    ns = _field(item, "metadata.namespace", str, where)
    name = _field(item, "metadata.name", str, where)
    if not ns or not name:
        raise ConfigError(f"{where}.metadata: namespace and name are required")
    where = f"{where} ({ns}/{name})"
    net = _field(item, "spec.networkProfile", dict, where) or {}
    spec_port = _field(net, "port", int, f"{where}.spec.networkProfile") or DEFAULT_PORT
    endpoint = _field(item, "status.controlPlaneEndpoint", str, where) or None
    assigned = _split_endpoint(endpoint) if endpoint else None
    # kubelets join on the advertised endpoint: the advertise address with the assigned
    # port (AdvertisedControlPlaneAddress); before exposure, the spec's port
    port = assigned[1] if assigned else spec_port
    hosts: list[tuple[str, int]] = []
    if assigned:
        hosts.append(assigned)
    for key in ("address", "advertiseAddress"):
        if (value := _field(net, key, str, f"{where}.spec.networkProfile")):
            hosts.append((value, port))
    sans = _field(net, "certSANs", list, f"{where}.spec.networkProfile") or []
    for i, san in enumerate(sans):
        if not isinstance(san, str):
            raise ConfigError(f"{where}.spec.networkProfile.certSANs[{i}]: expected a string")
        if san and "*" not in san:  # a wildcard SAN names no one cluster
            hosts.append((san, port))
    for key in ("ingress", "gateway"):
        if (hostname := _field(item, f"spec.controlPlane.{key}.hostname", str, where)):
            hosts.append(_hostname_port(hostname, port))
    domain = _field(net, "clusterDomain", str, f"{where}.spec.networkProfile") or DEFAULT_CLUSTER_DOMAIN
    # the Service's names in the management cluster (Kamaji puts them in the certificate;
    # the bare name is left out: it is the same string for planes of one name in two namespaces)
    hosts += [(f"{name}.{ns}.svc", spec_port), (f"{name}.{ns}.svc.{domain}", spec_port)]
    aliases = [f"https://{_join(h, p)}" for h, p in hosts]
    version = (_field(item, "status.kubernetesResources.version.version", str, where)
               or _field(item, "spec.kubernetes.version", str, where) or None)
    return ControlPlane(
        namespace=ns, name=name, kubernetes_version=version,
        endpoint=_join(*assigned) if assigned else None,
        admin_kubeconfig_secret=_field(item, "status.kubeconfig.admin.secretName", str, where) or None,
        deleting_since=_field(item, "metadata.deletionTimestamp", str, where) or None,
        aliases=tuple(dict.fromkeys(aliases)),
    )


def parse_tcp_list(doc) -> list[Tenant]:
    """Tenants from a TenantControlPlaneList (pure), sorted by namespace/name."""
    if not isinstance(doc, dict) or doc.get("kind") != "TenantControlPlaneList":
        raise ConfigError("TenantControlPlane list: expected kind TenantControlPlaneList")
    if doc.get("apiVersion") not in (None, GROUP_VERSION):
        raise ConfigError(f"TenantControlPlane list: apiVersion {doc.get('apiVersion')!r} is not {GROUP_VERSION}")
    items = doc.get("items")
    if not isinstance(items, list):
        raise ConfigError("TenantControlPlane list: items is not a list")
    planes = [parse_tcp(item, f"items[{i}]") for i, item in enumerate(items)]
    return [p.tenant() for p in sorted(planes, key=lambda p: (p.namespace, p.name))]


def fetch_tenants(access: ApiAccess, timeout: float = 10.0) -> list[Tenant]:
    return parse_tcp_list(fetch_tcp_list(access, timeout))
