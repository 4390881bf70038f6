"""ZeRO-3 terms: a layer's pair of weight all-gathers (before its forward and again before its backward) over the
DP group's real span (NVLink, the NICs, the slowest building edge of a ring across buildings), the LM head's and
embedding's gathers, and a layer's traffic classes sharing one NIC (gathers, CP ring, EP all-to-all)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ...catalog import coefficients as co
from ...cost.compute import LayerKind, layer_kinds
from ...cost.memory import embedding_params, layer_params
from ...spec import CollectiveAlgorithm, CrossBuilding
from ..coefficients import Coefficients, node_gpus
from .dp_rings import DpGroups, InnerRing, RingEdges, slowest_edge_us_per_layer
from .terms import HORIZON_US, RHS_CAP, SCALE, new_var, ring_factor, upper_bound
from .variables import OneHot, PlanVars


def nic_us_per_layer(pv: PlanVars, coeffs: Coefficients, building: str, label: str) -> cp_model.IntVar:
    """One layer's CP ring and (MoE layers) EP all-to-all on a GPU's NIC, one micro-batch (µs, each way): the
    cheapest kind (``label`` "light") holds experts only where every layer does."""
    experts = label == "heavy" or coeffs.layer_kinds == (LayerKind.MOE,)
    return pv.shape.value_var(pv.model, f"{label}_layer_nic_us[{building}]", [
        coeffs.cp_nic_us_per_layer[(shape, building)] + (coeffs.ep_nic_us_per_layer[(shape, building)] if experts
                                                          else 0) for shape in pv.shape.values])


def add_nic_sharing(pv: PlanVars, coeffs: Coefficients, building: str, layer: cp_model.IntVar, label: str,
                    gathers: Zero3Gathers, groups: DpGroups) -> None:
    """ZeRO-3 where the DP group crosses NICs: a layer's F and B ops carry its pair of weight gathers, its CP ring
    and its EP all-to-all on the same NIC (``cost.op_sharing``: the flows of one op), so its fwd+bwd lasts at
    least their NIC seconds together (``cost.step._chunk_cost`` prices each as if it had the NIC to itself)."""
    model = pv.model
    nic = nic_us_per_layer(pv, coeffs, building, label)
    for d, d_lit in groups:
        model.Add(SCALE * layer >= gathers.nic_pairs[(label, d)] + SCALE * nic).OnlyEnforceIf(
            [pv.zero.lit(3), gathers.on_nic, d_lit])


def nic_saving(pv: PlanVars, coeffs: Coefficients, building: str, gathers: Zero3Gathers, groups: DpGroups
               ) -> cp_model.IntVar:
    """What the dense layers of a stage save against an MoE layer's NIC bound (``add_nic_sharing``): a dense
    layer's own is at least the cheapest kind's pair plus the CP ring, so each saves at most the MoE pair's excess
    over that pair plus the all-to-all (0 where the bound does not hold)."""
    model = pv.model
    dense = coeffs.dense_layers
    saved = new_var(model, f"nic_discount_us[{building}]")
    zero3 = pv.zero.lit(3)
    model.Add(saved == 0).OnlyEnforceIf(zero3.Not())
    model.Add(saved == 0).OnlyEnforceIf(gathers.on_nic.Not())
    experts = pv.shape.value_var(model, f"ep_nic_us[{building}]",
                                 [coeffs.ep_nic_us_per_layer[(shape, building)] for shape in pv.shape.values])
    for d, d_lit in groups:
        gap = [dense * (math.ceil(max(0.0, heavy - light)) + 1) for light, heavy in (
            (min(pairs), pairs[0]) for pairs in (gather_pairs_us(coeffs.zero3_nic_pair_us[key], key[1], d)
                                                 for key in gathers.sharding.values))]
        model.Add(saved <= gathers.sharding.linear(gap) + dense * experts).OnlyEnforceIf(d_lit)
    return saved


def gather_steps(algorithm: CollectiveAlgorithm, d: int) -> int:
    """Latency steps of one all-gather over ≥ d ranks (``cost.collectives.flat_collective_s``): PAT
    ⌈log2 d⌉, ring and tree d − 1, hierarchical ≥ 1 on the route (its outer ring over ≥ 2 buildings)."""
    if algorithm is CollectiveAlgorithm.HIERARCHICAL:
        return 1
    return math.ceil(math.log2(max(d, 2))) if algorithm is CollectiveAlgorithm.PAT else d - 1


def pair_steps(algorithm: CollectiveAlgorithm, d: int, ep: int) -> int:
    """Latency steps of a layer's pair of ZeRO-3 all-gathers over d ranks, and (ep ≥ 1) of its experts' pair
    over d/ep ranks (none when that group is a single rank; ep = 0: the layer holds no experts)."""
    experts = d // ep if ep and d % ep == 0 else 1
    return 2 * (gather_steps(algorithm, d) + (gather_steps(algorithm, experts) if experts > 1 else 0))


@dataclass(frozen=True)
class Zero3Gathers:
    """The ZeRO-3 gather terms of the objective (µs per layer per micro-batch; 0 without ZeRO-3)."""

    light: cp_model.IntVar  # the pair of all-gathers of the cheapest layer kind (any path)
    heavy: cp_model.IntVar | None  # … of an MoE layer (models with layers of several kinds)
    excess: cp_model.IntVar | None  # ≤ dense layers × (MoE pair − dense pair), bandwidth part
    sharding: OneHot  # the shape's (tp, ep), which the gathers depend on
    on_nic: cp_model.IntVar  # the shape's DP group always crosses NICs (``Coefficients.zero3_on_nic``)
    # (kind label, d) → × SCALE, the kind's pair over the NICs for a DP group of d ranks (bandwidth part)
    nic_pairs: dict[tuple[str, int], cp_model.LinearExpr]


def gather_pairs_us(pairs: tuple[tuple[float, float], ...], ep: int, d: int) -> list[float]:
    """Per layer kind: a layer's pair of all-gathers when its non-expert weights are sharded over d ranks and
    its experts over d/ep (ring volume 2(n−1)/n of each part's n = 2 coefficient; no gather for n = 1)."""
    def ring(n: int) -> float:
        return ring_factor(n) if n > 1 else 0.0
    experts = ring(d // ep) if d % ep == 0 else 0.0
    return [ring(d) * dense + experts * expert for dense, expert in pairs]


def zero3_gathers(pv: PlanVars, coeffs: Coefficients, successors: RingEdges,
                  inter_group: dict[tuple[int, int], cp_model.IntVar], ring_hop: cp_model.IntVar, groups: DpGroups,
                  inner: InnerRing | None) -> Zero3Gathers:
    """ZeRO-3 gathers each layer's weights before its forward and again before its backward, one layer ahead
    of the compute, so a layer's forward + backward lasts at least g ≥ the pair of all-gathers
    (``cost.step._chunk_cost``: max(fwd, gather) + max(bwd, gather) ≥ 2·gather); g is 0 for other ZeRO
    stages, and capped so that layers·g stays within the horizon. The non-expert weights are gathered over
    the n = dp·cp ranks of the DP group, the experts over n/ep:
    - inside a building: ring volume 2(n−1)/n × each part's bytes over the shape's best path (the NICs
      once n > node GPUs: no DP group fits a node), plus that path's latency per step (``gather_steps`` of
      the plan's intra algorithm where the group stays in a building, else the fewest-step one;
      hierarchical runs as ring inside a building);
    - DP across buildings (dp, pp+dp; cheapest kind only): the layer's non-expert weights over the ring's
      slowest building edge (``slowest_edge_us_per_layer``) with one NVLink domain's connections (flat) or
      the larger end's GPUs (hierarchical), × (n−1)/n (flat) or ½, plus per step the latency of the shortest
      route (hierarchical) or of the ring's slowest hop (flat, ``ring_hop_us``);
    - where the layer holds experts, their gathers follow the non-expert ones over the n/ep-rank expert group,
      which spans the same buildings: their bytes and steps add the same way (ring, tree and PAT steps each pay
      the path's latency; none when n/ep = 1)."""
    model, instance = pv.model, pv.instance
    node = node_gpus(instance)
    sharding = sharding_choice(pv)
    several = len(coeffs.layer_kinds) > 1  # MoE first, then dense

    def var_of(name: str, values: list[int]) -> cp_model.IntVar:
        return sharding.value_var(pv.model, name, values)

    step_us = {"best": coeffs.zero3_step_us, "nic": coeffs.zero3_nic_step_us}
    raw = new_var(model, "zero3_gather_pair_raw_us", RHS_CAP)
    raw_heavy = new_var(model, "zero3_moe_gather_pair_raw_us", RHS_CAP) if several else None
    excess = new_var(model, "zero3_moe_gather_excess_us", RHS_CAP) if several else None
    ring_alg, hierarchical = CollectiveAlgorithm.RING, CollectiveAlgorithm.HIERARCHICAL
    intra = [(ring_alg if a is hierarchical else a, lit)
             for a, lit in zip(pv.intra_algorithm.values, pv.intra_algorithm.lits, strict=True)]
    inside = [lit for mode, lit in zip(pv.mode.values, pv.mode.lits, strict=True)  # DP groups within a building
              if mode not in (CrossBuilding.DP, CrossBuilding.PP_DP)]
    stays_inside = []  # [the literal "the DP groups stay inside a building"] where they may cross
    if len(inside) < len(pv.mode.values):
        stays_inside.append(model.NewBoolVar("dp_groups_inside_buildings"))
        model.Add(stays_inside[0] == sum(inside))
    # A layer's pair over n = d ranks (experts over d/ep): 2(d−1)/d·N + 2X − (2/d)·(ep·X) with N, X its
    # non-expert and expert weights' pair at n = 2: linear in three variables fixed by (tp, ep) (the cheapest
    # kind: the least N and the least X of any kind; MoE layers: their own).
    # per sharding: whether the cheapest kind (True) / an MoE layer (False) holds experts, gathered after the
    # non-expert weights over their own ring (``cost.step._zero3_gather_s``), whose steps each pay a latency too
    held_experts = {light: [min(x for _, x in (rows if light else rows[:1])) > 0
                            for rows in (coeffs.zero3_pair_us[key] for key in sharding.values)]
                    for light in (True, False)}
    terms = {}
    for path, table in (("best", coeffs.zero3_pair_us), ("nic", coeffs.zero3_nic_pair_us)):
        for label, var in (("light", raw), ("heavy", raw_heavy)):
            if var is None:
                continue
            rows = [table[key] if label == "light" else table[key][:1] for key in sharding.values]
            dense = [int(min(n for n, _ in row)) for row in rows]
            experts = [int(min(x for _, x in row)) for row in rows]
            terms[(path, label)] = (var_of(f"zero3_{label}_{path}_pair_dense_us", dense),
                                    var_of(f"zero3_{label}_{path}_pair_experts_us", experts),
                                    var_of(f"zero3_{label}_{path}_pair_ep_x_experts_us",
                                           [ep * x for (_, ep), x in zip(sharding.values, experts, strict=True)]))
    saved_inside = {}  # d → what the dense layers save against MoE layers inside a building (upper bound)
    for d, d_lit in groups:
        # the intra algorithm's steps where the group stays in a building, else the fewest of any
        stepped = [([a], [d_lit, a_lit, mode_lit]) for a, a_lit in intra for mode_lit in inside]
        stepped.append(([a for a, _ in intra], [d_lit]))
        for (path, label), (dense, experts, ep_experts) in terms.items():
            if path == "nic" and d <= node:
                continue
            var = raw if label == "light" else raw_heavy
            held = held_experts[label == "light"]
            for algorithms, when in stepped:  # × SCALE, rounded down (the negative term's factor up)
                latency = sharding.linear([
                    SCALE * min(pair_steps(a, d, ep if has else 0) for a in algorithms) * step_us[path][(tp, ep)]
                    for (tp, ep), has in zip(sharding.values, held, strict=True)])
                model.Add(SCALE * var >= int(SCALE * ring_factor(d)) * dense + 2 * SCALE * experts
                          - math.ceil(2 * SCALE / d) * ep_experts + latency).OnlyEnforceIf(when)
        if excess is not None:
            # what the dense layers' gathers may save against the MoE layer's, inside a building: the bandwidth
            # parts' difference and the experts' ring steps (at most the slower path's latency each); across
            # buildings the MoE pair's bound also counts the experts' crossing, so the saving is left open there
            best = [gather_pairs_us(coeffs.zero3_pair_us[(tp, ep)], ep, d) for tp, ep in sharding.values]
            nic = [gather_pairs_us(coeffs.zero3_nic_pair_us[(tp, ep)], ep, d) for tp, ep in sharding.values]
            steps = [max(pair_steps(a, d, ep) - pair_steps(a, d, 0) for a, _ in intra) for _, ep in sharding.values]
            saved = [max(0.0, max(b[0] - b[1], n[0] - n[1])) + n_steps * max(step_us["best"][key], step_us["nic"][key])
                     for b, n, n_steps, key in zip(best, nic, steps, sharding.values, strict=True)]
            saved_inside[d] = sharding.linear([math.ceil(coeffs.dense_layers * x) for x in saved])
            model.Add(excess <= saved_inside[d]).OnlyEnforceIf([d_lit, *stays_inside])
    def nic_bytes(label: str, d: int) -> cp_model.LinearExpr:
        """× SCALE: the bandwidth part of the kind's pair over the NICs (as above)."""
        dense, experts, ep_experts = terms[("nic", label)]
        return int(SCALE * ring_factor(d)) * dense + 2 * SCALE * experts - math.ceil(2 * SCALE / d) * ep_experts

    def inner_ring_pair(inner: InnerRing, width: int) -> cp_model.LinearExpr:
        """× SCALE: the pair of gathers of an inner ring of ≥ ``width`` members, the cheapest kind's non-expert
        bytes over the NICs and its steps at the fabric's latency."""
        return (int(SCALE * ring_factor(width)) * terms[("nic", "light")][0]
                + 2 * SCALE * coeffs.intra_hop_us * (inner.members - 1))

    crossing = [pv.mode.lit(mode) for mode in (CrossBuilding.DP, CrossBuilding.PP_DP) if mode in pv.mode.values]
    if crossing and pv.cross_transport is not None and pv.cross_algorithm is not None:
        # per kind bound (its pair variable, label, non-expert and expert Mi-params of one whole layer): the
        # cheapest kind's least, and an MoE layer's own where the model has layers of several kinds
        kinds = [(raw, "light", coeffs.layer_dense_param_mib, coeffs.layer_expert_param_mib)]
        if raw_heavy is not None:
            moe = layer_params(instance.job.model_spec, LayerKind.MOE, 1, 1)
            kinds.append((raw_heavy, "heavy", moe.dense / (1 << 20), moe.expert / (1 << 20)))
            dense_mib = layer_params(instance.job.model_spec, LayerKind.DENSE, 1, 1).dense / (1 << 20)
            wider = max(0.0, 1 - dense_mib / kinds[1][2])  # the MoE layer's non-expert share beyond the dense's
        # a kind holding experts gathers them too, over the expert DP group (d/ep ranks, every building of the
        # stage: ``cost.layout.expert_dp_span``); ep = 0 stands for "no expert gather"
        ep_lits = {ep: sharding.any_of(model, f"zero3_cross_ep={ep}", lambda key, ep=ep: key[1] == ep)
                   for ep in sorted({ep for _, ep in sharding.values})}
        for i, (t, t_lit) in enumerate(zip(pv.cross_transport.values, pv.cross_transport.lits, strict=True)):
            for var, label, dense_mib, expert_mib in kinds:
                # both gathers of one layer's weights over the slowest edge: a flat ring's non-expert rings (one
                # per TP rank) hold at most one NVLink domain's connections; the experts' tp·ep rings may hold
                # more, so they (and hierarchical rings) are priced with every GPU of the larger end connected
                edges = {(flat, part): slowest_edge_us_per_layer(
                    pv, mib * 2 * co.WEIGHT_BYTES,
                    (coeffs.pair_flat_route_us_per_mib if flat else coeffs.pair_route_us_per_mib)[t],
                    f"zero3-{label}-{'flat' if flat else 'hierarchical'}-{part}[{i}]", successors, inter_group,
                    cap=RHS_CAP // (4 * SCALE))
                    for flat, part, mib in ((True, "dense", dense_mib), (False, "dense", dense_mib),
                                            (False, "experts", expert_mib)) if mib > 0}
                for a, a_lit in zip(pv.cross_algorithm.values, pv.cross_algorithm.lits, strict=True):
                    flat = a is not CollectiveAlgorithm.HIERARCHICAL
                    for d, d_lit in groups:
                        # ep ranks divide the dp·cp ones; where the experts' group is one rank they gather nothing,
                        # so the non-expert bound (ep = 0) holds for every ep and only larger expert groups add
                        for ep in [0] + [ep for ep in ep_lits if expert_mib > 0 and d % ep == 0 and d // ep > 1]:
                            n_e = d // ep if ep else 1
                            bandwidth = int(SCALE * (ring_factor(d) / 2 if flat else 0.5)) * edges[(flat, "dense")]
                            if n_e > 1:
                                bandwidth += (int(SCALE * (ring_factor(n_e) / 2 if flat else 0.5))
                                              * edges[(False, "experts")])
                            # flat: each step at the ring's slowest hop; hierarchical: ≥ one outer step per ring
                            steps = SCALE * (pair_steps(a, d, ep) if flat else 2 * (1 + (n_e > 1)))
                            latency = min(RHS_CAP // 4, steps * coeffs.cross_hop_us[t])
                            nic_latency = min(RHS_CAP // 4, steps * min(coeffs.cross_hop_us.values()))  # any transport
                            if flat and steps * upper_bound(ring_hop) <= RHS_CAP // 4:
                                latency = nic_latency = steps * ring_hop
                            when = [a_lit, d_lit, *([ep_lits[ep]] if ep else [])]
                            for mode_lit in crossing:
                                model.Add(SCALE * var >= bandwidth + latency).OnlyEnforceIf([mode_lit, t_lit, *when])
                                for width, wide in (inner.wide if not flat and not ep and label == "light"
                                                    and inner is not None else ()):
                                    # hierarchical runs its inner ring, then the outer one: their times add
                                    model.Add(SCALE * var >= bandwidth + latency + inner_ring_pair(inner, width)
                                              ).OnlyEnforceIf([mode_lit, t_lit, *when, wide])
                                if flat and i == 0:  # a flat ring's bytes cross its members' NICs at each step
                                    model.Add(SCALE * var >= nic_bytes(label, d) + nic_latency
                                              ).OnlyEnforceIf([mode_lit, *when])
                        if label != "heavy" or excess is None:
                            continue
                        # a dense layer's pair saves at most what the MoE layer's bounds add over the dense kind's
                        # own: the inside terms' difference, and here the experts' bytes and steps and the wider
                        # non-expert bytes (each ≥ 0, so their sum covers every bound's difference)
                        for ep in (ep for ep in ep_lits if d % ep == 0):
                            n_e = d // ep
                            experts_steps = SCALE * (pair_steps(a, d, ep) - pair_steps(a, d, 0) if flat
                                                     else 2 * (n_e > 1))
                            hop = (ring_hop if flat and experts_steps * upper_bound(ring_hop) <= RHS_CAP // 4
                                   else max(coeffs.pair_hop_us.values()))
                            experts = int(SCALE * (ring_factor(n_e) / 2 if flat else 0.5)) if n_e > 1 else 0
                            extra = (experts * edges[(False, "experts")] + int(SCALE * wider) * edges[(flat, "dense")]
                                     + experts_steps * hop)
                            for mode_lit in crossing:
                                model.Add(SCALE * excess <= SCALE * saved_inside[d] + coeffs.dense_layers * extra
                                          ).OnlyEnforceIf([mode_lit, t_lit, a_lit, d_lit, ep_lits[ep]])
    for width, wide in inner.wide if inner is not None else ():  # the inner ring's pair, ≥ 1 outer step
        model.Add(SCALE * raw >= inner_ring_pair(inner, width) + 2 * SCALE * min(coeffs.cross_hop_us.values())
                  ).OnlyEnforceIf(wide)
    ceiling = HORIZON_US // max(1, instance.job.model_spec.layers)
    zero3 = pv.zero.lit(3)

    def per_layer(name: str, source: cp_model.IntVar) -> cp_model.IntVar:
        """min(source, ceiling) under ZeRO-3, else 0."""
        capped = new_var(model, f"{name}_capped_us", ceiling)
        model.AddMinEquality(capped, [source, ceiling])
        out = new_var(model, f"{name}_us", ceiling)
        model.Add(out == capped).OnlyEnforceIf(zero3)
        model.Add(out == 0).OnlyEnforceIf(zero3.Not())
        return out

    on_nic = model.NewBoolVar("zero3_group_on_nics")
    model.Add(on_nic == sharding.linear([int(coeffs.zero3_on_nic[key]) for key in sharding.values]))
    nic_pairs = {(label, d): nic_bytes(label, d) for d, _ in groups for label in ("light", "heavy")
                 if ("nic", label) in terms}
    return Zero3Gathers(per_layer("zero3_gather_pair", raw),
                        per_layer("zero3_moe_gather_pair", raw_heavy) if raw_heavy is not None else None,
                        excess, sharding, on_nic, nic_pairs)


def head_weight_ratios(pv: PlanVars, keys: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """Per (tp, ep): LM-head weights ÷ the cheapest layer's non-expert weights, per GPU; left out where every
    layer kind holds experts (they are gathered over fewer ranks, on another path)."""
    spec = pv.instance.job.model_spec
    kinds = layer_kinds(spec)
    return {(tp, ep): embedding_params(spec, tp) / min(layer_params(spec, kind, tp, ep).dense for kind in kinds)
            for tp, ep in keys if min(layer_params(spec, kind, tp, ep).expert for kind in kinds) == 0}


def head_gather_ratios(pv: PlanVars, sharding: OneHot) -> dict[tuple[int, int], float]:
    """Per (tp, ep): r = min(1, ``head_weight_ratios`` per GPU and whole): a pair of gathers' latency part does
    not grow with the bytes, and the cross-building gather bound counts whole layers."""
    whole = head_weight_ratios(pv, [(1, 1)]).get((1, 1), 1.0)
    return {key: min(1.0, whole, ratio) for key, ratio in head_weight_ratios(pv, sharding.values).items()}


def head_or_gathers(pv: PlanVars, name: str, head: cp_model.LinearExpr, gathers: Zero3Gathers,
                    ratios: dict[tuple[int, int], float]) -> cp_model.IntVar:
    """The LM head's fwd+bwd on a GPU of ``name``, at least its pair of ZeRO-3 gathers: ZeRO-3 gathers the head
    like one more layer (``cost.step._chunk_cost``) over the same DP group, so its pair ≥ r·(the cheapest
    layer's pair), r from ``head_gather_ratios`` — the latency part is the same, the bandwidth part in
    proportion to the bytes; ``gathers.light`` is 0 without ZeRO-3."""
    model = pv.model
    out = new_var(model, f"head_or_gathers_us[{name}]")
    model.Add(out >= head)
    for key, lit in zip(gathers.sharding.values, gathers.sharding.lits, strict=True):
        if key in ratios:
            model.Add(SCALE * out >= int(SCALE * ratios[key]) * gathers.light).OnlyEnforceIf(lit)
    return out


def sharding_choice(pv: PlanVars) -> OneHot:
    """The shape's (tp, ep) as a one-hot of its own (each literal: the sum of its shapes' literals)."""
    keys = sorted({(shape.tp, shape.ep) for shape in pv.shape.values})
    return OneHot(keys, [pv.shape.any_of(pv.model, f"tp,ep={key}", lambda shape, key=key: (shape.tp, shape.ep) == key)
                         for key in keys])
