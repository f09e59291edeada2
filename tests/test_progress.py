"""The one progress line of backfill and the demo."""
from __future__ import annotations

import io

from slicemeter.progress import ProgressReporter, bar
from slicemeter.simulator.backfill import Progress


def test_bar():
    assert bar(0.5, width=10, label="x") == "[#####.....]  50.0 % x"
    assert bar(1.7, width=4) == "[####] 100.0 %"


def test_off_a_terminal_one_line_per_tenth_then_the_last():
    out = io.StringIO()
    p = ProgressReporter(out, min_interval_s=0)
    for i in range(101):
        p.show(i / 200, "ingesting")
    p.done(1.0, "done")
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [ln.split("]")[1].split("%")[0].strip() for ln in lines] == ["0.0", "10.0", "20.0", "30.0", "40.0", "50.0", "100.0"]
    assert lines[-1].endswith("done")


def test_backfill_reports_through_it_and_can_be_silenced():
    out = io.StringIO()
    p = Progress(0, 1000, enabled=True, out=out)
    p.update(500, 10)
    p.done(20)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[###############...............]  50.0 % backfill 10 samples")
    assert lines[-1].startswith("[" + "#" * 30 + "] 100.0 % backfill 20 samples")
    quiet = io.StringIO()
    Progress(0, 1000, enabled=False, out=quiet).done(20)
    assert quiet.getvalue() == ""
