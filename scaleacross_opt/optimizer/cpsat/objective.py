"""The linearised step time (µs), built as a lower bound of what the simulator charges.

Per building b: c_b = Σ_shape y·C[shape, gpu_b] (one layer, one micro-batch, fwd+bwd);
t_b = layers_b·c_b for a regular stage;
the LM-head stage: t_head = head_layers·c_b + LM head; t_max = max(t_b, t_head) (bottleneck stage),
and pp·t_max ≥ every layer (at its kind's cost) + LM head on the fastest GPU (c_b is the cheapest kind's).
pipeline ≥ m·t_max + bubble + hops, with
  bubble ≥ β(schedule, v)·(L·c_min + LM head − t_max)   (β = the schedule's bubble_fraction·m/(pp−1),
  its minimum; 1F1B's fill/drain is Σ of the stages other than the bottleneck),
  hops = 2(pp−1−k)·h + 2k·cross hop, k = #buildings−1 (pp across; pp+dp: the fewest boundaries of any
  group's pipeline; 0 otherwise), h = the intra hop (≤ the cross hop where the plan may cross), and under pp
  each crossing also carries one micro-batch of every replica (boundary bytes per step ÷ m) at the best
  route's goodput: the first micro-batch's forward and the last one's backward traverse every boundary;
  V-shaped schedules: the last stage (the V's tip) starts after the first micro-batch's chunk-0 forward
  crossed every boundary once (hops/2) and the stages before it (half their layers at the least forward share
  φ_min of a layer's F+B+W of the plan's recompute mode: ≥ φ_min/2 of their F+B+W; φ_min is 0.11–0.33 on the
  shipped models); with PP across the tip is the last used building's last stage (``_v_tip_chains``); split
  backward (ZB-H1): the LM-head stage's last B waits for the stages before it (their F+B ≥ layers·(c_min − W))
  but may leave its trailing W ops (pp of them) to after it:
  pipeline ≥ m·t_head + layers before it·(c_min − W) − pp·W_head stage + hops;
pipeline ≥ v·(boundary bytes per step)/(cross bandwidth) (pp across: every byte crosses the link), and
pipeline ≥ the boundary crossings on the op graph's longest path × the route's one-way latency + the F and B ops such
a path runs between its crossings (2 per crossing, 1 under interleaved's wrap) at the least op (``crossings``), and
pipeline ≥ n_F·F_min + n_B·B_min for a path of n_F forward and n_B backward ops of a fixed-order op graph, every op
at least the fewest layers of any chunk at the least per-layer pass (``critical_path``, ``_least_ops``).
Turn at the first stage (schedules that are not V-shaped): stage 0 runs its ops in order, and between
micro-batch 0's forward and backward of its latest chunk only a forwards (``turn_forwards``), while that
micro-batch crosses every later stage's last chunk and comes back: pipeline ≥ m·t_0 − a·F_0 + chain + hops
(``_add_first_stage_turn``; the chains above start at later stages, so a bottleneck first stage idled free).
ZeRO-3 where the DP group crosses NICs: a layer's fwd+bwd ≥ the NIC seconds of its gather pair, CP ring and (MoE
layers) EP all-to-all together, one NIC carrying them all (``_add_nic_sharing``); an MoE layer's is a bound of its
own, with what the dense layers save against it (``_nic_saving``).
DP sync (a reduce-scatter of the gradients): intra ≥ the first stage's bytes per GPU · cost per byte
(÷ the members of a DP group that share one NVLink domain's NICs, at most domain ÷ tp);
cross (dp or pp+dp across) ≥ the first stage's whole-layer gradient bytes · cost per byte of the ring's
slowest building edge (dp: the edges between consecutive used buildings; pp+dp: the best pair) at the
connections the ring holds (flat: one NVLink domain's, hierarchical: the larger end's GPUs) + latency
steps over the n = dp·cp ranks of a DP group (ring n−1, pat ⌈log2 n⌉, tree ⌈log2 n⌉ for ZeRO-0's all-reduce
but n−1 for ZeRO-1..3's reduce-scatter, which runs as a ring, hierarchical #buildings−1);
exposed ≥ the first stage's first chunk's sync (it syncs after the pipeline ends; ⌈ℓ/v⌉ layers and the
embedding's parameters, ``_first_chunk_steps``) less that chunk's
last backward op (its gradient buckets are released within it; ≤ ψ·t_max / v, ψ the largest share of W, or
of B+W where the backward is not split, in any layer's or the LM head's fwd+bwd); ZeRO-1/2 gather the
updated weights over the same ring after the optimizer: exposed ≥ that chunk's gather less the next step's
first forward of it (≤ φ·t_max / v, φ the largest forward share fwd ÷ (fwd+bwd) of any layer or LM head;
the later chunks' gathers may hide behind the forwards before theirs) — but the forward needs its bucket k of n
k/n into it, so F/n of it hides nothing (≥ the chunk's layers at their least F, ÷ n).
Dense models: the same terms over the first chunk's last gradient bucket (``_last_bucket_layers``: ≥ one
layer under ZeRO-3, else ≥ min(chunk, half the plan's bucket: Megatron's default × its bucket factor)):
exposed ≥ it where no backward is split (the chunk releases it as the pipeline's last op ends), and
ZeRO-1/2 exposed gather ≥ its gather (the first gather bucket is needed by the next step's first op).
Every model: each of the first chunk's n buckets pays the collective's latency, so its sync and gather carry
(n − 1) more (``_more_buckets_latency``: n ≥ the chunk's parameters synced over all dp·cp ranks ÷ the bucket,
or its layers under ZeRO-3).
step ≥ pipeline + exposed DP + optimizer + exposed gather; ZeRO-0..2: step ≥ the first stage's DP stream from its
first bucket's release (``_first_release_us``) through every chunk's sync, the optimizer and the gathers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate, pairwise, product

from ortools.sat.python import cp_model

from ...catalog import coefficients as co
from ...cost.compute import LayerKind, layer_kinds
from ...cost.layout import nvlink_domain
from ...cost.memory import embedding_params, layer_params
from ...cost.step import megatron_bucket_params
from ...schedules import get_schedule
from ...spec import CollectiveAlgorithm, CrossBuilding
from ...spec.bounds import MAX_BUCKET_PARAMS
from ..coefficients import Coefficients, node_gpus, pairings
from ..space import Shape
from .critical_path import critical_path_ops
from .crossings import crossing_table
from .variables import OneHot, PlanVars, Transport

SCALE = 1000  # fixed-point scale for fractional coefficients
HORIZON_US = 10**11  # ~28 hours: larger than any step, small enough that scaled sums stay in int64
BUCKET_STEPS = 16  # the last gradient bucket's size is counted in 1/16 layers (rounded down)


def _new(model: cp_model.CpModel, name: str, upper: int = HORIZON_US) -> cp_model.IntVar:
    return model.NewIntVar(0, upper, name)


def _upper(var: cp_model.IntVar) -> int:
    return var.domain.max()


def _product(model: cp_model.CpModel, name: str, a: cp_model.IntVar, b: cp_model.IntVar) -> cp_model.IntVar:
    """min(a·b, HORIZON_US): capping keeps the term a lower bound, and a plan slower than the horizon
    stays admissible instead of making the model infeasible."""
    reach = _upper(a) * _upper(b)
    out = _new(model, name)
    if reach <= HORIZON_US:
        model.AddMultiplicationEquality(out, [a, b])
        return out
    if reach >= 1 << 62:
        raise ValueError(f"product {name} may reach {reach}, beyond int64")
    uncapped = model.NewIntVar(0, reach, f"{name}_uncapped")
    model.AddMultiplicationEquality(uncapped, [a, b])
    model.AddMinEquality(out, [uncapped, HORIZON_US])
    return out


def bubble_factor(schedule_name: str, v: int, pp_values: list[int], m_values: list[int]) -> float:
    """Smallest β = bubble_fraction·m/(pp−1) over the pipelines the schedule accepts (a lower bound)."""
    schedule = get_schedule(schedule_name)
    factors = [schedule.bubble_fraction(pp, v, m) * m / (pp - 1)
               for pp in pp_values if pp > 1 for m in m_values if schedule.check(pp, v, m) is None]
    return max(0.0, min(factors)) if factors else 0.0


def ring_factor(group: int) -> float:
    """Ring reduce-scatter / all-gather volume 2(n−1)/n relative to its n = 2 value (which the
    coefficients use), for a DP group of at least ``group`` ranks."""
    return 2 * (group - 1) / group if group > 1 else 1.0


def _layers_left(pv: PlanVars, name: str, total: int, minus: list[cp_model.IntVar]) -> cp_model.IntVar:
    """max(0, total − head_layers − Σ minus): layers on the stages before a chain's stage."""
    out = pv.model.NewIntVar(0, total, f"layers_{name}")
    pv.model.AddMaxEquality(out, [0, total - pv.head_layers - sum(minus)])
    return out


def _is_pp_mode(pv: PlanVars) -> cp_model.IntVar | None:
    return pv.mode.lit(CrossBuilding.PP) if CrossBuilding.PP in pv.mode.values else None


def fewest_cut_crossings(schedule_name: str, v: int, pp_values: list[int]) -> int:
    """Fewest times one micro-batch's forward pass crosses a cut between stages 0..k−1 and k..pp−1, over the
    depths ``pp_values`` and cuts k: each chunk crosses it once and, where the schedule wraps from the last
    stage back to the first (interleaved: chunk-major layer order), each wrap once more, 2v − 1 in all; a
    V-shaped schedule turns at the last stage, v. The backward pass crosses it as often the other way, so
    each direction of the cut carries this many activations or gradients per micro-batch."""
    schedule = get_schedule(schedule_name)
    counts = []
    for pp in pp_values:
        stage_at = {schedule.chunk_stage(pp, v, c, s): s for c in range(v) for s in range(pp)}
        order = [stage_at[i] for i in range(pp * v)]
        starts = [0] * (pp + 1)  # a step from stage a to b crosses the cuts k with min(a, b) < k ≤ max(a, b)
        for a, b in pairwise(order):
            starts[min(a, b) + 1] += 1
            starts[max(a, b) + 1] -= 1
        counts += list(accumulate(starts))[1:pp]
    return min(counts, default=v)


def _microbatch_lits(pv: PlanVars) -> list[tuple[int, cp_model.IntVar]]:
    """(m, "the plan has m micro-batches") for every m of the space."""
    lits = []
    for m in pv.microbatch_values:
        lit = pv.model.NewBoolVar(f"m={m}")
        pv.model.Add(pv.microbatches == m).OnlyEnforceIf(lit)
        pv.model.Add(pv.microbatches != m).OnlyEnforceIf(lit.Not())
        lits.append((m, lit))
    return lits


def _at_most_two_used(pv: PlanVars) -> list[cp_model.IntVar] | None:
    """Literals under which at most two buildings are used ([] when the cluster has two; None: one)."""
    used = len(pv.used)
    if used < 2:
        return None
    if used == 2:
        return []
    lit = pv.model.NewBoolVar("used_buildings<=2")
    pv.model.Add(sum(pv.used) <= 2).OnlyEnforceIf(lit)
    pv.model.Add(sum(pv.used) >= 3).OnlyEnforceIf(lit.Not())
    return [lit]


def add_objective(pv: PlanVars, coeffs: Coefficients, products: dict[str, list[cp_model.IntVar]]
                  ) -> cp_model.IntVar:
    """Post the step-time terms; returns the step variable (µs), also stored in ``pv.terms``."""
    model, instance = pv.model, pv.instance
    layers_pp, group_head = products["layers_pp"], products["group_head"]
    buildings = instance.cluster.buildings
    pp_mode = _is_pp_mode(pv)
    pp_dp = pv.mode.lit(CrossBuilding.PP_DP) if CrossBuilding.PP_DP in pv.mode.values else None
    whole = [lit for mode, lit in zip(pv.mode.values, pv.mode.lits, strict=True)  # whole pipelines per building
             if mode not in (CrossBuilding.PP, CrossBuilding.PP_DP)]

    holds_head = []  # per building: conjunctions, any of which means it holds a pipeline's LM-head stage
    for b in range(len(buildings)):
        holds_head.append([[pv.used[b], lit] for lit in whole]
                          + ([[pv.used[b], pv.head[b], pp_mode]] if pp_mode is not None else [])
                          + ([[pv.used[b], group_head[b], pp_dp]] if pp_dp is not None else []))
    head_only = []  # pp+dp: building b holds nothing but its group's LM-head stage
    if pp_dp is not None:
        for b, building in enumerate(buildings):
            flag = model.NewBoolVar(f"group_head_only[{building.name}]")
            model.AddBoolAnd([pp_dp, group_head[b], products["only_head"][b]]).OnlyEnforceIf(flag)
            model.AddBoolOr([pp_dp.Not(), group_head[b].Not(), products["only_head"][b].Not(), flag])
            head_only.append(flag)

    successors = _ring_successors(pv)
    inter_group = _inter_group_pairs(pv)
    ring_hop = _ring_hop_us(pv, coeffs, successors, "dp_ring_hop_us", inter_group)
    groups = _dp_group_sizes(pv)
    inner = _inner_ring(pv, groups)
    gathers = (_zero3_gathers(pv, coeffs, successors, inter_group, ring_hop, groups, inner)
               if 3 in pv.zero.values else None)

    # Layer costs depend on whether the schedule pairs micro-batches (DualPipe hides the EP all-to-all)
    paired = None
    if len(pairings(pv.space)) == 2:
        paired = pv.schedule_chunks.any_of(model, "schedule_pairs_microbatches",
                                           lambda chunks: get_schedule(chunks[0]).pairs_microbatches)

    def by_pairing(name: str, table: dict, building: str | None) -> cp_model.IntVar:
        """The value ``table[(shape, building, pairs)]`` takes for the plan's shape and schedule."""
        rows = {pairs: [table[(shape, building, pairs)] for shape in pv.shape.values] for pairs in pairings(pv.space)}
        if paired is None:
            return pv.shape.value_var(pv.model, name, next(iter(rows.values())))
        out = _new(model, name, max(max(row) for row in rows.values()))
        for pairs, row in rows.items():
            model.Add(out == pv.shape.linear(row)).OnlyEnforceIf(paired if pairs else paired.Not())
        return out

    # --- compute per stage -------------------------------------------------------------------------
    per_layer_times, layer_stage_times = [], []  # per building: one layer, a regular stage (cheapest kind)
    head_ratios = _head_gather_ratios(pv, gathers.sharding) if gathers is not None else {}
    # V-shaped schedules: the LM-head stage is the first, so it also gathers the embedding (as large as the head),
    # in another op (chunk 0's) than the head's
    embedding_gathers = None
    if head_ratios and any(get_schedule(name).head_stage(2, v) == 0 for name, v in pv.schedule_chunks.values):
        embedding_gathers = _new(model, "v_head_stage_embedding_gathers_us")
        for key, lit in zip(gathers.sharding.values, gathers.sharding.lits, strict=True):
            if key in head_ratios:
                model.Add(SCALE * embedding_gathers >= int(SCALE * head_ratios[key]) * gathers.light
                          ).OnlyEnforceIf([lit, products["v_shape"][0]])
    head_stages = []  # per building: (head_layers·c_b, c_b, LM head µs, when the LM-head stage is here)
    t_reg = _new(model, "t_regular")
    t_max = _new(model, "t_max")
    t_head_max = _new(model, "t_head_stage")  # the LM-head stage of the slowest pipeline
    model.Add(t_max >= t_reg)
    layer_passes = []  # per building: one layer's least forward and least full backward (F, B+W) of any kind
    unsplit = pv.schedule_chunks.any_of(model, "backward_not_split",
                                        lambda chunks: not get_schedule(chunks[0]).splits_backward)
    for b, building in enumerate(buildings):
        passes = {part: by_pairing(f"layer_{part}_least_us[{building.name}]", table, building.name)
                  for part, table in (("forward", coeffs.layer_forward_least_us),
                                      ("backward", coeffs.layer_backward_least_us))}
        layer_passes.append((passes["forward"], passes["backward"]))
        least_weight = pv.shape.value_var(model, f"layer_weight_least_us[{building.name}]",
                                          [coeffs.layer_weight_least_us[(shape, building.name)]
                                           for shape in pv.shape.values]) if gathers is not None else None
        # per-layer bounds (µs) with what the stage may take off: the cheapest kind's layers, and for models
        # with layers of several kinds the costliest kind's less what the cheaper layers could save
        bounds = [(coeffs.layer_us, 0, "layer", gathers.light if gathers else None)]
        if coeffs.heavy_layer_us:
            discount = by_pairing(f"light_discount_us[{building.name}]", coeffs.light_discount_us, building.name)
            if gathers is not None and gathers.excess is not None:
                # max(a, b) − max(c, d) ≤ max(a − c, b − d): the dense layers save at most the larger excess
                either = _new(model, f"light_discount_or_gathers_us[{building.name}]", HORIZON_US)
                model.AddMaxEquality(either, [discount, gathers.excess])
                discount = either
            bounds.append((coeffs.heavy_layer_us, discount, "heavy_layer", gathers.heavy if gathers else None))
            if gathers is not None:  # and an MoE layer's NIC seconds under ZeRO-3 (``_add_nic_sharing``)
                bounds.append((None, _nic_saving(pv, coeffs, building.name, gathers, groups), "moe_nic", None))
        head = pv.shape.linear([coeffs.head_us[(shape, building.name)] for shape in pv.shape.values])
        if gathers is not None:
            head = _head_or_gathers(pv, building.name, head, gathers, head_ratios)
            if embedding_gathers is not None:
                head = head + embedding_gathers
        conditions = holds_head[b]
        for table, discount, label, gather in bounds:
            if table is None:
                per_layer = _new(model, f"{label}_us[{building.name}]")
                _add_nic_sharing(pv, coeffs, building.name, per_layer, "heavy", gathers, groups)
            else:
                per_layer = by_pairing(f"{label}_us[{building.name}]", table, building.name)
            if gather is not None:  # ZeRO-3: a layer lasts at least its pair of weight gathers
                gathered = _new(model, f"{label}_or_gathers_us[{building.name}]",
                                max(_upper(per_layer), _upper(gather)))
                model.Add(gathered >= per_layer)
                model.Add(gathered >= gather)
                # a split backward's W ops overlap no gather: max(F, g) + max(B, g) + W ≥ 2g + W
                model.Add(gathered >= gather + least_weight).OnlyEnforceIf(unsplit.Not())
                if label == "layer":  # max(F, g) + max(B+W, g) ≥ F + g and ≥ B+W + g, g = ½ the pair
                    for least in passes.values():
                        model.Add(2 * gathered >= 2 * least + gather)
                    model.Add(2 * gathered >= 2 * (passes["forward"] + least_weight) + gather
                              ).OnlyEnforceIf(unsplit.Not())  # … and split, ≥ F + g + W
                if label == "layer":  # (an MoE layer's is the "moe_nic" bound, with a discount of its own)
                    _add_nic_sharing(pv, coeffs, building.name, gathered, "light", gathers, groups)
                per_layer = gathered
            # b's most-loaded regular stage holds at least ``timed_layers[b]``
            stage_us = _product(model, f"{label}_stage_us[{building.name}]", products["timed_layers"][b], per_layer)
            t_b = stage_us - discount
            if label != "layer" and products["moe_only_stage"]:
                # its last regular stage (the one ``timed_layers`` counts) holds only MoE layers: no discount
                model.Add(t_reg >= stage_us).OnlyEnforceIf([pv.used[b], products["moe_only_stage"][b]])
            if label == "layer":
                per_layer_times.append(per_layer)
                layer_stage_times.append(stage_us)  # the cheapest kind takes no discount
            if pp_dp is None:
                model.Add(t_reg >= t_b)
            else:  # a pp+dp building holding just its group's LM-head stage has no regular stage
                model.Add(t_reg >= t_b).OnlyEnforceIf(head_only[b].Not())
            t_head = _product(model, f"head_stage_{label}s_us[{building.name}]", pv.head_layers, per_layer)
            for condition in conditions:
                model.Add(t_head_max >= t_head - discount + head).OnlyEnforceIf(condition)
            if label == "layer":
                head_stages.append((t_head, per_layer, head, conditions))
    model.Add(t_max >= t_head_max)
    # the slowest stage takes at least the average: pp·t_max ≥ the whole model on the fastest GPU (this is
    # what bounds MoE models, whose per-layer bound above is the cheaper dense layer)
    stages_x_t_max = model.NewIntVar(0, HORIZON_US * max(pv.space.pp), "pp*t_max")
    model.AddMultiplicationEquality(stages_x_t_max, [pv.pp_var, t_max])
    model.Add(stages_x_t_max >= by_pairing("model_us", {(shape, None, pairs): us for (shape, pairs), us
                                                        in coeffs.model_us.items()}, None))
    compute = _product(model, "compute_us", pv.microbatches, t_max)
    # … and the batch's work over the cluster's throughput (``Coefficients.compute_floor_us``): a constant per
    # shape, linear in its one-hot, so the LP relaxation sees it (the products above are invisible to it, and
    # its bound stayed near 0 until the search closed the gap)
    model.Add(compute >= pv.shape.linear([coeffs.compute_floor_us[shape] for shape in pv.shape.values]))

    # Chain bounds: a stage k cannot start before micro-batch 0's forward reached it nor end before the
    # last backward left it, so T ≥ m·t_k + β·Σ_{s<k} t_s + hops to k and back, with β = 1 for 1F1B-like
    # schedules, 1/v interleaved, 1/3 zero-bubble (the part of a stage's work on that chain).
    # k = the LM-head stage (last): Σ_{s<k} t_s ≥ (L − head_layers)·c_min. k = the last regular stage
    # (whole pipelines, pp ≥ 2; the layer split trims the first stages, so it holds layers[b]):
    # Σ_{s<k} t_s ≥ (L − head_layers − layers)·c_min. V-shaped schedules: only the chunk-0 forward chain.
    layers_total = instance.job.model_spec.layers
    fastest = _new(model, "fastest_layer_us")
    model.AddMinEquality(fastest, per_layer_times)
    layers_before_head = _layers_left(pv, "before_head", layers_total, [])
    before_head = _layers_cost(pv, "layers_before_head", layers_before_head, per_layer_times, fastest,
                               products["layer_slots"])
    m_head = _product(model, "m*t_head", pv.microbatches, t_head_max)
    even = pv.layers  # in whole-pipeline modes every used building has the same layers[b]
    before_last_regular = [
        _product(model, f"layers_before_regular*c[{b.name}]",
                 _layers_left(pv, f"before_regular[{b.name}]", layers_total, [even[i]]), fastest)
        for i, b in enumerate(buildings)]
    m_regular = _product(model, "m*t_reg", pv.microbatches, t_reg)
    # pp+dp: every group's last regular stage also holds the even split; on the fastest GPU it takes
    # layers·c_min (which building of its group holds it is not modelled)
    m_even_fastest = [
        _product(model, f"m*layers*c_min[{b.name}]", pv.microbatches,
                 _product(model, f"layers*c_min[{b.name}]", pv.layers[i], fastest))
        for i, b in enumerate(buildings)] if pp_dp is not None else []

    # hops: one forward and one backward traversal of the pipeline's boundaries (latency, and under pp the
    # crossings' bytes): the fabric's
    # hop inside a building, the route's where a boundary crosses buildings (pp: one per used building after
    # the first, pp+dp: the fewest of any group's pipeline); hop_floor ≤ either, for the boundaries inside
    crossing = (pp_mode is not None or pp_dp is not None) and pv.cross_transport is not None
    hop_floor = min(coeffs.intra_hop_us, *coeffs.cross_hop_us.values()) if crossing else coeffs.intra_hop_us
    hops = _new(model, "hops_us")
    model.Add(hops >= 2 * hop_floor * (pv.pp_var - 1))
    for mode_lit in whole if hop_floor < coeffs.intra_hop_us else []:
        model.Add(hops >= 2 * coeffs.intra_hop_us * (pv.pp_var - 1)).OnlyEnforceIf(mode_lit)
    pipeline = _new(model, "pipeline_us")
    model.Add(pipeline >= compute)
    # two buildings: one route carries every crossing of their cut, the wrap-arounds included
    two_buildings = _at_most_two_used(pv) if pp_mode is not None else None
    depths = [pp for pp in pv.pp.values if pp > 1]
    wrapping = [] if two_buildings is None else [
        (lit, crossings) for (name, v), lit in zip(pv.schedule_chunks.values, pv.schedule_chunks.lits, strict=True)
        if (crossings := fewest_cut_crossings(name, v, depths)) > v]
    if crossing:
        # every group's first forward and last backward cross its pipeline's building boundaries; all
        # replicas' activations cross each boundary under pp (pp+dp: only its group's, left out)
        microbatch_lits = _microbatch_lits(pv) if pp_mode is not None else []
        for transport, lit in zip(pv.cross_transport.values, pv.cross_transport.lits, strict=True):
            extra = 2 * (coeffs.cross_hop_us[transport] - hop_floor)  # a crossing boundary instead of one inside
            if pp_dp is not None:
                model.Add(hops >= 2 * hop_floor * (pv.pp_var - 1) + extra * pv.group_min_boundaries
                          ).OnlyEnforceIf([pp_dp, lit])
            if pp_mode is None:
                continue
            # … and each crossing carries one micro-batch of every replica (1/m of the step's boundary bytes)
            # at no more than the best route's goodput, each way
            for m, m_lit in microbatch_lits:
                sent = 2 * int(coeffs.pp_link_mib_per_chunk / m * coeffs.cross_us_per_mib[transport])
                model.Add(hops >= 2 * hop_floor * (pv.pp_var - 1) + (extra + sent) * (sum(pv.used) - 1)
                          ).OnlyEnforceIf([pp_mode, lit, m_lit])
            per_chunk = int(coeffs.pp_link_mib_per_chunk * coeffs.cross_us_per_mib[transport])
            model.Add(pipeline >= per_chunk * pv.virtual_var).OnlyEnforceIf([pp_mode, lit])
            for chunks_lit, crossings in wrapping:
                model.Add(pipeline >= per_chunk * crossings).OnlyEnforceIf([pp_mode, lit, chunks_lit, *two_buildings])
    several_stages = [pv.pp.lit(1).Not()] if 1 in pv.pp.values else []
    v_chunks: dict[int, cp_model.IntVar] = {}  # v → "the plan has v chunks per stage"
    for v in sorted({v for _, v in pv.schedule_chunks.values}):
        v_chunks[v] = pv.schedule_chunks.any_of(model, f"v={v}", lambda chunks, v=v: chunks[1] == v)
    most_layers = _most_stage_layers(pv)
    first_layers = _first_chunk_layers_at_most(pv, v_chunks, products["v_shape"][0], most_layers)
    # an upper bound of any forward op of the first stage: its first chunk's (the largest, with the embedding)
    longest_forward = pv.shape.value_var(pv.model, "layer_forward_us",
                                         [coeffs.layer_forward_us[shape] for shape in pv.shape.values])
    first_forward = _first_chunk_op_us(pv, "forward", first_layers, longest_forward,
                                       coeffs.embedding_forward_us, coeffs.head_forward_us)
    v_shaped = any(get_schedule(name).head_stage(2, v) == 0 for name, v in pv.schedule_chunks.values)
    v_tip = (_v_tip_chains(pv, pp_mode, layer_stage_times, per_layer_times, products["layer_slots"],
                           products["last_used"], products["timed_layers"])
             if pp_mode is not None and v_shaped else None)
    # pp across: stage pp − 2 is the last building's when it holds two stages or more
    two_stages = []
    for b, name in enumerate(pv.buildings) if pp_mode is not None else []:
        lit = model.NewBoolVar(f"two_stages_or_more[{name}]")
        model.Add(pv.stages[b] >= 2).OnlyEnforceIf(lit)
        model.Add(pv.stages[b] <= 1).OnlyEnforceIf(lit.Not())
        two_stages.append(lit)
    inner_last = {head_first: _inner_buildings_last_stages(pv, products, per_layer_times, fastest, head_first)
                  for head_first in ((False, True) if v_shaped else (False,))} if two_stages else {}
    m_layer_stage = [_product(model, f"m*layer_stage_us[{name}]", pv.microbatches, stage_us)
                     for name, stage_us in zip(pv.buildings, layer_stage_times, strict=True)] if two_stages else []
    tip_end = _new(model, "v_tip_end_us")  # when the V's tip stage ends its last op (pp across)
    tip_syncs: list[tuple[cp_model.IntVar, int]] = []  # (schedule, W ops after the tip's last chunk-1 W)
    whole_tip_end = _new(model, "v_whole_tip_end_us")  # whole pipelines (none, dp): when a V's tip ends its last op
    pp_dp_tip_end = _new(model, "v_pp_dp_tip_end_us")  # … pipelines over a group of buildings (pp+dp)
    whole_tip_syncs: list[tuple[cp_model.IntVar, int]] = []  # … and the W ops it runs after its last chunk-1 W
    split_chain = None
    layer_weight = pv.shape.value_var(pv.model, "layer_weight_us",
                               [coeffs.layer_weight_us[shape] for shape in pv.shape.values])
    less_weight = _new(model, "fastest_layer_less_weight_us")  # c_min − W: a layer's F + B at least
    model.AddMaxEquality(less_weight, [0, fastest - layer_weight])
    # per recompute mode: the (least, largest) forward share of a layer's F+B+W, and whether the plan's shape has it
    forward_shares = [(least, most, pv.shape.any_of(model, f"recompute={recompute.value}",
                                                    lambda shape, r=recompute: shape.recompute == r))
                      for recompute, (least, most) in coeffs.layer_forward_shares.items()] if v_shaped or any(
        get_schedule(name).splits_backward for name, _ in pv.schedule_chunks.values) else []
    v_head = _v_head_stage_wait(pv, head_stages, fastest, before_head, hops, forward_shares,
                                (layers_before_head, gathers.light) if gathers else None) if v_shaped else None
    for (name, v), lit in zip(pv.schedule_chunks.values, pv.schedule_chunks.lits, strict=True):
        schedule = get_schedule(name)
        if schedule.head_stage(2, v) == 0:
            model.Add(pipeline >= v_head).OnlyEnforceIf(lit)
            # pp across: the tip is the last used building's last stage; it starts once micro-batch 0's forward
            # crossed the chunk 0 of every stage before it (half their layers, at the least forward share)
            for (tail, m_tip, before_tip), (least, _, when) in product(v_tip.chains if v_tip else [], forward_shares):
                model.Add(2 * SCALE * tip_end >= 2 * SCALE * m_tip + SCALE * hops + int(SCALE * least) * before_tip
                          ).OnlyEnforceIf([lit, pp_mode, tail, when])
            if v_tip:
                model.Add(pipeline >= tip_end).OnlyEnforceIf([lit, pp_mode])
                # … as does every other used building's last stage, after the chunk-0 forwards of the stages
                # before it
                for (b, before_cost), (least, _, when) in product(enumerate(inner_last[True]), forward_shares):
                    model.Add(2 * SCALE * pipeline >= 2 * SCALE * m_layer_stage[b] + int(SCALE * least) * before_cost
                              ).OnlyEnforceIf([lit, pp_mode, pv.used[b], products["last_used"][b].Not(), when])
                counts = {schedule.tip_trailing_weight_ops(pp, v, m) for pp in pv.pp.values if pp > 1
                          for m in pv.microbatch_values if schedule.check(pp, v, m) is None}
                if counts and None not in counts:
                    tip_syncs.append((lit, max(counts)))
            # V shape: the last stage (a regular one) starts once micro-batch 0's chunk-0 forward crossed
            # the stages before it: half their layers (chunk 0 holds ⌈ℓ/2⌉), forward only (at least the shape's
            # recompute mode's least forward share of a layer's F+B+W), and every boundary once (hops / 2)
            for b, (least, _, when) in product(range(len(buildings)), forward_shares):
                chain = int(SCALE * least) * before_last_regular[b]
                for mode_lit in whole:
                    model.Add(2 * SCALE * whole_tip_end >= 2 * SCALE * m_regular + SCALE * hops + chain
                              ).OnlyEnforceIf([lit, mode_lit, pv.used[b], when, *several_stages])
                if pp_dp is not None:
                    model.Add(2 * SCALE * pp_dp_tip_end >= 2 * SCALE * m_even_fastest[b] + SCALE * hops + chain
                              ).OnlyEnforceIf([lit, pp_dp, pv.used[b], when, *several_stages])
            counts = {schedule.tip_trailing_weight_ops(pp, v, m) for pp in pv.pp.values if pp > 1
                      for m in pv.microbatch_values if schedule.check(pp, v, m) is None}
            if (whole or pp_dp is not None) and counts and None not in counts:
                whole_tip_syncs.append((lit, max(counts)))
            continue
        beta = min(1.0, bubble_factor(name, v, pv.pp.values, pv.microbatch_values))
        # β·Σ_{s<k} t_s is the chain's part of the stages' work. Where the backward is split, the stage's trailing
        # W ops may hide the whole backward chain (a heavy LM-head stage defers more W than the chain holds B), so
        # only the forward chain is sure: β at most the recompute mode's least forward share (zero-bubble's 1/3
        # assumes T_F = T_B = T_W; under full recompute F is 0.25 of a layer: single-building ZB-H1 pp64, bound
        # 10.44 s against a simulated 10.20 s before)
        betas = ([(int(SCALE * min(beta, least)), [when]) for least, _, when in forward_shares]
                 if schedule.splits_backward else [(int(SCALE * beta), [])])
        for beta, when in betas:
            model.Add(SCALE * pipeline >= SCALE * (m_head + hops) + beta * before_head).OnlyEnforceIf([lit, *when])
        if schedule.splits_backward:
            # the LM-head stage k (= pp − 1) ends its last B no sooner than m·t_k less the W ops it still runs
            # after it, and the stages before it add their F on the first micro-batch's chain and their B on
            # the last one's: T ≥ m·t_k + Σ_{s<k} (t_s − W_s) − trailing W·W_k + hops
            if split_chain is None:
                split_chain = _split_backward_chain(pv, coeffs, layers_before_head, less_weight, layer_weight)
            before_less_w, head_w = split_chain
            for pp, pp_lit in zip(pv.pp.values, pv.pp.lits, strict=True):
                counts = [schedule.trailing_weight_ops(pp, v, m) for m in pv.microbatch_values
                          if schedule.check(pp, v, m) is None]
                if pp > 1 and counts:
                    model.Add(pipeline >= m_head + hops + before_less_w - max(counts) * head_w
                              ).OnlyEnforceIf([lit, pp_lit])
        for (beta, when), b in product(betas, range(len(buildings))):
            for mode_lit in whole:
                model.Add(SCALE * pipeline >= SCALE * (m_regular + hops - 2 * coeffs.intra_hop_us)
                          + beta * before_last_regular[b]
                          ).OnlyEnforceIf([lit, mode_lit, pv.used[b], *several_stages, *when])
            if two_stages:
                # pp across: stage pp − 2 is the last used building's last regular stage when it holds two
                # stages or more (m_layer_stage counts its layers less any trimming that reached it) …
                model.Add(SCALE * pipeline >= SCALE * (m_layer_stage[b] + hops - 2 * coeffs.intra_hop_us)
                          + beta * before_last_regular[b]
                          ).OnlyEnforceIf([lit, pp_mode, products["last_used"][b], two_stages[b], *when])
                # … and every other used building's last stage
                model.Add(SCALE * pipeline >= SCALE * m_layer_stage[b] + beta * inner_last[False][b]).OnlyEnforceIf(
                    [lit, pp_mode, pv.used[b], products["last_used"][b].Not(), *when])
            if pp_dp is not None:
                model.Add(SCALE * pipeline >= SCALE * m_even_fastest[b] + beta * before_last_regular[b]
                          ).OnlyEnforceIf([lit, pp_dp, pv.used[b], *several_stages, *when])
    model.Add(pipeline >= whole_tip_end)
    model.Add(pipeline >= pp_dp_tip_end)
    holds_first = [[[mode_lit, pv.used[b]] for mode_lit in whole]  # building b holds a pipeline's first stage
                   + ([[pp_mode, products["first_used"][b]]] if pp_mode is not None else [])
                   for b in range(len(buildings))]
    _add_first_stage_turn(pv, coeffs, pipeline, hops, FirstStage(
        [_product(model, f"first_stage_layers*c[{name}]", layers, c)
         for name, layers, c in zip(pv.buildings, products["stage_layers"], per_layer_times, strict=True)],
        holds_first, most_layers, first_forward), fastest, less_weight, v_chunks)
    least_passes = _least_passes_anywhere(pv, layer_passes)
    path_ops = critical_path_ops(pv)
    if path_ops is not None:  # pipeline ≥ n_F·F_min + n_B·B_min (``critical_path``)
        least = _least_ops(pv, least_passes, gathers.light if gathers else None, layer_weight, unsplit,
                           products["stage_layers"])
        model.Add(pipeline >= sum(_product(model, f"critical_path_{kind}_us", count, op)
                                  for kind, count, op in zip(("forward", "backward"), path_ops, least, strict=True)))
        least_op = pv.terms["least_crossing_op"] = _new(model, "least_crossing_op_us")
        model.AddMinEquality(least_op, least)
    # PP across: one route latency per boundary crossing on a path, and the ops between the crossings
    table = crossing_table(pv, pp_mode)
    if table is not None:
        crossings, ops = table
        between = _product(model, "crossing_ops_us", ops, least_op) if path_ops is not None else 0
        for transport, lit in zip(pv.cross_transport.values, pv.cross_transport.lits, strict=True):
            model.Add(pipeline >= pv.cross_hop_us[transport] * crossings + between).OnlyEnforceIf([pp_mode, lit])

    nic_busy = _dp_nic_bounds(pv, coeffs)
    if gathers is not None:
        nic_busy += _zero3_nic_bounds(pv, coeffs, groups, gathers.sharding, gathers.on_nic, holds_head,
                                      products["v_shape"][0])
    route_busy = _add_dp_route_bounds(pv, coeffs, groups)

    # --- data-parallel gradient sync ---------------------------------------------------------------
    sync_layers = _sync_layers(pv, products["v_shape"][0])
    chunk_layers, chunk_steps = _first_chunk_steps(pv, coeffs, sync_layers, v_chunks)
    bucket_layers = _last_bucket_layers(pv, coeffs, groups, chunk_steps)
    spans = [("first_chunk_sync", chunk_steps, BUCKET_STEPS)] + ([("last_bucket", bucket_layers, BUCKET_STEPS)]
                                                                  if bucket_layers is not None else [])
    if tip_syncs:
        spans.append(("v_tip_sync", v_tip.layers, 1))
    whole_tip_layers = None
    if whole_tip_syncs and whole:  # whole pipelines: the tip is each used building's last stage, ≥ timed_layers[b]
        whole_tip_layers = _new(model, "v_whole_tip_layers", pv.instance.job.model_spec.layers)
        model.AddMinEquality(whole_tip_layers, _layers_if_used(pv, "v_whole_tip_layers_if_used",
                                                               pv.instance.job.model_spec.layers,
                                                               products["timed_layers"]))
        spans.append(("v_whole_tip_sync", whole_tip_layers, 1))
    other_layers = _new(model, "other_chunks_layers", pv.instance.job.model_spec.layers)
    model.Add(other_layers == sync_layers - chunk_layers)  # the first stage's other chunks, at least
    spans.append(("other_chunks_sync", other_layers, 1))
    bucket_latency = _new(model, "dp_bucket_latency_us")
    # the spans are the first stage's gradients: under pp+dp its ring joins the groups' first buildings
    first_stage_edges = _first_stage_ring_edges(pv)
    sync_edges = successors + first_stage_edges
    sync_hop = (_ring_hop_us(pv, coeffs, sync_edges, "first_stage_dp_ring_hop_us", inter_group)
                if first_stage_edges else ring_hop)
    tree_ring = _tree_runs_ring(pv)
    dense_sync, *last_bucket = _add_dp_sync(pv, coeffs, sync_edges, inter_group, sync_hop, groups, spans,
                                            bucket_latency, inner, tree_ring)
    chunk_sync = _new(model, "first_chunk_sync_us")
    moe_layers = _chunk_moe_layers(pv, coeffs, chunk_layers, "first_chunk")
    model.Add(chunk_sync == dense_sync + _expert_chunk_sync(pv, coeffs, moe_layers, "first_chunk"))
    others_sync = _new(model, "other_chunks_sync_us")
    model.Add(others_sync == last_bucket.pop() + _expert_chunk_sync(
        pv, coeffs, _chunk_moe_layers(pv, coeffs, other_layers, "other_chunks"), "other_chunks"))
    whole_tip_sync = last_bucket.pop() if whole_tip_layers is not None else None
    tip_sync = last_bucket.pop() if tip_syncs else None
    # every gradient bucket of the first chunk but one pays the collective's latency again (sync and gather)
    extra, buckets = _more_buckets_latency(pv, coeffs, groups, chunk_layers, chunk_steps, bucket_latency)
    expert_extra, expert_latency = _expert_buckets_latency(pv, coeffs, groups, moe_layers, sync_hop, tree_ring)
    extra += expert_extra
    last_bucket_forward = 0  # the forward of the first chunk's last bucket: ≥ its least F ÷ its buckets
    if buckets is not None:
        least = [min(us for (shape, _, _), us in coeffs.layer_forward_least_us.items() if shape == s)
                 for s in pv.shape.values]
        chunk_forward = _product(model, "first_chunk_forward_least_us", chunk_layers,
                                 pv.shape.value_var(model, "layer_forward_least_us", least))
        last_bucket_forward = _new(model, "first_chunk_forward_least_per_bucket_us")
        model.AddDivisionEquality(last_bucket_forward, chunk_forward, buckets)
    dp_exposed = _new(model, "dp_exposed_us")
    # A chunk's buckets are released within its last backward op (≤ ψ·t_max / v, ψ its largest share of a
    # layer's fwd+bwd: W's where the schedule splits the backward, B+W's where not): at most that much of its
    # sync hides behind it (``StepWorkload.dp_jobs``); the buckets' extra latency is left out (a lower bound).
    for splits, split_lit in ((False, unsplit), (True, unsplit.Not())):
        last_op = math.ceil(SCALE * coeffs.last_op_share[splits])
        for v, v_on in v_chunks.items():  # one chunk's sync, less its last backward op
            model.Add(SCALE * v * dp_exposed >= SCALE * v * (chunk_sync + extra) - last_op * t_max
                      ).OnlyEnforceIf([v_on, split_lit])
    # where the backward is split, that last op is a W: at most the chunk's layers' and embedding's W (the LM
    # head's too with one stage)
    first_weight = _first_chunk_op_us(pv, "weight", first_layers, layer_weight, coeffs.embedding_weight_us,
                                      coeffs.head_weight_us)
    model.Add(dp_exposed >= chunk_sync + extra - first_weight).OnlyEnforceIf(unsplit.Not())
    # Where no backward is split, the first stage's first chunk runs the pipeline's last op and releases its
    # last bucket as it ends: that bucket is exposed whole.
    for bucket in last_bucket:
        model.Add(dp_exposed >= bucket).OnlyEnforceIf(unsplit)

    # ZeRO-1/2: the all-gather of the updated weights after the optimizer (the same ring, bf16 weights instead
    # of the reduced gradients: ≥ WEIGHT/GRAD_REDUCE of the sync bound when that ratio is ≤ 1): the first
    # stage's first chunk's gathers (one chunk's share) overlap only the next step's first forward of that
    # chunk (≤ forward share × t_max / v); and the gathers start after the optimizer, which follows the last
    # sync, so the first bucket of that chunk, which the next step's first op needs, is exposed whole (any
    # schedule).
    gather_exposed = _new(model, "dp_gather_exposed_us")
    gathering = [lit for zero, lit in zip(pv.zero.values, pv.zero.lits, strict=True) if zero in (1, 2)]
    ratio = min(1.0, co.WEIGHT_BYTES / co.GRAD_REDUCE_BYTES)
    if gathering:
        forward = math.ceil(SCALE * coeffs.forward_share)
        zero12 = model.NewBoolVar("zero_stage_1_or_2")
        model.Add(zero12 == sum(gathering))
        # … and at most its first forward: the chunk's layers' and embedding's F (the LM head's with one stage)
        for v, v_on in v_chunks.items():
            model.Add(SCALE * v * gather_exposed >= int(SCALE * ratio * v) * chunk_sync + SCALE * v * extra
                      - forward * t_max).OnlyEnforceIf([zero12, v_on])
        # … less what the forward runs before it needs the last bucket: (n − 1)/n of it (bucket k is needed k/n
        # into the forward, ``gather_windows``), so F/n ≥ (the chunk's layers at their least F) ÷ n stays exposed
        model.Add(SCALE * gather_exposed >= int(SCALE * ratio) * chunk_sync
                  + SCALE * (extra - first_forward + last_bucket_forward)).OnlyEnforceIf(zero12)
        for bucket in last_bucket:
            model.Add(SCALE * gather_exposed >= int(SCALE * ratio) * bucket).OnlyEnforceIf(zero12)

    # --- optimizer step ----------------------------------------------------------------------------
    optimizer = _new(model, "optimizer_us")
    for b, building in enumerate(buildings):
        per = int(SCALE * coeffs.optimizer_us_per_layer_pp[building.name])
        model.Add(SCALE * optimizer >= per * layers_pp[b])

    step = _new(model, "step_us")
    model.Add(step >= pipeline + dp_exposed + optimizer + gather_exposed)
    _add_dp_stream_bound(pv, coeffs, step, v_chunks, _first_release_us(pv, least_passes, sync_layers, v_chunks),
                         pipeline + dp_exposed, chunk_sync + extra, optimizer,
                         OtherChunks(bucket_latency + (expert_latency if coeffs.dense_layers == 0 else 0),
                                     expert_latency if coeffs.dense_layers == 0 else 0,
                                     others_sync, other_layers, int(SCALE * ratio)),
                         int(SCALE * ratio) * chunk_sync + SCALE * extra, gathering)
    if tip_sync is not None:
        # V across buildings: the tip's chunk 1 syncs in one bucket once its last W ends, which only its chunk-0
        # W ops follow (``tip_trailing_weight_ops``, each ≤ ⌈ℓ/2⌉ layers' W); chunk 0's buckets queue behind it
        # on the tip's DP stream (ZeRO-0..2: ZeRO-3 buckets every layer); the optimizer waits for the last sync
        tip_weight = _product(model, "v_tip_chunk0_weight_us", v_tip.first_chunk_layers, layer_weight)
        not_zero3 = [pv.zero.lit(3).Not()] if 3 in pv.zero.values else []
        for lit, count in tip_syncs:
            model.Add(step >= tip_end - count * tip_weight + tip_sync + optimizer + gather_exposed
                      ).OnlyEnforceIf([lit, pp_mode, *not_zero3])
    moe_only = coeffs.dense_layers == 0
    tip_cases = []  # (name, the tip's end, its modes, its layers, its dense sync in a bucket, dense, expert latency)
    if whole_tip_sync is not None:
        tip_cases.append(("v_whole_tip", whole_tip_end, whole, whole_tip_layers, whole_tip_sync, bucket_latency,
                          expert_latency if moe_only else 0))
    if whole_tip_syncs and pp_dp is not None:
        tip_cases.append(_pp_dp_tip(pv, coeffs, pp_dp_tip_end, pp_dp, products["timed_layers"],
                                    (successors, inter_group, groups, inner, tree_ring), moe_only))
    if tip_cases:
        _add_whole_tip_sync(pv, coeffs, step, tip_cases, whole_tip_syncs, (most_layers, layer_weight),
                            optimizer + gather_exposed)
    for scaled_bytes, condition in nic_busy + route_busy:
        model.Add(SCALE * step >= scaled_bytes).OnlyEnforceIf(condition)
    pv.terms.update(compute=compute, pipeline=pipeline, first_chunk_sync=chunk_sync, dp_exposed=dp_exposed,
                    gather_exposed=gather_exposed, optimizer=optimizer, step=step, t_max=t_max, t_regular=t_reg)
    return step


def _pp_dp_tip(pv: PlanVars, coeffs: Coefficients, tip_end: cp_model.IntVar, pp_dp: cp_model.IntVar,
               timed_layers: list[cp_model.IntVar], ring: tuple, moe_only: bool) -> tuple:
    """pp+dp: the V's tip is the last stage, in each group's last building b (≥ ``timed_layers[b]`` layers), and
    its DP ring joins those last buildings (not the first stage's first ones): its sync priced on that ring's
    edges and slowest hop (``_add_whole_tip_sync``'s case)."""
    model = pv.model
    successors, inter_group, groups, inner, tree_ring = ring
    total = pv.instance.job.model_spec.layers
    closes = _group_ends(pv, last=True)
    held = []
    for b, name in enumerate(pv.buildings):
        var = model.NewIntVar(0, total, f"v_pp_dp_tip_layers_if_last[{name}]")
        model.Add(var == timed_layers[b]).OnlyEnforceIf(closes[b])
        model.Add(var == total).OnlyEnforceIf(closes[b].Not())
        held.append(var)
    layers = _new(model, "v_pp_dp_tip_layers", total)
    model.AddMinEquality(layers, held)
    edges = successors + _cyclic_successors(pv, closes, "last_stage_ring", [])
    hop = _ring_hop_us(pv, coeffs, edges, "last_stage_dp_ring_hop_us", inter_group)
    latency = _new(model, "v_pp_dp_tip_bucket_latency_us")
    (sync,) = _add_dp_sync(pv, coeffs, edges, inter_group, hop, groups, [("v_pp_dp_tip_sync", layers, 1)], latency,
                           inner, tree_ring)
    experts = (_expert_bucket_latency(pv, coeffs, groups, hop, tree_ring, [pp_dp], "v_pp_dp_tip_expert_latency_us")
               if moe_only and coeffs.model_expert_param_mib > 0 and pv.cross_algorithm is not None
               and max(pv.space.ep) > 1 else 0)
    return "v_pp_dp_tip", tip_end, [pp_dp], layers, sync, latency, experts


def _add_whole_tip_sync(pv: PlanVars, coeffs: Coefficients, step: cp_model.IntVar, cases: list[tuple],
                        syncs: list[tuple[cp_model.IntVar, int]], tip: tuple[cp_model.IntVar, cp_model.IntVar],
                        after: cp_model.LinearExpr) -> None:
    """V-shaped schedules whose pipelines are not split at the building boundaries alone (none and dp: every
    stage's DP ring is the first stage's; pp+dp: ``_pp_dp_tip``); ``cases`` per kind: (a name, ``tip_end``, its
    mode literals, ``layers``, ``sync``, the dense and the expert latency). The tip (the last stage, ≥ ``layers``
    layers) releases its chunk 1's buckets within its last W1 and its chunk 0's
    within the ``count`` chunk-0 W ops that alone follow it (``tip_trailing_weight_ops``), each W ≤ ⌈ℓ_max/2⌉
    layers' W (``most`` the most layers a stage holds, ``weight`` a layer's largest W), so its DP stream
    starts no sooner than ``tip_end`` − (count + 1)·W and then syncs all its layers (``sync``: the dense
    gradients in one bucket, + the experts'), before the optimizer and the gathers (``after``):
    T ≥ tip_end − (count + 1)·W + sync(tip) + after. Each chunk holding layers (both, from 2 layers on) syncs
    its dense gradients in a bucket of its own, paying the collective's latency again (the case's dense
    latency; its expert latency too, 0 where a chunk may hold dense layers only), ``cost.step.dp_buckets``.
    ZeRO-3 syncs layer by layer inside the backward: not bounded here. Binds where the tip's sync outlasts the
    V's backward chain below it: chain Mixtral, DualPipe with DP across 1.10 → 1.17 s of the simulated 1.37 s,
    ZB-V pp+dp 1.13 → 1.19 s of 1.42 s."""
    most, weight = tip
    model = pv.model
    chunk = _new(model, "v_whole_tip_chunk_layers_at_most", pv.instance.job.model_spec.layers)
    model.Add(2 * chunk >= most)  # ⌈ℓ_max/2⌉, pinned
    model.Add(2 * chunk <= most + 1)
    chunk_weight = _product(model, "v_whole_tip_chunk_weight_us", chunk, weight)
    not_zero3 = [pv.zero.lit(3).Not()] if 3 in pv.zero.values else []
    for tag, tip_end, modes, layers, sync, dense_latency, expert_latency in cases:
        two = model.NewBoolVar(f"{tag}_holds_2_layers")
        model.Add(layers >= 2).OnlyEnforceIf(two)
        model.Add(layers <= 1).OnlyEnforceIf(two.Not())
        again = _new(model, f"{tag}_second_chunk_latency_us")
        model.Add(again == dense_latency + expert_latency).OnlyEnforceIf(two)
        model.Add(again == 0).OnlyEnforceIf(two.Not())
        total = _new(model, f"{tag}_sync_us")
        model.Add(total == sync + again + expert_latency + _expert_chunk_sync(
            pv, coeffs, _chunk_moe_layers(pv, coeffs, layers, tag), tag))
        for (lit, count), mode_lit in product(syncs, modes):
            model.Add(step >= tip_end - (count + 1) * chunk_weight + total + after).OnlyEnforceIf(
                [lit, mode_lit, *not_zero3])


@dataclass(frozen=True)
class OtherChunks:
    """The first stage's chunks but the first, for its DP stream: each syncs (and gathers) at least one bucket
    paying ``latency``; together they sync ``layers`` layers (≥ 1 of them: ``sync_us``, which pays one dense
    latency but not ``expert_latency``, the one of the expert bucket of a chunk holding MoE layers: 0 unless
    every layer is one), their gathers ``gather_ratio`` ÷ SCALE of that."""

    latency: cp_model.LinearExpr
    expert_latency: cp_model.LinearExpr
    sync_us: cp_model.IntVar
    layers: cp_model.IntVar
    gather_ratio: int


def _least_passes_anywhere(pv: PlanVars, passes: list[tuple[cp_model.IntVar, cp_model.IntVar]]
                           ) -> tuple[cp_model.IntVar, cp_model.IntVar]:
    """A layer's least forward and least full backward (µs) of any kind on any building: the least of
    ``passes`` (per building)."""
    least = []
    for part, kind in enumerate(("forward", "backward")):
        var = _new(pv.model, f"layer_{kind}_least_anywhere_us")
        pv.model.AddMinEquality(var, [pair[part] for pair in passes])
        least.append(var)
    return least[0], least[1]


def _first_release_us(pv: PlanVars, least: tuple[cp_model.IntVar, cp_model.IntVar],
                      layers: cp_model.IntVar, v_chunks: dict[int, cp_model.IntVar]) -> cp_model.IntVar:
    """A lower bound (µs) of when the first stage releases its first gradient bucket: a chunk releases its
    buckets within its last backward op (W where the schedule splits the backward, else B; ``simulator.engine``),
    micro-batch m − 1's, which comes after that micro-batch's forward of every chunk of the stage (the later
    chunks' forwards follow the earlier ones': chunk order is model order, V-shaped or interleaved) and so after
    all m forwards of each chunk, and after the chunk's backwards of the m − 1 micro-batches before it (each
    stage runs a chunk's ops of one kind in micro-batch order: ``tests/test_schedules.py``):
    ≥ m·ℓ·F_min + (m − 1)·⌊ℓ/v⌋·(B+W)_min, ℓ ≥ the first stage's ``layers``, the chunk holding ≥ ⌊ℓ/v⌋ of them,
    F_min and (B+W)_min a layer's least passes of any kind in any building (``least``; under a split backward
    the chunk's m B precede its last W too, so m·B + (m − 1)·W ≥ (m − 1)·(B+W))."""
    model = pv.model
    total = pv.instance.job.model_spec.layers
    chunk = _new(model, "first_stage_least_chunk_layers", total)  # ⌊ℓ/v⌋
    for v, v_on in v_chunks.items():
        model.Add(v * chunk <= layers).OnlyEnforceIf(v_on)
        model.Add(v * chunk >= layers - (v - 1)).OnlyEnforceIf(v_on)
    earlier = model.NewIntVar(0, max(pv.microbatch_values or [1]), "microbatches_before_last")
    model.Add(earlier == pv.microbatches - 1)
    forwards = _product(model, "first_stage_forwards_us", pv.microbatches,
                        _product(model, "first_stage_layers*F_min", layers, least[0]))
    backwards = _product(model, "first_release_backwards_us", earlier,
                         _product(model, "least_chunk_layers*BW_min", chunk, least[1]))
    out = _new(model, "first_bucket_release_us")
    model.Add(out >= forwards + backwards)
    return out


def _add_dp_stream_bound(pv: PlanVars, coeffs: Coefficients, step: cp_model.IntVar,
                         v_chunks: dict[int, cp_model.IntVar], release: cp_model.IntVar,
                         synced: cp_model.LinearExpr, first_chunk: cp_model.LinearExpr, optimizer: cp_model.IntVar,
                         others: OtherChunks,
                         first_gathers_x1000: cp_model.LinearExpr, gathering: list[cp_model.IntVar]) -> None:
    """ZeRO-0..2: the first stage's DP stream starts once it releases its first bucket (``release``,
    ``_first_release_us``), runs its chunks' buckets one after the other, then the optimizer
    follows the last, then (ZeRO-1/2) the stream gathers the updated weights bucket by bucket
    (``simulator.engine``), and the step lasts until the last gather ends, less how far into the next step it
    may run (``cost.step.gather_windows``: at most one micro-batch's forward through every layer, the
    embedding and the LM head, at their longest). The first chunk's sync and gathers are the bound's
    (``first_chunk``, ``first_gathers_x1000`` × SCALE, under any of the ZeRO-1/2 literals ``gathering``); the
    v − 1 others each sync and gather at least one bucket at ``others.latency`` (the collective's latency; the
    experts' too where every layer has them), and together their layers' sync (``others.sync_us``, one
    latency, + one expert bucket's where every layer is MoE; gathers in the same ratio as the first chunk's)
    plus v − 2 more latencies (chain Mixtral, interleaved 1F1B pp+dp: 1.88 → 2.02 s of the simulated 2.34 s).
    Binds where latency or a slow ring dominates: flat rings over thousands of ranks across buildings. The
    gathers also all start after ``synced`` (the pipeline's end and the first chunk's exposed sync, when the
    optimizer may start at the earliest), so with v ≥ 2 every chunk's gathers, not only the first's, run after
    it: binds where the other chunks' gathers outlast one micro-batch's forward (chain Mixtral, DualPipe with DP
    across: 0.22 s of gathers exposed against 0.18 s from the first chunk alone; simulated 0.27 s)."""
    model = pv.model
    zero3 = [pv.zero.lit(3).Not()] if 3 in pv.zero.values else []
    spec = pv.instance.job.model_spec
    window = pv.shape.linear([spec.layers * coeffs.layer_forward_us[shape] + coeffs.embedding_forward_us[shape]
                              + coeffs.head_forward_us[shape] for shape in pv.shape.values])
    held = model.NewBoolVar("other_chunks_hold_layers")
    model.Add(others.layers >= 1).OnlyEnforceIf(held)
    model.Add(others.layers == 0).OnlyEnforceIf(held.Not())
    for v, v_on in v_chunks.items():
        rows = [([], (v - 1) * others.latency, SCALE * (v - 1) * others.latency)]
        if v >= 2:
            rows.append(([held], others.sync_us + others.expert_latency + (v - 2) * others.latency,
                         others.gather_ratio * others.sync_us + SCALE * (others.expert_latency
                                                                         + (v - 2) * others.latency)))
        for when, syncs, gathers_x1000 in rows:
            model.Add(step >= release + first_chunk + syncs + optimizer).OnlyEnforceIf([v_on, *when, *zero3])
            for lit, start in product(gathering, (release + first_chunk + syncs, synced)):
                model.Add(SCALE * step >= SCALE * (start + optimizer - window) + gathers_x1000
                          + first_gathers_x1000).OnlyEnforceIf([v_on, *when, lit])


@dataclass(frozen=True)
class FirstStage:
    """The pipeline's first stage: ``us[b]`` ≤ its work per micro-batch when building b holds it (its layers at
    b's cheapest layer cost), which it does under any of ``holds[b]`` (conjunctions); it holds at most
    ``most_layers``; ``forward_us`` ≥ any of its forward ops."""

    us: list[cp_model.IntVar]
    holds: list[list[list[cp_model.IntVar]]]
    most_layers: cp_model.IntVar
    forward_us: cp_model.IntVar


def _add_first_stage_turn(pv: PlanVars, coeffs: Coefficients, pipeline: cp_model.IntVar, hops: cp_model.IntVar,
                          first: FirstStage, fastest: cp_model.IntVar, less_weight: cp_model.IntVar,
                          v_chunks: dict[int, cp_model.IntVar]) -> None:
    """Stage 0 of a schedule that is not V-shaped runs its ops one after another, and between micro-batch 0's
    forward and backward of its latest chunk it runs only a forwards (``turn_forwards``, each ≤
    ``first.forward_us``), while that micro-batch goes through the last chunk of every later stage and back
    (each ≥ ⌊ℓ_s/v⌋ layers, Σ_{s>0} ℓ_s ≥ L − the most a stage holds, at c_min, less W where the backward is
    split, + the LM head's F and B) over every boundary (hops): T ≥ m·t_0 − a·F_0 + chain + hops. The other
    chains start at the later stages, so a first stage that is the bottleneck had no idle time."""
    model = pv.model
    turns = [(lit, get_schedule(name), v) for (name, v), lit in zip(pv.schedule_chunks.values, pv.schedule_chunks.lits,
                                                                   strict=True)
             if get_schedule(name).head_stage(2, v) != 0]
    if not turns or max(pv.pp.values) < 2:
        return
    total = pv.instance.job.model_spec.layers
    first_us = _new(model, "first_stage_us")  # stage 0's ops, one micro-batch
    for b in range(len(pv.buildings)):
        for condition in first.holds[b]:
            model.Add(first_us >= first.us[b]).OnlyEnforceIf(condition)
    work = _product(model, "m*first_stage_us", pv.microbatches, first_us)
    chain_layers = _new(model, "turn_chain_layers", total)  # Σ_{s>0} ⌊ℓ_s/v⌋, at least
    for v in {v for _, _, v in turns}:
        model.Add(v * chain_layers >= total - first.most_layers - (v - 1) * (pv.pp_var - 1)).OnlyEnforceIf(v_chunks[v])
    shapes = pv.shape.values
    head = [min(coeffs.head_us[(shape, b)] for b in pv.buildings) for shape in shapes]
    chains = {False: _product(model, "turn_chain_layers*c_min", chain_layers, fastest) + pv.shape.linear(head),
              True: _product(model, "turn_chain_layers*(c_min-w)", chain_layers, less_weight)
              + pv.shape.linear([max(0, h - coeffs.head_weight_us[s]) for h, s in zip(head, shapes, strict=True)])}
    at_most: dict[int, cp_model.IntVar] = {}  # "m ≤ k" (forced true when it is)
    for (lit, schedule, v), (pp, pp_lit) in product(turns, zip(pv.pp.values, pv.pp.lits, strict=True)):
        allowed = [m for m in pv.microbatch_values if pp > 1 and schedule.check(pp, v, m) is None]
        found = [schedule.turn_forwards(pp, v, m) for m in allowed]
        if not found or None in found:
            continue
        # the most forwards any m up to k may run holds while m ≤ k (a literal per k where that count grows)
        counts = list(accumulate(found, max))
        for i, (m, count) in enumerate(zip(allowed, counts, strict=True)):
            condition = [lit, pp_lit]
            if i + 1 < len(counts):
                if counts[i + 1] == count:
                    continue
                if m not in at_most:
                    at_most[m] = model.NewBoolVar(f"m<={m}")
                    model.Add(pv.microbatches >= m + 1).OnlyEnforceIf(at_most[m].Not())
                condition.append(at_most[m])
            model.Add(pipeline >= work - count * first.forward_us + chains[schedule.splits_backward] + hops
                      ).OnlyEnforceIf(condition)


def _layers_cost(pv: PlanVars, name: str, count: cp_model.IntVar, per_layer: list[cp_model.IntVar],
                 fastest: cp_model.IntVar, slots: list[cp_model.IntVar]) -> cp_model.IntVar:
    """A lower bound of what ``count`` of the plan's layers cost (µs per micro-batch, the cheapest kind):
    count·c_b with one building b (c_b = c_min when b is the instance's only one); with several, Σ_b x_b·c_b
    over any x_b ≤ the layer slots of building b (stages·layers[b]) with Σ x_b = count — the solver picks the
    cheapest filling, so layers that cannot all fit the fastest building's stages (a mixed-GPU pipeline across
    buildings) are priced where they must run."""
    model = pv.model
    if len(per_layer) == 1:
        return _product(model, f"{name}*c", count, per_layer[0])
    total = pv.instance.job.model_spec.layers
    held = []
    for b, (c_b, slots_b) in enumerate(zip(per_layer, slots, strict=True)):
        x_b = model.NewIntVar(0, total, f"{name}_in[{pv.buildings[b]}]")
        model.Add(x_b <= slots_b)
        held.append((x_b, c_b))
    model.Add(sum(x for x, _ in held) == count)
    out = _new(model, f"{name}_us")
    model.Add(out == sum(_product(model, f"{name}*c[{pv.buildings[b]}]", x_b, c_b)
                         for b, (x_b, c_b) in enumerate(held)))
    return out


def _v_head_stage_wait(pv: PlanVars,
                       head_stages: list[tuple[cp_model.IntVar, cp_model.IntVar, cp_model.LinearExprT, list]],
                       fastest: cp_model.IntVar, before_head: cp_model.IntVar, hops: cp_model.IntVar,
                       forward_shares: list[tuple[float, float, cp_model.IntVar]],
                       gathered: tuple[cp_model.IntVar, cp_model.IntVar] | None) -> cp_model.IntVar:
    """V-shaped schedules: stage 0 holds the first chunk (n0 = ⌈h/2⌉ of its h layers) and the last (the LM
    head's). Until micro-batch 0's forward has passed every other chunk (≥ L − h/2 layers at the least
    forward share φ_lo of c_min, and every boundary: hops), stage 0 can only run first-chunk forwards (at
    most φ_hi of those layers' time each; φ per recompute mode, over layers: the first chunk holds no LM
    head); everything else it runs after: T ≥ hops + φ_lo·(L − h/2)·c_min
    + m·((h − φ_hi·n0)·c_b + LM head), with h − φ_hi·n0 ≥ h·(1 − φ_hi/2) − φ_hi/2. Under ZeRO-3 each of those
    forwards also waits for its layer's gather, half the pair g (``gathered``: the layers before the LM-head
    stage and g, 0 without ZeRO-3): the chain is ≥ (L − h/2)·g/2 too."""
    model = pv.model
    zero3 = pv.zero.lit(3) if 3 in pv.zero.values else None
    rest = _new(model, "v_head_stage_after_chain_us")  # per micro-batch: stage 0's work but first-chunk forwards
    head_half = _product(model, "head_layers*c_min", pv.head_layers, fastest)
    m_rest = _product(model, "m*v_head_stage_after_chain", pv.microbatches, rest)
    wait = _new(model, "v_head_stage_wait_us")
    if gathered is not None:
        before, pair = gathered
        total = pv.instance.job.model_spec.layers
        units = _new(model, "v_chain_half_layers", 2 * total)  # 2(L − h) + h = 2·(L − h/2)
        model.Add(units == 2 * before + pv.head_layers)
        model.Add(4 * wait >= 4 * (hops + m_rest) + _product(model, "v_chain_half_layers*gather_pair", units, pair))
    for least, most, when in forward_shares:  # φ_lo, φ_hi of the plan's recompute mode
        model.Add(2 * SCALE * wait >= 2 * SCALE * (hops + m_rest) + int(SCALE * least) * (2 * before_head + head_half)
                  ).OnlyEnforceIf(when)
        hi = math.ceil(SCALE * most)
        # ZeRO-3's exposed gathers lengthen F at least as much as B: F's share tends to ½ at most
        highs = [(hi, [])] if zero3 is None else [(hi, [zero3.Not()]), (max(hi, SCALE // 2), [zero3])]
        for (t_head, per_layer, head, conditions), (high, zero) in product(head_stages, highs):
            for condition in conditions:
                model.Add(2 * SCALE * rest >= (2 * SCALE - high) * t_head - high * per_layer + 2 * SCALE * head
                          ).OnlyEnforceIf([*condition, *zero, when])
    return wait


def _split_backward_chain(pv: PlanVars, coeffs: Coefficients, layers_before_head: cp_model.IntVar,
                          less_weight: cp_model.IntVar, weight: cp_model.IntVar
                          ) -> tuple[cp_model.IntVar, cp_model.IntVar]:
    """Schedules that split the backward: (the layers before the LM-head stage × ``less_weight`` = max(0, c_min −
    W), a lower bound of their F + B on one micro-batch's chain; the LM-head stage's W per micro-batch, an upper
    bound: head_layers·W_layer + W_head, each at its largest; ``weight``: W_layer)."""
    model = pv.model
    shapes = pv.shape.values
    before = _product(model, "layers_before_head*(c-w)", layers_before_head, less_weight)
    head_w = _new(model, "head_stage_weight_us")
    model.Add(head_w == _product(model, "head_layers*w", pv.head_layers, weight)
              + pv.shape.linear([coeffs.head_weight_us[shape] for shape in shapes]))
    return before, head_w


@dataclass(frozen=True)
class VTip:
    """The V's tip stage under PP across: ``chains`` per building b, (b is the last used one, m·t_tip, the layers
    before the tip priced where they run); ``layers``, at least the tip's layers; ``first_chunk_layers``, at
    most its chunk 0's."""

    chains: list[tuple[cp_model.IntVar, cp_model.IntVar, cp_model.IntVar]]
    layers: cp_model.IntVar
    first_chunk_layers: cp_model.IntVar


def _inner_buildings_last_stages(pv: PlanVars, products: dict[str, list[cp_model.IntVar]],
                                 per_layer: list[cp_model.IntVar], fastest: cp_model.IntVar, head_first: bool
                                 ) -> list[cp_model.IntVar]:
    """PP across: building b's last stage is stage K_b = Σ_{b' ≤ b} stages − 1, a regular stage unless it holds
    the LM head (the last used building's last stage; ``head_first``, V-shaped schedules: stage 0); it holds
    ``timed_layers[b]`` or more (placement's trimming bound). The split trims its excess e from the stages
    other than the LM head's, so the stages before K_b hold ≥ Σ_{b' ≤ b} stages·layers − layers[b] − e layers
    (V: with the LM-head stage's own layers in place of its slot). Per building: those layers · c_min; on mixed
    GPUs those layers run in buildings b' ≤ b, so each at most as many as b' has slots, at its own c_b'
    (``_layers_cost``: a slow first building's stages before its last are priced at its own speed, not the
    fastest building's: hetero 1F1B pp10 ZeRO-3, 0.78 of its simulated step, 0.95 with them)."""
    model = pv.model
    mixed = len({building.gpu_spec.name for building in pv.instance.cluster.buildings}) > 1
    slots, (excess,) = products["layer_slots"], products["layer_excess"]
    head_correction = pv.head_layers - sum(products["head_slots"]) if head_first else 0
    tag = "v_" if head_first else ""
    out = []
    for b, name in enumerate(pv.buildings):
        before = _new(model, f"{tag}layers_before_last_stage[{name}]", sum(_upper(x) for x in slots[:b + 1]))
        model.AddMaxEquality(before, [0, sum(slots[:b + 1]) - pv.layers[b] - excess + head_correction])
        if not mixed:
            out.append(_product(model, f"{tag}layers_before_last_stage*c_min[{name}]", before, fastest))
            continue
        fitting = _new(model, f"{tag}layers_before_last_stage_in_slots[{name}]", _upper(before))
        model.AddMinEquality(fitting, [before, sum(slots[:b + 1])])  # the slots hold them (V: the head's aside)
        out.append(_layers_cost(pv, f"{tag}layers_before_last_stage[{name}]", fitting, per_layer[:b + 1], fastest,
                                slots[:b + 1]))
    return out


def _v_tip_chains(pv: PlanVars, pp_mode: cp_model.IntVar, stage_time: list[cp_model.IntVar],
                  per_layer: list[cp_model.IntVar], slots: list[cp_model.IntVar], last_used: list[cp_model.IntVar],
                  tip_held: list[cp_model.IntVar]) -> VTip:
    """PP across under a V-shaped schedule (``VTip``). The V's tip is the pipeline's last stage, in the last used
    building (``last_used``), b's last regular stage: it holds ``tip_held[b]`` layers (placement's bound for
    what the split's trimming leaves there, at most ``layers[b]``), which ``stage_time[b]`` prices; its chunk 0
    holds ⌈its layers / 2⌉ ≤ ⌈layers[b] / 2⌉. The stages before the tip hold
    the other L − tip layers, half of each (chunk 0, the first chunk gets the extra layer) on micro-batch 0's
    first forward pass to the tip: Σ_b x_b·c_b over any x_b ≤ b's layer slots (the tip's building: less the
    tip's layers) with Σ x_b = L − tip, so a mixed-GPU pipeline's slower building is priced at its own speed.
    Fewer layers at the tip only lower the bound (m·c_tip ≥ the chain's share of a layer), so ``tip_held`` may
    be a lower bound."""
    model = pv.model
    total = pv.instance.job.model_spec.layers
    tip_layers = _new(model, "v_tip_layers", total)  # lower bounds only: the tip's sync grows with it
    first_chunk = _new(model, "v_tip_chunk0_layers", total)  # upper bounds only: its W is subtracted
    layers_before = _new(model, "layers_before_v_tip", total)
    before_in = []
    for b, (name, tail) in enumerate(zip(pv.buildings, last_used, strict=True)):
        model.Add(tip_layers >= tip_held[b]).OnlyEnforceIf(tail)
        model.Add(2 * first_chunk <= pv.layers[b] + 1).OnlyEnforceIf(tail)
        model.Add(layers_before == total - tip_held[b]).OnlyEnforceIf([tail, pp_mode])
        x_b = model.NewIntVar(0, total, f"layers_before_v_tip_in[{name}]")
        model.Add(x_b <= slots[b])
        model.Add(x_b <= slots[b] - tip_held[b]).OnlyEnforceIf(tail)
        before_in.append(x_b)
    model.Add(sum(before_in) == layers_before).OnlyEnforceIf(pp_mode)
    before_cost = _new(model, "layers_before_v_tip_us")
    model.Add(before_cost == sum(_product(model, f"layers_before_v_tip*c[{name}]", x_b, c_b)
                                 for name, x_b, c_b in zip(pv.buildings, before_in, per_layer, strict=True)))
    out = [(tail, _product(model, f"m*v_tip_us[{name}]", pv.microbatches, stage_time[b]), before_cost)
           for b, (name, tail) in enumerate(zip(pv.buildings, last_used, strict=True))]
    return VTip(out, tip_layers, first_chunk)


TERM_CAP = 10**17  # a bound's term (coefficient × its variable's upper bound) stays below this (int64: 9.2e18)
RHS_CAP = 10**13  # constants of the ZeRO-3 gather bounds are capped here (µs × SCALE: ~115 days)


def _nic_us_per_layer(pv: PlanVars, coeffs: Coefficients, building: str, label: str) -> cp_model.IntVar:
    """One layer's CP ring and (MoE layers) EP all-to-all on a GPU's NIC, one micro-batch (µs, each way): the
    cheapest kind (``label`` "light") holds experts only where every layer does."""
    experts = label == "heavy" or coeffs.layer_kinds == (LayerKind.MOE,)
    return pv.shape.value_var(pv.model, f"{label}_layer_nic_us[{building}]", [
        coeffs.cp_nic_us_per_layer[(shape, building)] + (coeffs.ep_nic_us_per_layer[(shape, building)] if experts
                                                          else 0) for shape in pv.shape.values])


def _add_nic_sharing(pv: PlanVars, coeffs: Coefficients, building: str, layer: cp_model.IntVar, label: str,
                     gathers: _Zero3Gathers, groups: DpGroups) -> None:
    """ZeRO-3 where the DP group crosses NICs: a layer's F and B ops carry its pair of weight gathers, its CP ring
    and its EP all-to-all on the same NIC (``cost.op_sharing``: the flows of one op), so its fwd+bwd lasts at
    least their NIC seconds together (``cost.step._chunk_cost`` prices each as if it had the NIC to itself)."""
    model = pv.model
    nic = _nic_us_per_layer(pv, coeffs, building, label)
    for d, d_lit in groups:
        model.Add(SCALE * layer >= gathers.nic_pairs[(label, d)] + SCALE * nic).OnlyEnforceIf(
            [pv.zero.lit(3), gathers.on_nic, d_lit])


def _nic_saving(pv: PlanVars, coeffs: Coefficients, building: str, gathers: _Zero3Gathers, groups: DpGroups
                ) -> cp_model.IntVar:
    """What the dense layers of a stage save against an MoE layer's NIC bound (``_add_nic_sharing``): a dense
    layer's own is at least the cheapest kind's pair plus the CP ring, so each saves at most the MoE pair's excess
    over that pair plus the all-to-all (0 where the bound does not hold)."""
    model = pv.model
    dense = coeffs.dense_layers
    saved = _new(model, f"nic_discount_us[{building}]")
    zero3 = pv.zero.lit(3)
    model.Add(saved == 0).OnlyEnforceIf(zero3.Not())
    model.Add(saved == 0).OnlyEnforceIf(gathers.on_nic.Not())
    experts = pv.shape.value_var(model, f"ep_nic_us[{building}]",
                                 [coeffs.ep_nic_us_per_layer[(shape, building)] for shape in pv.shape.values])
    for d, d_lit in groups:
        gap = [dense * (math.ceil(max(0.0, heavy - light)) + 1) for light, heavy in (
            (min(pairs), pairs[0]) for pairs in (_gather_pairs_us(coeffs.zero3_nic_pair_us[key], key[1], d)
                                                 for key in gathers.sharding.values))]
        model.Add(saved <= gathers.sharding.linear(gap) + dense * experts).OnlyEnforceIf(d_lit)
    return saved


def _gather_steps(algorithm: CollectiveAlgorithm, d: int) -> int:
    """Latency steps of one all-gather over ≥ d ranks (``cost.collectives.flat_collective_s``): PAT
    ⌈log2 d⌉, ring and tree d − 1, hierarchical ≥ 1 on the route (its outer ring over ≥ 2 buildings)."""
    if algorithm is CollectiveAlgorithm.HIERARCHICAL:
        return 1
    return math.ceil(math.log2(max(d, 2))) if algorithm is CollectiveAlgorithm.PAT else d - 1


def _pair_steps(algorithm: CollectiveAlgorithm, d: int, ep: int) -> int:
    """Latency steps of a layer's pair of ZeRO-3 all-gathers over d ranks, and (ep ≥ 1) of its experts' pair
    over d/ep ranks (none when that group is a single rank; ep = 0: the layer holds no experts)."""
    experts = d // ep if ep and d % ep == 0 else 1
    return 2 * (_gather_steps(algorithm, d) + (_gather_steps(algorithm, experts) if experts > 1 else 0))


@dataclass(frozen=True)
class _Zero3Gathers:
    """The ZeRO-3 gather terms of the objective (µs per layer per micro-batch; 0 without ZeRO-3)."""

    light: cp_model.IntVar  # the pair of all-gathers of the cheapest layer kind (any path)
    heavy: cp_model.IntVar | None  # … of an MoE layer (models with layers of several kinds)
    excess: cp_model.IntVar | None  # ≤ dense layers × (MoE pair − dense pair), bandwidth part
    sharding: OneHot  # the shape's (tp, ep), which the gathers depend on
    on_nic: cp_model.IntVar  # the shape's DP group always crosses NICs (``Coefficients.zero3_on_nic``)
    # (kind label, d) → × SCALE, the kind's pair over the NICs for a DP group of d ranks (bandwidth part)
    nic_pairs: dict[tuple[str, int], cp_model.LinearExpr]


def _gather_pairs_us(pairs: tuple[tuple[float, float], ...], ep: int, d: int) -> list[float]:
    """Per layer kind: a layer's pair of all-gathers when its non-expert weights are sharded over d ranks and
    its experts over d/ep (ring volume 2(n−1)/n of each part's n = 2 coefficient; no gather for n = 1)."""
    def ring(n: int) -> float:
        return ring_factor(n) if n > 1 else 0.0
    experts = ring(d // ep) if d % ep == 0 else 0.0
    return [ring(d) * dense + experts * expert for dense, expert in pairs]


def _zero3_gathers(pv: PlanVars, coeffs: Coefficients, successors: RingEdges,
                   inter_group: dict[tuple[int, int], cp_model.IntVar], ring_hop: cp_model.IntVar, groups: DpGroups,
                   inner: InnerRing | None) -> _Zero3Gathers:
    """ZeRO-3 gathers each layer's weights before its forward and again before its backward, one layer ahead
    of the compute, so a layer's forward + backward lasts at least g ≥ the pair of all-gathers
    (``cost.step._chunk_cost``: max(fwd, gather) + max(bwd, gather) ≥ 2·gather); g is 0 for other ZeRO
    stages, and capped so that layers·g stays within the horizon. The non-expert weights are gathered over
    the n = dp·cp ranks of the DP group, the experts over n/ep:
    - inside a building: ring volume 2(n−1)/n × each part's bytes over the shape's best path (the NICs
      once n > node GPUs: no DP group fits a node), plus that path's latency per step (``_gather_steps`` of
      the plan's intra algorithm where the group stays in a building, else the fewest-step one;
      hierarchical runs as ring inside a building);
    - DP across buildings (dp, pp+dp; cheapest kind only): the layer's non-expert weights over the ring's
      slowest building edge (``_slowest_edge_us_per_layer``) with one NVLink domain's connections (flat) or
      the larger end's GPUs (hierarchical), × (n−1)/n (flat) or ½, plus per step the latency of the shortest
      route (hierarchical) or of the ring's slowest hop (flat, ``_ring_hop_us``);
    - where the layer holds experts, their gathers follow the non-expert ones over the n/ep-rank expert group,
      which spans the same buildings: their bytes and steps add the same way (ring, tree and PAT steps each pay
      the path's latency; none when n/ep = 1)."""
    model, instance = pv.model, pv.instance
    node = node_gpus(instance)
    sharding = _sharding_choice(pv)
    several = len(coeffs.layer_kinds) > 1  # MoE first, then dense

    def var_of(name: str, values: list[int]) -> cp_model.IntVar:
        return sharding.value_var(pv.model, name, values)

    step_us = {"best": coeffs.zero3_step_us, "nic": coeffs.zero3_nic_step_us}
    raw = _new(model, "zero3_gather_pair_raw_us", RHS_CAP)
    raw_heavy = _new(model, "zero3_moe_gather_pair_raw_us", RHS_CAP) if several else None
    excess = _new(model, "zero3_moe_gather_excess_us", RHS_CAP) if several else None
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
                    SCALE * min(_pair_steps(a, d, ep if has else 0) for a in algorithms) * step_us[path][(tp, ep)]
                    for (tp, ep), has in zip(sharding.values, held, strict=True)])
                model.Add(SCALE * var >= int(SCALE * ring_factor(d)) * dense + 2 * SCALE * experts
                          - math.ceil(2 * SCALE / d) * ep_experts + latency).OnlyEnforceIf(when)
        if excess is not None:
            # what the dense layers' gathers may save against the MoE layer's, inside a building: the bandwidth
            # parts' difference and the experts' ring steps (at most the slower path's latency each); across
            # buildings the MoE pair's bound also counts the experts' crossing, so the saving is left open there
            best = [_gather_pairs_us(coeffs.zero3_pair_us[(tp, ep)], ep, d) for tp, ep in sharding.values]
            nic = [_gather_pairs_us(coeffs.zero3_nic_pair_us[(tp, ep)], ep, d) for tp, ep in sharding.values]
            steps = [max(_pair_steps(a, d, ep) - _pair_steps(a, d, 0) for a, _ in intra) for _, ep in sharding.values]
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
                edges = {(flat, part): _slowest_edge_us_per_layer(
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
                            steps = SCALE * (_pair_steps(a, d, ep) if flat else 2 * (1 + (n_e > 1)))
                            latency = min(RHS_CAP // 4, steps * coeffs.cross_hop_us[t])
                            nic_latency = min(RHS_CAP // 4, steps * min(coeffs.cross_hop_us.values()))  # any transport
                            if flat and steps * _upper(ring_hop) <= RHS_CAP // 4:
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
                            experts_steps = SCALE * (_pair_steps(a, d, ep) - _pair_steps(a, d, 0) if flat
                                                     else 2 * (n_e > 1))
                            hop = (ring_hop if flat and experts_steps * _upper(ring_hop) <= RHS_CAP // 4
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
        capped = _new(model, f"{name}_capped_us", ceiling)
        model.AddMinEquality(capped, [source, ceiling])
        out = _new(model, f"{name}_us", ceiling)
        model.Add(out == capped).OnlyEnforceIf(zero3)
        model.Add(out == 0).OnlyEnforceIf(zero3.Not())
        return out

    on_nic = model.NewBoolVar("zero3_group_on_nics")
    model.Add(on_nic == sharding.linear([int(coeffs.zero3_on_nic[key]) for key in sharding.values]))
    nic_pairs = {(label, d): nic_bytes(label, d) for d, _ in groups for label in ("light", "heavy")
                 if ("nic", label) in terms}
    return _Zero3Gathers(per_layer("zero3_gather_pair", raw),
                         per_layer("zero3_moe_gather_pair", raw_heavy) if raw_heavy is not None else None,
                         excess, sharding, on_nic, nic_pairs)


INNER_WIDE = (16, 64, 256)  # inner rings of at least w members move ≥ 2(w − 1)/w of the bytes


@dataclass(frozen=True)
class InnerRing:
    """A DP group across buildings under the hierarchical algorithm: the inner ring over one building's members
    (``cost.collectives.span_collective_s``) has ≥ ``members`` of them (0: no bound), ≥ w where the literal of
    (w, literal) in ``wide`` is set (w in INNER_WIDE); its n_in − 1 steps each pay the fabric's latency."""

    members: cp_model.IntVar
    wide: tuple[tuple[int, cp_model.IntVar], ...]


def _inner_ring(pv: PlanVars, groups: DpGroups) -> InnerRing | None:
    """The inner ring's members n_in = f_min · max_b ⌈members_b / f_b⌉ (``cost.layout.group_span``), f_b =
    min(members_b, domain_b ÷ tp) those sharing an NVLink domain, members_b = replicas_b · cp (every stage's DP
    group holds each used building's replicas, under pp+dp those of the building holding the stage in each
    group, whose replicas are the same). Where every used building holds at least domain_b ÷ tp of them (else
    the literal short[b] may be set and the bound lapses), f_b = domain_b ÷ tp, so n_in ≥ f_min · members_b /
    f_max for each used b — counted where members_b exceeds every domain's share (the inner ring then crosses
    the fabric). None without DP across buildings or hierarchical."""
    model, buildings = pv.model, pv.instance.cluster.buildings
    crossing = [pv.mode.lit(mode) for mode in (CrossBuilding.DP, CrossBuilding.PP_DP) if mode in pv.mode.values]
    hierarchical = CollectiveAlgorithm.HIERARCHICAL
    if not crossing or pv.cross_algorithm is None or hierarchical not in pv.cross_algorithm.values:
        return None
    crosses = model.NewBoolVar("dp_group_crosses_buildings")
    model.Add(crosses == sum(crossing))
    full = []  # ¬short[b]: building b, if used, holds a whole domain's share of every DP group
    for b, building in enumerate(buildings):
        needed = pv.shape.value_var(model, f"replicas_filling_domain[{building.name}]", [
            math.ceil(max(1, nvlink_domain(building) // shape.tp) / shape.cp) for shape in pv.shape.values])
        short = model.NewBoolVar(f"dp_group_short_of_domain[{building.name}]")
        model.AddImplication(short, pv.used[b])
        model.Add(pv.replicas[b] + 1 <= needed).OnlyEnforceIf(short)
        model.Add(pv.replicas[b] >= needed).OnlyEnforceIf([pv.used[b], short.Not()])
        full.append(short.Not())
    top = max(d for d, _ in groups)
    members = _new(model, "inner_ring_members", top)
    when = [crosses, pv.cross_algorithm.lit(hierarchical), *full]
    for b, building in enumerate(buildings):
        held = _new(model, f"dp_group_members[{building.name}]", top)
        model.AddMultiplicationEquality(held, [pv.replicas[b], pv.cp_var])
        for tp, tp_lit in zip(pv.tp.values, pv.tp.lits, strict=True):
            shares = [max(1, nvlink_domain(other) // tp) for other in buildings]
            beyond = model.NewBoolVar(f"dp_group_members_beyond_domain[{building.name}][tp={tp}]")
            model.Add(held >= max(shares) + 1).OnlyEnforceIf(beyond)
            model.Add(held <= max(shares)).OnlyEnforceIf(beyond.Not())
            model.Add(max(shares) * members >= min(shares) * held).OnlyEnforceIf(
                [*when, tp_lit, pv.used[b], beyond])
    wide = []
    for width in INNER_WIDE:
        lit = model.NewBoolVar(f"inner_ring_at_least[{width}]")
        model.Add(members >= width).OnlyEnforceIf(lit)
        model.Add(members <= width - 1).OnlyEnforceIf(lit.Not())
        wide.append((width, lit))
    return InnerRing(members, tuple(wide))


def _head_weight_ratios(pv: PlanVars, keys: list[tuple[int, int]]) -> dict[tuple[int, int], float]:
    """Per (tp, ep): LM-head weights ÷ the cheapest layer's non-expert weights, per GPU; left out where every
    layer kind holds experts (they are gathered over fewer ranks, on another path)."""
    spec = pv.instance.job.model_spec
    kinds = layer_kinds(spec)
    return {(tp, ep): embedding_params(spec, tp) / min(layer_params(spec, kind, tp, ep).dense for kind in kinds)
            for tp, ep in keys if min(layer_params(spec, kind, tp, ep).expert for kind in kinds) == 0}


def _head_gather_ratios(pv: PlanVars, sharding: OneHot) -> dict[tuple[int, int], float]:
    """Per (tp, ep): r = min(1, ``_head_weight_ratios`` per GPU and whole): a pair of gathers' latency part does
    not grow with the bytes, and the cross-building gather bound counts whole layers."""
    whole = _head_weight_ratios(pv, [(1, 1)]).get((1, 1), 1.0)
    return {key: min(1.0, whole, ratio) for key, ratio in _head_weight_ratios(pv, sharding.values).items()}


def _head_or_gathers(pv: PlanVars, name: str, head: cp_model.LinearExpr, gathers: _Zero3Gathers,
                     ratios: dict[tuple[int, int], float]) -> cp_model.IntVar:
    """The LM head's fwd+bwd on a GPU of ``name``, at least its pair of ZeRO-3 gathers: ZeRO-3 gathers the head
    like one more layer (``cost.step._chunk_cost``) over the same DP group, so its pair ≥ r·(the cheapest
    layer's pair), r from ``_head_gather_ratios`` — the latency part is the same, the bandwidth part in
    proportion to the bytes; ``gathers.light`` is 0 without ZeRO-3."""
    model = pv.model
    out = _new(model, f"head_or_gathers_us[{name}]")
    model.Add(out >= head)
    for key, lit in zip(gathers.sharding.values, gathers.sharding.lits, strict=True):
        if key in ratios:
            model.Add(SCALE * out >= int(SCALE * ratios[key]) * gathers.light).OnlyEnforceIf(lit)
    return out


def _sharding_choice(pv: PlanVars) -> OneHot:
    """The shape's (tp, ep) as a one-hot of its own (each literal: the sum of its shapes' literals)."""
    keys = sorted({(shape.tp, shape.ep) for shape in pv.shape.values})
    return OneHot(keys, [pv.shape.any_of(pv.model, f"tp,ep={key}", lambda shape, key=key: (shape.tp, shape.ep) == key)
                         for key in keys])


def _dp_nic_bounds(pv: PlanVars, coeffs: Coefficients) -> list[tuple[cp_model.LinearExpr, list[cp_model.IntVar]]]:
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
            us = (_gather_pairs_us(coeffs.zero3_nic_pair_us[key], shape.ep, d)
                  if coeffs.zero3_on_nic[key] and n % (shape.tp * pp) == 0 else [0.0] * len(coeffs.layer_kinds))
            least.append(int(SCALE * factor * math.ceil(total / pp) * min(us)))
            most.append(int(SCALE * factor * math.ceil(moe / pp) * us[heavy]) if heavy is not None else 0)
        bounds.append((pv.shape.linear(least), [pp_lit, *not_zero3]))
        if heavy is not None:
            bounds.append((pv.shape.linear(most), [pp_lit, *not_zero3]))
    return bounds


def _zero3_nic_bounds(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, sharding: OneHot,
                      on_nic: cp_model.IntVar, holds_head: list[list[list[cp_model.IntVar]]], v_shape: cp_model.IntVar
                      ) -> list[tuple[cp_model.LinearExpr, list[cp_model.IntVar]]]:
    """(µs × SCALE, condition) bounds of the whole step for ZeRO-3 shapes whose DP group always crosses NICs:
    each GPU's NIC carries m·layers_b pairs of all-gathers and the step's gradient reduce-scatter (half a
    micro-batch's pair): at least the cheapest layer kind's non-expert weights, ring volume 2(n−1)/n over the
    n = dp·cp ranks (the experts' group may hold a single rank). The pair is fixed by the (tp, ep) choice, so
    the products stay tight in the search. The same NIC carries each layer's CP ring for every micro-batch
    (``Coefficients.cp_nic_us_per_layer``), hidden behind attention or not. The LM-head stage's NIC carries its
    head_layers' pairs and the LM head's (r of a layer's, ``_head_gather_ratios``), and under V-shaped schedules
    the embedding's too (r again; bytes only, so r = ``_head_weight_ratios``, which may exceed 1)."""
    model, instance = pv.model, pv.instance
    zero3 = pv.zero.lit(3)
    dense = sharding.value_var(pv.model, "zero3_nic_dense_pair_us",
                        [int(min(n for n, _ in coeffs.zero3_nic_pair_us[key])) for key in sharding.values])
    # the head stage's pairs per micro-batch, in layers × SCALE (r rounded down)
    ratios = _head_weight_ratios(pv, sharding.values)
    ratio = sharding.value_var(model, "zero3_head_gather_ratio_x1000",
                               [math.floor(SCALE * ratios.get(key, 0.0)) for key in sharding.values])
    head_units = _new(model, "zero3_head_stage_layers_x1000",
                      SCALE * instance.job.model_spec.layers + 2 * _upper(ratio))
    model.Add(head_units == SCALE * pv.head_layers + ratio).OnlyEnforceIf(v_shape.Not())
    model.Add(head_units == SCALE * pv.head_layers + 2 * ratio).OnlyEnforceIf(v_shape)
    head_scaled = _product(model, "zero3_head_per_mb_us_x1000", head_units, dense)
    head_per_mb = _new(model, "zero3_head_per_mb_us")
    model.AddDivisionEquality(head_per_mb, head_scaled, SCALE)
    head_total = _product(model, "zero3_head_us", pv.microbatches, head_per_mb)
    step_bounds = []
    for b, building in enumerate(instance.cluster.buildings):
        per_mb = _product(model, f"zero3_per_mb[{building.name}]", pv.layers[b], dense)
        total = _product(model, f"zero3_us[{building.name}]", pv.microbatches, per_mb)
        cp_ring = pv.shape.value_var(model, f"cp_nic_us_per_layer[{building.name}]",
                                     [coeffs.cp_nic_us_per_layer[(shape, building.name)] for shape in pv.shape.values])
        cp_total = _product(model, f"cp_nic_us[{building.name}]", pv.microbatches,
                            _product(model, f"cp_nic_per_mb[{building.name}]", pv.layers[b], cp_ring))
        head_cp = _product(model, f"zero3_head_cp_nic_us[{building.name}]", pv.microbatches,
                           _product(model, f"zero3_head_cp_nic_per_mb[{building.name}]", pv.head_layers, cp_ring))
        for d, d_lit in groups:
            ring = int(SCALE * ring_factor(d)) if d > 1 else 0
            step_bounds.append((ring * total + ring // 2 * per_mb + SCALE * cp_total,
                                [zero3, d_lit, on_nic, pv.used[b]]))
            step_bounds += [(ring * head_total + ring // 2 * head_per_mb + SCALE * head_cp,
                             [zero3, d_lit, on_nic, *condition]) for condition in holds_head[b]]
    return step_bounds


def _add_dp_route_bounds(pv: PlanVars, coeffs: Coefficients, groups: DpGroups
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
    volume = _new(model, "dp_route_mib", math.floor(dense_mib + expert_mib))  # one ring pass, all stages
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
    gathered = _product(model, "dp_route_gathered_mib", volume, pv.microbatches) if zero3 is not None else None
    for transport, t_lit in zip(pv.cross_transport.values, pv.cross_transport.lits, strict=True):
        per_mib = min(coeffs.pair_route_us_per_mib[transport].values())  # the best route
        sync = _term_coefficient(per_mib * (co.GRAD_REDUCE_BYTES + co.WEIGHT_BYTES), volume)
        if zero3 is None:
            bounds.append((sync * volume, [dp_mode, t_lit]))
            continue
        bounds.append((sync * volume, [dp_mode, t_lit, zero3.Not()]))
        reduce = _term_coefficient(per_mib * co.GRAD_REDUCE_BYTES, volume)
        gather = _term_coefficient(per_mib * 2 * co.WEIGHT_BYTES, gathered)
        bounds.append((gather * gathered + reduce * volume, [dp_mode, t_lit, zero3]))
    return bounds


def _term_coefficient(us_per_unit: float, var: cp_model.IntVar) -> int:
    """⌊SCALE × ``us_per_unit``⌋, lowered where needed so the term (× ``var``'s upper bound) stays in int64."""
    return min(math.floor(SCALE * us_per_unit), TERM_CAP // max(1, _upper(var)))


DpGroups = list[tuple[int, cp_model.IntVar]]


def _dp_group_sizes(pv: PlanVars) -> DpGroups:
    """(n, literal) for every size n = dp·cp a DP group can have (dense weights and gradients are sharded and
    synced over the dp·cp ranks of a stage); the literal is true whenever the plan's dp·cp is n."""
    literals: dict[int, cp_model.IntVar] = {}
    for d, d_lit in zip(pv.dp.values, pv.dp.lits, strict=True):
        for c, c_lit in zip(pv.cp.values, pv.cp.lits, strict=True):
            n = d * c
            if n not in literals:
                literals[n] = pv.model.NewBoolVar(f"dp*cp={n}")
            pv.model.AddBoolOr([d_lit.Not(), c_lit.Not(), literals[n]])
    return sorted(literals.items())


RingEdges = list[tuple[tuple[int, int], list[cp_model.IntVar]]]  # (i < j, the literals that make i–j a ring edge)


def _cyclic_successors(pv: PlanVars, members: list[cp_model.IntVar], name: str, also: list[cp_model.IntVar]
                       ) -> RingEdges:
    """Edges of a ring over the buildings whose ``members`` literal is true, in list order (cyclically): (i, j)
    with a literal true whenever i and j are members and none between them (from i on) is, with ``also``."""
    count = len(members)
    edges = []
    for i in range(count):
        for j in range(count):
            if i == j:
                continue
            between = [members[(i + k) % count] for k in range(1, (j - i) % count)]
            lit = pv.model.NewBoolVar(f"{name}_edge[{i}->{j}]")
            pv.model.AddBoolOr([members[i].Not(), members[j].Not(), *between, lit])
            edges.append(((min(i, j), max(i, j)), [lit, *also]))
    return edges


def _ring_successors(pv: PlanVars) -> RingEdges:
    """DP across: the edges of a ring over the used buildings in list order, as a DP-across ring runs."""
    if CrossBuilding.DP not in pv.mode.values:
        return []
    return _cyclic_successors(pv, pv.used, "ring", [pv.mode.lit(CrossBuilding.DP)])


def _group_ends(pv: PlanVars, last: bool) -> list[cp_model.IntVar]:
    """pp+dp, per building: exactly "it opens its group" (``last``: "it closes it"). A group chains its buildings
    in cluster order, so stage 0 is its first building's and its last stage its last building's."""
    model, member = pv.model, pv.member
    end, verb = ("last", "closes") if last else ("first", "opens")
    ends = []
    for b, name in enumerate(pv.buildings):
        others = range(b + 1, len(pv.buildings)) if last else range(b)
        flag = model.NewBoolVar(f"{end}_of_its_group[{name}]")
        lits = []
        for g in range(len(pv.group_replicas)):
            lit = model.NewBoolVar(f"{verb}_group[{name}][{g}]")
            model.AddBoolAnd([member[b][g], *[member[c][g].Not() for c in others]]).OnlyEnforceIf(lit)
            model.AddBoolOr([member[b][g].Not(), *[member[c][g] for c in others], lit])
            lits.append(lit)
        model.AddMaxEquality(flag, lits)
        ends.append(flag)
    return ends


def _first_stage_ring_edges(pv: PlanVars) -> RingEdges:
    """pp+dp: the edges of the first stage's DP ring, which joins the groups' first buildings in list order."""
    if not pv.group_replicas:
        return []
    return _cyclic_successors(pv, _group_ends(pv, last=False), "first_stage_ring", [])


def _inter_group_pairs(pv: PlanVars) -> dict[tuple[int, int], cp_model.IntVar]:
    """pp+dp: (i < j) → a literal that may be true only when i and j are used buildings of different groups
    that hold a common stage index (their stage ranges in their groups' pipelines overlap). Every stage's DP
    ring joins one building per group (≥ 2 groups), the one holding that stage, so each of its edges is such
    a pair (a chain A–B–C–D in groups {A, B}, {C, D}: A–C and B–D, never the adjacent B–C)."""
    if not pv.group_replicas:
        return {}
    model, member = pv.model, pv.member
    pairs = {}
    for i in range(len(pv.buildings)):
        for j in range(i + 1, len(pv.buildings)):
            lit = model.NewBoolVar(f"different_groups[{pv.buildings[i]},{pv.buildings[j]}]")
            model.AddImplication(lit, pv.used[i])
            model.AddImplication(lit, pv.used[j])
            for g in range(len(pv.group_replicas)):
                model.AddBoolOr([lit.Not(), member[i][g].Not(), member[j][g].Not()])
            first = pv.group_first_stage
            model.Add(first[i] < first[j] + pv.stages[j]).OnlyEnforceIf(lit)
            model.Add(first[j] < first[i] + pv.stages[i]).OnlyEnforceIf(lit)
            pairs[(i, j)] = lit
    return pairs


def _at_least_cheapest_pair(pv: PlanVars, var: cp_model.IntVar, costs: dict[tuple[int, int], int],
                            pairs: dict[tuple[int, int], cp_model.IntVar]) -> None:
    """pp+dp: ``var`` ≥ the least cost of a pair of buildings in different groups (``_inter_group_pairs``): for
    each threshold t, ``var`` ≥ t unless a pair cheaper than t may be such a pair (the solver, minimising,
    marks every one that is)."""
    if not pairs:
        return
    pp_dp = pv.mode.lit(CrossBuilding.PP_DP)
    for t in sorted(set(costs.values())):
        cheaper = [pairs[pair].Not() for pair, cost in costs.items() if cost < t and pair in pairs]
        pv.model.Add(var >= t).OnlyEnforceIf([pp_dp, *cheaper])


def _ring_hop_us(pv: PlanVars, coeffs: Coefficients, edges: RingEdges, name: str,
                 inter_group: dict[tuple[int, int], cp_model.IntVar]) -> cp_model.IntVar:
    """One-way latency (µs) of a flat DP ring's step across buildings: the slowest route of the ring over its
    buildings, the wrap-around included (``cost.step.span_levels``), so at least the shortest route's, that
    of every ring edge in ``edges`` (``_ring_successors``, ``_first_stage_ring_edges``) and, under pp+dp,
    the shortest between two groups (``_at_least_cheapest_pair``)."""
    hops = coeffs.pair_hop_us or {(0, 0): 0}
    hop = pv.model.NewIntVar(min(hops.values()), max(hops.values()), name)
    for pair, when in edges:
        pv.model.Add(hop >= hops[pair]).OnlyEnforceIf(when)
    _at_least_cheapest_pair(pv, hop, hops, inter_group)
    return hop


def _slowest_edge_us_per_layer(pv: PlanVars, layer_mib: float, pair_us_per_mib: dict[tuple[int, int], float],
                               name: str, edges: RingEdges, inter_group: dict[tuple[int, int], cp_model.IntVar],
                               cap: int | None = None) -> cp_model.IntVar:
    """``layer_mib`` over a DP ring's slowest building edge (µs), at the per-pair µs/MiB given: at least the best
    pair's, that of every ring edge in ``edges`` and, under pp+dp, the best between two groups
    (``_at_least_cheapest_pair``). Costs are clamped at ``cap`` (default: × the model's layers stays within
    the horizon)."""
    if cap is None:
        cap = HORIZON_US // max(1, pv.instance.job.model_spec.layers)
    cost = {pair: min(cap, int(layer_mib * us)) for pair, us in pair_us_per_mib.items()}
    edge = pv.model.NewIntVar(min(cost.values()), max(cost.values()), f"slowest_edge_us_per_layer[{name}]")
    for pair, when in edges:
        pv.model.Add(edge >= cost[pair]).OnlyEnforceIf(when)
    _at_least_cheapest_pair(pv, edge, cost, inter_group)
    return edge


def _least_ops(pv: PlanVars, least: tuple[cp_model.IntVar, cp_model.IntVar], pair: cp_model.IntVar | None,
               layer_weight: cp_model.IntVar, unsplit: cp_model.IntVar, first_regular: list[cp_model.IntVar]
               ) -> tuple[cp_model.IntVar, cp_model.IntVar]:
    """The least F and the least B op of any stage and chunk (µs): ⌊ℓ_min / v⌋ layers (a stage's layers are split
    over its chunks as evenly as possible; ℓ_min the fewest any stage holds: each used building's first regular
    stage, ``first_regular``, or the LM-head stage), each at least the least forward / full backward of one layer
    on any building (``least``), under ZeRO-3 at least half the layer's gather ``pair`` (each pass waits for its
    gather: ``cost.step._chunk_cost``); where the backward is split, B is that less the layer's longest W."""
    model = pv.model
    total = pv.instance.job.model_spec.layers
    fewest = _new(model, "fewest_stage_layers", total)
    model.AddMinEquality(fewest, [*_layers_if_used(pv, "first_regular_layers_if_used", total, first_regular),
                                  pv.head_layers])
    chunk = _new(model, "fewest_chunk_layers", total)
    model.AddDivisionEquality(chunk, fewest, pv.virtual_var)
    per_layer = list(least)
    backward = _new(model, "least_backward_op_layer_us")
    model.Add(backward >= per_layer[1]).OnlyEnforceIf(unsplit)
    model.Add(backward >= per_layer[1] - layer_weight).OnlyEnforceIf(unsplit.Not())
    if pair is not None:  # B waits for its gather whether or not W runs apart
        forward = _new(model, "least_forward_op_layer_us")
        model.Add(forward >= per_layer[0])
        model.Add(2 * forward >= pair)
        model.Add(2 * backward >= pair)
        per_layer[0] = forward
    return (_product(model, "least_forward_op_us", chunk, per_layer[0]),
            _product(model, "least_backward_op_us", chunk, backward))


def _layers_if_used(pv: PlanVars, name: str, unused: int, layers: list[cp_model.IntVar] | None = None
                    ) -> list[cp_model.IntVar]:
    """Per building: ``layers[b]`` (default ``pv.layers``) where it is used, else ``unused`` (for a min or max
    over the used ones)."""
    total = pv.instance.job.model_spec.layers
    held = [pv.model.NewIntVar(0, total, f"{name}[{building}]") for building in pv.buildings]
    for b, var in enumerate(held):
        pv.model.Add(var == (layers or pv.layers)[b]).OnlyEnforceIf(pv.used[b])
        pv.model.Add(var == unused).OnlyEnforceIf(pv.used[b].Not())
    return held


def _sync_layers(pv: PlanVars, v_shape: cp_model.IntVar) -> cp_model.IntVar:
    """Layers of the first stage whose gradients sync after the pipeline ends: ``head_layers`` where the
    schedule is V-shaped (its first stage is the LM-head stage), else at least min_b layers[b] − 1 (the
    first stage finishes its backward last; the layer split may trim it by one)."""
    model = pv.model
    layers_total = pv.instance.job.model_spec.layers
    held = _layers_if_used(pv, "sync_layers", layers_total)
    fewest = _new(model, "fewest_layers", layers_total)
    model.AddMinEquality(fewest, held)
    sync_layers = _new(model, "sync_layers", layers_total)  # only lower bounds: the objective grows with it
    model.Add(sync_layers >= pv.head_layers).OnlyEnforceIf(v_shape)
    model.Add(sync_layers >= fewest - 1).OnlyEnforceIf(v_shape.Not())
    return sync_layers


def _most_stage_layers(pv: PlanVars) -> cp_model.IntVar:
    """The most layers any stage holds (pinned): max over the used buildings of ``layers[b]`` (the layer
    split only trims)."""
    most = _new(pv.model, "most_layers_per_stage", pv.instance.job.model_spec.layers)
    pv.model.AddMaxEquality(most, _layers_if_used(pv, "layers_if_used", 0))
    return most


def _first_chunk_layers_at_most(pv: PlanVars, v_chunks: dict[int, cp_model.IntVar], v_shape: cp_model.IntVar,
                                most: cp_model.IntVar) -> cp_model.IntVar:
    """⌈ℓ/v⌉ (pinned), ℓ the first stage's layers at most: ``head_layers`` where V-shaped (stage 0 is the LM-head
    stage), else ``most`` (``_most_stage_layers``); its first chunk, which holds the embedding, has no more
    layers than that."""
    model = pv.model
    total = pv.instance.job.model_spec.layers
    first = _new(model, "first_stage_layers_at_most", total)
    model.Add(first == pv.head_layers).OnlyEnforceIf(v_shape)
    model.Add(first == most).OnlyEnforceIf(v_shape.Not())
    chunk = _new(model, "first_chunk_layers_at_most", total)
    for v, v_on in v_chunks.items():
        model.Add(v * chunk >= first).OnlyEnforceIf(v_on)
        model.Add(v * chunk <= first + v - 1).OnlyEnforceIf(v_on)
    return chunk


def _first_chunk_op_us(pv: PlanVars, name: str, chunk_layers: cp_model.IntVar, per_layer: cp_model.IntVar,
                       embedding: dict, head: dict) -> cp_model.IntVar:
    """An upper bound (µs, pinned: the objective falls as it grows) of one op of the first stage's first
    chunk: ``chunk_layers``·``per_layer`` + the embedding's (+ the LM head's when pp = 1), per shape."""
    model, shapes = pv.model, pv.shape.values
    out = _new(model, f"first_chunk_{name}_us")
    layers_part = _product(model, f"first_chunk_layers*{name}", chunk_layers, per_layer)
    one_stage = [pv.pp.lit(1)] if 1 in pv.pp.values else []
    for lit in one_stage:
        model.Add(out == layers_part + pv.shape.linear([embedding[s] + head[s] for s in shapes])).OnlyEnforceIf(lit)
    model.Add(out == layers_part + pv.shape.linear([embedding[s] for s in shapes])
              ).OnlyEnforceIf([lit.Not() for lit in one_stage])
    return out


def _first_chunk_steps(pv: PlanVars, coeffs: Coefficients, sync_layers: cp_model.IntVar,
                       v_chunks: dict[int, cp_model.IntVar]) -> tuple[cp_model.IntVar, cp_model.IntVar]:
    """The first stage's first chunk (the one whose backward ends the pipeline): (its layers, ⌈ℓ/v⌉ of the ℓ
    whose gradients sync after the pipeline (``chunk_layer_kinds`` gives the first chunks the extra layers);
    BUCKET_STEPS × its parameters in layers, at least: those layers and the embedding it holds
    (``stage_params``: V·h/tp, over the synced parameters of one layer, rounded down))."""
    model, spec = pv.model, pv.instance.job.model_spec
    layers = _new(model, "first_chunk_layers", spec.layers)
    for v, v_on in v_chunks.items():
        model.Add(v * layers >= sync_layers).OnlyEnforceIf(v_on)
        model.Add(v * layers <= sync_layers + v - 1).OnlyEnforceIf(v_on)
    embedding = [int(BUCKET_STEPS * embedding_params(spec, shape.tp) / coeffs.synced_params_per_layer[shape])
                 for shape in pv.shape.values]
    steps = _new(model, "first_chunk_param_steps", BUCKET_STEPS * spec.layers + max(embedding))
    model.Add(steps == BUCKET_STEPS * layers + pv.shape.linear(embedding))
    return layers, steps


def _last_bucket_layers(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, chunk: cp_model.IntVar
                        ) -> cp_model.IntVar | None:
    """BUCKET_STEPS × the layers' worth of gradients in the first stage's last bucket (of its first chunk,
    the one whose backward ends the pipeline), rounded down; None for MoE models (dense and expert buffers
    bucket apart). ZeRO-3: one layer. ZeRO-0..2: a chunk of P ≥ ℓ/v layers' parameters in buckets of
    B = Megatron's default × the plan's factor (≥ 1) holds P / ⌈P/B⌉ ≥ min(P, B/2) per bucket (the stage's
    embedding only adds to P), i.e. ≥ min(ℓ/v, B / (2·params per layer)) layers."""
    if coeffs.model_expert_param_mib > 0:
        return None
    model = pv.model
    top = BUCKET_STEPS * pv.instance.job.model_spec.layers
    default = _new(model, "default_bucket_layers_steps", top)  # ≥ a default bucket's layers at (shape, n)
    zero3 = pv.zero.lit(3) if 3 in pv.zero.values else None
    for shape, shape_lit in zip(pv.shape.values, pv.shape.lits, strict=True):
        per_layer = coeffs.synced_params_per_layer[shape]
        for n, n_lit in groups:
            steps = min(top, int(BUCKET_STEPS * megatron_bucket_params(n) / 2 / per_layer))
            when = [shape_lit, n_lit] + ([zero3.Not()] if zero3 is not None else [])
            model.Add(default >= steps).OnlyEnforceIf(when)
    bucket = _new(model, "bucket_layers_steps", top)  # ≥ the bucket's layers at the plan's (shape, n, ZeRO)
    factor = pv.bucket.value_var(pv.model, "bucket_factor_v", pv.bucket.values)
    capped = pv.shape.value_var(pv.model, "largest_bucket_layers_steps", [  # sizes are capped at the largest
        min(top, int(BUCKET_STEPS * MAX_BUCKET_PARAMS / 2 / coeffs.synced_params_per_layer[shape]))
        for shape in pv.shape.values])
    model.AddMinEquality(bucket, [top, capped, _product(model, "factor*default_bucket_layers_steps", factor, default)])
    if zero3 is not None:
        model.Add(bucket >= BUCKET_STEPS).OnlyEnforceIf(zero3)
    last = _new(model, "last_bucket_layers_steps", top)
    model.AddMinEquality(last, [chunk, bucket])
    return last


def _bucket_kiloparams(pv: PlanVars, groups: DpGroups) -> dict[tuple[int, int], int]:
    """(bucket factor, dp·cp) → the gradient bucket's size in thousands of parameters (rounded up): Megatron's
    default for that group × the factor, capped (``cost.step.dp_bucket_params``)."""
    return {(factor, d): math.ceil(min(factor * megatron_bucket_params(d), MAX_BUCKET_PARAMS) / 1000)
            for factor in pv.bucket.values for d, _ in groups}


def _more_buckets_latency(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, chunk_layers: cp_model.IntVar,
                          chunk_steps: cp_model.IntVar, bucket_latency: cp_model.IntVar
                          ) -> tuple[cp_model.IntVar | int, cp_model.IntVar | None]:
    """((n − 1)·latency, n): the first chunk syncs (and ZeRO-1/2 gathers) its gradients in n buckets, each its
    own collective (``cost.step.dp_buckets``): under ZeRO-3 one per layer, else n ≥ the chunk's parameters
    (``chunk_steps``) ÷ the bucket (Megatron's default for the plan's dp·cp × the plan's factor). Only n ≥
    these: a larger n only lowers the bound's F/n. MoE models keep their expert gradients in buckets of their
    own (``cost.step.dp_buckets``), over a group of dp·cp/ep ranks whose steps may be fewer: n counts the
    buckets of the gradients that sync over all dp·cp ranks (the experts' too where ep = 1, ``synced_params_per
    _layer``), and is not returned (the F/n bound needs every bucket: (latency, None))."""
    model = pv.model
    kiloparams = [int(coeffs.synced_params_per_layer[shape] / 1000) for shape in pv.shape.values]
    per_layer = pv.shape.value_var(pv.model, "synced_kiloparams_per_layer", kiloparams)
    chunk_kiloparams = _product(model, "first_chunk_kiloparams_steps", chunk_steps, per_layer)  # × BUCKET_STEPS
    layers = pv.instance.job.model_spec.layers
    sizes = _bucket_kiloparams(pv, groups)
    top = layers + max(kiloparams) * layers // min(sizes.values()) + 1
    buckets = model.NewIntVar(1, top, "first_chunk_buckets")
    zero3 = [pv.zero.lit(3)] if 3 in pv.zero.values else []
    for lit in zero3:
        model.Add(buckets >= chunk_layers).OnlyEnforceIf(lit)
    for (factor, d), size in sizes.items():
        model.Add(BUCKET_STEPS * size * buckets >= chunk_kiloparams).OnlyEnforceIf(
            [pv.bucket.lit(factor), dict(groups)[d], *[lit.Not() for lit in zero3]])
    more = _new(model, "first_chunk_more_buckets", top)
    model.Add(more == buckets - 1)
    return (_product(model, "more_buckets*latency_us", more, bucket_latency),
            buckets if coeffs.model_expert_param_mib == 0 else None)


def _chunk_moe_layers(pv: PlanVars, coeffs: Coefficients, chunk_layers: cp_model.IntVar, name: str
                      ) -> cp_model.IntVar:
    """A span of chunks' MoE layers: at least its layers − the model's dense ones (all first in the model)."""
    moe_layers = _new(pv.model, f"{name}_moe_layers", pv.instance.job.model_spec.layers)
    pv.model.AddMaxEquality(moe_layers, [0, chunk_layers - coeffs.dense_layers])
    return moe_layers


def _expert_chunk_sync(pv: PlanVars, coeffs: Coefficients, moe_layers: cp_model.IntVar, name: str
                       ) -> cp_model.IntVar | int:
    """MoE models: a span of chunks' expert gradients, which its dense sync (``_add_dp_sync``) leaves out where
    ep > 1 (at ep = 1 they sync with the dense ones, over the same ranks), sync
    after it on the same DP stream (``cost.step._dp_sync``): a reduce-scatter, the smallest sync of any ZeRO
    stage, over the n_e = dp·cp/ep expert-data-parallel ranks, each member's NIC carrying (n_e − 1)/n_e of its
    ≥ (layers − the model's dense ones) MoE layers' expert gradients ÷ the members sharing its NVLink domain
    (``cost.step.dp_uses``), where the groups always cross NICs (µs; 0 for dense models)."""
    if coeffs.model_expert_param_mib == 0 or max(pv.space.ep) == 1:
        return 0
    model = pv.model
    moe = coeffs.layer_kinds.index(LayerKind.MOE)
    bytes_ratio = co.GRAD_REDUCE_BYTES / co.WEIGHT_BYTES  # the coefficient is a pair of weight passes
    # one pass at n_e is ½·ring_factor(n_e) of the pair at n = 2; n_e = dp·cp/ep = N/(tp·pp·ep) at a given pp
    n = pv.instance.num_gpus

    def pass_us(shape: Shape, pp: int) -> int:
        key, ranks = (shape.tp, shape.ep), n // (shape.tp * pp * shape.ep)
        if shape.ep == 1 or not coeffs.zero3_on_nic[key] or n % (shape.tp * pp * shape.ep) or ranks < 2:
            return 0
        return int(coeffs.zero3_nic_pair_us[key][moe][1] * bytes_ratio * ring_factor(ranks) / 2)
    per_pp = {pp: [pass_us(shape, pp) for shape in pv.shape.values] for pp in pv.pp.values}
    per_layer = _new(model, f"{name}_expert_sync_us_per_layer", max(max(v) for v in per_pp.values()))
    for pp, pp_lit in zip(pv.pp.values, pv.pp.lits, strict=True):
        model.Add(per_layer >= pv.shape.linear(per_pp[pp])).OnlyEnforceIf(pp_lit)
    return _product(model, f"{name}_expert_sync_us", moe_layers, per_layer)


def _expert_buckets_latency(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, moe_layers: cp_model.IntVar,
                            ring_hop: cp_model.IntVar, tree_ring: list[cp_model.IntVar] | None
                            ) -> tuple[cp_model.IntVar | int, cp_model.IntVar | int]:
    """MoE models: the first chunk's expert gradients sync (and ZeRO-1/2 gather) in buckets of their own, each
    its own collective over the e = dp·cp/ep expert-data-parallel ranks (``cost.step.dp_buckets``): n_e ≥ its
    MoE layers' (≥ its layers − the model's dense ones) expert parameters ÷ the bucket (ZeRO-3: one per MoE
    layer). Where DP crosses buildings a flat algorithm's ring over those ranks spans every used building
    (EP groups stay in one), so each pays its steps (``_sync_steps`` over e) × the ring's slowest hop
    (``ring_hop``; ``tree_ring``: ``_tree_runs_ring``): (n_e·latency, latency) µs (0 elsewhere: a lower
    bound)."""
    if coeffs.model_expert_param_mib == 0 or pv.cross_algorithm is None or max(pv.space.ep) == 1:
        return 0, 0
    model = pv.model
    crossing = [pv.mode.lit(mode) for mode in (CrossBuilding.DP, CrossBuilding.PP_DP) if mode in pv.mode.values]
    if not crossing:
        return 0, 0
    layers = pv.instance.job.model_spec.layers
    kiloparams = [coeffs.expert_kiloparams_per_layer[shape] for shape in pv.shape.values]
    per_layer = pv.shape.value_var(model, "expert_kiloparams_per_layer", kiloparams)
    chunk_kiloparams = _product(model, "first_chunk_expert_kiloparams", moe_layers, per_layer)
    sizes = _bucket_kiloparams(pv, groups)
    buckets = _new(model, "first_chunk_expert_buckets", layers + max(kiloparams) * layers // min(sizes.values()) + 1)
    zero3 = [pv.zero.lit(3)] if 3 in pv.zero.values else []
    for lit in zero3:
        model.Add(buckets >= moe_layers).OnlyEnforceIf(lit)
    for (factor, d), size in sizes.items():
        model.Add(size * buckets >= chunk_kiloparams).OnlyEnforceIf(
            [pv.bucket.lit(factor), dict(groups)[d], *[lit.Not() for lit in zero3]])
    latency = _expert_bucket_latency(pv, coeffs, groups, ring_hop, tree_ring, crossing, "expert_bucket_latency_us")
    return _product(model, "expert_buckets*latency_us", buckets, latency), latency


def _expert_bucket_latency(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, ring_hop: cp_model.IntVar,
                           tree_ring: list[cp_model.IntVar] | None, crossing: list[cp_model.IntVar], name: str
                           ) -> cp_model.IntVar:
    """The latency (µs) of one expert-gradient bucket's collective where DP crosses buildings (any of
    ``crossing``): ``_sync_steps`` over the e = dp·cp/ep expert-data-parallel ranks × the ring's slowest hop
    (``ring_hop``; ``tree_ring``: ``_tree_runs_ring``), 0 under algorithms whose steps count buildings."""
    model = pv.model
    latency = _new(model, name)
    for algorithm, alg_lit in zip(pv.cross_algorithm.values, pv.cross_algorithm.lits, strict=True):
        steps = coeffs.cross_algorithm_steps[algorithm]
        if steps == "buildings":
            continue
        for (d, d_lit), (ep, ep_lit) in product(groups, zip(pv.ep.values, pv.ep.lits, strict=True)):
            if ep == 1 or d % ep or d // ep < 2:
                continue
            for count, also in _sync_steps(algorithm, steps == "linear", d // ep, tree_ring):
                if count * _upper(ring_hop) > HORIZON_US // 2:
                    continue
                for mode_lit in crossing:
                    model.Add(latency >= count * ring_hop).OnlyEnforceIf([mode_lit, alg_lit, d_lit, ep_lit, *also])
    return latency


def _add_dp_sync(pv: PlanVars, coeffs: Coefficients, successors: RingEdges,
                 inter_group: dict[tuple[int, int], cp_model.IntVar], ring_hop: cp_model.IntVar, groups: DpGroups,
                 spans: list[tuple[str, cp_model.IntVar, int]], bucket_latency: cp_model.IntVar,
                 inner: InnerRing | None, tree_ring: list[cp_model.IntVar] | None) -> list[cp_model.IntVar]:
    """Lower bounds of the time to sync, with nothing overlapping, each span (name, layers, per) of the first
    stage's gradients: layers/per of its layers (µs; each span pays the collective's latency once, which
    ``bucket_latency`` is bounded below by). ``tree_ring``: ``_tree_runs_ring``."""
    model = pv.model
    buildings = pv.instance.cluster.buildings
    intra_latency = _new(model, "dp_intra_latency_us")
    grad_weights = [coeffs.grad_kib_per_layer[shape] for shape in pv.shape.values]
    per_layer = _new(model, "grad_kib_per_layer", max(grad_weights))
    model.Add(per_layer == pv.shape.linear(grad_weights))
    several = []
    for b, building in enumerate(buildings):
        lit = model.NewBoolVar(f"replicas>=2[{building.name}]")
        model.Add(pv.replicas[b] >= 2).OnlyEnforceIf([lit, pv.used[b]])
        model.Add(pv.replicas[b] <= 1).OnlyEnforceIf([lit.Not(), pv.used[b]])
        model.Add(lit == 1).OnlyEnforceIf(pv.used[b].Not())
        several.append(lit)
    all_several = model.NewBoolVar("every_building_holds_2_replicas")
    model.AddBoolAnd(several).OnlyEnforceIf(all_several)
    model.AddBoolOr([lit.Not() for lit in several]).OnlyEnforceIf(all_several.Not())
    whole_group = [lit for mode, lit in zip(pv.mode.values, pv.mode.lits, strict=True)
                   if mode not in (CrossBuilding.DP, CrossBuilding.PP_DP)]
    # Latency steps of the sync inside a building (whole DP group there): ring n−1, else ⌈log2 n⌉ — but a
    # reduce-scatter (ZeRO ≥ 1) runs the ring where the tree is chosen (``_tree_runs_ring``). Each step pays
    # the fabric's hop where the group's tp·n GPUs exceed every NVLink domain, else NVLink's
    # (``cost.step.span_levels``: the farthest level the group crosses).
    domain = max(nvlink_domain(building) for building in buildings)
    nvlink_hop = min(coeffs.intra_hop_us, int(co.NVLINK_LATENCY_US))
    for algorithm, alg_lit in zip(pv.intra_algorithm.values, pv.intra_algorithm.lits, strict=True):
        for d, d_lit in groups:
            by_tp = [(coeffs.intra_hop_us if d * tp > domain else nvlink_hop, [tp_lit])
                     for tp, tp_lit in zip(pv.tp.values, pv.tp.lits, strict=True)]
            if len({hop for hop, _ in by_tp}) == 1:  # the same for every tp: one bound, unconditional
                by_tp = [(by_tp[0][0], [])]
            cases = _sync_steps(algorithm, algorithm is CollectiveAlgorithm.RING, d, tree_ring)
            for mode_lit, (hop, tp_when), (steps, also) in product(whole_group, by_tp, cases):
                model.Add(intra_latency >= steps * hop).OnlyEnforceIf(
                    [alg_lit, d_lit, mode_lit, all_several, *tp_when, *also])
    crossing = [(mode, pv.mode.lit(mode)) for mode in (CrossBuilding.DP, CrossBuilding.PP_DP)
                if mode in pv.mode.values]
    crosses = bool(crossing) and pv.cross_transport is not None and pv.cross_algorithm is not None
    # A flat ring's tp groups hold one connection per DP member of an NVLink domain at the building edge (≤ the
    # domain's GPUs together); hierarchical outer rings one per GPU of the stage (≤ the larger end's GPUs).
    edges = [] if not crosses else [
        (transport, lit,
         _slowest_edge_us_per_layer(pv, coeffs.layer_grad_mib, coeffs.pair_flat_route_us_per_mib[transport],
                                    f"flat[{t}]", successors, inter_group),
         _slowest_edge_us_per_layer(pv, coeffs.layer_grad_mib, coeffs.pair_route_us_per_mib[transport],
                                    f"hierarchical[{t}]", successors, inter_group))
        for t, (transport, lit) in enumerate(zip(pv.cross_transport.values, pv.cross_transport.lits, strict=True))]
    if inner is not None:  # the hierarchical inner ring's steps
        model.Add(intra_latency >= coeffs.intra_hop_us * (inner.members - 1))
    model.Add(bucket_latency >= intra_latency)
    return [_span_sync(pv, coeffs, groups, span, per_layer, intra_latency, all_several, whole_group, crossing, edges,
                       bucket_latency if i == 0 else None, inner, tree_ring, ring_hop) for i, span in enumerate(spans)]


def _sync_steps(algorithm: CollectiveAlgorithm, linear: bool, d: int, tree_ring: list[cp_model.IntVar] | None
                ) -> list[tuple[int, list[cp_model.IntVar]]]:
    """Latency steps of a DP sync over d ranks, each with the literals it also needs: n − 1 where they grow
    ``linear``-ly (the ring), else ⌈log2 n⌉ — and n − 1 under ``tree_ring`` for the tree (``_tree_runs_ring``)."""
    log_steps = math.ceil(math.log2(max(d, 2)))
    cases = [((d - 1) if linear else log_steps, [])]
    if algorithm is CollectiveAlgorithm.TREE and tree_ring is not None and d - 1 > log_steps:
        cases.append((d - 1, tree_ring))
    return cases


def _tree_runs_ring(pv: PlanVars) -> list[cp_model.IntVar] | None:
    """When the DP sync is a reduce-scatter (ZeRO-1..3), which NCCL runs as a ring even where the tree
    algorithm is chosen (``cost.collectives.flat_collective_s``: the tree is an all-reduce algorithm), so its
    latency steps grow as n − 1: the enforcement literals of that case ([] always, None never)."""
    scatter = [lit for zero, lit in zip(pv.zero.values, pv.zero.lits, strict=True) if zero >= 1]
    if not scatter:
        return None
    if len(scatter) == len(pv.zero.values):
        return []
    return [pv.zero.any_of(pv.model, "dp_sync_is_reduce_scatter", lambda zero: zero >= 1)]


def _span_sync(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, span: tuple[str, cp_model.IntVar, int],
               per_layer: cp_model.IntVar, intra_latency: cp_model.IntVar, all_several: cp_model.IntVar,
               whole_group: list[cp_model.IntVar], crossing: list[tuple[CrossBuilding, cp_model.IntVar]],
               edges: list[tuple[Transport, cp_model.IntVar, cp_model.IntVar, cp_model.IntVar]],
               bucket_latency: cp_model.IntVar | None, inner: InnerRing | None,
               tree_ring: list[cp_model.IntVar] | None, ring_hop: cp_model.IntVar) -> cp_model.IntVar:
    """One span of ``_add_dp_sync``: intra (bytes × the transport's µs/byte × the ring of the group inside a
    building) + latency, the crossing (below), and intra + cross for the hierarchical algorithm; the
    crossing's latency also bounds ``bucket_latency`` below (when given). ``tree_ring``: ``_tree_runs_ring``;
    ``ring_hop``: ``_ring_hop_us``, a flat algorithm's latency per step."""
    model = pv.model
    name, layers, per = span
    total = _new(model, f"{name}_total_us")
    intra = _new(model, f"{name}_intra_us")
    grad_kib = _product(model, f"{name}_grad_kib", layers, per_layer)  # × per
    for transport, lit in zip(pv.intra_transport.values, pv.intra_transport.lits, strict=True):
        base = int(SCALE * coeffs.intra_us_per_mib[transport])
        model.Add(1024 * SCALE * per * intra >= base * grad_kib).OnlyEnforceIf([lit, all_several])
        for d, d_lit in groups:  # the DP group is within one building
            per_mib = int(SCALE * coeffs.intra_us_per_mib[transport] * ring_factor(d))
            for mode_lit in whole_group:
                model.Add(1024 * SCALE * per * intra >= per_mib * grad_kib).OnlyEnforceIf([lit, all_several, d_lit,
                                                                                           mode_lit])
        for width, wide in inner.wide if inner is not None else ():  # the hierarchical inner ring's members
            model.Add(1024 * SCALE * per * intra >= int(base * ring_factor(width)) * grad_kib
                      ).OnlyEnforceIf([lit, wide])
    model.Add(total >= intra + intra_latency)
    if not edges:
        return total
    assert pv.cross_algorithm is not None
    cross = _new(model, f"{name}_cross_us")
    # Reduce-scatter of the gradients over the dp·cp ranks (ZeRO-1/2 gather the weights after the optimizer):
    # ring volume 2(n−1)/n × its n = 2 coefficient; (n−1) latency steps for a flat ring, ⌈log2 n⌉ for
    # tree / PAT, (#buildings − 1) for the hierarchical outer ring (pp+dp: ≥ 1, the stage's ring joins ≥ 2
    # groups). The stages share the route, but the other stages' syncs may end during the drain: only the
    # first stage's layers (whole layers: all its TP groups cross) are bounded, over the route's best goodput.
    for t, (transport, lit, flat_edge, wide_edge) in enumerate(edges):
        hop = coeffs.cross_hop_us[transport]
        flat_layers_us = _product(model, f"{name}_flat_layers_us[{t}]", flat_edge, layers)  # × per
        wide_layers_us = _product(model, f"{name}_hierarchical_layers_us[{t}]", wide_edge, layers)  # × per
        for algorithm, alg_lit in zip(pv.cross_algorithm.values, pv.cross_algorithm.lits, strict=True):
            steps = coeffs.cross_algorithm_steps[algorithm]
            for mode, mode_lit in crossing:
                when = [mode_lit, lit, alg_lit]
                if steps == "buildings":
                    outer = sum(pv.used) - 1 if mode is CrossBuilding.DP else 1
                    model.Add(per * cross >= wide_layers_us + per * hop * outer).OnlyEnforceIf(when)
                    if bucket_latency is not None:  # the inner rings' latency and the outer ring's
                        model.Add(bucket_latency >= intra_latency + hop * outer).OnlyEnforceIf(when)
                    continue
                for d, d_lit in groups:
                    for count, also in _sync_steps(algorithm, steps == "linear", d, tree_ring):
                        # the ring's slowest hop per step where that stays within the horizon, else the shortest
                        latency = (count * ring_hop if count * _upper(ring_hop) <= HORIZON_US // 2
                                   else min(hop * count, HORIZON_US))
                        model.Add(SCALE * per * cross >= int(SCALE * ring_factor(d)) * flat_layers_us
                                  + SCALE * per * latency).OnlyEnforceIf([*when, d_lit, *also])
                        if bucket_latency is not None:
                            model.Add(bucket_latency >= latency).OnlyEnforceIf([*when, d_lit, *also])
    model.Add(total >= cross)
    hierarchical = CollectiveAlgorithm.HIERARCHICAL
    if hierarchical in pv.cross_algorithm.values:
        for _, mode_lit in crossing:
            model.Add(total >= intra + cross).OnlyEnforceIf([mode_lit, pv.cross_algorithm.lit(hierarchical)])
    return total
