"""Config files validated by schema: pydantic models, and errors that name the key and the line.

The price catalog, the tenant catalog and scenarios are pydantic models built on `Schema`.
`load(Model, text, source)` parses YAML keeping each key's line, validates, and turns
pydantic's errors into one ConfigFileError: `examples/prices.yaml:7: gpu_hour."NVIDIA L4":
not a decimal number: 'abc'`. Models are strict: YAML's own types are the only conversion
(no "5" -> 5, no 1 -> "1", no true -> 1), so a value is what the file says it is.
"""
from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Iterable, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from slicemeter.common import DNS_LABEL_RE, ConfigError, YamlRefused, compose_yaml, where_in_file

Loc = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
# Kubernetes' IsDNS1123Label (<= 63) and IsDNS1123Subdomain (labels joined by dots, <= 253)
DNS_LABEL = DNS_LABEL_RE
DNS_SUBDOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class ConfigFileError(ConfigError):
    """A config file's mistake: `path` is the key path, `line` its YAML line (None: unknown)."""

    def __init__(self, message: str, path: str = "", line: int | None = None, source: str = "",
                 more: Iterable[str] = ()):
        super().__init__("\n".join([f"{where_in_file(source, line)}{path + ': ' if path else ''}{message}", *more]))
        self.path, self.line = path, line


def key_path(loc: Loc) -> str:
    """('gpu_hour', 'NVIDIA L4') -> gpu_hour."NVIDIA L4"; ('nodes', 0, 'gpus') -> nodes[0].gpus."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            text = part if _PLAIN_KEY.match(part) else json.dumps(part)
            out += f".{text}" if out else text
    return out


def invalid(message: str, *key: str | int) -> PydanticCustomError:
    """A validation error for a validator to raise; `key` (below the value validated) is
    appended to the error's location, so a model-level rule can still name the key."""
    return PydanticCustomError("config", "{message}", {"message": message, "key": key})


class Schema(BaseModel):
    """A config mapping: strict types, no unknown keys (the error lists the allowed ones), and
    `key: ~` means the key is absent (its default), as a YAML writer expects."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", populate_by_name=True)

    @classmethod
    def shorthand(cls, data: Any) -> Any:
        """A value that stands for a whole mapping (a model overrides it to accept one)."""
        return data

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        data = cls.shorthand(data)
        if not isinstance(data, dict):
            return data
        allowed = {f.alias or name for name, f in cls.model_fields.items()}
        for k in data:
            if k not in allowed:
                raise invalid(f"unknown key (allowed: {', '.join(sorted(allowed))})", str(k))
        return {k: v for k, v in data.items() if v is not None}


def one_of(what: str, known: Iterable[str]):
    """A str field that must be one of `known`; the error says which are."""
    known = tuple(known)

    def check(value: str) -> str:
        if value not in known:
            raise invalid(f"unknown {what} {value!r} (known: {', '.join(known)})")
        return value
    return Annotated[str, AfterValidator(check)]


def matching(pattern: re.Pattern, what: str):
    """A str field that must match `pattern`, else `'value' is not <what>`."""
    def check(value: str) -> str:
        if not pattern.match(value):
            raise invalid(f"{value!r} is not {what}")
        return value
    return Annotated[str, AfterValidator(check)]


def exact_decimal(value: Any, what: str) -> Decimal:
    """A YAML scalar as an exact, finite Decimal >= 0 with at most 6 decimals (micro-units):
    money is written as a quoted string, so it never passes through a float."""
    if isinstance(value, float):
        raise invalid(f"write the {what} as a quoted string (got float {value!r}, which is inexact)")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise invalid(f"expected a decimal string, got {type(value).__name__} {value!r}")
    try:
        d = Decimal(str(value).strip())
    except InvalidOperation:
        raise invalid(f"not a decimal number: {value!r}") from None
    if not d.is_finite() or d < 0:
        raise invalid(f"must be a finite number >= 0, got {value!r}")
    if (d * 10**6) != (d * 10**6).to_integral_value():
        raise invalid(f"at most 6 decimals, got {value!r}")
    return d


NonEmpty = Annotated[str, Field(min_length=1)]
DnsLabel = matching(DNS_LABEL, "a lowercase DNS label")
DnsName = matching(DNS_SUBDOMAIN, "a DNS name")
Share = Annotated[float, Field(ge=0.0, le=1.0)]
# an amount of the price catalog's currency, e.g. a tenant's monthly budget
Amount = Annotated[Decimal, PlainValidator(lambda v: exact_decimal(v, "amount"))]

# pydantic error type -> what the value should have been
_EXPECTED = {"string_type": "a string", "int_type": "an integer", "float_type": "a number", "bool_type": "true or false",
             "list_type": "a list", "dict_type": "a mapping", "model_type": "a mapping", "model_attributes_type": "a mapping",
             "date_type": "a date", "datetime_type": "a date-time"}
_BOUNDS = {"greater_than_equal": ">=", "less_than_equal": "<=", "greater_than": ">", "less_than": "<"}


def _message(err: dict) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "config":
        return ctx["message"]
    if kind == "missing":
        return "missing required key"
    if kind == "string_type" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"expected a string, got {type(value).__name__} {value!r} (quote it: \"{value}\")"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}, got {type(value).__name__} {value!r}"
    if kind in _BOUNDS:
        bound = next(v for k, v in ctx.items() if k in ("ge", "le", "gt", "lt"))
        return f"{value!r} must be {_BOUNDS[kind]} {bound}"
    if kind in ("too_short", "string_too_short"):
        n = ctx["min_length"]
        return "must not be empty" if n == 1 else f"needs at least {n} entries"
    return err["msg"]


def _loc(err: dict) -> Loc:
    loc = tuple(p for p in err["loc"] if p != "[key]")
    return loc + tuple((err.get("ctx") or {}).get("key", ()))


class YamlLines:
    """A YAML document and the line of every key path in it (keys: the key's own line)."""

    def __init__(self, text: str, source: str = ""):
        self.source = source
        try:
            root, self.data = compose_yaml(text, source)
        except YamlRefused as exc:
            raise ConfigFileError(exc.problem, "", exc.line, source) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise ConfigFileError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}", "",
                                  mark.line + 1 if mark else None, source) from None
        self.lines: dict[tuple[str, ...], int] = {}
        if root is not None:
            self._walk(root, ())

    def _walk(self, node: yaml.Node, at: tuple[str, ...]) -> None:
        self.lines.setdefault(at, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                self.lines[at + (str(k.value),)] = k.start_mark.line + 1
                self._walk(v, at + (str(k.value),))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                self._walk(v, at + (str(i),))

    def line(self, loc: Loc) -> int | None:
        """The line of `loc`, else of the nearest key above it that the file has."""
        at = tuple(str(p) for p in loc)
        while at and at not in self.lines:
            at = at[:-1]
        return self.lines.get(at)

    def error(self, loc: Loc, message: str) -> ConfigFileError:
        return ConfigFileError(message, key_path(loc), self.line(loc), self.source)


_NO_LINES = YamlLines("")


def validate(model: type[M], data: Any, doc: YamlLines = _NO_LINES) -> M:
    """`data` as `model`, or one ConfigFileError listing every mistake, first in file order."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        found = sorted(((doc.line(_loc(e)), key_path(_loc(e)), _message(e)) for e in exc.errors()),
                       key=lambda f: (f[0] is None, f[0] or 0))
    (line, path, message), *rest = found
    more = [f"  and {doc.source + ':' if doc.source else 'line '}{n}: {p}: {m}" if n else f"  and {p}: {m}"
            for n, p, m in rest[:9]]
    raise ConfigFileError(message, path, line, doc.source, more) from None


def load(model: type[M], text: str, source: str = "") -> tuple[M, YamlLines]:
    """A YAML text validated as `model`, and its lines (for the checks a schema cannot say)."""
    doc = YamlLines(text, source)
    return validate(model, doc.data, doc), doc
