"""Headline figures: gauges that a reader of the store computes off the request path (the
right-sizing plan, the sharing dividend) and ingest serves on its /metrics.

The module that computes a figure declares its family once, as name -> `Family`; ingest's
collector (ingest/metrics.py) serves what `samples` makes of it. Floats are fine here: gauges
on a dashboard, never summed into a bill.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple

Samples = dict[str, list[tuple[dict[str, str], float]]]


class Family(NamedTuple):
    help: str
    labels: tuple[str, ...]
    figure: Callable[[Any], Any]   # the figure of one subject; None: not known, no sample


def samples(families: dict[str, Family], subjects: Iterable[tuple[dict[str, str], Any]]) -> Samples:
    """Every family's samples over `subjects` ((labels, subject) pairs: each family takes
    the labels it declares); a family without a known figure has no sample."""
    out: Samples = {name: [] for name in families}
    for labels, subject in subjects:
        for name, family in families.items():
            value = family.figure(subject)
            if value is not None:
                out[name].append(({k: labels[k] for k in family.labels}, float(value)))
    return out
