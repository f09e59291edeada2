"""deploy/: Kubernetes manifests valid against the Kubernetes API schemas (offline, from the
kubernetes-validate package, strict: unknown fields are errors) and consistent with each other
and with the project (CLI subcommands, ports, config keys, image, non-root user).

The ServiceMonitor is a Prometheus Operator CRD, not in those schemas: it is checked against
the CRD's required fields (apiVersion, kind, spec.selector, spec.endpoints) and against the
Service it selects.
"""
from __future__ import annotations

import copy
import subprocess
import sys
import re
from decimal import Decimal
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from slicemeter.cli import COMMANDS
from test_compose import parse_cli

REPO = Path(__file__).resolve().parent.parent
DEPLOY = REPO / "deploy"
K8S_VERSION = "1.30"


def load() -> list[tuple[str, dict]]:
    docs = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        docs += [(str(path.relative_to(REPO)), d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


DOCS = load()


def of_kind(kind: str) -> list[dict]:
    return [d for _, d in DOCS if d["kind"] == kind]


def one(kind: str, name: str) -> dict:
    found = [d for d in of_kind(kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def pod_specs() -> list[tuple[str, dict]]:
    return [(f"{d['kind']}/{d['metadata']['name']}", d["spec"]["template"]["spec"])
            for d in of_kind("DaemonSet") + of_kind("Deployment")]


PROJECT_IMAGE = "ghcr.io/slicemeter/slicemeter:"              # Dockerfile target central
EXPORTER_IMAGE = "ghcr.io/slicemeter/slicemeter-exporter:"     # Dockerfile target exporter
SIGN_IN_IMAGE = "quay.io/oauth2-proxy/oauth2-proxy:"


def project_containers(spec: dict) -> list[dict]:
    """The containers running slicemeter itself (not the sign-in proxy beside the dashboard)."""
    return [c for c in spec["containers"] if c["image"].startswith((PROJECT_IMAGE, EXPORTER_IMAGE))]


def test_manifests_cover_the_pipeline():
    kinds = {(d["kind"], d["metadata"]["name"]) for _, d in DOCS}
    assert {("DaemonSet", "slicemeter-exporter"), ("Service", "slicemeter-exporter"),
            ("ServiceMonitor", "slicemeter-exporter"), ("Deployment", "slicemeter-ingest"),
            ("PersistentVolumeClaim", "slicemeter-data"), ("ConfigMap", "slicemeter-tenants"),
            ("ConfigMap", "slicemeter-prices"), ("ClusterRole", "slicemeter-exporter"),
            ("ClusterRoleBinding", "slicemeter-exporter"), ("ServiceAccount", "slicemeter-exporter"),
            ("ServiceAccount", "slicemeter-ingest"), ("ClusterRole", "slicemeter-kamaji-reader"),
            ("ClusterRoleBinding", "slicemeter-kamaji-reader"), ("ConfigMap", "slicemeter-kamaji")} <= kinds


@pytest.mark.parametrize("where,doc", [(w, d) for w, d in DOCS if d["apiVersion"] != "monitoring.coreos.com/v1"],
                         ids=lambda x: x if isinstance(x, str) else f"{x['kind']}/{x['metadata']['name']}")
def test_valid_against_the_kubernetes_api_schema(where, doc):
    assert kubernetes_validate.validate(doc, K8S_VERSION, strict=True) == K8S_VERSION


def test_the_schema_check_rejects_broken_manifests():
    ds = copy.deepcopy(one("DaemonSet", "slicemeter-exporter"))
    ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["contianerPort"] = 9400  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)
    ds = copy.deepcopy(one("DaemonSet", "slicemeter-exporter"))
    del ds["spec"]["selector"]  # required
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)


def test_service_monitors_have_the_crd_required_fields_and_match_a_service():
    monitors = of_kind("ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {"slicemeter-exporter", "slicemeter-ingest"}
    for m in monitors:
        assert m["apiVersion"] == "monitoring.coreos.com/v1" and m["metadata"]["name"]
        spec = m["spec"]
        assert spec["selector"]["matchLabels"] and spec["endpoints"], m["metadata"]["name"]
        services = [s for s in of_kind("Service")
                    if spec["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
        assert len(services) == 1, m["metadata"]["name"]
        port_names = {p["name"] for p in services[0]["spec"]["ports"]}
        for ep in spec["endpoints"]:
            assert ep["port"] in port_names and ep["path"] == "/metrics"
            assert re.fullmatch(r"\d+s", ep["interval"])
    (ep,) = one("ServiceMonitor", "slicemeter-exporter")["spec"]["endpoints"]
    assert ep["honorLabels"] is True
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"} \
        in ep["relabelings"]


def test_kustomizations_list_every_manifest_and_nothing_missing():
    listed = set()
    for kust in DEPLOY.rglob("kustomization.yaml"):
        k = yaml.safe_load(kust.read_text())
        assert k["namespace"] == "slicemeter"
        for res in k["resources"]:
            target = kust.parent / res
            assert target.exists(), f"{kust}: {res} missing"
            listed.add(target if target.is_file() else target / "kustomization.yaml")
    files = {p for p in DEPLOY.rglob("*.yaml") if p.name != "kustomization.yaml"}
    assert files <= listed, f"not in any kustomization: {files - listed}"


def test_services_select_pods_and_name_their_ports():
    for svc in of_kind("Service"):
        workloads = [d for d in of_kind("DaemonSet") + of_kind("Deployment")
                     if svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert len(workloads) == 1, svc["metadata"]["name"]
        ports = {p["name"]: p["containerPort"] for c in workloads[0]["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])}
        for p in svc["spec"]["ports"]:
            assert ports[p["targetPort"]] == p["port"], (svc["metadata"]["name"], p)


def test_workloads_selectors_match_their_pod_labels():
    for d in of_kind("DaemonSet") + of_kind("Deployment"):
        assert d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()


def test_containers_have_requests_limits_and_run_as_the_images_non_root_user():
    dockerfile_user = re.search(r"^USER (\d+)", (REPO / "Dockerfile").read_text(), re.M).group(1)
    from slicemeter import __version__ as version   # pyproject.toml reads it from there
    for where, spec in pod_specs():
        psc = spec["securityContext"]
        assert psc["runAsNonRoot"] is True and str(psc["runAsUser"]) == dockerfile_user, where
        assert psc["seccompProfile"]["type"] == "RuntimeDefault", where
        assert {c["image"].rsplit(":", 1)[0] + ":" for c in spec["containers"]} <= {PROJECT_IMAGE, EXPORTER_IMAGE, SIGN_IN_IMAGE}
        for c in project_containers(spec):   # the node image runs the exporter and nothing else
            assert c["image"].startswith(EXPORTER_IMAGE) == (c["args"][0] == "exporter"), (where, c["name"])
        for c in spec["containers"]:
            r = c["resources"]
            assert {"cpu", "memory"} <= set(r["requests"]) and {"cpu", "memory"} <= set(r["limits"]), (where, c["name"])
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"], (where, c["name"])
            assert sc["readOnlyRootFilesystem"] is True
            if c in project_containers(spec):
                assert c["image"].endswith(f":{version}"), (where, c["image"])
            else:   # a pinned release, never a moving tag
                assert re.fullmatch(r"v\d+\.\d+\.\d+", c["image"].rsplit(":", 1)[1]), (where, c["image"])
            assert not any(k.startswith("nvidia.com/") for k in r["requests"]), "must not take a GPU from HAMi"


def _env_names(container: dict, configmaps: dict[str, dict]) -> set[str]:
    names = {e["name"] for e in container.get("env", [])}
    for ref in container.get("envFrom", []):
        names |= set(configmaps[ref["configMapRef"]["name"]]["data"])
    return names


def test_containers_run_existing_subcommands_with_defined_variables():
    configmaps = {c["metadata"]["name"]: c for c in of_kind("ConfigMap")}
    for where, spec in pod_specs():
        for c in project_containers(spec):
            args = c["args"]
            assert args[0] in COMMANDS, f"{where}/{c['name']}: {args[0]} is not a slicemeter subcommand"
            for var in re.findall(r"\$\((\w+)\)", " ".join(args)):
                assert var in _env_names(c, configmaps), f"{where}/{c['name']}: $({var}) undefined"
            mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
            for arg in args:
                m = re.match(r"--[\w-]+=(/[^$]+)", arg)
                # HOOK_PATH (its containers/ is mounted) and /proc (the host's, through hostPID)
                if m and m.group(1) not in ("/usr/local/vgpu", "/proc"):
                    assert any(m.group(1) == p or m.group(1).startswith(p + "/") for p in mounts), \
                        f"{where}/{c['name']}: {m.group(1)} is on no volume"


def test_containers_pass_their_subcommands_own_option_parsers():
    configmaps = {c["metadata"]["name"]: c for c in of_kind("ConfigMap")}
    parsed = {}
    for where, spec in pod_specs():
        for c in project_containers(spec):
            values = {}
            for ref in c.get("envFrom", []):
                values |= configmaps[ref["configMapRef"]["name"]]["data"]
            values |= {e["name"]: e.get("value", f"<{e['name']}>") for e in c.get("env", [])}
            argv = [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a) for a in c["args"]]
            if (args := parse_cli(argv)) is not None:
                parsed[argv[0]] = args
    assert {"exporter", "ingest", "dashboard"} <= set(parsed)
    assert parsed["exporter"].interval == 10 and parsed["exporter"].kafka.endswith(":9092")
    # DRA is off until the cluster's config names the API server
    assert parsed["exporter"].dra_api == "" and parsed["exporter"].dra_split == "equal"
    # listeners default to loopback; the scraped ones say 0.0.0.0, the dashboard stays on
    # loopback behind its sign-in proxy
    assert parsed["exporter"].listen == "0.0.0.0" and parsed["ingest"].metrics_listen == "0.0.0.0"
    assert parsed["dashboard"].address == "127.0.0.1" and parsed["dashboard"].access


def test_exporter_daemonset_reads_hami_read_only_and_knows_its_node():
    spec = one("DaemonSet", "slicemeter-exporter")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    hami = [m for m in c["volumeMounts"] if m["mountPath"] in ("/usr/local/vgpu/containers", "/usr/local/vgpu/claims")]
    assert len(hami) == 2 and all(m["readOnly"] is True for m in hami)
    assert {volumes[m["name"]]["hostPath"]["path"] for m in hami} == {"/usr/local/vgpu/containers", "/usr/local/vgpu/claims"}
    assert "--hami-dir=/usr/local/vgpu" in c["args"]
    # Every other hostPath would be a write path into the node: none.
    assert sorted(v["name"] for v in spec["volumes"] if "hostPath" in v) == sorted(m["name"] for m in hami)
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "--node=$(NODE_NAME)" in c["args"]
    # The exporter's default pod source: https://$NODE_IP:10250/pods with the service-account
    # token (a --pods-url would be fetched without the token).
    assert env["NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert not any(a.startswith(("--pods-url", "--pods-file")) for a in c["args"])
    assert spec.get("automountServiceAccountToken", True) is not False
    assert spec["runtimeClassName"] == "nvidia" and env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    # hostPID only for the cgroup attribution of NVML processes through --proc-root, and documented.
    if spec.get("hostPID"):
        assert "--proc-root=/proc" in c["args"]
        assert "## hostPID" in (REPO / "docs" / "deploy.md").read_text()
    assert "--port=9400" in c["args"]


def test_exporter_may_read_the_kubelet_and_dra_claims_and_nothing_more():
    ds = one("DaemonSet", "slicemeter-exporter")
    sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
    binding = one("ClusterRoleBinding", "slicemeter-exporter")
    assert {"kind": "ServiceAccount", "name": sa, "namespace": "slicemeter"} in binding["subjects"]
    role = one("ClusterRole", binding["roleRef"]["name"])
    grants = {(group, res, verb) for rule in role["rules"] for group in rule["apiGroups"]
              for res in rule["resources"] for verb in rule["verbs"]}
    assert grants == {("", "nodes/proxy", "get"), ("", "nodes", "get")} | {
        ("resource.k8s.io", res, verb) for res in ("resourceclaims", "resourceslices") for verb in ("get", "list", "watch")}


def test_ingest_may_read_tenantcontrolplanes_and_nothing_more():
    spec = one("Deployment", "slicemeter-ingest")["spec"]["template"]["spec"]
    sa = spec["serviceAccountName"]
    bindings = [b for b in of_kind("ClusterRoleBinding") + of_kind("RoleBinding")
                if {"kind": "ServiceAccount", "name": sa, "namespace": "slicemeter"} in b["subjects"]]
    assert len(bindings) == 1
    role = one("ClusterRole", bindings[0]["roleRef"]["name"])
    grants = {(group, res, verb) for rule in role["rules"] for group in rule["apiGroups"]
              for res in rule["resources"] for verb in rule["verbs"]}
    assert grants == {("kamaji.clastix.io", "tenantcontrolplanes", v) for v in ("get", "list", "watch")}


def test_ingest_reads_kamaji_through_its_kubeconfig_with_a_token_only_it_sees(tmp_path):
    from slicemeter.ingest import kamaji

    spec = one("Deployment", "slicemeter-ingest")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False  # not into the dashboard container
    containers = {c["name"]: c for c in spec["containers"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    args = dict(a.split("=", 1) for a in containers["ingest"]["args"][1:] if "=" in a)
    kubeconfig_path = Path(args["--kamaji-kubeconfig"])
    mounts = {m["mountPath"]: m for m in containers["ingest"]["volumeMounts"]}
    config_volume = volumes[mounts[str(kubeconfig_path.parent)]["name"]]
    kubeconfig = one("ConfigMap", config_volume["configMap"]["name"])["data"][kubeconfig_path.name]
    # the client's own kubeconfig reader accepts it; the CA and token it names lie on the
    # projected service-account volume
    doc = yaml.safe_load(kubeconfig)
    ca_path = Path(doc["clusters"][0]["cluster"]["certificate-authority"])
    token_volume = volumes[mounts[str(ca_path.parent)]["name"]]
    sources = token_volume["projected"]["sources"]
    token_src = next(s["serviceAccountToken"] for s in sources if "serviceAccountToken" in s)
    ca_src = next(s["configMap"] for s in sources if "configMap" in s)
    assert ca_src["name"] == "kube-root-ca.crt" and ca_src["items"][0]["path"] == ca_path.name
    (tmp_path / ca_path.name).write_text((REPO / "tests" / "data" / "kubelet-selfsigned.crt").read_text())
    (tmp_path / token_src["path"]).write_text("t0ken")
    local = yaml.safe_load(kubeconfig.replace(str(ca_path.parent), str(tmp_path)))
    access = kamaji.access_from_kubeconfig(local, tmp_path)
    assert access.server == "https://kubernetes.default.svc:443" and access.bearer() == "t0ken"
    assert access.ca_pem.startswith("-----BEGIN CERTIFICATE-----")
    assert not any(m["name"] == token_volume["name"] for m in containers["dashboard"]["volumeMounts"])
    assert args["--catalog-interval"] and float(args["--catalog-interval"]) > 0


def test_ingest_is_a_single_writer_with_its_data_on_the_claim():
    dep = one("Deployment", "slicemeter-ingest")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    spec = dep["spec"]["template"]["spec"]
    claims = {v["name"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
    pvc = one("PersistentVolumeClaim", "slicemeter-data")
    assert {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v} == {"slicemeter-data"}
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    containers = {c["name"]: c for c in project_containers(spec)}
    ingest_args = dict(a.split("=", 1) for a in containers["ingest"]["args"][1:])
    dash_args = dict(a.split("=", 1) for a in containers["dashboard"]["args"][1:])
    assert dash_args["--db"] == ingest_args["--snapshot"] != ingest_args["--db"]
    for c in containers.values():
        assert any(m["name"] in claims and m["mountPath"] == "/data" for m in c["volumeMounts"])


def test_config_maps_hold_valid_catalogs_consistent_with_the_exporter():
    tenants = yaml.safe_load(one("ConfigMap", "slicemeter-tenants")["data"]["tenants.yaml"])["tenants"]
    for t in tenants:
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", t["name"]) and t["api_server"].startswith("https://")
        assert set(t["kamaji"]) == {"namespace", "name"}
    exporter = one("ConfigMap", "slicemeter-exporter")["data"]
    assert {"name": exporter["TENANT"], "api_server": exporter["CLUSTER"]}.items() <= \
        next(t for t in tenants if t["name"] == exporter["TENANT"]).items()
    prices = yaml.safe_load(one("ConfigMap", "slicemeter-prices")["data"]["prices.yaml"])
    assert prices["currency"] == "USD"
    for model, price in prices["gpu_hour"].items():
        assert isinstance(price, str) and Decimal(price) > 0, f"{model}: prices are strings (Decimal), not floats"
    mounted = {v["configMap"]["name"] for v in one("Deployment", "slicemeter-ingest")["spec"]["template"]["spec"]["volumes"]
               if "configMap" in v}
    assert {"slicemeter-tenants", "slicemeter-prices"} <= mounted


def test_prometheusrule_generator_carries_every_rule_with_the_crd_required_fields():
    out = subprocess.run([sys.executable, str(DEPLOY / "prometheusrule.py")], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    rule = yaml.safe_load(out)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    groups = rule["spec"]["groups"]
    expected = [g for p in sorted((REPO / "prometheus" / "rules").glob("*.yml"))
                for g in yaml.safe_load(p.read_text())["groups"]]
    assert groups == expected and len({g["name"] for g in groups}) == len(groups)
    for g in groups:  # the CRD requires a group name and each rule's expr
        assert g["name"] and g["rules"]
        for r in g["rules"]:
            assert r["expr"] and ("record" in r) != ("alert" in r)


# --- access: the sign-in proxy and the NetworkPolicies ----------------------------------------

def _selects(selector: dict, labels: dict) -> bool:
    assert set(selector) <= {"matchLabels"}, "only matchLabels selectors are evaluated here"
    return selector.get("matchLabels", {}).items() <= labels.items()


def _allowed_ports(workload: dict) -> tuple[bool, set[int]]:
    """(is the pod isolated for ingress, the container ports some policy lets traffic reach)."""
    labels = workload["spec"]["template"]["metadata"]["labels"]
    named = {p["name"]: p["containerPort"] for c in workload["spec"]["template"]["spec"]["containers"]
             for p in c.get("ports", [])}
    isolated, allowed = False, set()
    for pol in of_kind("NetworkPolicy"):
        if not _selects(pol["spec"]["podSelector"], labels) or "Ingress" not in pol["spec"]["policyTypes"]:
            continue
        isolated = True
        for rule in pol["spec"].get("ingress", []):
            assert rule.get("from") and rule.get("ports"), f"{pol['metadata']['name']}: a rule open to all"
            for src in rule["from"]:
                assert set(src) <= {"namespaceSelector", "podSelector"} and all(src.values()), src
            allowed |= {named[p["port"]] if isinstance(p["port"], str) else p["port"] for p in rule["ports"]}
    return isolated, allowed


def test_network_policies_let_in_only_the_scrapes_and_the_sign_in_proxy():
    assert {("NetworkPolicy", n) for n in ("slicemeter-default-deny-ingress", "slicemeter-ingest", "slicemeter-exporter")} \
        <= {(d["kind"], d["metadata"]["name"]) for _, d in DOCS}
    deny = one("NetworkPolicy", "slicemeter-default-deny-ingress")["spec"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress"] and not deny.get("ingress")
    assert _allowed_ports(one("Deployment", "slicemeter-ingest")) == (True, {9401, 4180})   # not 8501
    assert _allowed_ports(one("DaemonSet", "slicemeter-exporter")) == (True, {9400})
    # every Service port leads to a port the policies open (a closed one would be a dead Service)
    for svc in of_kind("Service"):
        (workload,) = [d for d in of_kind("DaemonSet") + of_kind("Deployment")
                       if svc["spec"]["selector"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
        assert {p["port"] for p in svc["spec"]["ports"]} <= _allowed_ports(workload)[1], svc["metadata"]["name"]


def test_the_policy_check_notices_an_open_port():
    dep = copy.deepcopy(one("Deployment", "slicemeter-ingest"))
    dep["spec"]["template"]["metadata"]["labels"] = {"app.kubernetes.io/name": "other"}
    assert _allowed_ports(dep) == (True, set())   # only the default deny selects it


def test_the_dashboard_is_reached_only_through_the_sign_in_proxy():
    from slicemeter.dashboard.access import parse_access

    spec = one("Deployment", "slicemeter-ingest")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in spec["containers"]}
    dash, proxy = containers["dashboard"], containers["oauth2-proxy"]
    dash_args = dict(a.split("=", 1) for a in dash["args"][1:])
    assert dash_args["--address"] == "127.0.0.1" and not dash.get("ports")
    proxy_args = dict(a.split("=", 1) for a in proxy["args"])
    assert proxy_args["--upstream"] == f"http://127.0.0.1:{dash_args['--port']}/"
    # oauth2-proxy: --pass-user-headers sets X-Forwarded-Email and X-Forwarded-Groups (one line
    # per group), and --skip-auth-strip-headers drops those a client sends (docs/upstream.md)
    assert proxy_args["--pass-user-headers"] == "true" and proxy_args["--skip-auth-strip-headers"] == "true"
    assert proxy_args["--provider"] == "oidc" and proxy_args["--oidc-groups-claim"] == "groups"
    assert proxy_args["--http-address"] == f"0.0.0.0:{proxy['ports'][0]['containerPort']}"
    assert {r.get("secretRef", r.get("configMapRef"))["name"] for r in proxy["envFrom"]} == {"slicemeter-oauth2-proxy"}
    proxy_env = one("ConfigMap", "slicemeter-oauth2-proxy")["data"]
    assert all(k.startswith("OAUTH2_PROXY_") for k in proxy_env)
    assert proxy_env["OAUTH2_PROXY_OIDC_ISSUER_URL"].startswith("https://")
    # the access file the dashboard mounts parses, reads the proxy's headers, and grants
    # only tenants of the catalog
    mount = next(m for m in dash["volumeMounts"] if dash_args["--access"].startswith(m["mountPath"] + "/"))
    (vol,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    cm = one("ConfigMap", vol["configMap"]["name"])["data"]
    cfg = parse_access(yaml.safe_load(cm[Path(dash_args["--access"]).name]))
    assert (cfg.user_header, cfg.groups_header) == ("X-Forwarded-Email", "X-Forwarded-Groups")
    catalog = {t["name"] for t in yaml.safe_load(one("ConfigMap", "slicemeter-tenants")["data"]["tenants.yaml"])["tenants"]}
    assert set().union(*(g for g in cfg.groups.values() if g is not None)) <= catalog
    svc_ports = {p["name"]: p["port"] for p in one("Service", "slicemeter-ingest")["spec"]["ports"]}
    assert svc_ports["http"] == proxy["ports"][0]["containerPort"]
