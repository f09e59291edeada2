"""The dashboard app under Streamlit's AppTest (in the test's process), and reading its figures."""
from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

import slicemeter.dashboard

APP = str(Path(slicemeter.dashboard.__file__).resolve().parent / "app.py")


def run_app(db, monkeypatch, page: str | None = None, timeout: float = 60) -> AppTest:
    """The app on the store `db` names (a file or a lake), switched to views/`page`.py if given."""
    monkeypatch.setenv("SLICEMETER_DB", str(db))
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    if page:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, at.exception
    return at


def metric(at: AppTest, label: str) -> str:
    """The value of the first metric whose label starts with `label`."""
    found = [m.value for m in at.metric if m.label.startswith(label)]
    assert found, f"no metric {label!r} in {[m.label for m in at.metric]}"
    return found[0]
