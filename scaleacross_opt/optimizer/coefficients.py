"""Integer coefficients of the CP-SAT model, precomputed from the cost model.

Each coefficient is the cost model evaluated at one value of the factor it multiplies (a shard
shape, a ZeRO stage, a transport setting), rounded *down* so that the linearised objective stays a
lower bound of what the simulator charges for the same plan.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ..catalog import coefficients as co
from ..cost.compute import LayerKind, OpTimes, Shard, embedding_times, layer_kinds, layer_times, lm_head_times
from ..cost.layout import nvlink_domain
from ..cost.memory import activation_bytes_per_layer, layer_params
from ..cost.network import effective_path
from ..cost.step import cp_ring_step, cross_aggregate, ep_all_to_all, fabric_path, layer_comm, nvlink_path
from ..schedules import get_schedule
from ..spec import (
    Building,
    CollectiveAlgorithm,
    Instance,
    ModelSpec,
    NetworkConfig,
    Plan,
    Recompute,
    TrafficClassConfig,
)
from .cpsat.variables import Transport
from .space import DesignSpace, Shape

T = TypeVar("T")


@dataclass(frozen=True)
class OpShares:
    """Ranges of the shares of layers' fwd+bwd seconds: the least and largest forward share, the largest whole
    backward (B+W) and weight-gradient (W) shares."""

    forward_least: float
    forward_most: float
    backward_most: float
    weight_most: float

    @classmethod
    def of(cls, times: OpTimes) -> OpShares | None:
        """The shares of one layer's (or the LM head's) ``times``; None when it takes no time."""
        total = times.fwd_s + times.bwd_s
        if total <= 0:
            return None
        return cls(times.fwd_s / total, times.fwd_s / total, times.bwd_s / total, times.bwd_weight_s / total)

    def widen(self, other: OpShares | None) -> OpShares:
        """The ranges covering both."""
        if other is None:
            return self
        return OpShares(min(self.forward_least, other.forward_least), max(self.forward_most, other.forward_most),
                        max(self.backward_most, other.backward_most), max(self.weight_most, other.weight_most))


NO_SHARES = OpShares(1.0, 0.0, 0.0, 0.0)  # the empty range, which ``widen`` replaces


@dataclass(frozen=True)
class Coefficients:
    """Cost-model numbers the CP-SAT model multiplies its decision variables by (µs, MiB)."""

    # fwd+bwd per layer per micro-batch per building, incl. exposed TP/CP/EP, by whether the schedule pairs
    # micro-batches (``pairings``)
    layer_us: dict[tuple[Shape, str, bool], int]
    # its forward (F) and full backward (B+W) apart, each the least of any kind and transport, and its W
    # alone, the least of any kind: ZeRO-3's gathers stretch them apart (``cost.step._chunk_cost``:
    # max(F, g) + max(B+W, g), or max(F, g) + max(B, g) + W where the schedule splits the backward)
    layer_forward_least_us: dict[tuple[Shape, str, bool], int]
    layer_backward_least_us: dict[tuple[Shape, str, bool], int]
    layer_weight_least_us: dict[tuple[Shape, str], int]
    # models with layers of several kinds (MoE after dense layers): the MoE layer's layer_us, and what a
    # stage holding every dense layer saves against that (Σ over the dense layers of the positive
    # difference, rounded up); empty for models of one kind
    heavy_layer_us: dict[tuple[Shape, str, bool], int]
    light_discount_us: dict[tuple[Shape, str, bool], int]
    dense_layers: int  # layers of the cheaper kinds (what light_discount_us sums over)
    model_us: dict[tuple[Shape, bool], int]  # every layer (each of its kind) + embedding/LM head, fastest building
    # the step's compute on the busiest stage (m·t_max) is at least the whole batch's work over the cluster's
    # throughput: B/mbs passes of U (each layer and the head at its fastest building's least time) over
    # Σ_b N_b / (tp·cp·α_b) stage groups, α_b ≥ 1 building b's least slowdown on any of them
    compute_floor_us: dict[Shape, int]
    head_us: dict[tuple[Shape, str], int]  # embedding + LM head fwd+bwd per micro-batch per building
    # the weight-gradient op (W) per micro-batch of one layer (its costliest kind) / of the LM head, on the
    # slowest building's GPU, rounded up (what a stage may still run after its last B)
    layer_weight_us: dict[Shape, int]
    head_weight_us: dict[Shape, int]
    embedding_weight_us: dict[Shape, int]  # the embedding's W (its gradient's scatter-add), the same way
    # the forward (F) per micro-batch of one layer (its costliest kind, exposed comm included, over the
    # transports and pairings) / of the LM head / of the embedding, the same way
    layer_forward_us: dict[Shape, int]
    head_forward_us: dict[Shape, int]
    embedding_forward_us: dict[Shape, int]
    # activations kept per layer per micro-batch (cheapest layer kind), with the allocator's fragmentation share
    act_kib_per_layer: dict[Shape, float]
    moe_extra_act_kib_per_layer: dict[Shape, float]  # … what an MoE layer keeps beyond that (0: one kind)
    kiloparams_per_layer: dict[Shape, int]  # parameters one GPU holds per layer, thousands (rounded down)
    # … what an MoE layer holds beyond that (0 for a model of one kind); ≥ layers − dense_layers of a stage's
    # layers are MoE layers
    moe_extra_kiloparams_per_layer: dict[Shape, int]
    unsharded_bytes_per_param: dict[int, int]  # per ZeRO stage: bytes/param each GPU keeps whole
    sharded_kib_per_layer_pp: dict[int, float]  # DP-sharded state per unit of layers·pp
    capacity_kib: dict[str, int]  # HBM per GPU per building less the fixed overhead
    grad_kib_per_layer: dict[Shape, int]  # gradient bytes each GPU syncs per layer (ring at n = 2)
    synced_params_per_layer: dict[Shape, float]  # parameters behind grad_kib_per_layer (one GPU, one layer)
    # expert parameters one GPU holds per MoE layer, thousands (rounded down); their gradients sync in buckets of
    # their own over the dp·cp/ep expert-data-parallel ranks (0 for dense models)
    expert_kiloparams_per_layer: dict[Shape, int]
    forward_share: float  # the largest fwd ÷ (fwd+bwd) of any layer kind or LM head, shape, GPU and transport
    # the (least, largest) fwd ÷ (fwd+bwd) of any layer kind, shape, GPU and transport, by the shape's recompute
    # mode (layers only, not the LM head)
    layer_forward_shares: dict[Recompute, tuple[float, float]]
    # the largest share of fwd+bwd a chunk's last backward op takes (the op its gradient buckets are released
    # in), by whether the schedule splits the backward: W ÷ (fwd+bwd) if it does, (B+W) ÷ (fwd+bwd) if not
    last_op_share: dict[bool, float]
    intra_us_per_mib: dict[Transport, float]  # DP sync per MiB per GPU inside a building (bandwidth part)
    intra_hop_us: int  # one point-to-point hop inside a building
    cross_us_per_mib: dict[Transport, float]  # per MiB of the whole gradient over the best cross route
    cross_hop_us: dict[Transport, int]  # one-way latency of the shortest cross-building route
    cross_algorithm_steps: dict[CollectiveAlgorithm, str]  # how latency steps grow: 'linear', 'log', 'buildings'
    layer_grad_mib: float  # non-expert gradient MiB of one whole layer (all TP shards) at the n = 2 ring volume
    pp_link_mib_per_chunk: float  # activation + gradient MiB crossing one boundary per step, per virtual chunk
    optimizer_us_per_layer_pp: dict[str, float]  # optimizer step per unit of layers·pp on this building's GPU
    # ZeRO-3 weight all-gathers (before forward and before backward) of one layer per micro-batch, per layer
    # kind (``layer_kinds``): µs of the (non-expert, expert) weights one GPU holds at the n = 2 ring volume,
    # over the shape's best DP path / over the NICs (the objective scales each part by its group's ring)
    # (these depend on the shape's (tp, ep) only, and are keyed by it: the model sums 30–50 of them, not
    # the 1,000+ shapes)
    zero3_pair_us: dict[tuple[int, int], tuple[tuple[float, float], ...]]
    zero3_nic_pair_us: dict[tuple[int, int], tuple[tuple[float, float], ...]]
    zero3_step_us: dict[tuple[int, int], int]  # latency of one ZeRO-3 all-gather ring step on the best DP path
    zero3_nic_step_us: dict[tuple[int, int], int]  # … on the NICs
    zero3_on_nic: dict[tuple[int, int], bool]  # no pipeline depth fits a DP group of this tp in one NVLink domain
    # NIC seconds (µs, each way) of one layer's CP ring for one micro-batch on a GPU of the building: cp − 1 steps
    # forward, 2(cp − 1) backward and cp − 1 more under full recompute (``cost.step._chunk_cost``), each moving
    # the step's NIC share (``cost.step.cp_ring_step``; 0 where the ring stays in an NVLink domain); the least
    # over the space's intra-building transports
    cp_nic_us_per_layer: dict[tuple[Shape, str], int]
    # … of one MoE layer's EP all-to-all (dispatch + combine once forward, again backward and once more under full
    # recompute, exposed or hidden: ``cost.step.ep_split``), the share leaving the NVLink domain
    # (``cost.step.ep_all_to_all``); 0 for ep = 1 and dense models
    ep_nic_us_per_layer: dict[tuple[Shape, str], int]
    layer_kinds: tuple[LayerKind, ...]  # the model's layer kinds, MoE first
    # parameters of all layers (every shard), Mi-parameters: what DP across moves — non-expert, and experts
    model_param_mib: float
    model_expert_param_mib: float
    layer_dense_param_mib: float  # the non-expert parameters of one whole layer (least over kinds), Mi-params
    layer_expert_param_mib: float  # … its expert parameters (least over kinds: 0 unless every kind has experts)
    # per MiB over the route between buildings i < j, with every GPU of the larger end connected / with one
    # NVLink domain's connections
    pair_route_us_per_mib: dict[Transport, dict[tuple[int, int], float]]
    pair_flat_route_us_per_mib: dict[Transport, dict[tuple[int, int], float]]
    pair_hop_us: dict[tuple[int, int], int]  # one-way latency of the route between buildings i < j


# ---------------------------------------------------------------------------------------------------
# Building the coefficients from the cost model
# ---------------------------------------------------------------------------------------------------

MIB = 1 << 20
KIB = 1 << 10
# Connection counts at which transports are compared for dominance (the cost model's ECMP and window
# effects depend on how many flows share a path).
_FLOW_PROBES = (1, 4, 16, 64, 256, 1024, 16384, 1 << 20)


def _probe_plan(shape: Shape, transport: TrafficClassConfig, tp_comm_overlap: bool, schedule: str) -> Plan:
    """A plan carrying only what per-layer costs depend on (degrees of the shard, network settings, whether
    the schedule pairs micro-batches)."""
    return Plan(tp=shape.tp, cp=shape.cp, pp=1, dp=1, ep=shape.ep, micro_batch_size=shape.micro_batch_size,
                schedule=schedule, recompute=shape.recompute, zero_stage=1, tp_comm_overlap=tp_comm_overlap,
                network=NetworkConfig(intra_building=transport, cross_building=transport))


def _kinds(model: ModelSpec) -> list[LayerKind]:
    kinds = [LayerKind.MOE] if model.moe is not None else []
    if model.moe is None or model.moe.first_dense_layers:
        kinds.append(LayerKind.DENSE)
    return kinds


def _transport_signature(instance: Instance, config: TrafficClassConfig, cross: bool) -> list[float]:
    """Bandwidths (negated, so smaller is better) and latencies the cost model derives from ``config``."""
    out: list[float] = []
    if not cross:
        for building in instance.cluster.buildings:
            path = fabric_path(building, config)
            out += [-path.bandwidth_bytes_per_s, path.latency_s]
        return out
    names = [b.name for b in instance.cluster.buildings]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            route = instance.cluster.route(a, b)
            for flows in _FLOW_PROBES:
                path = effective_path(route.bandwidth_gbps, route.latency_us, route.loss_rate, config, flows,
                                      co.CROSS_BUILDING_PATHS)
                out += [-path.bandwidth_bytes_per_s, path.latency_s]
    return out


def undominated(instance: Instance, options: tuple[TrafficClassConfig, ...], cross: bool
                ) -> tuple[TrafficClassConfig, ...]:
    """Drop transport settings that the cost model rates no better than another on every path and
    flow count (ties keep the first option, so defaults win). Collective algorithms are kept apart."""
    if not options:
        return options
    signatures = {}
    for option in options:
        key = option.model_copy(update={"collective_algorithm": options[0].collective_algorithm})
        if key not in signatures:
            signatures[key] = _transport_signature(instance, key, cross)
    kept: list[TrafficClassConfig] = []
    items = list(signatures.items())
    for i, (key, sig) in enumerate(items):
        dominated = any(
            all(o <= s for o, s in zip(other, sig, strict=True)) and (other != sig or j < i)
            for j, (_, other) in enumerate(items) if j != i
        )
        if not dominated:
            kept.append(key)
    return tuple(o for o in options
                 if o.model_copy(update={"collective_algorithm": options[0].collective_algorithm}) in kept)


def prune_space(instance: Instance, space: DesignSpace) -> DesignSpace:
    """The space with dominated transport settings removed (same optimum, far fewer symmetric plans)."""
    return replace(space, intra_network=undominated(instance, space.intra_network, cross=False),
                   cross_network=undominated(instance, space.cross_network, cross=True))


def pairings(space: DesignSpace) -> list[bool]:
    """Whether the space's schedules pair micro-batches (DualPipe hides the EP all-to-all behind the other
    micro-batch's compute), each value that occurs."""
    return sorted({get_schedule(name).pairs_microbatches for name in space.schedules})


def _compute_floor_us(instance: Instance, shape: Shape, item_s: dict[str, dict[object, float]],
                      counts: Counter) -> int:
    """m·t_max ≥ (B/mbs)·U·tp·cp / Σ_b (N_b/α_b), in µs rounded down: the busiest stage's compute per step.

    Per micro-batch, stage s on building b runs its layers and heads in ≥ α_b × their least times on any
    building (U sums those: every layer of each kind and the embedding/LM head), so t_max·Σ_s 1/α_b(s) ≥ U on
    every pipeline; summed over the dp pipelines, Σ over all stage groups of tp·cp GPUs (every GPU is
    used) gives t_max ≥ dp·U / Σ_b (N_b / (tp·cp·α_b)), and m = B / (dp·mbs). One GPU type: B·tp·cp·U / (N·mbs).
    """
    least = {item: min(times[item] for times in item_s.values()) for item in next(iter(item_s.values()))}
    slowdown = {name: min((t / least[item] for item, t in times.items() if least[item] > 0), default=1.0)
                for name, times in item_s.items()}
    work = sum(counts[item] * t for item, t in least.items() if item != "head") + least["head"]
    groups = sum(instance.cluster.building(name).num_gpus / slowdown[name] for name in item_s)
    return int(instance.job.global_batch_size * shape.tp * shape.cp * work
               / (shape.micro_batch_size * groups) * 1e6)


def _layer_s(instance: Instance, shape: Shape, building: Building, transports: list[Transport],
             space: DesignSpace) -> tuple[dict[bool, dict[LayerKind, float]], dict[bool, tuple[float, float]],
                                          OpShares, tuple[float, float], float]:
    """Seconds of one layer of each kind the model has (fwd+bwd, one micro-batch, exposed comm included),
    the least over the space's transports, by whether the schedule pairs micro-batches (``pairings``); by
    pairing, the least forward and the least full backward of any kind and transport; the ranges of each op's
    share (``OpShares``) over kinds, transports and pairings; the shortest and the longest weight-gradient op
    (W) of any kind; and the longest forward (exposed comm included) of any kind, transport and pairing
    (seconds)."""
    model, job = instance.job.model_spec, instance.job
    shard = Shard(job.seq_len, shape.micro_batch_size, shape.tp, shape.cp, shape.ep)
    out: dict[bool, dict[LayerKind, float]] = {pairs: {} for pairs in pairings(space)}
    passes = dict.fromkeys(out, (math.inf, math.inf))
    shares, weight_s, forward_s = NO_SHARES, (math.inf, 0.0), 0.0
    for kind in _kinds(model):
        compute = layer_times(model, kind, shard, building.gpu_spec, job.precision, shape.recompute)
        weight_s = (min(weight_s[0], compute.bwd_weight_s), max(weight_s[1], compute.bwd_weight_s))
        for pairs, per_kind in out.items():
            probe = next(name for name in space.schedules if get_schedule(name).pairs_microbatches == pairs)
            for t in transports:
                comm = layer_comm(instance, _probe_plan(shape, t.config, space.tp_comm_overlap, probe), building,
                                  kind).values()
                times = compute + OpTimes(sum(f for f, _ in comm), sum(b for _, b in comm), 0.0)
                per_kind[kind] = min(per_kind.get(kind, math.inf), times.fwd_s + times.bwd_s)
                passes[pairs] = (min(passes[pairs][0], times.fwd_s), min(passes[pairs][1], times.bwd_s))
                forward_s = max(forward_s, times.fwd_s)
                shares = shares.widen(OpShares.of(times))
    return out, passes, shares, weight_s, forward_s


def _cp_nic_us(instance: Instance, shape: Shape, building: Building, transports: list[Transport],
               space: DesignSpace) -> int:
    """µs one layer's CP ring keeps the GPU's NIC busy: cp − 1 steps in each of 3 passes (4 under full recompute),
    the least over the transports."""
    steps = (shape.cp - 1) * (4 if shape.recompute is Recompute.FULL else 3)
    return int(steps * 1e6 * min(
        cp_ring_step(instance, _probe_plan(shape, t.config, space.tp_comm_overlap, space.schedules[0]),
                     building).nic_s for t in transports))


def _ep_nic_us(instance: Instance, shape: Shape, building: Building, transports: list[Transport],
               space: DesignSpace) -> int:
    """µs one MoE layer's all-to-alls keep the GPU's NIC busy: 2 passes (3 under full recompute), the least over
    the transports."""
    passes = 3 if shape.recompute is Recompute.FULL else 2
    return int(passes * 1e6 * min(
        ep_all_to_all(instance, _probe_plan(shape, t.config, space.tp_comm_overlap, space.schedules[0]),
                      building).nic_s for t in transports))


def build_coefficients(instance: Instance, space: DesignSpace) -> Coefficients:
    """Evaluate the cost model at every factor value the CP-SAT model multiplies by."""
    model, job = instance.job.model_spec, instance.job
    buildings = instance.cluster.buildings
    n = instance.num_gpus
    from .cpsat.variables import split_network_options

    _, intra_transports = split_network_options(space.intra_network)
    cross_algorithms, cross_transports = (split_network_options(space.cross_network) if space.cross_network
                                          else ([], []))
    kinds = _kinds(model)
    layer_us, model_us, head_us, act, kiloparams, grad, zero3, zero3_step = {}, {}, {}, {}, {}, {}, {}, {}
    compute_floor: dict[Shape, int] = {}
    cp_nic: dict[tuple[Shape, str], int] = {}
    ep_nic: dict[tuple[Shape, str], int] = {}
    layer_weight_us, head_weight_us, embedding_weight_us = {}, {}, {}
    layer_forward_us, head_forward_us, embedding_forward_us = {}, {}, {}
    layer_forward_least_us: dict[tuple[Shape, str, bool], int] = {}
    layer_backward_least_us: dict[tuple[Shape, str, bool], int] = {}
    layer_weight_least_us: dict[tuple[Shape, str], int] = {}
    zero3_nic_pair, zero3_nic_step, synced_params, expert_kiloparams = {}, {}, {}, {}
    heavy_us: dict[tuple[Shape, str, bool], int] = {}
    discount_us: dict[tuple[Shape, str, bool], int] = {}
    zero3_nic: dict[tuple[int, int], bool] = {}
    moe_extra_kiloparams: dict[Shape, int] = {}
    moe_extra_act: dict[Shape, float] = {}
    counts = Counter(layer_kinds(model))

    def us_per_byte(bandwidth_bytes_per_s: float) -> float:  # µs of the pair of gathers at n = 2, per weight
        return co.WEIGHT_BYTES / bandwidth_bytes_per_s * 1e6
    full_params = min(sum(vars(layer_params(model, k, 1, 1)).values()) for k in kinds)
    shares, head_shares = NO_SHARES, NO_SHARES
    # buildings alike in everything but their name price a layer alike: each shape's layer is costed once per kind
    # of building (five identical buildings of 20,480 GPUs: once, not five times)
    alike = {b.name: b.model_dump_json(exclude={"name"}) for b in buildings}
    costed: dict[tuple[Callable, Shape, str], Any] = {}

    def once_alike(cost: Callable[[Instance, Shape, Building, list[Transport], DesignSpace], T], shape: Shape,
                   building: Building) -> T:
        key = (cost, shape, alike[building.name])
        if key not in costed:
            costed[key] = cost(instance, shape, building, intra_transports, space)
        return costed[key]

    layer_forward: dict[Recompute, tuple[float, float]] = {}
    for shape in space.shapes:
        shard = Shard(job.seq_len, shape.micro_batch_size, shape.tp, shape.cp, shape.ep)
        whole = dict.fromkeys(pairings(space), math.inf)
        item_s: dict[str, dict[object, float]] = {}  # building → layer kind or "head" → least seconds
        for b in buildings:
            head = lm_head_times(model, shard, b.gpu_spec, job.precision)
            head_us[(shape, b.name)] = int((head.fwd_s + head.bwd_s) * 1e6)
            head_weight_us[shape] = max(head_weight_us.get(shape, 0), math.ceil(head.bwd_weight_s * 1e6))
            head_forward_us[shape] = max(head_forward_us.get(shape, 0), math.ceil(head.fwd_s * 1e6))
            embedding = embedding_times(model, shard, b.gpu_spec)
            embedding_weight_us[shape] = max(embedding_weight_us.get(shape, 0),
                                             math.ceil(embedding.bwd_weight_s * 1e6))
            embedding_forward_us[shape] = max(embedding_forward_us.get(shape, 0), math.ceil(embedding.fwd_s * 1e6))
            times, passes, layer_shares, weight_s, forward_s = once_alike(_layer_s, shape, b)
            for pairs, (forward_least, backward_least) in passes.items():
                layer_forward_least_us[(shape, b.name, pairs)] = int(forward_least * 1e6)
                layer_backward_least_us[(shape, b.name, pairs)] = int(backward_least * 1e6)
            layer_weight_least_us[(shape, b.name)] = int(weight_s[0] * 1e6)
            layer_weight_us[shape] = max(layer_weight_us.get(shape, 0), math.ceil(weight_s[1] * 1e6))
            layer_forward_us[shape] = max(layer_forward_us.get(shape, 0), math.ceil(forward_s * 1e6))
            shares = shares.widen(layer_shares)
            least, most = layer_forward.get(shape.recompute, (1.0, 0.0))
            layer_forward[shape.recompute] = (min(least, layer_shares.forward_least),
                                              max(most, layer_shares.forward_most))
            head_shares = head_shares.widen(OpShares.of(head))
            for pairs, per_kind in times.items():
                key = (shape, b.name, pairs)
                layer_us[key] = int(min(per_kind.values()) * 1e6)
                if len(per_kind) > 1:
                    heavy = per_kind[LayerKind.MOE]
                    heavy_us[key] = int(heavy * 1e6)
                    discount_us[key] = math.ceil(sum(counts[kind] * max(0.0, heavy - t)
                                                     for kind, t in per_kind.items()) * 1e6)
                whole[pairs] = min(whole[pairs], sum(counts[kind] * t for kind, t in per_kind.items())
                                   + head.fwd_s + head.bwd_s)
            item_s[b.name] = {kind: min(per_kind[kind] for per_kind in times.values()) for kind in counts}
            cp_nic[(shape, b.name)] = once_alike(_cp_nic_us, shape, b) if shape.cp > 1 else 0
            ep_nic[(shape, b.name)] = (once_alike(_ep_nic_us, shape, b)
                                       if shape.ep > 1 and LayerKind.MOE in kinds else 0)
            item_s[b.name]["head"] = head.fwd_s + head.bwd_s
        compute_floor[shape] = _compute_floor_us(instance, shape, item_s, counts)
        for pairs, seconds in whole.items():
            model_us[(shape, pairs)] = int(seconds * 1e6)
        # the allocator's fragmentation grows with the activations (cost.memory), so it is charged to them
        act_per_kind = [activation_bytes_per_layer(model, k, job.seq_len, shape.micro_batch_size, shape.tp,
                                                   shape.cp, shape.recompute, job.precision)
                        * (1 + co.MEMORY_FRAGMENTATION_FRACTION) / KIB for k in kinds]
        act[shape] = min(act_per_kind)
        moe_extra_act[shape] = act_per_kind[0] - min(act_per_kind)  # an MoE layer's beyond the cheapest kind's
        held_per_kind = [sum(vars(layer_params(model, k, shape.tp, shape.ep)).values()) for k in kinds]
        kiloparams[shape] = int(min(held_per_kind) / 1000)
        # an MoE layer's weights beyond the cheapest kind's (kinds: MoE first), on the GPU
        moe_extra_kiloparams[shape] = int((held_per_kind[0] - min(held_per_kind)) / 1000)
        # RS of fp32 grads is the smallest sync any ZeRO stage does; at n = 2 a ring moves half of it, and
        # the members of one DP group in an NVLink domain (at most domain ÷ tp) share their NICs. The objective
        # scales it by the dp·cp ranks' ring; experts sync over dp·cp/ep, so they count only when ep = 1.
        sharing = max(max(1, nvlink_domain(b) // shape.tp) for b in buildings)
        synced = min(p.dense + (p.expert if shape.ep == 1 else 0.0)
                     for p in (layer_params(model, k, shape.tp, shape.ep) for k in kinds))
        grad[shape] = int(synced * co.GRAD_REDUCE_BYTES / 2 / KIB / sharing)
        synced_params[shape] = synced
        expert_kiloparams[shape] = int(layer_params(model, LayerKind.MOE, shape.tp, shape.ep).expert / 1000
                                       if LayerKind.MOE in kinds else 0)
        # ZeRO-3 gathers the bf16 weights before forward and again before backward, over NVLink only
        # when the whole DP group shares a node (possible only while tp·cp leaves room in the node).
        sharding = (shape.tp, shape.ep)
        if sharding in zero3:
            continue
        # the non-expert weights' DP group is at GPU stride tp, the experts' at tp·ep (``cost.layout``)
        (nic_bw, nic_latency), (gather_bw, gather_latency), on_nic = _dp_path_best(instance, space, shape.tp,
                                                                                   intra_transports)
        (expert_nic_bw, _), (expert_gather_bw, _), _ = _dp_path_best(instance, space, shape.tp * shape.ep,
                                                                     intra_transports)
        zero3_nic[sharding] = on_nic
        held = [layer_params(model, kind, shape.tp, shape.ep) for kind in kinds]
        zero3[sharding] = tuple((p.dense * us_per_byte(gather_bw), p.expert * us_per_byte(expert_gather_bw))
                                for p in held)
        zero3_nic_pair[sharding] = tuple((p.dense * us_per_byte(nic_bw), p.expert * us_per_byte(expert_nic_bw))
                                         for p in held)
        zero3_step[sharding] = int(gather_latency * 1e6)
        zero3_nic_step[sharding] = int(nic_latency * 1e6)
    sharded = {zero: full_params * (co.WEIGHT_BYTES + co.GRAD_BYTES + co.OPTIMIZER_BYTES - _unsharded_bytes(zero))
               / n / KIB for zero in space.zero_stages}
    capacity = {b.name: int((b.gpu_spec.hbm_gib - co.MEMORY_FIXED_OVERHEAD_GIB) * (1 << 30) / KIB) for b in buildings}
    intra_us = {t: min(MIB / fabric_path(b, t.config).bandwidth_bytes_per_s * 1e6 for b in buildings)
                for t in intra_transports}
    intra_hop = int(min(fabric_path(b, t.config).latency_s for b in buildings for t in intra_transports) * 1e6)
    cross_us, cross_hop = {}, {}
    names = [b.name for b in buildings]
    routes = [instance.cluster.route(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    for t in cross_transports:
        paths = [effective_path(r.bandwidth_gbps, r.latency_us, r.loss_rate, t.config, n, co.CROSS_BUILDING_PATHS)
                 for r in routes]
        cross_us[t] = min(MIB / (p.bandwidth_bytes_per_s * n) * 1e6 for p in paths)  # n connections' goodput
        cross_hop[t] = int(min(p.latency_s for p in paths) * 1e6)
    steps = {CollectiveAlgorithm.RING: "linear", CollectiveAlgorithm.TREE: "log", CollectiveAlgorithm.PAT: "log",
             CollectiveAlgorithm.HIERARCHICAL: "buildings"}
    optimizer_us = {b.name: full_params * co.ADAM_BYTES_PER_PARAM / n
                    / (b.gpu_spec.hbm_bandwidth_gb_per_s * 1e9 * co.HBM_EFFICIENCY) * 1e6 for b in buildings}
    # DP across buildings: a flat ring's groups hold one connection per member of an NVLink domain at the
    # building edge (members per domain × groups ≤ the domain), hierarchical rings one per GPU; aggregate
    # goodput grows with connections, so the largest count bounds each from above.
    domain = max(nvlink_domain(b) for b in buildings)

    def per_pair(t: Transport, connections: Callable[[str, str], int]) -> dict[tuple[int, int], float]:
        out = {}
        for i, a in enumerate(names):
            for j, b in enumerate(names[i + 1:], start=i + 1):
                goodput = cross_aggregate(instance, a, b, t.config, connections(a, b)).bandwidth_bytes_per_s
                out[(i, j)] = min(MIB / goodput * 1e6, CLAMP_US_PER_MIB)
        return out

    pair_route_us = {t: per_pair(t, lambda a, b: max(instance.cluster.building(x).num_gpus for x in (a, b)))
                     for t in cross_transports}
    pair_flat_us = {t: per_pair(t, lambda a, b: domain) for t in cross_transports}
    pair_hop = {(i, j): _clamp_us(instance.cluster.route(a, b).latency_us)
                for i, a in enumerate(names) for j, b in enumerate(names[i + 1:], start=i + 1)}
    clamp = _clamp_us
    cross_us = {t: min(x, CLAMP_US_PER_MIB) for t, x in cross_us.items()}
    intra_us = {t: min(x, CLAMP_US_PER_MIB) for t, x in intra_us.items()}
    cross_hop = {t: clamp(x) for t, x in cross_hop.items()}
    return Coefficients(
        layer_us=layer_us, layer_forward_least_us=layer_forward_least_us,
        layer_backward_least_us=layer_backward_least_us, layer_weight_least_us=layer_weight_least_us,
        heavy_layer_us=heavy_us, light_discount_us=discount_us,
        model_us=model_us, compute_floor_us=compute_floor,
        head_us=head_us, layer_weight_us=layer_weight_us, head_weight_us=head_weight_us,
        embedding_weight_us=embedding_weight_us, layer_forward_us=layer_forward_us, head_forward_us=head_forward_us,
        embedding_forward_us=embedding_forward_us, act_kib_per_layer=act, moe_extra_act_kib_per_layer=moe_extra_act,
        kiloparams_per_layer=kiloparams, moe_extra_kiloparams_per_layer=moe_extra_kiloparams,
        unsharded_bytes_per_param={zero: _unsharded_bytes(zero) for zero in space.zero_stages},
        sharded_kib_per_layer_pp=sharded, capacity_kib=capacity, grad_kib_per_layer=grad,
        synced_params_per_layer=synced_params, expert_kiloparams_per_layer=expert_kiloparams,
        forward_share=max(shares.forward_most, head_shares.forward_most), layer_forward_shares=layer_forward,
        # ZeRO-3's exposed gathers add the same to fwd and B (never to W): the B+W share tends to ½ at most
        last_op_share={True: max(shares.weight_most, head_shares.weight_most),
                       False: max(shares.backward_most, head_shares.backward_most, 0.5)},
        intra_us_per_mib=intra_us, intra_hop_us=intra_hop, cross_us_per_mib=cross_us, cross_hop_us=cross_hop,
        cross_algorithm_steps={a: steps[a] for a in cross_algorithms},
        layer_grad_mib=min(layer_params(model, k, 1, 1).dense for k in kinds) * co.GRAD_REDUCE_BYTES / 2 / MIB,
        pp_link_mib_per_chunk=job.global_batch_size * job.seq_len * model.hidden_size * 2 / MIB,
        optimizer_us_per_layer_pp=optimizer_us, zero3_pair_us=zero3, zero3_nic_pair_us=zero3_nic_pair,
        zero3_step_us=zero3_step, zero3_nic_step_us=zero3_nic_step, zero3_on_nic=zero3_nic, layer_kinds=tuple(kinds),
        cp_nic_us_per_layer=cp_nic, ep_nic_us_per_layer=ep_nic,
        dense_layers=sum(count for kind, count in counts.items() if kind is not LayerKind.MOE) if len(kinds) > 1 else 0,
        model_param_mib=sum(layer_params(model, kind, 1, 1).dense for kind in layer_kinds(model)) / MIB,
        model_expert_param_mib=sum(layer_params(model, kind, 1, 1).expert for kind in layer_kinds(model)) / MIB,
        layer_dense_param_mib=min(layer_params(model, kind, 1, 1).dense for kind in kinds) / MIB,
        layer_expert_param_mib=min(layer_params(model, kind, 1, 1).expert for kind in kinds) / MIB,
        pair_route_us_per_mib=pair_route_us, pair_flat_route_us_per_mib=pair_flat_us, pair_hop_us=pair_hop,
    )


def _dp_path_best(instance: Instance, space: DesignSpace, stride: int, transports: list[Transport]
                  ) -> tuple[tuple[float, float], tuple[float, float], bool]:
    """Best-case (bandwidth bytes/s, latency s) of a DP collective's path for a group at GPU ``stride`` (tp
    for the non-expert weights, tp·ep for the experts) on the NICs — the NICs of the group's members in one
    NVLink domain (at most domain ÷ stride) — and over any path (NVLink if some pipeline depth leaves a
    whole DP group, tp·cp·dp = N/pp GPUs, inside one node), and whether the path is always the NICs."""
    paths = [fabric_path(b, t.config) for b in instance.cluster.buildings for t in transports]
    sharing = max(max(1, nvlink_domain(b) // stride) for b in instance.cluster.buildings)
    fabric = max(p.bandwidth_bytes_per_s for p in paths)
    # a flat ring runs at its slowest crossed level: the members' NICs, and NVLink where several share a
    # domain (``cost.collectives.span_collective_s``)
    nvlink = max(nvlink_path(b).bandwidth_bytes_per_s for b in instance.cluster.buildings)
    nic = (max(fabric, min(fabric * sharing, nvlink)), min(p.latency_s for p in paths))
    if instance.num_gpus // max(space.pp) <= node_gpus(instance):
        nvlink = max(b.gpu_spec.nvlink_bandwidth_gb_per_s * 1e9 for b in instance.cluster.buildings)
        return nic, (max(nic[0], nvlink), min(nic[1], co.NVLINK_LATENCY_US * 1e-6)), False
    return nic, nic, True


def node_gpus(instance: Instance) -> int:
    """GPUs of the largest NVLink-connected node of the cluster."""
    return max(min(b.gpus_per_node, b.gpu_spec.nvlink_domain_size) for b in instance.cluster.buildings)


# Coefficients beyond these are clamped (a plan that slow is never a candidate; the simulator still
# charges it in full), so that scaled sums stay inside CP-SAT's 64-bit range.
CLAMP_US = 10**9  # 1000 s
CLAMP_US_PER_MIB = 1e6  # 1 s per MiB (8 Mb/s)


def _clamp_us(value: float) -> int:
    return int(min(value, CLAMP_US))


def _unsharded_bytes(zero: int) -> int:
    """Bytes per parameter each GPU keeps whole under ZeRO stage ``zero`` (the rest is split over DP)."""
    return ((co.WEIGHT_BYTES if zero < 3 else 0) + (co.GRAD_BYTES if zero < 2 else 0)
            + (co.OPTIMIZER_BYTES if zero < 1 else 0))
