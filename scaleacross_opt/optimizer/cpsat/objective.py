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
  shipped models); with PP across the tip is the last used building's last stage (``v_tip_chains``); split
  backward (ZB-H1): the LM-head stage's last B waits for the stages before it (their F+B ≥ layers·(c_min − W))
  but may leave its trailing W ops (pp of them) to after it:
  pipeline ≥ m·t_head + layers before it·(c_min − W) − pp·W_head stage + hops;
pipeline ≥ v·(boundary bytes per step)/(cross bandwidth) (pp across: every byte crosses the link), and
pipeline ≥ the boundary crossings on the op graph's longest path × the route's one-way latency + the F and B ops such
a path runs between its crossings (2 per crossing, 1 under interleaved's wrap) at the least op (``crossings``), and
pipeline ≥ n_F·F_min + n_B·B_min for a path of n_F forward and n_B backward ops of a fixed-order op graph, every op
at least the fewest layers of any chunk at the least per-layer pass (``critical_path``, ``least_ops``).
Turn at the first stage (schedules that are not V-shaped): stage 0 runs its ops in order, and between
micro-batch 0's forward and backward of its latest chunk only a forwards (``turn_forwards``), while that
micro-batch crosses every later stage's last chunk and comes back: pipeline ≥ m·t_0 − a·F_0 + chain + hops
(``add_first_stage_turn``; the chains above start at later stages, so a bottleneck first stage idled free).
ZeRO-3 where the DP group crosses NICs: a layer's fwd+bwd ≥ the NIC seconds of its gather pair, CP ring and (MoE
layers) EP all-to-all together, one NIC carrying them all (``add_nic_sharing``); an MoE layer's is a bound of its
own, with what the dense layers save against it (``nic_saving``).
DP sync (a reduce-scatter of the gradients): intra ≥ the first stage's bytes per GPU · cost per byte
(÷ the members of a DP group that share one NVLink domain's NICs, at most domain ÷ tp);
cross (dp or pp+dp across) ≥ the first stage's whole-layer gradient bytes · cost per byte of the ring's
slowest building edge (dp: the edges between consecutive used buildings; pp+dp: the best pair) at the
connections the ring holds (flat: one NVLink domain's, hierarchical: the larger end's GPUs) + latency
steps over the n = dp·cp ranks of a DP group (ring n−1, pat ⌈log2 n⌉, tree ⌈log2 n⌉ for ZeRO-0's all-reduce
but n−1 for ZeRO-1..3's reduce-scatter, which runs as a ring, hierarchical #buildings−1);
exposed ≥ the first stage's first chunk's sync (it syncs after the pipeline ends; ⌈ℓ/v⌉ layers and the
embedding's parameters, ``first_chunk_steps``) less that chunk's
last backward op (its gradient buckets are released within it; ≤ ψ·t_max / v, ψ the largest share of W, or
of B+W where the backward is not split, in any layer's or the LM head's fwd+bwd); ZeRO-1/2 gather the
updated weights over the same ring after the optimizer: exposed ≥ that chunk's gather less the next step's
first forward of it (≤ φ·t_max / v, φ the largest forward share fwd ÷ (fwd+bwd) of any layer or LM head;
the later chunks' gathers may hide behind the forwards before theirs) — but the forward needs its bucket k of n
k/n into it, so F/n of it hides nothing (≥ the chunk's layers at their least F, ÷ n).
Dense models: the same terms over the first chunk's last gradient bucket (``last_bucket_layers``: ≥ one
layer under ZeRO-3, else ≥ min(chunk, half the plan's bucket: Megatron's default × its bucket factor)):
exposed ≥ it where no backward is split (the chunk releases it as the pipeline's last op ends), and
ZeRO-1/2 exposed gather ≥ its gather (the first gather bucket is needed by the next step's first op).
Every model: each of the first chunk's n buckets pays the collective's latency, so its sync and gather carry
(n − 1) more (``more_buckets_latency``: n ≥ the chunk's parameters synced over all dp·cp ranks ÷ the bucket,
or its layers under ZeRO-3).
step ≥ pipeline + exposed DP + optimizer + exposed gather; ZeRO-0..2: step ≥ the first stage's DP stream from its
first bucket's release (``first_release_us``) through every chunk's sync, the optimizer and the gathers.

This module assembles the step variable; the constraint families live beside it: ``pipeline_chains`` (bubble,
chains, V tip, first-stage turn), ``zero3`` (gathers, one NIC per layer's classes), ``dp_rings`` (DP groups and
ring edges), ``dp_sync`` (the DP stream), ``resource_bounds`` (NIC and route capacity), ``terms`` (arithmetic).
"""

from __future__ import annotations

import math
from itertools import product

from ortools.sat.python import cp_model

from ...catalog import coefficients as co
from ...schedules import get_schedule
from ...spec import CrossBuilding
from ..coefficients import Coefficients, pairings
from .critical_path import critical_path_ops
from .crossings import crossing_table
from .dp_rings import (
    dp_group_sizes,
    first_stage_ring_edges,
    inner_ring,
    inter_group_pairs,
    ring_hop_us,
    ring_successors,
    tree_runs_ring,
)
from .dp_sync import (
    OtherChunks,
    add_dp_stream_bound,
    add_dp_sync,
    add_whole_tip_sync,
    chunk_moe_layers,
    expert_buckets_latency,
    expert_chunk_sync,
    first_chunk_steps,
    first_release_us,
    first_stage_sync_layers,
    last_bucket_layers,
    more_buckets_latency,
    pp_dp_tip,
    sync_basis,
)
from .pipeline_chains import (
    FirstStage,
    add_first_stage_turn,
    at_most_two_used,
    bubble_factor,
    fewest_cut_crossings,
    first_chunk_layers_at_most,
    first_chunk_op_us,
    inner_buildings_last_stages,
    layers_cost,
    layers_left,
    least_ops,
    least_passes_anywhere,
    microbatch_literals,
    most_stage_layers,
    pp_mode_literal,
    split_backward_chain,
    v_head_stage_wait,
    v_tip_chains,
)
from .resource_bounds import add_dp_route_bounds, dp_nic_bounds, zero3_nic_bounds
from .terms import BUCKET_STEPS, HORIZON_US, SCALE, capped_product, layers_if_used, new_var, upper_bound
from .variables import PlanVars
from .zero3 import add_nic_sharing, head_gather_ratios, head_or_gathers, nic_saving, zero3_gathers


def add_objective(pv: PlanVars, coeffs: Coefficients, products: dict[str, list[cp_model.IntVar]]
                  ) -> cp_model.IntVar:
    """Post the step-time terms; returns the step variable (µs), also stored in ``pv.terms``."""
    model, instance = pv.model, pv.instance
    layers_pp, group_head = products["layers_pp"], products["group_head"]
    buildings = instance.cluster.buildings
    pp_mode = pp_mode_literal(pv)
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

    successors = ring_successors(pv)
    inter_group = inter_group_pairs(pv)
    ring_hop = ring_hop_us(pv, coeffs, successors, "dp_ring_hop_us", inter_group)
    groups = dp_group_sizes(pv)
    inner = inner_ring(pv, groups)
    gathers = (zero3_gathers(pv, coeffs, successors, inter_group, ring_hop, groups, inner)
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
        out = new_var(model, name, max(max(row) for row in rows.values()))
        for pairs, row in rows.items():
            model.Add(out == pv.shape.linear(row)).OnlyEnforceIf(paired if pairs else paired.Not())
        return out

    # --- compute per stage -------------------------------------------------------------------------
    per_layer_times, layer_stage_times = [], []  # per building: one layer, a regular stage (cheapest kind)
    head_ratios = head_gather_ratios(pv, gathers.sharding) if gathers is not None else {}
    # V-shaped schedules: the LM-head stage is the first, so it also gathers the embedding (as large as the head),
    # in another op (chunk 0's) than the head's
    embedding_gathers = None
    if head_ratios and any(get_schedule(name).head_stage(2, v) == 0 for name, v in pv.schedule_chunks.values):
        embedding_gathers = new_var(model, "v_head_stage_embedding_gathers_us")
        for key, lit in zip(gathers.sharding.values, gathers.sharding.lits, strict=True):
            if key in head_ratios:
                model.Add(SCALE * embedding_gathers >= int(SCALE * head_ratios[key]) * gathers.light
                          ).OnlyEnforceIf([lit, products["v_shape"][0]])
    head_stages = []  # per building: (head_layers·c_b, c_b, LM head µs, when the LM-head stage is here)
    t_reg = new_var(model, "t_regular")
    t_max = new_var(model, "t_max")
    t_head_max = new_var(model, "t_head_stage")  # the LM-head stage of the slowest pipeline
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
                either = new_var(model, f"light_discount_or_gathers_us[{building.name}]", HORIZON_US)
                model.AddMaxEquality(either, [discount, gathers.excess])
                discount = either
            bounds.append((coeffs.heavy_layer_us, discount, "heavy_layer", gathers.heavy if gathers else None))
            if gathers is not None:  # and an MoE layer's NIC seconds under ZeRO-3 (``add_nic_sharing``)
                bounds.append((None, nic_saving(pv, coeffs, building.name, gathers, groups), "moe_nic", None))
        head = pv.shape.linear([coeffs.head_us[(shape, building.name)] for shape in pv.shape.values])
        if gathers is not None:
            head = head_or_gathers(pv, building.name, head, gathers, head_ratios)
            if embedding_gathers is not None:
                head = head + embedding_gathers
        conditions = holds_head[b]
        for table, discount, label, gather in bounds:
            if table is None:
                per_layer = new_var(model, f"{label}_us[{building.name}]")
                add_nic_sharing(pv, coeffs, building.name, per_layer, "heavy", gathers, groups)
            else:
                per_layer = by_pairing(f"{label}_us[{building.name}]", table, building.name)
            if gather is not None:  # ZeRO-3: a layer lasts at least its pair of weight gathers
                gathered = new_var(model, f"{label}_or_gathers_us[{building.name}]",
                                   max(upper_bound(per_layer), upper_bound(gather)))
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
                    add_nic_sharing(pv, coeffs, building.name, gathered, "light", gathers, groups)
                per_layer = gathered
            # b's most-loaded regular stage holds at least ``timed_layers[b]``
            stage_us = capped_product(model, f"{label}_stage_us[{building.name}]", products["timed_layers"][b],
                                      per_layer)
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
            t_head = capped_product(model, f"head_stage_{label}s_us[{building.name}]", pv.head_layers, per_layer)
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
    compute = capped_product(model, "compute_us", pv.microbatches, t_max)
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
    fastest = new_var(model, "fastest_layer_us")
    model.AddMinEquality(fastest, per_layer_times)
    layers_before_head = layers_left(pv, "before_head", layers_total, [])
    before_head = layers_cost(pv, "layers_before_head", layers_before_head, per_layer_times, fastest,
                              products["layer_slots"])
    m_head = capped_product(model, "m*t_head", pv.microbatches, t_head_max)
    even = pv.layers  # in whole-pipeline modes every used building has the same layers[b]
    before_last_regular = [
        capped_product(model, f"layers_before_regular*c[{b.name}]",
                       layers_left(pv, f"before_regular[{b.name}]", layers_total, [even[i]]), fastest)
        for i, b in enumerate(buildings)]
    m_regular = capped_product(model, "m*t_reg", pv.microbatches, t_reg)
    # pp+dp: every group's last regular stage also holds the even split; on the fastest GPU it takes
    # layers·c_min (which building of its group holds it is not modelled)
    m_even_fastest = [
        capped_product(model, f"m*layers*c_min[{b.name}]", pv.microbatches,
                       capped_product(model, f"layers*c_min[{b.name}]", pv.layers[i], fastest))
        for i, b in enumerate(buildings)] if pp_dp is not None else []

    # hops: one forward and one backward traversal of the pipeline's boundaries (latency, and under pp the
    # crossings' bytes): the fabric's
    # hop inside a building, the route's where a boundary crosses buildings (pp: one per used building after
    # the first, pp+dp: the fewest of any group's pipeline); hop_floor ≤ either, for the boundaries inside
    crossing = (pp_mode is not None or pp_dp is not None) and pv.cross_transport is not None
    hop_floor = min(coeffs.intra_hop_us, *coeffs.cross_hop_us.values()) if crossing else coeffs.intra_hop_us
    hops = new_var(model, "hops_us")
    model.Add(hops >= 2 * hop_floor * (pv.pp_var - 1))
    for mode_lit in whole if hop_floor < coeffs.intra_hop_us else []:
        model.Add(hops >= 2 * coeffs.intra_hop_us * (pv.pp_var - 1)).OnlyEnforceIf(mode_lit)
    pipeline = new_var(model, "pipeline_us")
    model.Add(pipeline >= compute)
    # two buildings: one route carries every crossing of their cut, the wrap-arounds included
    two_buildings = at_most_two_used(pv) if pp_mode is not None else None
    depths = [pp for pp in pv.pp.values if pp > 1]
    wrapping = [] if two_buildings is None else [
        (lit, crossings) for (name, v), lit in zip(pv.schedule_chunks.values, pv.schedule_chunks.lits, strict=True)
        if (crossings := fewest_cut_crossings(name, v, depths)) > v]
    if crossing:
        # every group's first forward and last backward cross its pipeline's building boundaries; all
        # replicas' activations cross each boundary under pp (pp+dp: only its group's, left out)
        microbatch_lits = microbatch_literals(pv) if pp_mode is not None else []
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
    most_layers = most_stage_layers(pv)
    first_layers = first_chunk_layers_at_most(pv, v_chunks, products["v_shape"][0], most_layers)
    # an upper bound of any forward op of the first stage: its first chunk's (the largest, with the embedding)
    longest_forward = pv.shape.value_var(pv.model, "layer_forward_us",
                                         [coeffs.layer_forward_us[shape] for shape in pv.shape.values])
    first_forward = first_chunk_op_us(pv, "forward", first_layers, longest_forward,
                                      coeffs.embedding_forward_us, coeffs.head_forward_us)
    v_shaped = any(get_schedule(name).head_stage(2, v) == 0 for name, v in pv.schedule_chunks.values)
    v_tip = (v_tip_chains(pv, pp_mode, layer_stage_times, per_layer_times, products["layer_slots"],
                          products["last_used"], products["timed_layers"])
             if pp_mode is not None and v_shaped else None)
    # pp across: stage pp − 2 is the last building's when it holds two stages or more
    two_stages = []
    for b, name in enumerate(pv.buildings) if pp_mode is not None else []:
        lit = model.NewBoolVar(f"two_stages_or_more[{name}]")
        model.Add(pv.stages[b] >= 2).OnlyEnforceIf(lit)
        model.Add(pv.stages[b] <= 1).OnlyEnforceIf(lit.Not())
        two_stages.append(lit)
    inner_last = {head_first: inner_buildings_last_stages(pv, products, per_layer_times, fastest, head_first)
                  for head_first in ((False, True) if v_shaped else (False,))} if two_stages else {}
    m_layer_stage = [capped_product(model, f"m*layer_stage_us[{name}]", pv.microbatches, stage_us)
                     for name, stage_us in zip(pv.buildings, layer_stage_times, strict=True)] if two_stages else []
    tip_end = new_var(model, "v_tip_end_us")  # when the V's tip stage ends its last op (pp across)
    tip_syncs: list[tuple[cp_model.IntVar, int]] = []  # (schedule, W ops after the tip's last chunk-1 W)
    whole_tip_end = new_var(model, "v_whole_tip_end_us")  # whole pipelines (none, dp): when a V's tip ends its last op
    pp_dp_tip_end = new_var(model, "v_pp_dp_tip_end_us")  # … pipelines over a group of buildings (pp+dp)
    whole_tip_syncs: list[tuple[cp_model.IntVar, int]] = []  # … and the W ops it runs after its last chunk-1 W
    split_chain = None
    layer_weight = pv.shape.value_var(pv.model, "layer_weight_us",
                               [coeffs.layer_weight_us[shape] for shape in pv.shape.values])
    less_weight = new_var(model, "fastest_layer_less_weight_us")  # c_min − W: a layer's F + B at least
    model.AddMaxEquality(less_weight, [0, fastest - layer_weight])
    # per recompute mode: the (least, largest) forward share of a layer's F+B+W, and whether the plan's shape has it
    forward_shares = [(least, most, pv.shape.any_of(model, f"recompute={recompute.value}",
                                                    lambda shape, r=recompute: shape.recompute == r))
                      for recompute, (least, most) in coeffs.layer_forward_shares.items()] if v_shaped or any(
        get_schedule(name).splits_backward for name, _ in pv.schedule_chunks.values) else []
    v_head = v_head_stage_wait(pv, head_stages, fastest, before_head, hops, forward_shares,
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
                split_chain = split_backward_chain(pv, coeffs, layers_before_head, less_weight, layer_weight)
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
    add_first_stage_turn(pv, coeffs, pipeline, hops, FirstStage(
        [capped_product(model, f"first_stage_layers*c[{name}]", layers, c)
         for name, layers, c in zip(pv.buildings, products["stage_layers"], per_layer_times, strict=True)],
        holds_first, most_layers, first_forward), fastest, less_weight, v_chunks)
    least_passes = least_passes_anywhere(pv, layer_passes)
    path_ops = critical_path_ops(pv)
    if path_ops is not None:  # pipeline ≥ n_F·F_min + n_B·B_min (``critical_path``)
        least = least_ops(pv, least_passes, gathers.light if gathers else None, layer_weight, unsplit,
                          products["stage_layers"])
        model.Add(pipeline >= sum(capped_product(model, f"critical_path_{kind}_us", count, op)
                                  for kind, count, op in zip(("forward", "backward"), path_ops, least, strict=True)))
        least_op = pv.terms["least_crossing_op"] = new_var(model, "least_crossing_op_us")
        model.AddMinEquality(least_op, least)
    # PP across: one route latency per boundary crossing on a path, and the ops between the crossings
    table = crossing_table(pv, pp_mode)
    if table is not None:
        crossings, ops = table
        between = capped_product(model, "crossing_ops_us", ops, least_op) if path_ops is not None else 0
        for transport, lit in zip(pv.cross_transport.values, pv.cross_transport.lits, strict=True):
            model.Add(pipeline >= pv.cross_hop_us[transport] * crossings + between).OnlyEnforceIf([pp_mode, lit])

    nic_busy = dp_nic_bounds(pv, coeffs)
    if gathers is not None:
        nic_busy += zero3_nic_bounds(pv, coeffs, groups, gathers.sharding, gathers.on_nic, holds_head,
                                     products["v_shape"][0])
    route_busy = add_dp_route_bounds(pv, coeffs, groups)

    # --- data-parallel gradient sync ---------------------------------------------------------------
    sync_layers = first_stage_sync_layers(pv, products["v_shape"][0])
    chunk_layers, chunk_steps = first_chunk_steps(pv, coeffs, sync_layers, v_chunks)
    bucket_layers = last_bucket_layers(pv, coeffs, groups, chunk_steps)
    spans = [("first_chunk_sync", chunk_steps, BUCKET_STEPS)] + ([("last_bucket", bucket_layers, BUCKET_STEPS)]
                                                                  if bucket_layers is not None else [])
    if tip_syncs:
        spans.append(("v_tip_sync", v_tip.layers, 1))
    whole_tip_layers = None
    if whole_tip_syncs and whole:  # whole pipelines: the tip is each used building's last stage, ≥ timed_layers[b]
        whole_tip_layers = new_var(model, "v_whole_tip_layers", pv.instance.job.model_spec.layers)
        model.AddMinEquality(whole_tip_layers, layers_if_used(pv, "v_whole_tip_layers_if_used",
                                                              pv.instance.job.model_spec.layers,
                                                              products["timed_layers"]))
        spans.append(("v_whole_tip_sync", whole_tip_layers, 1))
    other_layers = new_var(model, "other_chunks_layers", pv.instance.job.model_spec.layers)
    model.Add(other_layers == sync_layers - chunk_layers)  # the first stage's other chunks, at least
    spans.append(("other_chunks_sync", other_layers, 1))
    bucket_latency = new_var(model, "dp_bucket_latency_us")
    # the spans are the first stage's gradients: under pp+dp its ring joins the groups' first buildings
    first_stage_edges = first_stage_ring_edges(pv)
    sync_edges = successors + first_stage_edges
    sync_hop = (ring_hop_us(pv, coeffs, sync_edges, "first_stage_dp_ring_hop_us", inter_group)
                if first_stage_edges else ring_hop)
    tree_ring = tree_runs_ring(pv)
    basis = sync_basis(pv, coeffs, groups, inner, tree_ring, inter_group)
    dense_sync, *last_bucket = add_dp_sync(pv, coeffs, basis, sync_edges, sync_hop, spans, bucket_latency)
    chunk_sync = new_var(model, "first_chunk_sync_us")
    moe_layers = chunk_moe_layers(pv, coeffs, chunk_layers, "first_chunk")
    model.Add(chunk_sync == dense_sync + expert_chunk_sync(pv, coeffs, moe_layers, "first_chunk"))
    others_sync = new_var(model, "other_chunks_sync_us")
    model.Add(others_sync == last_bucket.pop() + expert_chunk_sync(
        pv, coeffs, chunk_moe_layers(pv, coeffs, other_layers, "other_chunks"), "other_chunks"))
    whole_tip_sync = last_bucket.pop() if whole_tip_layers is not None else None
    tip_sync = last_bucket.pop() if tip_syncs else None
    # every gradient bucket of the first chunk but one pays the collective's latency again (sync and gather)
    extra, buckets = more_buckets_latency(pv, coeffs, groups, chunk_layers, chunk_steps, bucket_latency)
    expert_extra, expert_latency = expert_buckets_latency(pv, coeffs, groups, moe_layers, sync_hop, tree_ring)
    extra += expert_extra
    last_bucket_forward = 0  # the forward of the first chunk's last bucket: ≥ its least F ÷ its buckets
    if buckets is not None:
        least = [min(us for (shape, _, _), us in coeffs.layer_forward_least_us.items() if shape == s)
                 for s in pv.shape.values]
        chunk_forward = capped_product(model, "first_chunk_forward_least_us", chunk_layers,
                                       pv.shape.value_var(model, "layer_forward_least_us", least))
        last_bucket_forward = new_var(model, "first_chunk_forward_least_per_bucket_us")
        model.AddDivisionEquality(last_bucket_forward, chunk_forward, buckets)
    dp_exposed = new_var(model, "dp_exposed_us")
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
    first_weight = first_chunk_op_us(pv, "weight", first_layers, layer_weight, coeffs.embedding_weight_us,
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
    gather_exposed = new_var(model, "dp_gather_exposed_us")
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
    optimizer = new_var(model, "optimizer_us")
    for b, building in enumerate(buildings):
        per = int(SCALE * coeffs.optimizer_us_per_layer_pp[building.name])
        model.Add(SCALE * optimizer >= per * layers_pp[b])

    step = new_var(model, "step_us")
    model.Add(step >= pipeline + dp_exposed + optimizer + gather_exposed)
    add_dp_stream_bound(pv, coeffs, step, v_chunks, first_release_us(pv, least_passes, sync_layers, v_chunks),
                        pipeline + dp_exposed, chunk_sync + extra, optimizer,
                        OtherChunks(bucket_latency + (expert_latency if coeffs.dense_layers == 0 else 0),
                                    expert_latency if coeffs.dense_layers == 0 else 0,
                                    others_sync, other_layers, int(SCALE * ratio)),
                        int(SCALE * ratio) * chunk_sync + SCALE * extra, gathering)
    if tip_sync is not None:
        # V across buildings: the tip's chunk 1 syncs in one bucket once its last W ends, which only its chunk-0
        # W ops follow (``tip_trailing_weight_ops``, each ≤ ⌈ℓ/2⌉ layers' W); chunk 0's buckets queue behind it
        # on the tip's DP stream (ZeRO-0..2: ZeRO-3 buckets every layer); the optimizer waits for the last sync
        tip_weight = capped_product(model, "v_tip_chunk0_weight_us", v_tip.first_chunk_layers, layer_weight)
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
        tip_cases.append(pp_dp_tip(pv, coeffs, pp_dp_tip_end, pp_dp, products["timed_layers"], basis, successors,
                                   moe_only))
    if tip_cases:
        add_whole_tip_sync(pv, coeffs, step, tip_cases, whole_tip_syncs, (most_layers, layer_weight),
                           optimizer + gather_exposed)
    for scaled_bytes, condition in nic_busy + route_busy:
        model.Add(SCALE * step >= scaled_bytes).OnlyEnforceIf(condition)
    pv.terms.update(compute=compute, pipeline=pipeline, first_chunk_sync=chunk_sync, dp_exposed=dp_exposed,
                    gather_exposed=gather_exposed, optimizer=optimizer, step=step, t_max=t_max, t_regular=t_reg)
    return step


