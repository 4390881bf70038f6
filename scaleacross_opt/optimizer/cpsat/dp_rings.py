"""DP groups and the rings that join buildings, for the DP sync and ZeRO-3 gather terms: the sizes n = dp·cp a
group may have, the edges of a ring over the used buildings (dp across) or over one building per group (pp+dp),
a flat ring's slowest hop and slowest edge per layer, the hierarchical inner ring, and the latency steps of a
sync over n ranks."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ...cost.layout import nvlink_domain
from ...spec import CollectiveAlgorithm, CrossBuilding
from ..coefficients import Coefficients
from .terms import HORIZON_US, new_var
from .variables import PlanVars

DpGroups = list[tuple[int, cp_model.IntVar]]
RingEdges = list[tuple[tuple[int, int], list[cp_model.IntVar]]]  # (i < j, the literals that make i–j a ring edge)
INNER_WIDE = (16, 64, 256)  # inner rings of at least w members move ≥ 2(w − 1)/w of the bytes


@dataclass(frozen=True)
class InnerRing:
    """A DP group across buildings under the hierarchical algorithm: the inner ring over one building's members
    (``cost.collectives.span_collective_s``) has ≥ ``members`` of them (0: no bound), ≥ w where the literal of
    (w, literal) in ``wide`` is set (w in INNER_WIDE); its n_in − 1 steps each pay the fabric's latency."""

    members: cp_model.IntVar
    wide: tuple[tuple[int, cp_model.IntVar], ...]


def inner_ring(pv: PlanVars, groups: DpGroups) -> InnerRing | None:
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
    members = new_var(model, "inner_ring_members", top)
    when = [crosses, pv.cross_algorithm.lit(hierarchical), *full]
    for b, building in enumerate(buildings):
        held = new_var(model, f"dp_group_members[{building.name}]", top)
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


def dp_group_sizes(pv: PlanVars) -> DpGroups:
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


def cyclic_successors(pv: PlanVars, members: list[cp_model.IntVar], name: str, also: list[cp_model.IntVar]
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


def ring_successors(pv: PlanVars) -> RingEdges:
    """DP across: the edges of a ring over the used buildings in list order, as a DP-across ring runs."""
    if CrossBuilding.DP not in pv.mode.values:
        return []
    return cyclic_successors(pv, pv.used, "ring", [pv.mode.lit(CrossBuilding.DP)])


def group_ends(pv: PlanVars, last: bool) -> list[cp_model.IntVar]:
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


def first_stage_ring_edges(pv: PlanVars) -> RingEdges:
    """pp+dp: the edges of the first stage's DP ring, which joins the groups' first buildings in list order."""
    if not pv.group_replicas:
        return []
    return cyclic_successors(pv, group_ends(pv, last=False), "first_stage_ring", [])


def inter_group_pairs(pv: PlanVars) -> dict[tuple[int, int], cp_model.IntVar]:
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


def at_least_cheapest_pair(pv: PlanVars, var: cp_model.IntVar, costs: dict[tuple[int, int], int],
                           pairs: dict[tuple[int, int], cp_model.IntVar]) -> None:
    """pp+dp: ``var`` ≥ the least cost of a pair of buildings in different groups (``inter_group_pairs``): for
    each threshold t, ``var`` ≥ t unless a pair cheaper than t may be such a pair (the solver, minimising,
    marks every one that is)."""
    if not pairs:
        return
    pp_dp = pv.mode.lit(CrossBuilding.PP_DP)
    for t in sorted(set(costs.values())):
        cheaper = [pairs[pair].Not() for pair, cost in costs.items() if cost < t and pair in pairs]
        pv.model.Add(var >= t).OnlyEnforceIf([pp_dp, *cheaper])


def ring_hop_us(pv: PlanVars, coeffs: Coefficients, edges: RingEdges, name: str,
                inter_group: dict[tuple[int, int], cp_model.IntVar]) -> cp_model.IntVar:
    """One-way latency (µs) of a flat DP ring's step across buildings: the slowest route of the ring over its
    buildings, the wrap-around included (``cost.step.span_levels``), so at least the shortest route's, that
    of every ring edge in ``edges`` (``ring_successors``, ``first_stage_ring_edges``) and, under pp+dp,
    the shortest between two groups (``at_least_cheapest_pair``)."""
    hops = coeffs.pair_hop_us or {(0, 0): 0}
    hop = pv.model.NewIntVar(min(hops.values()), max(hops.values()), name)
    for pair, when in edges:
        pv.model.Add(hop >= hops[pair]).OnlyEnforceIf(when)
    at_least_cheapest_pair(pv, hop, hops, inter_group)
    return hop


def slowest_edge_us_per_layer(pv: PlanVars, layer_mib: float, pair_us_per_mib: dict[tuple[int, int], float],
                              name: str, edges: RingEdges, inter_group: dict[tuple[int, int], cp_model.IntVar],
                              cap: int | None = None) -> cp_model.IntVar:
    """``layer_mib`` over a DP ring's slowest building edge (µs), at the per-pair µs/MiB given: at least the best
    pair's, that of every ring edge in ``edges`` and, under pp+dp, the best between two groups
    (``at_least_cheapest_pair``). Costs are clamped at ``cap`` (default: × the model's layers stays within
    the horizon)."""
    if cap is None:
        cap = HORIZON_US // max(1, pv.instance.job.model_spec.layers)
    cost = {pair: min(cap, int(layer_mib * us)) for pair, us in pair_us_per_mib.items()}
    edge = pv.model.NewIntVar(min(cost.values()), max(cost.values()), f"slowest_edge_us_per_layer[{name}]")
    for pair, when in edges:
        pv.model.Add(edge >= cost[pair]).OnlyEnforceIf(when)
    at_least_cheapest_pair(pv, edge, cost, inter_group)
    return edge


def sync_steps(algorithm: CollectiveAlgorithm, linear: bool, d: int, tree_ring: list[cp_model.IntVar] | None
               ) -> list[tuple[int, list[cp_model.IntVar]]]:
    """Latency steps of a DP sync over d ranks, each with the literals it also needs: n − 1 where they grow
    ``linear``-ly (the ring), else ⌈log2 n⌉ — and n − 1 under ``tree_ring`` for the tree (``tree_runs_ring``)."""
    log_steps = math.ceil(math.log2(max(d, 2)))
    cases = [((d - 1) if linear else log_steps, [])]
    if algorithm is CollectiveAlgorithm.TREE and tree_ring is not None and d - 1 > log_steps:
        cases.append((d - 1, tree_ring))
    return cases


def tree_runs_ring(pv: PlanVars) -> list[cp_model.IntVar] | None:
    """When the DP sync is a reduce-scatter (ZeRO-1..3), which NCCL runs as a ring even where the tree
    algorithm is chosen (``cost.collectives.flat_collective_s``: the tree is an all-reduce algorithm), so its
    latency steps grow as n − 1: the enforcement literals of that case ([] always, None never)."""
    scatter = [lit for zero, lit in zip(pv.zero.values, pv.zero.lits, strict=True) if zero >= 1]
    if not scatter:
        return None
    if len(scatter) == len(pv.zero.values):
        return []
    return [pv.zero.any_of(pv.model, "dp_sync_is_reduce_scatter", lambda zero: zero >= 1)]
