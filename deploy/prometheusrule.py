"""Print prometheus/rules/*.yml as one Prometheus Operator PrometheusRule:

    python deploy/prometheusrule.py | kubectl apply -n slicemeter -f -

Generated rather than committed so that prometheus/rules stays the only copy of the rules.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

RULES = Path(__file__).resolve().parent.parent / "prometheus" / "rules"


def prometheus_rule(rules_dir: Path = RULES) -> dict:
    groups = []
    for path in sorted(rules_dir.glob("*.yml")):
        groups += yaml.safe_load(path.read_text())["groups"]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "slicemeter", "namespace": "slicemeter",
                     "labels": {"app.kubernetes.io/part-of": "slicemeter"}},
        "spec": {"groups": groups},
    }


def main() -> int:
    yaml.safe_dump(prometheus_rule(), sys.stdout, sort_keys=False, width=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
