"""``random``: uniform random plans of the design space (``neighbourhood.random_plan``) under the
budget; the fastest simulated one wins. Deterministic for a seed under a call budget. Stops early when
``MAX_REPEATS`` draws in a row meet only plans already simulated (a tiny space is explored)."""

from __future__ import annotations

import random

from ..optimizer.neighbourhood import random_plan
from ..optimizer.space import DesignSpace
from ..spec import Instance
from .evaluator import MAX_REPEATS, Evaluator
from .registry import register_search

MAX_FAILED_DRAWS = 20  # consecutive random_plan failures before concluding that no plan can be drawn


@register_search("random", "random plans of the design space under the budget")
def random_search(instance: Instance, space: DesignSpace, evaluator: Evaluator, seed: int) -> str | None:
    """Draw and simulate until the budget ends (or no plan can be drawn)."""
    rng = random.Random(seed)
    failures = repeats = 0
    while not evaluator.exhausted and failures < MAX_FAILED_DRAWS and repeats < MAX_REPEATS:
        plan = random_plan(instance, space, rng)
        failures = failures + 1 if plan is None else 0
        calls = evaluator.calls
        if plan is not None:
            evaluator.evaluate(plan)
        repeats = repeats + 1 if evaluator.calls == calls else 0
    return None
