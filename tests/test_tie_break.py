"""The search's objective ranks plans of equal step bound by their schedule's own idle time (``cpsat.tie_break``)."""

from __future__ import annotations

import time

from ortools.sat.python import cp_model

from scaleacross_opt.optimizer.coefficients import build_coefficients, prune_space
from scaleacross_opt.optimizer.cpsat.build import build_model
from scaleacross_opt.optimizer.cpsat.degrees import schedule_runs
from scaleacross_opt.optimizer.cpsat.extract import identity_vars, plan_of
from scaleacross_opt.optimizer.cpsat.objective import HORIZON_US
from scaleacross_opt.optimizer.cpsat.tie_break import IDLE_UNITS
from scaleacross_opt.optimizer.refine import _Search, _solver
from scaleacross_opt.optimizer.space import Shape, design_space
from scaleacross_opt.schedules import get_schedule
from scaleacross_opt.spec import CrossBuilding, Recompute


def _model(instance):
    space = prune_space(instance, design_space(instance))
    return build_model(instance, space, build_coefficients(instance, space))


def _fix(model: cp_model.CpModel, lit: cp_model.IntVar) -> None:
    model.Add(model.get_int_var_from_proto_index(lit.Index()) == 1)


def test_the_tie_is_the_runs_order_idle(load_shipped_instance) -> None:
    """Each (schedule, v, pp, m) the model can run carries its order's idle fraction in 1/IDLE_UNITS."""
    pv = _model(load_shipped_instance("small-two-buildings-llama3-8b"))
    tie = pv.terms["tie_break"]
    runs = schedule_runs(pv)
    for index, name, v, pp, m in runs[:: max(1, len(runs) // 12)]:
        model = pv.model.clone()
        model.Add(model.get_int_var_from_proto_index(pv.schedule_index.Index()) == index)
        model.Add(model.get_int_var_from_proto_index(pv.pp_var.Index()) == pp)
        model.Add(model.get_int_var_from_proto_index(pv.microbatches.Index()) == m)
        solver = _solver(seed=0, workers=1, time_s=30)
        if solver.Solve(model) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            continue  # the run fits no plan here (memory, GPU counts)
        expected = round(IDLE_UNITS * get_schedule(name).order_idle_fraction(pp, v, m)) if pp > 1 else 0
        assert solver.Value(tie) == expected, (name, v, pp, m)


def test_least_idle_leads_a_round_with_dualpipe_and_restores_the_model(load_shipped_instance) -> None:
    """Campus 405B, tp2 cp8 pp32 dp32 with DP across: ZB-V and DualPipe have the same step bound (4.6716 s) and
    simulate 5.11 s and 4.93 s. From a round that found only the ZB-V plan, ``least_idle`` puts a DualPipe plan
    of that step first (its order idles (p − 1)·T at p = 32, the greedy ZB-V order 39·T), and leaves the
    model's objective (the step) and cuts as they were."""
    pv = _model(load_shipped_instance("two-buildings-campus-llama3-405b"))
    model = pv.model
    for lit in (pv.shape.lit(Shape(2, 8, 1, 1, Recompute.NONE)), pv.pp.lit(32), pv.dp.lit(32),
                pv.mode.lit(CrossBuilding.DP)):
        _fix(model, lit)
    model.AddBoolOr([pv.schedule_chunks.lit((name, 2)) for name in ("zb-v", "dualpipe")])
    steps, found = {}, {}
    for name in ("zb-v", "dualpipe"):
        only = model.clone()
        _fix(only, pv.schedule_chunks.lit((name, 2)))
        solver = _solver(seed=0, workers=2, time_s=60)
        assert solver.Solve(only) == cp_model.OPTIMAL
        steps[name] = solver.Value(pv.terms["step"])
        found[name] = {var.Index(): solver.Value(var) for var in identity_vars(pv)}
    assert steps["zb-v"] == steps["dualpipe"]
    objective = list(model.Proto().objective.vars)
    search = _Search(pv, lambda *_: None, time.perf_counter() + 60, 0, 2, None)
    led = search.least_idle([found["zb-v"]], steps["zb-v"], 10.0, 8)
    assert [plan_of(pv, assignment).schedule for assignment in led] == ["dualpipe", "zb-v"]
    assert list(model.Proto().objective.vars) == objective
    assert model.Proto().constraints[search.tie_cutoff].linear.domain[1] == HORIZON_US
