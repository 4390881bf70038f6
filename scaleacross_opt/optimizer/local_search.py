"""Simulator-driven local search: the polishing half of the hybrid search.

``climb`` is best-improvement hill climbing over ``optimizer.neighbourhood.neighbours`` (one degree pair,
the schedule, v, micro-batch, recompute, ZeRO stage, the cross-building dimension or split, one network
option): every unseen neighbour is simulated, the best one is taken while it beats the current plan,
and the climb ends at a local optimum or the deadline; a neighbour a faster model shows cannot beat the
best so far is skipped unsimulated. ``kick`` perturbs a plan by random moves (the
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
          hopeless: Callable[[Plan, float], bool] | None = None) -> Candidate:
    """Best-improvement hill climbing from ``start`` until no neighbour is better or ``deadline``
    (a ``time.perf_counter()`` value) passes. ``hopeless(plan, s)``: True when ``plan`` cannot take less
    than ``s`` seconds (such neighbours are not evaluated)."""
    current = start
    while time.perf_counter() < deadline:
        best = current
        for plan in neighbours(instance, space, current.plan):
            if time.perf_counter() >= deadline:
                return min(best, current, key=Candidate.key)
            if hopeless is not None and hopeless(plan, best.report.step_time_s):
                continue
            candidate = evaluate(plan)
            if candidate is not None and candidate.key() < best.key():
                best = candidate
        if best is current:
            break
        current = best
    return current


def kick(instance: Instance, space: DesignSpace, plan: Plan, rng: random.Random, moves: int = 2) -> Plan | None:
    """``plan`` after ``moves`` random neighbourhood moves (None if a plan on the way has no neighbour)."""
    for _ in range(moves):
        options = neighbours(instance, space, plan)
        if not options:
            return None
        plan = rng.choice(options)
    return plan
