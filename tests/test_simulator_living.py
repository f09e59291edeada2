"""A living simulated fleet: notebook sessions opened and closed, replicas scaled with the
diurnal load, a node that joins part-way through; deterministic by seed."""
from __future__ import annotations

import datetime as dt

import pytest

from slicemeter.simulator.scenario import ScenarioError, parse_scenario
from slicemeter.simulator.timetravel import generate

MON = int(dt.datetime(2026, 11, 2, tzinfo=dt.timezone.utc).timestamp() * 1000)   # a Monday
HOUR = 3_600_000
SCENARIO = """\
tenants:
  - {name: acme, api_server: "https://acme.example:6443"}
nodes:
  - name: n1
    tenant: acme
    {joins}
    gpus: [{model: "NVIDIA A100-SXM4-80GB", count: 2}]
    pods:
      - name: nb
        namespace: notebooks
        lifecycle: sessions
        containers:
          - {name: notebook, resources: {nvidia.com/gpumem: 8192, nvidia.com/gpucores: 20}, workload: bursty-notebook}
      - name: api
        namespace: serving
        replicas: 3
        containers:
          - name: server
            resources: {nvidia.com/gpumem: 8192, nvidia.com/gpucores: 20}
            workload: {pattern: diurnal-inference, peak: 0.8, base: 0.08}
"""


def scenario(joins: str = "", text: str = SCENARIO) -> str:
    return text.replace("    {joins}\n", f"    {joins}\n" if joins else "")


def rows(text: str, start: int, hours: float, interval_s: float = 300, seed: int = 0):
    out = []
    for _, _, s in generate(parse_scenario(text), start, start + int(hours * HOUR), interval_s=interval_s, seed=seed):
        out += [(r["ts_ms"], r["pod"], r["pod_uid"]) for r in s.select(["ts_ms", "pod", "pod_uid"]).to_pylist()]
    return out


def pods_at(text: str, ts: int) -> set[str]:
    return {p for _, p, _ in rows(text, ts, 1 / 3600, interval_s=1)}


def test_notebook_sessions_open_and_close_as_pods_of_their_own():
    week = rows(scenario(), MON, 7 * 24)
    sessions: dict[str, list[int]] = {}
    for ts, pod, _ in week:
        if pod.startswith("nb-"):
            sessions.setdefault(pod, []).append(ts)
    assert len(sessions) >= 10                                      # opened and closed many times
    for name, ts in sessions.items():
        assert max(ts) - min(ts) == 300_000 * (len(ts) - 1), name   # one unbroken life per pod
        opened = dt.datetime.fromtimestamp(min(ts) / 1000, dt.timezone.utc)
        assert name == f"nb-{opened:%Y%m%d}-{opened.hour * 2 + opened.minute // 30}"   # named by its opening
    working = [n for n, ts in sessions.items()
               if dt.datetime.fromtimestamp(min(ts) / 1000, dt.timezone.utc).weekday() < 5]
    assert len(working) > 0.8 * len(sessions)                       # mostly on working days
    assert not any(p == "nb" for _, p, _ in week)                   # never a standing pod


def test_replicas_scale_with_the_diurnal_load():
    text = scenario()
    api = lambda pods: sorted(p.rsplit("-", 2)[0] if p.startswith("api-r") else p  # noqa: E731
                              for p in pods if p.startswith("api"))
    assert api(pods_at(text, MON + 3 * HOUR)) == ["api"]                         # night: one replica
    assert api(pods_at(text, MON + 14 * HOUR)) == ["api", "api-r1", "api-r2"]   # weekday peak: three
    assert api(pods_at(text, MON + 5 * 24 * HOUR + 14 * HOUR)) == ["api", "api-r1"]   # Saturday: half the load


def test_a_node_joins_part_way_and_seeds_repeat():
    joins = "joins: 2026-11-03T12:00:00"
    got = rows(scenario(joins), MON, 48)
    assert got and min(ts for ts, _, _ in got) == MON + 36 * HOUR
    assert got == rows(scenario(joins), MON, 48)              # same seed, same fleet
    assert got != rows(scenario(joins), MON, 48, seed=1)


def test_joins_relative_to_the_clock(monkeypatch):
    monkeypatch.setenv("SLICEMETER_NOW", "2026-11-20T15:00:00Z")
    node = parse_scenario(scenario("joins: {days_before_now: 16}")).nodes[0]
    assert node.joins_ms == int(dt.datetime(2026, 11, 4, tzinfo=dt.timezone.utc).timestamp() * 1000)


@pytest.mark.parametrize("change, key", [
    (("lifecycle: sessions\n        containers:\n          - {name: notebook",
      "lifecycle: forever\n        containers:\n          - {name: notebook"), "nodes[0].pods[0].lifecycle"),
    (("replicas: 3", "replicas: 1"), "nodes[0].pods[1].replicas"),
    (("workload: bursty-notebook", "workload: steady-training"), "nodes[0].pods[0].lifecycle"),
    (("    {joins}\n", "    joins: someday\n"), "nodes[0].joins"),
])
def test_living_mistakes_name_the_key(change, key):
    text = scenario(text=SCENARIO.replace(*change))
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(text, "s.yaml")
    assert key in str(exc.value)


RESERVED = SCENARIO + """\
      - name: debug-reserved
        namespace: ml
        lifecycle: sessions
        containers:
          - {name: shell, resources: {nvidia.com/gpumem: 16384, nvidia.com/gpucores: 20}, workload: idle-reservation}
"""


def reservation_lives(seed: int = 0) -> dict[str, list[int]]:
    lives: dict[str, list[int]] = {}
    for _, _, s in generate(parse_scenario(scenario(text=RESERVED)), MON, MON + 7 * 24 * HOUR, interval_s=300, seed=seed):
        for r in s.select(["ts_ms", "pod", "sm_util_ratio", "last_kernel_age_s", "nvml_memory_used_bytes"]).to_pylist():
            if r["pod"].startswith("debug-reserved"):
                assert not r["sm_util_ratio"] and r["last_kernel_age_s"] is None and r["nvml_memory_used_bytes"] > 0
                lives.setdefault(r["pod"], []).append(r["ts_ms"])
    return lives


def test_an_idle_reservation_comes_and_goes_on_working_days():
    lives = reservation_lives()
    assert 1 <= len(lives) <= 5 and "debug-reserved" not in lives   # one a working day at most, never standing
    for name, ts in lives.items():
        assert max(ts) - min(ts) == 300_000 * (len(ts) - 1), name   # one unbroken life per pod
        opened = dt.datetime.fromtimestamp(min(ts) / 1000, dt.timezone.utc)
        assert name == f"debug-reserved-{opened:%Y%m%d}-{opened.hour * 2 + opened.minute // 30}"
        assert opened.weekday() < 5 and 8 <= opened.hour < 12
        assert 2 * HOUR <= max(ts) - min(ts) + 300_000 <= 10 * HOUR   # hours, never a day
    assert lives == reservation_lives()                     # same seed, same reservations
    assert lives != reservation_lives(seed=1)
