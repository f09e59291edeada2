"""GPU slices granted through Kubernetes Dynamic Resource Allocation (`resource.k8s.io/v1`).

Pure functions, no I/O: ResourceClaim, ResourceSlice and Pod JSON (single objects or lists, as
the API server returns them) -> typed records, and those records -> one `DraSlice` per
(claim, allocation result, consuming container) with its allocation share of the device.

- `parse_quantity`: a Kubernetes quantity (`20Gi`, `500m`, `1e3`) as an exact Decimal.
- `parse_claims`, `parse_resource_slices`, `parse_pods`: records; a bad item is reported in
  `Parsed.errors` by name and costs only that item (a device, for slices).
- `allocation_slices`: who consumes what share of which device (docs/dra.md).
"""
from __future__ import annotations

import enum
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any, Generic, Iterable, TypeVar

from slicemeter.common import DNS_LABEL_RE
from slicemeter.exporter.sources.device_health import HEALTHY, UNHEALTHY, UNKNOWN

T = TypeVar("T")

# HAMi's DRA driver: when a result carries no integral `cores`, the plugin sets
# CUDA_DEVICE_SM_LIMIT to 60; without `memory`, the memory limit is the whole device.
HAMI_DRIVER = "hami-core-gpu.project-hami.io"
HAMI_DEFAULT_SM_LIMIT = 60

# Attributes that name a device's model, in order: NVIDIA's and HAMi's GPUs and MIG devices
# publish `productName`; HAMi's Ascend driver `productName` and `model` (the NPU's type).
MODEL_ATTRIBUTES = ("productName", "model")

# resource.Quantity keeps at most nano precision and int64 magnitude.
NANO = 10 ** 9
QUANTITY_MAX = (1 << 63) - 1
_QUANTITY_MAX_CHARS = 64
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*(?:[+-]?[0-9]+)?)\Z")
_BINARY_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]{1,18})\Z")

# Object names: a DNS-1123 subdomain (pods, claims, drivers); a claim's UID is the API
# server's lowercase UUID and will name a folder (HAMi's claims/<claimUID>/).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_POOL = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?(/[a-z0-9]([-a-z0-9.]*[a-z0-9])?)*\Z")
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
# A counter name ending in -<n> is one of a family (NVIDIA's memory-slice-0..7): a partition's
# share of the family is the count it consumes over the family's total.
_COUNTER_FAMILY = re.compile(r"-[0-9]+\Z")


class DraInputError(ValueError):
    """An object that is not what the API server returns; the message names the field."""


@dataclass(frozen=True, slots=True)
class Parsed(Generic[T]):
    items: tuple[T, ...]
    errors: tuple[str, ...]


# --- quantities -------------------------------------------------------------------------

def parse_quantity(value: Any, field: str = "quantity") -> Decimal:
    """A resource.Quantity as an exact Decimal: binary (Ki..Ei) and decimal (n..E) suffixes,
    `e`/`E` exponents, rounded up to 1n as the API server does; a JSON number is read as its
    text. Refused, naming `field`: anything else, and magnitudes over 2^63-1 (the API server
    caps those)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DraInputError(f"{field}: {value!r} is not a Kubernetes quantity")
    text = value if isinstance(value, str) else repr(value)
    m = _QUANTITY.match(text) if len(text) <= _QUANTITY_MAX_CHARS else None
    if m is None or not (m.group(2) or m.group(3)):
        raise DraInputError(f"{field}: {text!r} is not a Kubernetes quantity")
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    amount = Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
    if suffix in _BINARY_SUFFIX:
        amount *= 1 << _BINARY_SUFFIX[suffix]
    elif suffix in _DECIMAL_SUFFIX:
        amount *= Fraction(10) ** _DECIMAL_SUFFIX[suffix]
    elif (e := _EXPONENT.match(suffix)) is not None:
        # The mantissa has at most 64 digits: past +-100 a non-zero amount is too large or
        # rounds up to 1n, so the power of ten is clamped rather than computed.
        amount *= Fraction(10) ** max(-100, min(100, int(e.group(1))))
    else:
        raise DraInputError(f"{field}: {text!r} has no Kubernetes quantity suffix {suffix!r}")
    if amount > QUANTITY_MAX:
        raise DraInputError(f"{field}: {text!r} is larger than a Kubernetes quantity holds (2^63-1)")
    nanos = math.ceil(amount * NANO) * (-1 if sign == "-" else 1)
    if nanos % NANO == 0:
        return Decimal(nanos // NANO)
    with localcontext() as ctx:
        ctx.prec = 40
        return Decimal(nanos).scaleb(-9)


# --- records ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice. Attribute names are unqualified within the driver's
    own domain (`gpu.nvidia.com/productName` = `productName`)."""
    name: str
    attributes: dict[str, Any]
    capacity: dict[str, Decimal]
    allow_multiple_allocations: bool
    consumes_counters: dict[str, dict[str, Decimal]]   # counter set -> counter -> amount


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    node_name: str | None
    devices: tuple[Device, ...]
    shared_counters: dict[str, dict[str, Decimal]]     # counter set -> counter -> available


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """`status.allocation.devices.results[]`: what one request of the claim got."""
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool
    share_id: str | None
    consumed_capacity: dict[str, Decimal]


@dataclass(frozen=True, slots=True)
class ClaimConsumer:
    """`status.reservedFor[]`: a pod, or another object (a PodGroup) its pods share."""
    api_group: str
    resource: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    allocated: bool
    node_name: str | None
    results: tuple[AllocationResult, ...]
    reserved_for: tuple[ClaimConsumer, ...]
    # `status.devices[]` whose driver wrote a `Healthy` condition: (driver, pool, device,
    # health code of exporter/sources/device_health.py)
    device_health: tuple[tuple[str, str, str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerClaim:
    """`resources.claims[]`: a pod claim entry and, optionally, one request of it."""
    name: str
    request: str | None


@dataclass(frozen=True, slots=True)
class PodClaim:
    """`spec.resourceClaims[]`: exactly one of a claim's name or a template's."""
    name: str
    claim_name: str | None
    template_name: str | None


@dataclass(frozen=True, slots=True)
class ExtendedResourceRequest:
    container: str
    resource: str
    request: str


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node_name: str | None
    claims: tuple[PodClaim, ...]
    containers: dict[str, tuple[ContainerClaim, ...]]   # regular and init containers
    generated_claims: dict[str, str | None]             # status.resourceClaimStatuses
    extended_claim: str | None                          # status.extendedResourceClaimStatus
    extended_requests: tuple[ExtendedResourceRequest, ...]


# --- reading JSON -----------------------------------------------------------------------

def _get(obj: Any, key: str, where: str, kind: type | tuple = dict, required: bool = False) -> Any:
    """obj[key] of the JSON type `kind`; {} or [] or None when absent and not required."""
    if obj is not None and not isinstance(obj, dict):
        raise DraInputError(f"{where}: {type(obj).__name__} where an object belongs")
    value = obj.get(key) if obj else None
    if value is None:
        if required:
            raise DraInputError(f"{where}.{key}: missing")
        return kind() if kind in (dict, list) else None
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        wanted = "/".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
        raise DraInputError(f"{where}.{key}: {type(value).__name__} where {wanted} belongs")
    return value


def _name(obj: Any, key: str, where: str, pattern: re.Pattern, required: bool = True, limit: int = 253) -> str | None:
    value = _get(obj, key, where, str, required)
    if value is not None and (len(value) > limit or not pattern.match(value)):
        raise DraInputError(f"{where}.{key}: {value!r} is not a valid name")
    return value


def _items(obj: Any, kind: str) -> tuple[list, bool]:
    """The objects of a `<kind>` or a `<kind>List` response; refuses anything else (a Status)."""
    if not isinstance(obj, dict):
        raise DraInputError(f"a {kind} or {kind}List is a JSON object, not {type(obj).__name__}")
    got = obj.get("kind")
    if got == f"{kind}List" or (got is None and "items" in obj):
        items = obj.get("items")
        if not isinstance(items, list):
            raise DraInputError(f"{kind}List.items: missing or not a list")
        return items, True
    if got not in (None, kind):
        raise DraInputError(f"expected a {kind} or {kind}List, got kind {got!r}")
    return [obj], False


def _parse_all(obj: Any, kind: str, parse) -> Parsed:
    items, is_list = _items(obj, kind)
    good, errors = [], []
    for i, item in enumerate(items):
        where = f"{kind}List.items[{i}]" if is_list else kind
        try:
            parsed, item_errors = parse(item, where)
        except DraInputError as e:
            errors.append(f"{_label(item, where)}: {str(e).removeprefix(where + '.').removeprefix(where + ': ')}")
            continue
        good.append(parsed)
        errors += [f"{_label(item, where)}: {e}" for e in item_errors]
    return Parsed(tuple(good), tuple(errors))


def _label(item: Any, where: str) -> str:
    meta = item.get("metadata") if isinstance(item, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    if isinstance(name, str):
        return f"{where} {ns + '/' if isinstance(ns, str) else ''}{name}"[:300]
    return where


def _quantities(obj: Any, where: str) -> dict[str, Decimal]:
    if not isinstance(obj, dict):
        raise DraInputError(f"{where}: {type(obj).__name__} where a map of quantities belongs")
    return {str(k): _nonnegative(v, f"{where}.{k}") for k, v in obj.items()}


def _nonnegative(value: Any, where: str) -> Decimal:
    q = parse_quantity(value, where)
    if q < 0:
        raise DraInputError(f"{where}: {value!r} is negative")
    return q


def _counters(obj: Any, where: str) -> dict[str, Decimal]:
    if not isinstance(obj, dict):
        raise DraInputError(f"{where}: {type(obj).__name__} where a map of counters belongs")
    return {str(k): _nonnegative(_get(v, "value", f"{where}.{k}", (str, int, float), True), f"{where}.{k}.value")
            for k, v in obj.items()}


def _attribute(value: Any, where: str) -> Any:
    """The one value a DeviceAttribute holds (int, bool, string, version or a list of them)."""
    if not isinstance(value, dict) or len(value) != 1:
        raise DraInputError(f"{where}: a device attribute holds exactly one value")
    key, v = next(iter(value.items()))
    if key not in ("int", "bool", "string", "version", "ints", "bools", "strings", "versions"):
        raise DraInputError(f"{where}: unknown attribute value {key!r}")
    return tuple(v) if isinstance(v, list) else v


def _unqualified(name: str, driver: str) -> str:
    return name[len(driver) + 1:] if name.startswith(driver + "/") else name


def _device(obj: Any, driver: str, where: str) -> Device:
    name = _name(obj, "name", where, DNS_LABEL_RE, limit=63)
    attrs = {_unqualified(str(k), driver): _attribute(v, f"{where}.attributes.{k}")
             for k, v in _get(obj, "attributes", where).items()}
    capacity = {_unqualified(str(k), driver): _nonnegative(_get(v, "value", f"{where}.capacity.{k}", (str, int, float), True),
                                                           f"{where}.capacity.{k}.value")
                for k, v in _get(obj, "capacity", where).items()}
    consumes = {}
    for i, c in enumerate(_get(obj, "consumesCounters", where, list)):
        here = f"{where}.consumesCounters[{i}]"
        consumes[_get(c, "counterSet", here, str, True)] = _counters(_get(c, "counters", here), f"{here}.counters")
    multiple = _get(obj, "allowMultipleAllocations", where, bool)
    return Device(name, attrs, capacity, bool(multiple), consumes)


def _resource_slice(obj: Any, where: str) -> tuple[ResourceSlice, list[str]]:
    meta, spec = _get(obj, "metadata", where), _get(obj, "spec", where, required=True)
    driver = _name(spec, "driver", f"{where}.spec", _DNS_SUBDOMAIN, limit=63)
    pool = _get(spec, "pool", f"{where}.spec", required=True)
    pool_name = _name(pool, "name", f"{where}.spec.pool", _POOL)
    devices, errors = [], []
    for i, d in enumerate(_get(spec, "devices", f"{where}.spec", list)):
        try:
            devices.append(_device(d, driver, f"spec.devices[{i}]"))
        except DraInputError as e:
            errors.append(str(e))
    shared = {}
    for i, cs in enumerate(_get(spec, "sharedCounters", f"{where}.spec", list)):
        here = f"spec.sharedCounters[{i}]"
        try:
            shared[_get(cs, "name", here, str, True)] = _counters(_get(cs, "counters", here), f"{here}.counters")
        except DraInputError as e:
            errors.append(str(e))
    node = _name(spec, "nodeName", f"{where}.spec", _DNS_SUBDOMAIN, required=False)
    return ResourceSlice(_get(meta, "name", f"{where}.metadata", str) or "", driver, pool_name, node,
                         tuple(devices), shared), errors


def _node_of(selector: Any) -> str | None:
    """The node of a node-local allocation: one term whose only field match is
    `metadata.name In [node]`, as the scheduler writes it; None otherwise."""
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if not isinstance(terms, list) or len(terms) != 1 or not isinstance(terms[0], dict):
        return None
    fields = terms[0].get("matchFields") or []
    if len(fields) == 1 and isinstance(fields[0], dict) and fields[0].get("key") == "metadata.name" \
            and fields[0].get("operator") == "In" and isinstance(fields[0].get("values"), list) \
            and len(fields[0]["values"]) == 1 and isinstance(fields[0]["values"][0], str):
        return fields[0]["values"][0]
    return None


def _result(obj: Any, where: str) -> AllocationResult:
    request = _get(obj, "request", where, str, True)
    driver = _name(obj, "driver", where, _DNS_SUBDOMAIN, limit=63)
    pool = _name(obj, "pool", where, _POOL)
    device = _name(obj, "device", where, DNS_LABEL_RE, limit=63)
    admin = bool(_get(obj, "adminAccess", where, bool))
    share_id = _get(obj, "shareID", where, str)
    consumed = {_unqualified(str(k), driver): v for k, v in
                _quantities(_get(obj, "consumedCapacity", where), f"{where}.consumedCapacity").items()}
    return AllocationResult(request, driver, pool, device, admin, share_id, consumed)


def _claim(obj: Any, where: str) -> tuple[ResourceClaim, list[str]]:
    meta = _get(obj, "metadata", where, required=True)
    namespace = _name(meta, "namespace", f"{where}.metadata", DNS_LABEL_RE, limit=63)
    name = _name(meta, "name", f"{where}.metadata", _DNS_SUBDOMAIN)
    uid = _name(meta, "uid", f"{where}.metadata", _UID)
    status = _get(obj, "status", where)
    allocation = _get(status, "allocation", f"{where}.status")
    devices = _get(allocation, "devices", f"{where}.status.allocation")
    here = f"{where}.status.allocation.devices.results"
    results = tuple(_result(r, f"{here}[{i}]") for i, r in enumerate(_get(devices, "results", f"{where}.status.allocation.devices", list)))
    reserved = []
    for i, r in enumerate(_get(status, "reservedFor", f"{where}.status", list)):
        rw = f"{where}.status.reservedFor[{i}]"
        reserved.append(ClaimConsumer(_get(r, "apiGroup", rw, str) or "", _get(r, "resource", rw, str, True), _get(r, "name", rw, str, True), _get(r, "uid", rw, str, True)))
    health, errors = _device_conditions(_get(status, "devices", f"{where}.status", list), f"{where}.status.devices")
    return ResourceClaim(namespace, name, uid, bool(allocation), _node_of(allocation.get("nodeSelector")),
                         results, tuple(reserved), health), errors


# A driver's `Healthy` condition on an allocated device: Kubernetes names no health condition
# type (AllocatedDeviceStatus.Conditions; `Ready` is about configuration), so only this one is read.
HEALTH_CONDITION = "Healthy"
_CONDITION_HEALTH = {"True": HEALTHY, "False": UNHEALTHY, "Unknown": UNKNOWN}


def _device_conditions(devices: list, where: str) -> tuple[tuple[tuple[str, str, str, int], ...], list[str]]:
    """(driver, pool, device, health) of the devices with a `Healthy` condition; a malformed
    entry costs that entry, named in the errors."""
    out, errors = [], []
    for i, d in enumerate(devices[:64]):
        dw = f"{where}[{i}]"
        try:
            conditions = _get(d, "conditions", dw, list)
            healthy = [c for c in conditions[:8] if isinstance(c, dict) and c.get("type") == HEALTH_CONDITION]
            if healthy:
                out.append((_name(d, "driver", dw, _DNS_SUBDOMAIN, limit=63), _name(d, "pool", dw, _POOL),
                            _name(d, "device", dw, DNS_LABEL_RE, limit=63),
                            _CONDITION_HEALTH.get(healthy[0].get("status"), UNKNOWN)))
        except DraInputError as exc:
            errors.append(str(exc))
    return tuple(out), errors


def _pod(obj: Any, where: str) -> tuple[Pod, list[str]]:
    meta = _get(obj, "metadata", where, required=True)
    namespace = _name(meta, "namespace", f"{where}.metadata", DNS_LABEL_RE, limit=63)
    name = _name(meta, "name", f"{where}.metadata", _DNS_SUBDOMAIN)
    uid = _get(meta, "uid", f"{where}.metadata", str, True)
    spec, status = _get(obj, "spec", where), _get(obj, "status", where)
    claims = []
    for i, c in enumerate(_get(spec, "resourceClaims", f"{where}.spec", list)):
        here = f"{where}.spec.resourceClaims[{i}]"
        claim_name = _name(c, "resourceClaimName", here, _DNS_SUBDOMAIN, required=False)
        template = _name(c, "resourceClaimTemplateName", here, _DNS_SUBDOMAIN, required=False)
        if (claim_name is None) == (template is None):
            raise DraInputError(f"{here}: exactly one of resourceClaimName and resourceClaimTemplateName")
        claims.append(PodClaim(_get(c, "name", here, str, True), claim_name, template))
    known = {c.name for c in claims}
    containers: dict[str, tuple[ContainerClaim, ...]] = {}
    for group in ("initContainers", "containers"):
        for i, c in enumerate(_get(spec, group, f"{where}.spec", list)):
            here = f"{where}.spec.{group}[{i}]"
            refs = []
            for j, r in enumerate(_get(_get(c, "resources", here), "claims", f"{here}.resources", list)):
                rw = f"{here}.resources.claims[{j}]"
                ref = ContainerClaim(_get(r, "name", rw, str, True), _get(r, "request", rw, str) or None)
                if ref.name not in known:
                    raise DraInputError(f"{rw}.name: {ref.name!r} is not in spec.resourceClaims")
                refs.append(ref)
            containers[_name(c, "name", here, DNS_LABEL_RE, limit=63)] = tuple(refs)
    generated = {}
    for i, s in enumerate(_get(status, "resourceClaimStatuses", f"{where}.status", list)):
        here = f"{where}.status.resourceClaimStatuses[{i}]"
        generated[_get(s, "name", here, str, True)] = _name(s, "resourceClaimName", here, _DNS_SUBDOMAIN, required=False)
    ext = _get(status, "extendedResourceClaimStatus", f"{where}.status")
    here = f"{where}.status.extendedResourceClaimStatus"
    ext_claim = _name(ext, "resourceClaimName", here, _DNS_SUBDOMAIN) if ext else None
    ext_requests = tuple(ExtendedResourceRequest(_get(m, "containerName", f"{here}.requestMappings[{i}]", str, True),
                                                 _get(m, "resourceName", f"{here}.requestMappings[{i}]", str, True),
                                                 _get(m, "requestName", f"{here}.requestMappings[{i}]", str, True))
                         for i, m in enumerate(_get(ext, "requestMappings", here, list)))
    return Pod(namespace, name, uid, _get(spec, "nodeName", f"{where}.spec", str), tuple(claims), containers,
               generated, ext_claim, ext_requests), []


def parse_resource_slices(obj: Any) -> Parsed[ResourceSlice]:
    """A ResourceSlice or ResourceSliceList; a bad device costs only that device."""
    return _parse_all(obj, "ResourceSlice", _resource_slice)


def parse_claims(obj: Any) -> Parsed[ResourceClaim]:
    """A ResourceClaim or ResourceClaimList; a bad claim costs only that claim."""
    return _parse_all(obj, "ResourceClaim", _claim)


def parse_pods(obj: Any) -> Parsed[Pod]:
    """A Pod or PodList (the API server's or the kubelet's `/pods`); a bad pod costs only itself."""
    return _parse_all(obj, "Pod", _pod)


# --- shares -----------------------------------------------------------------------------

class Basis(str, enum.Enum):
    """How a result's share of its device was found."""
    WHOLE = "whole"                      # a device without multiple allocations nor counters: 1
    COUNTERS = "counters"                # a partition: what it consumes of its counter sets
    CAPACITY = "capacity"                # consumedCapacity over the device's capacity
    HAMI_DEFAULT = "hami-default"        # capacity, with HAMi's plugin defaults filled in
    ADMIN = "admin"                      # adminAccess: monitoring, share 0, not billed
    UNKNOWN = "unknown"                  # no such device published, or nothing to measure by


class SplitPolicy(str, enum.Enum):
    """How a result consumed by several containers is divided between them."""
    EQUAL = "equal"                      # each consuming container an equal part
    PER_POD = "per-pod"                  # each pod an equal part, split equally among its containers


@dataclass(frozen=True, slots=True)
class DraSlice:
    """One container's part of one allocation result."""
    node: str | None
    namespace: str
    pod: str
    pod_uid: str
    container: str
    claim: str
    claim_uid: str
    request: str
    driver: str
    pool: str
    device: str
    share_id: str | None
    device_uuid: str | None
    model: str | None
    basis: Basis
    device_share: Fraction | None        # the result's share of the device, before the split
    parts: Fraction                      # this container's part of the result (1 = alone)
    share: Fraction | None               # device_share x parts: the dominant of the two below
    billed: bool
    mem_share: Fraction | None = None    # by memory: consumed / the device's, x partition, x parts
    cores_share: Fraction | None = None  # by cores, the same way
    memory_bytes: Fraction | None = None   # the memory consumed (HAMi's default too) x parts, when the result says


def device_model(device: Device) -> str | None:
    return next((str(device.attributes[a]) for a in MODEL_ATTRIBUTES if device.attributes.get(a)), None)


def partition_share(device: Device, counter_sets: dict[str, dict[str, Decimal]]) -> Fraction | None:
    """The device's share of the hardware behind its counter sets: per set and counter family,
    consumed / available; the dominant one. 1 without counters; None when a set is missing."""
    share = Fraction(1) if not device.consumes_counters else Fraction(0)
    for set_name, consumed in device.consumes_counters.items():
        available = counter_sets.get(set_name)
        if available is None:
            return None
        used, total = defaultdict(Fraction), defaultdict(Fraction)
        for name, amount in available.items():
            total[_COUNTER_FAMILY.sub("", name)] += Fraction(amount)
        for name, amount in consumed.items():
            used[_COUNTER_FAMILY.sub("", name)] += Fraction(amount)
        for family, amount in used.items():
            if total[family] > 0:
                share = max(share, min(Fraction(1), amount / total[family]))
    return share


def capacity_consumed(result: AllocationResult, device: Device) -> tuple[dict[str, Decimal], bool]:
    """What the result consumes of each capacity, with HAMi's plugin defaults where its driver
    would apply them; True when a default was used."""
    consumed = dict(result.consumed_capacity)
    if result.driver != HAMI_DRIVER:
        return consumed, False
    defaulted = False
    if "cores" in device.capacity and ("cores" not in consumed or consumed["cores"] != int(consumed["cores"])):
        consumed["cores"], defaulted = Decimal(HAMI_DEFAULT_SM_LIMIT), True
    if "memory" in device.capacity and "memory" not in consumed:
        consumed["memory"], defaulted = device.capacity["memory"], True
    return consumed, defaulted


def result_shares(result: AllocationResult, device: Device | None, counter_sets: dict[str, dict[str, Decimal]]
                  ) -> tuple[Fraction | None, Fraction | None, Fraction | None, Basis]:
    """(dominant, memory, cores) shares of the device and how they were found. A device
    shared by capacity has a share per capacity it publishes, each consumed / offered, times
    its counter share; a capacity it does not publish, and a device without capacities (a
    whole device, a partition by counters), take the one share it has."""
    if result.admin_access:
        return Fraction(0), Fraction(0), Fraction(0), Basis.ADMIN
    if device is None:
        return None, None, None, Basis.UNKNOWN
    part = partition_share(device, counter_sets)
    if part is None:
        return None, None, None, Basis.UNKNOWN
    if not device.allow_multiple_allocations:
        return part, part, part, Basis.COUNTERS if device.consumes_counters else Basis.WHOLE
    consumed, defaulted = capacity_consumed(result, device)
    ratios = {name: min(Fraction(1), Fraction(amount) / Fraction(device.capacity[name]))
              for name, amount in consumed.items() if device.capacity.get(name)}
    if not ratios or any(name not in device.capacity for name in consumed):
        return None, None, None, Basis.UNKNOWN
    share = max(ratios.values()) * part
    mem, cores = (ratios[n] * part if n in ratios else share for n in ("memory", "cores"))
    return share, mem, cores, Basis.HAMI_DEFAULT if defaulted else Basis.CAPACITY


def _request_matches(wanted: str | None, request: str) -> bool:
    """A container's `request` names a claim request; a result of a firstAvailable subrequest
    is `<request>/<subrequest>`."""
    return wanted is None or request == wanted or request.startswith(wanted + "/")


def pod_claim_consumers(pod: Pod) -> dict[str, list[tuple[str, str | None]]]:
    """Claim name -> (container, request or None for every result) for each container of the
    pod that uses it: `resources.claims` through `spec.resourceClaims` (a template's claim
    through `status.resourceClaimStatuses`), and the extended-resource mapping."""
    claim_of = {}
    for c in pod.claims:
        claim_of[c.name] = c.claim_name if c.claim_name is not None else pod.generated_claims.get(c.name)
    out: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for container, refs in pod.containers.items():
        for ref in refs:
            if claim_of.get(ref.name) is not None:
                out[claim_of[ref.name]].append((container, ref.request))
    if pod.extended_claim is not None:
        for m in pod.extended_requests:
            out[pod.extended_claim].append((m.container, m.request))
    return out


def allocation_slices(claims: Iterable[ResourceClaim], slices: Iterable[ResourceSlice], pods: Iterable[Pod],
                      policy: SplitPolicy = SplitPolicy.EQUAL) -> list[DraSlice]:
    """One DraSlice per (allocated claim, result, container consuming it). A pod consumes a
    claim it names when the claim is reserved for it (or for an object its pods share). Pods
    in `reservedFor` that are not among `pods` still take their part: one container each."""
    devices: dict[tuple[str, str, str], Device] = {}
    counters: dict[tuple[str, str], dict[str, dict[str, Decimal]]] = defaultdict(dict)
    for s in slices:
        counters[(s.driver, s.pool)].update(s.shared_counters)
        for d in s.devices:
            devices[(s.driver, s.pool, d.name)] = d
    pods = list(pods)
    users: dict[tuple[str, str], list[tuple[Pod, str, str | None]]] = defaultdict(list)
    for pod in pods:
        for claim_name, refs in pod_claim_consumers(pod).items():
            users[(pod.namespace, claim_name)] += [(pod, c, r) for c, r in refs]
    out = []
    for claim in claims:
        if not claim.allocated:
            continue
        reserved_pods = {r.uid for r in claim.reserved_for if _is_pod(r)}
        shared_object = any(not _is_pod(r) for r in claim.reserved_for)
        claim_users = [(p, c, r) for p, c, r in users.get((claim.namespace, claim.name), [])
                       if p.uid in reserved_pods or shared_object]
        unseen = len(reserved_pods - {p.uid for p, _, _ in claim_users})
        for result in claim.results:
            consumers = list({(p.uid, c): (p.uid, p, c) for p, c, r in claim_users
                              if _request_matches(r, result.request)}.values())
            device = devices.get((result.driver, result.pool, result.device))
            share, mem, cores, basis = result_shares(result, device, counters[(result.driver, result.pool)])
            consumed = capacity_consumed(result, device)[0].get("memory") if device else result.consumed_capacity.get("memory")
            for uid, pod, container in consumers:
                parts = _parts(policy, [(u, c) for u, _, c in consumers], uid, unseen)
                out.append(DraSlice(
                    node=pod.node_name or claim.node_name, namespace=pod.namespace, pod=pod.name, pod_uid=pod.uid,
                    container=container, claim=claim.name, claim_uid=claim.uid, request=result.request,
                    driver=result.driver, pool=result.pool, device=result.device, share_id=result.share_id,
                    device_uuid=_str_attr(device, "uuid"), model=device_model(device) if device else None,
                    basis=basis, device_share=share, parts=parts,
                    share=None if share is None else share * parts, billed=basis is not Basis.ADMIN,
                    mem_share=None if mem is None else mem * parts, cores_share=None if cores is None else cores * parts,
                    memory_bytes=None if consumed is None or basis is Basis.ADMIN else Fraction(consumed) * parts))
    return out


def _is_pod(ref: ClaimConsumer) -> bool:
    return ref.resource == "pods" and ref.api_group == ""


def _parts(policy: SplitPolicy, consumers: list[tuple[str, str]], pod_uid: str, unseen_pods: int) -> Fraction:
    if policy is SplitPolicy.EQUAL:
        return Fraction(1, len(consumers) + unseen_pods)
    pod_count = len({u for u, _ in consumers}) + unseen_pods
    return Fraction(1, pod_count * sum(1 for u, _ in consumers if u == pod_uid))


def _str_attr(device: Device | None, name: str) -> str | None:
    value = device.attributes.get(name) if device else None
    return value if isinstance(value, str) else None
