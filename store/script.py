"""Run a multi-statement file from sql/ with named parameters ($name), one statement at a
time (DuckDB binds prepared parameters only in a single statement)."""
from __future__ import annotations

import re

from slicemeter.store import sql_text

_SPLIT = re.compile(r";[ \t]*\n")


def statements(text: str) -> list[str]:
    out = []
    for stmt in _SPLIT.split(text):
        body = "\n".join(ln for ln in stmt.splitlines() if not ln.lstrip().startswith("--")).strip().rstrip(";")
        if body:
            out.append(body)
    return out


def execute_script(con, name: str, params: dict) -> None:
    for body in statements(sql_text(name)):
        con.execute(body, {k: v for k, v in params.items() if f"${k}" in body})
