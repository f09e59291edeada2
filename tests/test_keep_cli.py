"""`slicemeter keep`: a month whose rollups were written without keeping its money (a store
from before money was kept) is kept again, and its bill then reads the kept money."""
from __future__ import annotations

from slicemeter import store
from slicemeter.chargeback.bill import compute_bill, parse_month
from slicemeter.chargeback.kept import keep_hours, kept_current
from slicemeter.cli import main
from slicemeter.store.reader_file import ReaderFile
from slicemeter.testkit.cb_rows import add_gpu, add_slice, add_tenants
from slicemeter.testkit.kept_case import PRICES

NOVEMBER = parse_month("2026-11")


def _store_without_kept_money(path):
    con = store.connect(path)
    add_tenants(con)
    add_gpu(con)
    add_gpu(con, hour="2026-11-01 01:00:00")
    add_slice(con, "a", alloc=0.25)
    add_slice(con, "b", alloc=0.5, hour="2026-11-01 01:00:00")
    return con


def _bill_lines(bill):
    return bill.detail.sort_values(["pod", "charge_period"]).to_dict("records")


def test_keep_makes_a_month_billed_from_its_rollups_read_kept_money_with_the_same_bill(tmp_path, capsys):
    db = tmp_path / "store.duckdb"
    with _store_without_kept_money(db) as con:
        assert not kept_current(con, *NOVEMBER)
        from_rollups = compute_bill(con, "2026-11", prices=PRICES)
    assert main(["keep", "--db", str(db), "--month", "2026-11"]) == 0
    assert capsys.readouterr().out == "kept 2026-11: 2 GPU-hours; its bills read the kept money\n"
    with store.connect(db) as con:
        assert kept_current(con, *NOVEMBER)
        kept = compute_bill(con, "2026-11", prices=PRICES)
    assert kept.total == from_rollups.total > 0
    assert _bill_lines(kept) == _bill_lines(from_rollups)


def test_keep_says_why_a_month_with_unmeasured_usage_is_still_billed_from_the_rollups(tmp_path, capsys):
    db = tmp_path / "store.duckdb"
    with _store_without_kept_money(db) as con:
        con.execute("UPDATE slice_hour SET usage_unknown_s = 600 WHERE pod = 'b'")
    assert main(["keep", "--db", str(db), "--month", "2026-11"]) == 0
    assert "still computed from the rollups: 1 slice-hours have usage no reader measured" in capsys.readouterr().out
    with store.connect(db) as con:
        assert con.execute("SELECT count(*) FROM kept_gpu_hour").fetchone()[0] == 2   # kept all the same
        assert not kept_current(con, *NOVEMBER)


def test_keep_refuses_a_month_without_hours_and_the_readers_file(tmp_path, capsys):
    db = tmp_path / "store.duckdb"
    with _store_without_kept_money(db) as con:
        readers = ReaderFile(con, tmp_path / "readers.duckdb").refresh()
    assert main(["keep", "--db", str(db), "--month", "2026-12"]) == 2
    assert "--month: 2026-12 has no GPU-hours" in capsys.readouterr().err
    assert main(["keep", "--db", str(readers), "--month", "2026-11"]) == 2
    assert "is not ingest's store" in capsys.readouterr().err
    assert main(["keep", "--db", str(db), "--month", "2026-13"]) == 2
    assert "--month" in capsys.readouterr().err
    with store.connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM kept_gpu_hour").fetchone()[0] == 0


def test_keep_exits_non_zero_when_the_month_changed_while_it_kept(tmp_path, capsys, monkeypatch):
    """Ingest writing the month meanwhile (a lake's workers go on beside `keep`): the kept
    money does not match the rollups, and the command says so instead of claiming the month."""
    import slicemeter.chargeback.keep_cli as keep_cli

    def keep_then_ingest_writes(con, start, end):
        keep_hours(con, start, end)
        add_slice(con, "late", alloc=0.25, hour="2026-11-01 01:00:00")

    db = tmp_path / "store.duckdb"
    _store_without_kept_money(db).close()
    monkeypatch.setattr(keep_cli, "keep_hours", keep_then_ingest_writes)
    assert main(["keep", "--db", str(db), "--month", "2026-11"]) == 1
    assert "no longer matches the rollups" in capsys.readouterr().out
    with store.connect(db) as con:
        assert not kept_current(con, *NOVEMBER)
