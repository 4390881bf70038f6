"""The pipeline's critical path counted in ops.

Each stage runs its ops in order and an op waits for the op whose output it needs, so the simulated pipeline
lasts at least as long as any path of the step's op graph, transfers and waits only adding to it. Every F op of
any stage and chunk lasts at least F_min, every B op at least B_min (``pipeline_chains.least_ops``: the fewest layers a
chunk holds at the least per-layer pass of any building), so a path holding n_F forward and n_B backward ops
gives

    pipeline ≥ n_F · F_min + n_B · B_min,

n_F, n_B from ``PipelineSchedule.critical_path_ops`` (m·v + p − 1 of each for the fixed orders; the window
schedule adds p − 1 backward ops at each of its m/p − 1 window switches; ZB-V, whose order follows the op
durations, 2m + p − 1 of each through its tip stage's whole stream, a path any of its orders holds). Where a
layer's passes are longer than its share of the stage's work suggests — ZeRO-3 gathers that outlast the
compute make W negligible, so a zero-bubble order keeps 1F1B's bubble — this is the term that sees it; the
bottleneck-stage chains see the rest.
W ops are not counted (a lower bound).
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from ...schedules import get_schedule
from .degrees import schedule_runs
from .variables import PlanVars


def critical_path_ops(pv: PlanVars) -> tuple[cp_model.IntVar, cp_model.IntVar] | None:
    """(n_F, n_B) of the plan's schedule, v, pp and m, from a table over every combination that can run (0 where
    the schedule states none, or pp = 1); None when no combination has a path to count."""
    model = pv.model
    rows = []
    for index, name, v, pp, m in schedule_runs(pv):
        counts = get_schedule(name).critical_path_ops(pp, v, m) if pp > 1 else None
        rows.append((index, pp, m, *(counts or (0, 0))))
    most = max((max(row[3:]) for row in rows), default=0)
    if most == 0:
        return None
    forward, backward = (model.NewIntVar(0, most, f"critical_path_{kind}_ops") for kind in ("forward", "backward"))
    model.AddAllowedAssignments([pv.schedule_index, pv.pp_var, pv.microbatches, forward, backward], rows)
    return forward, backward
