"""What a scrape reads: the exporter's counters, the last Tick, and the collectors' base.

`FamilyCollector` is a prometheus_client Collector over a group of exporter/serve/catalogue.py's
families: describe() lists exactly those (so a registry's duplicate check sees every name),
collect() builds them fresh from one `Scrape`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property
from operator import attrgetter
from typing import Callable, Iterable, NamedTuple

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from slicemeter.exporter.serve.catalogue import Family
from slicemeter.exporter.serve.exposition import Samples
from slicemeter.exporter.assemble.shares import allocation_share, usage_share
from slicemeter.exporter.assemble.tick_builder import BuildResult
from slicemeter.tick import SliceReading

SOURCES = ("nvml", "hami", "pods", "dra", "kafka")


def _version() -> str:
    # the source itself, not the installed metadata: an editable install keeps the version
    # it was installed with
    from slicemeter import __version__

    return __version__


@dataclass
class ExporterStats:
    """Counters that outlive a Tick; updated by the tick loop and the publisher."""

    tenant: str
    version: str = field(default_factory=_version)
    lock: threading.Lock = field(default_factory=threading.Lock)
    last: BuildResult | None = None
    source_errors: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SOURCES})
    region_errors: dict[str, int] = field(default_factory=dict)
    spool_stats: Callable[[], dict[str, int]] | None = None

    def record(self, result: BuildResult) -> None:
        with self.lock:
            self.last = result
            self.source_errors["nvml"] += result.nvml_errors
            self.source_errors["pods"] += max(0, result.pod_errors)
            self.source_errors["dra"] += max(0, result.dra_errors)
            self.source_errors["hami"] += len(result.region_errors)
            for *_, err in result.region_errors:
                self.region_errors[err.reason] = self.region_errors.get(err.reason, 0) + 1

    def count_error(self, source: str, n: int = 1) -> None:
        with self.lock:
            self.source_errors[source] = self.source_errors.get(source, 0) + n

    def scrape(self, label_tuples: LabelTuples | None = None) -> Scrape:
        """`label_tuples`: a long-lived one keeps each series' label tuple across Ticks."""
        with self.lock:
            last, source_errors, region_errors = self.last, dict(self.source_errors), dict(self.region_errors)
        spool = self.spool_stats() if self.spool_stats else {}
        tuples = label_tuples or LabelTuples()
        tuples.begin(last)
        return Scrape(last, self.tenant, self.version, source_errors, region_errors, spool, tuples)


def reading_rows(out: dict[str, Samples], pairs: Iterable[tuple[str, str]]) -> tuple[list[list], Callable]:
    """For (family name, reading attribute) pairs: the families' rows lists, and one getter
    of those attributes of a reading, as a tuple in the same order."""
    pairs = list(pairs)
    return [out[name].rows for name, _ in pairs], attrgetter(*(attr for _, attr in pairs))


def present_rows(labels: list[tuple[str, ...]], readings: list, attr: str) -> list[tuple[tuple[str, ...], object]]:
    """One family's rows from one attribute of each reading, in the readings' order, where
    it is known (not None). A family is filled a column at a time: one comprehension per
    family costs a fraction of appending row by row inside a loop over the readings."""
    return [(lv, v) for lv, v in zip(labels, map(attrgetter(attr), readings)) if v is not None]


def label_value(v: object) -> str:
    return "" if v is None else str(v)


class LabelTuples:
    """One tuple object per series' label values, the same object from Tick to Tick while
    the series lives. Two Ticks' rows then compare by identity, which is what makes a
    family's unchanged rows cheap to recognise (exposition.FamilyTexts). The table is
    emptied when it holds more than twice the last Tick's series, so deleted pods' tuples
    do not pile up."""

    SLACK = 256

    def __init__(self) -> None:
        self._kept: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._tick: object = None
        self._asked = 0   # tuples asked for since the Tick began

    def begin(self, tick: object) -> None:
        if tick is not self._tick:
            if len(self._kept) > 2 * self._asked + self.SLACK:
                self._kept = {}
            self._tick, self._asked = tick, 0

    def __call__(self, values: tuple[str, ...]) -> tuple[str, ...]:
        self._asked += 1
        return self._kept.setdefault(values, values)


@dataclass
class Scrape:
    """What one scrape reads, copied under the stats' lock; `last` None until the first Tick."""

    last: BuildResult | None
    tenant: str
    version: str
    source_errors: dict[str, int] = field(default_factory=dict)
    region_errors: dict[str, int] = field(default_factory=dict)
    spool: dict[str, int] = field(default_factory=dict)
    label_tuples: LabelTuples = field(default_factory=LabelTuples)

    @cached_property
    def view(self) -> TickView:
        assert self.last is not None
        return TickView(self.last, self.tenant, self.label_tuples)


class SliceView(NamedTuple):   # a tuple: one is made per slice per Tick
    reading: SliceReading
    labels: tuple[str, ...]          # catalogue.SLICE's values (claim and driver empty off DRA)
    allocation: float | None
    usage: float | None


class TickView:
    """The Tick as the slicemeter families read it: label values and shares, computed once."""

    def __init__(self, last: BuildResult, tenant: str, label_tuples: LabelTuples):
        t = last.tick
        self.last = last
        self.base = (t.node, t.cluster, tenant)
        totals = {g.gpu_uuid: g.memory_total_bytes for g in t.gpus}
        self.allocated: dict[str, float] = {}
        self.used: dict[str, float] = {}
        self.names: dict[str, tuple[str | None, str | None]] = {}
        self.slices: list[SliceView] = []
        allocated, used, base = self.allocated, self.used, self.base
        for s in t.slices:
            uuid = s.gpu_uuid
            total = totals.get(uuid)
            a, u = allocation_share(s, total), usage_share(s, total)
            allocated[uuid] = allocated.get(uuid, 0.0) + (a or 0.0)
            used[uuid] = used.get(uuid, 0.0) + (u or 0.0)
            self.names[s.pod_uid] = (s.namespace, s.pod)
            labels = label_tuples(base + (label_value(s.namespace), label_value(s.pod or s.pod_uid), s.container, uuid,
                                          label_value(s.vdevice_index), label_value(s.claim), label_value(s.driver)))
            self.slices.append(SliceView(s, labels, a, u))


class FamilyCollector(Collector):
    """Emits `families` (catalogue rows) from a Scrape; describe() lists them without samples."""

    families: tuple[Family, ...] = ()

    def __init__(self, stats: ExporterStats):
        self.stats = stats

    def describe(self) -> list[Metric]:
        return [Samples(f).to_metric() for f in self.families]

    def collect(self) -> list[Metric]:
        return [s.to_metric() for s in self.samples(self.stats.scrape())]

    def samples(self, scrape: Scrape) -> list[Samples]:
        out = [Samples(f) for f in self.families]
        if scrape.last is not None:
            self.fill(scrape, {s.family.name: s for s in out})
        return out

    def fill(self, scrape: Scrape, out: dict[str, Samples]) -> None:
        raise NotImplementedError
