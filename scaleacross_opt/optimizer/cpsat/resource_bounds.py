"""Busiest-resource bounds of the whole step: the bytes a GPU's NIC must carry per step for the DP sync and
gathers (ZeRO-0..2, ZeRO-3), and the bytes every cross-building route must carry when DP spans buildings, each
over its capacity. Returned as (µs × SCALE, condition) pairs that bound the step variable."""

from __future__ import annotations

import math
from itertools import product

from ortools.sat.python import cp_model

from ...catalog import coefficients as co
from ...cost.compute import LayerKind, layer_kinds
from ...spec import CollectiveAlgorithm, CrossBuilding
from ..coefficients import Coefficients
from .dp_rings import DpGroups
from .terms import SCALE, capped_product, new_var, ring_factor, term_coefficient, upper_bound
from .variables import OneHot, PlanVars
from .zero3 import gather_pairs_us, head_weight_ratios


def dp_nic_bounds(pv: PlanVars, coeffs: Coefficients) -> list[tuple[cp_model.LinearExpr, list[cp_model.IntVar]]]:
    """(µs × SCALE, condition) bounds of the whole step for ZeRO-0..2 where the DP groups always cross NICs:
    each step every GPU's NIC carries its stage's gradient sync and (ZeRO-1/2) updated-weight gather, two
    ring passes of 2 bytes per parameter (all-reduce, or reduce-scatter + all-gather:
    ``cost.step._dp_sync``), volume 2(n−1)/n of the n = 2 pair over n = dp·cp ranks for the non-expert
    weights and dp·cp/ep for the experts, ÷ the members sharing one NVLink domain's NICs
    (``cost.step.dp_uses``). Some stage holds ≥ ⌈L/pp⌉ layers (≥ the cheapest kind's weights each), and
    some stage ≥ ⌈L_moe/pp⌉ MoE layers (each with its experts): the expert gradients, which the per-chunk
    sync terms leave out, bound MoE steps here."""
    n = pv.instance.num_gpus
    zero = [z for z in pv.zero.values if z < 3]
    if not zero:
        return []
    # bytes per parameter of the two passes, relative to the n = 2 pair's (2 × WEIGHT_BYTES)
    passes = min((2 * co.GRAD_REDUCE_BYTES if z == 0 else co.GRAD_REDUCE_BYTES + co.WEIGHT_BYTES) for z in zero)
    factor = passes / (2 * co.WEIGHT_BYTES)
    not_zero3 = [pv.zero.lit(3).Not()] if 3 in pv.zero.values else []
    kinds = layer_kinds(pv.instance.job.model_spec)
    total, moe = len(kinds), kinds.count(LayerKind.MOE)
    heavy = coeffs.layer_kinds.index(LayerKind.MOE) if moe else None
    bounds = []
    for pp, pp_lit in zip(pv.pp.values, pv.pp.lits, strict=True):
        # the DP group's n = dp·cp = N/(tp·pp) follows from the shape at a given pp: one linear term per pp
        least, most = [], []
        for shape in pv.shape.values:
            key, d = (shape.tp, shape.ep), n // (shape.tp * pp)
            us = (gather_pairs_us(coeffs.zero3_nic_pair_us[key], shape.ep, d)
                  if coeffs.zero3_on_nic[key] and n % (shape.tp * pp) == 0 else [0.0] * len(coeffs.layer_kinds))
            least.append(int(SCALE * factor * math.ceil(total / pp) * min(us)))
            most.append(int(SCALE * factor * math.ceil(moe / pp) * us[heavy]) if heavy is not None else 0)
        bounds.append((pv.shape.linear(least), [pp_lit, *not_zero3]))
        if heavy is not None:
            bounds.append((pv.shape.linear(most), [pp_lit, *not_zero3]))
    return bounds


def zero3_nic_bounds(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, sharding: OneHot,
                     on_nic: cp_model.IntVar, holds_head: list[list[list[cp_model.IntVar]]], v_shape: cp_model.IntVar
                     ) -> list[tuple[cp_model.LinearExpr, list[cp_model.IntVar]]]:
    """(µs × SCALE, condition) bounds of the whole step for ZeRO-3 shapes whose DP group always crosses NICs:
    each GPU's NIC carries m·layers_b pairs of all-gathers and the step's gradient reduce-scatter (half a
    micro-batch's pair): at least the cheapest layer kind's non-expert weights, ring volume 2(n−1)/n over the
    n = dp·cp ranks (the experts' group may hold a single rank). The pair is fixed by the (tp, ep) choice, so
    the products stay tight in the search. The same NIC carries each layer's CP ring for every micro-batch
    (``Coefficients.cp_nic_us_per_layer``), hidden behind attention or not. The LM-head stage's NIC carries its
    head_layers' pairs and the LM head's (r of a layer's, ``head_gather_ratios``), and under V-shaped schedules
    the embedding's too (r again; bytes only, so r = ``head_weight_ratios``, which may exceed 1)."""
    model, instance = pv.model, pv.instance
    zero3 = pv.zero.lit(3)
    dense = sharding.value_var(pv.model, "zero3_nic_dense_pair_us",
                        [int(min(n for n, _ in coeffs.zero3_nic_pair_us[key])) for key in sharding.values])
    # the head stage's pairs per micro-batch, in layers × SCALE (r rounded down)
    ratios = head_weight_ratios(pv, sharding.values)
    ratio = sharding.value_var(model, "zero3_head_gather_ratio_x1000",
                               [math.floor(SCALE * ratios.get(key, 0.0)) for key in sharding.values])
    head_units = new_var(model, "zero3_head_stage_layers_x1000",
                         SCALE * instance.job.model_spec.layers + 2 * upper_bound(ratio))
    model.Add(head_units == SCALE * pv.head_layers + ratio).OnlyEnforceIf(v_shape.Not())
    model.Add(head_units == SCALE * pv.head_layers + 2 * ratio).OnlyEnforceIf(v_shape)
    head_scaled = capped_product(model, "zero3_head_per_mb_us_x1000", head_units, dense)
    head_per_mb = new_var(model, "zero3_head_per_mb_us")
    model.AddDivisionEquality(head_per_mb, head_scaled, SCALE)
    head_total = capped_product(model, "zero3_head_us", pv.microbatches, head_per_mb)
    step_bounds = []
    for b, building in enumerate(instance.cluster.buildings):
        per_mb = capped_product(model, f"zero3_per_mb[{building.name}]", pv.layers[b], dense)
        total = capped_product(model, f"zero3_us[{building.name}]", pv.microbatches, per_mb)
        cp_ring = pv.shape.value_var(model, f"cp_nic_us_per_layer[{building.name}]",
                                     [coeffs.cp_nic_us_per_layer[(shape, building.name)] for shape in pv.shape.values])
        cp_total = capped_product(model, f"cp_nic_us[{building.name}]", pv.microbatches,
                                  capped_product(model, f"cp_nic_per_mb[{building.name}]", pv.layers[b], cp_ring))
        head_cp_per_mb = capped_product(model, f"zero3_head_cp_nic_per_mb[{building.name}]", pv.head_layers, cp_ring)
        head_cp = capped_product(model, f"zero3_head_cp_nic_us[{building.name}]", pv.microbatches, head_cp_per_mb)
        for d, d_lit in groups:
            ring = int(SCALE * ring_factor(d)) if d > 1 else 0
            step_bounds.append((ring * total + ring // 2 * per_mb + SCALE * cp_total,
                                [zero3, d_lit, on_nic, pv.used[b]]))
            step_bounds += [(ring * head_total + ring // 2 * head_per_mb + SCALE * head_cp,
                             [zero3, d_lit, on_nic, *condition]) for condition in holds_head[b]]
    return step_bounds


def add_dp_route_bounds(pv: PlanVars, coeffs: Coefficients, groups: DpGroups
                        ) -> list[tuple[cp_model.LinearExpr, list[cp_model.IntVar]]]:
    """DP across buildings (dp mode): every stage's DP groups span every used building, so each route of
    their rings carries the whole model's gradient reduce-scatter and (ZeRO-1/2) parameter all-gather —
    ZeRO-3: its two all-gathers per micro-batch and the reduce-scatter — all stages at once, at most at the
    best route's goodput with every GPU connected: step ≥ volume · µs/MiB. Volume of one ring pass, in
    Mi-parameters (rounded down): the non-expert weights × (n−1)/n for a flat ring over the n = dp·cp ranks,
    + the experts × (n_e−1)/n_e over their own group of n_e = dp·cp/ep ranks (none cross when n_e = 1); ½
    each for hierarchical (the outer ring over ≥ 2 buildings), experts only when n_e ≥ 2
    (``cost.step.dp_uses``). Returns (scaled µs, condition) bounds of the step."""
    if CrossBuilding.DP not in pv.mode.values or pv.cross_transport is None or pv.cross_algorithm is None:
        return []
    model = pv.model
    dp_mode = pv.mode.lit(CrossBuilding.DP)
    eps = sorted({shape.ep for shape in pv.shape.values})
    ep_lits = {e: pv.shape.any_of(model, f"route_ep={e}", lambda shape, e=e: shape.ep == e) for e in eps}
    dense_mib, expert_mib = coeffs.model_param_mib, coeffs.model_expert_param_mib
    volume = new_var(model, "dp_route_mib", math.floor(dense_mib + expert_mib))  # one ring pass, all stages
    for algorithm, a_lit in zip(pv.cross_algorithm.values, pv.cross_algorithm.lits, strict=True):
        for (d, d_lit), e in product(groups, eps):
            if d % e:
                continue
            n_e = d // e
            if algorithm is CollectiveAlgorithm.HIERARCHICAL:
                crossing = dense_mib / 2 + (expert_mib / 2 if n_e > 1 else 0.0)
            else:
                crossing = dense_mib * (d - 1) / d + expert_mib * (n_e - 1) / n_e
            model.Add(volume >= math.floor(crossing)).OnlyEnforceIf([dp_mode, a_lit, d_lit, ep_lits[e]])
    bounds = []
    zero3 = pv.zero.lit(3) if 3 in pv.zero.values else None
    gathered = capped_product(model, "dp_route_gathered_mib", volume, pv.microbatches) if zero3 is not None else None
    for transport, t_lit in zip(pv.cross_transport.values, pv.cross_transport.lits, strict=True):
        per_mib = min(coeffs.pair_route_us_per_mib[transport].values())  # the best route
        sync = term_coefficient(per_mib * (co.GRAD_REDUCE_BYTES + co.WEIGHT_BYTES), volume)
        if zero3 is None:
            bounds.append((sync * volume, [dp_mode, t_lit]))
            continue
        bounds.append((sync * volume, [dp_mode, t_lit, zero3.Not()]))
        reduce = term_coefficient(per_mib * co.GRAD_REDUCE_BYTES, volume)
        gather = term_coefficient(per_mib * 2 * co.WEIGHT_BYTES, gathered)
        bounds.append((gather * gathered + reduce * volume, [dp_mode, t_lit, zero3]))
    return bounds
