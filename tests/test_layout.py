"""The layout shows the flow: each package imports only the packages to its left in the
README's table (sources -> Tick -> Kafka -> store -> views), and the dashboard never writes."""
from __future__ import annotations

import ast
import hashlib
import tomllib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from slicemeter.testkit.fleet_fixture import build_fleet_db

REPO = Path(__file__).resolve().parent.parent

# folder -> the slicemeter packages its modules may import. "core" is slicemeter/ without
# its two entry points: cli.py (names every subcommand) and demo.py (runs the whole pipeline).
MAY_IMPORT = {
    "core": {"core"},
    "simulator": {"core"},
    "exporter": {"core", "simulator"},          # simulator: only for --simulate's fake NVML
    "store": {"core", "sql"},
    "ingest": {"core", "store", "chargeback", "rightsizing"},   # prices; the headline figures it serves
    "chargeback": {"core", "store"},
    "rightsizing": {"core", "store", "chargeback"},
    "dashboard": {"core", "store", "chargeback", "rightsizing"},
}
NEVER = {("exporter", "ingest"), ("exporter", "chargeback"), ("exporter", "dashboard"), ("exporter", "store"),
         ("simulator", "exporter"), ("dashboard", "ingest"), ("chargeback", "dashboard"), ("store", "ingest"),
         ("rightsizing", "ingest"), ("chargeback", "ingest")}
PACKAGES = {"exporter", "simulator", "ingest", "store", "chargeback", "rightsizing", "dashboard", "sql", "testkit"}


def package_of(module: str) -> str | None:
    """The top folder a `slicemeter.*` module lives in ('core' for slicemeter/ itself)."""
    parts = module.split(".")
    if parts[0] != "slicemeter":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else "core"


def imports_of(path: Path) -> set[tuple[str, int]]:
    """Every slicemeter module `path` imports, at any depth (function-level imports too), and
    module names passed to import_module (or the dashboard's lazy `_import`) as constants."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {(node.module, node.lineno)} | {(f"{node.module}.{a.name}", node.lineno) for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {(a.name, node.lineno) for a in node.names}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")).endswith("import_module") \
                or isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_import":
            found |= {(a.value, node.lineno) for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return {(m, line) for m, line in found if package_of(m)}


def folder_modules(folder: str) -> list[Path]:
    root = REPO / ("slicemeter" if folder == "core" else folder)
    files = sorted(root.rglob("*.py"))
    if folder == "core":
        files = [f for f in files if f.name not in ("cli.py", "demo.py")]
    return files


def test_the_table_covers_every_package_folder():
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {Path(d).parts[0] for d in tool["package-dir"].values()}
    assert folders == {"slicemeter"} | PACKAGES
    assert set(MAY_IMPORT) | {"sql", "testkit"} == {"core"} | PACKAGES


@pytest.mark.parametrize("folder", sorted(MAY_IMPORT))
def test_imports_point_left(folder):
    files = folder_modules(folder)
    assert files, folder
    wrong = [f"{f.relative_to(REPO)}:{line} imports {module}"
             for f in files for module, line in sorted(imports_of(f))
             if package_of(module) not in MAY_IMPORT[folder] | {folder}]
    assert not wrong, "\n".join(wrong)
    for a, b in NEVER:
        assert a != folder or b not in MAY_IMPORT[folder]


def a_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A path that comes back to where it started, or None: the graph is a hierarchy."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt] if nxt in path else path + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_folder_imports_itself_back_through_another():
    """Folders form a hierarchy, in the imports they make and in the table that allows them."""
    made = {folder: {package_of(m) for f in folder_modules(folder) for m, _ in imports_of(f)} - {folder}
            for folder in MAY_IMPORT}
    assert a_cycle(made) is None, " -> ".join(a_cycle(made))
    allowed = {folder: targets - {folder} for folder, targets in MAY_IMPORT.items()}
    assert a_cycle(allowed) is None, " -> ".join(a_cycle(allowed))


def test_the_cycle_check_sees_a_loop():
    assert a_cycle({"ingest": {"rightsizing"}, "rightsizing": {"core", "ingest"}, "core": set()}) == \
        ["ingest", "rightsizing", "ingest"]
    assert a_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_the_checker_sees_a_wrong_import(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    from slicemeter.ingest.writer import Batch\n"
                   "    log = logging.getLogger('slicemeter.chargeback')\n"
                   "    return importlib.import_module('slicemeter.dashboard.data')\n")
    assert {package_of(m) for m, _ in imports_of(bad)} == {"ingest", "dashboard"}


def test_the_dashboard_never_writes(tmp_path, monkeypatch):
    """Every page rendered on a store file leaves the file byte for byte as it was, with no
    write-ahead log beside it."""
    db = build_fleet_db(tmp_path / "fleet.duckdb", "2026-11")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    monkeypatch.setenv("SLICEMETER_DB", str(db))
    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=90)
    at.run()
    pages = sorted(p.stem for p in (REPO / "dashboard" / "views").glob("*.py"))
    assert len(pages) == 7
    for page in pages:
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, at.exception)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert not db.with_name(db.name + ".wal").exists()


def test_only_the_lake_views_and_the_tenant_scope_name_a_lakes_unscoped_rows():
    """A lake's `unscoped_*` views read every tenant's rows by qualified name, past a tenant's
    scope: a query of any reader that named one would read them all."""
    allowed = {REPO / "sql" / "lake" / "views.sql"}
    readers = [p for p in sorted((REPO / "sql").rglob("*.sql")) + sorted((REPO / "dashboard").rglob("*.py"))
               if p not in allowed]
    assert len(readers) > 50
    assert [p.relative_to(REPO) for p in readers if "unscoped_" in p.read_text()] == [Path("dashboard/data.py")]
