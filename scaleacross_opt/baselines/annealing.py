"""``annealing``: simulated annealing (Metropolis; Kirkpatrick et al., Science 1983) over the plan
neighbourhood (``optimizer.neighbourhood``), from the fastest production plan.

Each step draws a uniform random neighbour of the current plan and simulates it; a change Δ of the
step time is accepted when Δ ≤ 0, else with probability exp(−Δ / T). Temperature schedule: geometric
cooling from T0 = ``T0_FRACTION`` × the start plan's step time down to ``T_END_RATIO`` × T0 as the
budget is used, T = T0 · T_END_RATIO^u with u the used share of the budget (simulator calls when a call
budget is given — deterministic for a seed — else wall time). A plan without neighbours restarts the
walk from the best plan so far; ``MAX_REPEATS`` steps in a row to plans already simulated end it.
"""

from __future__ import annotations

import math
import random
import time

from ..optimizer.neighbourhood import neighbours
from ..optimizer.space import DesignSpace
from ..spec import Instance, Plan
from .evaluator import MAX_REPEATS, Evaluator
from .registry import register_search
from .start import start_plan

T0_FRACTION = 0.03  # a 3 % slower neighbour is accepted with probability 1/e at the start
T_END_RATIO = 1e-3  # at the end only changes below ~0.003 % of the start step are accepted at 1/e


def _budget_used(evaluator: Evaluator, started: float) -> float:
    """Share of the budget spent, in [0, 1]: calls when a call budget is set, else wall time."""
    if evaluator.max_calls is not None:
        return min(1.0, evaluator.calls / max(1, evaluator.max_calls))
    assert evaluator.deadline is not None
    return min(1.0, (time.perf_counter() - started) / max(1e-9, evaluator.deadline - started))


@register_search("annealing", "simulated annealing over plan neighbourhoods, geometric cooling from 3 % of "
                              "the start plan's step time")
def annealing(instance: Instance, space: DesignSpace, evaluator: Evaluator, seed: int) -> str | None:
    """Walk until the budget ends; the evaluator keeps the best plan."""
    started = time.perf_counter()
    rng = random.Random(seed)
    start = start_plan(instance, space, evaluator, rng)
    if start is None:
        return None
    plan, step = start
    t0 = T0_FRACTION * step
    cache: dict[str, list[Plan]] = {}
    repeats = 0
    while not evaluator.exhausted and repeats < MAX_REPEATS:
        key = plan.model_dump_json()
        options = cache.setdefault(key, neighbours(instance, space, plan))
        if not options:
            if evaluator.best is None or evaluator.best[0].model_dump_json() == key:
                return None  # an isolated plan: nothing left to try
            plan, step = evaluator.best[0], evaluator.best[1].step_time_s
            continue
        candidate = rng.choice(options)
        calls = evaluator.calls
        t = evaluator.evaluate(candidate)
        if t is None:
            break
        repeats = repeats + 1 if evaluator.calls == calls else 0
        temperature = t0 * T_END_RATIO ** _budget_used(evaluator, started)
        if t <= step or rng.random() < math.exp(-(t - step) / temperature):
            plan, step = candidate, t
    return None
