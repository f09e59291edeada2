"""Screenshots of a running dashboard's Fleet, Tenants, Problems and GPUs pages for docs/dashboard.md,
taken with Debian's chromium through Playwright (never a downloaded browser).

    make demo DEMO_ARGS="--now 2026-11-20T12:00"          # in one shell, until it is ready
    .venv/bin/python tools/docs_screenshots.py http://127.0.0.1:8501/ docs/
"""
from __future__ import annotations

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]
# page path -> (file, what shows the page has rendered to its end, a GPU to pick or None)
PAGES = {"": ("fleet.png", ["text=Sharing dividend", "[data-testid=stTable] td", "canvas, svg.marks"], None),
         "tenants": ("tenants.png", ["text=Total (", "text=By namespace", "text=Tenant catalog", "canvas, svg.marks"],
                     None),
         # the demo's DRA node: its slices' drivers and claims, and the month's health events
         "gpus": ("gpus-dra.png", ["text=Health events", "text=Slices on a GPU", "canvas, svg.marks"], "gpu-node-dra"),
         # what needs a person, and the GPUs with a health event ordered by degraded hours (a shared link)
         "problems": ("problems.png", ["text=/Allocated but idle: allocated at least/"], None),
         "gpus?health=problem&sort=degraded": ("gpus-filtered.png", ["text=Health events", "text=Slices on a GPU",
                                                                     "canvas, svg.marks"], None)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", help="the dashboard's address, ending in /")
    ap.add_argument("out", type=Path, help="folder for the PNG files")
    args = ap.parse_args()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1300})
        for path, (name, markers, gpu) in PAGES.items():
            page.goto(args.url + path)
            for marker in markers:
                page.wait_for_selector(marker, timeout=120_000)
            if gpu is not None:
                page.get_by_label("GPU", exact=True).click()
                page.keyboard.type(gpu)          # the list is long: filter it, take the first match
                page.keyboard.press("Enter")
                page.wait_for_selector(f"text=node {gpu} ·", timeout=120_000)   # the picked GPU's caption
            page.screenshot(path=str(args.out / name), full_page=gpu is not None or name == "problems.png")
            print(args.out / name)
        browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
