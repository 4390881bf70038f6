"""Degree constraints: tp·cp·pp·dp = N, m·dp·mbs = global batch, EP nesting, shape channelling,
and the schedule table (which (schedule, v, pp, m) run, and their activations in flight)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ...cost.memory import stage_in_flight
from ...schedules import get_schedule
from .terms import exact_product
from .variables import PlanVars

IN_FLIGHT_SCALE = 100  # in-flight micro-batches are tabulated ×100 to stay integral


@dataclass(frozen=True)
class InFlight:
    """Activations in flight (micro-batches × IN_FLIGHT_SCALE, through all of a stage's layers) of the chosen
    (schedule, v, pp, m): on the worst stage, a lower bound of the least-loaded stage's, with their largest
    values, and the decline per stage (``in_flight_row``)."""

    worst: cp_model.IntVar
    worst_max: int
    least: cp_model.IntVar
    least_max: int
    decline: cp_model.IntVar
    decline_max: int


def in_flight_row(name: str, pp: int, v: int, m: int) -> tuple[int, int, int]:
    """(worst, least, decline) × IN_FLIGHT_SCALE from the cost model's per-stage in-flight micro-batches f(s)
    (``cost.memory.stage_in_flight``, the figures the validator's memory check uses): worst = ⌈max f⌉, least =
    ⌊min f⌋, and the least decline d ≥ 0 with f(s) ≥ worst − d·s for every stage s ≥ 1 (interleaved 1F1B's
    stages hold 2/v fewer micro-batches each, where worst·(p − s)/p would say (v + 1)/v). A stage s at or
    after the first holds at least worst − d·s where stage 0 holds the worst (every schedule that is not
    V-shaped)."""
    held = stage_in_flight(name, pp, v, m)
    flights = [math.floor(IN_FLIGHT_SCALE * f + 1e-9) for f in held]
    worst = math.ceil(IN_FLIGHT_SCALE * max(held) - 1e-9)
    decline = max([math.ceil((worst - f) / s) for s, f in enumerate(flights) if s > 0], default=0)
    return worst, min(flights), max(0, decline)


def add_degree_constraints(pv: PlanVars) -> InFlight:
    """Post the degree constraints; returns the activations in flight of the chosen schedule."""
    model, instance = pv.model, pv.instance
    n = instance.num_gpus
    gbs = instance.job.global_batch_size
    tc = exact_product(model, "tp*cp", pv.tp_var, pv.cp_var, n)
    replica = exact_product(model, "tp*cp*pp", tc, pv.pp_var, n)
    model.AddMultiplicationEquality(n, [replica, pv.dp_var])
    dp_mbs = exact_product(model, "dp*mbs", pv.dp_var, pv.micro_batch_var, gbs)
    model.AddMultiplicationEquality(gbs, [pv.microbatches, dp_mbs])
    # EP groups are made of dp·cp ranks.
    if max(pv.space.ep) > 1:
        dpcp = exact_product(model, "dp*cp", pv.dp_var, pv.cp_var, n)
        model.AddModuloEquality(0, dpcp, pv.ep_var)
    # The shape literal is the conjunction of its parts: each part's literal is the sum of its shapes.
    shapes = pv.shape.values
    for choice, attr in ((pv.tp, "tp"), (pv.cp, "cp"), (pv.ep, "ep"), (pv.micro_batch, "micro_batch_size"),
                         (pv.recompute, "recompute")):
        for value, lit in zip(choice.values, choice.lits, strict=True):
            model.Add(lit == sum(pv.shape.lits[i] for i, s in enumerate(shapes) if getattr(s, attr) == value))
    return _add_schedule_table(pv)


def schedule_runs(pv: PlanVars) -> list[tuple[int, str, int, int, int]]:
    """(schedule-chunk index, schedule, v, pp, m) of every combination that can run: pp·v ≤ the model's layers
    and the schedule accepts (pp, v, m). Tables keyed by these rows must list them all."""
    return [(index, name, v, pp, m) for index, (name, v) in enumerate(pv.schedule_chunks.values)
            for pp in pv.pp.values for m in pv.microbatch_values
            if pp * v <= pv.instance.job.model_spec.layers and get_schedule(name).check(pp, v, m) is None]


def _add_schedule_table(pv: PlanVars) -> InFlight:
    """Allowed (schedule-chunk index, pp, m) triples with the schedule's in-flight micro-batches."""
    model = pv.model
    rows = []
    for index, name, v, pp, m in schedule_runs(pv):
        rows.append((index, pp, m, *in_flight_row(name, pp, v, m)))
    if not rows:
        model.AddBoolOr([])  # nothing can run: infeasible
        zero = model.NewConstant(0)
        return InFlight(zero, 0, zero, 0, zero, 0)
    index = pv.schedule_index = model.NewIntVar(0, len(pv.schedule_chunks.values) - 1, "schedule_index")
    model.Add(index == pv.schedule_chunks.linear(list(range(len(pv.schedule_chunks.values)))))
    worst_max, least_max, decline_max = (max(r[column] for r in rows) for column in (3, 4, 5))
    worst = model.NewIntVar(0, worst_max, "in_flight_x100")
    least = model.NewIntVar(0, least_max, "least_in_flight_x100")
    decline = model.NewIntVar(0, decline_max, "in_flight_decline_per_stage_x100")
    model.AddAllowedAssignments([index, pv.pp_var, pv.microbatches, worst, least, decline], rows)
    return InFlight(worst, worst_max, least, least_max, decline, decline_max)
