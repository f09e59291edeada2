"""What the wheel installs: one `slicemeter.*` namespace, the SQL files as package data,
and a base install that is the node exporter's and nothing more."""
from __future__ import annotations

import glob
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from slicemeter import store

REPO = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
# What the central commands need and the node must not carry.
CENTRAL_ONLY = ("duckdb", "pandas", "streamlit", "altair")


def test_every_package_installs_under_the_slicemeter_namespace():
    assert all(name == "slicemeter" or name.startswith("slicemeter.") for name in SETUPTOOLS["packages"])
    for name, folder in SETUPTOOLS["package-dir"].items():
        assert (REPO / folder / "__init__.py").is_file(), name
    # every folder of SQL is listed, or setuptools would leave its files out of the wheel
    sql_folders = {"slicemeter.sql." + p.name for p in (REPO / "sql").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert sql_folders <= set(SETUPTOOLS["packages"])


def test_every_sql_file_is_package_data():
    files = {p.relative_to(REPO / "sql").as_posix() for p in (REPO / "sql").rglob("*.sql")}
    assert len(files) > 30
    # setuptools expands package-data patterns with glob(recursive=True) in the package's folder
    matched = {m for pattern in SETUPTOOLS["package-data"]["slicemeter.sql"]
               for m in glob.glob(pattern, root_dir=REPO / "sql", recursive=True)}
    assert files <= matched


def test_store_reads_the_sql_package():
    from slicemeter import sql

    assert store.SQL_DIR == Path(sql.__file__).parent
    assert store.sql_text("schema/001_contract.sql") == (REPO / "sql/schema/001_contract.sql").read_text()


def test_the_base_install_has_no_central_dependency():
    base = " ".join(PROJECT["dependencies"]).lower()
    assert not [d for d in CENTRAL_ONLY if d in base]
    central = " ".join(PROJECT["optional-dependencies"]["central"] + PROJECT["optional-dependencies"]["dashboard"])
    assert all(d in central for d in CENTRAL_ONLY)


def test_the_exporter_runs_where_duckdb_pandas_and_streamlit_cannot_be_imported(tmp_path):
    """One tick of a simulated node, published nowhere, with the central groups' packages
    made unimportable: what the node image (the base install) can run."""
    script = textwrap.dedent(f"""
        import sys
        BLOCKED = {CENTRAL_ONLY!r}
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError(f"{{name}} is not in the node image")
        sys.meta_path.insert(0, Block())
        from slicemeter.cli import main
        rc = main(["exporter", "--simulate", {str(REPO / "examples/demo.yaml")!r}, "--node", "gpu-node-1",
                   "--hami-dir", {str(tmp_path / "hami")!r}, "--port", "0", "--once"])
        assert not [m for m in sys.modules if m.split(".")[0] in BLOCKED]
        sys.exit(rc)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "is not in the node image" not in proc.stderr


def test_nvml_comes_from_nvidias_own_binding_without_its_deprecated_wrapper():
    """nvidia-ml-py provides the `pynvml` module; the `pynvml` package wraps it and hooks every
    import of it to print a FutureWarning on each exporter start."""
    base = [d.split(">")[0].split("=")[0].strip().lower() for d in PROJECT["dependencies"]]
    assert "nvidia-ml-py" in base and "pynvml" not in base
    run = subprocess.run([sys.executable, "-W", "error", "-c", "import pynvml; print(pynvml.__file__)"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and not run.stderr, f"`make setup` removes the pynvml wrapper: {run.stderr}"
