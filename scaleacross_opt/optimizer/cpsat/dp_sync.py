"""The DP stream's terms: the time to sync spans of the first stage's gradients (inside a building and across),
their buckets' latencies (dense and expert buckets), when the first bucket is released, the stream from there
through the optimizer and the ZeRO-1/2 gathers, and a V-shaped pipeline's tip syncing after its last W ops."""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from ortools.sat.python import cp_model

from ...catalog import coefficients as co
from ...cost.compute import LayerKind
from ...cost.layout import nvlink_domain
from ...cost.memory import embedding_params
from ...cost.step import megatron_bucket_params
from ...spec import CollectiveAlgorithm, CrossBuilding
from ...spec.bounds import MAX_BUCKET_PARAMS
from ..coefficients import Coefficients
from ..space import Shape
from .dp_rings import (
    DpGroups,
    InnerRing,
    RingEdges,
    cyclic_successors,
    group_ends,
    ring_hop_us,
    slowest_edge_us_per_layer,
    sync_steps,
)
from .terms import BUCKET_STEPS, HORIZON_US, SCALE, capped_product, layers_if_used, new_var, ring_factor, upper_bound
from .variables import PlanVars, Transport


def pp_dp_tip(pv: PlanVars, coeffs: Coefficients, tip_end: cp_model.IntVar, pp_dp: cp_model.IntVar,
              timed_layers: list[cp_model.IntVar], basis: SyncBasis, successors: RingEdges, moe_only: bool) -> tuple:
    """pp+dp: the V's tip is the last stage, in each group's last building b (≥ ``timed_layers[b]`` layers), and
    its DP ring joins those last buildings (not the first stage's first ones): its sync priced on that ring's
    edges (with DP-across ``successors``) and slowest hop (``add_whole_tip_sync``'s case)."""
    model = pv.model
    total = pv.instance.job.model_spec.layers
    closes = group_ends(pv, last=True)
    held = []
    for b, name in enumerate(pv.buildings):
        var = model.NewIntVar(0, total, f"v_pp_dp_tip_layers_if_last[{name}]")
        model.Add(var == timed_layers[b]).OnlyEnforceIf(closes[b])
        model.Add(var == total).OnlyEnforceIf(closes[b].Not())
        held.append(var)
    layers = new_var(model, "v_pp_dp_tip_layers", total)
    model.AddMinEquality(layers, held)
    edges = successors + cyclic_successors(pv, closes, "last_stage_ring", [])
    hop = ring_hop_us(pv, coeffs, edges, "last_stage_dp_ring_hop_us", basis.inter_group)
    latency = new_var(model, "v_pp_dp_tip_bucket_latency_us")
    (sync,) = add_dp_sync(pv, coeffs, basis, edges, hop, [("v_pp_dp_tip_sync", layers, 1)], latency, "last_stage_")
    experts = (expert_bucket_latency(pv, coeffs, basis.groups, hop, basis.tree_ring, [pp_dp],
                                     "v_pp_dp_tip_expert_latency_us")
               if moe_only and coeffs.model_expert_param_mib > 0 and pv.cross_algorithm is not None
               and max(pv.space.ep) > 1 else 0)
    return "v_pp_dp_tip", tip_end, [pp_dp], layers, sync, latency, experts


def add_whole_tip_sync(pv: PlanVars, coeffs: Coefficients, step: cp_model.IntVar, cases: list[tuple],
                       syncs: list[tuple[cp_model.IntVar, int]], tip: tuple[cp_model.IntVar, cp_model.IntVar],
                       after: cp_model.LinearExpr) -> None:
    """V-shaped schedules whose pipelines are not split at the building boundaries alone (none and dp: every
    stage's DP ring is the first stage's; pp+dp: ``pp_dp_tip``); ``cases`` per kind: (a name, ``tip_end``, its
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
    chunk = new_var(model, "v_whole_tip_chunk_layers_at_most", pv.instance.job.model_spec.layers)
    model.Add(2 * chunk >= most)  # ⌈ℓ_max/2⌉, pinned
    model.Add(2 * chunk <= most + 1)
    chunk_weight = capped_product(model, "v_whole_tip_chunk_weight_us", chunk, weight)
    not_zero3 = [pv.zero.lit(3).Not()] if 3 in pv.zero.values else []
    for tag, tip_end, modes, layers, sync, dense_latency, expert_latency in cases:
        two = model.NewBoolVar(f"{tag}_holds_2_layers")
        model.Add(layers >= 2).OnlyEnforceIf(two)
        model.Add(layers <= 1).OnlyEnforceIf(two.Not())
        again = new_var(model, f"{tag}_second_chunk_latency_us")
        model.Add(again == dense_latency + expert_latency).OnlyEnforceIf(two)
        model.Add(again == 0).OnlyEnforceIf(two.Not())
        total = new_var(model, f"{tag}_sync_us")
        model.Add(total == sync + again + expert_latency + expert_chunk_sync(
            pv, coeffs, chunk_moe_layers(pv, coeffs, layers, tag), tag))
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


def first_release_us(pv: PlanVars, least: tuple[cp_model.IntVar, cp_model.IntVar],
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
    chunk = new_var(model, "first_stage_least_chunk_layers", total)  # ⌊ℓ/v⌋
    for v, v_on in v_chunks.items():
        model.Add(v * chunk <= layers).OnlyEnforceIf(v_on)
        model.Add(v * chunk >= layers - (v - 1)).OnlyEnforceIf(v_on)
    earlier = model.NewIntVar(0, max(pv.microbatch_values or [1]), "microbatches_before_last")
    model.Add(earlier == pv.microbatches - 1)
    forwards = capped_product(model, "first_stage_forwards_us", pv.microbatches,
                              capped_product(model, "first_stage_layers*F_min", layers, least[0]))
    backwards = capped_product(model, "first_release_backwards_us", earlier,
                               capped_product(model, "least_chunk_layers*BW_min", chunk, least[1]))
    out = new_var(model, "first_bucket_release_us")
    model.Add(out >= forwards + backwards)
    return out


def add_dp_stream_bound(pv: PlanVars, coeffs: Coefficients, step: cp_model.IntVar,
                        v_chunks: dict[int, cp_model.IntVar], release: cp_model.IntVar,
                        synced: cp_model.LinearExpr, first_chunk: cp_model.LinearExpr, optimizer: cp_model.IntVar,
                        others: OtherChunks,
                        first_gathers_x1000: cp_model.LinearExpr, gathering: list[cp_model.IntVar]) -> None:
    """ZeRO-0..2: the first stage's DP stream starts once it releases its first bucket (``release``,
    ``first_release_us``), runs its chunks' buckets one after the other, then the optimizer
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


def first_stage_sync_layers(pv: PlanVars, v_shape: cp_model.IntVar) -> cp_model.IntVar:
    """Layers of the first stage whose gradients sync after the pipeline ends: ``head_layers`` where the
    schedule is V-shaped (its first stage is the LM-head stage), else at least min_b layers[b] − 1 (the
    first stage finishes its backward last; the layer split may trim it by one)."""
    model = pv.model
    layers_total = pv.instance.job.model_spec.layers
    held = layers_if_used(pv, "sync_layers", layers_total)
    fewest = new_var(model, "fewest_layers", layers_total)
    model.AddMinEquality(fewest, held)
    sync_layers = new_var(model, "sync_layers", layers_total)  # only lower bounds: the objective grows with it
    model.Add(sync_layers >= pv.head_layers).OnlyEnforceIf(v_shape)
    model.Add(sync_layers >= fewest - 1).OnlyEnforceIf(v_shape.Not())
    return sync_layers


def first_chunk_steps(pv: PlanVars, coeffs: Coefficients, sync_layers: cp_model.IntVar,
                      v_chunks: dict[int, cp_model.IntVar]) -> tuple[cp_model.IntVar, cp_model.IntVar]:
    """The first stage's first chunk (the one whose backward ends the pipeline): (its layers, ⌈ℓ/v⌉ of the ℓ
    whose gradients sync after the pipeline (``chunk_layer_kinds`` gives the first chunks the extra layers);
    BUCKET_STEPS × its parameters in layers, at least: those layers and the embedding it holds
    (``stage_params``: V·h/tp, over the synced parameters of one layer, rounded down))."""
    model, spec = pv.model, pv.instance.job.model_spec
    layers = new_var(model, "first_chunk_layers", spec.layers)
    for v, v_on in v_chunks.items():
        model.Add(v * layers >= sync_layers).OnlyEnforceIf(v_on)
        model.Add(v * layers <= sync_layers + v - 1).OnlyEnforceIf(v_on)
    embedding = [int(BUCKET_STEPS * embedding_params(spec, shape.tp) / coeffs.synced_params_per_layer[shape])
                 for shape in pv.shape.values]
    steps = new_var(model, "first_chunk_param_steps", BUCKET_STEPS * spec.layers + max(embedding))
    model.Add(steps == BUCKET_STEPS * layers + pv.shape.linear(embedding))
    return layers, steps


def last_bucket_layers(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, chunk: cp_model.IntVar
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
    default = new_var(model, "default_bucket_layers_steps", top)  # ≥ a default bucket's layers at (shape, n)
    zero3 = pv.zero.lit(3) if 3 in pv.zero.values else None
    for shape, shape_lit in zip(pv.shape.values, pv.shape.lits, strict=True):
        per_layer = coeffs.synced_params_per_layer[shape]
        for n, n_lit in groups:
            steps = min(top, int(BUCKET_STEPS * megatron_bucket_params(n) / 2 / per_layer))
            when = [shape_lit, n_lit] + ([zero3.Not()] if zero3 is not None else [])
            model.Add(default >= steps).OnlyEnforceIf(when)
    bucket = new_var(model, "bucket_layers_steps", top)  # ≥ the bucket's layers at the plan's (shape, n, ZeRO)
    factor = pv.bucket.value_var(pv.model, "bucket_factor_v", pv.bucket.values)
    capped = pv.shape.value_var(pv.model, "largest_bucket_layers_steps", [  # sizes are capped at the largest
        min(top, int(BUCKET_STEPS * MAX_BUCKET_PARAMS / 2 / coeffs.synced_params_per_layer[shape]))
        for shape in pv.shape.values])
    scaled = capped_product(model, "factor*default_bucket_layers_steps", factor, default)
    model.AddMinEquality(bucket, [top, capped, scaled])
    if zero3 is not None:
        model.Add(bucket >= BUCKET_STEPS).OnlyEnforceIf(zero3)
    last = new_var(model, "last_bucket_layers_steps", top)
    model.AddMinEquality(last, [chunk, bucket])
    return last


def bucket_kiloparams(pv: PlanVars, groups: DpGroups) -> dict[tuple[int, int], int]:
    """(bucket factor, dp·cp) → the gradient bucket's size in thousands of parameters (rounded up): Megatron's
    default for that group × the factor, capped (``cost.step.dp_bucket_params``)."""
    return {(factor, d): math.ceil(min(factor * megatron_bucket_params(d), MAX_BUCKET_PARAMS) / 1000)
            for factor in pv.bucket.values for d, _ in groups}


def more_buckets_latency(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, chunk_layers: cp_model.IntVar,
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
    chunk_kiloparams = capped_product(model, "first_chunk_kiloparams_steps", chunk_steps, per_layer)  # × BUCKET_STEPS
    layers = pv.instance.job.model_spec.layers
    sizes = bucket_kiloparams(pv, groups)
    top = layers + max(kiloparams) * layers // min(sizes.values()) + 1
    buckets = model.NewIntVar(1, top, "first_chunk_buckets")
    zero3 = [pv.zero.lit(3)] if 3 in pv.zero.values else []
    for lit in zero3:
        model.Add(buckets >= chunk_layers).OnlyEnforceIf(lit)
    for (factor, d), size in sizes.items():
        model.Add(BUCKET_STEPS * size * buckets >= chunk_kiloparams).OnlyEnforceIf(
            [pv.bucket.lit(factor), dict(groups)[d], *[lit.Not() for lit in zero3]])
    more = new_var(model, "first_chunk_more_buckets", top)
    model.Add(more == buckets - 1)
    return (capped_product(model, "more_buckets*latency_us", more, bucket_latency),
            buckets if coeffs.model_expert_param_mib == 0 else None)


def chunk_moe_layers(pv: PlanVars, coeffs: Coefficients, chunk_layers: cp_model.IntVar, name: str
                     ) -> cp_model.IntVar:
    """A span of chunks' MoE layers: at least its layers − the model's dense ones (all first in the model)."""
    moe_layers = new_var(pv.model, f"{name}_moe_layers", pv.instance.job.model_spec.layers)
    pv.model.AddMaxEquality(moe_layers, [0, chunk_layers - coeffs.dense_layers])
    return moe_layers


def expert_chunk_sync(pv: PlanVars, coeffs: Coefficients, moe_layers: cp_model.IntVar, name: str
                      ) -> cp_model.IntVar | int:
    """MoE models: a span of chunks' expert gradients, which its dense sync (``add_dp_sync``) leaves out where
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
    per_layer = new_var(model, f"{name}_expert_sync_us_per_layer", max(max(v) for v in per_pp.values()))
    for pp, pp_lit in zip(pv.pp.values, pv.pp.lits, strict=True):
        model.Add(per_layer >= pv.shape.linear(per_pp[pp])).OnlyEnforceIf(pp_lit)
    return capped_product(model, f"{name}_expert_sync_us", moe_layers, per_layer)


def expert_buckets_latency(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, moe_layers: cp_model.IntVar,
                           ring_hop: cp_model.IntVar, tree_ring: list[cp_model.IntVar] | None
                           ) -> tuple[cp_model.IntVar | int, cp_model.IntVar | int]:
    """MoE models: the first chunk's expert gradients sync (and ZeRO-1/2 gather) in buckets of their own, each
    its own collective over the e = dp·cp/ep expert-data-parallel ranks (``cost.step.dp_buckets``): n_e ≥ its
    MoE layers' (≥ its layers − the model's dense ones) expert parameters ÷ the bucket (ZeRO-3: one per MoE
    layer). Where DP crosses buildings a flat algorithm's ring over those ranks spans every used building
    (EP groups stay in one), so each pays its steps (``sync_steps`` over e) × the ring's slowest hop
    (``ring_hop``; ``tree_ring``: ``tree_runs_ring``): (n_e·latency, latency) µs (0 elsewhere: a lower
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
    chunk_kiloparams = capped_product(model, "first_chunk_expert_kiloparams", moe_layers, per_layer)
    sizes = bucket_kiloparams(pv, groups)
    buckets = new_var(model, "first_chunk_expert_buckets", layers + max(kiloparams) * layers // min(sizes.values()) + 1)
    zero3 = [pv.zero.lit(3)] if 3 in pv.zero.values else []
    for lit in zero3:
        model.Add(buckets >= moe_layers).OnlyEnforceIf(lit)
    for (factor, d), size in sizes.items():
        model.Add(size * buckets >= chunk_kiloparams).OnlyEnforceIf(
            [pv.bucket.lit(factor), dict(groups)[d], *[lit.Not() for lit in zero3]])
    latency = expert_bucket_latency(pv, coeffs, groups, ring_hop, tree_ring, crossing, "expert_bucket_latency_us")
    return capped_product(model, "expert_buckets*latency_us", buckets, latency), latency


def expert_bucket_latency(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, ring_hop: cp_model.IntVar,
                          tree_ring: list[cp_model.IntVar] | None, crossing: list[cp_model.IntVar], name: str
                          ) -> cp_model.IntVar:
    """The latency (µs) of one expert-gradient bucket's collective where DP crosses buildings (any of
    ``crossing``): ``sync_steps`` over the e = dp·cp/ep expert-data-parallel ranks × the ring's slowest hop
    (``ring_hop``; ``tree_ring``: ``tree_runs_ring``), 0 under algorithms whose steps count buildings."""
    model = pv.model
    latency = new_var(model, name)
    for algorithm, alg_lit in zip(pv.cross_algorithm.values, pv.cross_algorithm.lits, strict=True):
        steps = coeffs.cross_algorithm_steps[algorithm]
        if steps == "buildings":
            continue
        for (d, d_lit), (ep, ep_lit) in product(groups, zip(pv.ep.values, pv.ep.lits, strict=True)):
            if ep == 1 or d % ep or d // ep < 2:
                continue
            for count, also in sync_steps(algorithm, steps == "linear", d // ep, tree_ring):
                if count * upper_bound(ring_hop) > HORIZON_US // 2:
                    continue
                for mode_lit in crossing:
                    model.Add(latency >= count * ring_hop).OnlyEnforceIf([mode_lit, alg_lit, d_lit, ep_lit, *also])
    return latency


@dataclass(frozen=True)
class SyncBasis:
    """What every DP sync span shares, whichever ring carries it (``sync_basis``): the DP group sizes
    ``groups``; a layer's gradient KiB per GPU (``grad_kib``); the least latency of a sync inside a building
    (``intra_latency``); ``all_several``: every used building holds ≥ 2 replicas of the stage; the mode literals
    under which the DP group stays in a building (``whole_group``) or crosses buildings (``crossing``, with its
    mode); the hierarchical inner ring; ``tree_ring`` (``tree_runs_ring``); pp+dp's pairs of buildings in
    different groups (``inter_group``)."""

    groups: DpGroups
    grad_kib: cp_model.IntVar
    intra_latency: cp_model.IntVar
    all_several: cp_model.IntVar
    whole_group: list[cp_model.IntVar]
    crossing: list[tuple[CrossBuilding, cp_model.IntVar]]
    inner: InnerRing | None
    tree_ring: list[cp_model.IntVar] | None
    inter_group: dict[tuple[int, int], cp_model.IntVar]


def sync_basis(pv: PlanVars, coeffs: Coefficients, groups: DpGroups, inner: InnerRing | None,
               tree_ring: list[cp_model.IntVar] | None, inter_group: dict[tuple[int, int], cp_model.IntVar]
               ) -> SyncBasis:
    """The ``SyncBasis`` of the plan's DP syncs, its variables and their bounds posted once."""
    model = pv.model
    buildings = pv.instance.cluster.buildings
    intra_latency = new_var(model, "dp_intra_latency_us")
    grad_weights = [coeffs.grad_kib_per_layer[shape] for shape in pv.shape.values]
    grad_kib = new_var(model, "grad_kib_per_layer", max(grad_weights))
    model.Add(grad_kib == pv.shape.linear(grad_weights))
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
    # reduce-scatter (ZeRO ≥ 1) runs the ring where the tree is chosen (``tree_runs_ring``). Each step pays
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
            cases = sync_steps(algorithm, algorithm is CollectiveAlgorithm.RING, d, tree_ring)
            for mode_lit, (hop, tp_when), (steps, also) in product(whole_group, by_tp, cases):
                model.Add(intra_latency >= steps * hop).OnlyEnforceIf(
                    [alg_lit, d_lit, mode_lit, all_several, *tp_when, *also])
    crossing = [(mode, pv.mode.lit(mode)) for mode in (CrossBuilding.DP, CrossBuilding.PP_DP)
                if mode in pv.mode.values]
    if inner is not None:  # the hierarchical inner ring's steps
        model.Add(intra_latency >= coeffs.intra_hop_us * (inner.members - 1))
    return SyncBasis(groups, grad_kib, intra_latency, all_several, whole_group, crossing, inner, tree_ring,
                     inter_group)


def add_dp_sync(pv: PlanVars, coeffs: Coefficients, basis: SyncBasis, successors: RingEdges,
                ring_hop: cp_model.IntVar, spans: list[tuple[str, cp_model.IntVar, int]],
                bucket_latency: cp_model.IntVar, ring: str = "") -> list[cp_model.IntVar]:
    """Lower bounds of the time to sync, with nothing overlapping, each span (name, layers, per) of one stage's
    gradients over the ring whose building edges are ``successors`` (named ``ring``): layers/per of its layers
    (µs; each span pays the collective's latency once, which ``bucket_latency`` is bounded below by)."""
    crosses = bool(basis.crossing) and pv.cross_transport is not None and pv.cross_algorithm is not None
    # A flat ring's tp groups hold one connection per DP member of an NVLink domain at the building edge (≤ the
    # domain's GPUs together); hierarchical outer rings one per GPU of the stage (≤ the larger end's GPUs).
    edges = [] if not crosses else [
        (transport, lit,
         slowest_edge_us_per_layer(pv, coeffs.layer_grad_mib, coeffs.pair_flat_route_us_per_mib[transport],
                                   f"{ring}flat[{t}]", successors, basis.inter_group),
         slowest_edge_us_per_layer(pv, coeffs.layer_grad_mib, coeffs.pair_route_us_per_mib[transport],
                                   f"{ring}hierarchical[{t}]", successors, basis.inter_group))
        for t, (transport, lit) in enumerate(zip(pv.cross_transport.values, pv.cross_transport.lits, strict=True))]
    pv.model.Add(bucket_latency >= basis.intra_latency)
    return [span_sync(pv, coeffs, basis, span, edges, bucket_latency if i == 0 else None, ring_hop)
            for i, span in enumerate(spans)]


def span_sync(pv: PlanVars, coeffs: Coefficients, basis: SyncBasis, span: tuple[str, cp_model.IntVar, int],
              edges: list[tuple[Transport, cp_model.IntVar, cp_model.IntVar, cp_model.IntVar]],
              bucket_latency: cp_model.IntVar | None, ring_hop: cp_model.IntVar) -> cp_model.IntVar:
    """One span of ``add_dp_sync``: intra (bytes × the transport's µs/byte × the ring of the group inside a
    building) + latency, the crossing (below; ``edges``: per transport, the ring's slowest flat and
    hierarchical edge per layer), and intra + cross for the hierarchical algorithm; the crossing's latency also
    bounds ``bucket_latency`` below (when given). ``ring_hop``: ``ring_hop_us``, a flat algorithm's latency per
    step."""
    model = pv.model
    groups, intra_latency, all_several, inner = basis.groups, basis.intra_latency, basis.all_several, basis.inner
    whole_group, crossing, tree_ring = basis.whole_group, basis.crossing, basis.tree_ring
    name, layers, per = span
    total = new_var(model, f"{name}_total_us")
    intra = new_var(model, f"{name}_intra_us")
    grad_kib = capped_product(model, f"{name}_grad_kib", layers, basis.grad_kib)  # × per
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
    cross = new_var(model, f"{name}_cross_us")
    # Reduce-scatter of the gradients over the dp·cp ranks (ZeRO-1/2 gather the weights after the optimizer):
    # ring volume 2(n−1)/n × its n = 2 coefficient; (n−1) latency steps for a flat ring, ⌈log2 n⌉ for
    # tree / PAT, (#buildings − 1) for the hierarchical outer ring (pp+dp: ≥ 1, the stage's ring joins ≥ 2
    # groups). The stages share the route, but the other stages' syncs may end during the drain: only the
    # first stage's layers (whole layers: all its TP groups cross) are bounded, over the route's best goodput.
    for t, (transport, lit, flat_edge, wide_edge) in enumerate(edges):
        hop = coeffs.cross_hop_us[transport]
        flat_layers_us = capped_product(model, f"{name}_flat_layers_us[{t}]", flat_edge, layers)  # × per
        wide_layers_us = capped_product(model, f"{name}_hierarchical_layers_us[{t}]", wide_edge, layers)  # × per
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
                    for count, also in sync_steps(algorithm, steps == "linear", d, tree_ring):
                        # the ring's slowest hop per step where that stays within the horizon, else the shortest
                        latency = (count * ring_hop if count * upper_bound(ring_hop) <= HORIZON_US // 2
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
