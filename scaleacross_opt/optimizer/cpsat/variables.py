"""Decision variables of the CP-SAT model.

Every discrete choice is a one-hot set of literals (``OneHot``); integer degrees are linear in their
literals. Per building b: ``used[b]``, ``replicas[b]`` (DP replicas held), ``stages[b]`` (pipeline
stages held), ``layers[b]`` (layers per stage there) and ``head[b]`` (b holds the stage with the LM
head: the pipeline's last stage, or its first for V-shaped schedules); ``head_layers`` is that stage's
layer count. pp+dp: ``member[b][g]`` (building b belongs to pipeline group g; groups are numbered in order of
their first building) and ``group_replicas[g]`` (replicas of group g, held by each of its buildings).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ortools.sat.python import cp_model

from ...spec import CollectiveAlgorithm, CrossBuilding, Instance, Recompute, TrafficClassConfig
from ..space import DesignSpace, Shape

T = TypeVar("T")


@dataclass
class OneHot(Generic[T]):
    """Exactly one literal of ``lits`` is true; ``lits[i]`` means the choice is ``values[i]``."""

    values: list[T]
    lits: list[cp_model.IntVar]

    def lit(self, value: T) -> cp_model.IntVar:
        """The literal meaning 'the choice is value'."""
        return self.lits[self.values.index(value)]

    def chosen(self, solver: cp_model.CpSolver) -> T:
        """The value the solver chose."""
        return next(v for v, lit in zip(self.values, self.lits, strict=True) if solver.BooleanValue(lit))

    def linear(self, weights: list[int]) -> cp_model.LinearExpr:
        """Σ weight_i · lit_i."""
        return cp_model.LinearExpr.WeightedSum(self.lits, weights)

    def value_var(self, model: cp_model.CpModel, name: str, values: list[int]) -> cp_model.IntVar:
        """A new variable equal to ``values[i]`` when the choice takes its i-th value (values ≥ 0)."""
        var = model.NewIntVar(0, max(values), name)
        model.Add(var == self.linear(values))
        return var

    def any_of(self, model: cp_model.CpModel, name: str, keep: Callable[[T], bool]) -> cp_model.IntVar:
        """A new literal, true exactly when the chosen value is one ``keep`` accepts."""
        lit = model.NewBoolVar(name)
        model.Add(lit == sum(x for value, x in zip(self.values, self.lits, strict=True) if keep(value)))
        return lit


def one_hot(model: cp_model.CpModel, name: str, values: list[T]) -> OneHot[T]:
    """New one-hot choice over ``values``."""
    lits = [model.NewBoolVar(f"{name}={v}") for v in values]
    model.AddExactlyOne(lits)
    return OneHot(list(values), lits)


def int_of(model: cp_model.CpModel, name: str, choice: OneHot[int]) -> cp_model.IntVar:
    """Integer variable equal to the chosen value."""
    var = model.NewIntVarFromDomain(cp_model.Domain.FromValues(sorted(set(choice.values))), name)
    model.Add(var == choice.linear(choice.values))
    return var


@dataclass(frozen=True)
class Transport:
    """Transport knobs of one traffic class (everything but the collective algorithm)."""

    config: TrafficClassConfig  # with a placeholder algorithm; use ``with_algorithm``

    def with_algorithm(self, algorithm: CollectiveAlgorithm) -> TrafficClassConfig:
        """Full per-class settings with ``algorithm``."""
        return self.config.model_copy(update={"collective_algorithm": algorithm})


def split_network_options(options: tuple[TrafficClassConfig, ...]) -> tuple[list[CollectiveAlgorithm], list[Transport]]:
    """Distinct algorithms and distinct transports (the option list is their full product)."""
    algorithms = sorted({o.collective_algorithm for o in options}, key=list(CollectiveAlgorithm).index)
    transports: dict[tuple, Transport] = {}
    for option in options:
        key = (option.load_balancing, option.congestion_control, option.loss_recovery,
               option.qps_per_connection, option.window_kib_per_qp)
        transports.setdefault(key, Transport(option.model_copy(update={"collective_algorithm": algorithms[0]})))
    return algorithms, list(transports.values())


@dataclass
class PlanVars:
    """All decision variables plus the instance and space they were built for."""

    model: cp_model.CpModel
    instance: Instance
    space: DesignSpace
    tp: OneHot[int]
    cp: OneHot[int]
    pp: OneHot[int]
    ep: OneHot[int]
    dp: OneHot[int]
    micro_batch: OneHot[int]
    recompute: OneHot[Recompute]
    zero: OneHot[int]
    schedule_chunks: OneHot[tuple[str, int]]
    shape: OneHot[Shape]
    mode: OneHot[CrossBuilding]
    intra_algorithm: OneHot[CollectiveAlgorithm]
    intra_transport: OneHot[Transport]
    cross_algorithm: OneHot[CollectiveAlgorithm] | None
    cross_transport: OneHot[Transport] | None
    bucket: OneHot[int]  # gradient bucket = Megatron's default × this factor (1 where the size does not matter)
    tp_var: cp_model.IntVar
    cp_var: cp_model.IntVar
    pp_var: cp_model.IntVar
    dp_var: cp_model.IntVar
    ep_var: cp_model.IntVar
    micro_batch_var: cp_model.IntVar
    virtual_var: cp_model.IntVar
    microbatches: cp_model.IntVar  # m = global batch ÷ (dp · micro-batch)
    microbatch_values: list[int]
    used: list[cp_model.IntVar]
    replicas: list[cp_model.IntVar]
    stages: list[cp_model.IntVar]
    layers: list[cp_model.IntVar]
    head: list[cp_model.IntVar]  # head[b]: building b holds the stage with the LM head
    head_layers: cp_model.IntVar  # layers of that stage
    member: list[list[cp_model.IntVar]]  # pp+dp: member[b][g] building b is in pipeline group g (else empty)
    group_replicas: list[cp_model.IntVar]  # pp+dp: replicas of group g (0 for an empty group)
    group_min_boundaries: cp_model.IntVar  # pp+dp: fewest building boundaries on one group's pipeline
    group_first_stage: list[cp_model.IntVar]  # pp+dp: index of building b's first stage in its group's pipeline
    terms: dict[str, cp_model.IntVar] = field(default_factory=dict)  # objective parts, µs
    # one-way latency (µs) of the cheapest cross-building route per cross transport (``Coefficients.cross_hop_us``),
    # the price of a boundary crossing (``crossings``); empty where crossings are not bounded
    cross_hop_us: dict[Transport, int] = field(default_factory=dict)
    # index of the chosen (schedule, v) in ``schedule_chunks.values`` (the schedule table's key; set by ``degrees``)
    schedule_index: cp_model.IntVar | None = None

    @property
    def buildings(self) -> list[str]:
        """Building names in cluster order."""
        return [b.name for b in self.instance.cluster.buildings]


def create_variables(model: cp_model.CpModel, instance: Instance, space: DesignSpace) -> PlanVars:
    """Declare every decision variable (constraints linking them come from the other modules)."""
    n = instance.num_gpus
    gbs = instance.job.global_batch_size
    dp_values = sorted({n // (t * c * p) for t in space.tp for c in space.cp for p in space.pp
                        if n % (t * c * p) == 0})
    tp, cp = one_hot(model, "tp", list(space.tp)), one_hot(model, "cp", list(space.cp))
    pp = one_hot(model, "pp", list(space.pp))
    ep, dp = one_hot(model, "ep", list(space.ep)), one_hot(model, "dp", dp_values)
    micro_batch = one_hot(model, "mbs", list(space.micro_batch_sizes))
    chunks = one_hot(model, "schedule", space.schedule_chunks())
    intra_algs, intra_transports = split_network_options(space.intra_network)
    cross_algs, cross_transports = split_network_options(space.cross_network) if space.cross_network else ([], [])
    m_values = sorted({gbs // (d * b) for d in dp_values for b in space.micro_batch_sizes if gbs % (d * b) == 0})
    buildings = instance.cluster.buildings
    layers = instance.job.model_spec.layers
    # pp+dp: at least two groups, one of them spanning two buildings, so at most #buildings − 1 groups
    max_groups = len(buildings) - 1 if CrossBuilding.PP_DP in space.cross_building else 0
    virtual = model.NewIntVarFromDomain(cp_model.Domain.FromValues(sorted({v for _, v in chunks.values})), "v")
    model.Add(virtual == chunks.linear([v for _, v in chunks.values]))
    pv = PlanVars(
        model=model, instance=instance, space=space, tp=tp, cp=cp, pp=pp, ep=ep, dp=dp, micro_batch=micro_batch,
        recompute=one_hot(model, "recompute", list(space.recompute)),
        zero=one_hot(model, "zero", list(space.zero_stages)),
        schedule_chunks=chunks,
        shape=one_hot(model, "shape", space.shapes),
        mode=one_hot(model, "cross", list(space.cross_building)),
        intra_algorithm=one_hot(model, "intra_alg", intra_algs),
        intra_transport=one_hot(model, "intra_transport", intra_transports),
        cross_algorithm=one_hot(model, "cross_alg", cross_algs) if cross_algs else None,
        cross_transport=one_hot(model, "cross_transport", cross_transports) if cross_transports else None,
        bucket=one_hot(model, "bucket_factor", sorted(set(space.bucket_factors) | {1})),
        tp_var=int_of(model, "tp_v", tp), cp_var=int_of(model, "cp_v", cp), pp_var=int_of(model, "pp_v", pp),
        dp_var=int_of(model, "dp_v", dp), ep_var=int_of(model, "ep_v", ep),
        micro_batch_var=int_of(model, "mbs_v", micro_batch), virtual_var=virtual,
        microbatches=model.NewIntVarFromDomain(cp_model.Domain.FromValues(m_values or [1]), "m"),
        microbatch_values=m_values,
        used=[model.NewBoolVar(f"used[{b.name}]") for b in buildings],
        # pp across: every building holds (some stages of) all dp replicas
        replicas=[model.NewIntVar(0, max(dp_values), f"replicas[{b.name}]") for b in buildings],
        stages=[model.NewIntVar(0, max(space.pp), f"stages[{b.name}]") for b in buildings],
        layers=[model.NewIntVar(0, layers, f"layers[{b.name}]") for b in buildings],
        head=[model.NewBoolVar(f"head[{b.name}]") for b in buildings],
        head_layers=model.NewIntVar(1, layers, "head_layers"),
        member=[[model.NewBoolVar(f"member[{b.name}][{g}]") for g in range(max_groups)] for b in buildings],
        group_replicas=[model.NewIntVar(0, max(dp_values), f"group_replicas[{g}]") for g in range(max_groups)],
        group_min_boundaries=model.NewIntVar(0, len(buildings), "group_min_boundaries"),
        group_first_stage=[model.NewIntVar(0, max(space.pp), f"group_first_stage[{b.name}]") for b in buildings],
    )
    return pv
