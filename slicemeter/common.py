"""Errors and names every part of slicemeter shares."""
from __future__ import annotations

import contextlib
import re
from datetime import date, datetime
from pathlib import Path


class ConfigError(Exception):
    """A bad option or config value; the message names the offending key."""


# A month as every command and page takes it: 'YYYY-MM'.
MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])\Z")
# A Kubernetes DNS-1123 label (namespace, container and tenant names): at most 63
# characters of [a-z0-9-], starting and ending alphanumeric.
DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
DNS_LABEL_RE = re.compile(rf"^{DNS_LABEL}\Z")
# A GPU or MIG device UUID as NVML's nvmlDeviceGetUUID writes it: 'GPU-' and an 8-4-4-4-12
# hex UUID; a MIG device is 'MIG-' and its own UUID (driver R470 on) or, on older drivers,
# 'MIG-GPU-<parent uuid>/<GPU instance>/<compute instance>' (NVIDIA MIG user guide).
_HEX_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
GPU_UUID = rf"(?:GPU-{_HEX_UUID}|MIG-{_HEX_UUID}|MIG-GPU-{_HEX_UUID}/\d{{1,4}}/\d{{1,4}})"
GPU_UUID_RE = re.compile(rf"^{GPU_UUID}\Z")
MiB = 1 << 20
# The pod annotations HAMi's scheduler writes when it binds a pod: what each container was
# granted, and the node it was bound to.
HAMI_ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
HAMI_NODE_ANNOTATION = "hami.io/vgpu-node"


def month_start(month) -> date:
    """'2026-11' -> 2026-11-01; ValueError naming the bad value otherwise."""
    m = MONTH.match(month if isinstance(month, str) else "")
    if not m:
        raise ValueError(f"month must be YYYY-MM, got {month!r}")
    return date(int(m.group(1)), int(m.group(2)), 1)


def next_month(start: date) -> date:
    """The first day of the month after `start`'s."""
    return date(start.year + (start.month == 12), start.month % 12 + 1, 1)


def month_bounds(month) -> tuple[date, date]:
    """'2026-11' -> (2026-11-01, 2026-12-01): the month as [start, end)."""
    start = month_start(month)
    return start, next_month(start)


def month_window(month) -> tuple[datetime, datetime, int]:
    """'2026-11' -> (start, end, hours in the month), naive UTC datetimes."""
    start, end = month_bounds(month)
    return datetime(start.year, start.month, 1), datetime(end.year, end.month, 1), (end - start).days * 24


def check_choice(value, choices) -> None:
    """ValueError unless `value` is one of `choices`."""
    if value not in choices:
        raise ValueError(f"expected one of {', '.join(choices)}, got {value!r}")


@contextlib.contextmanager
def named(name: str):
    """A ValueError or ConfigError raised inside becomes a ConfigError that starts with
    `name`: library code names the value ('month'), a command its flag ('--month')."""
    try:
        yield
    except (ValueError, ConfigError) as exc:
        raise ConfigError(f"{name}: {exc}") from None


LAKE_PREFIX = "ducklake:"   # a --db naming a DuckLake (store/lake.py), not a file


def is_lake(target) -> bool:
    """Whether a `--db` names a DuckLake rather than a DuckDB file."""
    return str(target).startswith(LAKE_PREFIX)


def existing_db(target) -> Path | str:
    """The store `--db` names: a lake name as given, or a database file that exists;
    ConfigError where there is none (DuckDB would create one)."""
    if is_lake(target):
        return str(target)
    if not Path(target).is_file():
        raise ConfigError(f"--db: no such database file: {target}")
    return Path(target)


def read_yaml_file(path, option: str):
    """The parsed YAML file that `option` names; ConfigError saying which and why otherwise."""
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{option}: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{option}: {path} is not valid YAML: {exc}") from None
