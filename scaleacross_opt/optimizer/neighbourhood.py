"""The plan neighbourhood for local search: valid plans one move away from a plan, and random plans.

A *move* changes one decision and repairs only what it must:

- placement (``Move.PLACEMENT``): move a factor f > 1 of one of tp, cp, pp, dp to another of them
  (tp·cp·pp·dp kept); EP to the next smaller or larger allowed degree; the cross-building dimension
  (every other allowed one, at its default counts, with each cross-building network option); the split —
  one replica unit between two groups of buildings (dp, pp+dp) or one stage between two buildings of a
  pipeline (pp, pp+dp); the layer split
  under pp — one layer of stage capacity from one building's stages (or the LM-head stage) to another's,
  in the family the CP-SAT model expresses (``placement.materialize_layers`` with per-building ℓ_b);
- schedule (``Move.SCHEDULE``): another (schedule, virtual stages) pair, micro-batch size, recompute
  mode, ZeRO stage, TP/GEMM overlap, the gradient bucket to the next size of ``DesignSpace.bucket_sizes``
  up or down (every neighbour's bucket is on that ladder, ``DesignSpace.on_bucket_ladder``: a move that
  changes dp·cp moves the ladder, and none goes below Megatron-Core's default, which the CP-SAT bound
  assumes);
- network (``Move.NETWORK``): one traffic class (intra- or cross-building) to another option of the space.

Placements are built by ``optimizer.placement.build_placement`` with the per-building counts and the
model's layer-split family (equal stages, the excess trimmed from the first stages, the LM-head stage
set by the schedule), so every neighbour is a plan the CP-SAT model and the enumerator can express.
Default counts of a dimension: one building for ``none``; replicas (dp) or stages (pp) apportioned to
the buildings in proportion to their GPUs (largest remainder, capped by capacity); ``pp+dp`` pairs
consecutive buildings into groups (replicas apportioned to groups, stages inside each). Every
neighbour passes ``validation.plan_checks.validate_plan``.
Nothing is simulated; the output is sorted by canonical JSON, so it is deterministic. Pass the
planner's pruned space (``coefficients.prune_space``) to keep the network moves few.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator
from enum import StrEnum
from itertools import permutations

from ..schedules import get_schedule
from ..spec import CrossBuilding, Instance, NetworkConfig, Placement, Plan, TrafficClassConfig
from ..validation.plan_checks import validate_plan
from .placement import build_placement, materialize_layers
from .space import DesignSpace, divisors

RANDOM_PLAN_TRIES = 200  # draws before random_plan gives up (most draws fail a divisibility rule)
PRODUCT_DEGREES = ("tp", "cp", "pp", "dp")


class Move(StrEnum):
    """The kinds of moves (coordinate blocks of a coordinate descent)."""

    PLACEMENT = "placement"
    SCHEDULE = "schedule"
    NETWORK = "network"


Counts = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # replicas, stages, group per building


def neighbours(instance: Instance, space: DesignSpace, plan: Plan,
               moves: tuple[Move, ...] = tuple(Move)) -> list[Plan]:
    """Valid plans one move of the kinds ``moves`` away from ``plan`` (placement and network filled),
    without ``plan`` itself, deduplicated and sorted by canonical JSON."""
    assert plan.placement is not None and plan.network is not None
    generators = {Move.PLACEMENT: _placement_moves, Move.SCHEDULE: _schedule_moves, Move.NETWORK: _network_moves}
    return _valid_distinct(instance, space, plan, (candidate for kind in moves
                                                   for candidate in generators[kind](instance, space, plan)))


def other_dimensions(instance: Instance, space: DesignSpace, plan: Plan) -> list[Plan]:
    """The valid plans that differ from ``plan`` only in the cross-building dimension and its network (the
    dimension moves among ``neighbours``)."""
    assert plan.placement is not None and plan.network is not None
    return _valid_distinct(instance, space, plan, _dimension_moves(instance, space, plan))


def _valid_distinct(instance: Instance, space: DesignSpace, plan: Plan,
                    candidates: Iterable[Plan | None]) -> list[Plan]:
    """The valid ``candidates`` other than ``plan``, on the bucket ladder, deduplicated, by canonical JSON."""
    own = plan.model_dump_json()
    found: dict[str, Plan] = {}
    for candidate in candidates:
        if candidate is None:
            continue
        candidate = space.on_bucket_ladder(candidate)
        key = candidate.model_dump_json()
        if key != own and key not in found and not validate_plan(candidate, instance):
            found[key] = candidate
    return [found[key] for key in sorted(found)]


def random_plan(instance: Instance, space: DesignSpace, rng: random.Random) -> Plan | None:
    """A valid plan drawn at random from ``space`` (degrees, schedule, cross-building dimension at its
    default counts, network), or None after ``RANDOM_PLAN_TRIES`` failed draws."""
    n, gbs = instance.num_gpus, instance.job.global_batch_size
    chunks = space.schedule_chunks()
    if not chunks:
        return None
    for _ in range(RANDOM_PLAN_TRIES):
        tp, cp = rng.choice(space.tp), rng.choice(space.cp)
        pps = [p for p in space.pp if n % (tp * cp * p) == 0]
        if not pps:
            continue
        pp = rng.choice(pps)
        dp, mbs = n // (tp * cp * pp), rng.choice(space.micro_batch_sizes)
        eps = [e for e in space.ep if dp * cp % e == 0]
        if gbs % (dp * mbs) or not eps:
            continue
        name, v = rng.choice(chunks)
        intra = rng.choice(space.intra_network)
        plan = Plan(tp=tp, cp=cp, pp=pp, dp=dp, ep=rng.choice(eps), virtual_stages=v, micro_batch_size=mbs,
                    schedule=name, recompute=rng.choice(space.recompute), zero_stage=rng.choice(space.zero_stages),
                    tp_comm_overlap=space.tp_comm_overlap,
                    network=NetworkConfig(intra_building=intra, cross_building=rng.choice(space.cross_network or
                                                                                          (intra,))))
        placed = place(instance, _pinned(space, plan), rng.choice(space.cross_building))
        if placed is not None and not validate_plan(placed, instance):
            return space.on_bucket_ladder(placed)
    return None


def place(instance: Instance, plan: Plan, mode: CrossBuilding, counts: Counts | None = None) -> Plan | None:
    """``plan`` with a placement of dimension ``mode`` — ``counts`` (replicas, stages and group per
    building) or the mode's default counts — in the model's layer-split family; None when it cannot be
    built (not yet validated)."""
    counts = counts or default_counts(instance, plan, mode)
    if counts is None:
        return None
    placement = _placement(instance, plan, mode, counts)
    return None if placement is None else plan.model_copy(update={"placement": placement})


def default_counts(instance: Instance, plan: Plan, mode: CrossBuilding) -> Counts | None:
    """Replicas, stages and group per building of the default placement of dimension ``mode``."""
    buildings = instance.cluster.buildings
    gpus = [b.num_gpus for b in buildings]
    nb, tc, unit = len(buildings), plan.tp * plan.cp, _replica_unit(plan)
    if mode is CrossBuilding.NONE:
        home = next((b for b in range(nb) if gpus[b] >= plan.num_gpus), None)
        if home is None:
            return None
        return (tuple(plan.dp * (b == home) for b in range(nb)), tuple(plan.pp * (b == home) for b in range(nb)),
                tuple(0 for _ in range(nb)))
    if mode is CrossBuilding.DP:
        replicas = _apportion(plan.dp, gpus, [g // (plan.pp * tc) for g in gpus], unit)
        return None if replicas is None else (tuple(replicas), tuple(plan.pp * (r > 0) for r in replicas),
                                              tuple(range(nb)))
    if mode is CrossBuilding.PP:
        stages = _apportion(plan.pp, gpus, [g // (plan.dp * tc) for g in gpus], 1)
        return None if stages is None else (tuple(plan.dp * (s > 0) for s in stages), tuple(stages),
                                            tuple(0 for _ in range(nb)))
    groups = [b // 2 for b in range(nb)]  # consecutive pairs (an odd last building is a group of its own)
    members = [[b for b in range(nb) if groups[b] == g] for g in range(max(groups) + 1)]
    group_replicas = _apportion(plan.dp, [sum(gpus[b] for b in m) for m in members],
                                [plan.dp] * len(members), unit)
    if group_replicas is None or len(members) < 2:
        return None
    replicas, stages = [0] * nb, [0] * nb
    for m, r in zip(members, group_replicas, strict=True):
        split = _apportion(plan.pp, [gpus[b] for b in m], [gpus[b] // (r * tc) if r else 0 for b in m], 1)
        if split is None or r == 0:
            return None
        for b, s in zip(m, split, strict=True):
            replicas[b], stages[b] = r, s
    return tuple(replicas), tuple(stages), tuple(groups)


def _apportion(total: int, weights: list[int], caps: list[int], unit: int) -> list[int] | None:
    """``total`` (a multiple of ``unit``) split into multiples of ``unit`` in proportion to ``weights``,
    each at most its cap: floor shares, then the largest remainders (Hamilton's method); None if the caps
    cannot hold it."""
    units, cap_units = total // unit, [c // unit for c in caps]
    if total % unit or sum(cap_units) < units:
        return None
    weight = sum(weights)
    shares = [min(c, units * w // weight) for c, w in zip(cap_units, weights, strict=True)]
    while sum(shares) < units:
        i = max((i for i in range(len(shares)) if shares[i] < cap_units[i]),
                key=lambda i: (units * weights[i] / weight - shares[i], -i))
        shares[i] += 1
    return [s * unit for s in shares]


def _replica_unit(plan: Plan) -> int:
    """Smallest replica count a building can hold with its EP groups whole: (replicas·cp) % ep = 0."""
    return plan.ep // math.gcd(plan.ep, plan.cp)


def layer_split(layers: int, pp: int, v: int) -> tuple[int, int] | None:
    """(layers per stage ℓ, layers of the LM-head stage) of the model's family holding the model's layers:
    the smallest ℓ ≥ ⌈layers / pp⌉, the head stage as full as it can be, the excess (≤ pp − 2) trimmed
    from the first stages."""
    if pp * v > layers:
        return None
    for even in range(max(-(-layers // pp), v), layers + 1):
        for head in range(even, v - 1, -1):
            if 0 <= (pp - 1) * even + head - layers <= max(pp - 2, 0) and head + v * (pp - 1) <= layers:
                return even, head
    return None


def _placement(instance: Instance, plan: Plan, mode: CrossBuilding, counts: Counts) -> Placement | None:
    replicas, stages, groups = counts
    layers = instance.job.model_spec.layers
    split = layer_split(layers, plan.pp, plan.virtual_stages)
    if split is None or not any(r and s for r, s in zip(replicas, stages, strict=True)):
        return None
    even, head = split
    names = [b.name for b in instance.cluster.buildings]
    try:
        return build_placement(mode, names, list(replicas), list(stages), [even] * len(names), head,
                               get_schedule(plan.schedule).head_stage(plan.pp, plan.virtual_stages), layers,
                               plan.virtual_stages, groups=list(groups))
    except ValueError:
        return None


def counts_of(instance: Instance, plan: Plan) -> Counts:
    """Replicas, stages and group per building of ``plan``'s placement (dp: each building its own group)."""
    assert plan.placement is not None
    index = {b.name: i for i, b in enumerate(instance.cluster.buildings)}
    nb = len(index)
    replicas, stages, groups = [0] * nb, [0] * nb, list(range(nb))
    for share in plan.placement.buildings:
        b = index[share.building]
        replicas[b], stages[b] = share.dp_replicas, share.pp_stages
        if plan.placement.cross_building is not CrossBuilding.DP:
            groups[b] = share.group
    if plan.placement.cross_building is not CrossBuilding.DP:
        used = {index[s.building] for s in plan.placement.buildings}
        groups = [g if b in used else 0 for b, g in enumerate(groups)]
    return tuple(replicas), tuple(stages), tuple(groups)


def _pinned(space: DesignSpace, plan: Plan) -> Plan:
    """A pp = 1 plan runs every schedule alike: pin the space's single-stage (schedule, v)."""
    pinned = space.single_stage_schedule() if plan.pp == 1 else None
    if pinned is None:
        return plan
    return plan.model_copy(update={"schedule": pinned[0], "virtual_stages": pinned[1]})


def _replaced(instance: Instance, plan: Plan, **update: object) -> Plan | None:
    """``plan`` with ``update`` applied, keeping its per-building counts and, under pp, its layer split
    (its per-building capacities read with the changed plan's LM-head stage, re-materialised for its v)
    where the changed plan can hold it; else the default split. A tuned split of a mixed-GPU pipeline is
    worth keeping across a schedule change (hetero 405B: ZB-V → DualPipe keeping it 6.738 → 6.629 s
    simulated, the default split 7.705 s)."""
    assert plan.placement is not None
    changed = plan.model_copy(update=update)
    if plan.placement.cross_building is CrossBuilding.PP:
        kept = _with_capacities(instance, changed, *_layer_capacities(changed))
        if kept is not None and not validate_plan(kept, instance):
            return kept
    return place(instance, changed, plan.placement.cross_building, counts_of(instance, plan))


def _layer_capacities(plan: Plan) -> tuple[list[int], list[int], int]:
    """A PP-across plan's stages per building, each building's most layers per (non-LM-head) stage and the
    LM-head stage's layers: the family parameters ``materialize_layers`` rebuilds its split from."""
    placement = plan.placement
    assert placement is not None and placement.layers_per_stage is not None
    layers = placement.layers_per_stage
    head = get_schedule(plan.schedule).head_stage(plan.pp, plan.virtual_stages)
    stages = [share.pp_stages for share in placement.buildings]
    owner = [b for b, count in enumerate(stages) for _ in range(count)]
    most = [max((layers[s] for s in range(plan.pp) if owner[s] == b and s != head), default=0)
            for b in range(len(stages))]
    return stages, most, layers[head]


def _with_capacities(instance: Instance, plan: Plan, stages: list[int], most: list[int],
                     head_layers: int) -> Plan | None:
    """``plan`` (PP across) with the split ``materialize_layers`` builds from these capacities for its own
    schedule and v (None when no split of that family holds the model)."""
    placement = plan.placement
    assert placement is not None
    v = plan.virtual_stages
    head = get_schedule(plan.schedule).head_stage(plan.pp, v)
    try:
        split = materialize_layers(stages, most, instance.job.model_spec.layers, v, head_layers, head)
    except ValueError:
        return None
    if min(split) < v:  # a stage too small for its chunks (trimming never goes below v)
        return None
    return plan.model_copy(update={"placement": placement.model_copy(update={"layers_per_stage": split})})


def _placement_moves(instance: Instance, space: DesignSpace, plan: Plan) -> Iterator[Plan | None]:
    assert plan.placement is not None
    mode = plan.placement.cross_building
    allowed = {"tp": space.tp, "cp": space.cp, "pp": space.pp}
    for a, b in permutations(PRODUCT_DEGREES, 2):
        for f in divisors(getattr(plan, a))[1:]:
            update = {a: getattr(plan, a) // f, b: getattr(plan, b) * f}
            if all(update[k] in allowed[k] for k in update if k in allowed):
                moved = _pinned(space, plan.model_copy(update=update))
                if (moved.dp * moved.cp) % moved.ep == 0:
                    yield place(instance, moved, mode)
    eps = sorted(space.ep)
    if plan.ep in eps:
        i = eps.index(plan.ep)
        for ep in eps[max(i - 1, 0):i] + eps[i + 1:i + 2]:
            yield place(instance, plan.model_copy(update={"ep": ep}), mode)
    yield from _dimension_moves(instance, space, plan)
    yield from _split_moves(instance, plan)
    yield from _layer_moves(instance, plan)


def _dimension_moves(instance: Instance, space: DesignSpace, plan: Plan) -> Iterator[Plan | None]:
    """Every other allowed cross-building dimension, at its default counts, with the plan's cross-building network
    option and with each other one of the space: the option that suits one dimension's traffic rarely suits
    another's (cross-region: a ZB-V PP-across plan's option made its DP-across twin's closed form 22 s, against
    1.07 s with another), so a climb would never see the move pay with the network kept."""
    assert plan.placement is not None
    for other in space.cross_building:
        if other is not plan.placement.cross_building:
            moved = place(instance, plan, other)
            yield moved
            if moved is not None and other is not CrossBuilding.NONE:
                yield from _class_moves(moved, "cross_building", space.cross_network)


def _split_moves(instance: Instance, plan: Plan) -> Iterator[Plan | None]:
    """One replica unit between two groups, or one stage between two buildings of a pipeline."""
    assert plan.placement is not None
    mode = plan.placement.cross_building
    replicas, stages, groups = counts_of(instance, plan)
    nb, unit = len(replicas), _replica_unit(plan)
    if mode in (CrossBuilding.DP, CrossBuilding.PP_DP):
        for g, h in permutations(sorted(set(groups)), 2):
            members_g = [b for b in range(nb) if groups[b] == g and stages[b]]
            members_h = [b for b in range(nb) if groups[b] == h]
            if not members_g or replicas[members_g[0]] < unit + (mode is CrossBuilding.PP_DP) * unit:
                continue
            new = list(replicas)
            for b in members_g:
                new[b] -= unit
            for b in members_h:
                new[b] += unit
            new_stages = [plan.pp if mode is CrossBuilding.DP and new[b] else s for b, s in enumerate(stages)]
            yield place(instance, plan, mode, (tuple(new), tuple(new_stages), groups))
    if mode in (CrossBuilding.PP, CrossBuilding.PP_DP):
        for b, c in permutations(range(nb), 2):
            if groups[b] != groups[c] or not stages[b] or (mode is CrossBuilding.PP_DP and
                                                          (stages[b] < 2 or not stages[c])):
                continue
            new_stages, new = list(stages), list(replicas)
            new_stages[b] -= 1
            new_stages[c] += 1
            new[c] = max(replicas[b], replicas[c])
            new[b] = new[b] if new_stages[b] else 0
            yield place(instance, plan, mode, (tuple(new), tuple(new_stages), groups))


def _layer_moves(instance: Instance, plan: Plan) -> Iterator[Plan]:
    """PP across: ℓ_x − 1 and ℓ_y + 1 for two slots x ≠ y among the buildings' most layers per (non-head)
    stage and the LM-head stage's layers, the split rebuilt by ``materialize_layers`` (the excess trimmed
    from the first stages). When x has more stages than y, that no longer holds the model; the missing layers
    go to y (rounded up to y's stages), or to y rounded down and the rest to the LM-head stage (hetero 405B,
    8 H100 and 2 B200 stages: ℓ (head, H100, B200) (9, 11, 20) → (9, 10, 24) or (10, 10, 23))."""
    assert plan.placement is not None
    if plan.placement.cross_building is not CrossBuilding.PP:
        return
    stages, most, head_layers = _layer_capacities(plan)
    head = get_schedule(plan.schedule).head_stage(plan.pp, plan.virtual_stages)
    owner = [b for b, count in enumerate(stages) for _ in range(count)]
    slots = [b for b in range(len(stages)) if most[b]] + [None]  # None: the LM-head stage
    for x, y in permutations(slots, 2):
        capacity = list(most)
        head_moved = head_layers - (x is None) + (y is None)
        if x is not None:
            capacity[x] -= 1
        if y is not None:
            capacity[y] += 1
        missing = instance.job.model_spec.layers - head_moved - sum(
            capacity[owner[s]] for s in range(plan.pp) if s != head)
        if missing <= 0:
            variants = [(capacity, head_moved)]
        elif y is None:
            variants = [(capacity, head_moved + missing)]
        else:
            per_stage, rest = divmod(missing, stages[y] - (owner[head] == y))
            variants = [(_added(capacity, y, per_stage + (rest > 0)), head_moved)]
            if rest and x is not None:
                variants.append((_added(capacity, y, per_stage), head_moved + rest))
        for held, head_held in variants:
            moved = _with_capacities(instance, plan, stages, held, head_held)
            if moved is not None:
                yield moved


def _added(values: list[int], index: int, amount: int) -> list[int]:
    """``values`` with ``amount`` added at ``index`` (a copy)."""
    return [value + amount * (i == index) for i, value in enumerate(values)]


def _schedule_moves(instance: Instance, space: DesignSpace, plan: Plan) -> Iterator[Plan | None]:
    if plan.pp > 1:
        for name, v in space.schedule_chunks():
            if (name, v) != (plan.schedule, plan.virtual_stages):
                yield _replaced(instance, plan, schedule=name, virtual_stages=v)
    for field, options in (("micro_batch_size", space.micro_batch_sizes), ("recompute", space.recompute),
                           ("zero_stage", space.zero_stages)):
        for value in options:
            if value != getattr(plan, field):
                yield _replaced(instance, plan, **{field: value})
    allowed = instance.search.tp_comm_overlap
    if allowed is None or (not plan.tp_comm_overlap) in allowed:
        yield _replaced(instance, plan, tp_comm_overlap=not plan.tp_comm_overlap)
    yield from _bucket_moves(space, plan)


def _bucket_moves(space: DesignSpace, plan: Plan) -> Iterator[Plan]:
    """The gradient bucket at the nearest size of the space and the next one up and down (``neighbours``
    leaves out the plan itself)."""
    sizes = space.bucket_sizes(plan)
    here = sizes.index(space.on_bucket_ladder(plan).dp_bucket_params)
    for i in (here - 1, here, here + 1):
        if 0 <= i < len(sizes):
            yield plan.model_copy(update={"dp_bucket_params": sizes[i]})


def _network_moves(instance: Instance, space: DesignSpace, plan: Plan) -> Iterator[Plan | None]:
    assert plan.network is not None and plan.placement is not None
    classes = [("intra_building", space.intra_network)]
    if plan.placement.cross_building is not CrossBuilding.NONE:
        classes.append(("cross_building", space.cross_network))
    for field, options in classes:
        yield from _class_moves(plan, field, options)


def _class_moves(plan: Plan, field: str, options: tuple[TrafficClassConfig, ...]) -> Iterator[Plan]:
    """The network of traffic class ``field`` (``NetworkConfig`` field) to each other of ``options``."""
    assert plan.network is not None
    for option in options:
        if option != getattr(plan.network, field):
            yield plan.model_copy(update={"network": plan.network.model_copy(update={field: option})})
