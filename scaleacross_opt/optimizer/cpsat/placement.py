"""Placement constraints: how the GPU grid maps onto buildings.

- none: one building holds all dp replicas and all pp stages;
- dp: each used building holds ``replicas[b]`` whole pipelines (Σ replicas = dp, ≥ 2 buildings);
- pp: each used building holds ``stages[b]`` stages of all replicas (Σ stages = pp, ≥ 2 buildings).
Capacity: replicas·stages·tp·cp ≤ GPUs of the building. EP groups (ep of the dp·cp ranks) stay in
a building. Layers: every stage of building b holds ``layers[b]`` or one less (the excess over the
model's layers, fewer than the other stages, is trimmed one layer each from the first stages), except
the stage with the LM head (the last stage; the first for V-shaped schedules), which holds
``head_layers`` ≤ ``layers[b]``. In none/dp modes one split (``even`` per stage) serves every building.
"""

from __future__ import annotations

from ortools.sat.python import cp_model

from ...schedules import get_schedule
from ...spec import CrossBuilding
from .variables import PlanVars


def _product(model: cp_model.CpModel, name: str, a, b, upper: int) -> cp_model.IntVar:
    out = model.NewIntVar(0, upper, name)
    model.AddMultiplicationEquality(out, [a, b])
    return out


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
        grid = _product(model, f"grid[{building.name}]", d, s, building.num_gpus)
        gpus = _product(model, f"gpus[{building.name}]", grid, tc, building.num_gpus)
        model.Add(gpus <= building.num_gpus)
        if max(pv.space.ep) > 1:
            ranks = _product(model, f"epranks[{building.name}]", d, pv.cp_var, building.num_gpus)
            model.AddModuloEquality(0, ranks, pv.ep_var)
        layer_slots.append(_product(model, f"slots[{building.name}]", s, ell, max_pp * total_layers))
        pipeline_whole = [modes.lit(m) for m in modes.values if m is not CrossBuilding.PP]
        if pipeline_whole:
            whole = model.NewBoolVar(f"whole[{building.name}]")
            model.AddBoolOr(pipeline_whole).OnlyEnforceIf(whole)
            model.AddBoolAnd([lit.Not() for lit in pipeline_whole]).OnlyEnforceIf(whole.Not())
            model.Add(s == pv.pp_var).OnlyEnforceIf([whole, used])
        if CrossBuilding.PP in modes.values:
            model.Add(d == pv.dp_var).OnlyEnforceIf([modes.lit(CrossBuilding.PP), used])
    # The LM-head stage is in the last used building in cluster order (first for V-shaped schedules).
    v_shape = model.NewBoolVar("v_shaped_schedule")
    model.Add(v_shape == sum(lit for (name, v), lit in zip(pv.schedule_chunks.values, pv.schedule_chunks.lits,
                                                            strict=True)
                             if get_schedule(name).head_stage(2, v) == 0))
    for b in range(n_b):
        for side, others in ((v_shape.Not(), pv.used[b + 1:]), (v_shape, pv.used[:b])):
            model.AddBoolAnd([pv.used[b], *[u.Not() for u in others]]).OnlyEnforceIf([pv.head[b], side])
            model.AddBoolOr([pv.used[b].Not(), *others, pv.head[b]]).OnlyEnforceIf(side)
    model.AddExactlyOne(pv.head)
    head_slots = []
    for b, building in enumerate(buildings):
        chosen = model.NewIntVar(0, total_layers, f"head_building_layers[{building.name}]")
        model.Add(chosen == pv.layers[b]).OnlyEnforceIf(pv.head[b])
        model.Add(chosen == 0).OnlyEnforceIf(pv.head[b].Not())
        model.Add(pv.head_layers <= pv.layers[b]).OnlyEnforceIf(pv.head[b])
        only_head = model.NewBoolVar(f"only_head_stage[{building.name}]")  # no regular stage here
        model.Add(pv.stages[b] == 1).OnlyEnforceIf(only_head)
        model.Add(pv.stages[b] != 1).OnlyEnforceIf(only_head.Not())
        model.Add(pv.layers[b] == pv.head_layers).OnlyEnforceIf([only_head, pv.head[b]])
        head_slots.append(chosen)
    model.Add(pv.head_layers >= pv.virtual_var)
    # the other stages keep at least v layers each (the split can always be trimmed to the model's layers)
    chunks = _product(model, "v*pp", pv.virtual_var, pv.pp_var, max_pp * max(v for _, v in pv.schedule_chunks.values))
    model.Add(pv.head_layers + chunks - pv.virtual_var <= total_layers)
    n_used = sum(pv.used)
    for mode, lit in zip(modes.values, modes.lits, strict=True):
        if mode is CrossBuilding.NONE:
            model.Add(n_used == 1).OnlyEnforceIf(lit)
            for b in range(n_b):
                model.Add(pv.replicas[b] == pv.dp_var).OnlyEnforceIf([lit, pv.used[b]])
        else:
            model.Add(n_used >= 2).OnlyEnforceIf(lit)
        if mode is CrossBuilding.DP:
            model.Add(sum(pv.replicas) == pv.dp_var).OnlyEnforceIf(lit)
        if mode is CrossBuilding.PP:
            model.Add(sum(pv.stages) == pv.pp_var).OnlyEnforceIf(lit)
            held = sum(layer_slots) - sum(head_slots) + pv.head_layers
            model.Add(held >= total_layers).OnlyEnforceIf(lit)
            model.Add(held - total_layers <= pv.pp_var - 2).OnlyEnforceIf(lit)
    # none / dp: (pp − 1) stages of ``even`` layers and the head stage, for every used building.
    even = model.NewIntVar(1, total_layers, "even_layers")
    even_slots = _product(model, "even_slots", even, pv.pp_var, max_pp * total_layers)
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
    layers_pp = [_product(model, f"layers*pp[{b.name}]", pv.layers[i], pv.pp_var, max_pp * total_layers)
                 for i, b in enumerate(buildings)]
    return {"layer_slots": layer_slots, "layers_pp": layers_pp}


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
    pipelines per building) or stages (pp across)."""
    modes = pv.mode
    for b in range(len(pv.buildings) - 1):
        if not interchangeable(pv.instance, b, b + 1):
            continue
        for mode, lit in zip(modes.values, modes.lits, strict=True):
            counts = pv.stages if mode is CrossBuilding.PP else pv.replicas
            pv.model.Add(counts[b] >= counts[b + 1]).OnlyEnforceIf(lit)
