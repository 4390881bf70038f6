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

import heapq
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
        frozen = rising & (on[:, fills].any(axis=1))
        speed[frozen] = np.maximum(lowest[frozen], 1e-9)  # a floor: a flow frozen at 0 by rounding never ends
        room -= speed[frozen] @ demand[frozen]
        load -= demand[frozen].sum(axis=0)
        rising &= ~frozen
        load[~(on & rising[:, None]).any(axis=0)] = 0.0  # no rising flow left there: rounding must not count
    return speed


def fair_rates(flows: Sequence[Uses]) -> list[float]:
    """``fair_speeds`` of flows given as (resource, demand) lists (``FlowNetwork``'s larger parts)."""
    names = {r: i for i, r in enumerate(dict.fromkeys(r for uses in flows for r, _ in uses))}
    demand = np.zeros((len(flows), len(names)))
    for j, uses in enumerate(flows):
        for r, u in uses:
            demand[j, names[r]] += u
    return fair_speeds(demand).tolist()


def fair_speeds_small(demand: list[list[tuple[int, float]]]) -> list[float]:
    """``fair_speeds`` of a few flows, in plain Python (one resource filling at a time): flow j crosses the
    (resource, demand) pairs ``demand[j]``; every resource listed is one its flows overfill at full speed."""
    speed = [1.0] * len(demand)
    room: dict[int, float] = {}
    load: dict[int, float] = {}
    flows_on: dict[int, list[int]] = {}
    for j, uses in enumerate(demand):
        for r, u in uses:
            room[r] = 1.0
            load[r] = load.get(r, 0.0) + u
            flows_on.setdefault(r, []).append(j)
    rising = [True] * len(demand)
    while load:
        level, full = min((max(room[r], 0.0) / load[r], r) for r in load)
        if level >= 1.0:
            break
        for j in flows_on[full]:
            if rising[j]:
                rising[j] = False
                speed[j] = max(level, 1e-9)
                for r, u in demand[j]:
                    room[r] -= speed[j] * u
                    load[r] -= u
        del load[full]
        for r in [r for r in load if load[r] <= _EPS]:  # every flow on it frozen (up to rounding)
            del load[r]
    return speed


class FlowNetwork:
    """Flows in progress, advanced through time at their fair speeds.

    ``resources``: the resources that may ever be asked for more than their capacity (the others never
    slow a flow and are left out; ``None``: all). Speeds are max-min fair per connected part of the graph
    of flows and overfull resources, so a flow starting or ending recomputes only its part; each flow keeps
    its end time at today's speeds (a heap with lazy deletion gives the next one), which changes only when
    its speed does. One event costs time in proportion to the flows of its part.
    """

    _SMALL = 40  # parts up to this many flows are filled in plain Python (faster there), larger ones with numpy

    def __init__(self, resources: Collection[Hashable] | None = None) -> None:
        self.now = 0.0
        self._only = None if resources is None else set(resources)
        self._column: dict[Hashable, int] = {}
        self._load: list[float] = []  # Σ demand of the flows in progress, per resource
        self._on: list[set[int]] = []  # flows in progress per resource
        self._uses: dict[int, list[tuple[int, float]]] = {}  # per flow in progress: (resource, demand)
        self._end: dict[int, float] = {}  # per flow in progress, at today's speeds
        self._speed: dict[int, float] = {}
        self._key: dict[int, Hashable] = {}
        self._heap: list[tuple[float, int]] = []  # (end, flow); stale entries skipped
        self._touched: set[int] = set()  # resources whose flows changed since the last refresh
        self._started = 0

    def __bool__(self) -> bool:
        return bool(self._end)

    def start(self, key: Hashable, alone_s: float, uses: Uses) -> None:
        """A flow of ``alone_s`` > 0 seconds starts now."""
        flow = self._started
        self._started += 1
        demand: dict[int, float] = {}
        for resource, u in uses:
            if u <= 0 or (self._only is not None and resource not in self._only):
                continue
            if resource not in self._column:
                self._column[resource] = len(self._load)
                self._load.append(0.0)
                self._on.append(set())
            r = self._column[resource]
            demand[r] = demand.get(r, 0.0) + u
        self._uses[flow] = list(demand.items())
        for r, u in demand.items():
            self._load[r] += u
            self._on[r].add(flow)
            self._touched.add(r)
        self._end[flow], self._speed[flow], self._key[flow] = self.now + alone_s, 1.0, key
        heapq.heappush(self._heap, (self.now + alone_s, flow))

    def next_finish(self) -> float:
        """When the first flow in progress ends at today's speeds (∞ when none)."""
        self._refresh()
        heap = self._heap
        while heap and self._end.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def advance(self, t: float) -> list[Hashable]:
        """Move on to time ``t`` (≤ ``next_finish()``); return the flows that ended by then, in start order
        (a flow too short to move the clock still ends)."""
        self._refresh()
        self.now = t
        ended = []
        heap = self._heap
        while heap and heap[0][0] <= t:
            end, flow = heapq.heappop(heap)
            if self._end.get(flow) == end:  # not stale (an end that moved and came back has two entries)
                ended.append(flow)
        ended = sorted(set(ended))
        for flow in ended:
            del self._end[flow], self._speed[flow]
            for r, u in self._uses.pop(flow):
                self._load[r] -= u
                self._on[r].discard(flow)
                self._touched.add(r)
        return [self._key.pop(flow) for flow in ended]

    def _refresh(self) -> None:
        """New fair speeds for the part of the graph holding the touched resources; ends move with the
        speeds (the work left at full speed, (end − now)·speed, is kept)."""
        if not self._touched:
            return
        part, flows, todo = set(), set(), list(self._touched)
        self._touched = set()
        while todo:  # grow the part: the flows on its resources, and the overfull resources they cross
            r = todo.pop()
            if r in part:
                continue
            part.add(r)
            for flow in self._on[r] - flows:
                flows.add(flow)
                todo.extend(q for q, _ in self._uses[flow] if q not in part and self._load[q] > 1.0)
        order = sorted(flows)
        over = {r for r in part if self._load[r] > 1.0}
        if not over:
            speeds = [1.0] * len(order)
        else:
            demand = [[(r, u) for r, u in self._uses[f] if r in over] for f in order]
            speeds = fair_speeds_small(demand) if len(order) <= self._SMALL else fair_rates(demand)
        for flow, speed in zip(order, speeds, strict=True):
            if speed != self._speed[flow]:
                end = self.now + (self._end[flow] - self.now) * self._speed[flow] / speed
                self._speed[flow], self._end[flow] = speed, end
                heapq.heappush(self._heap, (end, flow))
