"""Step model: per-op durations of a plan (``build_workload``) and their closed form (``estimate``).

Communication per micro-batch and layer (per GPU; S_act = tokens·h·2 bytes, tokens = b·s/cp):

Every group's span over NVLink domains, nodes and buildings comes from the resolved plan
(``cost.layout``); collectives are priced level by level (``cost.collectives``).

- TP with sequence parallelism: 2 all-gathers + 2 reduce-scatters of S_act in forward and again in
  backward (Korthikanti et al. 2022 §4.2.2) over the TP span (NVLink at NVLINK_PROTOCOL_EFFICIENCY of
  line rate); ``TP_OVERLAP_FRACTION`` of it hidden, or, with ``Plan.tp_comm_overlap``, each collective
  pipelined with the GEMM it feeds (all-gather before QKV / FC1) or follows (reduce-scatter after
  out-proj / FC2): exposed max(0, comm − GEMM), a forward reduce-scatter at least its last of
  TP_OVERLAP_RS_SPLITS chunks (``tp_exposed_s``).
- CP (ring attention): cp−1 exchanges of the K/V block (2·tokens·kv·2/tp bytes) in forward, twice that
  (K/V and their gradients) in backward, on the CP span's slowest level, hidden behind the attention
  compute when shorter.
- EP: all-to-all dispatch + combine of (tokens/tp)·top_k·h·2 bytes (each TP rank routes its sequence-
  parallel slice) in forward and in backward over the EP span: the node-local share on NVLink, the rest
  on the NIC; hidden behind the paired micro-batch's compute in DualPipe-style schedules (``ep_split``),
  where its bytes still cross the NIC beside that compute (an ``OpFlow`` of phase ``compute``).
- ZeRO-3: all-gather of each layer's bf16 weights in forward and again in backward per micro-batch over
  the stage's real DP span (across buildings when its replicas are), prefetched one layer ahead: each
  layer exposes max(0, gather − its compute) (``_chunk_cost``; reported as exposed DP).
- PP: one activation (forward) or activation-gradient (backward) of S_act/tp bytes per GPU per
  micro-batch per stage boundary.
- DP: per chunk, a reduce-scatter (ZeRO ≥ 1) or an all-reduce (ZeRO 0) of the gradients over the dp·cp
  ranks (dp·cp/ep for expert weights) in buckets (``dp_buckets``), each released as the chunk's last
  backward produces it; ZeRO-1/2 also all-gather the updated bf16 weights bucket by bucket after the
  optimizer (``dp_gather_s``), as the next step's forwards need them (Megatron --overlap-param-gather);
  hierarchical across buildings when the cross-building algorithm is.
- Shared resources: every transfer and collective lists the resource-seconds it needs of each resource it
  crosses — a GPU's NIC each way, each cross-building link each way (``dp_uses``, ``route_uses``,
  ``_transfer_uses``) — so the simulator can share them among concurrent flows; ``resource_busy`` adds them
  up per step, with each GPU's NVLink seconds (TP, and the CP / EP / DP hops inside its domain), and no step
  is shorter than the busiest.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from ..catalog import coefficients as co
from ..schedules.base import OpKind
from ..schedules.registry import get_schedule
from ..spec.cluster import Building
from ..spec.gpu import GpuSpec
from ..spec.instance import Instance
from ..spec.job import Precision
from ..spec.model import ModelSpec
from ..spec.network import CollectiveAlgorithm, TrafficClassConfig
from ..spec.plan import DpSync, Plan, Recompute
from .attention import attention_block
from .collectives import Collective, Level, span_collective_s
from .compute import (
    LayerKind,
    OpTimes,
    Shard,
    attention_times,
    embedding_times,
    gemm_time_s,
    layer_gemms,
    layer_times,
    lm_head_times,
    model_flops_per_step,
)
from .layout import GroupSpan, ResolvedPlan, local_span, resolve
from .memory import ParamCount, layer_params, layout_memory, stage_params
from .network import EffectivePath, effective_path
from .op_sharing import last_backward_loss, stretched_group
from .report import BREAKDOWN_KEYS, StepReport
from .workload import LinkShare, OpFlow, PipelineGroup, StepWorkload

COMM_CLASSES = ("tp", "cp", "ep", "dp")  # keys of StepWorkload.exposed_comm_s ('dp': ZeRO-3 gathers)


# --------------------------------------------------------------------------------------------------
# Paths and the levels of a group's span
# --------------------------------------------------------------------------------------------------


def nvlink_path(building: Building) -> Level:
    """One GPU's NVLink bandwidth (bytes/s, per direction) and per-step latency, as a collective level."""
    gpu = building.gpu_spec
    return Level(
        1, gpu.nvlink_bandwidth_gb_per_s * 1e9 * co.NVLINK_PROTOCOL_EFFICIENCY, co.NVLINK_LATENCY_US * 1e-6
    )


def fabric_path(building: Building, config: TrafficClassConfig) -> EffectivePath:
    """One GPU's path across its building's fabric: NIC ÷ oversubscription, ECMP over the leaf uplinks.

    Modelled as INTRA_BUILDING_PATHS NICs of one leaf sharing as many uplinks, one connection each.
    """
    nic = building.gpu_spec.nic_bandwidth_gbps / building.fabric_oversubscription
    latency = building.fabric_latency_us or co.DEFAULT_FABRIC_LATENCY_US
    paths = co.INTRA_BUILDING_PATHS
    return effective_path(nic * paths, latency, 0.0, config, paths, paths)


def cross_aggregate(instance: Instance, a: str, b: str, config: TrafficClassConfig, connections: int) -> Level:
    """Goodput of ``connections`` connections crossing the route a → b together (bytes/s, summed) and its
    one-way latency; each connection is also capped by the slower end's NIC."""
    route = instance.cluster.route(a, b)
    flows = max(1, connections)
    path = effective_path(route.bandwidth_gbps, route.latency_us, route.loss_rate, config, flows,
                          co.CROSS_BUILDING_PATHS)
    nic = min(instance.cluster.building(x).gpu_spec.nic_bandwidth_gbps for x in (a, b)) * 1e9 / 8
    return Level(1, min(path.bandwidth_bytes_per_s, nic) * flows, path.latency_s)


def span_levels(layout: ResolvedPlan, span: GroupSpan, groups_crossing: int, hierarchical: bool) -> list[Level]:
    """Levels of ``span`` (NVLink, fabric, buildings) as one of ``groups_crossing`` groups that cross the
    buildings at once: NVLink per GPU; the fabric per domain = members there × one GPU's fabric goodput;
    the buildings = this group's share of the slowest route of its ring (hierarchical: every inner member
    holds a connection; flat: one per domain member at the building edge)."""
    network = layout.network
    buildings = [layout.buildings[name] for name in span.buildings]
    nvlink = min((nvlink_path(b) for b in buildings), key=lambda lv: lv.bandwidth_bytes_per_s)
    fabric = min((fabric_path(b, network.intra_building) for b in buildings), key=lambda p: p.bandwidth_bytes_per_s)
    levels = [
        Level(span.per_domain, nvlink.bandwidth_bytes_per_s, nvlink.latency_s),
        Level(span.domains, span.per_domain * fabric.bandwidth_bytes_per_s, fabric.latency_s),
    ]
    if span.crosses_buildings:
        names = list(span.buildings)
        per_group = span.inner_size if hierarchical else span.per_domain
        hops = [cross_aggregate(layout.instance, a, b, network.cross_building, per_group * groups_crossing)
                for a, b in zip(names, names[1:] + names[:1], strict=True)]
        worst = min(hops, key=lambda lv: lv.bandwidth_bytes_per_s)
        levels.append(Level(len(names), worst.bandwidth_bytes_per_s / groups_crossing,
                            max(h.latency_s for h in hops)))
    return levels


def _local_levels(building: Building, span: GroupSpan, config: TrafficClassConfig) -> list[Level]:
    """Levels of a group inside one building (TP, CP, EP)."""
    nvlink = nvlink_path(building)
    fabric = fabric_path(building, config)
    return [Level(span.per_domain, nvlink.bandwidth_bytes_per_s, nvlink.latency_s),
            Level(span.domains, span.per_domain * fabric.bandwidth_bytes_per_s, fabric.latency_s)]


# --------------------------------------------------------------------------------------------------
# Per-micro-batch op times of one (stage, chunk) in one building
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ChunkCost:
    times: OpTimes  # compute + exposed communication
    exposed: dict[str, float]  # per class, fwd + bwd of one micro-batch
    zero3_gather_s: float  # ZeRO-3 gathers beside one forward (and again one backward), network to itself
    ep_s: tuple[float, float]  # exposed EP all-to-all inside one forward, one backward
    ep_hidden_s: tuple[float, float, float]  # hidden EP all-to-all beside one F, B, W compute (``ep_split``)
    ep_nic_share: float  # share of the GPU's NIC (each way) that all-to-all occupies while it runs
    ep_nvlink_share: float  # share of the GPU's NVLink (each way) it occupies: the domain peers' part
    cp_s: tuple[float, float]  # CP ring exchanges beside one forward, one backward, network to itself
    cp_nic_share: float  # likewise for the CP ring
    cp_nvlink_share: float
    tp_nvlink_s: tuple[float, float]  # one GPU's TP NVLink seconds (each way) in one forward, one backward


def layer_comm(instance: Instance, plan: Plan, building: Building, kind: LayerKind) -> dict:
    """Exposed TP/CP/EP seconds (fwd, bwd) of one layer for one micro-batch.

    Each group's span comes from the rank order (``layout.local_span``): TP inside a domain, CP and EP
    at stride tp, their node-local share on NVLink and the rest on the NIC. EP all-to-all is hidden
    behind the other micro-batch's compute in schedules that pair a forward and a backward chunk
    (``PipelineSchedule.pairs_microbatches``, DualPipe): exposed max(0, all-to-all − that compute).
    Full recompute re-runs the forward inside the backward, collectives included (Megatron's
    checkpointed forward re-issues its TP all-reduces / all-gathers), so its backward also pays the
    forward's exposed communication.
    """
    model, job = instance.job.model_spec, instance.job
    assert plan.network is not None  # probe plans carry the network only
    intra = plan.network.intra_building
    shard = Shard(job.seq_len, plan.micro_batch_size, plan.tp, plan.cp, plan.ep)
    act = shard.tokens * model.hidden_size * 2
    out: dict[str, tuple[float, float]] = {}
    ring = CollectiveAlgorithm.RING
    tp_levels = _local_levels(building, local_span(plan.tp, 1, building), intra)
    collective = span_collective_s(Collective.ALL_GATHER, ring, tp_levels, act)
    if plan.tp_comm_overlap and plan.tp > 1:
        out["tp"] = tp_exposed_s(collective, model, kind, shard, building.gpu_spec, job.precision)
    else:
        tp_fwd = 4 * collective * (1.0 - co.TP_OVERLAP_FRACTION)
        out["tp"] = (tp_fwd, tp_fwd)
    cp_fwd = cp_bwd = 0.0
    if plan.cp > 1:
        step = cp_ring_step(instance, plan, building).seconds
        attention = attention_times(model, shard, building.gpu_spec)
        cp_fwd = max(0.0, (plan.cp - 1) * step - attention.fwd_s)
        cp_bwd = max(0.0, 2 * (plan.cp - 1) * step - attention.bwd_input_s)
    out["cp"] = (cp_fwd, cp_bwd)
    if plan.recompute is Recompute.FULL:  # the recomputed forward repeats its collectives in the backward
        out = {name: (f, b + f) for name, (f, b) in out.items()}
    out["ep"] = ep_split(instance, plan, building, kind).exposed  # full recompute's repeat included
    return out


@dataclass(frozen=True)
class EpSplit:
    """One layer's EP all-to-all for one micro-batch, split into what its ops wait for and what hides.

    ``exposed``: (forward, backward) seconds inside the op durations (full recompute's repeat included);
    ``hidden``: (F, B, W) seconds that run beside that op's compute, never longer than it — the same
    bytes on the same NIC, overlapped (``OpFlow`` phase ``compute``)."""

    exposed: tuple[float, float]
    hidden: tuple[float, float, float]


def ep_split(instance: Instance, plan: Plan, building: Building, kind: LayerKind) -> EpSplit:
    """Exposed and hidden EP all-to-all of one layer (dispatch + combine): a = one pass's, once in the
    forward and r·a in the backward (r = 2 under full recompute, which re-runs the forward's).

    A schedule that pairs micro-batches (DualPipe) hides the forward's all-to-all behind the paired
    backward's compute C_b and the backward's behind the paired forward's C_f: exposed max(0, a − C_b)
    and max(0, r·a − C_f). Otherwise ``EP_OVERLAP_FRACTION`` of each hides behind its own op's compute.
    The hidden bytes still cross the NIC; each hidden part is placed beside a compute of this micro-batch
    of the same length as the one hiding it (the forward's, or the backward's: input grad first, then the
    weight grad when the schedule splits them), so the NIC carries the same seconds per step.
    """
    if kind is not LayerKind.MOE or plan.ep <= 1:
        return EpSplit((0.0, 0.0), (0.0, 0.0, 0.0))
    model, job = instance.job.model_spec, instance.job
    a2a = ep_all_to_all(instance, plan, building).seconds
    schedule = get_schedule(plan.schedule)
    compute = layer_times(model, kind, Shard(job.seq_len, plan.micro_batch_size, plan.tp, plan.cp, plan.ep),
                          building.gpu_spec, job.precision, plan.recompute)
    backward = (2 if plan.recompute is Recompute.FULL else 1) * a2a
    if schedule.pairs_microbatches:
        on_f, behind_backward = min(backward, compute.fwd_s), min(a2a, compute.bwd_s)
    else:
        on_f = min(co.EP_OVERLAP_FRACTION * a2a, compute.fwd_s)
        behind_backward = min(co.EP_OVERLAP_FRACTION * backward, compute.bwd_s)
    on_b = min(behind_backward, compute.bwd_input_s) if schedule.splits_backward else behind_backward
    on_w = behind_backward - on_b
    if schedule.pairs_microbatches:  # the forward's all-to-all hides behind the backward, and vice versa
        return EpSplit((a2a - behind_backward, backward - on_f), (on_f, on_b, on_w))
    return EpSplit((a2a - on_f, backward - behind_backward), (on_f, on_b, on_w))


class Exchange(NamedTuple):
    """One exchange of a GPU: seconds with the network to itself, and the seconds of its NIC and of its
    NVLink (each way) that the exchange's bytes need."""

    seconds: float
    nic_s: float
    nvlink_s: float


def nvlink_ring_share(span: GroupSpan) -> float:
    """Share of a ring member's sends that stay on NVLink: all inside one domain; across domains the ring
    enters and leaves each domain once, so (p − 1)/p of its hops (p members per domain) are NVLink hops."""
    if span.per_domain <= 1:
        return 0.0
    return (span.per_domain - 1) / span.per_domain if span.crosses_domains else 1.0


def cp_ring_step(instance: Instance, plan: Plan, building: Building) -> Exchange:
    """One step of the CP ring (ring attention; cp − 1 of them per forward, twice that per backward) on a GPU
    of ``building``. Each rank passes its shard's bf16 K and V (2·tokens·kv·2/tp bytes) on at the group's
    slowest level; when the group spans NVLink domains they cross the NIC, its hops inside a domain NVLink."""
    model, job = instance.job.model_spec, instance.job
    assert plan.network is not None
    intra = plan.network.intra_building
    shard = Shard(job.seq_len, plan.micro_batch_size, plan.tp, plan.cp, plan.ep)
    span = local_span(plan.cp, plan.tp, building)
    levels = _local_levels(building, span, intra)
    block = attention_block(model)
    kv_bytes = shard.tokens * (block.k_width + block.v_width) * 2 / plan.tp
    bottleneck = min(lv.bandwidth_bytes_per_s / max(1, i * levels[0].ranks) if i else lv.bandwidth_bytes_per_s
                     for i, lv in enumerate(levels) if lv.ranks > 1)
    step = kv_bytes / bottleneck + max(lv.latency_s for lv in levels if lv.ranks > 1)
    nic = kv_bytes / fabric_path(building, intra).bandwidth_bytes_per_s if span.crosses_domains else 0.0
    return Exchange(step, nic, kv_bytes * nvlink_ring_share(span) / nvlink_path(building).bandwidth_bytes_per_s)


def ep_all_to_all(instance: Instance, plan: Plan, building: Building) -> Exchange:
    """One MoE layer's EP dispatch + combine for one micro-batch on a GPU of ``building``. Each TP rank routes
    its sequence-parallel slice, (tokens/tp)·top_k·h·2 bytes; the share for peers outside its NVLink domain,
    (ep − per domain)/ep, leaves through its NIC (``cost.collectives`` all-to-all), the share for its
    (per domain − 1) domain peers over NVLink."""
    model, job = instance.job.model_spec, instance.job
    assert model.moe is not None and plan.network is not None
    span = local_span(plan.ep, plan.tp, building)
    shard = Shard(job.seq_len, plan.micro_batch_size, plan.tp, plan.cp, plan.ep)
    routed = shard.tokens * model.moe.top_k * model.hidden_size * 2 / plan.tp
    levels = _local_levels(building, span, plan.network.intra_building)
    a2a = 2 * span_collective_s(Collective.ALL_TO_ALL, CollectiveAlgorithm.RING, levels, routed)
    outside = 2 * routed * (plan.ep - span.per_domain) / plan.ep if span.crosses_domains else 0.0
    inside = 2 * routed * (span.per_domain - 1) / plan.ep
    return Exchange(a2a, outside / fabric_path(building, plan.network.intra_building).bandwidth_bytes_per_s,
                    inside / nvlink_path(building).bandwidth_bytes_per_s)


def tp_exposed_s(
    collective_s: float, model: ModelSpec, kind: LayerKind, shard: Shard, gpu: GpuSpec, precision: Precision
) -> tuple[float, float]:
    """Exposed TP seconds (fwd, bwd) of one layer when each collective is pipelined with its GEMM.

    Forward: the all-gathers before QKV and FC1 hide behind those GEMMs (ring-exchange overlap),
    max(0, c − g); the reduce-scatters after the output projection and FC2 run chunk by chunk behind
    them, exposing at least the last of TP_OVERLAP_RS_SPLITS chunks: max(c/n, c − g·(n−1)/n).
    Backward: each collective overlaps an independent or chunked data-/weight-gradient GEMM of the same
    linear (bulk / ring-exchange overlap), max(0, c − g). A MoE layer's expert GEMMs are grouped kernels
    outside Transformer Engine's userbuffers overlap: its MLP all-gather and reduce-scatter stay exposed.
    """
    gemms = [gemm_time_s([g], gpu, precision) for g in layer_gemms(model, kind, shard)]
    qkv, proj = gemms[0], gemms[1]
    n = co.TP_OVERLAP_RS_SPLITS

    def rs_fwd(g: float) -> float:
        return max(collective_s / n, collective_s - g * (n - 1) / n)

    def hidden(g: float) -> float:
        return max(0.0, collective_s - g)

    fwd = hidden(qkv) + rs_fwd(proj)
    bwd = hidden(qkv) + hidden(proj)
    if kind is LayerKind.DENSE:
        fc1, fc2 = gemms[2], gemms[3]
        fwd += hidden(fc1) + rs_fwd(fc2)
        bwd += hidden(fc1) + hidden(fc2)
    else:
        fwd += 2 * collective_s
        bwd += 2 * collective_s
    return fwd, bwd


@dataclass(frozen=True)
class _DpCollectives:
    """How one stage's DP groups talk: levels of the dense and expert groups and the algorithm."""

    dense: list[Level]
    expert: list[Level]
    algorithm: CollectiveAlgorithm
    dense_ranks: int  # members of each group (fewer than the levels' product where spread unevenly)
    expert_ranks: int


@functools.lru_cache(maxsize=4096)  # called per chunk, per layer kind (ZeRO-3) and per stage (resource_busy)
def _dp_collectives(layout: ResolvedPlan, stage: int) -> _DpCollectives:
    """Levels of ``stage``'s DP groups. Across buildings every stage's tp groups sync at once (its own
    DP stream; other stages share the route in the simulator), so tp groups share the route here."""
    plan, network = layout.plan, layout.network
    dense, expert = layout.dp_span(stage), layout.expert_dp_span(stage)
    if dense.crosses_buildings:
        algorithm = network.cross_building.collective_algorithm
    else:
        algorithm = network.intra_building.collective_algorithm
        if algorithm is CollectiveAlgorithm.HIERARCHICAL:
            algorithm = CollectiveAlgorithm.RING
    hierarchical = algorithm is CollectiveAlgorithm.HIERARCHICAL
    return _DpCollectives(
        span_levels(layout, dense, plan.tp, hierarchical),
        span_levels(layout, expert, plan.tp * plan.ep, hierarchical),
        algorithm,
        dense.size,
        expert.size,
    )


@functools.lru_cache(maxsize=4096)
def route_capacity(layout: ResolvedPlan, a: str, b: str) -> float:
    """Goodput (bytes/s) of the route a → b when every GPU of the smaller end holds a connection: what all
    traffic classes crossing it share."""
    connections = min(layout.buildings[a].num_gpus, layout.buildings[b].num_gpus)
    return cross_aggregate(layout.instance, a, b, layout.network.cross_building, connections).bandwidth_bytes_per_s


def _zero3_gather_s(layout: ResolvedPlan, stage: int, params: ParamCount) -> float:
    """One ZeRO-3 all-gather of a chunk's bf16 weights over the stage's real DP span."""
    dp = _dp_collectives(layout, stage)
    ag = Collective.ALL_GATHER
    return (span_collective_s(ag, dp.algorithm, dp.dense, params.dense * co.WEIGHT_BYTES, dp.dense_ranks)
            + span_collective_s(ag, dp.algorithm, dp.expert, params.expert * co.WEIGHT_BYTES, dp.expert_ranks))


def _chunk_cost(layout: ResolvedPlan, stage: int, chunk: int, building: Building) -> _ChunkCost:
    """Op times of (stage, chunk) for one micro-batch on a GPU of ``building``, communication included.

    ZeRO-3 gathers each layer's weights before its forward and again before its backward on a separate
    stream, prefetched one layer ahead (FSDP / DeepSpeed default; the memory model keeps
    ZERO3_GATHERED_LAYERS layers gathered): layer l's pass starts once its gather is done, which ran
    during layer l−1's pass, so a pass takes Σ_l max(compute_l, gather_l) — each layer exposes
    max(0, gather − compute) (reported as exposed DP); the first layer's gather overlaps the previous op.
    The backward's pass is B+W where the schedule runs them as one op, but B alone where it splits them: the
    W ops run later, when the next layer's gather is already done (a layer: max(F, g) + max(B, g) + W).
    The embedding and LM head are gathered like one more layer.
    """
    instance, plan = layout.instance, layout.plan
    model, job = instance.job.model_spec, instance.job
    gpu = building.gpu_spec
    shard = Shard(job.seq_len, plan.micro_batch_size, plan.tp, plan.cp, plan.ep)
    kinds = list(layout.kinds[stage][chunk])
    total = OpTimes(0.0, 0.0, 0.0)
    exposed = dict.fromkeys(COMM_CLASSES, 0.0)
    gathers = 0.0
    ep_fwd = ep_bwd = ep_share = 0.0
    ep_hidden = (0.0, 0.0, 0.0)
    cp_fwd = cp_bwd = cp_share = 0.0
    passes = 2 if plan.recompute is Recompute.FULL else 1  # of the forward's collectives in the backward
    splits_backward = get_schedule(plan.schedule).splits_backward
    # TP's NVLink seconds (each way) per layer and pass: 4 collectives of (tp − 1)/tp of the activation
    tp_nvlink = 4 * (plan.tp - 1) / plan.tp * shard.tokens * model.hidden_size * 2 / (
        nvlink_path(building).bandwidth_bytes_per_s)
    tp_fwd = tp_bwd = 0.0
    cp_nvlink = ep_nvlink = 0.0
    if plan.cp > 1:
        ring = cp_ring_step(instance, plan, building)
        step, cp_share, cp_nvlink = ring.seconds, ring.nic_s / ring.seconds, ring.nvlink_s / ring.seconds
    if plan.ep > 1 and LayerKind.MOE in kinds:  # the NIC and NVLink shares of the MoE layers' all-to-all
        a2a = ep_all_to_all(instance, plan, building)
        if a2a.seconds > 0:
            ep_share, ep_nvlink = a2a.nic_s / a2a.seconds, a2a.nvlink_s / a2a.seconds

    def add(times: OpTimes, params: ParamCount, count: int) -> None:
        nonlocal total, gathers
        if plan.zero_stage >= 3 and (params.dense or params.expert):
            gather = _zero3_gather_s(layout, stage, params)
            backward = times.bwd_input_s if splits_backward else times.bwd_s
            fwd, bwd = max(0.0, gather - times.fwd_s), max(0.0, gather - backward)
            exposed["dp"] += count * (fwd + bwd)
            gathers += count * gather
            times = times + OpTimes(fwd, bwd, 0.0)
        total = total + times.scaled(count)

    for kind in set(kinds):
        count = kinds.count(kind)
        compute = layer_times(model, kind, shard, gpu, job.precision, plan.recompute)
        comm = layer_comm(instance, plan, building, kind)
        fwd_comm = sum(f for f, _ in comm.values())
        bwd_comm = sum(b for _, b in comm.values())
        layer = OpTimes(compute.fwd_s + fwd_comm, compute.bwd_input_s + bwd_comm, compute.bwd_weight_s)
        add(layer, layer_params(model, kind, plan.tp, plan.ep), count)
        for name, (f, b) in comm.items():
            exposed[name] += count * (f + b)
        ep_fwd, ep_bwd = ep_fwd + count * comm["ep"][0], ep_bwd + count * comm["ep"][1]
        ep_hidden = tuple(h + count * x for h, x in zip(ep_hidden, ep_split(instance, plan, building, kind).hidden,
                                                        strict=True))
        tp_fwd, tp_bwd = tp_fwd + count * tp_nvlink, tp_bwd + count * passes * tp_nvlink
        if plan.cp > 1:  # cp − 1 steps forward, 2(cp − 1) backward, and the forward's again under full recompute
            cp_fwd += count * (plan.cp - 1) * step
            cp_bwd += count * (passes + 1) * (plan.cp - 1) * step
    heads = OpTimes(0.0, 0.0, 0.0)
    if (stage, chunk) == layout.order[0]:
        heads = heads + embedding_times(model, shard, gpu)
    if (stage, chunk) == layout.order[-1]:
        heads = heads + lm_head_times(model, shard, gpu, job.precision)
    head_params = stage_params(layout, stage)[chunk].dense - sum(
        layer_params(model, kind, plan.tp, plan.ep).dense for kind in kinds)
    add(heads, ParamCount(max(0.0, head_params), 0.0), 1)
    return _ChunkCost(total, exposed, gathers, (ep_fwd, ep_bwd), ep_hidden, ep_share, ep_nvlink, (cp_fwd, cp_bwd),
                      cp_share, cp_nvlink, (tp_fwd, tp_bwd))


# --------------------------------------------------------------------------------------------------
# DP sync and the bytes every shared resource carries
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _DpSync:
    """One chunk's DP traffic: seconds with the network to itself, and the resource-seconds its bytes need
    (``dp_uses``: routes of the ring, NICs per building)."""

    sync_s: float
    gather_s: float
    sync_uses: dict[str, float]
    gather_uses: dict[str, float]


def megatron_bucket_params(dp_cp: int) -> int:
    """Megatron-Core's default gradient bucket for a DP group of ``dp_cp`` ranks:
    max(DP_BUCKET_MIN_PARAMS, DP_BUCKET_PARAMS_PER_RANK·dp·cp) parameters (``coefficients``)."""
    return max(co.DP_BUCKET_MIN_PARAMS, co.DP_BUCKET_PARAMS_PER_RANK * dp_cp)


def default_dp_bucket_params(plan: Plan) -> int:
    """The default gradient bucket of ``plan`` (``megatron_bucket_params`` of its dp·cp)."""
    return megatron_bucket_params(plan.dp * plan.cp)


def sizes_dp_buckets(plan: Plan) -> bool:
    """Whether ``Plan.dp_bucket_params`` matters: ZeRO-0..2 with a DP group, the sync overlapping the backward."""
    return plan.zero_stage < 3 and plan.dp * plan.cp > 1 and plan.dp_sync is DpSync.OVERLAP_BACKWARD


def dp_bucket_params(plan: Plan) -> int:
    """The plan's gradient bucket size (parameters): ``Plan.dp_bucket_params``, else the default."""
    return plan.dp_bucket_params or default_dp_bucket_params(plan)


def dp_buckets(layout: ResolvedPlan, stage: int, chunk: int, params: ParamCount) -> tuple[int, int]:
    """Buckets (dense, expert) chunk ``chunk`` of ``stage`` syncs its gradients in, one collective each (the
    expert gradients sit in their own buffer, over the expert-DP group; none where the chunk holds none):
    a layer each under ZeRO-3; else one when the sync follows the backward or for a stage's later chunks,
    and ⌈params ÷ ``dp_bucket_params``⌉ otherwise."""
    plan = layout.plan
    if plan.zero_stage >= 3:
        layers = len(layout.kinds[stage][chunk])
        return (layers if params.dense > 0 else 0), (layers if params.expert > 0 else 0)
    size = dp_bucket_params(plan)
    whole = plan.dp_sync is DpSync.AFTER_BACKWARD or chunk > 0

    def count(held: float) -> int:
        return 0 if held <= 0 else 1 if whole else math.ceil(held / size)

    return count(params.dense), count(params.expert)


def _dp_sync(layout: ResolvedPlan, stage: int, params: ParamCount, buckets: tuple[int, int]) -> _DpSync:
    """Gradient sync and parameter gather of one chunk of ``stage``, the dense and the expert gradients each in
    their ``buckets`` (``dp_buckets``) equal collectives, each paying its own latency.

    ZeRO-0: all-reduce of the gradients, no gather. ZeRO-1/2: reduce-scatter of the gradients, and
    after the optimizer the all-gather of the updated bf16 parameters. ZeRO-3: reduce-scatter (its
    gathers are per micro-batch, beside the ops). Dense weights over dp·cp ranks, experts over dp·cp/ep.
    """
    plan = layout.plan
    dp = _dp_collectives(layout, stage)
    sync = Collective.ALL_REDUCE if plan.zero_stage == 0 else Collective.REDUCE_SCATTER
    gather = plan.zero_stage in (1, 2)
    grads = gathers = 0.0
    for levels, ranks, count, n in ((dp.dense, dp.dense_ranks, params.dense, buckets[0]),
                                    (dp.expert, dp.expert_ranks, params.expert, buckets[1])):
        if n == 0:
            continue
        grads += n * span_collective_s(sync, dp.algorithm, levels, count / n * co.GRAD_REDUCE_BYTES, ranks)
        if gather:
            gathers += n * span_collective_s(Collective.ALL_GATHER, dp.algorithm, levels, count / n * co.WEIGHT_BYTES,
                                             ranks)
    halves = 2.0 if sync is Collective.ALL_REDUCE else 1.0
    return _DpSync(grads, gathers, dp_uses(layout, stage, params, halves * co.GRAD_REDUCE_BYTES),
                   dp_uses(layout, stage, params, co.WEIGHT_BYTES) if gather else {})


def nic_names(group: str, stage: int) -> tuple[str, str]:
    """Names of the send and receive sides of the NIC of one GPU of ``stage`` in pipeline group ``group``."""
    return f"NIC {group} stage {stage} tx", f"NIC {group} stage {stage} rx"


def nvlink_names(group: str, stage: int) -> tuple[str, str]:
    """Names of the send and receive sides of the NVLink of one GPU of ``stage`` in pipeline group ``group``."""
    return f"NVLink {group} stage {stage} tx", f"NVLink {group} stage {stage} rx"


def _fabric_goodput(layout: ResolvedPlan, building: str) -> float:
    """One GPU's fabric goodput (bytes/s) in ``building``: the capacity of its NIC resources."""
    return fabric_path(layout.buildings[building], layout.network.intra_building).bandwidth_bytes_per_s


def route_uses(layout: ResolvedPlan, src: str, dst: str, num_bytes: float) -> dict[str, float]:
    """Resource-seconds of ``num_bytes`` sent from building src to dst: on every link of the route, each
    way its own resource (``link x->y``), the bytes ÷ what the route's traffic gets of that link — the
    route's ``route_capacity`` (its bottleneck at the whole route's round trip and loss) scaled by the
    link's bandwidth over the bottleneck's (a long route's traffic is no more efficient on a short link)."""
    cluster = layout.instance.cluster
    route = cluster.route(src, dst)
    capacity = route_capacity(layout, src, dst) / route.bandwidth_gbps
    return {f"link {x}->{y}": num_bytes / (capacity * cluster.graph.edges[x, y]["bandwidth_gbps"])
            for x, y in itertools.pairwise(route.buildings)}


def dp_uses(layout: ResolvedPlan, stage: int, params: ParamCount, bytes_per_param: float) -> dict[str, float]:
    """Resource-seconds of one ring pass (a reduce-scatter or an all-gather; ``bytes_per_param`` counts the
    passes) of a chunk's ``params`` over all DP groups of ``stage`` at once.

    ``NIC <group> stage <s> tx|rx`` of every pipeline group: one GPU's NIC carries (each way) its (n−1)/n
    share of its slice ÷ the members of its NVLink domain (the node's NICs split the scale-out traffic,
    one rail each) ÷ its fabric goodput;
    ``NVLink <group> stage <s> tx|rx``: the same (n−1)/n share times the part of its ring hops inside its
    domain (``nvlink_ring_share``) ÷ NVLink bandwidth;
    per edge a → b of the ring over the span's buildings, the bytes entering b (``_ring_volume`` half,
    every tp (·ep) group of the stage) on the links of its route (``route_uses``).
    """
    plan = layout.plan
    dp = _dp_collectives(layout, stage)
    uses: dict[str, float] = {}
    spans = ((layout.dp_span(stage), params.dense, plan.tp), (layout.expert_dp_span(stage), params.expert,
                                                             plan.tp * plan.ep))
    for span, count, groups in spans:
        if span.size <= 1 or count <= 0:
            continue
        values = count * bytes_per_param
        sent = values * (span.size - 1) / span.size  # by each member, each way
        for group, (stage_map, _) in zip(layout.pipeline_names, layout.pipelines, strict=True):
            building = layout.buildings[stage_map[stage]]
            per_gpu = {}
            if span.crosses_domains:
                per_gpu.update(dict.fromkeys(nic_names(group, stage), sent / span.per_domain / _fabric_goodput(
                    layout, building.name)))
            if span.per_domain > 1:
                per_gpu.update(dict.fromkeys(nvlink_names(group, stage), sent * nvlink_ring_share(span) / nvlink_path(
                    building).bandwidth_bytes_per_s))
            for key, seconds in per_gpu.items():
                uses[key] = uses.get(key, 0.0) + seconds
        if span.crosses_buildings:
            entering = _ring_volume(dp.algorithm, span.size, len(span.buildings)) / 2 * values * groups
            names = list(span.buildings)
            for a, b in zip(names, names[1:] + names[:1], strict=True):
                for key, seconds in route_uses(layout, a, b, entering).items():
                    uses[key] = uses.get(key, 0.0) + seconds
    return uses


def _ring_volume(algorithm: CollectiveAlgorithm, n: int, parts: int) -> float:
    """Bytes per byte of buffer that enter each part of a ring-like all-reduce's group (both halves):
    hierarchical 2(parts−1)/parts (only the outer shards cross), flat 2(n−1)/n (tree: 2)."""
    if algorithm is CollectiveAlgorithm.HIERARCHICAL:
        return 2 * (parts - 1) / parts
    if algorithm is CollectiveAlgorithm.TREE:
        return 2.0
    return 2 * (n - 1) / n


def resource_busy(layout: ResolvedPlan, groups: list[PipelineGroup], sync_uses: list[list[dict[str, float]]],
                  gather_uses: list[list[dict[str, float]]]) -> dict[str, float]:
    """Seconds each shared resource (a cross-building link each way, a GPU's NIC and NVLink each way) needs per
    step: the resource-seconds of every flow that crosses it — each group's pipeline transfers (m per boundary
    and direction), the traffic inside its ops (m forwards and m backwards of every chunk: TP, CP, EP, ZeRO-3
    gathers), every chunk's gradient sync and ZeRO-1/2 gather. A step cannot be shorter than any of them,
    however the classes interleave in time; in periodic steady state a step's traffic fits in one step."""
    m = layout.num_microbatches
    busy: dict[str, float] = {}

    def add(uses: dict[str, float], times: float) -> None:
        for key, seconds in uses.items():
            busy[key] = busy.get(key, 0.0) + times * seconds

    for group in groups:
        for a, b in layout.boundaries:
            if a != b:
                add(group.transfer_uses[(a, b)], m)
                add(group.transfer_uses[(b, a)], m)
        for flow in group.op_flows:
            for (s, c), seconds in np.ndenumerate(flow.seconds.sum(axis=0)):
                add(flow.demand[s][c], m * float(seconds))
    for stage in (*sync_uses, *gather_uses):
        for uses in stage:
            add(uses, 1)
    return busy


# --------------------------------------------------------------------------------------------------
# Workload
# --------------------------------------------------------------------------------------------------


def _pp_links(layout: ResolvedPlan) -> dict:
    """LinkShare per (src, dst) building pair used by a stage boundary (both directions)."""
    instance, plan, network = layout.instance, layout.plan, layout.network
    replicas_on: dict[tuple[str, str], int] = {}
    for stage_map, replicas in layout.pipelines:
        pairs = {(stage_map[a], stage_map[b]) for a, b in layout.boundaries}
        for src, dst in pairs | {(d, s) for s, d in pairs}:
            replicas_on[(src, dst)] = replicas_on.get((src, dst), 0) + replicas
    links: dict[tuple[str, str], LinkShare] = {}
    gpus = plan.tp * plan.cp
    for (src, dst), replicas in replicas_on.items():
        if src == dst:
            path = fabric_path(layout.buildings[src], network.intra_building)
            links[(src, dst)] = LinkShare(src, dst, path.bandwidth_bytes_per_s, path.latency_s)
        else:
            total = cross_aggregate(instance, src, dst, network.cross_building, replicas * gpus)
            links[(src, dst)] = LinkShare(src, dst, total.bandwidth_bytes_per_s / (replicas * gpus), total.latency_s)
    return links


def _group_share(uses: dict[str, float], group: str, fraction: float) -> dict[str, float]:
    """The part of a stage-wide collective's resource-seconds (``dp_uses``) one pipeline group's GPUs run:
    their own NICs and NVLink, and ``fraction`` (their share of the stage's replicas) of the routes."""
    own = (f"NIC {group} stage ", f"NVLink {group} stage ")
    return {key: (seconds * fraction if key.startswith("link ") else seconds) for key, seconds in uses.items()
            if key.startswith("link ") or key.startswith(own)}


def _transfer_uses(layout: ResolvedPlan, group: str, stage_map: tuple[str, ...], replicas: int,
                   p2p_bytes: float) -> dict[tuple[int, int], dict[str, float]]:
    """Resource-seconds of one pipeline transfer per (src, dst) stage pair of a group, both directions:
    the sender's NIC (send side) and the receiver's (receive side) at one GPU's slice; across buildings
    also the route, carrying every replica's tp·cp slices."""
    out: dict[tuple[int, int], dict[str, float]] = {}
    plan = layout.plan
    for a, b in {*layout.boundaries, *((b, a) for a, b in layout.boundaries)}:
        if a == b:
            continue
        src, dst = stage_map[a], stage_map[b]
        uses = {nic_names(group, a)[0]: p2p_bytes / _fabric_goodput(layout, src),
                nic_names(group, b)[1]: p2p_bytes / _fabric_goodput(layout, dst)}
        if src != dst:
            uses.update(route_uses(layout, src, dst, p2p_bytes * replicas * plan.tp * plan.cp))
        out[(a, b)] = uses
    return out


def build_workload(instance: Instance, plan: Plan) -> StepWorkload:
    """``layout_workload`` of ``plan`` (placement and network filled) on ``instance``."""
    return layout_workload(resolve(instance, plan))


def layout_workload(layout: ResolvedPlan) -> StepWorkload:
    """Per-(stage, chunk) op times per pipeline group, links, DP sync times and optimizer time of a plan.

    Bandwidths and ``p2p_bytes`` are per GPU: each of a stage's tp·cp GPUs moves its own slice of the
    activation in parallel, so ``link.transfer_s(p2p_bytes)`` is the boundary's transfer time.
    """
    instance, plan = layout.instance, layout.plan
    model, job = instance.job.model_spec, instance.job
    pp, v = plan.pp, plan.virtual_stages
    m = layout.num_microbatches
    if m < 1:
        raise ValueError(
            f"global batch {job.global_batch_size} < dp·micro_batch = {plan.dp * plan.micro_batch_size}"
        )
    p2p_bytes = job.seq_len * plan.micro_batch_size * model.hidden_size * 2 / (plan.tp * plan.cp)
    groups = []
    worst_exposed = dict.fromkeys(COMM_CLASSES, 0.0)
    worst_stage_time = -1.0
    cache: dict[tuple[int, int, str], _ChunkCost] = {}
    gather_uses = [[dp_uses(layout, s, p, co.WEIGHT_BYTES) if plan.zero_stage >= 3 else {}
                    for p in stage_params(layout, s)] for s in range(pp)]
    splits_backward = get_schedule(plan.schedule).splits_backward
    for name, (stage_map, replicas) in zip(layout.pipeline_names, layout.pipelines, strict=True):
        fwd, bwd_in, bwd_w = (np.zeros((pp, v)) for _ in range(3))
        flows = {kind: (np.zeros((3, pp, v)), [[{} for _ in range(v)] for _ in range(pp)])
                 for kind in ("zero3", "cp", "ep", "ep-hidden", "tp-forward", "tp-backward")}
        for s in range(pp):
            building = layout.buildings[stage_map[s]]
            stage_exposed = dict.fromkeys(COMM_CLASSES, 0.0)
            for c in range(v):
                key = (s, c, building.name)
                if key not in cache:
                    cache[key] = _chunk_cost(layout, s, c, building)
                cost = cache[key]
                fwd[s, c], bwd_in[s, c], bwd_w[s, c] = (
                    cost.times.fwd_s, cost.times.bwd_input_s, cost.times.bwd_weight_s,
                )
                if cost.zero3_gather_s > 0:
                    flows["zero3"][0][:2, s, c] = cost.zero3_gather_s
                    uses = _group_share(gather_uses[s][c], name, replicas / plan.dp)
                    flows["zero3"][1][s][c] = {r: seconds / cost.zero3_gather_s for r, seconds in uses.items()}
                for kind, seconds, shares in (("cp", cost.cp_s, (cost.cp_nic_share, cost.cp_nvlink_share)),
                                              ("ep", cost.ep_s, (cost.ep_nic_share, cost.ep_nvlink_share)),
                                              ("ep-hidden", cost.ep_hidden_s, (cost.ep_nic_share,
                                                                               cost.ep_nvlink_share))):
                    demand = {key: share for names, share in zip((nic_names(name, s), nvlink_names(name, s)),
                                                                  shares, strict=True)
                              if share > 0 for key in names}
                    if demand:
                        flows[kind][0][:len(seconds), s, c] = seconds
                        flows[kind][1][s][c] = demand
                # TP's NVLink traffic, spread over the compute that follows each op's exposed all-to-all
                backward = bwd_in[s, c] + (0.0 if splits_backward else bwd_w[s, c])
                for k, (kind, nvlink_s, compute_s) in enumerate((("tp-forward", cost.tp_nvlink_s[0], fwd[s, c]),
                                                                 ("tp-backward", cost.tp_nvlink_s[1], backward))):
                    if nvlink_s > 0:
                        seconds = max(compute_s - cost.ep_s[k], nvlink_s)
                        flows[kind][0][k, s, c] = seconds
                        flows[kind][1][s][c] = dict.fromkeys(nvlink_names(name, s), float(nvlink_s / seconds))
                for comm_class in COMM_CLASSES:
                    stage_exposed[comm_class] += m * cost.exposed[comm_class]
            stage_time = float(fwd[s].sum() + bwd_in[s].sum() + bwd_w[s].sum())
            if stage_time > worst_stage_time:
                worst_stage_time, worst_exposed = stage_time, stage_exposed
        phases = {"zero3": "op", "cp": "compute", "ep": "inline", "ep-hidden": "compute", "tp-forward": "compute",
                  "tp-backward": "compute"}
        op_flows = tuple(OpFlow(kind, seconds, tuple(map(tuple, demand)), phases[kind])
                         for kind, (seconds, demand) in flows.items() if seconds.any())
        groups.append(PipelineGroup(
            name, stage_map, fwd, bwd_in, bwd_w, replicas,
            transfer_uses=_transfer_uses(layout, name, stage_map, replicas, p2p_bytes), op_flows=op_flows))
    dp_sync, dp_gather = np.zeros((pp, v)), np.zeros((pp, v))
    buckets = np.ones((pp, v), dtype=np.int64)
    sync_uses: list[list[dict[str, float]]] = [[] for _ in range(pp)]
    param_uses: list[list[dict[str, float]]] = [[] for _ in range(pp)]
    shared = np.zeros(pp, dtype=bool)
    optimizer = 0.0
    for s in range(pp):
        params = stage_params(layout, s)
        shared[s] = layout.dp_span(s).crosses_buildings
        for c, p in enumerate(params):
            split = dp_buckets(layout, s, c, p)
            buckets[s, c] = max(1, sum(split))
            chunk = _dp_sync(layout, s, p, split)
            dp_sync[s, c], dp_gather[s, c] = chunk.sync_s, chunk.gather_s
            sync_uses[s].append(chunk.sync_uses)
            param_uses[s].append(chunk.gather_uses)
        owned = sum(
            p.dense / (plan.dp * plan.cp) + p.expert / max(1, plan.dp * plan.cp // plan.ep) for p in params
        )
        if plan.zero_stage == 0:
            owned = sum(p.dense + p.expert for p in params)
        hbm = min(layout.buildings[b].gpu_spec.hbm_bandwidth_gb_per_s for b in layout.stage_replicas[s])
        optimizer = max(optimizer, owned * co.ADAM_BYTES_PER_PARAM / (hbm * 1e9 * co.HBM_EFFICIENCY))
    return StepWorkload(
        schedule=plan.schedule,
        pp=pp,
        virtual_stages=v,
        num_microbatches=m,
        groups=tuple(groups),
        p2p_bytes=p2p_bytes,
        links=_pp_links(layout),
        dp_sync_s=dp_sync,
        dp_gather_s=dp_gather,
        dp_buckets=buckets,
        dp_sync_uses=tuple(map(tuple, sync_uses)),
        dp_gather_uses=tuple(map(tuple, param_uses)),
        dp_shared=shared,
        optimizer_s=optimizer,
        exposed_comm_s=worst_exposed,
        resource_busy_s=resource_busy(layout, groups, sync_uses, param_uses),
    )


# --------------------------------------------------------------------------------------------------
# Closed-form composition
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Positions:
    """One group's chunks in forward model order: (stage, chunk), building, forward and chain-backward
    seconds per micro-batch (the input gradient when the schedule splits the backward)."""

    chunks: list[tuple[int, int]]
    buildings: list[str]
    fwd_s: np.ndarray
    bwd_s: np.ndarray


def _positions(workload: StepWorkload, group: PipelineGroup) -> _Positions:
    schedule = get_schedule(workload.schedule)
    pp, v = workload.pp, workload.virtual_stages
    chunks = [(s, c) for _, s, c in sorted((schedule.chunk_stage(pp, v, c, s), s, c)
                                           for s in range(pp) for c in range(v))]
    bwd = group.bwd_input_s if schedule.splits_backward else group.bwd_s
    return _Positions(chunks, [group.stage_building[s] for s, _ in chunks],
                      np.array([group.fwd_s[sc] for sc in chunks]), np.array([bwd[sc] for sc in chunks]))


def _group_time(workload: StepWorkload, group: PipelineGroup) -> tuple[float, dict[str, float]]:
    """Pipeline makespan of one group and its parts (compute, bubble, exposed_pp)."""
    schedule = get_schedule(workload.schedule)
    pp, v, m = workload.pp, workload.virtual_stages, workload.num_microbatches
    per_stage = (group.fwd_s + group.bwd_s).sum(axis=1)  # one micro-batch through all chunks of a stage
    slowest = float(per_stage.max())
    bubble = 0.0
    if pp > 1:
        fill_drain = (float(per_stage.sum()) - slowest) / (pp - 1)
        bubble = schedule.bubble_fraction(pp, v, m) * m * fill_drain
    base = m * slowest + bubble
    where = _positions(workload, group).buildings
    hops = sum(workload.link(a, b).transfer_s(workload.p2p_bytes) + workload.link(b, a).transfer_s(workload.p2p_bytes)
               for a, b in itertools.pairwise(where))
    in_flight = schedule.in_flight_microbatches(pp, v, m)
    little = m * (float(per_stage.sum()) + hops) / max(in_flight, 1.0)  # Little's law at stage 0
    total = max(base + hops, little, _link_bound_s(workload, group), _stage_orders_s(workload, group))
    return total, {"compute_s": m * slowest, "bubble_s": bubble, "exposed_pp_s": total - base}


def _link_bound_s(workload: StepWorkload, group: PipelineGroup) -> float:
    """Every directed path between buildings serves all its transfers one after another, and every shared
    resource they cross (a link of a multi-hop route, a NIC) carries all of theirs: T ≥ (earliest any of
    them can be sent) + m·Σ their seconds there + α + (least left after any of them arrives).

    A transfer at step q of a micro-batch's way (``_Path``: forward through the model positions, then
    backward) is sent no earlier than every op and hop before it on that way, each at its time alone
    (cum[q] + work[q]: sharing only slows them), and its arrival leaves the rest of the way behind it
    (total − cum[q+1]). The hops count: on a chain of slow links a boundary's first transfer waits for the
    transfers upstream of it, and its last one leaves the downstream hops to go."""
    m, size = workload.num_microbatches, workload.p2p_bytes
    path = _path(workload, group)
    n, total = len(path.stage) // 2, path.cum[-1]
    where = [group.stage_building[s] for s in path.stage[:n]]
    # path or resource → (earliest send, left after arrival, seconds of it, latency) per transfer of one micro-batch
    uses: dict[object, list[tuple[float, float, float, float]]] = {}
    for k in range(n - 1):
        src, dst = where[k], where[k + 1]
        if src == dst:
            continue
        a, b = path.stage[k], path.stage[k + 1]
        for (x, y), pair, q in (((src, dst), (a, b), k), ((dst, src), (b, a), 2 * n - 2 - k)):
            link = workload.link(x, y)
            item = (path.cum[q] + path.work[q], total - path.cum[q + 1])
            uses.setdefault((x, y), []).append((*item, size / link.bandwidth_bytes_per_s, link.latency_s))
            for resource, seconds in group.transfer_uses.get(pair, {}).items():
                uses.setdefault(resource, []).append((*item, seconds, link.latency_s))
    return max((min(e for e, *_ in items) + m * sum(x for *_, x, _ in items) + min(lat for *_, lat in items)
                + min(w for _, w, *_ in items) for items in uses.values()), default=0.0)


@functools.lru_cache(maxsize=8)  # an entry holds pp·v·m·3 ops: few, large
def stage_streams(schedule_name: str, pp: int, v: int, m: int,
                  times: tuple[int, int, int]) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """Op order of every stage for relative op durations ``times`` (``timed_stage_ops``) as (kind, chunk,
    micro-batch) tuples."""
    orders = get_schedule(schedule_name).timed_stage_ops(pp, v, m, times)
    return tuple(tuple((int(op.kind), op.chunk, op.microbatch) for op in ops) for ops in orders)


@dataclass(frozen=True)
class _Path:
    """A micro-batch's way through the pipeline: forward through model positions 0..n−1, then backward
    n−1..0. Step q runs on ``stage[q]``; ``step_of[(kind, stage, chunk)]`` = q; ``work[q]`` its op
    seconds, ``hop[q]`` the transfer alone to step q+1 (none on one stage), ``cum[q]`` = Σ_{<q} (work + hop)."""

    stage: list[int]
    step_of: dict[tuple[int, int, int], int]
    work: list[float]
    hop: list[float]
    cum: list[float]


def _path(workload: StepWorkload, group: PipelineGroup) -> _Path:
    """The way of ``group``'s micro-batches through its positions (``_Path``)."""
    at = _positions(workload, group)
    n, size, where = len(at.chunks), workload.p2p_bytes, at.buildings
    route = [*range(n), *reversed(range(n))]
    kinds = [int(OpKind.F)] * n + [int(OpKind.B)] * n
    ahead = [workload.link(a, b).transfer_s(size) if x[0] != y[0] else 0.0  # the V's turn stays on its stage
             for (a, b), (x, y) in zip(itertools.pairwise(where), itertools.pairwise(at.chunks), strict=True)]
    behind = [workload.link(b, a).transfer_s(size) if x[0] != y[0] else 0.0
              for (a, b), (x, y) in zip(itertools.pairwise(where), itertools.pairwise(at.chunks), strict=True)]
    hop = [*ahead, 0.0, *behind[::-1], 0.0]
    work = [float(x) for x in (*at.fwd_s, *at.bwd_s[::-1])]
    return _Path(
        stage=[at.chunks[p][0] for p in route],
        step_of={(kind, *at.chunks[p]): q for q, (kind, p) in enumerate(zip(kinds, route, strict=True))},
        work=work, hop=hop, cum=list(itertools.accumulate(map(sum, zip(work, hop, strict=True)), initial=0.0)),
    )


def _stage_orders_s(workload: StepWorkload, group: PipelineGroup) -> float:
    """``_stage_relaxation_s`` over the stages at the pipeline's ends (the first stage, which starts and
    ends every micro-batch, and the stage where its forward turns into its backward) and at cross-building
    boundaries, in the op order the simulator finds fastest: the least over the candidate orders (0 when
    the schedule cannot run the shape: there is no op order to follow)."""
    path = _path(workload, group)
    n = len(path.stage) // 2
    stages = sorted({s for a, b in itertools.pairwise(path.stage[:n])
                     if group.stage_building[a] != group.stage_building[b] for s in (a, b)}
                    | {path.stage[0], path.stage[n - 1]})
    if get_schedule(workload.schedule).check(workload.pp, workload.virtual_stages, workload.num_microbatches):
        return 0.0
    return min(_stage_relaxation_s(workload, group, path, stages, times) for times in workload.candidate_op_times())


def _stage_relaxation_s(workload: StepWorkload, group: PipelineGroup, path: _Path, stages: list[int],
                        times: tuple[int, int, int]) -> float:
    """Lower bound on the pipeline makespan: the simulator's timeline of ``stages``, everything else
    relaxed.

    Those stages run their exact op orders; a transfer between two of them is served first come, first
    served in its sender's order on the sender's path to that building (to that stage inside a building) —
    the simulator's one NCCL communicator per peer: x = bytes ÷ the replica's share, then α. A step of a
    micro-batch whose input comes from any other stage starts no earlier than the micro-batch's last step
    on these stages plus the work and transfers (alone) in between, or Σ of them from the start. The step
    then lasts ≥ every op's end plus the rest of its micro-batch's path. Dropped: the other stages' orders
    and queues, and transfers of different senders sharing one path, so this stays below the simulator.

    What it sees that per-op sums miss: a stage sends activation j only after the backward its order puts
    before F(j), whose gradient must first cross back, so only the micro-batches the orders admit between a
    forward and its backward are in flight over the boundary — each round trip x_f + x_b + ops carries that
    few (Little's law over the boundary; 1F1B: pp − a at upstream stage a) instead of the path streaming
    one per x; V-shaped / interleaved schedules put several boundaries between the same two stages, whose
    transfers queue on one path; and slow boundaries in series hold each other up. At the pipeline's ends
    it sees the schedule's idle time at the real F:B:W durations (ZB-H1, CrossPipe windows), which the
    bubble fraction prices at F = B = W.
    """
    size, m = workload.p2p_bytes, workload.num_microbatches
    streams = stage_streams(workload.schedule, workload.pp, workload.virtual_stages, m, times)
    steps, where = len(path.stage), group.stage_building
    cum, work, total = path.cum, path.work, path.cum[-1]
    member = [s in stages for s in path.stage]
    nearest = [max((r for r in range(q) if member[r]), default=-1) for q in range(steps)]
    weight = group.bwd_weight_s
    end, arrive = [-1.0] * (steps * m), [-1.0] * (steps * m)  # per (step, micro-batch); −1: not yet known
    free: dict[tuple[int, str | int], float] = {}  # (sender, its path) busy until
    clock = dict.fromkeys(stages, 0.0)  # a stage's stream is busy until then
    next_op = dict.fromkeys(stages, 0)
    best = 0.0
    while any(next_op[s] < len(streams[s]) for s in stages):
        moved = False
        for s in stages:
            ops = streams[s]
            while next_op[s] < len(ops):
                kind, chunk, j = ops[next_op[s]]
                if kind == OpKind.W:
                    clock[s] += float(weight[s, chunk])
                else:
                    q = path.step_of[(kind, s, chunk)]
                    if q > 0 and member[q - 1] and path.stage[q - 1] != s:
                        ready = arrive[q * m + j]
                    elif nearest[q] >= 0:
                        r = nearest[q]
                        ready = end[r * m + j]
                        ready = ready + cum[q] - cum[r] - work[r] if ready >= 0 else ready
                    else:
                        ready = 0.0
                    if ready < 0:
                        break
                    clock[s] = max(clock[s], cum[q], ready) + work[q]
                    end[q * m + j] = clock[s]
                    best = max(best, clock[s] + total - cum[q + 1] + path.hop[q])
                    if q + 1 < steps and member[q + 1] and path.stage[q + 1] != s:
                        to = path.stage[q + 1]
                        link = workload.link(where[s], where[to])
                        key = (s, where[to] if where[to] != where[s] else to)
                        free[key] = max(clock[s], free.get(key, 0.0)) + size / link.bandwidth_bytes_per_s
                        arrive[(q + 1) * m + j] = free[key] + link.latency_s
                next_op[s] += 1
                moved = True
                best = max(best, clock[s])
        if not moved:
            raise ValueError(f"{workload.schedule}: op orders of stages {stages} deadlock")
    return best


def sync_windows(workload: StepWorkload, group: PipelineGroup, bucketed: bool = True) -> np.ndarray:
    """(N,): how long before the pipeline ends each DP job (``StepWorkload.dp_jobs``) is released, by the drain.

    Bucket j of chunk (s, c) at model position p is ready ``1 − ready_at_j`` of its chunk's last backward op
    (W when the schedule splits the backward, else B) before that op ends (``bucketed=False``: at its end),
    and the last micro-batch's input-gradient backward must still pass every position below p:
    Σ_{k<p} B_in(k) + (1 − ready_at_j)·last op.
    """
    at = _positions(workload, group)
    jobs = workload.dp_jobs
    last = group.bwd_weight_s if get_schedule(workload.schedule).splits_backward else group.bwd_s
    window = _sum_before(at, at.bwd_s, last.shape)[jobs.stage, jobs.chunk]
    if bucketed:
        window = window + (1.0 - jobs.ready_at) * last[jobs.stage, jobs.chunk]
    return window


def _sum_before(at: _Positions, per_position: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """(pp, v) ``shape``: for each chunk, Σ of ``per_position`` (in ``at``'s forward model order) over the
    positions below the chunk's."""
    out = np.zeros(shape)
    for (s, c), value in zip(at.chunks, np.concatenate([[0.0], np.cumsum(per_position)[:-1]]), strict=True):
        out[s, c] = value
    return out


def _lateness(window: np.ndarray, work: np.ndarray) -> float:
    """max over jobs j of (Σ work of jobs whose window ≤ window_j) − window_j, at least 0: the jobs whose window
    is no longer than j's all run on one stream (or one shared resource) within j's window."""
    order = np.argsort(window, kind="stable")
    return float(np.max(np.cumsum(work[order]) - window[order], initial=0.0))


def _job_lateness(workload: StepWorkload, window: np.ndarray, seconds: np.ndarray,
                  uses: tuple[tuple[dict[str, float], ...], ...]) -> float:
    """``_lateness`` of the DP jobs (seconds alone ``seconds``, (N,)) on each stage's DP stream and on every
    resource their chunks' ``uses`` share (a job takes its ``part`` of its chunk's resource-seconds)."""
    jobs = workload.dp_jobs
    bounds = np.searchsorted(jobs.stage, np.arange(workload.pp + 1))  # jobs are in stage order
    alone = max(_lateness(window[a:b], seconds[a:b]) for a, b in itertools.pairwise(bounds.tolist()))
    shared = 0.0
    for chunk in resource_seconds(uses).values():
        on = chunk[jobs.stage, jobs.chunk] * jobs.part
        used = on > 0
        shared = max(shared, _lateness(window[used], on[used]))
    return max(alone, shared)


def exposed_dp_s(workload: StepWorkload, group: PipelineGroup, bucketed: bool = True) -> float:
    """DP sync not hidden behind the pipeline (``sync_windows``; ``bucketed=False``: the same buckets, each
    released at the end of its chunk's last backward): on each stage's DP stream, and on every resource the
    stages' syncs share (its seconds)."""
    return _job_lateness(workload, sync_windows(workload, group, bucketed), workload.dp_jobs.sync_s,
                         workload.dp_sync_uses)


def resource_seconds(uses: tuple[tuple[dict[str, float], ...], ...]) -> dict[str, np.ndarray]:
    """Per resource, the (pp, v) seconds of it each chunk's job needs (0 where unused)."""
    out: dict[str, np.ndarray] = {}
    for s, chunks in enumerate(uses):
        for c, chunk in enumerate(chunks):
            for key, seconds in chunk.items():
                if key not in out:
                    out[key] = np.zeros((len(uses), len(chunks)))
                out[key][s, c] += seconds
    return out


def gather_windows(workload: StepWorkload) -> np.ndarray:
    """(N,): how far into the next step each DP job's ZeRO-1/2 gather may run (``StepWorkload.dp_jobs``): the
    first forward of chunk (s, c) at model position p starts after the forwards of every position below p
    and needs bucket j at ``needed_at_j`` of its layers, so Σ_{k<p} F(k) + needed_at_j·F(p) (the smallest over
    the pipeline groups; transfers ignored)."""
    jobs = workload.dp_jobs
    windows = []
    for group in workload.groups:
        at = _positions(workload, group)
        before = _sum_before(at, at.fwd_s, group.fwd_s.shape)
        windows.append(before[jobs.stage, jobs.chunk] + jobs.needed_at * group.fwd_s[jobs.stage, jobs.chunk])
    return np.min(windows, axis=0)


def exposed_gather_s(workload: StepWorkload) -> float:
    """ZeRO-1/2 parameter all-gathers not hidden behind the next step's forward (after the optimizer): the
    gathers needed by a time (``gather_windows``) must be done by then, on each stage's DP stream and on
    every resource the stages' gathers share."""
    if not workload.dp_gather_s.any():
        return 0.0
    return _job_lateness(workload, gather_windows(workload), workload.dp_jobs.gather_s, workload.dp_gather_uses)


def pipeline_time_closed_form(workload: StepWorkload) -> tuple[float, dict[str, float]]:
    """Step time = max(max over groups (pipeline + exposed DP) + optimizer + exposed ZeRO gather,
    busiest shared resource), with its breakdown (BREAKDOWN_KEYS).

    Pipeline of a group with T_s = Σ_c (F + B) of stage s per micro-batch, schedule bubble fraction β:
    base = m·max_s T_s + β·m·(Σ_s T_s − max_s T_s)/(pp − 1) (exact for 1F1B/GPipe/interleaved on uniform
    stages: (m + pp − 1)·T resp. (pp−1)/v·T of bubble), then max(base + H, Little's-law bound
    m·(Σ_s T_s + H)/in_flight (a micro-batch holds one of in_flight slots of stage 0 for a whole round
    trip), each cross-building path's serialised transfers (``_link_bound_s``), each cross-building
    boundary's round trips through the op orders of its stages and the ends' (``_stage_relaxation_s``)), where H is one
    forward and one backward traversal of every stage boundary (latency + bytes/bandwidth).
    Every op is first lengthened by what its own traffic classes lose to sharing the resources they cross
    (``op_sharing.stretched_group``; charged to ``StepWorkload.sharing_key``, as the simulator charges it).
    Ignored (left to the simulator): transfers of different boundaries queueing on one path, overlap of
    the p2p transfers with compute beyond what those bounds see, the sharing of one op's flows with other
    ops', transfers and DP syncs, stragglers. The breakdown's exposed TP/CP/EP are those of the slowest stage.
    """
    splits_backward = get_schedule(workload.schedule).splits_backward
    stretched = [stretched_group(group, splits_backward) for group in workload.groups]
    tails = [_last_backward_tail_s(workload, group, stretched_one)
             for group, (stretched_one, _) in zip(workload.groups, stretched, strict=True)]
    workload = replace(workload, groups=tuple(group for group, _ in stretched))
    best: tuple[float, dict[str, float]] | None = None
    gather = exposed_gather_s(workload)
    for group, (_, loss), tail in zip(workload.groups, stretched, tails, strict=True):
        pipeline, parts = _group_time(workload, group)
        exposed_dp = exposed_dp_s(workload, group)
        total = pipeline + tail + exposed_dp + workload.optimizer_s + gather
        if best is None or total > best[0]:
            slowest = int(np.argmax((group.fwd_s + group.bwd_s).sum(axis=1)))  # the stage ``compute_s`` counts
            stretch = workload.num_microbatches * float(loss[slowest])
            best = (total, {**parts, "compute_s": parts["compute_s"] - stretch, "sharing_s": stretch + tail,
                            "exposed_dp_s": exposed_dp + gather})
    assert best is not None
    total, parts = best
    comm = workload.exposed_comm_s
    breakdown = {
        "compute_s": parts["compute_s"] - sum(comm.values()),
        "bubble_s": parts["bubble_s"],
        "exposed_tp_s": comm["tp"],
        "exposed_cp_s": comm["cp"],
        "exposed_ep_s": comm["ep"],
        "exposed_pp_s": parts["exposed_pp_s"],
        "exposed_dp_s": parts["exposed_dp_s"] + comm["dp"],
        "optimizer_s": workload.optimizer_s,
    }
    breakdown[workload.sharing_key] += parts["sharing_s"]
    _, busy = workload.busiest_resource
    if busy > total:
        breakdown[workload.resource_excess_key] += busy - total
        total = busy
    assert tuple(breakdown) == BREAKDOWN_KEYS
    return total, breakdown


def _last_backward_tail_s(workload: StepWorkload, group: PipelineGroup, stretched: PipelineGroup) -> float:
    """How much later the pipeline ends because each chunk's gradient buckets share resources with the last
    backward op that releases them (``op_sharing.last_backward_loss``). Where the backward is not split, the
    last micro-batch's backward runs through every chunk's last backward op in turn at the pipeline's end: their
    losses add up; where it is, the W ops are off that chain and only the first model position's, the
    pipeline's last op, counts."""
    loss = last_backward_loss(workload, group, stretched)
    if not loss.any():
        return 0.0
    if not get_schedule(workload.schedule).splits_backward:
        return float(loss.sum())
    return float(loss[_positions(workload, group).chunks[0]])


def peak_flops(instance: Instance, plan: Plan) -> float:
    """Σ over the plan's GPUs of the peak for the job's precision (bf16 or fp8), FLOP/s."""
    total = 0.0
    for stage_map, replicas in resolve(instance, plan).pipelines:
        for name in stage_map:
            gpu = instance.cluster.building(name).gpu_spec
            peak = gpu.peak_fp8_tflops if instance.job.precision is Precision.FP8 else gpu.peak_bf16_tflops
            total += replicas * plan.tp * plan.cp * peak * 1e12
    return total


def estimate(instance: Instance, plan: Plan) -> StepReport:
    """Closed-form step time, MFU, throughput and memory of a (filled-in) plan.

    MFU = model FLOPs ÷ (Σ peak × step time), peak by job precision. ``details['lower_bound_s']`` =
    model FLOPs ÷ Σ peak.
    """
    layout = resolve(instance, plan)
    workload = layout_workload(layout)
    step, breakdown = pipeline_time_closed_form(workload)
    job = instance.job
    flops = model_flops_per_step(job.model_spec, job.seq_len, job.global_batch_size)
    peak = peak_flops(instance, plan)
    memory = layout_memory(layout)
    return StepReport(
        step_time_s=step,
        mfu=flops / (peak * step),
        tokens_per_s=job.tokens_per_step / step,
        memory_gib_per_gpu=memory.total_gib,
        memory_capacity_gib=memory.capacity_gib,
        fits_memory=memory.fits,
        breakdown=breakdown,
        simulated=False,
        details={"lower_bound_s": flops / peak},
    )
