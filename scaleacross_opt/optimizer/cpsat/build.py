"""Assemble the CP-SAT model from its constraint families."""

from __future__ import annotations

from ortools.sat.python import cp_model

from ...spec import Instance
from ..coefficients import Coefficients
from ..space import DesignSpace
from .crossings import crossing_latencies_us
from .degrees import add_degree_constraints
from .extract import fix_irrelevant_choices
from .memory import add_memory_constraints
from .objective import add_objective
from .placement import add_placement_constraints
from .variables import PlanVars, create_variables


def build_model(instance: Instance, space: DesignSpace, coeffs: Coefficients) -> PlanVars:
    """The full model: variables, degree/placement/memory constraints and the step-time objective."""
    model = cp_model.CpModel()
    pv = create_variables(model, instance, space)
    pv.cross_hop_us = crossing_latencies_us(coeffs)
    in_flight = add_degree_constraints(pv)
    products = add_placement_constraints(pv)
    add_memory_constraints(pv, coeffs, in_flight, products["stage_layers"], products["timed_layers"],
                           products["moe_only_stage"], products["v_shape"][0])
    step = add_objective(pv, coeffs, products)
    fix_irrelevant_choices(pv)
    model.Minimize(step)
    return pv
