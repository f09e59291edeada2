"""The GPU filters the pages that list GPUs share: tenant, node, model, driver, health state,
a search and an order. The choice lives in the URL (st.query_params), so a link shares it,
and in the session, so it travels with the user from page to page (a tenant picked on
Tenants opens its GPUs on GPUs). What a filter offers comes from this request's scoped
connection (sql/dashboard/gpu_filter_options.sql), so a tenant's user is offered only its own
nodes and models, and a value from a URL that is not among them is dropped. The filtering
and ordering themselves happen in SQL (sql/dashboard/gpu_table.sql), every value bound.
"""
from __future__ import annotations

from typing import Mapping

import pandas as pd
import streamlit as st

LISTED = ("tenant", "node", "model", "driver")          # picked from what the scope holds
FIELDS = (*LISTED, "health", "q", "sort")
SESSION_KEY = "gpu_filters"
WIDGET_PREFIX = "gpuf_"
MAX_SEARCH = 200

SORTS = {
    "name": "name (natural order)",
    "problems": "needs a person (problem hours)",
    "waste_cost": "paid for, not used (money)",
    "cost": "cost of the GPU (money)",
    "idle": "allocated but idle (GPU-h)",
    "waste": "unused allocation (GPU-h)",
    "degraded": "degraded hours",
    "unverified": "unverified usage (h)",
    "unmetered": "unmetered hours",
}
HEALTH = {
    "problem": "any health event",
    "degraded": "degraded",
    "xid": "critical Xid",
    "ecc": "uncorrectable ECC errors",
    "throttled": "throttled",
    "lost": "lost (off the bus)",
    "healthy": "no health event",
}
DEFAULT_SORT = "name"


def _one(value) -> str | None:
    """A query parameter's value: the last of repeated ones, stripped; None when empty."""
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else None
    if value is None:
        return None
    value = str(value).strip()
    return value or None


def choices(options: pd.DataFrame) -> dict[str, list[str]]:
    """The values each listed filter offers, in the options' (natural) order."""
    return {f: list(dict.fromkeys(v for v in options[f].tolist() if v is not None and v == v)) for f in LISTED}


def parse(params: Mapping[str, object], offered: Mapping[str, list[str]]) -> dict[str, str | None]:
    """A choice from URL query parameters (or a kept choice): each listed value only if the
    scope offers it, health and sort only if known, the search cut to MAX_SEARCH characters."""
    out: dict[str, str | None] = {f: None for f in FIELDS}
    for f in LISTED:
        v = _one(params.get(f))
        out[f] = v if v in offered.get(f, []) else None
    health = _one(params.get("health"))
    out["health"] = health if health in HEALTH else None
    sort = _one(params.get("sort"))
    out["sort"] = sort if sort in SORTS else DEFAULT_SORT
    q = _one(params.get("q"))
    out["q"] = q[:MAX_SEARCH] if q else None
    return out


def to_params(choice: Mapping[str, str | None]) -> dict[str, str]:
    """The choice as URL query parameters: only what differs from no filter."""
    return {f: v for f in FIELDS if (v := choice.get(f)) and not (f == "sort" and v == DEFAULT_SORT)}


def sql_params(choice: Mapping[str, str | None]) -> dict[str, str | None]:
    """The choice as gpu_table.sql's parameters (NULL: no filter)."""
    return {"tenant": choice.get("tenant"), "node": choice.get("node"), "model": choice.get("model"),
            "driver": choice.get("driver"), "health": choice.get("health"), "search": choice.get("q"),
            "sort": choice.get("sort") or DEFAULT_SORT}


def remember(**choice: str | None) -> None:
    """Keep a choice for the next page that lists GPUs (e.g. the tenant picked on Tenants)."""
    kept = dict(st.session_state.get(SESSION_KEY) or {})
    kept.update(choice)
    st.session_state[SESSION_KEY] = kept
    for f in choice:   # a widget left from an earlier visit must not override it
        st.session_state.pop(WIDGET_PREFIX + f, None)


def _start(offered: Mapping[str, list[str]]) -> dict[str, str | None]:
    """Where the widgets start: the URL's choice when it has one, else the session's."""
    url = {f: st.query_params.get_all(f) for f in FIELDS if f in st.query_params}
    return parse(url if url else (st.session_state.get(SESSION_KEY) or {}), offered)


def widgets(options: pd.DataFrame, container=None) -> dict[str, str | None]:
    """Draw the filters (in `container`, default the page) and return the choice; the URL
    and the session follow it."""
    offered = choices(options)
    start = _start(offered)
    for f in FIELDS:   # a widget keeps its own state between reruns of the same page
        key = WIDGET_PREFIX + f
        if key not in st.session_state or (f in offered and st.session_state[key] not in [None, *offered[f]]):
            st.session_state[key] = start[f] if f != "q" else (start[f] or "")
    box = container if container is not None else st.container()
    row1 = box.columns(4)
    labels = {"tenant": "Tenant", "node": "Node", "model": "Model", "driver": "Granted by"}
    for col, f in zip(row1, LISTED):
        if f == "tenant" and len(offered[f]) <= 1:   # a tenant's own dashboard: nothing to choose
            continue
        # None (no filter) reads as the placeholder: a selectbox shows None as no choice
        col.selectbox(labels[f], [None, *offered[f]], key=WIDGET_PREFIX + f, placeholder="all",
                      format_func=lambda v: "all" if v is None else v)
    row2 = box.columns([1, 2, 1])
    row2[0].selectbox("Health", [None, *HEALTH], key=WIDGET_PREFIX + "health", placeholder="any",
                      format_func=lambda v: "any" if v is None else HEALTH[v])
    row2[1].text_input("Search", key=WIDGET_PREFIX + "q", max_chars=MAX_SEARCH,
                       placeholder="GPU UUID, node, pod, namespace or claim")
    row2[2].selectbox("Order by", list(SORTS), key=WIDGET_PREFIX + "sort", format_func=SORTS.get)
    choice = parse({f: st.session_state.get(WIDGET_PREFIX + f) for f in FIELDS}, offered)
    if len(offered["tenant"]) <= 1:
        choice["tenant"] = None
    st.session_state[SESSION_KEY] = choice
    wanted = to_params(choice)
    others = {k: st.query_params.get_all(k) for k in st.query_params if k not in FIELDS}
    if {k: [v] for k, v in wanted.items()} | others != {k: st.query_params.get_all(k) for k in st.query_params}:
        st.query_params.from_dict({**others, **wanted})
    return choice
