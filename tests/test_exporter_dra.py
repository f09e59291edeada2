"""DRA sources: claims, slices and pods as the API server returns them -> each consuming
container's allocation share of its device, computed by hand here from tests/data/dra/."""
from __future__ import annotations

import copy
import json
import re
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from slicemeter.exporter.sources.dra import (
    Basis, DraInputError, SplitPolicy, allocation_slices, parse_claims, parse_pods, parse_quantity,
    parse_resource_slices,
)

DATA = Path(__file__).parent / "data" / "dra"
Gi = 1 << 30


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def fleet(claims=None, slices=None, pods=None):
    """Parsed fixtures (or the given JSON in their place), with no parse errors."""
    parsed = [parse_claims(claims or load("resourceclaims.json")),
              parse_resource_slices(slices or load("resourceslices.json")),
              parse_pods(pods or load("pods.json"))]
    assert [p.errors for p in parsed] == [(), (), ()]
    return [p.items for p in parsed]


def shares(claims=None, slices=None, pods=None, policy=SplitPolicy.EQUAL) -> dict:
    c, s, p = fleet(claims, slices, pods)
    out = {}
    for d in allocation_slices(c, s, p, policy):
        key = (d.pod, d.container, d.claim, d.request)
        assert key not in out, key
        out[key] = d
    return out


@pytest.mark.parametrize("text, value", [
    ("20Gi", Decimal(20 * Gi)),
    ("80Gi", Decimal(80 * Gi)),
    ("1.5Gi", Decimal(1536 * (1 << 20))),
    ("9856Mi", Decimal(9856 * (1 << 20))),
    ("1Ki", Decimal(1024)),
    ("30", Decimal(30)),
    ("500m", Decimal("0.5")),
    ("1e3", Decimal(1000)),
    ("1E3", Decimal(1000)),
    ("1e+3", Decimal(1000)),
    ("25e-1", Decimal("2.5")),
    ("1k", Decimal(1000)),
    ("2M", Decimal(2_000_000)),
    ("1E", Decimal(10) ** 18),           # E alone is exa, not an exponent
    ("100n", Decimal("0.0000001")),
    ("0.1n", Decimal("0.000000001")),    # rounded up to 1n, the smallest a Quantity holds
    ("1e-200", Decimal("0.000000001")),
    (".5", Decimal("0.5")),
    ("1.", Decimal(1)),
    ("+7", Decimal(7)),
    ("-1", Decimal(-1)),
    ("0", Decimal(0)),
    (30, Decimal(30)),                   # an unquoted JSON number is read as its text
    (1.5, Decimal("1.5")),
])
def test_quantities_parse_exactly_as_kubernetes_reads_them(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Ki", "1K", "1ki", "20GB", "1Gix", "1e", "1e1.5", " 1", "1 ", "1.2.3",
                                  "--1", "0x10", "nan", "1e999", "9223372036854775808", True, None, [1], {"v": 1}])
def test_garbage_quantities_are_refused_naming_the_field(text):
    with pytest.raises(DraInputError, match=r"^spec\.devices\[0\]\.capacity\.memory\.value: "):
        parse_quantity(text, "spec.devices[0].capacity.memory.value")


def test_every_containers_share_of_its_device():
    got = shares()
    expected = {
        # HAMi: memory 20Gi of 80Gi = 1/4, cores 30 of 100 = 3/10; the dominant is 3/10. The
        # template's claim is found through status.resourceClaimStatuses; log-shipper names
        # no claim and has no slice.
        ("train", "trainer", "train-gpu-x7k2p", "gpu"): (Basis.CAPACITY, Fraction(3, 10), Fraction(1), Fraction(3, 10)),
        # two requests of one claim: "first" 20 cores / 4Gi -> max(1/5, 1/20) = 1/5, used by
        # `a` (names that request) and `b` (names the claim without one): 1/10 each; "second"
        # 10 cores / 16Gi -> max(1/10, 1/5) = 1/5, `b` alone.
        ("pair", "a", "pair-gpus", "first"): (Basis.CAPACITY, Fraction(1, 5), Fraction(1, 2), Fraction(1, 10)),
        ("pair", "b", "pair-gpus", "first"): (Basis.CAPACITY, Fraction(1, 5), Fraction(1, 2), Fraction(1, 10)),
        ("pair", "b", "pair-gpus", "second"): (Basis.CAPACITY, Fraction(1, 5), Fraction(1), Fraction(1, 5)),
        # NVIDIA ConsumableShares: memory 10Gi of 80Gi
        ("notebook", "jupyter", "notebook-share", "gpu"): (Basis.CAPACITY, Fraction(1, 8), Fraction(1), Fraction(1, 8)),
        # a whole time-sliced GPU reserved for two pods: half each
        ("render-a", "render", "render-timesliced", "gpu"): (Basis.WHOLE, Fraction(1), Fraction(1, 2), Fraction(1, 2)),
        ("render-b", "render", "render-timesliced", "gpu"): (Basis.WHOLE, Fraction(1), Fraction(1, 2), Fraction(1, 2)),
        # nvidia.com/gpu served by DRA: the container named in the extended-resource mapping
        ("infer", "app", "infer-extended-resources-r9x4k", "container-0-request-0"):
            (Basis.WHOLE, Fraction(1), Fraction(1), Fraction(1)),
        # adminAccess: monitoring, nothing allocated
        ("gpu-monitor", "exporter", "gpu-monitor", "all-gpus"): (Basis.ADMIN, Fraction(0), Fraction(1), Fraction(0)),
        # Ascend: memory 16Gi of 64Gi = 1/4, cores 40 of 100 = 2/5
        ("npu-job", "app", "npu-share", "npu"): (Basis.CAPACITY, Fraction(2, 5), Fraction(1), Fraction(2, 5)),
        # MIG 1g.10gb by its counters: multiprocessors 14/98 = 1/7, copy engines 1/7, memory
        # 9856Mi/80Gi = 77/640, memory slices 1/8; the dominant is 1/7
        ("mig-job", "app", "mig-small", "mig"): (Basis.COUNTERS, Fraction(1, 7), Fraction(1), Fraction(1, 7)),
    }
    assert {k: (d.basis, d.device_share, d.parts, d.share) for k, d in got.items()} == expected
    assert [k for k, d in got.items() if not d.billed] == [("gpu-monitor", "exporter", "gpu-monitor", "all-gpus")]


def test_slices_name_the_node_device_and_model():
    got = shares()
    train = got[("train", "trainer", "train-gpu-x7k2p", "gpu")]
    assert (train.node, train.namespace, train.driver, train.pool, train.device) == \
        ("gpu-node-1", "team-a", "hami-core-gpu.project-hami.io", "gpu-node-1", "hami-gpu-0")
    assert (train.claim_uid, train.share_id, train.device_uuid, train.model) == (
        "7d1c2b3a-0e9f-4a8b-8c7d-6e5f4a3b2c01", "c2a9e7f1-5d3b-4a6c-9e8f-1a2b3c4d5e01",
        "GPU-3a1f6c2e-8a41-4d4b-9e38-6f0f3c1b2a10", "NVIDIA A100-SXM4-80GB")
    npu = got[("npu-job", "app", "npu-share", "npu")]
    assert (npu.driver, npu.model, npu.device_uuid) == ("ascend.project-hami.io", "910B3", "npu-node-1-0")


def test_a_claim_used_by_several_pods_splits_by_the_declared_policy():
    pods = load("pods.json")
    render_b = next(p for p in pods["items"] if p["metadata"]["name"] == "render-b")
    render_b["spec"]["containers"].append({"name": "encode", "resources": {"claims": [{"name": "shared-gpu"}]}})
    key = lambda pod, ctr: (pod, ctr, "render-timesliced", "gpu")
    equal = shares(pods=pods)
    assert [equal[key(*k)].share for k in (("render-a", "render"), ("render-b", "render"), ("render-b", "encode"))] \
        == [Fraction(1, 3)] * 3
    per_pod = shares(pods=pods, policy=SplitPolicy.PER_POD)
    assert [per_pod[key(*k)].share for k in (("render-a", "render"), ("render-b", "render"), ("render-b", "encode"))] \
        == [Fraction(1, 2), Fraction(1, 4), Fraction(1, 4)]


def test_a_reserved_pod_not_in_the_pod_list_keeps_its_part():
    """The exporter may see only some consumers; the ones it sees are not billed the others' part."""
    pods = load("pods.json")
    pods["items"] = [p for p in pods["items"] if p["metadata"]["name"] != "render-b"]
    got = shares(pods=pods)
    assert got[("render-a", "render", "render-timesliced", "gpu")].share == Fraction(1, 2)
    assert not [k for k in got if k[0] == "render-b"]


def test_a_pod_the_claim_is_not_reserved_for_gets_no_slice():
    claims = load("resourceclaims.json")
    timesliced = next(c for c in claims["items"] if c["metadata"]["name"] == "render-timesliced")
    timesliced["status"]["reservedFor"] = timesliced["status"]["reservedFor"][:1]
    got = shares(claims=claims)
    assert got[("render-a", "render", "render-timesliced", "gpu")].share == Fraction(1)
    assert ("render-b", "render", "render-timesliced", "gpu") not in got


def hami_claim(consumed: dict | None) -> dict:
    claims = load("resourceclaims.json")
    claim = copy.deepcopy(next(c for c in claims["items"] if c["metadata"]["name"] == "train-gpu-x7k2p"))
    result = claim["status"]["allocation"]["devices"]["results"][0]
    result.pop("consumedCapacity")
    if consumed is not None:
        result["consumedCapacity"] = consumed
    return claim


@pytest.mark.parametrize("consumed, share", [
    ({"memory": "20Gi"}, Fraction(3, 5)),                 # no cores: SM limit 60 -> max(1/4, 3/5)
    ({"memory": "20Gi", "cores": "30500m"}, Fraction(3, 5)),  # not an integer: the plugin's AsInt64 fails, 60
    ({"memory": "4Gi", "cores": "0"}, Fraction(1, 20)),   # cores 0 is what was consumed
    (None, Fraction(1)),                                  # nothing consumed: whole memory, 60 cores
])
def test_hami_claims_without_cores_bill_the_plugins_defaults(consumed, share):
    got = shares(claims=hami_claim(consumed))
    (only,) = got.values()
    assert only.share == share
    assert only.basis is (Basis.CAPACITY if consumed and "cores" in consumed and consumed["cores"] == "0" else Basis.HAMI_DEFAULT)


def test_a_subrequest_result_belongs_to_the_container_naming_its_request():
    claims = load("resourceclaims.json")
    pair = next(c for c in claims["items"] if c["metadata"]["name"] == "pair-gpus")
    pair["status"]["allocation"]["devices"]["results"][0]["request"] = "first/small"
    got = shares(claims=claims)
    assert got[("pair", "a", "pair-gpus", "first/small")].share == Fraction(1, 10)


def test_a_device_not_published_has_an_unknown_share():
    slices = load("resourceslices.json")
    slices["items"] = [s for s in slices["items"] if s["spec"]["driver"] != "ascend.project-hami.io"]
    d = shares(slices=slices)[("npu-job", "app", "npu-share", "npu")]
    assert (d.basis, d.device_share, d.share, d.model) == (Basis.UNKNOWN, None, None, None)


def test_a_bad_claim_costs_that_claim_only_and_is_named():
    claims = load("resourceclaims.json")
    claims["items"][2]["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"] = "10GB"
    claims["items"][3]["metadata"]["uid"] = "../../etc"
    parsed = parse_claims(claims)
    assert [c.name for c in parsed.items] == [c["metadata"]["name"] for i, c in enumerate(claims["items"]) if i not in (2, 3)]
    assert parsed.errors == (
        "ResourceClaimList.items[2] team-b/notebook-share: status.allocation.devices.results[0]."
        "consumedCapacity.memory: '10GB' is not a Kubernetes quantity",
        "ResourceClaimList.items[3] team-b/render-timesliced: metadata.uid: '../../etc' is not a valid name",
    )


def test_a_bad_device_costs_that_device_only():
    slices = load("resourceslices.json")
    nvidia = slices["items"][1]["spec"]["devices"]
    nvidia[0]["capacity"]["memory"]["value"] = "-80Gi"
    nvidia[1]["attributes"]["uuid"] = {"string": "GPU-x", "int": 1}
    del nvidia[2]["name"]
    slices["items"].insert(0, "gpu-node-9")
    parsed = parse_resource_slices(slices)
    assert [d.name for d in parsed.items[1].devices] == []
    assert parsed.errors == (
        "ResourceSliceList.items[0]: str where an object belongs",
        "ResourceSliceList.items[2] gpu-node-2-gpu.nvidia.com-4mzqd: spec.devices[0].capacity.memory.value: '-80Gi' is negative",
        "ResourceSliceList.items[2] gpu-node-2-gpu.nvidia.com-4mzqd: spec.devices[1].attributes.uuid: a device attribute holds exactly one value",
        "ResourceSliceList.items[2] gpu-node-2-gpu.nvidia.com-4mzqd: spec.devices[2].name: missing",
    )
    assert [s.name for s in parsed.items] == [s["metadata"]["name"] for s in slices["items"][1:]]
    assert [[d.name for d in s.devices] for s in parsed.items] == [["hami-gpu-0"], [], [], ["gpu-2-mig-1g10gb-19-0"], ["npu-0-0"]]


@pytest.mark.parametrize("mutate, message", [
    (lambda p: p["spec"]["containers"][0]["resources"]["claims"][0].update(name="nope"),
     r"^PodList\.items\[0\] team-a/train: spec\.containers\[0\]\.resources\.claims\[0\]\.name: 'nope' is not in spec\.resourceClaims"),
    (lambda p: p["spec"]["resourceClaims"][0].update(resourceClaimName="x"),
     r"spec\.resourceClaims\[0\]: exactly one of resourceClaimName and resourceClaimTemplateName"),
    (lambda p: p["spec"].update(containers={"name": "x"}),
     r"spec\.containers: dict where list belongs"),
    (lambda p: p["metadata"].pop("uid"), r"metadata\.uid: missing"),
])
def test_a_malformed_pod_is_refused_naming_the_field(mutate, message):
    pods = load("pods.json")
    mutate(pods["items"][0])
    parsed = parse_pods(pods)
    assert len(parsed.items) == len(pods["items"]) - 1
    (error,) = parsed.errors
    assert error.startswith("PodList.items[0] team-a/train: ")
    assert re.search(message, error), error


@pytest.mark.parametrize("obj, message", [
    ({"kind": "Status", "status": "Failure", "message": "forbidden"}, "expected a ResourceClaim or ResourceClaimList, got kind 'Status'"),
    ({"kind": "ResourceClaimList", "items": None}, "ResourceClaimList.items: missing or not a list"),
    ([], "a ResourceClaim or ResourceClaimList is a JSON object, not list"),
])
def test_what_is_no_claim_list_at_all_is_refused(obj, message):
    with pytest.raises(DraInputError) as e:
        parse_claims(obj)
    assert str(e.value) == message


def test_an_unallocated_claim_has_no_slices():
    claims = load("resourceclaims.json")
    for c in claims["items"]:
        c["status"] = {}
    c, s, p = fleet(claims=claims)
    assert all(not claim.allocated for claim in c) and len(c) == len(claims["items"])
    assert allocation_slices(c, s, p) == []


def test_each_containers_share_by_memory_and_by_cores():
    """Per capacity, after the split; a capacity the device does not publish, and a device
    without capacities, take the one share; the dominant of the two is `share`."""
    got = {k: (d.mem_share, d.cores_share) for k, d in shares().items()}
    assert got == {
        # HAMi: memory 20Gi/80Gi = 1/4, cores 30/100 = 3/10
        ("train", "trainer", "train-gpu-x7k2p", "gpu"): (Fraction(1, 4), Fraction(3, 10)),
        # "first": memory 4Gi/80Gi = 1/20, cores 20/100 = 1/5, halved between a and b
        ("pair", "a", "pair-gpus", "first"): (Fraction(1, 40), Fraction(1, 10)),
        ("pair", "b", "pair-gpus", "first"): (Fraction(1, 40), Fraction(1, 10)),
        # "second": memory 16Gi/80Gi = 1/5, cores 10/100 = 1/10
        ("pair", "b", "pair-gpus", "second"): (Fraction(1, 5), Fraction(1, 10)),
        # NVIDIA's device publishes memory only: cores take the memory share, 10/80
        ("notebook", "jupyter", "notebook-share", "gpu"): (Fraction(1, 8), Fraction(1, 8)),
        ("render-a", "render", "render-timesliced", "gpu"): (Fraction(1, 2), Fraction(1, 2)),
        ("render-b", "render", "render-timesliced", "gpu"): (Fraction(1, 2), Fraction(1, 2)),
        ("infer", "app", "infer-extended-resources-r9x4k", "container-0-request-0"): (Fraction(1), Fraction(1)),
        ("gpu-monitor", "exporter", "gpu-monitor", "all-gpus"): (Fraction(0), Fraction(0)),
        # Ascend: 16Gi/64Gi, 40/100
        ("npu-job", "app", "npu-share", "npu"): (Fraction(1, 4), Fraction(2, 5)),
        # MIG by counters: the one share, 1/7
        ("mig-job", "app", "mig-small", "mig"): (Fraction(1, 7), Fraction(1, 7)),
    }
    assert all(d.share == max(d.mem_share, d.cores_share) for d in shares().values())


def test_a_device_not_published_has_no_share_by_any_capacity():
    slices = load("resourceslices.json")
    slices["items"] = [s for s in slices["items"] if s["spec"]["driver"] != "ascend.project-hami.io"]
    d = shares(slices=slices)[("npu-job", "app", "npu-share", "npu")]
    assert (d.mem_share, d.cores_share) == (None, None)
