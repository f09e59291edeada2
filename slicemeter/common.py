"""Errors and names every part of slicemeter shares."""
from __future__ import annotations

from pathlib import Path


class ConfigError(Exception):
    """A bad option or config value; the message names the offending key."""


def read_yaml_file(path, option: str):
    """The parsed YAML file that `option` names; ConfigError saying which and why otherwise."""
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"{option}: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{option}: {path} is not valid YAML: {exc}") from None
