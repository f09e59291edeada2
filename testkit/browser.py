"""Debian's Chromium (Playwright, no browser download) against `slicemeter dashboard`: the
helpers the browser tests and bench/bench_browser_8000.py share."""
from __future__ import annotations

import contextlib
import csv
import io
import os
import signal
import subprocess
import sys
import time
import urllib.request

from playwright.sync_api import sync_playwright

from slicemeter.broker import free_port

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


@contextlib.contextmanager
def chromium():
    """Debian's chromium, headless, with the flags a closed network needs; closed on exit."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"slicemeter dashboard exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "_stcore/health", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.1)  # polling interval, not synchronisation: the loop checks the condition
    raise AssertionError(f"dashboard not healthy within {timeout:.0f} s")


@contextlib.contextmanager
def serve_dashboard(db, log_path, *options: str):
    """`slicemeter dashboard --db DB OPTIONS...` on a free port; yields its URL."""
    port = free_port()
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())",
                             "dashboard", "--db", str(db), "--port", str(port), *options],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_healthy(url, proc)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def fleet_page(browser, url: str, timeout_ms: int = 60_000):
    """A fresh page on Fleet, rendered to its end; CSV downloads go to the browser, not a picker."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    page.add_init_script("delete window.showSaveFilePicker")
    page.goto(url)
    page.wait_for_selector("text=Fleet utilization", timeout=timeout_ms)
    return page


def gpu_list(page, timeout_ms: int = 60_000) -> list[dict]:
    """The GPUs page's table as its own "Download as CSV" writes it, once the page has drawn it."""
    page.wait_for_selector("text=Slices on a GPU", timeout=timeout_ms)
    grid = page.locator("[data-testid=stDataFrame]").first
    grid.hover()
    with page.expect_download() as dl:   # clicked in place: the sticky header may cover the toolbar
        grid.get_by_role("button", name="Download as CSV").evaluate("button => button.click()")
    text = open(dl.value.path(), encoding="utf-8-sig").read()
    return list(csv.DictReader(io.StringIO(text)))
