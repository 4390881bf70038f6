"""Memory capacity per building: static state + activations in flight ≤ usable HBM.

static = layers·U[shape, zero] (weights/grads/optimizer not sharded over DP)
       + layers·pp·S[zero]     (the part sharded over dp·cp = N/(tp·pp): P_layer·bytes/N per layer·pp)
activations = in_flight(schedule, pp, m) · layers · A[shape].
Embedding/LM-head state and ZeRO-3 gather buffers are left out, so the bound is optimistic; the
independent validator checks every returned plan with the exact memory model and the refinement
loop cuts off plans that do not fit.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from ..coefficients import Coefficients
from .degrees import IN_FLIGHT_SCALE
from .variables import PlanVars


def add_memory_constraints(pv: PlanVars, coeffs: Coefficients, in_flight: tuple[cp_model.IntVar, int],
                           layers_pp: list[cp_model.IntVar]) -> None:
    """Post per-building memory constraints (KiB)."""
    model = pv.model
    in_flight, in_flight_max = in_flight
    layers = pv.instance.job.model_spec.layers
    for b, building in enumerate(pv.instance.cluster.buildings):
        capacity = coeffs.capacity_kib[building.name]
        cap = max(capacity, 0)
        held = model.NewIntVar(0, in_flight_max * layers, f"inflight*layers[{building.name}]")
        model.AddMultiplicationEquality(held, [in_flight, pv.layers[b]])
        static = model.NewIntVar(0, 1 << 50, f"static_kib[{building.name}]")
        activations = model.NewIntVar(0, 1 << 50, f"act_kib[{building.name}]")
        for shape, shape_lit in zip(pv.shape.values, pv.shape.lits, strict=True):
            act = coeffs.act_kib_per_layer[shape]
            model.Add(IN_FLIGHT_SCALE * activations >= int(act) * held).OnlyEnforceIf(shape_lit)
            for zero, zero_lit in zip(pv.zero.values, pv.zero.lits, strict=True):
                unsharded = int(coeffs.unsharded_kib_per_layer[(shape, zero)])
                sharded = coeffs.sharded_kib_per_layer_pp[zero]
                model.Add(1024 * static >= 1024 * unsharded * pv.layers[b] + int(1024 * sharded) * layers_pp[b]
                          ).OnlyEnforceIf([shape_lit, zero_lit])
        model.Add(static + activations <= cap).OnlyEnforceIf(pv.used[b])
