"""Pure money functions and the price catalog loader."""
from decimal import Decimal

import pytest

from slicemeter.chargeback import money
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices, parse_prices_text
from slicemeter.common import ConfigError


def test_largest_remainder_adds_up_to_rounded_total():
    # three thirds of a cent-denominated 1.00: floors 33+33+33, the extra cent to the first
    raws = [money.RAW_PER_CENT * 100 // 3] * 3
    cents = money.largest_remainder(raws, money.RAW_PER_CENT)
    assert sum(cents) == 100 and sorted(cents) == [33, 33, 34]
    # the row with the largest remainder gets the extra unit, not the first one
    assert money.largest_remainder([10, 14, 16], 10) == [1, 1, 2]
    assert sum(money.largest_remainder([10, 14, 16], 10)) == 4


def test_largest_remainder_with_negative_corrections():
    rows = [-15, 27, -4]
    out = money.largest_remainder(rows, 10)
    assert sum(out) == money.round_half_up_div(sum(rows), 10) == 1


def test_split_proportional_is_exact():
    parts = money.split_proportional(1001, [1, 1, 1])
    assert sum(parts) == 1001 and max(parts) - min(parts) == 1
    assert money.split_proportional(5, [0, 0]) == []


def test_price_to_micro_refuses_lost_digits():
    assert money.price_to_micro(Decimal("2.40")) == 2_400_000
    with pytest.raises(ValueError):
        money.price_to_micro(Decimal("0.0000001"))


def test_example_catalog_loads_with_decimals_and_overrides():
    cat = load_prices(DEFAULT_PRICES)
    assert cat.currency == "USD"
    assert cat.price("NVIDIA A100-SXM4-80GB", "n1", "c") == Decimal("2.40")
    assert cat.price("NVIDIA L4", "gpu-node-7", "c") == Decimal("0.60")       # node override
    assert cat.price("NVIDIA L4", "gpu-node-8", "c") == Decimal("0.80")
    assert cat.price_per_kwh == Decimal("0.14") and cat.carbon_g_per_kwh == 320


def test_pool_override_and_specificity():
    cat = parse_prices_text("""
currency: EUR
gpu_hour: {"Tesla T4": "0.35"}
overrides:
  - {pool: "https://a:6443", gpu_hour: "0.30"}
  - {pool: "https://a:6443", node: n9, gpu_hour: "0.10"}
""")
    assert cat.price("Tesla T4", "n1", "https://a:6443") == Decimal("0.30")
    assert cat.price("Tesla T4", "n9", "https://a:6443") == Decimal("0.10")
    assert cat.price("Tesla T4", "n1", "https://b:6443") == Decimal("0.35")


@pytest.mark.parametrize("text, where", [
    ('currency: USD\ngpu_hour: {"NVIDIA L4": 0.8}', 'prices:2: gpu_hour."NVIDIA L4": write the price as a quoted'),
    ('currency: USD\ngpu_hour:\n  "NVIDIA L4": "2.40"\n  "Tesla T4": abc', 'prices:4: gpu_hour."Tesla T4": not a decimal'),
    ('currency: USD\ngpu_hour: {"NVIDIA L4": "-1"}', 'prices:2: gpu_hour."NVIDIA L4": must be a finite number >= 0'),
    ('currency: USD\ngpu_hour: {"NVIDIA L4": "0.1234567"}', 'prices:2: gpu_hour."NVIDIA L4": at most 6 decimals'),
    ('currency: USD\ngpu_hour: {"NVIDIA L4": true}', 'prices:2: gpu_hour."NVIDIA L4": expected a decimal string'),
    ('currency: USD\ngpu_hour: {}', "prices:2: gpu_hour: must not be empty"),
    ('currency: dollars\ngpu_hour: {"NVIDIA L4": "1"}', "prices:1: currency: expected an ISO 4217 code"),
    ('currency: USD\ngpu_hour: {"NVIDIA L4": "1"}\nelectricity: {price_per_kwh: x}', "prices:3: electricity.price_per_kwh:"),
    ('currency: USD\ngpu_hour: {"NVIDIA L4": "1"}\nelectricity: {price_per_kwh: 0.14}', "prices:3: electricity.price_per_kwh: write"),
    ('currency: USD\ngpu_hour: {"NVIDIA L4": "1"}\noverrides:\n  - {node: n, gpu_hour: "1", zone: z}',
     "prices:4: overrides[0].zone: unknown key (allowed: gpu_hour, model, node, pool)"),
    ('currency: USD\ngpu_hour: {"NVIDIA L4": "1"}\noverrides:\n  - {node: n, gpu_hour: "1"}\n  - {model: m, gpu_hour: "1"}',
     "prices:5: overrides[1]: needs node or pool"),
    ('currency: USD\ngpu_hour: {"NVIDIA L4": "1"}\ncolour: red', "prices:3: colour: unknown key"),
    ('currency: USD\n', "prices:1: gpu_hour: missing required key"),
    ('currency: [USD\n', "prices:2: not valid YAML"),
])
def test_bad_catalog_names_the_line_and_key(text, where):
    with pytest.raises(ConfigError) as exc:
        parse_prices_text(text)
    assert str(exc.value).startswith(where), str(exc.value)


def test_every_mistake_is_listed_first_in_file_order(tmp_path):
    bad = tmp_path / "p.yaml"
    bad.write_text('currency: usd\ngpu_hour:\n  "NVIDIA L4": 0.8\nelectricity: {price_per_kwh: "-1"}\n')
    with pytest.raises(ConfigError) as exc:
        load_prices(bad)
    assert str(exc.value).splitlines() == [
        f"{bad}:1: currency: expected an ISO 4217 code like USD, got 'usd'",
        f'  and {bad}:3: gpu_hour."NVIDIA L4": write the price as a quoted string (got float 0.8, which is inexact)',
        f"  and {bad}:4: electricity.price_per_kwh: must be a finite number >= 0, got '-1'"]


def test_unknown_model_names_the_key():
    cat = load_prices(DEFAULT_PRICES)
    with pytest.raises(ConfigError, match=r'gpu_hour\."NVIDIA B200": no price'):
        cat.price("NVIDIA B200", "n1", "c")
