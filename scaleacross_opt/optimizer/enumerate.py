"""Exhaustive enumeration of the design space (small spaces only): the ground truth the CP-SAT
planner is checked against, and the exhaustive-search baseline.

Enumerates exactly the plans the CP-SAT model can express — degrees, schedule, per-building counts,
every layer split of its family (per-building stage sizes and the LM-head stage; the excess over the
model's layers, less than the number of other stages, trimmed one layer each from the first stages),
pp+dp groupings (every partition into groups, stage and replica splits, one even layer split),
network settings, and the gradient bucket sizes (the model's bucket factor) — with the same
pins for settings that cannot matter (cross-building settings when nothing crosses, the cross
algorithm unless DP crosses, the schedule when pp = 1). Structural rules are applied here; memory
is left to the validator.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import product

from ..schedules import get_schedule
from ..spec import CrossBuilding, Instance, NetworkConfig, Placement, Plan
from .cpsat.variables import split_network_options
from .placement import build_placement
from .space import DesignSpace


def _compositions(total: int, caps: list[int], min_parts: int) -> Iterator[list[int]]:
    """Vectors x with 0 ≤ x_i ≤ caps_i, Σ x = total and at least ``min_parts`` non-zero entries."""
    def rec(i: int, left: int) -> Iterator[list[int]]:
        if i == len(caps):
            if left == 0:
                yield []
            return
        for x in range(min(left, caps[i]) + 1):
            for rest in rec(i + 1, left - x):
                yield [x, *rest]

    for vector in rec(0, total):
        if sum(1 for x in vector if x) >= min_parts:
            yield vector


def _even_splits(layers: int, pp: int, v: int) -> Iterator[tuple[int, int]]:
    """(layers per regular stage, layers of the LM-head stage) that hold at least the model's layers."""
    if pp == 1:
        yield layers, layers
        return
    for even in range(v, layers + 1):
        for head in range(v, even + 1):
            if 0 <= (pp - 1) * even + head - layers <= pp - 2 and head + v * (pp - 1) <= layers:
                yield even, head


def _pp_splits(layers: int, stages: list[int], head_index: int, v: int) -> Iterator[tuple[list[int], int]]:
    """(layers per stage of each building, LM-head-stage layers) that hold at least the model's layers."""
    used = [b for b, s in enumerate(stages) if s]
    for values in product(range(v, layers + 1), repeat=len(used)):
        per = [0] * len(stages)
        for b, ell in zip(used, values, strict=True):
            per[b] = ell
        slots = sum(per[b] * stages[b] for b in used) - per[head_index]
        for head in range(v, per[head_index] + 1):
            if 0 <= slots + head - layers <= sum(stages) - 2 and head + v * (sum(stages) - 1) <= layers:
                yield per, head


def _placements(instance: Instance, mode: CrossBuilding, tp: int, cp: int, pp: int, dp: int, ep: int,
                v: int, head_stage: int) -> Iterator[Placement]:
    buildings = instance.cluster.buildings
    names = [b.name for b in buildings]
    layers = instance.job.model_spec.layers
    tc = tp * cp
    if mode is CrossBuilding.NONE or mode is CrossBuilding.DP:
        if mode is CrossBuilding.NONE:
            options = [[dp if i == j else 0 for i in range(len(buildings))] for j, b in enumerate(buildings)
                       if b.num_gpus >= dp * pp * tc]
        else:
            caps = [b.num_gpus // (pp * tc) for b in buildings]
            options = [x for x in _compositions(dp, caps, 2) if all(d * cp % ep == 0 for d in x if d)]
        for replicas in options:
            stages = [pp if d else 0 for d in replicas]
            for even, head in _even_splits(layers, pp, v):
                yield build_placement(mode, names, replicas, stages, [even] * len(names), head, head_stage,
                                      layers, v)
        return
    if mode is CrossBuilding.PP_DP:
        yield from _group_placements(instance, tc, pp, dp, cp, ep, v, head_stage)
        return
    caps = [b.num_gpus // (dp * tc) for b in buildings]
    if dp * cp % ep:
        return
    for stages in _compositions(pp, caps, 2):
        used = [b for b, s in enumerate(stages) if s]
        head_index = used[0] if head_stage == 0 else used[-1]
        for per, head in _pp_splits(layers, stages, head_index, v):
            replicas = [dp if s else 0 for s in stages]
            yield build_placement(mode, names, replicas, stages, per, head, head_stage, layers, v)


def _partitions(n: int) -> Iterator[list[int]]:
    """Group labels per building (−1: unused) in restricted-growth form: ≥ 2 groups, one of ≥ 2 buildings."""
    for labels in product(range(-1, n - 1), repeat=n):
        opened = -1
        for label in labels:
            if label > opened + 1:
                break
            opened = max(opened, label)
        else:
            sizes = [labels.count(g) for g in range(opened + 1)]
            if opened >= 1 and max(sizes) >= 2:
                yield list(labels)


def _group_placements(instance: Instance, tc: int, pp: int, dp: int, cp: int, ep: int, v: int,
                      head_stage: int) -> Iterator[Placement]:
    """pp+dp: every partition of (some) buildings into groups, every stage split inside each group
    (cluster order, ≥ 1 stage per building), every replica split over the groups; one even layer split."""
    buildings = instance.cluster.buildings
    names = [b.name for b in buildings]
    layers = instance.job.model_spec.layers
    for labels in _partitions(len(buildings)):
        members = [[b for b, g in enumerate(labels) if g == group] for group in range(max(labels) + 1)]
        splits = [[x for x in _compositions(pp, [pp] * len(m), len(m))] for m in members]
        for group_replicas in _compositions(dp, [dp] * len(members), len(members)):
            if any(r * cp % ep for r in group_replicas):
                continue
            for chosen in product(*splits):
                stages, replicas = [0] * len(names), [0] * len(names)
                for m, split, r in zip(members, chosen, group_replicas, strict=True):
                    for b, s in zip(m, split, strict=True):
                        stages[b], replicas[b] = s, r
                if any(replicas[b] * stages[b] * tc > buildings[b].num_gpus for b in range(len(names))):
                    continue
                for even, head in _even_splits(layers, pp, v):
                    yield build_placement(CrossBuilding.PP_DP, names, replicas, stages, [even] * len(names), head,
                                          head_stage, layers, v, groups=[max(g, 0) for g in labels])


def enumerate_plans(instance: Instance, space: DesignSpace) -> Iterator[Plan]:
    """Every distinct plan of ``space`` that meets the structural rules (memory unchecked)."""
    n, gbs = instance.num_gpus, instance.job.global_batch_size
    intra_algs, intra_transports = split_network_options(space.intra_network)
    cross_algs, cross_transports = split_network_options(space.cross_network) if space.cross_network else ([], [])
    pinned_pp1 = space.single_stage_schedule()
    seen: set[str] = set()
    for shape in space.shapes:
        for pp in space.pp:
            if n % (shape.tp * shape.cp * pp):
                continue
            dp = n // (shape.tp * shape.cp * pp)
            if gbs % (dp * shape.micro_batch_size) or (dp * shape.cp) % shape.ep:
                continue
            m = gbs // (dp * shape.micro_batch_size)
            for name, v in space.schedule_chunks():
                schedule = get_schedule(name)
                if schedule.check(pp, v, m) is not None or pp * v > instance.job.model_spec.layers:
                    continue
                if pp == 1 and (name, v) != pinned_pp1:
                    continue
                head_stage = schedule.head_stage(pp, v)
                for mode in space.cross_building:
                    for placement in _placements(instance, mode, shape.tp, shape.cp, pp, dp, shape.ep, v,
                                                 head_stage):
                        for zero, networks in product(space.zero_stages, _networks(
                                mode, intra_algs, intra_transports, cross_algs, cross_transports)):
                            plan = Plan(tp=shape.tp, cp=shape.cp, pp=pp, dp=dp, ep=shape.ep, virtual_stages=v,
                                        micro_batch_size=shape.micro_batch_size, schedule=name,
                                        recompute=shape.recompute, zero_stage=zero, placement=placement,
                                        network=networks, tp_comm_overlap=space.tp_comm_overlap)
                            for size in space.bucket_sizes(plan):
                                sized = plan.model_copy(update={"dp_bucket_params": size})
                                key = sized.model_dump_json()
                                if key not in seen:
                                    seen.add(key)
                                    yield sized


def _networks(mode, intra_algs, intra_transports, cross_algs, cross_transports) -> Iterator[NetworkConfig]:
    for alg, transport in product(intra_algs, intra_transports):
        intra = transport.with_algorithm(alg)
        if not cross_transports:
            yield NetworkConfig(intra_building=intra, cross_building=intra)
            continue
        transports = cross_transports[:1] if mode is CrossBuilding.NONE else cross_transports
        algorithms = cross_algs if mode in (CrossBuilding.DP, CrossBuilding.PP_DP) else cross_algs[:1]
        for cross_alg, cross_transport in product(algorithms, transports):
            yield NetworkConfig(intra_building=intra, cross_building=cross_transport.with_algorithm(cross_alg))
