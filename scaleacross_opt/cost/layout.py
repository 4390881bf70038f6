"""The resolved plan: a filled plan laid out on the instance's GPUs, built once per (instance, plan).

Cost, memory and the simulator read this one object instead of re-deriving the layout (torchtitan's
``ParallelDims`` is the model).

**Rank order** (Megatron-LM's, with PP outermost): inside one pipeline stage, rank
r = tp_rank + tp·(cp_rank + cp·dp_rank); a building holds the ranks of its replicas of a stage
consecutively, and consecutive ranks fill NVLink domains (nodes) in order. So

- a TP group is tp consecutive GPUs (one NVLink domain; the validator requires it);
- a CP group is cp GPUs at stride tp: min(cp, domain ÷ tp) of them share a domain;
- an EP group is ep of a stage's dp·cp ranks at stride tp (Megatron-Core's expert layout
  tp-ep-dp): min(ep, domain ÷ tp) share a domain;
- a DP group (gradient sync and ZeRO sharding: the dp·cp ranks of one TP rank of one stage) is at
  stride tp: min(replicas·cp in a building, domain ÷ tp) members share a domain, the rest spread
  over nodes (one NIC rail each) and, when the stage's replicas live in several buildings, over
  buildings; the expert DP group (dp·cp ÷ ep ranks) is at stride tp·ep;
- PP neighbours are different nodes (a stage fills whole nodes) and, where the stage → building
  map changes, different buildings.

``GroupSpan`` records, per group, its members per NVLink domain, the nodes per building and the
buildings it covers: the per-level bytes of every collective follow from it (``cost.collectives``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ..schedules.registry import get_schedule
from ..spec.cluster import Building
from ..spec.instance import Instance
from ..spec.network import NetworkConfig
from ..spec.plan import CrossBuilding, Placement, Plan
from .compute import LayerKind, layer_kinds


@dataclass(frozen=True)
class GroupSpan:
    """How the members of one communication group spread over NVLink domains, nodes and buildings.

    ``per_domain``: members sharing one NVLink domain (the smallest over the buildings);
    ``domains``: NVLink domains holding members in the building with the most of them;
    ``buildings``: the buildings holding members, with ``members`` in each.
    """

    size: int
    per_domain: int
    domains: int
    buildings: tuple[str, ...]
    members: tuple[int, ...]

    @property
    def crosses_domains(self) -> bool:
        """Some members talk over the scale-out fabric (different domains or buildings)."""
        return self.domains > 1 or len(self.buildings) > 1

    @property
    def crosses_buildings(self) -> bool:
        """Some members are in different buildings."""
        return len(self.buildings) > 1

    @property
    def inner_size(self) -> int:
        """Members in the building holding the most of them (the inner level of a hierarchical collective)."""
        return max(self.members)


def nvlink_domain(building: Building) -> int:
    """GPUs of one NVLink (scale-up) domain in ``building``: the GPU's domain, capped by the building."""
    return min(building.gpu_spec.nvlink_domain_size, building.num_gpus)


def group_span(size: int, stride: int, members: dict[str, int], buildings: dict[str, Building]) -> GroupSpan:
    """Span of a group of ``size`` members at GPU stride ``stride``, ``members[b]`` of them in building b.

    Members are consecutive at that stride, so min(members_b, domain_b ÷ stride) share a domain (one
    when the stride fills a domain) and the building's members cover ⌈members_b ÷ that⌉ domains.
    """
    per_domain, domains = size, 1
    for name, count in members.items():
        fit = max(1, min(count, nvlink_domain(buildings[name]) // stride))
        per_domain = min(per_domain, fit)
        domains = max(domains, math.ceil(count / fit))
    return GroupSpan(size, per_domain, domains, tuple(members), tuple(members.values()))


def local_span(size: int, stride: int, building: Building) -> GroupSpan:
    """Span of a group of ``size`` members at GPU stride ``stride`` inside one building (TP: stride 1;
    CP and EP: stride tp)."""
    return group_span(size, stride, {building.name: size}, {building.name: building})


def require_filled(plan: Plan) -> tuple[Placement, NetworkConfig]:
    """The plan's placement and network; ValueError unless both are filled and the layer split has pp entries."""
    if plan.placement is None or plan.network is None or plan.placement.layers_per_stage is None:
        raise ValueError("plan.placement (with layers_per_stage) and plan.network must be filled "
                         "(plan_defaults.fill_defaults)")
    if len(plan.placement.layers_per_stage) != plan.pp:
        raise ValueError(f"layers_per_stage has {len(plan.placement.layers_per_stage)} entries, pp={plan.pp}")
    return plan.placement, plan.network


def model_order(plan: Plan) -> list[tuple[int, int]]:
    """(stage, chunk) pairs in the order a micro-batch's forward visits them."""
    schedule = get_schedule(plan.schedule)
    pp, v = plan.pp, plan.virtual_stages
    return [sc for _, sc in sorted((schedule.chunk_stage(pp, v, c, s), (s, c)) for s in range(pp) for c in range(v))]


def stage_maps(plan: Plan) -> list[tuple[tuple[str, ...], int]]:
    """Distinct stage → building maps of the plan's pipelines with their replica counts.

    none/dp: each share holds whole replicas in one building; pp: shares chain their stages in list
    order and hold all dp replicas; pp+dp: the shares of one group chain their stages and the group
    holds its dp_replicas (that of its first share). Identical maps are merged.
    """
    placement, _ = require_filled(plan)
    maps: dict[tuple[str, ...], int] = {}
    if placement.cross_building in (CrossBuilding.NONE, CrossBuilding.DP):
        for share in placement.buildings:
            key = (share.building,) * plan.pp
            maps[key] = maps.get(key, 0) + share.dp_replicas
    else:
        groups: dict[int, list] = {}
        for share in placement.buildings:
            group = 0 if placement.cross_building is CrossBuilding.PP else share.group
            groups.setdefault(group, []).append(share)
        for shares in groups.values():
            key = tuple(b for share in shares for b in [share.building] * share.pp_stages)
            if len(key) != plan.pp:
                raise ValueError(f"buildings {[s.building for s in shares]} hold {len(key)} stages, pp={plan.pp}")
            replicas = plan.dp if placement.cross_building is CrossBuilding.PP else shares[0].dp_replicas
            maps[key] = maps.get(key, 0) + replicas
    if sum(maps.values()) != plan.dp:
        raise ValueError(f"placement holds {sum(maps.values())} replicas, dp={plan.dp}")
    return list(maps.items())


def chunk_layer_kinds(instance: Instance, plan: Plan) -> list[list[list[LayerKind]]]:
    """Kinds of the layers held by [stage][chunk], in model order given the schedule's chunk mapping.

    Stage s's layers are split over its v chunks as evenly as possible (the first chunks get one more).
    """
    placement, _ = require_filled(plan)
    pp, v = plan.pp, plan.virtual_stages
    counts = [[n // v + (1 if c < n % v else 0) for c in range(v)] for n in placement.layers_per_stage]
    kinds = layer_kinds(instance.job.model_spec)
    if sum(placement.layers_per_stage) != len(kinds):
        raise ValueError(f"layers_per_stage sums to {sum(placement.layers_per_stage)}, model has {len(kinds)}")
    out: list[list[list[LayerKind]]] = [[[] for _ in range(v)] for _ in range(pp)]
    start = 0
    for s, c in model_order(plan):
        out[s][c] = kinds[start : start + counts[s][c]]
        start += counts[s][c]
    return out


@dataclass(frozen=True, eq=False)
class ResolvedPlan:
    """A filled plan on an instance: where every stage, replica and communication group lives."""

    instance: Instance
    plan: Plan
    pipelines: tuple[tuple[tuple[str, ...], int], ...]  # distinct stage → building maps with replica counts
    order: tuple[tuple[int, int], ...]  # (stage, chunk) in forward model order
    kinds: tuple[tuple[tuple[LayerKind, ...], ...], ...]  # [stage][chunk] layer kinds

    @property
    def placement(self) -> Placement:
        """The plan's placement (filled)."""
        assert self.plan.placement is not None  # guaranteed by ``resolve``
        return self.plan.placement

    @property
    def network(self) -> NetworkConfig:
        """The plan's network settings (filled)."""
        assert self.plan.network is not None  # guaranteed by ``resolve``
        return self.plan.network

    @property
    def num_microbatches(self) -> int:
        """Micro-batches per replica per step."""
        return self.plan.num_microbatches(self.instance.job.global_batch_size)

    @cached_property
    def buildings(self) -> dict[str, Building]:
        """Every building of the cluster by name."""
        return {b.name: b for b in self.instance.cluster.buildings}

    @cached_property
    def stage_replicas(self) -> tuple[dict[str, int], ...]:
        """Per stage: building → replicas holding that stage there, in placement order."""
        out: list[dict[str, int]] = [{} for _ in range(self.plan.pp)]
        for stage_map, replicas in self.pipelines:
            for s, name in enumerate(stage_map):
                out[s][name] = out[s].get(name, 0) + replicas
        return tuple(out)

    def dp_span(self, stage: int) -> GroupSpan:
        """The DP group of ``stage`` (dp·cp ranks of one TP rank) over the buildings holding that stage."""
        cp = self.plan.cp
        members = {name: replicas * cp for name, replicas in self.stage_replicas[stage].items()}
        return group_span(self.plan.dp * cp, self.plan.tp, members, self.buildings)

    def expert_dp_span(self, stage: int) -> GroupSpan:
        """The expert-DP group of ``stage``: dp·cp ÷ ep ranks at stride tp·ep."""
        ep, cp = self.plan.ep, self.plan.cp
        members = {name: max(1, replicas * cp // ep) for name, replicas in self.stage_replicas[stage].items()}
        return group_span(max(1, self.plan.dp * cp // ep), self.plan.tp * ep, members, self.buildings)

    @cached_property
    def pipeline_names(self) -> tuple[str, ...]:
        """A name per distinct pipeline of ``pipelines``: its buildings in stage order (numbered when several)."""
        numbered = len(self.pipelines) > 1
        return tuple("+".join(dict.fromkeys(stage_map)) + (f"#{index}" if numbered else "")
                     for index, (stage_map, _) in enumerate(self.pipelines))

    @cached_property
    def boundaries(self) -> tuple[tuple[int, int], ...]:
        """(src stage, dst stage) of consecutive chunks in model order (chunk wrap-arounds included; a
        V-shaped schedule's turn stays on one stage)."""
        return tuple((a[0], b[0]) for a, b in zip(self.order, self.order[1:], strict=False))


def resolve(instance: Instance, plan: Plan) -> ResolvedPlan:
    """Lay ``plan`` (placement and network filled) out on ``instance``; ValueError if inconsistent."""
    require_filled(plan)
    kinds = chunk_layer_kinds(instance, plan)
    return ResolvedPlan(
        instance=instance,
        plan=plan,
        pipelines=tuple(stage_maps(plan)),
        order=tuple(model_order(plan)),
        kinds=tuple(tuple(tuple(chunk) for chunk in stage) for stage in kinds),
    )
