"""``one-at-a-time``: coordinate descent on the simulator, as an engineer tunes by hand.

From the fastest production plan, optimise one block of decisions with the others fixed — placement
(degrees, EP, the cross-building dimension and split), then schedule (schedule and v, micro-batch,
recompute, ZeRO, TP overlap), then network — each by steepest descent over that block's moves
(``optimizer.neighbourhood``) until no move improves; repeat the passes until a whole pass improves
nothing or the budget ends. Deterministic (the seed only matters when production has no plan).
"""

from __future__ import annotations

import random

from ..optimizer.neighbourhood import Move, neighbours
from ..optimizer.space import DesignSpace
from ..spec import Instance
from .evaluator import Evaluator
from .registry import register_search
from .start import start_plan


@register_search("one-at-a-time", "coordinate descent: placement, then schedule, then network, each with the "
                                  "others fixed, repeated until no pass improves")
def one_at_a_time(instance: Instance, space: DesignSpace, evaluator: Evaluator, seed: int) -> str | None:
    """Run the descent; the evaluator keeps the best plan."""
    start = start_plan(instance, space, evaluator, random.Random(seed))
    if start is None:
        return None
    plan, step = start
    improved = True
    while improved and not evaluator.exhausted:
        improved = False
        for block in Move:
            while not evaluator.exhausted:
                timed = [(t, candidate.model_dump_json(), candidate)
                         for candidate in neighbours(instance, space, plan, (block,))
                         if (t := evaluator.evaluate(candidate)) is not None]
                best = min(timed, default=None)
                if best is None or best[0] >= step:
                    break
                step, _, plan = best
                improved = True
    return None
