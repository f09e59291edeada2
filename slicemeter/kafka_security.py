"""Kafka client authentication options shared by the exporter, backfill and ingest.

SASL/SCRAM (or PLAIN) over plaintext or TLS, and TLS with an optional client certificate;
secrets are read from files (a mounted Kubernetes Secret), never taken on the command line.
The result is kafka-python's own settings (security_protocol, sasl_*, ssl_*).
"""
from __future__ import annotations

import argparse
import os

from slicemeter.common import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


def add_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Kafka authentication")
    g.add_argument("--kafka-security-protocol", choices=PROTOCOLS, default="PLAINTEXT")
    g.add_argument("--kafka-sasl-mechanism", choices=MECHANISMS, default="SCRAM-SHA-512")
    g.add_argument("--kafka-username", help="SASL user name")
    g.add_argument("--kafka-password-file", metavar="FILE", help="file holding the SASL password")
    g.add_argument("--kafka-ca-file", metavar="FILE", help="CA bundle the broker's TLS certificate is checked against")
    g.add_argument("--kafka-cert-file", metavar="FILE", help="client certificate (TLS client authentication)")
    g.add_argument("--kafka-key-file", metavar="FILE", help="client certificate's private key")


def _read(option: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().rstrip("\r\n")
    except OSError as exc:
        raise ConfigError(f"{option} {path}: {exc.strerror}") from None


def settings(args: argparse.Namespace) -> dict:
    """kafka-python settings for the options given; raises ConfigError naming a bad one."""
    protocol = args.kafka_security_protocol
    out: dict = {"security_protocol": protocol}
    if protocol.startswith("SASL_"):
        if not args.kafka_username or not args.kafka_password_file:
            raise ConfigError(f"--kafka-security-protocol {protocol} needs --kafka-username and --kafka-password-file")
        password = _read("--kafka-password-file", args.kafka_password_file)
        if not password:
            raise ConfigError(f"--kafka-password-file {args.kafka_password_file} is empty")
        out |= {"sasl_mechanism": args.kafka_sasl_mechanism, "sasl_plain_username": args.kafka_username,
                "sasl_plain_password": password}
    elif args.kafka_username or args.kafka_password_file:
        raise ConfigError("--kafka-username / --kafka-password-file need --kafka-security-protocol SASL_PLAINTEXT or SASL_SSL")
    tls_files = {"ssl_cafile": ("--kafka-ca-file", args.kafka_ca_file),
                 "ssl_certfile": ("--kafka-cert-file", args.kafka_cert_file),
                 "ssl_keyfile": ("--kafka-key-file", args.kafka_key_file)}
    for setting, (option, path) in tls_files.items():
        if not path:
            continue
        if not protocol.endswith("SSL"):
            raise ConfigError(f"{option} needs --kafka-security-protocol SSL or SASL_SSL")
        if not os.path.isfile(path):
            raise ConfigError(f"{option}: no such file: {path}")
        out[setting] = path
    if bool(args.kafka_cert_file) != bool(args.kafka_key_file):
        raise ConfigError("--kafka-cert-file and --kafka-key-file go together")
    return out
