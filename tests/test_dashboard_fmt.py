from decimal import Decimal

import pandas as pd
import pytest

from slicemeter.dashboard import fmt, money


def test_money_is_decimal_half_even_to_the_cent():
    assert fmt.money(Decimal("1234.565")) == "$1,234.56"
    assert fmt.money(Decimal("1234.575")) == "$1,234.58"
    assert fmt.money(Decimal("-0.5"), "EUR") == "-€0.50"
    assert fmt.money("10", "CHF") == "10.00 CHF"
    assert fmt.money(None) == "–"


def test_pct_and_trend():
    assert fmt.pct(0.2345) == "23.4 %" and fmt.pct(None) == "–" and fmt.pct(float("nan")) == "–"
    assert fmt.trend([0.1] * 7 + [0.3] * 7) == (pytest.approx(0.3), pytest.approx(0.2))
    assert fmt.trend([0.2, None, 0.4]) == (pytest.approx(0.3), None)
    assert fmt.trend([]) == (None, None)


def test_money_columns_and_decimal_totals():
    df = pd.DataFrame({"tenant": ["a", "b", "a"], "gpu_hours": [1.0, 2.0, 3.0],
                       "cost": [Decimal("0.10"), Decimal("0.20"), Decimal("0.20")]})
    df["gco2e"] = [Decimal("1.5")] * 3
    assert money.money_columns(df) == ["cost"]
    totals = money.totals_by(df, "tenant", "cost")
    assert list(totals["tenant"]) == ["a", "b"]
    assert totals["cost"].tolist() == [Decimal("0.30"), Decimal("0.20")]
    assert isinstance(totals["cost"][0], Decimal)


def test_default_month_is_the_latest_with_a_few_days():
    assert fmt.default_month([("2026-12", 1), ("2026-11", 30)]) == (
        "2026-11", "the latest month with at least 3 days of data (2026-12 has 1 day so far)")
    assert fmt.default_month([("2026-12", 15), ("2026-11", 16)]) == ("2026-12", "the latest month with data")
    assert fmt.default_month([("2026-12", 2), ("2026-11", 1)])[0] == "2026-12"   # none has 3: the most data
    with pytest.raises(ValueError):
        fmt.default_month([])


def test_one_number_format_and_blank_cells():
    assert fmt.number(1642242.75, 1, "GPU-h") == "1,642,242.8 GPU-h"
    assert fmt.number(12, 0) == "12" and fmt.number(None) == "" and fmt.number(float("nan"), 1, "h") == ""
    assert fmt.cell(None) == "" and fmt.cell(pd.NA) == "" and fmt.cell("claim-1") == "claim-1"
    assert fmt.gpu_hours(1642242.8) == "1,642,242.8 GPU-h"
