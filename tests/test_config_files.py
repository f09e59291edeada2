"""Config files trust nothing: every YAML the product reads refuses a key given twice and
aliases that multiply ("billion laughs"), naming the file, the line and the key, through
the commands an operator runs."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slicemeter.broker import free_port
from slicemeter.common import YAML_MAX_NODES, ConfigError, parse_yaml
from slicemeter.exporter.sources.pods import cluster_from_kubeconfig
from slicemeter.testkit.ingest_helpers import SLICEMETER

REPO = Path(__file__).resolve().parent.parent

# nine levels of nine: 9**9 (387 million) strings from 414 bytes
LAUGHS = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n" for prev, name in zip("abcdefgh", "bcdefghi"))
LAUGHS_LINE = 6   # f: [*e, ...]: each *e repeats 9**4 strings and the lists holding them


# Runs a command, ends it at a deadline and prints "<wait status> <peak RSS in KiB>". The
# command is a grandchild of the test so that its peak is its own: Linux keeps the largest
# RSS a process had across exec, so a child forked straight from a grown test process would
# report the test's size, while one forked from this small wrapper starts afresh.
MEASURE = """import os, subprocess, sys, time
deadline, started = float(sys.argv[1]), time.monotonic()
proc = subprocess.Popen(sys.argv[2:])
while True:
    pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    if pid:
        break
    if time.monotonic() - started > deadline:
        proc.kill()
        _, status, usage = os.wait4(proc.pid, 0)
        break
    time.sleep(0.05)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def run_cli(args: list[str], cwd: Path, deadline_s: float = 60.0) -> tuple[int, str, float, int]:
    """(exit status, stderr, seconds, peak RSS in KiB) of one `slicemeter` command."""
    err = cwd / "stderr.txt"
    started = time.monotonic()
    with open(err, "w") as stderr:
        out = subprocess.run([sys.executable, "-c", MEASURE, str(deadline_s), *SLICEMETER, *args], cwd=cwd,
                             stdout=subprocess.PIPE, stderr=stderr, text=True, check=True).stdout
    status, peak_kib = map(int, out.split()[-2:])
    return status, err.read_text(), time.monotonic() - started, peak_kib


def kinds(tmp_path: Path) -> dict[str, tuple[list[str], str, int, str]]:
    """file kind -> (the command reading `f.yaml` in tmp_path, a file whose key on `line` is
    written twice, that line, the key)."""
    db = tmp_path / "x.duckdb"
    (tmp_path / "empty.duckdb").write_bytes(b"")
    ingest = ["ingest", "--kafka", "127.0.0.1:9", "--db", str(db)]
    return {
        "tenants": ([*ingest, "--tenants", "f.yaml"],
                    "tenants:\n  - name: acme\n    api_server: https://acme:6443\n"
                    "    api_server: https://globex:6443\n", 4, "api_server"),
        "publishers": ([*ingest, "--publishers", "f.yaml"],
                       "publishers:\n  - key_id: acme-1\n    key_file: acme.key\n    clusters: [https://acme:6443]\n"
                       "    clusters: [https://globex:6443]\n", 5, "clusters"),
        "kubeconfig": ([*ingest, "--kamaji-kubeconfig", "f.yaml"],
                       "current-context: mgmt\ncontexts: [{name: mgmt, context: {cluster: mgmt}}]\n"
                       "clusters:\n- name: mgmt\n  cluster:\n    server: https://mgmt:6443\n"
                       "    server: https://evil:6443\n", 7, "server"),
        "prices": (["export", "--db", str(db), "--month", "2026-11", "--out", "out", "--prices", "f.yaml"],
                   'currency: USD\ngpu_hour:\n  "NVIDIA L4": "0.80"\n  "NVIDIA L4": "0.01"\n', 4, "NVIDIA L4"),
        "access": (["dashboard", "--db", str(tmp_path / "empty.duckdb"), "--access", "f.yaml"],
                   "groups:\n  acme-users: [acme]\n  acme-users: \"*\"\n", 3, "acme-users"),
        "scenario": (["backfill", "--scenario", "f.yaml", "--start", "2026-11-01", "--days", "1", "--kafka", "127.0.0.1:9"],
                     "tenants:\n  - name: acme\n    name: globex\nnodes: []\n", 3, "name"),
    }


KINDS = ["tenants", "publishers", "kubeconfig", "prices", "access", "scenario"]


@pytest.mark.parametrize("kind", KINDS)
def test_billion_laughs_refused_naming_file_and_line(tmp_path, kind):
    args, *_ = kinds(tmp_path)[kind]
    (tmp_path / "f.yaml").write_text(LAUGHS)
    rc, stderr, seconds, peak_kib = run_cli(args, tmp_path)
    assert rc == 2, stderr
    assert f"f.yaml:{LAUGHS_LINE}: alias *e makes more than {YAML_MAX_NODES} YAML nodes" in stderr, stderr
    assert seconds < 30 and peak_kib < 600 * 1024, (seconds, peak_kib)


@pytest.mark.parametrize("kind", KINDS)
def test_duplicate_key_refused_naming_file_line_and_key(tmp_path, kind):
    args, text, line, key = kinds(tmp_path)[kind]
    (tmp_path / "f.yaml").write_text(text)
    rc, stderr, _, _ = run_cli(args, tmp_path)
    assert rc == 2, stderr
    assert f"f.yaml:{line}: key {key!r} given twice (first on line {line - 1})" in stderr, stderr


def test_exporter_kubeconfig_refuses_a_second_server():
    kc = ("clusters:\n- name: tenant\n  cluster:\n    server: https://acme:6443\n    server: https://evil:6443\n"
          "contexts: [{name: k, context: {cluster: tenant}}]\ncurrent-context: k\n")
    with pytest.raises(ValueError, match=r"line 5: key 'server' given twice \(first on line 4\)"):
        cluster_from_kubeconfig(kc)


@pytest.mark.parametrize("text, message", [
    ("a: &a [*a]\n", "f.yaml:1: alias *a refers to a node that contains it"),
    ("[" * 10_000 + "]" * 10_000, "YAML nested too deeply"),
    ("x: [" + ", ".join(["1"] * YAML_MAX_NODES) + "]\n", f"more than {YAML_MAX_NODES} YAML nodes"),
    ("m:\n  1: a\n  0x1: b\n", "f.yaml:3: key 1 given twice"),     # the same int, spelt twice
    ("m:\n  a: 1\n  'a': 2\n", "f.yaml:3: key 'a' given twice"),
    ("a: 1\nb: [\n", "f.yaml:3: not valid YAML"),
])
def test_parse_yaml_refusals(text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_yaml(text, "f.yaml")


def test_parse_yaml_keeps_what_config_files_use():
    # a merge key may override what it merges; an alias repeating a small node is fine
    text = "base: &base {port: 6443, tls: true}\nacme:\n  <<: *base\n  port: 7443\nglobex: *base\n"
    assert parse_yaml(text, "f.yaml") == {"base": {"port": 6443, "tls": True}, "acme": {"port": 7443, "tls": True},
                                          "globex": {"port": 6443, "tls": True}}
    for example in sorted((REPO / "examples").glob("*.yaml")):
        assert parse_yaml(example.read_text(), str(example))


@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_ingest_stops_at_once_when_signalled_while_loading_its_config(tmp_path, signum, status):
    """`--tenants` is a FIFO: ingest blocks reading it, a loading phase the test can see (the
    FIFO opens for writing once ingest opens it for reading) and hold for as long as needed.
    Started with SIGINT ignored, as a shell's `&` starts it: ingest must still hear SIGINT."""
    fifo = tmp_path / "tenants.yaml"
    os.mkfifo(fifo)
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:
        proc = subprocess.Popen([*SLICEMETER, "ingest", "--kafka", f"127.0.0.1:{free_port()}",
                                 "--db", str(tmp_path / "x.duckdb"), "--tenants", str(fifo)],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=stderr,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    writer = None
    try:
        deadline = time.monotonic() + 60
        while writer is None:   # ENXIO until ingest opens the FIFO to read it
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.05)
        os.write(writer, b"tenants:\n")   # half a catalog: ingest waits for the rest
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == status, log.read_text()
    finally:
        if writer is not None:
            os.close(writer)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert f"stopped by {signum.name} during start-up: nothing was consumed" in log.read_text()
