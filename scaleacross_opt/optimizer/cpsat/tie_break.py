"""Ranking plans whose step bounds tie: the idle time of the schedule's own op order.

The step bound charges a V-shaped schedule's fill as a chain (``objective``), not what its op order idles,
so plan families with the same bound can simulate apart. Campus 405B: ZB-V and DualPipe at tp2 cp8 pp32
dp32 with DP across are both bounded at 4.6716 s and simulate 5.11 s and 4.93 s; at p = 32 the greedy
ZB-V order idles 39·T with unit op times where DualPipe's idles 31·T. A round that met only the ZB-V
family proposed only its plans.

The search therefore minimises RANK·step + tie with 0 ≤ tie < RANK: the step first, then, among plans
with the same step, the one whose schedule's unit-time order idles least. ``tie`` is
``PipelineSchedule.order_idle_fraction`` in 1/1000, capped at RANK − 1. A bound B of that objective
bounds the step by ⌊B / RANK⌋, since step ≥ (B − tie) / RANK > B / RANK − 1 and the step is an integer.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from ...schedules import get_schedule
from .degrees import schedule_runs
from .variables import PlanVars

RANK = 1024  # the step's weight: larger than any tie
IDLE_UNITS = 1000  # tie = idle fraction × IDLE_UNITS


def add_tie_break(pv: PlanVars) -> cp_model.IntVar:
    """The tie variable: the order idle of the plan's schedule, v, pp and m, from a table over every
    combination that can run (0 at pp = 1)."""
    model = pv.model
    rows = []
    for index, name, v, pp, m in schedule_runs(pv):
        fraction = get_schedule(name).order_idle_fraction(pp, v, m) if pp > 1 else 0.0
        rows.append((index, pp, m, min(RANK - 1, round(IDLE_UNITS * fraction))))
    tie = model.NewIntVar(0, max((row[3] for row in rows), default=0), "schedule_order_idle_tie")
    if rows and tie.domain.max() > 0:
        model.AddAllowedAssignments([pv.schedule_index, pv.pp_var, pv.microbatches, tie], rows)
    return tie


def ranked_objective(pv: PlanVars) -> cp_model.LinearExpr:
    """RANK·step + tie: the search's objective (``refine``)."""
    return RANK * pv.terms["step"] + pv.terms["tie_break"]


def step_bound_us(objective_bound: float) -> int:
    """The step bound (µs) a bound of ``ranked_objective`` gives: ⌊B / RANK⌋."""
    return int(objective_bound // RANK)
