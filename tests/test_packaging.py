"""sql/ ships in the wheel: it is a package whose package-data patterns cover every
statement file, and the store finds the files through that package."""
from __future__ import annotations

import glob
import tomllib
from pathlib import Path

from slicemeter import store

REPO = Path(__file__).resolve().parent.parent


def test_every_sql_file_is_package_data():
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "sql" in tool["packages"]["find"]["include"]
    assert (REPO / "sql" / "__init__.py").is_file()
    files = {p.relative_to(REPO / "sql").as_posix() for p in (REPO / "sql").rglob("*.sql")}
    assert len(files) > 30
    # setuptools expands package-data patterns with glob(recursive=True) in the package's folder
    matched = {m for pattern in tool["package-data"]["sql"]
               for m in glob.glob(pattern, root_dir=REPO / "sql", recursive=True)}
    assert files <= matched


def test_store_reads_the_sql_package():
    from slicemeter import sql

    assert store.SQL_DIR == Path(sql.__file__).parent
    assert store.sql_text("schema/001_contract.sql") == (REPO / "sql/schema/001_contract.sql").read_text()
