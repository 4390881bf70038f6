"""Where the local searches (one-at-a-time, annealing) start: the fastest production plan, as a team
tuning its current configuration would; a random plan when production has none."""

from __future__ import annotations

import random

from ..optimizer.neighbourhood import random_plan
from ..optimizer.space import DesignSpace
from ..spec import Instance, Plan
from .evaluator import Evaluator
from .production import production_plans


def start_plan(instance: Instance, space: DesignSpace, evaluator: Evaluator,
               rng: random.Random) -> tuple[Plan, float] | None:
    """The start plan and its simulated step time (None: no plan found, or the budget is spent)."""
    timed = [(t, plan.model_dump_json(), plan) for plan in production_plans(instance, space)
             if (t := evaluator.evaluate(plan)) is not None]
    if not timed:
        plan = random_plan(instance, space, rng)
        t = evaluator.evaluate(plan) if plan is not None else None
        return None if plan is None or t is None else (plan, t)
    t, _, plan = min(timed)
    return plan, t
