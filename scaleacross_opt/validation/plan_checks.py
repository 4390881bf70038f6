"""Checks that a plan is executable on an instance: degrees, divisibility, placement, capacity.

This is the independent validator of every plan the optimizer returns (``validate_plan``); it does
not import the optimizer. Memory feasibility comes from the cost model's memory formulas.
"""

from __future__ import annotations

from collections import defaultdict

from ..spec import CollectiveAlgorithm, CrossBuilding, Instance, Plan
from .instance_checks import Problems


def check_degrees(plan: Plan, instance: Instance) -> Problems:
    """Degree product, divisibility by heads/layers/batch/sequence, EP nesting, schedule support."""
    from ..schedules import get_schedule, schedule_names

    model = instance.job.model_spec
    job = instance.job
    problems: Problems = []
    if plan.num_gpus != instance.num_gpus:
        problems.append(("", f"plan degrees tp·cp·pp·dp = {plan.tp}·{plan.cp}·{plan.pp}·{plan.dp} = {plan.num_gpus} "
                             f"GPUs ≠ the job's {instance.num_gpus} GPUs"))  # the plan as a whole, no one field
    if model.num_heads % plan.tp:
        problems.append(("tp", f"num_heads={model.num_heads} is not divisible by tp={plan.tp}"))
    if model.num_kv_heads % plan.tp and plan.tp % model.num_kv_heads:
        problems.append(("tp", f"num_kv_heads={model.num_kv_heads} and tp={plan.tp} do not divide each other"))
    if model.layers < plan.pp * plan.virtual_stages:
        problems.append(("pp", f"layers={model.layers} < pp·virtual_stages = {plan.pp}·{plan.virtual_stages}"))
    if plan.cp > 1 and job.seq_len % (2 * plan.cp):
        problems.append(("cp", f"seq_len={job.seq_len} is not divisible by 2·cp = {2 * plan.cp} "
                               "(load-balanced causal ring attention)"))
    if job.global_batch_size % (plan.dp * plan.micro_batch_size):
        problems.append(("micro_batch_size",
                         f"global_batch_size={job.global_batch_size} is not divisible by "
                         f"dp·micro_batch_size = {plan.dp}·{plan.micro_batch_size}"))
    if plan.ep > 1:
        if model.moe is None:
            problems.append(("ep", f"ep={plan.ep} but model {model.name!r} has no MoE layers"))
        elif model.moe.num_experts % plan.ep:
            problems.append(("ep", f"num_experts={model.moe.num_experts} is not divisible by ep={plan.ep}"))
        if (plan.dp * plan.cp) % plan.ep:
            problems.append(("ep", f"ep={plan.ep} does not divide dp·cp = {plan.dp * plan.cp}"))
    if plan.schedule not in schedule_names():
        problems.append(("schedule", f"unknown schedule {plan.schedule!r}; known: {', '.join(schedule_names())}"))
    elif not problems:
        reason = get_schedule(plan.schedule).check(plan.pp, plan.virtual_stages,
                                                   plan.num_microbatches(job.global_batch_size))
        if reason:
            problems.append(("schedule", reason))
    return problems


def _check_shares(plan: Plan, instance: Instance) -> Problems:
    """Stage/replica counts per building add up as the cross-building dimension requires."""
    placement = plan.placement
    assert placement is not None
    mode = placement.cross_building
    shares = placement.buildings
    problems: Problems = []
    if mode is CrossBuilding.NONE and len(shares) != 1:
        problems.append(("placement.buildings", f"cross_building=none needs exactly one building, got {len(shares)}"))
    if mode in (CrossBuilding.PP, CrossBuilding.PP_DP) and len(shares) < 2:
        problems.append(("placement.buildings", f"cross_building={mode.value} needs at least two buildings"))
    groups: dict[int, list[int]] = defaultdict(list)
    for i, share in enumerate(shares):
        groups[share.group if mode is CrossBuilding.PP_DP else (i if mode is CrossBuilding.DP else 0)].append(i)
        if share.group and mode is not CrossBuilding.PP_DP:
            problems.append((f"placement.buildings[{i}].group",
                             f"groups apply to cross_building=pp+dp only, got group {share.group} with {mode.value}"))
    dp_total = 0
    for group, members in groups.items():
        named = f"group {group}'s " if mode is CrossBuilding.PP_DP else "one "
        stages = sum(shares[i].pp_stages for i in members)
        if stages != plan.pp:
            where = f"placement.buildings[{members[0]}].pp_stages"
            problems.append((where, f"stages of {named}pipeline add up to {stages}, expected pp={plan.pp}"))
        odd = [i for i in members if shares[i].dp_replicas != shares[members[0]].dp_replicas]
        if odd:
            problems.append((f"placement.buildings[{odd[0]}].dp_replicas",
                             f"{named}pipeline buildings hold different replica counts "
                             f"{sorted({shares[i].dp_replicas for i in members})}"))
        dp_total += shares[members[0]].dp_replicas
    if dp_total != plan.dp:
        problems.append(("placement.buildings", f"replicas add up to {dp_total}, expected dp={plan.dp}"))
    if mode is CrossBuilding.PP_DP and len(groups) < 2:
        problems.append(("placement.buildings", "cross_building=pp+dp needs at least two groups"))
    return problems


def check_placement(plan: Plan, instance: Instance) -> Problems:
    """Buildings exist once each, the grid fits every building, TP/EP stay inside, layers add up."""
    placement = plan.placement
    if placement is None:
        return []
    model = instance.job.model_spec
    problems: Problems = []
    known = {b.name: b for b in instance.cluster.buildings}
    seen: set[str] = set()
    for i, share in enumerate(placement.buildings):
        field = f"placement.buildings[{i}]"
        building = known.get(share.building)
        if building is None:
            problems.append((f"{field}.building", f"unknown building {share.building!r}; known: {', '.join(known)}"))
            continue
        if share.building in seen:
            problems.append((f"{field}.building", f"building {share.building!r} appears twice"))
        seen.add(share.building)
        gpus = share.dp_replicas * share.pp_stages * plan.tp * plan.cp
        if gpus > building.num_gpus:
            problems.append((field, f"needs {gpus} GPUs (replicas {share.dp_replicas} × stages {share.pp_stages} "
                                    f"× tp·cp {plan.tp * plan.cp}) but {share.building!r} has {building.num_gpus}"))
        domain = building.gpu_spec.nvlink_domain_size
        if plan.tp > domain or domain % plan.tp:
            problem = ("tp", f"tp={plan.tp} does not fit the NVLink domain ({domain}) of {building.gpu_spec.name}")
            if problem not in problems:
                problems.append(problem)
        if plan.ep > 1 and (share.dp_replicas * plan.cp) % plan.ep:
            problems.append((f"{field}.dp_replicas",
                             f"EP group of {plan.ep} would cross buildings: {share.building!r} holds "
                             f"dp_replicas·cp = {share.dp_replicas * plan.cp} ranks"))
    if not problems:
        problems += _check_shares(plan, instance)
    layers = placement.layers_per_stage
    if layers is None:  # filled with the even split by plan_defaults.fill_defaults
        pass
    elif len(layers) != plan.pp:
        problems.append(("placement.layers_per_stage", f"has {len(layers)} entries, expected pp={plan.pp}"))
    elif sum(layers) != model.layers:
        problems.append(("placement.layers_per_stage", f"adds up to {sum(layers)}, model has {model.layers} layers"))
    elif min(layers) < plan.virtual_stages:
        problems.append(("placement.layers_per_stage",
                         f"a stage holds {min(layers)} layers, fewer than virtual_stages={plan.virtual_stages}"))
    return problems


def check_network(plan: Plan) -> Problems:
    """Hierarchical collectives only make sense for the cross-building class."""
    if plan.network and plan.network.intra_building.collective_algorithm is CollectiveAlgorithm.HIERARCHICAL:
        return [("network.intra_building.collective_algorithm",
                 "hierarchical is a cross-building algorithm; use ring, tree or pat inside a building")]
    return []


def check_plan(plan: Plan, instance: Instance) -> Problems:
    """All structural checks of a plan against an instance (placement/network only when present)."""
    problems = check_degrees(plan, instance)
    if not problems:
        problems += check_placement(plan, instance)
    return problems + check_network(plan)


def check_search_restrictions(plan: Plan, instance: Instance) -> Problems:
    """The plan uses only options the instance's ``search`` section allows."""
    search = instance.search
    problems: Problems = []
    scalar_rules = [
        ("tp", plan.tp, search.tp_degrees), ("cp", plan.cp, search.cp_degrees), ("pp", plan.pp, search.pp_degrees),
        ("ep", plan.ep, search.ep_degrees), ("virtual_stages", plan.virtual_stages, search.virtual_stages),
        ("micro_batch_size", plan.micro_batch_size, search.micro_batch_sizes),
        ("schedule", plan.schedule, search.schedules), ("recompute", plan.recompute, search.recompute),
        ("zero_stage", plan.zero_stage, search.zero_stages),
        ("tp_comm_overlap", plan.tp_comm_overlap, search.tp_comm_overlap),
    ]
    if plan.placement is not None:
        scalar_rules.append(("placement.cross_building", plan.placement.cross_building, search.cross_building))
    if plan.network is not None:
        for cls in ("intra_building", "cross_building"):
            cfg = getattr(plan.network, cls)
            algorithms = search.collective_algorithms
            if algorithms is not None and cls == "cross_building" and len(instance.cluster.buildings) > 1:
                algorithms = [*algorithms, CollectiveAlgorithm.HIERARCHICAL]
            scalar_rules += [
                (f"network.{cls}.collective_algorithm", cfg.collective_algorithm, algorithms),
                (f"network.{cls}.load_balancing", cfg.load_balancing, search.load_balancing),
                (f"network.{cls}.congestion_control", cfg.congestion_control, search.congestion_control),
                (f"network.{cls}.loss_recovery", cfg.loss_recovery, search.loss_recovery),
                (f"network.{cls}.qps_per_connection", cfg.qps_per_connection, search.qps_per_connection),
                (f"network.{cls}.window_kib_per_qp", cfg.window_kib_per_qp, search.window_kib_per_qp),
            ]
    for field, value, allowed in scalar_rules:
        if allowed is not None and value not in allowed:
            problems.append((field, f"{value} is not among the allowed {list(allowed)}"))
    return problems


def validate_plan(plan: Plan, instance: Instance) -> Problems:
    """The full independent validation of a solver output: structure, search restrictions, memory."""
    if plan.placement is None or plan.network is None:
        return [("placement", "a solver output must carry an explicit placement and network")]
    problems = check_plan(plan, instance) + check_search_restrictions(plan, instance)
    return problems or check_memory(plan, instance)


def check_memory(plan: Plan, instance: Instance) -> Problems:
    """The filled-in plan fits every GPU's memory (exact memory model)."""
    from ..cost.memory import memory_per_gpu

    memory = memory_per_gpu(instance, plan)
    if memory.fits:
        return []
    return [("placement", f"needs {memory.total_gib:.1f} GiB per GPU, capacity {memory.capacity_gib:.1f} GiB "
                          "(does not fit memory)")]
