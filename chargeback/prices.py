"""The price catalog: hourly GPU prices by model, per-node / per-pool overrides, electricity.

Format (examples/prices.yaml):

    currency: USD
    gpu_hour: {"NVIDIA A100-SXM4-80GB": "2.40", "NVIDIA L4": "0.80"}
    overrides: [{node: gpu-node-7, model: "NVIDIA L4", gpu_hour: "0.60"},
                {pool: https://acme.tenants.example:6443, gpu_hour: "2.00"}]
    electricity: {price_per_kwh: "0.14", carbon_g_per_kwh: 320}

Prices are parsed as Decimal (quote them in YAML so they never pass through a float).
A bad value raises ConfigError naming the key, e.g. `gpu_hour["NVIDIA L4"]`.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

from slicemeter.chargeback.money import price_to_micro
from slicemeter.common import ConfigError

_CURRENCY = re.compile(r"^[A-Z]{3}$")
_TOP_KEYS = {"currency", "gpu_hour", "overrides", "electricity"}
_OVERRIDE_KEYS = {"node", "pool", "model", "gpu_hour"}


@dataclass(frozen=True)
class Override:
    gpu_hour: Decimal
    node: str | None = None
    pool: str | None = None       # a tenant cluster identity (Tick `cluster`)
    model: str | None = None

    def matches(self, model: str | None, node: str, cluster: str) -> bool:
        if self.model is not None and self.model != model:
            return False
        if self.node is not None and self.node != node:
            return False
        if self.pool is not None and self.pool != cluster:
            return False
        return True

    def rank(self) -> tuple[int, int]:
        # node beats pool beats model-only; a model filter beats none at the same level
        return (2 if self.node else 1 if self.pool else 0, 1 if self.model else 0)


@dataclass(frozen=True)
class PriceCatalog:
    currency: str
    gpu_hour: dict[str, Decimal]
    overrides: tuple[Override, ...] = ()
    price_per_kwh: Decimal = Decimal("0")
    carbon_g_per_kwh: Decimal = Decimal("0")
    source_text: str = field(default="", compare=False)

    def price(self, model: str | None, node: str, cluster: str) -> Decimal:
        """Hourly price of one GPU; ConfigError naming the missing key if none applies."""
        hits = [o for o in self.overrides if o.matches(model, node, cluster)]
        if hits:
            return max(hits, key=Override.rank).gpu_hour
        if model is None or model not in self.gpu_hour:
            raise ConfigError(f"gpu_hour[{model!r}]: no price for this GPU model (seen on node {node!r})")
        return self.gpu_hour[model]

    def fingerprint(self) -> str:
        return hashlib.sha256(self.source_text.encode()).hexdigest()[:16]


def _decimal(value: Any, key: str, *, allow_zero: bool = True) -> Decimal:
    if isinstance(value, float):
        raise ConfigError(f"{key}: write the price as a quoted string (got float {value!r}, which is inexact)")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ConfigError(f"{key}: expected a decimal number, got {value!r}")
    try:
        d = Decimal(str(value).strip())
    except InvalidOperation:
        raise ConfigError(f"{key}: not a decimal number: {value!r}") from None
    if not d.is_finite() or d < 0 or (d == 0 and not allow_zero):
        raise ConfigError(f"{key}: must be a finite number >= 0, got {value!r}")
    try:
        price_to_micro(d)
    except ValueError:
        raise ConfigError(f"{key}: at most 6 decimals, got {value!r}") from None
    return d


def parse_prices(doc: Any, source_text: str = "") -> PriceCatalog:
    """A parsed YAML document -> PriceCatalog (pure)."""
    if not isinstance(doc, dict):
        raise ConfigError("prices: the catalog must be a mapping with currency and gpu_hour")
    unknown = sorted(set(doc) - _TOP_KEYS, key=str)
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key in the price catalog")
    currency = doc.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.match(currency):
        raise ConfigError(f"currency: expected an ISO 4217 code like USD, got {currency!r}")
    table = doc.get("gpu_hour")
    if not isinstance(table, dict) or not table:
        raise ConfigError("gpu_hour: expected a mapping of GPU model -> hourly price")
    gpu_hour = {}
    for model, value in table.items():
        if not isinstance(model, str) or not model:
            raise ConfigError(f"gpu_hour[{model!r}]: the model must be a non-empty string")
        gpu_hour[model] = _decimal(value, f"gpu_hour[{model!r}]")
    overrides = []
    raw_over = doc.get("overrides") or []
    if not isinstance(raw_over, list):
        raise ConfigError("overrides: expected a list")
    for i, item in enumerate(raw_over):
        key = f"overrides[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{key}: expected a mapping")
        bad = sorted(set(item) - _OVERRIDE_KEYS, key=str)
        if bad:
            raise ConfigError(f"{key}.{bad[0]}: unknown key (use node, pool, model, gpu_hour)")
        if "gpu_hour" not in item:
            raise ConfigError(f"{key}.gpu_hour: missing")
        for k in ("node", "pool", "model"):
            if k in item and (not isinstance(item[k], str) or not item[k]):
                raise ConfigError(f"{key}.{k}: expected a non-empty string")
        if not any(k in item for k in ("node", "pool")):
            raise ConfigError(f"{key}: needs node or pool (a model-wide price belongs in gpu_hour)")
        overrides.append(Override(_decimal(item["gpu_hour"], f"{key}.gpu_hour"),
                                  node=item.get("node"), pool=item.get("pool"), model=item.get("model")))
    elec = doc.get("electricity") or {}
    if not isinstance(elec, dict):
        raise ConfigError("electricity: expected a mapping with price_per_kwh and carbon_g_per_kwh")
    bad = sorted(set(elec) - {"price_per_kwh", "carbon_g_per_kwh"}, key=str)
    if bad:
        raise ConfigError(f"electricity.{bad[0]}: unknown key")
    kwh = _decimal(elec.get("price_per_kwh", "0"), "electricity.price_per_kwh")
    carbon = elec.get("carbon_g_per_kwh", 0)
    if isinstance(carbon, float):
        carbon = str(carbon)  # not money: a float intensity is fine, keep its printed digits
    carbon_d = _decimal(carbon, "electricity.carbon_g_per_kwh")
    return PriceCatalog(currency, gpu_hour, tuple(overrides), kwh, carbon_d, source_text)


def parse_prices_text(text: str, name: str = "prices") -> PriceCatalog:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}: not valid YAML: {exc}") from None
    return parse_prices(doc, source_text=text)


def load_prices(path: str | Path) -> PriceCatalog:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"--prices: cannot read {p}: {exc.strerror}") from None
    return parse_prices_text(text, str(p))


# $SLICEMETER_PRICES (as the dashboard reads it) for installs without the source tree's
# examples/ (the container image sets it).
DEFAULT_PRICES = Path(os.environ.get("SLICEMETER_PRICES")
                      or Path(__file__).resolve().parent.parent / "examples" / "prices.yaml")


def load_prices_or_default(path: str | Path | None) -> PriceCatalog | None:
    """`path`'s catalog, else DEFAULT_PRICES' when that file exists, else None (a plan
    without prices still counts freeable GPUs, without a saving)."""
    if path is None and not DEFAULT_PRICES.is_file():
        return None
    return load_prices(path or DEFAULT_PRICES)
