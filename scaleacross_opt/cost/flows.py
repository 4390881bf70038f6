"""Fair sharing of resources by concurrent flows: the network model of the simulator, and of the closed form
inside one op (``cost.op_sharing``).

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
    its speed does. One event costs time in proportion to the flows of its part. A resource that was not
    overfull at its last refresh and is not now bounds no flow before or after the change: it starts no part
    (its flows' other resources were touched too).
    """

    _SMALL = 40  # parts up to this many flows are filled in plain Python (faster there), larger ones with numpy

    def __init__(self, resources: Collection[Hashable] | None = None) -> None:
        self.now = 0.0
        self._only = None if resources is None else set(resources)
        self._column: dict[Hashable, int] = {}
        self._load: list[float] = []  # Σ demand of the flows in progress, per resource
        self._over: list[bool] = []  # per resource: overfull (load > 1) at its part's last refresh
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
        only, column = self._only, self._column
        for resource, u in uses:
            if u <= 0 or (only is not None and resource not in only):
                continue
            r = column.get(resource)
            if r is None:
                r = column[resource] = len(self._load)
                self._load.append(0.0)
                self._over.append(False)
                self._on.append(set())
            demand[r] = demand.get(r, 0.0) + u
        if demand:
            self._uses[flow] = items = list(demand.items())
            load, on, touched = self._load, self._on, self._touched
            for r, u in items:
                load[r] += u
                on[r].add(flow)
                touched.add(r)
        else:
            self._uses[flow] = []
        end = self.now + alone_s
        self._end[flow], self._speed[flow], self._key[flow] = end, 1.0, key
        heapq.heappush(self._heap, (end, flow))

    def next_finish(self) -> float:
        """When the first flow in progress ends at today's speeds (∞ when none)."""
        if self._touched:
            self._refresh()
        heap, ends = self._heap, self._end
        while heap and ends.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def advance(self, t: float) -> list[Hashable]:
        """Move on to time ``t`` (≤ ``next_finish()``); return the flows that ended by then, in start order
        (a flow too short to move the clock still ends)."""
        if self._touched:
            self._refresh()
        self.now = t
        heap, ends = self._heap, self._end
        ended = []
        while heap and heap[0][0] <= t:
            end, flow = heapq.heappop(heap)
            if ends.get(flow) == end:  # not stale (an end that moved and came back has two entries)
                ended.append(flow)
        if len(ended) > 1:
            ended = sorted(set(ended))
        load, on, touched = self._load, self._on, self._touched
        for flow in ended:
            del ends[flow], self._speed[flow]
            for r, u in self._uses.pop(flow):
                load[r] -= u
                on[r].discard(flow)
                touched.add(r)
        return [self._key.pop(flow) for flow in ended]

    def _refresh(self) -> None:
        """New fair speeds for the parts of the graph holding the touched resources that are or were overfull;
        ends move with the speeds (the work left at full speed, (end − now)·speed, is kept)."""
        load, over_flag, on, uses = self._load, self._over, self._on, self._uses
        todo = [r for r in self._touched if over_flag[r] or load[r] > 1.0]
        self._touched = set()
        if not todo:
            return
        part: set[int] = set()
        flows: set[int] = set()
        while todo:  # grow the part: the flows on its resources, and the overfull resources they cross
            r = todo.pop()
            if r in part:
                continue
            part.add(r)
            for flow in on[r] - flows:
                flows.add(flow)
                todo.extend(q for q, _ in uses[flow] if q not in part and load[q] > 1.0)
        over = set()
        for r in part:
            over_flag[r] = load[r] > 1.0
            if over_flag[r]:
                over.add(r)
        order = sorted(flows)
        if not over:
            speeds = [1.0] * len(order)
        else:
            demand = [[(r, u) for r, u in uses[f] if r in over] for f in order]
            speeds = fair_speeds_small(demand) if len(order) <= self._SMALL else fair_rates(demand)
        now, speed_of, ends, heap = self.now, self._speed, self._end, self._heap
        for flow, speed in zip(order, speeds, strict=True):
            old = speed_of[flow]
            if speed != old:
                end = now + (ends[flow] - now) * old / speed
                speed_of[flow], ends[flow] = speed, end
                heapq.heappush(heap, (end, flow))
