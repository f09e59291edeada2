"""The price catalog: hourly GPU prices by model, per-node / per-pool overrides, electricity.

Format (examples/prices.yaml):

    currency: USD
    gpu_hour: {"NVIDIA A100-SXM4-80GB": "2.40", "NVIDIA L4": "0.80"}
    overrides: [{node: gpu-node-7, model: "NVIDIA L4", gpu_hour: "0.60"},
                {pool: https://acme.tenants.example:6443, gpu_hour: "2.00"}]
    electricity: {price_per_kwh: "0.14", carbon_g_per_kwh: 320}
    degraded: {throttled_share: "0.25"}     # optional: when a throttled GPU-hour is degraded
    credits: {degraded_hour: "1.0"}         # optional: credit that fraction of degraded hours
    unverified_usage: allocation            # optional: allocation (default) | usage, below

Prices are parsed as Decimal (quote them in YAML so they never pass through a float).
The format is a schema (slicemeter.config_schema); a bad value raises ConfigError naming
the line and the key, e.g. `prices.yaml:7: gpu_hour."NVIDIA L4": not a decimal number: 'abc'`.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, PlainValidator, model_validator

from slicemeter.common import ConfigError, cluster_key, read_config_text
from slicemeter.config_schema import NonEmpty, Schema, exact_decimal, key_path, invalid, load, validate

_CURRENCY = re.compile(r"^[A-Z]{3}$")
DEFAULT_THROTTLED_SHARE = Decimal("0.25")
# How the usage basis bills a slice-hour whose usage NVML could not check (docs/chargeback.md):
# `allocation` at its allocation share where that is more (as the max basis would), so a
# tenant hiding its processes pays what it holds; `usage` as reported.
UNVERIFIED_USAGE_POLICIES = ("allocation", "usage")


def _currency(code: Any) -> str:
    if not isinstance(code, str) or not _CURRENCY.match(code):
        raise invalid(f"expected an ISO 4217 code like USD, got {code!r}")
    return code


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
        if self.pool is not None and cluster_key(self.pool) != cluster_key(cluster):
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
    # a GPU-hour throttled for more than this share of the hour is degraded (docs/health.md)
    throttled_share: Decimal = DEFAULT_THROTTLED_SHARE
    # the fraction of a degraded hour's charge credited; None: no credit policy
    credit_degraded_hour: Decimal | None = None
    unverified_usage: str = "allocation"

    def price(self, model: str | None, node: str, cluster: str) -> Decimal:
        """Hourly price of one GPU; ConfigError naming the missing key if none applies."""
        hits = [o for o in self.overrides if o.matches(model, node, cluster)]
        if hits:
            return max(hits, key=Override.rank).gpu_hour
        if model is None or model not in self.gpu_hour:
            raise ConfigError(f"{key_path(('gpu_hour', str(model)))}: no price for this GPU model (seen on node {node!r})")
        return self.gpu_hour[model]

    def fingerprint(self) -> str:
        return hashlib.sha256(self.source_text.encode()).hexdigest()[:16]


def _decimal(value: Any) -> Decimal:
    return exact_decimal(value, "price")


# parsed from the YAML scalar's own text, never through a float
Price = Annotated[Decimal, PlainValidator(_decimal)]
# a grid intensity is not money: a float's printed digits are fine
Intensity = Annotated[Decimal, PlainValidator(lambda v: _decimal(str(v) if isinstance(v, float) else v))]


class _OverrideSpec(Schema):
    gpu_hour: Price
    node: NonEmpty | None = None
    pool: NonEmpty | None = None
    model: NonEmpty | None = None

    @model_validator(mode="after")
    def _scoped(self):
        if not (self.node or self.pool):
            raise invalid("needs node or pool (a model-wide price belongs in gpu_hour)")
        return self


class _Electricity(Schema):
    price_per_kwh: Price = Decimal("0")
    carbon_g_per_kwh: Intensity = Decimal("0")


def _fraction(value: Any) -> Decimal:
    d = _decimal(value)
    if d > 1:
        raise invalid(f"a fraction between 0 and 1, got {value!r}")
    return d


Fraction = Annotated[Decimal, PlainValidator(_fraction)]


class _Degraded(Schema):
    throttled_share: Fraction = DEFAULT_THROTTLED_SHARE


class _Credits(Schema):
    degraded_hour: Fraction


class _PriceFile(Schema):
    currency: Annotated[str, PlainValidator(_currency)]
    gpu_hour: Annotated[dict[NonEmpty, Price], Field(min_length=1)]
    overrides: list[_OverrideSpec] = []
    electricity: _Electricity = _Electricity()
    degraded: _Degraded = _Degraded()
    credits: _Credits | None = None
    unverified_usage: Literal[UNVERIFIED_USAGE_POLICIES] = "allocation"


def _catalog(spec: _PriceFile, source_text: str) -> PriceCatalog:
    overrides = tuple(Override(o.gpu_hour, node=o.node, pool=o.pool, model=o.model) for o in spec.overrides)
    return PriceCatalog(spec.currency, dict(spec.gpu_hour), overrides, spec.electricity.price_per_kwh,
                        spec.electricity.carbon_g_per_kwh, source_text, spec.degraded.throttled_share,
                        spec.credits.degraded_hour if spec.credits else None, spec.unverified_usage)


def parse_prices(doc: Any, source_text: str = "") -> PriceCatalog:
    """A parsed YAML document -> PriceCatalog (pure)."""
    return _catalog(validate(_PriceFile, doc), source_text)


def parse_prices_text(text: str, name: str = "prices") -> PriceCatalog:
    """A catalog's YAML text; a mistake is a ConfigFileError naming `name`, the line and the key."""
    spec, _ = load(_PriceFile, text, name)
    return _catalog(spec, text)


def load_prices(path: str | Path) -> PriceCatalog:
    p = Path(path)
    return parse_prices_text(read_config_text(p, "--prices"), str(p))


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
