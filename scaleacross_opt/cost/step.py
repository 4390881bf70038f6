"""Step model: per-op durations of a plan (``build_workload``) and their closed form (``estimate``).

Communication per micro-batch and layer (per GPU; S_act = tokens·h·2 bytes, tokens = b·s/cp):

- TP with sequence parallelism: 2 all-gathers + 2 reduce-scatters of S_act in forward and again in
  backward (Korthikanti et al. 2022 §4.2.2), ring over NVLink (at NVLINK_PROTOCOL_EFFICIENCY of line
  rate) when tp fits the node's NVLink domain, else over the NIC; ``TP_OVERLAP_FRACTION`` of it hidden,
  or, with ``Plan.tp_comm_overlap``, each collective pipelined with the GEMM it feeds (all-gather before
  QKV / FC1) or follows (reduce-scatter after out-proj / FC2): exposed max(0, comm − GEMM), a forward
  reduce-scatter at least its last of TP_OVERLAP_RS_SPLITS chunks (``tp_exposed_s``).
- CP (ring attention): cp−1 exchanges of the K/V block (2·tokens·kv·2/tp bytes) in forward, twice that
  (K/V and their gradients) in backward, hidden behind the attention compute when shorter.
- EP: all-to-all dispatch + combine of (tokens/tp)·top_k·h·2 bytes (each TP rank routes its sequence-
  parallel slice) in forward and in backward over ep ranks,
  NVLink when ep·tp GPUs fit a node, else the NIC; ``EP_OVERLAP_FRACTION`` hidden.
- ZeRO-3: all-gather of the chunk's bf16 weights in forward and again in backward per micro-batch,
  hidden behind ``ZERO3_OVERLAP_FRACTION`` of its compute (reported as exposed DP).
- PP: one activation (forward) or activation-gradient (backward) of S_act/tp bytes per GPU per
  micro-batch per stage boundary.
- DP: per chunk, a reduce-scatter (ZeRO ≥ 1) or an all-reduce (ZeRO 0) of the gradients over the dp·cp
  ranks (dp·cp/ep for expert weights); the ZeRO-1/2 all-gather of updated weights is assumed hidden
  behind the next step's forward (Megatron --overlap-param-gather, FSDP prefetch) and not charged;
  hierarchical across buildings when the cross-building algorithm is hierarchical, else one flat ring
  over the bottleneck path.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..catalog import coefficients as co
from ..schedules.registry import get_schedule
from ..spec.cluster import Building
from ..spec.gpu import GpuSpec
from ..spec.instance import Instance
from ..spec.job import Precision
from ..spec.model import ModelSpec
from ..spec.network import CollectiveAlgorithm, TrafficClassConfig
from ..spec.plan import DpSync, Plan, Recompute
from .collectives import Collective, Level, all_to_all_s, collective_s, hierarchical_s, ring_half_s
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
from .memory import chunk_layer_kinds, memory_per_gpu, model_order, require_filled, stage_maps, stage_params
from .network import EffectivePath, effective_path
from .report import BREAKDOWN_KEYS, StepReport
from .workload import LinkShare, PipelineGroup, StepWorkload

COMM_CLASSES = ("tp", "cp", "ep", "dp")  # keys of StepWorkload.exposed_comm_s ('dp': ZeRO-3 gathers)


# --------------------------------------------------------------------------------------------------
# Paths
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


def _group_path(building: Building, config: TrafficClassConfig, span_gpus: int) -> Level:
    """NVLink when ``span_gpus`` consecutive GPUs fit one NVLink domain of a node, else the fabric."""
    if span_gpus <= min(building.gpus_per_node, building.gpu_spec.nvlink_domain_size):
        return nvlink_path(building)
    path = fabric_path(building, config)
    return Level(1, path.bandwidth_bytes_per_s, path.latency_s)


def cross_path(instance: Instance, a: str, b: str, config: TrafficClassConfig, connections: int) -> Level:
    """Per-connection goodput between buildings when ``connections`` GPUs cross the route at once (≤ NIC)."""
    route = instance.cluster.route(a, b)
    path = effective_path(
        route.bandwidth_gbps, route.latency_us, route.loss_rate, config, connections, co.CROSS_BUILDING_PATHS
    )
    nic = min(instance.cluster.building(x).gpu_spec.nic_bandwidth_gbps for x in (a, b)) * 1e9 / 8
    return Level(1, min(path.bandwidth_bytes_per_s, nic), path.latency_s)


# --------------------------------------------------------------------------------------------------
# Per-micro-batch op times of one (stage, chunk) in one building
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ChunkCost:
    times: OpTimes  # compute + exposed communication
    exposed: dict[str, float]  # per class, fwd + bwd of one micro-batch


def layer_comm(instance: Instance, plan: Plan, building: Building, kind: LayerKind) -> dict:
    """Exposed TP/CP/EP seconds (fwd, bwd) of one layer for one micro-batch.

    Full recompute re-runs the forward inside the backward, collectives included (Megatron's
    checkpointed forward re-issues its TP all-reduces / all-gathers), so its backward also pays the
    forward's exposed communication.
    """
    model, job = instance.job.model_spec, instance.job
    assert plan.network is not None
    intra = plan.network.intra_building
    shard = Shard(job.seq_len, plan.micro_batch_size, plan.tp, plan.cp, plan.ep)
    act = shard.tokens * model.hidden_size * 2
    out: dict[str, tuple[float, float]] = {}
    tp_link = _group_path(building, intra, plan.tp)
    collective = ring_half_s(plan.tp, act, tp_link.bandwidth_bytes_per_s, tp_link.latency_s)
    if plan.tp_comm_overlap and plan.tp > 1:
        out["tp"] = tp_exposed_s(collective, model, kind, shard, building.gpu_spec, job.precision)
    else:
        tp_fwd = 4 * collective * (1.0 - co.TP_OVERLAP_FRACTION)
        out["tp"] = (tp_fwd, tp_fwd)
    cp_fwd = cp_bwd = 0.0
    if plan.cp > 1:
        cp_link = _group_path(building, intra, plan.tp * plan.cp)
        kv_bytes = 2 * shard.tokens * model.num_kv_heads * model.head_dim_resolved * 2 / plan.tp
        step = kv_bytes / cp_link.bandwidth_bytes_per_s + cp_link.latency_s
        attention = attention_times(model, shard, building.gpu_spec)
        cp_fwd = max(0.0, (plan.cp - 1) * step - attention.fwd_s)
        cp_bwd = max(0.0, 2 * (plan.cp - 1) * step - attention.bwd_input_s)
    out["cp"] = (cp_fwd, cp_bwd)
    ep_fwd = 0.0
    if kind is LayerKind.MOE and plan.ep > 1:
        assert model.moe is not None
        ep_link = _group_path(building, intra, plan.ep * plan.tp)
        routed = shard.tokens * model.moe.top_k * model.hidden_size * 2 / plan.tp  # SP: T/tp tokens per rank
        ep_fwd = 2 * all_to_all_s(plan.ep, routed, ep_link.bandwidth_bytes_per_s, ep_link.latency_s)
        ep_fwd *= 1.0 - co.EP_OVERLAP_FRACTION
    out["ep"] = (ep_fwd, ep_fwd)
    if plan.recompute is Recompute.FULL:  # the recomputed forward repeats its collectives in the backward
        out = {name: (f, b + f) for name, (f, b) in out.items()}
    return out


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


def _chunk_cost(
    instance: Instance, plan: Plan, stage: int, chunk: int, building: Building, dp_level: Level
) -> _ChunkCost:
    """Op times of (stage, chunk) for one micro-batch on a GPU of ``building``, communication included."""
    model, job = instance.job.model_spec, instance.job
    gpu = building.gpu_spec
    shard = Shard(job.seq_len, plan.micro_batch_size, plan.tp, plan.cp, plan.ep)
    kinds = chunk_layer_kinds(model, plan)[stage][chunk]
    total = OpTimes(0.0, 0.0, 0.0)
    exposed = dict.fromkeys(COMM_CLASSES, 0.0)
    for kind in set(kinds):
        count = kinds.count(kind)
        compute = layer_times(model, kind, shard, gpu, job.precision, plan.recompute)
        comm = layer_comm(instance, plan, building, kind)
        fwd_comm = sum(f for f, _ in comm.values())
        bwd_comm = sum(b for _, b in comm.values())
        total = total + OpTimes(
            compute.fwd_s + fwd_comm, compute.bwd_input_s + bwd_comm, compute.bwd_weight_s
        ).scaled(count)
        for name, (f, b) in comm.items():
            exposed[name] += count * (f + b)
    order = model_order(plan)
    if (stage, chunk) == order[0]:
        total = total + embedding_times(model, shard, gpu)
    if (stage, chunk) == order[-1]:
        total = total + lm_head_times(model, shard, gpu, job.precision)
    if plan.zero_stage >= 3:
        params = stage_params(model, plan, stage)[chunk]
        gather = ring_half_s(
            plan.dp * plan.cp,
            (params.dense + params.expert) * co.WEIGHT_BYTES,
            dp_level.bandwidth_bytes_per_s,
            dp_level.latency_s,
        )
        fwd_extra = max(0.0, gather - co.ZERO3_OVERLAP_FRACTION * total.fwd_s)
        bwd_extra = max(0.0, gather - co.ZERO3_OVERLAP_FRACTION * total.bwd_s)
        exposed["dp"] = fwd_extra + bwd_extra
        total = total + OpTimes(fwd_extra, bwd_extra, 0.0)
    return _ChunkCost(total, exposed)


# --------------------------------------------------------------------------------------------------
# DP levels and sync
# --------------------------------------------------------------------------------------------------


def _stage_buildings(plan: Plan, stage: int) -> dict[str, int]:
    """Buildings holding stage ``stage`` of some replica → replicas there, in placement order."""
    out: dict[str, int] = {}
    for stage_map, replicas in stage_maps(plan):
        out[stage_map[stage]] = out.get(stage_map[stage], 0) + replicas
    return out


def _dp_sync_s(instance: Instance, plan: Plan, stage: int, grad_params: float, expert_params: float) -> float:
    """Seconds to sync one chunk's gradients of ``stage`` across DP while every stage syncs at once."""
    assert plan.network is not None
    buildings = _stage_buildings(plan, stage)
    first = instance.cluster.building(next(iter(buildings)))
    group_gpus = plan.tp * plan.cp * plan.dp
    cross_cfg = plan.network.cross_building
    inner_ranks = max(buildings.values()) * plan.cp
    inner = _group_path(first, plan.network.intra_building, group_gpus if len(buildings) == 1 else 10**9)
    hierarchical = cross_cfg.collective_algorithm is CollectiveAlgorithm.HIERARCHICAL and len(buildings) > 1
    outer: Level | None = None
    if len(buildings) > 1:
        names = list(buildings)
        # all pp stages sync at once; flat rings: tp rings per stage cross; hierarchical: every GPU does
        connections = plan.pp * plan.tp * (inner_ranks if hierarchical else 1)
        ring = zip(names, names[1:] + names[:1], strict=True)
        hops = [cross_path(instance, a, b, cross_cfg, connections) for a, b in ring]
        hops = hops[:1] if len(names) == 2 else hops
        outer = Level(len(names), min(h.bandwidth_bytes_per_s for h in hops), max(h.latency_s for h in hops))
        for name in names[1:]:
            path = _group_path(instance.cluster.building(name), plan.network.intra_building, 10**9)
            inner = min(inner, path, key=lambda lv: lv.bandwidth_bytes_per_s)

    def sync(n: int, bytes_: float, op: Collective) -> float:
        if n <= 1 or bytes_ <= 0:
            return 0.0
        if outer is None:
            algorithm = plan.network.intra_building.collective_algorithm
            algorithm = (
                CollectiveAlgorithm.RING if algorithm is CollectiveAlgorithm.HIERARCHICAL else algorithm
            )
            return collective_s(op, algorithm, n, bytes_, inner.bandwidth_bytes_per_s, inner.latency_s)
        if hierarchical:
            n_in = max(1, n // outer.ranks)
            return hierarchical_s(
                op, Level(n_in, inner.bandwidth_bytes_per_s, inner.latency_s), outer, bytes_
            )
        return collective_s(
            op,
            cross_cfg.collective_algorithm,
            n,
            bytes_,
            min(inner.bandwidth_bytes_per_s, outer.bandwidth_bytes_per_s),
            max(inner.latency_s, outer.latency_s),
        )

    total = 0.0
    for n, params in (
        (plan.dp * plan.cp, grad_params),
        (max(1, plan.dp * plan.cp // plan.ep), expert_params),
    ):
        grads = params * co.GRAD_REDUCE_BYTES
        if plan.zero_stage == 0:
            total += sync(n, grads, Collective.ALL_REDUCE)
        else:
            total += sync(n, grads, Collective.REDUCE_SCATTER)
    return total


def _dp_level(instance: Instance, plan: Plan, building: Building) -> Level:
    """Path of ZeRO-3 gathers: the fabric (or NVLink when the whole DP group fits a node)."""
    assert plan.network is not None
    span = plan.tp * plan.cp * plan.dp if len(_stage_buildings(plan, 0)) == 1 else 10**9
    return _group_path(building, plan.network.intra_building, span)


# --------------------------------------------------------------------------------------------------
# Workload
# --------------------------------------------------------------------------------------------------


def _pp_links(instance: Instance, plan: Plan, maps: list[tuple[tuple[str, ...], int]]) -> dict:
    """LinkShare per (src, dst) building pair used by a stage boundary (both directions)."""
    assert plan.network is not None
    order = model_order(plan)
    replicas_on: dict[tuple[str, str], int] = {}
    for stage_map, replicas in maps:
        pairs = {(stage_map[a[0]], stage_map[b[0]]) for a, b in itertools.pairwise(order)}
        for src, dst in pairs | {(d, s) for s, d in pairs}:
            replicas_on[(src, dst)] = replicas_on.get((src, dst), 0) + replicas
    links: dict[tuple[str, str], LinkShare] = {}
    gpus = plan.tp * plan.cp
    for (src, dst), replicas in replicas_on.items():
        if src == dst:
            path = fabric_path(instance.cluster.building(src), plan.network.intra_building)
            level = Level(1, path.bandwidth_bytes_per_s, path.latency_s)
        else:
            level = cross_path(instance, src, dst, plan.network.cross_building, replicas * gpus)
        links[(src, dst)] = LinkShare(src, dst, level.bandwidth_bytes_per_s, level.latency_s)
    return links


def build_workload(instance: Instance, plan: Plan) -> StepWorkload:
    """Per-(stage, chunk) op times per pipeline group, links, DP sync times and optimizer time of a plan.

    Bandwidths and ``p2p_bytes`` are per GPU: each of a stage's tp·cp GPUs moves its own slice of the
    activation in parallel, so ``link.transfer_s(p2p_bytes)`` is the boundary's transfer time.
    """
    require_filled(plan)
    model, job = instance.job.model_spec, instance.job
    pp, v = plan.pp, plan.virtual_stages
    m = plan.num_microbatches(job.global_batch_size)
    if m < 1:
        raise ValueError(
            f"global batch {job.global_batch_size} < dp·micro_batch = {plan.dp * plan.micro_batch_size}"
        )
    maps = stage_maps(plan)
    groups = []
    worst_exposed = dict.fromkeys(COMM_CLASSES, 0.0)
    worst_stage_time = -1.0
    cache: dict[tuple[int, int, str], _ChunkCost] = {}
    for index, (stage_map, replicas) in enumerate(maps):
        fwd, bwd_in, bwd_w = (np.zeros((pp, v)) for _ in range(3))
        for s in range(pp):
            building = instance.cluster.building(stage_map[s])
            stage_exposed = dict.fromkeys(COMM_CLASSES, 0.0)
            for c in range(v):
                key = (s, c, building.name)
                if key not in cache:
                    cache[key] = _chunk_cost(
                        instance, plan, s, c, building, _dp_level(instance, plan, building)
                    )
                cost = cache[key]
                fwd[s, c], bwd_in[s, c], bwd_w[s, c] = (
                    cost.times.fwd_s,
                    cost.times.bwd_input_s,
                    cost.times.bwd_weight_s,
                )
                for name in COMM_CLASSES:
                    stage_exposed[name] += m * cost.exposed[name]
            stage_time = float(fwd[s].sum() + bwd_in[s].sum() + bwd_w[s].sum())
            if stage_time > worst_stage_time:
                worst_stage_time, worst_exposed = stage_time, stage_exposed
        name = "+".join(dict.fromkeys(stage_map)) + (f"#{index}" if len(maps) > 1 else "")
        groups.append(PipelineGroup(name, stage_map, fwd, bwd_in, bwd_w, replicas))
    dp_sync = np.zeros((pp, v))
    optimizer = 0.0
    for s in range(pp):
        params = stage_params(model, plan, s)
        for c, p in enumerate(params):
            dp_sync[s, c] = _dp_sync_s(instance, plan, s, p.dense, p.expert)
        owned = sum(
            p.dense / (plan.dp * plan.cp) + p.expert / max(1, plan.dp * plan.cp // plan.ep) for p in params
        )
        if plan.zero_stage == 0:
            owned = sum(p.dense + p.expert for p in params)
        hbm = min(
            instance.cluster.building(b).gpu_spec.hbm_bandwidth_gb_per_s for b in _stage_buildings(plan, s)
        )
        optimizer = max(optimizer, owned * co.ADAM_BYTES_PER_PARAM / (hbm * 1e9 * co.HBM_EFFICIENCY))
    p2p_bytes = job.seq_len * plan.micro_batch_size * model.hidden_size * 2 / (plan.tp * plan.cp)
    return StepWorkload(
        schedule=plan.schedule,
        pp=pp,
        virtual_stages=v,
        num_microbatches=m,
        groups=tuple(groups),
        p2p_bytes=p2p_bytes,
        links=_pp_links(instance, plan, maps),
        dp_sync_s=dp_sync,
        dp_overlap_fraction=co.DP_BACKWARD_OVERLAP_FRACTION if plan.dp_sync is DpSync.OVERLAP_BACKWARD else 0.0,
        optimizer_s=optimizer,
        exposed_comm_s=worst_exposed,
    )


# --------------------------------------------------------------------------------------------------
# Closed-form composition
# --------------------------------------------------------------------------------------------------


def _boundaries(workload: StepWorkload, group: PipelineGroup) -> list[tuple[str, str]]:
    """(src, dst) building of every forward stage boundary in model order (chunk wrap-arounds included)."""
    schedule = get_schedule(workload.schedule)
    pp, v = workload.pp, workload.virtual_stages
    order = sorted((schedule.chunk_stage(pp, v, c, s), s) for s in range(pp) for c in range(v))
    where = group.stage_building
    return [(where[a], where[b]) for (_, a), (_, b) in itertools.pairwise(order)]


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
    bounds = _boundaries(workload, group)
    hops = sum(
        workload.link(a, b).transfer_s(workload.p2p_bytes)
        + workload.link(b, a).transfer_s(workload.p2p_bytes)
        for a, b in bounds
    )
    in_flight = schedule.in_flight_microbatches(pp, v, m)
    little = m * (float(per_stage.sum()) + hops) / max(in_flight, 1.0)  # Little's law at stage 0
    link_busy = max(
        (
            m * bounds.count(pair) * workload.p2p_bytes / workload.link(*pair).bandwidth_bytes_per_s
            for pair in bounds
        ),
        default=0.0,
    )
    total = max(base, little, link_busy) + hops
    return total, {"compute_s": m * slowest, "bubble_s": bubble, "exposed_pp_s": total - base}


def exposed_dp_s(workload: StepWorkload, group: PipelineGroup, overlap_fraction: float | None = None) -> float:
    """DP sync not hidden: stage s syncs after its last backward, hidden behind the drain of earlier stages
    (Σ_{s'<s} B_s') and ``overlap_fraction`` (default: the plan's) of its own last backward (bucketing)."""
    if overlap_fraction is None:
        overlap_fraction = workload.dp_overlap_fraction
    bwd = group.bwd_s.sum(axis=1)
    drain = np.concatenate([[0.0], np.cumsum(bwd)[:-1]])
    window = drain + overlap_fraction * bwd
    return float(np.maximum(0.0, workload.dp_sync_s.sum(axis=1) - window).max())


def pipeline_time_closed_form(workload: StepWorkload) -> tuple[float, dict[str, float]]:
    """Step time = max over groups (pipeline + exposed DP) + optimizer, with its breakdown (BREAKDOWN_KEYS).

    Pipeline of a group with T_s = Σ_c (F + B) of stage s per micro-batch, schedule bubble fraction β:
    base = m·max_s T_s + β·m·(Σ_s T_s − max_s T_s)/(pp − 1) (exact for 1F1B/GPipe/interleaved on uniform
    stages: (m + pp − 1)·T resp. (pp−1)/v·T of bubble), then max(base, Little's-law bound
    m·(Σ_s T_s + H)/in_flight, link-busy bound m·bytes/bandwidth per boundary) + H, where H is one forward
    and one backward traversal of every stage boundary (latency + bytes/bandwidth).
    Ignored (left to the simulator): contention between transfers of one replica on a link, overlap of
    the p2p transfers with compute beyond the fill/drain traversal, DP sync overlapping earlier
    micro-batches, stragglers. The breakdown's exposed TP/CP/EP are those of the slowest stage.
    """
    best: tuple[float, dict[str, float]] | None = None
    for group in workload.groups:
        pipeline, parts = _group_time(workload, group)
        exposed_dp = exposed_dp_s(workload, group)
        if best is None or pipeline + exposed_dp > best[0]:
            best = (pipeline + exposed_dp, {**parts, "exposed_dp_s": exposed_dp})
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
    assert tuple(breakdown) == BREAKDOWN_KEYS
    return total + workload.optimizer_s, breakdown


def peak_flops(instance: Instance, plan: Plan) -> float:
    """Σ over the plan's GPUs of the peak for the job's precision (bf16 or fp8), FLOP/s."""
    total = 0.0
    for stage_map, replicas in stage_maps(plan):
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
    workload = build_workload(instance, plan)
    step, breakdown = pipeline_time_closed_form(workload)
    job = instance.job
    flops = model_flops_per_step(job.model_spec, job.seq_len, job.global_batch_size)
    peak = peak_flops(instance, plan)
    memory = memory_per_gpu(instance, plan)
    return StepReport(
        step_time_s=step,
        mfu=flops / (peak * step),
        tokens_per_s=job.tokens_per_step / step,
        memory_gib_per_gpu=memory.total_gib,
        fits_memory=memory.fits,
        breakdown=breakdown,
        simulated=False,
        details={"lower_bound_s": flops / peak},
    )
