"""Spreadsheet-safe CSV cells: text that a spreadsheet would run as a formula is written
with a leading apostrophe, the OWASP "CSV injection" defence.

Tenant-controlled names (namespaces, pods, containers, GPU models reported by a node) reach
the invoice and FOCUS CSVs, and a cell beginning `=`, `+`, `-` or `@` (or a tab or carriage
return, which some spreadsheets skip before looking for one) would be evaluated when a
finance user opens the file. A cell that is a plain number (a negative cost or a correction
line, `-12.50`) is data, not a formula, and stays as it is, so columns stay numeric.
"""
from __future__ import annotations

import re

FORMULA_LEAD = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def neutralise_csv_cell(cell: str) -> str:
    """The cell as a spreadsheet shows it as text: a leading `'` on formula-like text."""
    if cell.startswith(FORMULA_LEAD) and not _PLAIN_NUMBER.fullmatch(cell):
        return "'" + cell
    return cell
