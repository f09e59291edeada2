"""GPU health through nvidia-ml-py's own pynvml.py, the fake NVML's answers, and Xid storms.

The per-call tests run the exporter's NvmlReader on the real pynvml module (13.615.71) with
its library replaced by a ctypes stub: each entry point a CFUNCTYPE with nvml.h's prototype,
writing through the pointers pynvml passes and returning an NVML return code. So pynvml's
own argument marshalling, return types (ints, tuples, ctypes structures, field-value arrays)
and NVMLError-by-code raising are what the reader sees.
"""
from __future__ import annotations

import ctypes
import inspect
import json
import subprocess
import sys
from ctypes import CFUNCTYPE, POINTER, c_int, c_int32, c_uint, c_ulonglong, c_void_p

import pytest

from slicemeter.exporter.sources.gpu_health import CRITICAL_XIDS, MAX_XID_WAITS_PER_TICK, XID_OTHER, XidTally
from slicemeter.exporter.sources.nvml import NvmlReader
from slicemeter.simulator.nvml import EventData, HealthNow, pynvml
from slicemeter.testkit.static_node import StaticNode, gpu

OK, NOT_SUPPORTED, GPU_IS_LOST = pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_GPU_IS_LOST
UUIDS = ["GPU-11111111-2222-4333-8444-555555555555", "GPU-66666666-7777-4888-9999-aaaaaaaaaaaa"]
DEV = 0x1000      # handle of GPU i: DEV + i (an opaque pointer to pynvml)
SET = 0x5000


def _ptr(p) -> int:
    """The address an opaque handle (nvmlDevice_t, nvmlEventSet_t) holds."""
    return ctypes.cast(p, c_void_p).value or 0


def _handle(kind, address: int):
    return ctypes.cast(c_void_p(address), kind)


class StubLib:
    """libnvidia-ml as pynvml calls it: one CFUNCTYPE per nvml.h prototype. `fail[name] = code`
    makes that entry point return the code; `del`-ing an attribute makes it absent from the
    library (FUNCTION_NOT_FOUND)."""

    def __init__(self):
        self.fail: dict[str, int] = {}
        self.events: list[tuple[int, int]] = []         # (GPU index, Xid code)
        self.registered: set[int] = set()
        self.memory_sensor = True
        u, ull, dev, evset = POINTER(c_uint), POINTER(c_ulonglong), pynvml.c_nvmlDevice_t, pynvml.c_nvmlEventSet_t
        self._def("nvmlDeviceGetCount_v2", (u,), lambda n: self._put(n, 2))
        self._def("nvmlDeviceGetHandleByIndex_v2", (c_uint, POINTER(dev)),
                  lambda i, h: self._put(h, _handle(dev, DEV + i)))
        self._def("nvmlDeviceGetUUID", (dev, POINTER(ctypes.c_char), c_uint), self._uuid)
        self._def("nvmlDeviceGetTemperatureV", (dev, POINTER(pynvml.c_nvmlTemperature_v1_t)), self._temp_v)
        self._def("nvmlDeviceGetTemperature", (dev, c_uint, u), lambda d, s, t: self._put(t, 61) if s == 0 else 2)
        # pynvml passes byref(an array of nvmlFieldValue_t): a pointer to the first, as C sees it
        self._def("nvmlDeviceGetFieldValues", (dev, c_int32, c_void_p), self._fields)
        self._def("nvmlDeviceGetFanSpeed", (dev, u), lambda d, s: self._put(s, 45))
        self._def("nvmlDeviceGetTotalEccErrors", (dev, c_uint, c_uint, ull),
                  lambda d, e, c, n: self._put(n, 1000 * (c + 1) + e))   # volatile: 1000+type, aggregate: 2000+type
        self._def("nvmlDeviceGetRetiredPagesPendingStatus", (dev, u), lambda d, p: self._put(p, 1))
        self._def("nvmlDeviceGetRemappedRows", (dev, u, u, u, u), self._rows)
        self._def("nvmlDeviceGetPcieReplayCounter", (dev, u), lambda d, n: self._put(n, 7))
        self._def("nvmlDeviceGetCurrentClocksEventReasons", (dev, ull), lambda d, r: self._put(r, 0x20 | 0x40))
        self._def("nvmlDeviceGetCurrentClocksThrottleReasons", (dev, ull), lambda d, r: self._put(r, 0x4))
        self._def("nvmlDeviceGetViolationStatus", (dev, c_uint, POINTER(pynvml.c_nvmlViolationTime_t)), self._violation)
        self._def("nvmlEventSetCreate", (POINTER(evset),), lambda s: self._put(s, _handle(evset, SET)))
        self._def("nvmlDeviceRegisterEvents", (dev, c_ulonglong, evset), self._register)
        self._def("nvmlEventSetWait_v2", (evset, POINTER(pynvml.c_nvmlEventData_t), c_uint), self._wait)
        self._def("nvmlEventSetFree", (evset,), lambda s: OK)

    def _def(self, name: str, argtypes: tuple, impl) -> None:
        def entry(*args):
            return self.fail.get(name, OK) or impl(*args)
        setattr(self, name, CFUNCTYPE(c_int, *argtypes)(entry))

    @staticmethod
    def _put(p, value) -> int:
        p[0] = value
        return OK

    def _uuid(self, d, buf, size) -> int:
        text = UUIDS[_ptr(d) - DEV].encode() + b"\0"
        ctypes.memmove(buf, text, min(len(text), size))
        return OK

    def _temp_v(self, d, t) -> int:
        if t[0].version != pynvml.nvmlTemperature_v1 or t[0].sensorType != 0:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        t[0].temperature = 63
        return OK

    def _fields(self, d, count, address) -> int:
        values = ctypes.cast(address, POINTER(pynvml.c_nvmlFieldValue_t))
        for i in range(count):
            v = values[i]
            if v.fieldId == pynvml.NVML_FI_DEV_MEMORY_TEMP and self.memory_sensor:
                v.valueType, v.nvmlReturn, v.value.uiVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, OK, 71
            else:
                v.nvmlReturn = NOT_SUPPORTED
        return OK

    def _rows(self, d, corr, unc, pending, failed) -> int:
        corr[0], unc[0], pending[0], failed[0] = 3, 1, 1, 0
        return OK

    def _violation(self, d, policy, out) -> int:
        out[0].referenceTime, out[0].violationTime = 1, (2_500_000_000 if policy == 0 else 750_000_000)
        return OK

    def _register(self, d, types, s) -> int:
        if not types & pynvml.nvmlEventTypeXidCriticalError or _ptr(s) != SET:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        self.registered.add(_ptr(d) - DEV)
        return OK

    def _wait(self, s, data, timeout) -> int:
        while self.events:
            i, code = self.events.pop(0)
            if i in self.registered:
                data[0].device = _handle(pynvml.c_nvmlDevice_t, DEV + i)
                data[0].eventType, data[0].eventData = pynvml.nvmlEventTypeXidCriticalError, code
                return OK
        return pynvml.NVML_ERROR_TIMEOUT


@pytest.fixture
def lib(monkeypatch) -> StubLib:
    stub = StubLib()
    monkeypatch.setattr(pynvml, "nvmlLib", stub)
    monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer_cache", {})
    return stub


def figures(g) -> dict:
    h = g.health
    return {"temperature": h.temperature_c, "memory_temperature": h.memory_temperature_c, "fan": h.fan_speed_pct,
            "ecc": dict(h.ecc), "retired_pages_pending": h.retired_pages_pending,
            "remapped": (h.remapped_rows, h.remapped_rows_pending, h.remapped_rows_failed),
            "pcie_replays": h.pcie_replays, "clock_event_reasons": h.clock_event_reasons,
            "violation": (h.power_violation_s, h.thermal_violation_s)}


ALL = {"temperature": 63.0, "memory_temperature": 71.0, "fan": 45.0,
       "ecc": {("corrected", "volatile"): 1000, ("uncorrected", "volatile"): 1001,
               ("corrected", "aggregate"): 2000, ("uncorrected", "aggregate"): 2001},
       "retired_pages_pending": True, "remapped": ((3, 1), True, False), "pcie_replays": 7,
       "clock_event_reasons": 0x60, "violation": (2.5, 0.75)}
# entry point -> the figure it reads, that figure when the board does not offer the call, and its errors (once)
CALLS = {
    "nvmlDeviceGetFieldValues": ("memory_temperature", None, 1),
    "nvmlDeviceGetFanSpeed": ("fan", None, 1),
    "nvmlDeviceGetTotalEccErrors": ("ecc", {}, 4),
    "nvmlDeviceGetRetiredPagesPendingStatus": ("retired_pages_pending", None, 1),
    "nvmlDeviceGetRemappedRows": ("remapped", (None, None, None), 1),
    "nvmlDeviceGetPcieReplayCounter": ("pcie_replays", None, 1),
    "nvmlDeviceGetViolationStatus": ("violation", (None, None), 2),
}


def read(lib: StubLib, reader: NvmlReader | None = None):
    reader = reader or NvmlReader(pynvml, initialised=True)
    return reader, reader.read()


def errors_of(lib: StubLib) -> tuple[int, int]:
    """A new reader's errors on its first and second read of the library as it stands (the
    stub leaves out the non-health entry points: those count as FUNCTION_NOT_FOUND, once)."""
    reader, first = read(lib)
    return first.errors, reader.read().errors


def test_every_health_figure_through_pynvml(lib):
    _, snap = read(lib)
    assert [g.uuid for g in snap.gpus] == UUIDS
    assert all(figures(g) == ALL for g in snap.gpus)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_call_the_board_does_not_offer_costs_only_its_figure_once(lib, call):
    figure, absent, errors = CALLS[call]
    clean = errors_of(lib)
    lib.fail[call] = NOT_SUPPORTED
    reader, first = read(lib)
    _, second = read(lib, reader)
    assert (first.errors, second.errors) == (clean[0] + errors * 2, clean[1])     # on each GPU, once
    for g in second.gpus:
        got = figures(g)
        assert got[figure] == absent
        assert {k: v for k, v in got.items() if k != figure} == {k: v for k, v in ALL.items() if k != figure}


def test_a_field_the_board_lacks_is_remembered_like_a_call(lib):
    clean = errors_of(lib)
    lib.memory_sensor = False       # the call answers, the field in it says NOT_SUPPORTED
    reader, first = read(lib)
    _, second = read(lib, reader)
    assert all(g.health.memory_temperature_c is None for g in second.gpus)
    assert first.errors == clean[0] + 2 and second.errors == clean[1]
    assert (0, "nvmlDeviceGetFieldValues/memory_temperature") in reader.unsupported


@pytest.mark.parametrize("new,old,expected", [
    ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature", ("temperature", 61.0)),
    ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons",
     ("clock_event_reasons", 0x4)),
])
@pytest.mark.parametrize("how", ["absent from the driver", "not supported"])
def test_the_nvml_13_entry_point_first_the_deprecated_one_without_an_error(lib, new, old, expected, how):
    assert figures(read(lib)[1].gpus[0])[expected[0]] == ALL[expected[0]]   # the new one answers first
    clean = errors_of(lib)[0]
    if how == "not supported":
        lib.fail[new] = NOT_SUPPORTED
    else:
        delattr(lib, new)
    pynvml._nvmlGetFunctionPointer_cache.clear()
    reader, snap = read(lib)
    assert figures(snap.gpus[0])[expected[0]] == expected[1] and snap.errors == clean
    lib.fail[old] = NOT_SUPPORTED                              # a board with neither: the figure only
    pynvml._nvmlGetFunctionPointer_cache.clear()
    reader, snap = read(lib)
    assert figures(snap.gpus[0])[expected[0]] is None and snap.errors == clean + 2


def test_gpu_is_lost_from_a_health_call_reports_the_gpu_lost(lib):
    reader, _ = read(lib)
    lib.fail["nvmlDeviceGetPcieReplayCounter"] = GPU_IS_LOST
    snap = reader.read()
    assert [(g.uuid, g.lost, g.health.temperature_c) for g in snap.gpus] == [(u, True, None) for u in UUIDS]


def test_xid_events_through_pynvmls_event_set(lib):
    reader, first = read(lib)
    assert lib.registered == {0, 1} and all(g.health.xid_events == 0 for g in first.gpus)
    lib.events += [(0, 13), (0, 79), (0, 31), (1, 48)]
    snap = reader.read()
    g0, g1 = snap.gpus
    assert (g0.health.xid_events, g0.health.xid_last_code, g0.health.xid_critical_code) == (3, 31, 79)
    assert (g1.health.xid_events, g1.health.xid_last_code, g1.health.xid_critical_code) == (1, 48, 48)
    assert g0.health.xid_totals == {13: 1, 79: 1, 31: 1}
    again = reader.read()
    assert again.gpus[0].health.xid_events == 0 and again.gpus[0].health.xid_last_ever == 31


def test_a_board_without_xid_events_costs_only_those(lib):
    clean = errors_of(lib)
    lib.fail["nvmlDeviceRegisterEvents"] = NOT_SUPPORTED
    reader, first = read(lib)
    second = reader.read()
    assert (first.errors, second.errors) == (clean[0] + 2, clean[1])
    assert all(g.health.xid_events is None and g.health.temperature_c == 63.0 for g in second.gpus)


# --- the fake NVML answers as pynvml does ------------------------------------------------------

FAKE_CALLS = [("nvmlDeviceGetTemperatureV", (0,)), ("nvmlDeviceGetTemperature", (0,)),
              ("nvmlDeviceGetFieldValues", ([pynvml.NVML_FI_DEV_MEMORY_TEMP],)), ("nvmlDeviceGetFanSpeed", ()),
              ("nvmlDeviceGetTotalEccErrors", (1, 0)), ("nvmlDeviceGetRetiredPagesPendingStatus", ()),
              ("nvmlDeviceGetRemappedRows", ()), ("nvmlDeviceGetPcieReplayCounter", ()),
              ("nvmlDeviceGetCurrentClocksEventReasons", ()), ("nvmlDeviceGetCurrentClocksThrottleReasons", ()),
              ("nvmlDeviceGetViolationStatus", (1,))]


@pytest.mark.parametrize("call,args", FAKE_CALLS, ids=[c for c, _ in FAKE_CALLS])
def test_the_fake_answers_each_health_call_shaped_like_pynvml(lib, call, args):
    fake = StaticNode(gpus=[gpu(u) for u in UUIDS]).fake_nvml()
    real_fn, fake_fn = getattr(pynvml, call), getattr(fake, call)
    assert list(inspect.signature(fake_fn).parameters) == list(inspect.signature(real_fn).parameters)
    real, mine = real_fn(pynvml.nvmlDeviceGetHandleByIndex(0), *args), fake_fn(fake.nvmlDeviceGetHandleByIndex(0), *args)
    assert type(mine) is type(real) or (isinstance(real, ctypes.Array) and isinstance(mine, ctypes.Array)
                                        and mine._type_ is real._type_)
    lib.fail[call] = NOT_SUPPORTED
    fake.fail(call, NOT_SUPPORTED, gpu=0)
    for fn, h in ((real_fn, pynvml.nvmlDeviceGetHandleByIndex(0)), (fake_fn, fake.nvmlDeviceGetHandleByIndex(0))):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            fn(h, *args)


def test_the_fake_event_calls_are_shaped_like_pynvmls(lib):
    fake = StaticNode(gpus=[gpu(u) for u in UUIDS]).fake_nvml()
    for call in ("nvmlEventSetCreate", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2", "nvmlEventSetFree"):
        assert list(inspect.signature(getattr(fake, call)).parameters) == \
            list(inspect.signature(getattr(pynvml, call)).parameters), call
    assert [f.name for f in EventData.__dataclass_fields__.values()] == [n for n, _ in pynvml.c_nvmlEventData_t._fields_]
    es = fake.nvmlEventSetCreate()
    fake.nvmlDeviceRegisterEvents(fake.nvmlDeviceGetHandleByIndex(1), pynvml.nvmlEventTypeXidCriticalError, es)
    fake.queue_xid(0, 13)             # GPU 0 is not registered: not delivered
    fake.queue_xid(1, 79)
    data = fake.nvmlEventSetWait_v2(es, 0)
    assert (data.device, data.eventType, data.eventData) == (fake.nvmlDeviceGetHandleByIndex(1), 8, 79)
    for wait, event_set in ((fake.nvmlEventSetWait_v2, es), (pynvml.nvmlEventSetWait_v2, pynvml.nvmlEventSetCreate())):
        with pytest.raises(pynvml.NVMLError_Timeout):          # empty: TIMEOUT, as NVML
            wait(event_set, 0)


def test_the_fake_answers_a_lost_gpu_and_a_missing_memory_sensor_as_nvml():
    class Node(StaticNode):
        def health_now(self, index):
            return HealthNow(lost=True) if index == 1 else HealthNow(memory_temperature_c=None)
    fake = Node(gpus=[gpu(u) for u in UUIDS]).fake_nvml()
    h0, h1 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(1)
    assert fake.nvmlDeviceGetFieldValues(h0, [pynvml.NVML_FI_DEV_MEMORY_TEMP])[0].nvmlReturn == NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        fake.nvmlDeviceGetUUID(h1)
    snap = NvmlReader(fake, initialised=True).read()
    assert [g.lost for g in snap.gpus] == [False]       # never seen before it was lost: no UUID to report


# --- bounded under an Xid storm -----------------------------------------------------------------

def test_the_xid_tally_keeps_a_bounded_number_of_codes():
    t = XidTally()
    for code in range(1, 1001):
        t.add(code)
    # the first 32 codes, every critical one (they have their own alerts), the rest as other
    assert set(t.totals) == set(range(1, 33)) | set(CRITICAL_XIDS) | {XID_OTHER}
    assert t.totals[XID_OTHER] == 1000 - 32 - len(CRITICAL_XIDS) and sum(t.totals.values()) == 1000
    assert t.take() == (1000, 1000, 120) and t.take() == (0, None, None)


def test_the_critical_class_is_served_from_zero_and_the_alert_selects_exactly_it(tmp_path):
    import re
    from pathlib import Path
    import yaml
    from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats
    from slicemeter.testkit.static_node import builder
    rules = yaml.safe_load((Path(__file__).parent.parent / "prometheus/rules/slicemeter-health.yml").read_text())
    expr = next(r["expr"] for g in rules["groups"] for r in g["rules"] if r.get("alert") == "SlicemeterGpuCriticalXid")
    assert set(map(int, re.search(r'xid=~"([0-9|]+)"', expr).group(1).split("|"))) == set(CRITICAL_XIDS)
    node = StaticNode(gpus=[gpu(UUIDS[0])])
    b = builder(node, tmp_path / "hami", [])
    b.nvml.nvml.queue_xid(0, 13)
    stats = ExporterStats(tenant="acme")
    stats.record(b.build(node.ts_ms))
    served = {re.search(r'xid="(\w+)"', line).group(1): line.rsplit(" ", 1)[1]
              for line in ExporterCollector(stats).exposition().decode().splitlines()
              if line.startswith("slicemeter_gpu_xid_errors_total{")}
    assert served == {**{str(c): "0" for c in CRITICAL_XIDS}, "13": "1"}


STORM = r"""
import json, sys, time, tracemalloc
from pathlib import Path
from slicemeter.testkit.static_node import StaticNode, gpu, builder
node = StaticNode(gpus=[gpu("GPU-a"), gpu("GPU-b")])
b = builder(node, Path(sys.argv[1]) / "hami", [])
fake = b.nvml.nvml
calm = []
for _ in range(3):
    t0 = time.perf_counter(); b.build(node.ts_ms); calm.append(time.perf_counter() - t0)
for k in range(10_000):                       # one Tick interval's storm, distinct codes on both GPUs
    fake.queue_xid(k % 2, 1 + k % 5000)
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
storm, events = [], []
while fake._xid_queue or not storm:
    t0 = time.perf_counter(); r = b.build(node.ts_ms); storm.append(time.perf_counter() - t0)
    events.append(sum(g.xid_events for g in r.tick.gpus))
peak = tracemalloc.get_traced_memory()[1] - base
codes = max(len(h.xid_totals) for h in r.gpu_health.values())
print(json.dumps({"calm": min(calm), "storm": max(storm), "events": events, "peak": peak, "codes": codes,
                  "total": sum(sum(h.xid_totals.values()) for h in r.gpu_health.values())}))
"""


def test_an_xid_storm_leaves_memory_bounded_and_the_tick_on_time(tmp_path):
    out = subprocess.run([sys.executable, "-c", STORM, str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout.splitlines()[-1])
    interval_s = 10.0                                          # the exporter's default Tick interval
    assert m["events"][0] == MAX_XID_WAITS_PER_TICK and sum(m["events"]) == 10_000 == m["total"]
    assert m["storm"] < 0.1 * interval_s                        # each storm Tick well inside its interval
    assert m["codes"] <= 32 + len(CRITICAL_XIDS) + 1            # per GPU, whatever the number of codes
    assert m["peak"] < 512 * 1024, m                            # not growing with the events: no list of them


# --- scenario faults: the live fake and the simulated history agree ----------------------------

FAULTY = """
tenants:
  - {name: acme, display_name: ACME, kamaji: {namespace: t, name: acme}, api_server: "https://acme.example:6443"}
nodes:
  - name: n1
    tenant: acme
    gpus: [{model: "NVIDIA A100-SXM4-80GB", count: 4}]
    faults:
      - {kind: xid, gpu: 0, xid: 79, at: "2026-11-12T14:00", minutes: 60}
      - {kind: ecc, gpu: 1, at: "2026-11-12T14:00", corrected: 5, uncorrected: 2}
      - {kind: thermal-throttle, gpu: 2, at: "2026-11-12T14:00", minutes: 30}
      - {kind: off-bus, gpu: 3, at: "2026-11-12T14:05", minutes: 30}
    pods:
      - {name: train, namespace: ml, containers: [{name: c, resources: {nvidia.com/gpu: 1}, workload: steady-training}]}
"""
T0 = 1_794_492_000_000          # 2026-11-12T14:00Z


def test_faults_reach_the_tick_live_and_in_the_history_alike(tmp_path):
    from slicemeter.exporter.assemble.tick_builder import TickBuilder
    from slicemeter.exporter.sources.pods import PodCache
    from slicemeter.simulator.node import SimulatedNode
    from slicemeter.simulator.scenario import parse_scenario
    from slicemeter.simulator.timetravel import generate

    sc = parse_scenario(FAULTY)
    sim = SimulatedNode(sc, "n1", tmp_path / "hami")
    sim.nvml.nvmlInit()
    cache = PodCache(sim.pods)
    cache.refresh()
    b = TickBuilder("n1", sim.cluster, NvmlReader(sim.nvml, initialised=True), str(tmp_path / "hami"), cache,
                    proc_root=None)
    live = {}
    for t in range(T0 - 10_000, T0 + 410_000, 10_000):     # Tick by Tick, as the exporter reads
        sim.advance(t)
        live[t] = {g.gpu_index: g for g in b.build(t).tick.gpus}
    history = {}
    for _, gpus, _ in generate(sc, T0 - 10_000, T0 + 410_000):
        for row in gpus.to_pylist():
            history[(row["ts_ms"], row["gpu_index"])] = row
    cols = ("xid_events", "xid_last_code", "xid_critical_code", "ecc_uncorrected_volatile", "remapped_rows_pending",
            "clock_event_reasons", "thermal_violation_seconds_total", "temperature_celsius", "gpu_lost")
    for t, gpus in live.items():
        for i, g in gpus.items():
            if t == T0 - 10_000 and i == 0:
                continue            # the exporter's first read has no Xid events before it to drain
            assert {c: getattr(g, c) for c in cols} == {c: history[(t, i)][c] for c in cols}, (t, i)
    at = live[T0 + 180_000]
    assert (at[0].xid_events, at[0].xid_critical_code) == (1, 79)
    assert at[1].ecc_uncorrected_volatile == 2 and at[1].remapped_rows_pending
    assert at[2].clock_event_reasons & 0x60 and at[2].thermal_violation_seconds_total == 180.0
    assert not at[3].gpu_lost and live[T0 + 400_000][3].gpu_lost and live[T0 + 400_000][3].memory_used_bytes is None


@pytest.mark.parametrize("fault,key,words", [
    ("{kind: xid, gpu: 0, at: '2026-11-12T14:00'}", "xid", "names its code"),
    ("{kind: ecc, gpu: 0, at: '2026-11-12T14:00'}", "uncorrected", "needs corrected or uncorrected"),
    ("{kind: off-bus, gpu: 9, at: '2026-11-12T14:00'}", "gpu", "GPU index 9 is not on the node"),
    ("{kind: melt, gpu: 0, at: '2026-11-12T14:00'}", "kind", "unknown fault kind"),
    ("{kind: off-bus, gpu: 0, at: 'soon'}", "at", "is not a date-time"),
])
def test_a_bad_fault_names_its_key(fault, key, words):
    from slicemeter.simulator.scenario import ScenarioError, parse_scenario
    text = FAULTY.split("    faults:")[0] + f"    faults:\n      - {fault}\n"
    with pytest.raises(ScenarioError) as e:
        parse_scenario(text)
    assert f"faults[0].{key}" in str(e.value) or (key == "gpu" and "faults" in str(e.value)), str(e.value)
    assert words in str(e.value)


def lacking_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "slicemeter.exporter.sources.nvml" and "boards lack" in r.getMessage()]


def test_the_calls_a_board_lacks_are_one_line_at_start_up(lib, caplog):
    """An H100 without a fan or a memory sensor: one line for the node, naming each call once
    per kind of board, and nothing on later reads."""
    caplog.set_level("INFO", logger="slicemeter.exporter.sources.nvml")
    lib.fail["nvmlDeviceGetFanSpeed"] = NOT_SUPPORTED
    lib.memory_sensor = False
    reader, _ = read(lib)
    read(lib, reader)
    read(lib, reader)
    (line,) = lacking_lines(caplog)
    node, part = line.split(": ", 1)[1].split("; ")       # the stub has no nvmlSystemGetDriverVersion
    assert node == "node: nvmlSystemGetDriverVersion" and part.startswith("GPU 0,1: "), line
    for call in ("nvmlDeviceGetFanSpeed", "nvmlDeviceGetFieldValues/memory_temperature",
                 "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo"):   # the last two: absent from the stub's library
        assert part.count(call) == 1, line
    assert "nvmlDeviceGetTemperature" not in part   # its NVML 13 entry point answered


def test_a_call_first_found_missing_later_is_one_more_line(lib, caplog):
    caplog.set_level("INFO", logger="slicemeter.exporter.sources.nvml")
    reader, _ = read(lib)
    lib.fail["nvmlDeviceGetPcieReplayCounter"] = NOT_SUPPORTED    # (a new reader would ask it anew)
    reader.unsupported.discard((0, "nvmlDeviceGetPcieReplayCounter"))
    reader.unsupported.discard((1, "nvmlDeviceGetPcieReplayCounter"))
    read(lib, reader)
    first, second = lacking_lines(caplog)
    assert second.endswith(": GPU 0,1: nvmlDeviceGetPcieReplayCounter"), second
