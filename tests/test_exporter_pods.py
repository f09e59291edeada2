from __future__ import annotations

import argparse
import http.server
import json
import os
import ssl
import threading
from pathlib import Path

import pytest

from slicemeter.exporter.sources.pods import (
    AnnotationError,
    Grant,
    PodCache,
    cluster_from_kubeconfig,
    file_source,
    index_pods,
    parse_vgpu_allocated,
    pid_to_pod,
    pod_from_cgroup,
    url_source,
)

U1 = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
U2 = "GPU-0a1b2c3d-0000-1111-2222-666677778888"
UID = "6f1c2a4e-9b7d-4c3e-8a21-0d9e8f7a6b5c"
CID = "3f" * 32


def test_parse_vgpu_allocated_multi_container_multi_gpu():
    value = f"{U1},NVIDIA,3000,25:;;{U1},NVIDIA,1000,10:{U2},NVIDIA,2000,0:;"
    assert parse_vgpu_allocated(value) == [
        [Grant(U1, "NVIDIA", 3000, 25)],
        [],                                          # a container without GPU keeps its index
        [Grant(U1, "NVIDIA", 1000, 10), Grant(U2, "NVIDIA", 2000, 0)],
    ]
    assert parse_vgpu_allocated(f"{U1},NVIDIA,3000,25:") == [[Grant(U1, "NVIDIA", 3000, 25)]]
    assert parse_vgpu_allocated("") == []


@pytest.mark.parametrize("bad, words", [
    (f"{U1},NVIDIA,3000:", "4 fields"),
    ("not-a-uuid,NVIDIA,1,1:", "GPU UUID"),
    (f"{U1},NVIDIA,-5,1:", "not integers"),
    (f"{U1},NVIDIA,100,250:", "out of range"),
])
def test_parse_vgpu_allocated_rejects(bad, words):
    with pytest.raises(AnnotationError, match=words):
        parse_vgpu_allocated(bad)


@pytest.mark.parametrize("text, expected", [
    # cgroup v2, systemd driver, containerd
    (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
     (UID, CID)),
    # cgroup v2, systemd driver, cri-o, guaranteed QoS
    (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope", (UID, CID)),
    # cgroup v1, cgroupfs driver (containerd or docker)
    ("12:pids:/kubepods/besteffort/pod{u}/{c}\n11:memory:/kubepods/besteffort/pod{u}/{c}\n".format(u=UID, c=CID), (UID, CID)),
    # cgroup v1, systemd driver, docker
    (f"4:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}.slice/docker-{CID}.scope",
     (UID, CID)),
    # the pod's own slice, no container part
    (f"0::/kubepods/pod{UID}", (UID, None)),
    # not a pod: host processes and system services
    ("0::/system.slice/containerd.service", None),
    ("0::/user.slice/user-1000.slice/session-3.scope", None),
    ("", None),
])
def test_pod_from_cgroup(text, expected):
    assert pod_from_cgroup(text) == expected


def test_pid_to_pod_reads_injected_proc_root(tmp_path):
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(f"0::/kubepods/burstable/pod{UID}/{CID}\n")
    assert pid_to_pod(4242, str(tmp_path)) == (UID, CID)
    assert pid_to_pod(4243, str(tmp_path)) is None


def test_cluster_from_kubeconfig():
    kc = """
apiVersion: v1
kind: Config
clusters:
- name: other
  cluster: {server: https://wrong.example:6443}
- name: tenant
  cluster: {server: https://acme.tenants.example:6443/, certificate-authority: /etc/kubernetes/pki/ca.crt}
contexts:
- name: kubelet@tenant
  context: {cluster: tenant, user: kubelet}
current-context: kubelet@tenant
"""
    assert cluster_from_kubeconfig(kc) == "https://acme.tenants.example:6443"
    with pytest.raises(ValueError, match="server"):
        cluster_from_kubeconfig("apiVersion: v1\nclusters: []\n")


def _pod(uid, name, ann=None, phase="Running", containers=("main",), gpu=None):
    cs = []
    for c in containers:
        lim = {"nvidia.com/gpu": str(gpu)} if gpu else {}
        cs.append({"name": c, "resources": {"limits": lim}})
    return {"metadata": {"uid": uid, "name": name, "namespace": "ns", "annotations": ann or {}},
            "spec": {"containers": cs}, "status": {"phase": phase}}


def test_index_pods_skips_finished_and_bad_pods():
    items = [
        _pod("u1", "running", {"hami.io/vgpu-devices-allocated": f"{U1},NVIDIA,100,10:;"}),
        _pod("u2", "done", phase="Succeeded"),
        _pod("u3", "whole", gpu=1),
        _pod("u4", "broken-annotation", {"hami.io/vgpu-devices-allocated": "garbage"}),
        {"metadata": {"name": "no-uid"}},
    ]
    idx = index_pods({"items": items})
    assert set(idx.pods) == {"u1", "u3", "u4"} and idx.errors == 2
    assert idx.pods["u1"].grants == {"main": [Grant(U1, "NVIDIA", 100, 10)]} and idx.pods["u1"].hami
    assert idx.pods["u3"].whole_gpus == {"main": 1} and not idx.pods["u3"].hami
    assert idx.pods["u4"].annotation_error and idx.pods["u4"].grants == {}


class _Kubelet(http.server.BaseHTTPRequestHandler):
    body = b""
    seen_auth: list = []

    def do_GET(self):
        self.seen_auth.append(self.headers.get("Authorization"))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a):
        pass


def test_url_source_with_token_and_cache_keeps_last_good(tmp_path):
    _Kubelet.body = json.dumps({"items": [_pod("u1", "web")]}).encode()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Kubelet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    try:
        cache = PodCache(url_source(f"http://127.0.0.1:{server.server_address[1]}/pods", str(token)))
        assert cache.refresh() and set(cache.get().pods) == {"u1"}
        assert _Kubelet.seen_auth[-1] == "Bearer s3cret"
    finally:
        server.shutdown()
        server.server_close()
    assert not cache.refresh()                 # kubelet gone: keep the last list, count the error
    assert set(cache.get().pods) == {"u1"} and cache.errors_total == 1


def test_file_source(tmp_path):
    f = tmp_path / "pods.json"
    f.write_text(json.dumps({"items": [_pod("u9", "x")]}))
    cache = PodCache(file_source(str(f)))
    assert cache.refresh() and cache.get().pods["u9"].name == "x" and cache.get().fetched


def test_pod_cache_refreshes_on_its_own_timer():
    import time

    calls = []

    def source():
        calls.append(1)
        return {"items": [_pod(f"u{len(calls)}", "p")]}

    cache = PodCache(source, refresh_s=0.05)
    cache.start()
    try:
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) >= 3
        assert next(iter(cache.get().pods)) != "u1"    # the index follows the newest list
    finally:
        cache.stop()


# A self-signed certificate for 127.0.0.1 (openssl req -x509 -days 36500), as a kubelet's
# default serving certificate is.
CERT = Path(__file__).resolve().parent / "data" / "kubelet-selfsigned.crt"
KEY = CERT.with_suffix(".key")


@pytest.fixture
def tls_kubelet():
    """An HTTPS /pods endpoint with the self-signed certificate; yields its URL."""
    _Kubelet.body = json.dumps({"items": [_pod("u7", "tls")]}).encode()
    _Kubelet.seen_auth = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Kubelet)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(CERT, KEY)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}/pods"
    server.shutdown()
    server.server_close()


def exporter_args(*argv: str):
    from slicemeter.exporter import cli

    p = argparse.ArgumentParser()
    cli.configure(p)
    return p.parse_args(["--hami-dir", "/nonexistent", "--kafka", "127.0.0.1:9", *argv])


def test_pods_url_sends_the_token_and_checks_the_kubelet_certificate(tls_kubelet, tmp_path):
    from slicemeter.exporter.cli import _pod_source

    token = tmp_path / "token"
    token.write_text("tok-1\n")
    # verified against the CA given: the token goes along
    cache = PodCache(_pod_source(exporter_args("--pods-url", tls_kubelet, "--token-file", str(token),
                                               "--kubelet-ca", str(CERT))))
    assert cache.refresh() and set(cache.get().pods) == {"u7"}
    assert _Kubelet.seen_auth == ["Bearer tok-1"]
    token.write_text("tok-2\n")  # a rotated token is read on the next fetch
    assert cache.refresh() and _Kubelet.seen_auth[-1] == "Bearer tok-2"
    # no CA: the self-signed certificate is refused, never silently accepted
    refused = PodCache(_pod_source(exporter_args("--pods-url", tls_kubelet, "--token-file", str(token))))
    assert not refused.refresh() and refused.errors_total == 1 and len(_Kubelet.seen_auth) == 2
    # unless verification is skipped on purpose
    insecure = PodCache(_pod_source(exporter_args("--pods-url", tls_kubelet, "--token-file", str(token),
                                                  "--kubelet-insecure-skip-verify")))
    assert insecure.refresh() and _Kubelet.seen_auth[-1] == "Bearer tok-2"


def test_pods_url_without_a_token_file_sends_no_token(tls_kubelet):
    from slicemeter.exporter.cli import _pod_source
    from slicemeter.exporter.sources.pods import SA_DIR

    assert not os.path.exists(SA_DIR)  # not in a pod: nothing to send
    cache = PodCache(_pod_source(exporter_args("--pods-url", tls_kubelet, "--kubelet-ca", str(CERT))))
    assert cache.refresh() and _Kubelet.seen_auth == [None]


def test_pod_source_options_are_checked(tmp_path, capsys):
    from slicemeter.exporter.cli import _pod_source
    from slicemeter.common import ConfigError

    with pytest.raises(ConfigError, match="--token-file"):
        _pod_source(exporter_args("--pods-url", "https://127.0.0.1:1/pods", "--token-file", str(tmp_path / "no")))
    with pytest.raises(ConfigError, match="--kubelet-ca"):
        _pod_source(exporter_args("--kubelet-ca", str(tmp_path / "no.crt")))
    with pytest.raises(SystemExit):
        exporter_args("--kubelet-ca", str(CERT), "--kubelet-insecure-skip-verify")
    assert "not allowed with argument" in capsys.readouterr().err
