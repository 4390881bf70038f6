"""Memory capacity per building: static state + activations in flight ≤ usable HBM.

A stage of ℓ layers, μ of them MoE layers, holds
static = ℓ·params(shape)·bytes(zero)      (weights/grads/optimizer not sharded over DP; the cheapest kind's
                                           params per layer)
       + μ·extra(shape)·bytes(zero)       (MoE: what an MoE layer holds beyond that)
       + ℓ·pp·S[zero]                     (the part sharded over dp·cp = N/(tp·pp): P_layer·bytes/N per layer·pp)
activations = in_flight · (ℓ·A[shape] + μ·A_extra[shape]).
Every stage of building b holds ℓ_b layers or one less (``cpsat.placement``), and stage i holds at most
max(0, D − i) of the D leading dense layers (``cpsat.placement.dense_cap``). Three such stages are bounded:
- b's first regular stage, with μ ≥ ℓ_b − max(0, D − K_b), K_b the stages before b's (PP across; else 0), in
  flight at least the least-loaded stage's and, where the schedule is not V-shaped, worst − d·K_b, d the
  schedule's decline per stage (``degrees.in_flight_row``: 1F1B's stage s holds pp − s, interleaved 1F1B's
  2/v fewer per stage; V-shaped schedules' first regular stage is stage 1, which may hold less);
- where b's last regular stage has index ≥ D, it holds no dense layer (``cpsat.placement._moe_only_stages``):
  ℓ = μ ≥ what the split's trimming leaves there (``cpsat.placement``'s bound: ℓ_b in whole pipelines, which
  never trim it; ℓ_b − 1, or less where the split takes several passes, under PP across) at the least-loaded
  stage's in-flight;
- V-shaped schedules (the split trims the first stages, and later stages hold more in flight: ZB-V's stage s
  min(p, (m + 1 + s)/2)): b's last regular stage s_b, with the layers of the second bound and μ ≥ ℓ − max(0,
  D − s_b), at min(worst, least + growth·s_b) in flight (``PipelineSchedule.in_flight_growth_per_stage``),
  where s_b is known (whole pipelines: pp − 1; PP across: Σ_{b' ≤ b} stages − 1).
The activations carry the allocator's fragmentation share and the capacity is HBM less the fixed overhead,
as in ``cost.memory``. Embedding/LM-head state and ZeRO-3 gather buffers are left out, so the bound is optimistic; the
independent validator checks every returned plan with the exact memory model and the refinement
loop cuts off plans that do not fit.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from ...schedules import get_schedule
from ...spec import CrossBuilding
from ..coefficients import Coefficients
from .degrees import IN_FLIGHT_SCALE, InFlight
from .placement import dense_cap
from .terms import exact_product, upper_bound
from .variables import PlanVars

KIB_FRACTION = 1024  # the DP-sharded state is tabulated in 1/1024 KiB: it can be tiny per layer at scale


def add_memory_constraints(pv: PlanVars, coeffs: Coefficients, in_flight: InFlight,
                           stage_layers: list[cp_model.IntVar], last_stage_layers: list[cp_model.IntVar],
                           moe_only_stage: list[cp_model.IntVar], v_shape: cp_model.IntVar) -> None:
    """Post per-building memory constraints: one product per factor, not one constraint per (shape, ZeRO
    stage) pair. Units: activations KiB × IN_FLIGHT_SCALE, whole state kilobytes (thousands of params ×
    bytes), sharded state 1/1024 KiB."""
    model = pv.model
    layers = pv.instance.job.model_spec.layers
    max_pp = max(pv.space.pp)
    shapes = pv.shape.values
    act_weights = [int(coeffs.act_kib_per_layer[shape]) for shape in shapes]
    param_weights = [coeffs.kiloparams_per_layer[shape] for shape in shapes]
    extra_act_weights = [int(coeffs.moe_extra_act_kib_per_layer[shape]) for shape in shapes]
    extra_param_weights = [coeffs.moe_extra_kiloparams_per_layer[shape] for shape in shapes]
    act_per_layer = pv.shape.value_var(model, "act_kib_per_layer", act_weights)
    kiloparams = pv.shape.value_var(model, "kiloparams_per_layer", param_weights)
    whole_bytes = [coeffs.unsharded_bytes_per_param[zero] for zero in pv.zero.values]
    bytes_per_param = model.NewIntVar(0, max(whole_bytes), "unsharded_bytes_per_param")
    model.Add(bytes_per_param == pv.zero.linear(whole_bytes))
    shard_weights = [int(KIB_FRACTION * coeffs.sharded_kib_per_layer_pp[zero]) for zero in pv.zero.values]
    sharded_per = model.NewIntVar(0, max(shard_weights), "sharded_kib_per_layer_pp_x1024")
    model.Add(sharded_per == pv.zero.linear(shard_weights))
    if moe_only_stage:  # a model of dense, then MoE layers
        extra_act = pv.shape.value_var(model, "moe_extra_act_kib_per_layer", extra_act_weights)
        extra_params = pv.shape.value_var(model, "moe_extra_kiloparams_per_layer", extra_param_weights)
        moe_act = pv.shape.value_var(model, "moe_act_kib_per_layer",
                                     [a + x for a, x in zip(act_weights, extra_act_weights, strict=True)])
        moe_params = pv.shape.value_var(model, "moe_kiloparams_per_layer",
                                        [p + x for p, x in zip(param_weights, extra_param_weights, strict=True)])
    pp_mode = pv.mode.lit(CrossBuilding.PP) if CrossBuilding.PP in pv.mode.values else None
    v_last = _v_last_stages(pv, in_flight, v_shape)
    for b, building in enumerate(pv.instance.cluster.buildings):
        name = building.name
        # in flight on b's first regular stage: flight ≥ worst − decline·K_b, K_b the stages before b's
        before = model.NewIntVar(0, max_pp, f"stages_before[{name}]")
        if pp_mode is not None:
            model.Add(before == sum(pv.stages[:b])).OnlyEnforceIf(pp_mode)
            model.Add(before == 0).OnlyEnforceIf(pp_mode.Not())
        else:
            model.Add(before == 0)
        flight = model.NewIntVar(0, in_flight.worst_max, f"first_stage_in_flight_x100[{name}]")
        model.Add(flight >= in_flight.least)
        model.Add(flight >= in_flight.worst - exact_product(model, f"in_flight_decline*stages_before[{name}]",
                                                            in_flight.decline, before, in_flight.decline_max * max_pp)
                  ).OnlyEnforceIf(v_shape.Not())
        # KiB: activations/100 + whole·1000/1024 + sharded/1024 ≤ capacity. Each term alone must fit (an unused
        # building holds no layers, so all are 0 there): capping each product's domain at what fits keeps the
        # sum inside int64 at the largest inputs, and admits the same plans.
        limit = 1024 * IN_FLIGHT_SCALE * coeffs.capacity_kib[name]

        def held(label: str, count: cp_model.IntVar, per_layer_act: cp_model.IntVar, per_layer_params: cp_model.IntVar,
                 flight: cp_model.IntVar, flight_max: int, name: str = name, limit: int = limit) -> cp_model.LinearExpr:
            """1024·activations + 100·1000·whole state of ``count`` layers at these per-layer figures."""
            act_top, param_top = upper_bound(per_layer_act), upper_bound(per_layer_params)
            in_flight_layers = exact_product(model, f"inflight*{label}[{name}]", flight, count, flight_max * layers)
            activations = exact_product(model, f"{label}_act_kib_x100[{name}]", in_flight_layers, per_layer_act,
                                        min(flight_max * layers * act_top, limit // 1024))
            params = exact_product(model, f"{label}_kiloparams[{name}]", count, per_layer_params, layers * param_top)
            whole = exact_product(model, f"{label}_whole_state_kilobytes[{name}]", params, bytes_per_param,
                                  min(layers * param_top * max(whole_bytes), limit // (IN_FLIGHT_SCALE * 1000)))
            return 1024 * activations + IN_FLIGHT_SCALE * 1000 * whole

        def sharded(label: str, count: cp_model.IntVar, name: str = name, limit: int = limit) -> cp_model.IntVar:
            """The DP-sharded state of ``count`` layers, 1/1024 KiB (an MoE layer's is at least this)."""
            count_pp = exact_product(model, f"{label}_layers*pp[{name}]", count, pv.pp_var, max_pp * layers)
            return exact_product(model, f"{label}_sharded_kib_x1024[{name}]", count_pp, sharded_per,
                                 min(max_pp * layers * max(shard_weights), limit // IN_FLIGHT_SCALE))

        def stage_total(label: str, count: cp_model.IntVar, flight: cp_model.IntVar, flight_max: int,
                        index: cp_model.IntVar | int, name: str = name) -> cp_model.LinearExpr:
            """What stage ``index`` (or a later one) of ≥ ``count`` layers holds at ``flight`` micro-batches in
            flight: its whole and DP-sharded state and activations, and for MoE models its ≥ count − max(0, D −
            index) MoE layers' extra (``placement.dense_cap``)."""
            total = (held(label, count, act_per_layer, kiloparams, flight, flight_max)
                     + IN_FLIGHT_SCALE * sharded(label, count))
            if moe_only_stage:
                least_moe = model.NewIntVar(0, layers, f"{label}_moe_layers[{name}]")  # its least binds
                model.Add(least_moe >= count - dense_cap(model, coeffs.dense_layers, index,
                                                         f"{label}_dense_layers_at_most[{name}]"))
                total += held(f"{label}_moe_extra", least_moe, extra_act, extra_params, flight, flight_max)
            return total

        # b's first regular stage holds ≥ stage_layers[b] (ℓ_b less what the split's trimming may take there)
        model.Add(stage_total("first_stage", stage_layers[b], flight, in_flight.worst_max, before) <= limit
                  ).OnlyEnforceIf(pv.used[b])
        # V-shaped schedules: b's last regular stage (the split trims the first ones) holds its most layers
        if v_last is not None:
            flight_last, index, condition = v_last[b]
            model.Add(stage_total("last_stage", last_stage_layers[b], flight_last, in_flight.worst_max, index)
                      <= limit).OnlyEnforceIf(condition)
        if moe_only_stage:
            moe_stage = model.NewIntVar(0, layers, f"moe_stage_layers[{name}]")  # b's last regular stage
            model.Add(moe_stage >= last_stage_layers[b])
            moe_total = (held("moe_stage", moe_stage, moe_act, moe_params, in_flight.least, in_flight.least_max)
                         + IN_FLIGHT_SCALE * sharded("moe_stage", moe_stage))
            model.Add(moe_total <= limit).OnlyEnforceIf([pv.used[b], moe_only_stage[b]])


def _v_last_stages(pv: PlanVars, in_flight: InFlight, v_shape: cp_model.IntVar
                   ) -> list[tuple[cp_model.IntVar, cp_model.IntVar, list[cp_model.IntVar]]] | None:
    """V-shaped schedules, per building b: (the activations in flight on b's last stage, its index s, when it
    is a regular stage under a V-shaped schedule). Stage s holds ≥ min(worst, least + g·s) (g: the schedule's
    ``in_flight_growth_per_stage``), s = Σ_{b' ≤ b} stages − 1 under PP across and pp − 1 with whole
    pipelines; pp+dp (its groups' stage indices are not modelled) is left out, as is a building that holds
    only the LM-head stage (stage 0). None when no schedule is V-shaped."""
    model = pv.model
    if not any(get_schedule(name).head_stage(2, v) == 0 for name, v in pv.schedule_chunks.values):
        return None
    max_pp = max(pv.space.pp)
    growth = [round(IN_FLIGHT_SCALE * get_schedule(name).in_flight_growth_per_stage)
              for name, _ in pv.schedule_chunks.values]
    pp_mode = pv.mode.lit(CrossBuilding.PP) if CrossBuilding.PP in pv.mode.values else None
    not_pp_dp = [pv.mode.lit(CrossBuilding.PP_DP).Not()] if CrossBuilding.PP_DP in pv.mode.values else []
    several_stages = [pv.pp.lit(1).Not()] if 1 in pv.pp.values else []
    per_stage = model.NewIntVar(0, max(growth), "in_flight_growth_x100")
    model.Add(per_stage == pv.schedule_chunks.linear(growth))
    out = []
    for b, name in enumerate(pv.buildings):
        index = model.NewIntVar(0, max_pp, f"last_stage_index[{name}]")
        if pp_mode is not None:
            model.Add(index == sum(pv.stages[:b + 1]) - 1).OnlyEnforceIf(pp_mode)
            model.Add(index == pv.pp_var - 1).OnlyEnforceIf(pp_mode.Not())
        else:
            model.Add(index == pv.pp_var - 1)
        grown = exact_product(model, f"in_flight_growth*index[{name}]", per_stage, index, max(growth) * max_pp)
        flight = model.NewIntVar(0, in_flight.worst_max, f"last_stage_in_flight_x100[{name}]")
        model.AddMinEquality(flight, [in_flight.worst, in_flight.least + grown])
        regular = model.NewBoolVar(f"last_stage_regular[{name}]")  # not the LM-head stage alone
        model.Add(pv.stages[b] >= 1 + pv.head[b]).OnlyEnforceIf(regular)
        model.Add(pv.stages[b] <= pv.head[b]).OnlyEnforceIf(regular.Not())
        out.append((flight, index, [pv.used[b], regular, v_shape, *not_pp_dp, *several_stages]))
    return out
