"""Run a multi-statement file from sql/ with named parameters ($name), one statement at a
time (DuckDB binds prepared parameters only in a single statement). DuckDB's own parser
splits the file, so a `;` inside a string or a comment is no boundary."""
from __future__ import annotations

import duckdb

from slicemeter.store import sql_text


def _body(query: str) -> str:
    return "\n".join(ln for ln in query.splitlines() if not ln.lstrip().startswith("--")).strip().rstrip(";").strip()


def statements(text: str) -> list[str]:
    """The statements of `text`, without their comment lines."""
    return [body for s in duckdb.extract_statements(text) if (body := _body(s.query))]


def execute_text(con, text: str, params: dict) -> None:
    """Each statement of `text` with the parameters it names."""
    for stmt in duckdb.extract_statements(text):
        con.execute(stmt, {k: params[k] for k in stmt.named_parameters})


def execute_script(con, name: str, params: dict) -> None:
    """Each statement of sql/`name` with the parameters it names."""
    execute_text(con, sql_text(name), params)
