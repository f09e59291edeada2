"""Two-dimensional bin packing for the consolidation plan (pure, no I/O).

Items are slices' needs as fractions of one GPU: column 0 memory, column 1 SMs, each in
[0, 1]; every bin (GPU) holds 1.0 of each. Within a group (one tenant cluster, one GPU
model) the GPUs are interchangeable, so a plan is a partition of the items into bins.

`pack` runs a small portfolio and keeps the best:
- first-fit decreasing (FFD) on the dominant dimension: the reference every plan is
  compared with;
- best-fit decreasing (BFD), items by decreasing sum of needs: placing an item where it
  leaves the least slack keeps big holes open for big items;
- an optional caller-supplied feasible solution (today's placement), so the plan is never
  worse than doing nothing;
- bin elimination (local search): try to empty the least-loaded bin by moving each of its
  items to another bin, directly or by swapping out a smaller item that fits elsewhere;
- for small groups, an exact branch and bound (node-limited).
Every result carries a lower bound, max over dimensions of ceil(sum of demand) and of the
count of items above half a bin in that dimension (no two such items share a bin), and
the size of the largest `apart` set, so the gap to the optimum is stated even when it is
not proven zero. `apart` keeps the slices of one pod on different GPUs.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

EPS = 1e-9


@dataclass(frozen=True)
class PackResult:
    bins: list[list[int]]      # item indices per bin, every bin non-empty
    lower_bound: int
    ffd_bins: int              # what first-fit decreasing alone needs (the reference)
    proven_optimal: bool       # len(bins) == lower_bound, or the exact search finished
    method: str                # which candidate won, e.g. "bfd-sum+eliminate"

    @property
    def n_bins(self) -> int:
        return len(self.bins)

    @property
    def gap(self) -> int:
        """GPUs above the lower bound (0 = optimal; an upper bound on the distance to it)."""
        return len(self.bins) - self.lower_bound


def as_demands(demands) -> np.ndarray:
    d = np.asarray(demands, dtype=float).reshape(-1, 2)
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValueError("demands must be finite and >= 0")
    # A need above one GPU cannot be split; it occupies a whole GPU (and is reported).
    return np.minimum(d, 1.0)


def lower_bound(d: np.ndarray, apart=None) -> int:
    if len(d) == 0:
        return 0
    by_sum = max(math.ceil(float(d[:, k].sum()) - 1e-7) for k in range(2))
    by_big = max(int(np.count_nonzero(d[:, k] > 0.5 + EPS)) for k in range(2))
    a = _apart(apart, len(d))
    by_apart = int(np.bincount(a[a >= 0]).max()) if (a >= 0).any() else 0
    return max(by_sum, by_big, by_apart, 1)


def _order(d: np.ndarray, key: str) -> np.ndarray:
    if key == "max":
        primary, secondary = d.max(axis=1), d.sum(axis=1)
    else:
        primary, secondary = d.sum(axis=1), d.max(axis=1)
    # lexsort: last key is primary; negate for decreasing; stable on item index
    return np.lexsort((np.arange(len(d)), -secondary, -primary))


def _apart(apart, n: int) -> np.ndarray:
    """Per item, the id of a set of items that must sit on different GPUs (the slices of
    one pod: HAMi gives a pod's vGPUs distinct physical GPUs), or -1."""
    if apart is None:
        return np.full(n, -1, dtype=np.int64)
    a = np.asarray(apart, dtype=np.int64).reshape(-1)
    if len(a) != n:
        raise ValueError("apart must have one entry per item")
    return a


def _bins_with(bins, apart, group) -> list[int]:
    return [b for b, items in enumerate(bins) if any(apart[j] == group for j in items)]


def _greedy(d: np.ndarray, key: str, best_fit: bool, apart=None) -> list[list[int]]:
    n = len(d)
    apart = _apart(apart, n)
    res = np.ones((n, 2))
    bins: list[list[int]] = []
    holding: dict[int, list[int]] = {}   # apart group -> bins holding one of its items
    inf = np.inf
    for i in _order(d, key):
        nb = len(bins)
        dm, ds = d[i, 0] - EPS, d[i, 1] - EPS
        r = res[:nb]
        ok = (r[:, 0] >= dm) & (r[:, 1] >= ds)
        if apart[i] >= 0 and apart[i] in holding:
            ok[holding[apart[i]]] = False
        if nb == 0 or not ok.any():
            b = nb
            bins.append([])
        elif best_fit:
            # least slack left after placing the item (sum over both dimensions)
            b = int(np.where(ok, r[:, 0] + r[:, 1], inf).argmin())
        else:
            b = int(ok.argmax())
        bins[b].append(int(i))
        res[b] -= d[i]
        if apart[i] >= 0:
            holding.setdefault(int(apart[i]), []).append(b)
    return bins


def first_fit_decreasing(d, apart=None) -> list[list[int]]:
    return _greedy(as_demands(d), "max", best_fit=False, apart=apart)


def best_fit_decreasing(d, key: str = "max", apart=None) -> list[list[int]]:
    return _greedy(as_demands(d), key, best_fit=True, apart=apart)


def is_feasible(d: np.ndarray, bins: list[list[int]], apart=None) -> bool:
    seen = sorted(i for b in bins for i in b)
    if seen != list(range(len(d))):
        return False
    apart = _apart(apart, len(d))
    for b in bins:
        groups = [int(apart[i]) for i in b if apart[i] >= 0]
        if len(groups) != len(set(groups)):
            return False
    return all(np.all(d[b].sum(axis=0) <= 1.0 + 1e-7) for b in bins if b)


def eliminate_bins(d: np.ndarray, bins: list[list[int]], target: int,
                   deadline: float = math.inf, max_sources: int = 40,
                   apart=None) -> list[list[int]]:
    """Local search: repeatedly empty a lightly loaded bin into the others. Only the
    `max_sources` emptiest bins are tried per round (a full bin is rarely emptied), and
    the search stops at `deadline` (time.monotonic()) keeping what it has."""
    bins = [list(b) for b in bins if b]
    apart = _apart(apart, len(d))
    while len(bins) > target:
        res = np.array([1.0 - d[b].sum(axis=0) for b in bins])
        order = np.argsort(-res.sum(axis=1), kind="stable")[:max_sources]  # emptiest first
        for src in order:
            if time.monotonic() > deadline:
                return bins
            moved = _try_empty(d, bins, res.copy(), int(src), apart)
            if moved is not None:
                bins = moved
                break
        else:
            return bins
    return bins


def _try_empty(d, bins, res, src, apart):
    """Relocate every item of bins[src] elsewhere (direct move, or a swap that pushes a
    smaller item of the target bin into a third bin). None if some item cannot go."""
    new = [list(b) for b in bins]
    res[src] = -1.0  # the source bin accepts nothing
    for i in sorted(new[src], key=lambda j: -d[j].max()):
        ok = (res[:, 0] >= d[i, 0] - EPS) & (res[:, 1] >= d[i, 1] - EPS)
        if apart[i] >= 0:
            ok[_bins_with(new, apart, apart[i])] = False
        fits = np.flatnonzero(ok)
        if len(fits):
            t = int(fits[np.argmin((res[fits] - d[i]).sum(axis=1))])
            new[t].append(i)
            res[t] -= d[i]
            continue
        if not _swap_in(d, new, res, src, i, apart):
            return None
    del new[src]
    return new


def _swap_in(d, bins, res, src, i, apart, max_targets: int = 50) -> bool:
    # only the bins with the most room are worth a swap: bounds the cost on big groups
    for t in np.argsort(res.sum(axis=1))[::-1][:max_targets]:
        t = int(t)
        if t == src or (apart[i] >= 0 and any(apart[j] == apart[i] for j in bins[t])):
            continue
        for x in bins[t]:
            after_t = res[t] + d[x] - d[i]
            if after_t[0] < -EPS or after_t[1] < -EPS:
                continue
            ok = (res[:, 0] >= d[x, 0] - EPS) & (res[:, 1] >= d[x, 1] - EPS)
            ok[t] = ok[src] = False
            if apart[x] >= 0:
                ok[_bins_with(bins, apart, apart[x])] = False
            us = np.flatnonzero(ok)
            if len(us) == 0:
                continue
            u = int(us[np.argmin((res[us] - d[x]).sum(axis=1))])
            bins[t].remove(x)
            bins[t].append(i)
            bins[u].append(x)
            res[t] = after_t
            res[u] -= d[x]
            return True
    return False


def exact(d: np.ndarray, upper: int, lb: int, node_limit: int = 50_000, apart=None):
    """Branch and bound over items in decreasing order. Returns (bins or None, finished):
    bins when a solution with fewer than `upper` bins exists, finished when the search
    space was exhausted (so the best found, or `upper`, is optimal)."""
    order = [int(i) for i in _order(d, "max")]
    apart = _apart(apart, len(d))
    n = len(order)
    rem = np.zeros((n + 1, 2))
    for k in range(n - 1, -1, -1):
        rem[k] = rem[k + 1] + d[order[k]]
    best = {"n": upper, "bins": None}
    nodes = 0
    finished = True

    def dfs(k, res, assign):
        nonlocal nodes, finished
        if best["n"] <= lb:
            return
        nodes += 1
        if nodes > node_limit:
            finished = False
            return
        nb = len(res)
        if k == n:
            if nb < best["n"]:
                best["n"], best["bins"] = nb, [list(b) for b in assign]
            return
        free = np.sum(res, axis=0) if nb else np.zeros(2)
        need_new = max(math.ceil(float(rem[k, j] - free[j]) - 1e-7) for j in range(2))
        if nb + max(need_new, 0) >= best["n"]:
            return
        i = order[k]
        tried = set()
        for b in range(nb):
            r = res[b]
            if r[0] >= d[i, 0] - EPS and r[1] >= d[i, 1] - EPS:
                if apart[i] >= 0 and any(apart[j] == apart[i] for j in assign[b]):
                    continue
                # identical residual bins are symmetric branches (unless the bin holds
                # an item that must stay apart from others: then its contents matter)
                sig = (round(r[0], 9), round(r[1], 9),
                       tuple(sorted(int(apart[j]) for j in assign[b] if apart[j] >= 0)))
                if sig in tried:
                    continue
                tried.add(sig)
                res[b] = r - d[i]
                assign[b].append(i)
                dfs(k + 1, res, assign)
                assign[b].pop()
                res[b] = res[b] + d[i]
        if nb + 1 < best["n"]:
            res.append(1.0 - d[i])
            assign.append([i])
            dfs(k + 1, res, assign)
            assign.pop()
            res.pop()

    dfs(0, [], [])
    return best["bins"], finished


def pack(demands, *, initial: list[list[int]] | None = None, exact_max_items: int = 24,
         node_limit: int = 50_000, budget_s: float = math.inf, apart=None) -> PackResult:
    """Best plan found for one group. `budget_s` bounds the local search (the greedy
    candidates always run), so a fleet-wide plan stays within a time budget. `apart`:
    per item a group id (-1: none); items of one group go to different bins."""
    deadline = time.monotonic() + budget_s
    d = as_demands(demands)
    n = len(d)
    if n == 0:
        return PackResult([], 0, 0, True, "empty")
    apart = _apart(apart, n)
    lb = lower_bound(d, apart)
    ffd = _greedy(d, "max", best_fit=False, apart=apart)
    candidates = [
        ("ffd", ffd),
        ("bfd-sum", _greedy(d, "sum", best_fit=True, apart=apart)),
    ]
    if initial is not None:
        init = [list(b) for b in initial if b]
        if is_feasible(d, init, apart):
            candidates.append(("today", init))
    method, best = min(candidates, key=lambda c: len(c[1]))
    if len(best) > lb:
        improved = eliminate_bins(d, best, lb, deadline, apart=apart)
        if len(improved) < len(best):
            method, best = method + "+eliminate", improved
    proven = len(best) == lb
    if not proven and n <= exact_max_items:
        found, finished = exact(d, len(best), lb, node_limit, apart)
        if found is not None:
            method, best = "exact", found
        proven = finished or len(best) == lb
    return PackResult(best, lb, len(ffd), proven, method)
