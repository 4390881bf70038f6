"""Step models under a deadline, for searches with a time limit.

A plan of millions of ops (a large batch over few replicas: m in the thousands) takes seconds to price by
the closed form and tens of seconds to simulate, and both build the schedule's op order before any event
loop can read the clock. ``Paced`` wraps either model, keeps the fastest pace (wall seconds per op) it has
seen, and refuses at once a plan whose ops could not all be priced before the deadline at that pace; a
simulation it starts stops at the deadline (``engine``'s event loops read the clock). Either way it
raises ``SimulationDeadlineError``. The simulator's ``Paced`` reuses the reports of identical workloads
(``simulator.memo``); a reuse teaches it no pace.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING

from ..errors import SimulationDeadlineError
from .memo import SimulationMemo

if TYPE_CHECKING:
    from ..cost.report import StepReport
    from ..spec.instance import Instance
    from ..spec.plan import Plan

TimedEvaluate = Callable[["Instance", "Plan", "float | None"], "StepReport"]  # (instance, plan, deadline)


def op_count(instance: Instance, plan: Plan) -> int:
    """Compute ops ``simulate`` times per op order: F, B (and W where the schedule splits the backward) of
    every micro-batch and chunk on every stage of every pipeline group (its ``details["simulated_ops"]``),
    from the resolved plan alone (a small share of the cost of pricing the plan)."""
    from ..cost.layout import resolve
    from ..plan_defaults import fill_defaults
    from ..schedules import get_schedule

    plan = fill_defaults(instance, plan)
    layout = resolve(instance, plan)
    kinds = 3 if get_schedule(plan.schedule).splits_backward else 2
    return kinds * plan.pp * plan.virtual_stages * layout.num_microbatches * len(layout.pipelines)


def _simulate(instance: Instance, plan: Plan, deadline: float | None, memo: SimulationMemo) -> StepReport:
    from . import simulate

    return simulate(instance, plan, deadline=deadline, memo=memo)


def _estimate(instance: Instance, plan: Plan, deadline: float | None) -> StepReport:
    from ..cost.step import estimate

    return estimate(instance, plan)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a plan is priced. Pricing allocates hundreds of thousands
    of short-lived containers, all freed by reference counting and in no cycle, yet their count triggers
    collections, many of them of the whole heap, which grows with what the process holds: on MoE 2.3 s of a
    30 s search in 32 full collections, 3.4 s in a process that solved other instances before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Paced:
    """``evaluate(instance, plan, deadline)`` that refuses a plan it cannot finish in time (module
    docstring); one per search (it learns the machine's pace from the plans it prices)."""

    def __init__(self, evaluate: TimedEvaluate, memo: SimulationMemo | None = None):
        self.evaluate = evaluate
        self.memo = memo  # the memo ``evaluate`` reuses reports from, if any
        self.seconds_per_op = math.inf  # fastest pace seen (inf: none yet, every plan is tried)

    @classmethod
    def simulator(cls) -> Paced:
        """The discrete-event simulator, stopped at the deadline, reusing identical workloads' reports."""
        memo = SimulationMemo()
        return cls(partial(_simulate, memo=memo), memo)

    @property
    def reused(self) -> int:
        """Plans whose report came from the memo instead of a simulation."""
        return 0 if self.memo is None else self.memo.reused

    @classmethod
    def closed_form(cls) -> Paced:
        """The closed-form estimate (which runs to its end once started)."""
        return cls(_estimate)

    def __call__(self, instance: Instance, plan: Plan, deadline: float | None = None) -> StepReport:
        ops = op_count(instance, plan)
        start = time.perf_counter()
        if deadline is not None and math.isfinite(self.seconds_per_op) and start + self.seconds_per_op * ops > deadline:
            raise SimulationDeadlineError(f"{ops:,} ops cannot be priced before the deadline at "
                                          f"{1e6 * self.seconds_per_op:.2f} µs per op")
        reused = self.reused
        with _collector_paused():
            report = self.evaluate(instance, plan, deadline)
        if self.reused == reused:
            self.seconds_per_op = min(self.seconds_per_op, (time.perf_counter() - start) / ops)
        return report
