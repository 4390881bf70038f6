"""Memory capacity per building: static state + activations in flight ≤ usable HBM.

static = layers·params(shape)·bytes(zero)  (weights/grads/optimizer not sharded over DP)
       + layers·pp·S[zero]                  (the part sharded over dp·cp = N/(tp·pp): P_layer·bytes/N per layer·pp)
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
    """Post per-building memory constraints (KiB): one product per factor, not one constraint per
    (shape, ZeRO stage) pair."""
    model = pv.model
    in_flight, in_flight_max = in_flight
    layers = pv.instance.job.model_spec.layers
    max_pp = max(pv.space.pp)
    act_weights = [int(coeffs.act_kib_per_layer[shape]) for shape in pv.shape.values]
    act_per_layer = model.NewIntVar(0, max(act_weights), "act_kib_per_layer")
    model.Add(act_per_layer == pv.shape.linear(act_weights))
    param_weights = [coeffs.kiloparams_per_layer[shape] for shape in pv.shape.values]
    kiloparams = model.NewIntVar(0, max(param_weights), "kiloparams_per_layer")
    model.Add(kiloparams == pv.shape.linear(param_weights))
    whole_bytes = [coeffs.unsharded_bytes_per_param[zero] for zero in pv.zero.values]
    bytes_per_param = model.NewIntVar(0, max(whole_bytes), "unsharded_bytes_per_param")
    model.Add(bytes_per_param == pv.zero.linear(whole_bytes))
    shard_weights = [int(KIB_FRACTION * coeffs.sharded_kib_per_layer_pp[zero]) for zero in pv.zero.values]
    sharded_per = model.NewIntVar(0, max(shard_weights), "sharded_kib_per_layer_pp_x1024")
    model.Add(sharded_per == pv.zero.linear(shard_weights))
    for b, building in enumerate(pv.instance.cluster.buildings):
        name = building.name
        # KiB: activations/100 + whole·1000/1024 + sharded/1024 ≤ capacity. Each term alone must fit (an unused
        # building holds no layers, so all are 0 there): capping each product's domain at what fits keeps the
        # sum inside int64 at the largest inputs, and admits the same plans.
        limit = 1024 * IN_FLIGHT_SCALE * coeffs.capacity_kib[name]
        held = _product(model, f"inflight*layers[{name}]", in_flight, pv.layers[b], in_flight_max * layers)
        activations = _product(model, f"act_kib_x100[{name}]", held, act_per_layer,
                               min(in_flight_max * layers * max(act_weights), limit // 1024))
        params = _product(model, f"kiloparams[{name}]", pv.layers[b], kiloparams, layers * max(param_weights))
        whole = _product(model, f"whole_state_kilobytes[{name}]", params, bytes_per_param,
                         min(layers * max(param_weights) * max(whole_bytes), limit // (100 * 1000)))
        sharded = _product(model, f"sharded_kib_x1024[{name}]", layers_pp[b], sharded_per,
                           min(max_pp * layers * max(shard_weights), limit // 100))
        total = 1024 * activations + 100 * 1000 * whole + 100 * sharded
        model.Add(total <= limit).OnlyEnforceIf(pv.used[b])


KIB_FRACTION = 1024  # the DP-sharded state is tabulated in 1/1024 KiB: it can be tiny per layer at scale


def _product(model: cp_model.CpModel, name: str, a: cp_model.IntVar, b: cp_model.IntVar, upper: int
             ) -> cp_model.IntVar:
    out = model.NewIntVar(0, max(upper, 0), name)
    model.AddMultiplicationEquality(out, [a, b])
    return out
