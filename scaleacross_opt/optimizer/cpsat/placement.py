"""Placement constraints: how the GPU grid maps onto buildings.

- none: one building holds all dp replicas and all pp stages;
- dp: each used building holds ``replicas[b]`` whole pipelines (Σ replicas = dp, ≥ 2 buildings);
- pp: each used building holds ``stages[b]`` stages of all replicas (Σ stages = pp, ≥ 2 buildings);
- pp+dp: used buildings form ≥ 2 pipeline groups, at least one of ≥ 2 buildings; the buildings of group g
  chain their ``stages[b]`` in cluster order (Σ = pp per group) and each holds the group's
  ``group_replicas[g]`` (Σ_g = dp). Groups are numbered by their first building (restricted growth), so
  each partition has one encoding.
Capacity: replicas·stages·tp·cp ≤ GPUs of the building. EP groups (ep of the dp·cp ranks) stay in
a building. Layers: every stage of building b holds ``layers[b]`` less what the split trims there: the
excess over the model's layers (at most pp − 2) is trimmed one layer per stage per pass from the first
stages, never below v layers (several passes only where stages sit at that floor), except the stage with
the LM head (the last stage; the first for V-shaped schedules), which holds ``head_layers`` ≤
``layers[b]``. In none/dp/pp+dp modes one split (``even`` per stage) serves every building (pp+dp groups
may split their stages differently, so the per-stage layer list must be even). Splits that need several
passes over stages above the floor (e.g. B200 stages holding two layers fewer than the LM-head stage after
them) are valid plans outside the model: local search reaches them, unbounded.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from ...cost.compute import LayerKind, layer_kinds
from ...schedules import get_schedule
from ...spec import CrossBuilding
from .terms import exact_product
from .variables import PlanVars


def add_placement_constraints(pv: PlanVars) -> dict[str, list[cp_model.IntVar]]:
    """Post the placement constraints; returns per-building products reused by memory/objective."""
    model, instance = pv.model, pv.instance
    buildings = instance.cluster.buildings
    total_layers = instance.job.model_spec.layers
    n_b = len(buildings)
    max_pp = max(pv.space.pp)
    modes = pv.mode
    tc = model.NewIntVar(1, instance.num_gpus, "tc_place")
    model.AddMultiplicationEquality(tc, [pv.tp_var, pv.cp_var])
    layer_slots = []
    for b, building in enumerate(buildings):
        used, d, s, ell = pv.used[b], pv.replicas[b], pv.stages[b], pv.layers[b]
        for var in (d, s, ell):
            model.Add(var >= 1).OnlyEnforceIf(used)
            model.Add(var == 0).OnlyEnforceIf(used.Not())
        model.Add(ell >= pv.virtual_var).OnlyEnforceIf(used)
        grid = exact_product(model, f"grid[{building.name}]", d, s, building.num_gpus)
        gpus = exact_product(model, f"gpus[{building.name}]", grid, tc, building.num_gpus)
        model.Add(gpus <= building.num_gpus)
        if max(pv.space.ep) > 1:
            ranks = exact_product(model, f"epranks[{building.name}]", d, pv.cp_var, building.num_gpus)
            model.AddModuloEquality(0, ranks, pv.ep_var)
        layer_slots.append(exact_product(model, f"slots[{building.name}]", s, ell, max_pp * total_layers))
        pipeline_whole = [modes.lit(m) for m in modes.values if m not in (CrossBuilding.PP, CrossBuilding.PP_DP)]
        if pipeline_whole:
            whole = model.NewBoolVar(f"whole[{building.name}]")
            model.AddBoolOr(pipeline_whole).OnlyEnforceIf(whole)
            model.AddBoolAnd([lit.Not() for lit in pipeline_whole]).OnlyEnforceIf(whole.Not())
            model.Add(s == pv.pp_var).OnlyEnforceIf([whole, used])
        if CrossBuilding.PP in modes.values:
            model.Add(d == pv.dp_var).OnlyEnforceIf([modes.lit(CrossBuilding.PP), used])
    # The LM-head stage is in the last used building in cluster order (first for V-shaped schedules).
    v_shape = pv.schedule_chunks.any_of(model, "v_shaped_schedule",
                                        lambda chunks: get_schedule(chunks[0]).head_stage(2, chunks[1]) == 0)
    ends = {side: [_end_of_used(pv, b, side) for b in range(n_b)] for side in ("first", "last")}
    for b in range(n_b):
        model.Add(pv.head[b] == ends["last"][b]).OnlyEnforceIf(v_shape.Not())
        model.Add(pv.head[b] == ends["first"][b]).OnlyEnforceIf(v_shape)
    model.AddExactlyOne(pv.head)
    group_head = _add_groups(pv, v_shape)
    head_slots, only_heads = [], []
    for b, building in enumerate(buildings):
        chosen = model.NewIntVar(0, total_layers, f"head_building_layers[{building.name}]")
        model.Add(chosen == pv.layers[b]).OnlyEnforceIf(pv.head[b])
        model.Add(chosen == 0).OnlyEnforceIf(pv.head[b].Not())
        model.Add(pv.head_layers <= pv.layers[b]).OnlyEnforceIf(pv.head[b])
        only_head = model.NewBoolVar(f"only_head_stage[{building.name}]")  # no regular stage here
        model.Add(pv.stages[b] == 1).OnlyEnforceIf(only_head)
        model.Add(pv.stages[b] != 1).OnlyEnforceIf(only_head.Not())
        not_groups = [modes.lit(CrossBuilding.PP_DP).Not()] if CrossBuilding.PP_DP in modes.values else []
        model.Add(pv.layers[b] == pv.head_layers).OnlyEnforceIf([only_head, pv.head[b], *not_groups])
        head_slots.append(chosen)
        only_heads.append(only_head)
    model.Add(pv.head_layers >= pv.virtual_var)
    # the other stages keep at least v layers each (the split can always be trimmed to the model's layers)
    most_chunks = max(v for _, v in pv.schedule_chunks.values)
    chunks = exact_product(model, "v*pp", pv.virtual_var, pv.pp_var, max_pp * most_chunks)
    model.Add(pv.head_layers + chunks - pv.virtual_var <= total_layers)
    n_used = sum(pv.used)
    excess = model.NewIntVar(0, max_pp, "layer_excess")  # pp: slots beyond the model's layers, trimmed (pp − 2 at most)
    for mode, lit in zip(modes.values, modes.lits, strict=True):
        if mode is CrossBuilding.NONE:
            model.Add(n_used == 1).OnlyEnforceIf(lit)
            for b in range(n_b):
                model.Add(pv.replicas[b] == pv.dp_var).OnlyEnforceIf([lit, pv.used[b]])
        elif mode is CrossBuilding.PP_DP:
            model.Add(n_used >= 3).OnlyEnforceIf(lit)
        else:
            model.Add(n_used >= 2).OnlyEnforceIf(lit)
        if mode is CrossBuilding.DP:
            model.Add(sum(pv.replicas) == pv.dp_var).OnlyEnforceIf(lit)
        if mode is CrossBuilding.PP:
            model.Add(sum(pv.stages) == pv.pp_var).OnlyEnforceIf(lit)
            held = sum(layer_slots) - sum(head_slots) + pv.head_layers
            model.Add(excess == held - total_layers).OnlyEnforceIf(lit)
            model.Add(excess <= pv.pp_var - 2).OnlyEnforceIf(lit)
    # none / dp: (pp − 1) stages of ``even`` layers and the head stage, for every used building.
    even = model.NewIntVar(1, total_layers, "even_layers")
    even_slots = exact_product(model, "even_slots", even, pv.pp_var, max_pp * total_layers)
    for b in range(n_b):
        for mode, lit in zip(modes.values, modes.lits, strict=True):
            if mode is not CrossBuilding.PP:
                model.Add(pv.layers[b] == even).OnlyEnforceIf([lit, pv.used[b]])
    for mode, lit in zip(modes.values, modes.lits, strict=True):
        if mode is not CrossBuilding.PP:
            model.Add(even_slots - even + pv.head_layers >= total_layers).OnlyEnforceIf(lit)
            model.Add(even_slots - even + pv.head_layers - total_layers <= pv.pp_var - 2).OnlyEnforceIf(
                [lit, *([pv.pp.lit(1).Not()] if 1 in pv.pp.values else [])])
    _break_symmetry(pv)
    layers_pp = [exact_product(model, f"layers*pp[{b.name}]", pv.layers[i], pv.pp_var, max_pp * total_layers)
                 for i, b in enumerate(buildings)]
    pp_across = model.NewBoolVar("pipelines_span_buildings")
    model.Add(pp_across == sum(modes.lit(m) for m in (CrossBuilding.PP, CrossBuilding.PP_DP) if m in modes.values))
    stage_layers, timed_layers = _regular_stage_layers(pv, excess, even_slots - even + pv.head_layers - total_layers,
                                                       pp_across)
    return {"layer_slots": layer_slots, "head_slots": head_slots, "layer_excess": [excess], "layers_pp": layers_pp,
            "group_head": group_head, "only_head": only_heads, "v_shape": [v_shape], "first_used": ends["first"],
            "last_used": ends["last"],
            "moe_only_stage": _moe_only_stages(pv), "stage_layers": stage_layers,
            "timed_layers": timed_layers}


def _regular_stage_layers(pv: PlanVars, excess: cp_model.IntVar, even_excess: cp_model.LinearExpr,
                          pp_across: cp_model.IntVar) -> tuple[list[cp_model.IntVar], list[cp_model.IntVar]]:
    """Per building b, lower bounds on the layers of its first and of its last regular (non-LM-head) stage.

    The split (``materialize_layers``) trims its excess e one layer per stage per pass from the pipeline's
    first regular stages on, skipping stages at the floor of v layers (building b is at the floor when
    layers[b] ≤ v). PP across, with R_b = b's regular stages and T_c = R_c for buildings above the floor (else
    0): a pass reaches b only after trimming every T_c before it, and a stage of b trimmed t times leaves each
    stage of b before it trimmed ≥ t times (or at the floor, which took more), so b's last regular stage (its
    most-loaded, the stage time) lost one layer only if Σ_{c<b} T_c + R_b ≤ e and its first only if
    Σ_{c<b} T_c + 1 ≤ e; t ≥ 2 needs a second pass (e > Σ_c T_c), after a first one everywhere: the last
    Σ_c T_c + (t − 1)·R_b ≤ e, the first Σ_c T_c + t·R_b − 2·R_b + 1 ≤ e. pp+dp: any building's regular
    stages may have lost one layer when the even split has an excess (positions in the groups' chains are not
    modelled); whole pipelines trim their first stages only when the split has an excess, never stage pp − 2.
    Returns (first, last) per building.
    """
    model, modes = pv.model, pv.mode
    total = pv.instance.job.model_spec.layers
    max_pp = max(pv.space.pp)
    pp_lit = modes.lit(CrossBuilding.PP) if CrossBuilding.PP in modes.values else None
    floors, regular, trimmable = [], [], []
    for b, name in enumerate(pv.buildings):
        at_floor = model.NewBoolVar(f"stages_at_layer_floor[{name}]")
        model.AddImplication(at_floor, pv.used[b])
        model.Add(pv.layers[b] <= pv.virtual_var).OnlyEnforceIf(at_floor)
        model.Add(pv.layers[b] >= pv.virtual_var + 1).OnlyEnforceIf([pv.used[b], at_floor.Not()])
        stages = model.NewIntVar(0, max_pp, f"regular_stages[{name}]")
        model.Add(stages == pv.stages[b] - pv.head[b])
        count = model.NewIntVar(0, max_pp, f"trimmable_stages[{name}]")
        model.Add(count == stages).OnlyEnforceIf(at_floor.Not())
        model.Add(count == 0).OnlyEnforceIf(at_floor)
        floors.append(at_floor)
        regular.append(stages)
        trimmable.append(count)
    second_pass = model.NewBoolVar("layer_split_second_pass")
    if pp_lit is None:
        model.Add(second_pass == 0)
    else:
        model.AddImplication(second_pass, pp_lit)
        model.Add(excess >= sum(trimmable) + 1).OnlyEnforceIf(second_pass)
    out: tuple[list[cp_model.IntVar], list[cp_model.IntVar]] = ([], [])
    for b, name in enumerate(pv.buildings):
        for which, layers in (("first", out[0]), ("last", out[1])):
            trimmed = model.NewBoolVar(f"{which}_regular_stage_trimmed[{name}]")
            model.AddImplication(trimmed, floors[b].Not())
            model.Add(regular[b] >= 1).OnlyEnforceIf(trimmed)
            if which == "last":
                model.AddImplication(trimmed, pp_across)
            times = model.NewIntVar(0, total, f"{which}_regular_stage_trims[{name}]")
            again = model.NewBoolVar(f"{which}_regular_stage_trimmed_again[{name}]")  # t ≥ 2
            model.AddImplication(again, second_pass)
            model.AddImplication(again, trimmed)
            model.Add(times == trimmed).OnlyEnforceIf(again.Not())
            model.Add(times >= 2).OnlyEnforceIf(again)
            for mode, on in zip(modes.values, modes.lits, strict=True):
                if mode is CrossBuilding.PP:
                    stages_trims = exact_product(model, f"{which}_regular_stage_trims*stages[{name}]", times,
                                                 regular[b], total * max_pp)
                    # pass 1: the first stage needs Σ_{c<b} T_c + 1, the last Σ_{c<b} T_c + R_b; t ≥ 2: pass 1
                    # everywhere (Σ_c T_c), then t − 1 more on the last stage and t − 2 on every other stage of b
                    # (the last: (t − 1)·R_b; the first: (t − 1) + (t − 2)·(R_b − 1) = t·R_b − 2·R_b + 1)
                    spare = 0 if which == "last" else 1 - regular[b]
                    model.Add(sum(trimmable[:b]) + stages_trims + spare <= excess).OnlyEnforceIf(
                        [trimmed, again.Not(), on])
                    model.Add(sum(trimmable) + stages_trims - regular[b] + spare <= excess).OnlyEnforceIf([again, on])
                else:
                    model.Add(even_excess >= 1).OnlyEnforceIf([trimmed, on])
            held = model.NewIntVar(0, total, f"{which}_regular_stage_layers[{name}]")
            model.Add(held == pv.layers[b] - times)
            model.Add(held >= pv.virtual_var).OnlyEnforceIf(pv.used[b])
            layers.append(held)
    return out


def _moe_only_stages(pv: PlanVars) -> list[cp_model.IntVar]:
    """Per building, for models with leading dense layers before MoE layers: a literal true exactly when the
    building's last regular stage (the one ``timed_layers`` counts) holds MoE layers only. The D dense layers
    are the model's first D positions, and every schedule puts chunk positions 0..i − 1 on stages 0..i − 1
    (each chunk holds ≥ 1 layer), so stage i holds ≤ max(0, D − i) dense layers (``dense_cap``): none from
    i = D on. That stage's index is Σ_{b' ≤ b} stages − 1 − head_b under PP across (less one where b holds
    the LM-head stage, which may be its last); elsewhere (whole pipelines, or pp+dp, whose groups' indices
    are not modelled) ≥ stages − 2. Empty for models of one kind."""
    dense = layer_kinds(pv.instance.job.model_spec).count(LayerKind.DENSE)
    if pv.instance.job.model_spec.moe is None or dense == 0:
        return []
    model, max_pp = pv.model, max(pv.space.pp)
    pp_mode = pv.mode.lit(CrossBuilding.PP) if CrossBuilding.PP in pv.mode.values else None
    out = []
    for b, name in enumerate(pv.buildings):
        index = model.NewIntVar(-2, max_pp, f"last_regular_stage_index[{name}]")
        if pp_mode is not None:
            model.Add(index == sum(pv.stages[:b + 1]) - 1 - pv.head[b]).OnlyEnforceIf(pp_mode)
            model.Add(index == pv.stages[b] - 2).OnlyEnforceIf(pp_mode.Not())
        else:
            model.Add(index == pv.stages[b] - 2)
        lit = model.NewBoolVar(f"a_stage_of_moe_layers_only[{name}]")
        model.Add(index >= dense).OnlyEnforceIf(lit)
        model.Add(index <= dense - 1).OnlyEnforceIf(lit.Not())
        out.append(lit)
    return out


def dense_cap(model: cp_model.CpModel, dense: int, index: cp_model.IntVar, name: str) -> cp_model.IntVar:
    """The most dense layers stage ``index`` (or any later stage) can hold: max(0, D − index), D leading dense
    layers (``_moe_only_stages``)."""
    cap = model.NewIntVar(0, dense, name)
    model.AddMaxEquality(cap, [0, dense - index])
    return cap


def _end_of_used(pv: PlanVars, b: int, side: str) -> cp_model.IntVar:
    """A literal true exactly when building b is the first (``side`` 'first') or last used one in cluster order."""
    others = pv.used[:b] if side == "first" else pv.used[b + 1:]
    end = pv.model.NewBoolVar(f"{side}_used_building[{pv.buildings[b]}]")
    pv.model.AddBoolAnd([pv.used[b], *[u.Not() for u in others]]).OnlyEnforceIf(end)
    pv.model.AddBoolOr([pv.used[b].Not(), *others, end])
    return end


def _add_groups(pv: PlanVars, v_shape: cp_model.IntVar) -> list[cp_model.IntVar]:
    """pp+dp group structure; returns per building 'holds the LM-head stage of its group' (the group's
    last building, its first for V-shaped schedules; false outside pp+dp)."""
    model, member = pv.model, pv.member
    n_b = len(pv.buildings)
    for b in range(n_b):  # fixed outside pp+dp too
        model.Add(pv.group_first_stage[b] == 0).OnlyEnforceIf([lit.Not() for lit in member[b]])
    if not pv.group_replicas:
        return [model.NewConstant(0) for _ in range(n_b)]
    lit = pv.mode.lit(CrossBuilding.PP_DP)
    groups = range(len(pv.group_replicas))
    nonempty = []
    for g in groups:
        flag = model.NewBoolVar(f"group_used[{g}]")
        model.AddMaxEquality(flag, [member[b][g] for b in range(n_b)])
        nonempty.append(flag)
        model.Add(pv.group_replicas[g] == 0).OnlyEnforceIf(flag.Not())
        model.Add(pv.group_replicas[g] >= 1).OnlyEnforceIf(flag)
        stages_here = []
        for b in range(n_b):
            # b's stages follow those of the group's buildings before it
            model.Add(pv.group_first_stage[b] == sum(stages_here)).OnlyEnforceIf(member[b][g])
            held = model.NewIntVar(0, max(pv.space.pp), f"group_stages[{pv.buildings[b]}][{g}]")
            model.Add(held == pv.stages[b]).OnlyEnforceIf(member[b][g])
            model.Add(held == 0).OnlyEnforceIf(member[b][g].Not())
            model.Add(pv.replicas[b] == pv.group_replicas[g]).OnlyEnforceIf(member[b][g])
            stages_here.append(held)
            if g:  # restricted growth: group g opens only after group g − 1 has a building
                model.AddBoolOr([member[c][g - 1] for c in range(b)] or [model.NewConstant(0)]).OnlyEnforceIf(
                    member[b][g])
        model.Add(sum(stages_here) == pv.pp_var).OnlyEnforceIf(flag)
    for b in range(n_b):
        model.Add(sum(member[b]) == pv.used[b]).OnlyEnforceIf(lit)
        model.Add(sum(member[b]) == 0).OnlyEnforceIf(lit.Not())
    # fewest cross-building boundaries on any group's pipeline (each group's size − 1; empty groups ignored)
    spans = [sum(member[b][g] for b in range(n_b)) - 1 + n_b * (1 - nonempty[g]) for g in groups]
    model.AddMinEquality(pv.group_min_boundaries, spans)
    model.Add(sum(pv.group_replicas) == pv.dp_var).OnlyEnforceIf(lit)
    model.Add(nonempty[1] == 1).OnlyEnforceIf(lit)
    model.Add(sum(pv.used) >= sum(nonempty) + 1).OnlyEnforceIf(lit)  # some group spans two buildings
    heads = []
    for b in range(n_b):
        head = model.NewBoolVar(f"group_head[{pv.buildings[b]}]")
        ends = []
        for g in groups:
            for side, others in ((v_shape.Not(), range(b + 1, n_b)), (v_shape, range(b))):
                end = model.NewBoolVar(f"group_end[{pv.buildings[b]}][{g}]")
                model.AddBoolAnd([member[b][g], side, *[member[c][g].Not() for c in others]]).OnlyEnforceIf(end)
                model.AddBoolOr([member[b][g].Not(), side.Not(), *[member[c][g] for c in others], end])
                ends.append(end)
        model.AddMaxEquality(head, ends)
        heads.append(head)
    return heads


def interchangeable(instance, a: int, b: int) -> bool:
    """Buildings a and b have the same GPUs, size and fabric, and the same routes to every other
    building (so swapping their shares of the grid changes no cost)."""
    buildings = instance.cluster.buildings
    x, y = buildings[a], buildings[b]
    if (x.gpu_spec, x.num_gpus, x.gpus_per_node, x.fabric_oversubscription, x.fabric_latency_us) != (
            y.gpu_spec, y.num_gpus, y.gpus_per_node, y.fabric_oversubscription, y.fabric_latency_us):
        return False
    cluster = instance.cluster

    def key(u: str, v: str) -> tuple[float, float, float]:
        route = cluster.route(u, v)
        return route.bandwidth_gbps, route.latency_us, route.loss_rate

    return all(key(x.name, c.name) == key(y.name, c.name) for i, c in enumerate(buildings) if i not in (a, b))


def _break_symmetry(pv: PlanVars) -> None:
    """Among consecutive interchangeable buildings, the earlier holds at least as many replicas (whole
    pipelines per building) or stages (pp across); pp+dp is left to the group numbering."""
    modes = pv.mode
    for b in range(len(pv.buildings) - 1):
        if not interchangeable(pv.instance, b, b + 1):
            continue
        for mode, lit in zip(modes.values, modes.lits, strict=True):
            if mode is CrossBuilding.PP_DP:  # positions in a group's chain matter; groups are ordered instead
                continue
            counts = pv.stages if mode is CrossBuilding.PP else pv.replicas
            pv.model.Add(counts[b] >= counts[b + 1]).OnlyEnforceIf(lit)
