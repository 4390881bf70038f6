"""The simulator under a budget, as the search baselines use it: counts calls, caches, keeps the best.

One ``Evaluator`` per baseline run. A plan is simulated once (repeats are free and not counted);
ties in step time are broken by the plan's canonical JSON, as ``solve`` breaks them, so a run is
deterministic when its call budget, not the wall clock, ends it.
"""

from __future__ import annotations

import time

from ..cost.report import StepReport
from ..errors import SimulationDeadlineError
from ..simulator.paced import Paced
from ..spec import Instance, Plan

# Draws in a row that meet only plans already simulated: a random search stops, the space it can
# reach is explored (otherwise a tiny space would keep it busy until its wall budget ends).
MAX_REPEATS = 2000


class Evaluator:
    """Simulated step times under a budget of ``max_calls`` simulations and a ``deadline``
    (``time.perf_counter()`` value); None means unlimited."""

    def __init__(self, instance: Instance, *, deadline: float | None, max_calls: int | None):
        self.instance = instance
        self.simulate = Paced.simulator()
        self.deadline = deadline
        self.max_calls = max_calls
        self.calls = 0
        self.best: tuple[Plan, StepReport] | None = None
        self._seen: dict[str, float] = {}

    @property
    def exhausted(self) -> bool:
        """True once the call budget is spent or the deadline has passed."""
        return ((self.max_calls is not None and self.calls >= self.max_calls)
                or (self.deadline is not None and time.perf_counter() >= self.deadline))

    def evaluate(self, plan: Plan) -> float | None:
        """Simulated step time of ``plan`` (a valid plan), or None when the budget is spent (also when its
        simulation runs past the deadline)."""
        key = plan.model_dump_json()
        if key in self._seen:
            return self._seen[key]
        if self.exhausted:
            return None
        try:  # the first plan runs to its end; the others stop at the deadline (which spends the budget)
            report = self.simulate(self.instance, plan, None if self.best is None else self.deadline)
        except SimulationDeadlineError:
            return None
        self.calls += 1
        self._seen[key] = report.step_time_s
        if self.best is None or (report.step_time_s, key) < (self.best[1].step_time_s,
                                                              self.best[0].model_dump_json()):
            self.best = (plan, report)
        return report.step_time_s
