"""Validate a FOCUS 1.2 CostAndUsage file (CSV or Parquet) with the FinOps Foundation's
focus-validator, offline, for slicemeter's provider profile (on-premises GPU chargeback).

    python tools/focus_validate.py FILE
    python tools/focus_validate.py --install        # only set up the validator's environment
    python tools/focus_validate.py --find-python    # print the interpreter it would use

Exit: 0 every applicable check passed | 1 FOCUS violations (listed) | 2 the validator could not run.

focus-validator 2.2.1 needs Python >= 3.12 and pins numpy<2, pandas<3, duckdb<2, so it lives
in its own virtual environment (FOCUS_VALIDATOR_VENV, default .venv-focus/ in the
repository), never the project's; pyarrow must stay < 26 there (26 needs numpy >= 2).
numpy<2 publishes wheels up to Python 3.12 only (3.13 would compile numpy from source for
many minutes), so the interpreter is a 3.12: $FOCUS_PYTHON, else python3.12 on PATH, else
pyenv's.
What the validator needs besides (handled below): it opens
focus_validator/rules/currency_codes.csv relative to the working directory; its exit code
is 0 even when rules fail, so its JUnit report is read; rules with applicability criteria
are skipped unless the criteria are declared, so the provider profile is part of the
check; InvoiceId is modelled as OR(all null, all non-null) and the losing alternative is
reported as a failure of its own, so only the OR's verdict counts; and a rule with several
applicability criteria runs when any one of them is declared, where the spec means all of
them ("when the provider supports virtual currency and publishes unit prices"), so the
PricingCurrency* columns (for prices in another or a virtual currency, which slicemeter
does not have) count as asked for only when all the criteria of a presence rule are declared.
The product rules (ListUnitPrice x PricingQuantity = ListCost, likewise contracted) run
only on rows whose ChargeClass is not null and not "Correction", so they never see a
Regular row (ChargeClass null): they are checked here on every row that is not a
correction, with the validator's tolerance, and reported under the same rule ids.
"""
from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = Path(os.environ.get("FOCUS_VALIDATOR_VENV") or REPO / ".venv-focus")
REQUIREMENTS = ["focus-validator==2.2.1", "pyarrow<26", "numpy<2", "pandas<3", "duckdb<2"]
# what slicemeter's data supports (the model's ApplicabilityCriteria): the price catalog
# publishes list unit prices, and its contracted price is that list price (no discounts)
PROFILE = ["USAGE_MEASUREMENT_SUPPORTED", "UNIT_PRICING_SUPPORTED", "SUB_ACCOUNT_SUPPORTED",
           "BILLING_BASED_ON_PROVISIONED_RESOURCES_SUPPORTED", "RESOURCE_TYPE_ASSIGNMENT_SUPPORTED",
           "TAGGING_SUPPORTED", "ACCOUNT_NAMING_SUPPORTED", "PUBLIC_PRICE_LIST_SUPPORTED",
           "NEGOTIATED_PRICING_SUPPORTED"]
# OR leaves whose verdict is their parent's
OR_LEAVES = {"InvoiceId-C-004-C": "InvoiceId-C-003-C", "InvoiceId-C-005-C": "InvoiceId-C-003-C"}


class CannotRun(Exception):
    pass


def _is_312(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", "import sys, venv; sys.exit(sys.version_info[:2] != (3, 12))"],
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_python() -> str:
    candidates = [os.environ.get("FOCUS_PYTHON", "")]
    candidates.append(shutil.which("python3.12") or "")
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/3.12*/bin/python3"), reverse=True)
    for c in candidates:
        if c and _is_312(c):
            return c
    raise CannotRun("needs a Python 3.12 with venv (set FOCUS_PYTHON, or install python3.12)")


def validator_bin() -> Path:
    return VENV / "bin" / "focus-validator"


def install() -> Path:
    """The validator's environment, created once (pip from the package index)."""
    if validator_bin().exists():
        return VENV
    python = find_python()
    shutil.rmtree(VENV, ignore_errors=True)
    steps = [[python, "-m", "venv", str(VENV)],
             [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              *REQUIREMENTS]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(VENV, ignore_errors=True)
            noise = "WARNING: Location"
            err = "\n".join(ln for ln in (proc.stdout + proc.stderr).splitlines() if not ln.startswith(noise))
            raise CannotRun(f"could not install focus-validator ({' '.join(cmd[:3])}): {err[-2000:]}")
    return VENV


def verdicts(report: Path) -> dict[str, str]:
    """JUnit report -> rule id -> pass | fail | skip (pure, but for reading the file)."""
    status = {}
    for tc in ET.parse(report).getroot().iter("testcase"):
        rule = tc.get("name").split(" ::")[0]
        if tc.find("failure") is not None or tc.find("error") is not None:
            status[rule] = "fail"
        else:
            status[rule] = "skip" if tc.find("skipped") is not None else "pass"
    return status


def not_applicable(rules: dict, declared: set[str], columns: set[str]) -> set[str]:
    """Rules that do not apply to the declared profile when several criteria mean all of
    them (pure): those whose criteria are not all declared, and the rules about a column
    that is absent and that only such rules ask for."""
    na = {rid for rid, r in rules.items()
          if r.get("ApplicabilityCriteria") and not set(r["ApplicabilityCriteria"]) <= declared}
    conditional: dict[str, list[str]] = {}
    for rid, r in rules.items():
        if rid.startswith("CostAndUsage-D-") and r.get("ApplicabilityCriteria") and r.get("Reference"):
            conditional.setdefault(r["Reference"], []).append(rid)
    unasked = {col for col, ids in conditional.items() if col not in columns and all(i in na for i in ids)}
    return na | {rid for rid, r in rules.items() if r.get("Reference") in unasked}


def failures(status: dict[str, str]) -> list[str]:
    return sorted(r for r, s in status.items()
                  if s == "fail" and not (r in OR_LEAVES and status.get(OR_LEAVES[r]) == "pass"))


# (rule ids, unit price, cost): the spec's product rules, checked on every non-correction row
PRODUCT_RULES = [(("ListCost-C-009-C", "ListUnitPrice-C-010-C"), "ListUnitPrice", "ListCost"),
                 (("ContractedCost-C-009-C", "ContractedUnitPrice-C-011-C"), "ContractedUnitPrice", "ContractedCost")]
_ROWS = """
import csv, json, sys
from decimal import Decimal
path, cols = sys.argv[1], json.loads(sys.argv[2])
if path.endswith(".parquet"):
    import pyarrow.parquet as pq
    t = pq.read_table(path, columns=[c for c in cols if c in pq.read_schema(path).names])
    rows = [{k: (None if v is None else str(v)) for k, v in r.items()} for r in t.to_pylist()]
else:
    rows = [{k: (v if v != "" else None) for k, v in r.items()} for r in csv.DictReader(open(path, newline=""))]
json.dump(rows, sys.stdout)
"""


def product_failures(rows: list[dict]) -> list[str]:
    """Rule ids of PRODUCT_RULES that some non-correction row breaks (pure)."""
    bad = set()
    for ids, price_col, cost_col in PRODUCT_RULES:
        for r in rows:
            price, qty, cost = r.get(price_col), r.get("PricingQuantity"), r.get(cost_col)
            if r.get("ChargeClass") == "Correction" or None in (price, qty, cost):
                continue
            price, qty, cost = Decimal(price), Decimal(qty), Decimal(cost)
            if abs(price * qty - cost) > Decimal("1e-9") * max(abs(cost), 1):
                bad.update(ids)
                break
    return sorted(bad)


def _rows(py: Path, data_file: Path) -> list[dict]:
    cols = ["ChargeClass", "PricingQuantity"] + [c for _, p, k in PRODUCT_RULES for c in (p, k)]
    out = subprocess.run([str(py), "-c", _ROWS, str(data_file), json.dumps(cols)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _columns(py: Path, data_file: Path) -> set[str]:
    if data_file.suffix == ".parquet":
        out = subprocess.run([str(py), "-c", "import sys, pyarrow.parquet as pq; print(*pq.read_schema(sys.argv[1]).names,"
                              " sep=chr(10))", str(data_file)], capture_output=True, text=True, check=True).stdout
        return set(out.split())
    with open(data_file, newline="") as f:
        return set(next(csv.reader(f), []))


def validate(data_file: Path) -> tuple[dict[str, str], list[str]]:
    install()
    py = VENV / "bin" / "python"
    pkg = subprocess.run([str(py), "-c", "import focus_validator, os; print(os.path.dirname(focus_validator.__file__))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    criteria = PROFILE
    with tempfile.TemporaryDirectory() as work:
        rules = Path(work) / "focus_validator" / "rules"
        rules.mkdir(parents=True)
        (rules / "currency_codes.csv").symlink_to(Path(pkg) / "rules" / "currency_codes.csv")
        report = Path(work) / "report.xml"
        proc = subprocess.run([str(validator_bin()), "--data-file", str(data_file.resolve()),
                               "--validate-version", "1.2.0.1", "--block-download",
                               "--focus-dataset", "CostAndUsage", "--applicability-criteria", ",".join(criteria),
                               "--output-type", "unittest", "--output-destination", str(report)],
                              cwd=work, capture_output=True, text=True)
        if proc.returncode != 0 or not report.is_file() or report.stat().st_size == 0:
            raise CannotRun(f"the validator did not run (rc={proc.returncode}): {proc.stderr[-2000:]}")
        status = verdicts(report)
    rules = json.loads((Path(pkg) / "rules" / "model-1.2.0.1.json").read_text())["ModelRules"]
    ignored = not_applicable(rules, set(criteria), _columns(py, data_file))
    for rid in ignored:
        if rid in status:
            status[rid] = "skip"
    for rid in product_failures(_rows(py, data_file)):
        status[rid] = "fail"
    return status, failures(status)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?", type=Path)
    ap.add_argument("--install", action="store_true", help="only create the validator's environment")
    ap.add_argument("--find-python", action="store_true", help="print the Python 3.12 it would use")
    args = ap.parse_args(argv)
    try:
        if args.find_python:
            print(find_python())
            return 0
        if args.install:
            print(install())
            return 0
        if args.file is None:
            ap.error("FILE is required")
        if not args.file.is_file():
            raise CannotRun(f"no such file: {args.file}")
        status, fails = validate(args.file)
    except CannotRun as exc:
        print(f"focus-validate: {exc}", file=sys.stderr)
        return 2
    for rule in fails:
        print("FAIL", rule)
    count = {s: sum(v == s for v in status.values()) for s in ("pass", "skip")}
    print(f"focus-validate: {count['pass']} passed, {len(fails)} failed, {count['skip']} skipped")
    return 1 if fails or count["pass"] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
