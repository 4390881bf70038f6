"""Degree constraints: tp·cp·pp·dp = N, m·dp·mbs = global batch, EP nesting, shape channelling,
and the schedule table (which (schedule, v, pp, m) run, and their activations in flight)."""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from ...schedules import get_schedule
from .variables import PlanVars

IN_FLIGHT_SCALE = 100  # in-flight micro-batches are tabulated ×100 to stay integral


@dataclass(frozen=True)
class InFlight:
    """Activations in flight (micro-batches × IN_FLIGHT_SCALE, through all of a stage's layers) of the chosen
    (schedule, v, pp, m): on the worst stage, and a lower bound of the least-loaded stage's; with their
    largest values."""

    worst: cp_model.IntVar
    worst_max: int
    least: cp_model.IntVar
    least_max: int


def _product(model: cp_model.CpModel, name: str, a: cp_model.IntVar, b: cp_model.IntVar, upper: int) -> cp_model.IntVar:
    out = model.NewIntVar(0, upper, name)
    model.AddMultiplicationEquality(out, [a, b])
    return out


def add_degree_constraints(pv: PlanVars) -> InFlight:
    """Post the degree constraints; returns the activations in flight of the chosen schedule."""
    model, instance = pv.model, pv.instance
    n = instance.num_gpus
    gbs = instance.job.global_batch_size
    tc = _product(model, "tp*cp", pv.tp_var, pv.cp_var, n)
    replica = _product(model, "tp*cp*pp", tc, pv.pp_var, n)
    model.AddMultiplicationEquality(n, [replica, pv.dp_var])
    dp_mbs = _product(model, "dp*mbs", pv.dp_var, pv.micro_batch_var, gbs)
    model.AddMultiplicationEquality(gbs, [pv.microbatches, dp_mbs])
    # EP groups are made of dp·cp ranks.
    if max(pv.space.ep) > 1:
        dpcp = _product(model, "dp*cp", pv.dp_var, pv.cp_var, n)
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
        schedule = get_schedule(name)
        worst = schedule.in_flight_microbatches(pp, v, m)
        least = schedule.least_in_flight_microbatches(pp, v, m)
        rows.append((index, pp, m, int(worst * IN_FLIGHT_SCALE + 0.999), int(least * IN_FLIGHT_SCALE)))
    if not rows:
        model.AddBoolOr([])  # nothing can run: infeasible
        zero = model.NewConstant(0)
        return InFlight(zero, 0, zero, 0)
    index = pv.schedule_index = model.NewIntVar(0, len(pv.schedule_chunks.values) - 1, "schedule_index")
    model.Add(index == pv.schedule_chunks.linear(list(range(len(pv.schedule_chunks.values)))))
    worst_max, least_max = max(r[3] for r in rows), max(r[4] for r in rows)
    worst = model.NewIntVar(0, worst_max, "in_flight_x100")
    least = model.NewIntVar(0, least_max, "least_in_flight_x100")
    model.AddAllowedAssignments([index, pv.pp_var, pv.microbatches, worst, least], rows)
    return InFlight(worst, worst_max, least, least_max)
