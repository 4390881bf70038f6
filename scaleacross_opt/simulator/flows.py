"""Fair sharing of resources by concurrent flows (the simulator's network model).

A flow is one transfer or collective in progress: alone (with every resource to itself) it would take
``alone_s`` seconds, and it needs ``uses[r]`` seconds of resource r's whole capacity (its bytes on r ÷
r's capacity). Running at a fraction x ∈ (0, 1] of its full speed it occupies x·u_r of resource r,
u_r = uses[r] / alone_s (its demand).

Speeds are max-min fair (progressive filling, Bertsekas & Gallager, *Data Networks* §6.5.2) with every
flow weighted by its demand: all speeds rise together; when a resource fills, the flows on it stay at the
speed reached and the others go on rising, up to full speed. On one full resource every flow so slows by
the same factor — each gets bandwidth in proportion to what it asks at full speed, i.e. to its connections
(a flow's full-speed demand is its connections × one connection's rate), which is what per-connection
congestion control (DCQCN, TCP) converges to.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Sequence

import numpy as np

# resource and the demand u_r of the flow on it (the share of it the flow occupies at full speed)
Uses = Sequence[tuple[Hashable, float]]

_EPS = 1e-12


def fair_speeds(demand: np.ndarray) -> np.ndarray:
    """Speed (fraction of full speed, in (0, 1]) of each flow (row) sharing unit-capacity resources
    (columns) by progressive filling; ``demand[j, r]`` = u of flow j on resource r.

    Resources fill in rounds: a resource whose filling level (room ÷ demand of its rising flows) is below 1
    and not above the level of any other resource its rising flows cross fills at that level whatever the
    others do, so all such resources of a round fill at once (the sequential procedure's result, in a few
    vector rounds instead of one per resource)."""
    speed = np.ones(demand.shape[0])
    load = demand.sum(axis=0)  # of the flows still rising
    over = load > 1.0  # a resource all its flows fit at full speed never fills first: leave it out
    if not over.any():
        return speed
    demand, load = demand[:, over], load[over]
    on = demand > 0
    rising = np.ones(demand.shape[0], dtype=bool)
    room = np.ones(load.size)
    while rising.any():
        level = np.where(load > _EPS, np.maximum(room, 0.0) / np.maximum(load, _EPS), np.inf)
        if level.min() >= 1.0:
            break  # every rising flow reaches full speed first
        crossing = on & rising[:, None]
        lowest = np.where(crossing, level, np.inf).min(axis=1)  # per flow: its lowest level
        fills = (level < 1.0) & (np.where(crossing, lowest[:, None], np.inf).min(axis=0) >= level * (1 - 1e-12))
        if not fills.any():  # rounding left load on a resource no rising flow uses
            load[np.argmin(level)] = 0.0
            continue
        frozen = rising & (on[:, fills].any(axis=1))
        speed[frozen] = np.maximum(lowest[frozen], 1e-9)  # a floor: a flow frozen at 0 by rounding never ends
        room -= speed[frozen] @ demand[frozen]
        load -= demand[frozen].sum(axis=0)
        rising &= ~frozen
    return speed


def fair_rates(flows: Sequence[Uses]) -> list[float]:
    """``fair_speeds`` of flows given as (resource, demand) lists."""
    names = {r: i for i, r in enumerate(dict.fromkeys(r for uses in flows for r, _ in uses))}
    demand = np.zeros((len(flows), len(names)))
    for j, uses in enumerate(flows):
        for r, u in uses:
            demand[j, names[r]] += u
    return fair_speeds(demand).tolist()


class FlowNetwork:
    """Flows in progress, advanced through time at their fair speeds (recomputed when the set changes).

    ``resources``: the resources that may ever be asked for more than their capacity (the others never
    slow a flow and are left out; ``None``: all). Flows live in array slots, each with its end time at
    today's speeds, which changes only when the speeds do: one event costs a few vector operations,
    however many flows are in progress.
    """

    def __init__(self, resources: Collection[Hashable] | None = None) -> None:
        self.now = 0.0
        self._only = None if resources is None else set(resources)
        self._column: dict[Hashable, int] = {}
        size = 8
        self._demand = np.zeros((size, 0))
        self._load = np.zeros(0)  # Σ demand of the flows in progress, per resource
        self._end = np.full(size, np.inf)  # at today's speeds; ∞ for free slots
        self._speed = np.ones(size)
        self._order = np.zeros(size, dtype=np.int64)  # start sequence, for a deterministic finish order
        self._key: list[Hashable] = [None] * size
        self._free = list(range(size - 1, -1, -1))
        self._started = 0
        self._active = 0
        self._stale = False
        self._slowed = False  # some flow runs below full speed
        self._next = float("inf")  # the earliest end, as of the last ``next_finish`` (-∞: unknown)

    def __bool__(self) -> bool:
        return self._active > 0

    def start(self, key: Hashable, alone_s: float, uses: Uses) -> None:
        """A flow of ``alone_s`` > 0 seconds starts now."""
        if not self._free:
            self._grow()
        slot = self._free.pop()
        self._demand[slot] = 0.0
        for resource, u in uses:
            if self._only is not None and resource not in self._only:
                continue
            if resource not in self._column:
                self._column[resource] = self._demand.shape[1]
                self._demand = np.pad(self._demand, ((0, 0), (0, 1)))
                self._load = np.pad(self._load, (0, 1))
            self._demand[slot, self._column[resource]] += u
        self._end[slot], self._speed[slot] = self.now + alone_s, 1.0
        self._next = -math.inf
        self._order[slot] = self._started
        self._key[slot] = key
        self._started += 1
        self._active += 1
        if self._demand.shape[1] and self._demand[slot].any():  # others' speeds change only if it contends
            self._load += self._demand[slot]
            self._stale = True

    def next_finish(self) -> float:
        """When the first flow in progress ends at today's speeds (∞ when none)."""
        self._refresh()
        self._next = float(self._end.min()) if self._active else float("inf")
        return self._next

    def advance(self, t: float) -> list[Hashable]:
        """Move on to time ``t`` (≤ ``next_finish()``); return the flows that ended by then, in start order
        (a flow too short to move the clock still ends)."""
        self._refresh()
        self.now = t
        if not self._active or self._next > t:
            return []
        slots = np.flatnonzero(self._end <= t)
        if not slots.size:
            return []
        slots = slots[np.argsort(self._order[slots])]
        self._end[slots] = np.inf
        self._free.extend(slots.tolist())
        self._active -= slots.size
        if self._demand.shape[1]:
            gone = self._demand[slots].sum(axis=0)
            if gone.any():
                self._load -= gone
                self._stale = True
        return [self._key[s] for s in slots.tolist()]

    def _refresh(self) -> None:
        """New fair speeds after the set of contending flows changed; ends move with the speeds (the work left
        at full speed, (end − now)·speed, is kept)."""
        if not self._stale:
            return
        self._stale = False
        if self._load.max(initial=0.0) <= 1.0 and not self._slowed:
            return  # everybody was and stays at full speed
        active = np.flatnonzero(self._end < np.inf)
        speed = np.ones(self._end.size)
        over = self._load > 1.0
        if over.any():  # only those resources can fill (``fair_speeds``)
            speed[active] = fair_speeds(self._demand[np.ix_(active, np.flatnonzero(over))])
        left = (self._end[active] - self.now) * self._speed[active]
        self._end[active] = self.now + left / speed[active]
        self._next = -math.inf
        self._speed = speed
        self._slowed = bool((speed[active] < 1.0).any())

    def _grow(self) -> None:
        size = self._end.size
        self._demand = np.pad(self._demand, ((0, size), (0, 0)))
        self._end = np.pad(self._end, (0, size), constant_values=np.inf)
        self._speed = np.pad(self._speed, (0, size), constant_values=1.0)
        self._order = np.pad(self._order, (0, size))
        self._key += [None] * size
        self._free = list(range(2 * size - 1, size - 1, -1))
