"""Ranking plans whose step bounds tie: the idle time of the schedule's own op order.

The step bound charges a V-shaped schedule's fill as a chain (``objective``), not what its op order idles,
so plan families with the same bound can simulate apart. Campus 405B: ZB-V and DualPipe at tp2 cp8 pp32
dp32 with DP across are both bounded at 4.6716 s and simulate 5.11 s and 4.93 s; at p = 32 the greedy
ZB-V order idles 39·T with unit op times where DualPipe's idles 31·T. A round that met only the ZB-V
family proposed only its plans.

``tie`` is ``PipelineSchedule.order_idle_fraction`` of the plan's schedule, v, pp and m in 1/1000. After a
round's solve, a short second solve (``refine._Search.least_idle``) minimises it among the plans of the
round's best step and puts the plan it finds first among the round's candidates. Minimising step and tie in
one objective (1024·step + tie) did the same but made the proofs slower: the solve must exhaust the plans of
the optimal step before it can close the tie (36th session, 30 s: hetero 405B's proven gap 3–4 % → 20–22 %
and its answer 6.53 → 6.60–6.75 s; five buildings' rounds 13.6 s instead of 5–11 s).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from ...schedules import get_schedule
from .degrees import schedule_runs
from .variables import PlanVars

IDLE_UNITS = 1000  # tie = idle fraction × IDLE_UNITS


def add_tie_break(pv: PlanVars) -> cp_model.IntVar:
    """The tie variable: the order idle of the plan's schedule, v, pp and m, from a table over every
    combination that can run (0 at pp = 1)."""
    model = pv.model
    rows = []
    for index, name, v, pp, m in schedule_runs(pv):
        fraction = get_schedule(name).order_idle_fraction(pp, v, m) if pp > 1 else 0.0
        rows.append((index, pp, m, round(IDLE_UNITS * fraction)))
    tie = model.NewIntVar(0, max((row[3] for row in rows), default=0), "schedule_order_idle_tie")
    if rows and tie.domain.max() > 0:
        model.AddAllowedAssignments([pv.schedule_index, pv.pp_var, pv.microbatches, tie], rows)
    return tie
