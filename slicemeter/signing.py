"""Per-cluster message signatures: HMAC-SHA256 over a Tick message's value bytes.

The exporter of a tenant cluster holds that cluster's key (a Kubernetes Secret); ingest
holds every cluster's key and which clusters each may speak for (ingest/trust.py). The key
id travels in a Kafka header so that keys can be rotated: ingest accepts any key it knows.
"""
from __future__ import annotations

import hashlib
import hmac
import re

KEY_ID_HEADER = "slicemeter-key-id"
SIGNATURE_HEADER = "slicemeter-signature"
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
MIN_KEY_BYTES = 16


class SigningError(ValueError):
    """A key or key id that cannot be used; the text names it."""


def check_key_id(key_id: str) -> str:
    if not _KEY_ID.match(key_id):
        raise SigningError(f"key id {key_id!r}: use 1-128 letters, digits, '.', '_' or '-'")
    return key_id


def load_key(path: str) -> bytes:
    """A key file's bytes (trailing newline stripped), at least MIN_KEY_BYTES long."""
    try:
        with open(path, "rb") as f:
            key = f.read().rstrip(b"\r\n")
    except OSError as exc:
        raise SigningError(f"key file {path}: {exc.strerror}") from None
    if len(key) < MIN_KEY_BYTES:
        raise SigningError(f"key file {path}: {len(key)} bytes, at least {MIN_KEY_BYTES} needed")
    return key


def key_from_options(key_file: str | None, key_id: str | None) -> tuple[str, bytes] | None:
    """(key id, key) from --signing-key-file / --signing-key-id, None without them."""
    from slicemeter.common import ConfigError

    if not key_file and not key_id:
        return None
    if not (key_file and key_id):
        raise ConfigError("--signing-key-file and --signing-key-id go together")
    try:
        return check_key_id(key_id), load_key(key_file)
    except SigningError as exc:
        raise ConfigError(f"--signing-key-*: {exc}") from None


def signature(key: bytes, value: bytes) -> bytes:
    return hmac.new(key, value, hashlib.sha256).digest()


def signed_headers(key_id: str, key: bytes, value: bytes) -> list[tuple[str, bytes]]:
    return [(KEY_ID_HEADER, key_id.encode()), (SIGNATURE_HEADER, signature(key, value))]


def header(headers, name: str) -> bytes | None:
    """The value of header `name` in kafka-python's [(name, value), ...] (the first one)."""
    for k, v in headers or ():
        if k == name:
            return v
    return None
