"""Simulator-driven local search: the polishing half of the hybrid search.

``climb`` is best-improvement hill climbing over ``optimizer.neighbourhood.neighbours`` (one degree pair,
the schedule, v, micro-batch, recompute, ZeRO stage, the cross-building dimension or split, one network
option): every unseen neighbour is simulated, the best one is taken while it beats the current plan,
and the climb ends at a local optimum or the deadline. Neighbours are simulated in the order of a faster
model's floor (the closed form less its largest overshoot), so the best is usually found first and the rest,
which that model shows cannot beat it, are skipped unsimulated (in turn instead, when reading every floor
first would pass the deadline). ``kick`` perturbs a plan by random moves (the
restart step of iterated local search). Plans are compared by simulated step time, ties broken by
canonical JSON, so the result does not depend on the order of evaluation.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..cost.report import StepReport
from ..spec import Instance, Plan
from .neighbourhood import neighbours
from .space import DesignSpace


@dataclass
class Candidate:
    """One simulated plan and its CP-SAT bound (s; 0 when not computed)."""

    plan: Plan
    bound_s: float
    report: StepReport

    def key(self) -> tuple[float, str]:
        """Sort key: simulated step, then canonical JSON."""
        return self.report.step_time_s, self.plan.model_dump_json()


# Evaluates a plan once (simulation, bookkeeping); later calls for the same plan return the stored result;
# None: the plan could not be evaluated in time (it is passed over).
Evaluate = Callable[[Plan], Candidate | None]


def climb(instance: Instance, space: DesignSpace, start: Candidate, evaluate: Evaluate, deadline: float,
          floor: Callable[[Plan], float] | None = None) -> Candidate:
    """Best-improvement hill climbing from ``start`` until no neighbour is better or ``deadline``
    (a ``time.perf_counter()`` value) passes. ``floor(plan)``: a step time (s) ``plan`` cannot beat (0 when
    unknown, inf when it cannot be told in time); a neighbour whose floor exceeds the best step found so far is
    not simulated. A step first reads every neighbour's floor and simulates them in floor order, stopping at the
    first that cannot win, so (while the floors hold) it takes the neighbour simulating them all would; when
    reading them all would not end before ``deadline`` at the pace of the first ones (1M GPUs: ~1,000
    neighbours at ~24 ms), it reads and simulates them in turn instead."""
    current = start
    while time.perf_counter() < deadline:
        best = current
        options = neighbours(instance, space, current.plan)
        ranked = _floor_order(options, floor, deadline) if floor is not None else None
        if ranked == []:  # no neighbour, or the deadline passed while reading their floors
            return current
        for plan in ranked or options:
            if time.perf_counter() >= deadline:
                return min(best, current, key=Candidate.key)
            if floor is not None and floor(plan) > best.report.step_time_s:
                if ranked:
                    break  # every later neighbour's floor is as high
                continue
            candidate = evaluate(plan)
            if candidate is not None and candidate.key() < best.key():
                best = candidate
        if best is current:
            break
        current = best
    return current


def _floor_order(options: list[Plan], floor: Callable[[Plan], float], deadline: float) -> list[Plan] | None:
    """``options`` sorted by ``floor`` (stable: ties keep the neighbourhood's order); [] if ``deadline`` passed
    while reading the floors, None if reading them all would not end before it at the pace so far."""
    floors: list[float] = []
    began = time.perf_counter()
    for plan in options:
        now = time.perf_counter()
        if now >= deadline:
            return []
        if floors and (now - began) / len(floors) * len(options) > deadline - began:
            return None
        floors.append(floor(plan))
    # floors are read again before each simulation: what they subtract for the faster model's error only grows
    return [plan for _, plan in sorted(zip(floors, options, strict=True), key=lambda pair: pair[0])]


def kick(instance: Instance, space: DesignSpace, plan: Plan, rng: random.Random, moves: int = 2) -> Plan | None:
    """``plan`` after ``moves`` random neighbourhood moves (None if a plan on the way has no neighbour)."""
    for _ in range(moves):
        options = neighbours(instance, space, plan)
        if not options:
            return None
        plan = rng.choice(options)
    return plan
