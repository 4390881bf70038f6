"""The CP-SAT solve that bounds every unexamined plan must not cut off a plan the model admits.

The search trusts the optimum of each round as a lower bound of every plan still in the model; a solver
that proves a value the model's own solutions beat makes `solve` prune plans and report false gaps.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from scaleacross_opt.optimizer.coefficients import build_coefficients, prune_space
from scaleacross_opt.optimizer.cpsat.build import build_model
from scaleacross_opt.optimizer.cpsat.extract import plan_assignment
from scaleacross_opt.optimizer.refine import _solver
from scaleacross_opt.optimizer.space import design_space
from scaleacross_opt.spec import Plan
from scaleacross_opt.validation.plan_checks import validate_plan

# A plan the MoE model admits and the validator accepts (78.2 of 80 GiB). OR-Tools 9.15's presolve inclusion
# detection once proved the full model's optimum 36 % above an admitted plan's objective, i.e. cut it off.
MOE_PLAN = {
    "tp": 1, "cp": 1, "pp": 16, "dp": 128, "ep": 16, "virtual_stages": 2, "micro_batch_size": 1,
    "schedule": "dualpipe", "recompute": "selective", "zero_stage": 1, "dp_sync": "overlap-backward",
    "tp_comm_overlap": True,
    "placement": {"cross_building": "pp", "layers_per_stage": [2, 3] + [4] * 14, "buildings": [
        {"building": "bldg-a", "group": 0, "dp_replicas": 128, "pp_stages": 8},
        {"building": "bldg-b", "group": 0, "dp_replicas": 128, "pp_stages": 8}]},
    "network": {
        "intra_building": {"collective_algorithm": "pat", "load_balancing": "packet_spraying",
                           "congestion_control": "dcqcn", "loss_recovery": "selective_repeat",
                           "qps_per_connection": 1, "window_kib_per_qp": 4096},
        "cross_building": {"collective_algorithm": "ring", "load_balancing": "packet_spraying",
                           "congestion_control": "receiver_driven", "loss_recovery": "selective_repeat",
                           "qps_per_connection": 16, "window_kib_per_qp": 65536}},
}


def test_round_optimum_is_no_higher_than_an_admitted_plans_bound(load_shipped_instance) -> None:
    """The refinement's solver settings (``refine._solver``) give an optimum of the whole model that is at
    most the objective of one plan it admits; with the presolve's inclusion detection on, it was 36 % above."""
    instance = load_shipped_instance("moe-deepseek-v3-h800")
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    plan = Plan.model_validate(MOE_PLAN)
    assert not validate_plan(plan, instance)
    assignment = plan_assignment(pv, plan)
    assert assignment is not None, "the model no longer admits MOE_PLAN: pick another admitted plan"
    fixed = pv.model.clone()
    for index, value in assignment.items():
        fixed.Add(fixed.get_int_var_from_proto_index(index) == value)
    solver = _solver(seed=0, workers=2, time_s=600)
    assert solver.Solve(fixed) == cp_model.OPTIMAL
    bound = solver.ObjectiveValue()
    solver = _solver(seed=0, workers=2, time_s=600)
    assert solver.Solve(pv.model) == cp_model.OPTIMAL
    assert solver.ObjectiveValue() <= bound
