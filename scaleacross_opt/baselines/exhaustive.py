"""``exhaustive``: every plan of the planner's space (``optimizer.enumerate``), validated and
simulated — the ground truth where the space is small. A space of more than ``MAX_PLANS`` plans (or
more than ``MAX_PLANS`` combinations of options before placements, which only multiply them) is
reported as too large without simulating anything; a budget that ends before the last plan leaves the
best so far, marked incomplete."""

from __future__ import annotations

from itertools import islice

from ..optimizer.enumerate import enumerate_plans
from ..optimizer.space import DesignSpace
from ..spec import Instance
from ..validation.plan_checks import validate_plan
from .evaluator import Evaluator
from .registry import register_search

MAX_PLANS = 20_000  # ~10 ms of simulation each: a few minutes at most


@register_search("exhaustive", f"every plan of the space, when it has at most {MAX_PLANS:,}")
def exhaustive(instance: Instance, space: DesignSpace, evaluator: Evaluator, seed: int) -> str | None:
    """Simulate every valid plan; a reason when the space is too large or the budget ends first."""
    too_large = (f"space too large (more than {MAX_PLANS:,} plans; {space.size():,} combinations of options "
                 "before placements and layer splits)")
    if space.size() > MAX_PLANS:
        return too_large
    plans = list(islice(enumerate_plans(instance, space), MAX_PLANS + 1))
    if len(plans) > MAX_PLANS:
        return too_large
    for done, plan in enumerate(plans):
        if not validate_plan(plan, instance) and evaluator.evaluate(plan) is None:
            return f"incomplete: the budget ended after {done:,} of {len(plans):,} plans"
    return None
