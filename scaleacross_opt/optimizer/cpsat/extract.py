"""Solver values → ``Plan`` and the literals that identify that plan in the model."""

from __future__ import annotations

from itertools import product

from ortools.sat.python import cp_model

from ...schedules import get_schedule
from ...spec import CrossBuilding, NetworkConfig, Plan
from ..placement import build_placement, materialize_layers
from .variables import OneHot, PlanVars


class Values:
    """Read access to one solution, from a solver or from a solution callback."""

    def __init__(self, source: cp_model.CpSolver | cp_model.CpSolverSolutionCallback | _Assignment):
        self._source = source

    def int(self, var: cp_model.IntVar) -> int:
        """Value of an integer variable."""
        return int(self._source.Value(var))

    def bool(self, lit: cp_model.IntVar) -> bool:
        """Value of a Boolean variable."""
        return bool(self._source.BooleanValue(lit))

    def chosen(self, choice: OneHot):
        """Chosen value of a one-hot."""
        return next(v for v, lit in zip(choice.values, choice.lits, strict=True) if self._source.BooleanValue(lit))


class _Assignment:
    """A stored assignment {variable index: value}, readable like a solver."""

    def __init__(self, values: dict[int, int]):
        self._values = values

    def Value(self, var: cp_model.IntVar) -> int:
        return self._values[var.Index()]

    def BooleanValue(self, lit: cp_model.IntVar) -> bool:
        return bool(self._values[lit.Index()])


def plan_of(pv: PlanVars, assignment: dict[int, int]) -> Plan:
    """The plan an assignment of the identity variables describes."""
    return extract_plan(pv, Values(_Assignment(assignment)))


def extract_plan(pv: PlanVars, values: Values) -> Plan:
    """The plan a solution describes, with explicit placement and network."""
    instance = pv.instance
    shape = values.chosen(pv.shape)
    schedule, virtual = values.chosen(pv.schedule_chunks)
    mode = values.chosen(pv.mode)
    names = pv.buildings
    placement = build_placement(
        mode, names, [values.int(v) for v in pv.replicas], [values.int(v) for v in pv.stages],
        [values.int(v) for v in pv.layers], values.int(pv.head_layers),
        get_schedule(schedule).head_stage(values.chosen(pv.pp), virtual), instance.job.model_spec.layers, virtual,
        groups=[next((g for g, lit in enumerate(row) if values.bool(lit)), 0) for row in pv.member])
    intra = values.chosen(pv.intra_transport).with_algorithm(values.chosen(pv.intra_algorithm))
    if pv.cross_transport is not None and pv.cross_algorithm is not None:
        cross = values.chosen(pv.cross_transport).with_algorithm(values.chosen(pv.cross_algorithm))
    else:  # a single building: nothing crosses, the class mirrors the intra-building settings
        cross = intra
    plan = Plan(
        tp=shape.tp, cp=shape.cp, pp=values.chosen(pv.pp), dp=values.chosen(pv.dp), ep=shape.ep,
        virtual_stages=virtual, micro_batch_size=shape.micro_batch_size, schedule=schedule,
        recompute=shape.recompute, zero_stage=values.chosen(pv.zero), tp_comm_overlap=pv.space.tp_comm_overlap,
        placement=placement, network=NetworkConfig(intra_building=intra, cross_building=cross),
    )
    size = pv.space.bucket_size(plan, values.chosen(pv.bucket))
    return plan if size is None else plan.model_copy(update={"dp_bucket_params": size})


def _identity_choices(pv: PlanVars) -> list[OneHot]:
    return [choice for choice in (pv.shape, pv.pp, pv.dp, pv.zero, pv.schedule_chunks, pv.mode, pv.intra_algorithm,
                                  pv.intra_transport, pv.cross_algorithm, pv.cross_transport, pv.bucket)
            if choice is not None]


def identity_vars(pv: PlanVars) -> list[cp_model.IntVar]:
    """The variables whose values determine the plan (everything else is derived or auxiliary)."""
    lits = [lit for choice in _identity_choices(pv) for lit in choice.lits]
    return [*lits, *pv.replicas, *pv.stages, *pv.layers, pv.head_layers, *(lit for row in pv.member for lit in row)]


def add_nogood(pv: PlanVars, assignment: dict[int, int]) -> None:
    """Exclude the assignment {variable index: value} of identity variables from the model's solutions.

    One clause: some one-hot choice takes another value (its chosen literal is false; the others follow
    from exactly-one), a Boolean flips, or a count differs (a reified ≠). Small clauses keep the model —
    and its presolve — small after hundreds of examined plans.
    """
    model = pv.model
    onehot = {lit.Index() for choice in _identity_choices(pv) for lit in choice.lits}
    clause = []
    for index, value in sorted(assignment.items()):
        var = model.get_int_var_from_proto_index(index)
        if index in onehot:
            if value:
                clause.append(var.Not())
        elif list(model.Proto().variables[index].domain) == [0, 1]:
            clause.append(var.Not() if value else var)
        else:
            differs = model.NewBoolVar(f"differs[{index}]")
            model.Add(var != value).OnlyEnforceIf(differs)
            model.Add(var == value).OnlyEnforceIf(differs.Not())
            clause.append(differs)
    model.AddBoolOr(clause)


def fix_irrelevant_choices(pv: PlanVars) -> None:
    """Break symmetry: settings that cannot affect a plan's cost are pinned to their first option.

    Cross-building network settings matter only when something crosses; the cross-building
    collective algorithm only when DP crosses (dp, pp+dp); with one pipeline stage every schedule runs the same
    ops, so pp = 1 uses the (schedule, v) pair that holds the fewest activations; the gradient bucket's size
    only for ZeRO-0..2 with dp·cp > 1.
    """
    model = pv.model
    pair = pv.space.single_stage_schedule()
    if 1 in pv.pp.values and pair is not None:
        model.Add(pv.schedule_chunks.lit(pair) == 1).OnlyEnforceIf(pv.pp.lit(1))
    # the gradient bucket's size matters only for ZeRO-0..2 with dp·cp > 1 (``sizes_dp_buckets``): else factor 1
    irrelevant = [pv.zero.lit(3)] if 3 in pv.zero.values else []
    if 1 in pv.dp.values and 1 in pv.cp.values:
        alone = model.NewBoolVar("dp*cp=1")
        model.AddBoolAnd([pv.dp.lit(1), pv.cp.lit(1)]).OnlyEnforceIf(alone)
        model.AddBoolOr([pv.dp.lit(1).Not(), pv.cp.lit(1).Not(), alone])
        irrelevant.append(alone)
    for lit in irrelevant:
        model.AddImplication(lit, pv.bucket.lit(1))
    if 1 not in pv.space.bucket_factors:  # the default size is not on the ladder where the size matters
        model.AddBoolOr([pv.bucket.lit(1).Not(), *irrelevant])
    if pv.cross_transport is None or pv.cross_algorithm is None:
        return
    for mode, lit in zip(pv.mode.values, pv.mode.lits, strict=True):
        if mode is CrossBuilding.NONE:
            model.Add(pv.cross_transport.lits[0] == 1).OnlyEnforceIf(lit)
        if mode not in (CrossBuilding.DP, CrossBuilding.PP_DP):
            model.Add(pv.cross_algorithm.lits[0] == 1).OnlyEnforceIf(lit)


def plan_assignment(pv: PlanVars, plan: Plan) -> dict[int, int] | None:
    """The identity-variable values that describe ``plan`` (the inverse of ``extract_plan``), or None
    when the plan uses an option the model does not have (e.g. a pruned network setting). Choices that
    cannot change its cost are mapped to the ones ``fix_irrelevant_choices`` pins."""
    from ..space import Shape

    assert plan.placement is not None and plan.network is not None
    values: dict[int, int] = {}

    def choose(choice: OneHot | None, value: object) -> bool:
        if choice is None:
            return True
        if value not in choice.values:
            return False
        for v, lit in zip(choice.values, choice.lits, strict=True):
            values[lit.Index()] = int(v == value)
        return True

    def transport_of(choice: OneHot | None, config) -> object:
        if choice is None:
            return None
        return next((t for t in choice.values
                     if t.with_algorithm(config.collective_algorithm) == config), None)

    if plan.tp_comm_overlap != pv.space.tp_comm_overlap and plan.tp > 1:
        return None  # the model prices TP/GEMM overlap as the space sets it (on wherever allowed; moot at tp 1)
    net = plan.network
    mode = plan.placement.cross_building
    chunks = (plan.schedule, plan.virtual_stages)
    if plan.pp == 1:
        chunks = pv.space.single_stage_schedule() or chunks
    cross_transport = transport_of(pv.cross_transport, net.cross_building)
    if mode is CrossBuilding.NONE and pv.cross_transport is not None:
        cross_transport = pv.cross_transport.values[0]
    cross_algorithm = net.cross_building.collective_algorithm
    if mode not in (CrossBuilding.DP, CrossBuilding.PP_DP) and pv.cross_algorithm is not None:
        cross_algorithm = pv.cross_algorithm.values[0]
    ok = all((
        choose(pv.shape, Shape(plan.tp, plan.cp, plan.ep, plan.micro_batch_size, plan.recompute)),
        choose(pv.pp, plan.pp), choose(pv.dp, plan.dp), choose(pv.zero, plan.zero_stage),
        choose(pv.schedule_chunks, chunks), choose(pv.mode, mode),
        choose(pv.intra_algorithm, net.intra_building.collective_algorithm),
        choose(pv.intra_transport, transport_of(pv.intra_transport, net.intra_building)),
        choose(pv.cross_algorithm, cross_algorithm), choose(pv.cross_transport, cross_transport),
        choose(pv.bucket, next((f for f in pv.bucket.values
                                if pv.space.bucket_size(plan, f) == plan.dp_bucket_params), None)),
    ))
    if not ok:
        return None
    layers = plan.placement.layers_per_stage
    head_stage = get_schedule(plan.schedule).head_stage(plan.pp, plan.virtual_stages)
    shares = {s.building: s for s in plan.placement.buildings}
    order = [s.building for s in plan.placement.buildings]
    pp_across = plan.placement.cross_building is CrossBuilding.PP
    stage_counts = [shares[name].pp_stages for name in order] if pp_across else [plan.pp]
    counts = untrimmed_layers(layers, stage_counts, head_stage, plan.virtual_stages)
    if counts is None:
        return None
    max_layers = dict(zip(order, counts, strict=True)) if pp_across else dict.fromkeys(order, counts[0])
    for b, name in enumerate(pv.buildings):
        share = shares.get(name)
        replicas, stages = (share.dp_replicas, share.pp_stages) if share is not None else (0, 0)
        values[pv.replicas[b].Index()] = replicas
        values[pv.stages[b].Index()] = stages
        values[pv.layers[b].Index()] = max_layers.get(name, 0)
    values[pv.head_layers.Index()] = layers[head_stage]
    in_cluster_order = sorted(plan.placement.buildings, key=lambda share: pv.buildings.index(share.building))
    if [s.building for s in in_cluster_order] != order and mode in (CrossBuilding.PP_DP, CrossBuilding.DP):
        return None  # the model chains a group's buildings, and a DP ring's, in cluster order
    group_of = {group: g for g, group in enumerate(dict.fromkeys(share.group for share in in_cluster_order))}
    for b, name in enumerate(pv.buildings):
        share = shares.get(name)
        group = group_of[share.group] if mode is CrossBuilding.PP_DP and share is not None else None
        for g, lit in enumerate(pv.member[b]):
            values[lit.Index()] = int(g == group)
    return values


UNTRIM_TRIALS = 20_000


def untrimmed_layers(layers: list[int], stage_counts: list[int], head_stage: int,
                     virtual_stages: int = 1) -> list[int] | None:
    """The per-run layer counts ℓ that ``materialize_layers`` trims into ``layers``: runs of ``stage_counts``
    consecutive stages share one ℓ, the head stage is apart and holds no more than its run's ℓ (as the
    model requires), and the trimming takes a layer from each other stage above ``virtual_stages`` per pass.
    After P passes a stage lost P or P − 1 layers (or stopped at the floor), so ℓ of a run is one of its
    stages' layers + P or + P − 1; the smallest P that explains ``layers`` wins, then the smallest ℓ.
    The model trims at most pp − 2 layers in all (``cpsat.placement``): a split that needs more (a stage
    trimmed below a later stage of its own building, a head stage above every regular stage of its
    building) is a valid plan outside the model, answered None. Returns None too when no ℓ explains the
    split, or none within ``UNTRIM_TRIALS`` candidate ℓ (runs whose stages all sit at the floor admit any ℓ
    up to P above it, so an inexplicable split could otherwise take minutes; a plan without an assignment
    is simulated but neither bounded nor cut off)."""
    total = sum(layers)
    max_excess = max(len(layers) - 2, 0)
    trials = 0
    run_of = [r for r, count in enumerate(stage_counts) for _ in range(count)]
    head_run = run_of[head_stage]
    regular = [[layers[i] for i in range(len(layers)) if run_of[i] == r and i != head_stage]
               for r in range(len(stage_counts))]

    def excess(counts) -> int:  # slots beyond the model's layers, the head stage holding its own count
        slots = sum(ell * count for ell, count in zip(counts, stage_counts, strict=True))
        return slots - counts[head_run] + layers[head_stage] - total

    for passes in range(total + 1):
        options = []
        for r, held in enumerate(regular):
            if not held:  # a run holding only the head stage takes the head's count
                options.append([layers[head_stage]])
                continue
            above = [f for f in held if f > virtual_stages]
            found = ({f + passes - k for f in above for k in (0, 1)} if above
                     else set(range(virtual_stages, virtual_stages + passes + 1)))
            floor = max(max(held), layers[head_stage] if r == head_run else 0)
            options.append(sorted(x for x in found if x >= floor))
        if all(options) and excess([run[0] for run in options]) > max_excess:
            return None  # more passes only raise ℓ, and the excess with it
        for counts in product(*options):
            trials += 1
            if trials > UNTRIM_TRIALS:
                return None
            if excess(counts) > max_excess:
                continue
            try:
                trimmed = materialize_layers(stage_counts, list(counts), total, virtual_stages,
                                             layers[head_stage], head_stage)
            except ValueError:
                continue
            if trimmed == layers:
                return list(counts)
    return None
