"""Building-boundary crossings on a pipeline's critical path (PP across buildings).

Every path through a step's op graph (each stage runs its ops in order; an op waits for the op whose output it
needs) that crosses a building boundary k times lasts at least k one-way latencies of that boundary: op
durations and transfer bytes only add to it. The simulated pipeline ends no sooner than its longest path, so
    pipeline ≥ N · λ + n_ops · op_min,   N = min over boundary positions j of the most crossings of j on one path,
with n_ops the F and B ops such a path must run between and around its crossings (``ops_between_crossings``: 2N,
or N + 1 where an op can send back across the boundary it received over), op_min the least F or B op of any
stage and chunk (``pipeline_chains.least_ops``), λ the cheapest one-way latency between two buildings for the plan's
cross-building transport (``Coefficients.cross_hop_us``) and the minimum over every op order the simulator may
run for the plan. Across a WAN this dominates: a 1F1B-like order pays about one crossing per micro-batch, not one
per pipeline fill (1F1B: 2·max(1, ⌊(m + c − p)/2⌋ + 1) crossings of the boundary after c stages; cross-region
GPT-3 175B, ZB-V pp32 m48: N = 60, so 1.8 s of the 2.74 s step, where the closed-form terms see 0.91 s).

Schedules with a fixed order (all but ``orders_by_op_times``): N depends on (schedule, pp, v, m) only and the
model carries a table of it (``crossing_table``): the schedule's closed form where it states one
(``PipelineSchedule.least_boundary_crossings``: 1F1B, ZB-H1, GPipe, the window schedule, DualPipe; each equal to
the op-graph count, tests), else (interleaved 1F1B) counted on the op graph up to ``EXACT_OPS`` stage × chunk ×
micro-batch units and extrapolated by whole periods beyond (``fixed_order_crossings``): that each later period
adds at least the least rise of the last six, and that the count never falls as m grows, is an observed
property of that order, not a theorem (checked against the exact count at pp ≤ 16, v ≤ 3: tests).
Schedules that order ops by the op-duration ratio (ZB-V) run an order for the plan's own F:B:W ratio, a mean over
stages that the shard shape, ZeRO stage and intra-building network set when every building prices ops alike
(same GPU, node, fabric and NVLink domain; the mean is then the whole model's, whatever the split):
their cuts are learned from each plan the search examines (``CrossingCuts``), for that family, and not on
clusters whose buildings differ.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from itertools import pairwise, product

import numpy as np
from ortools.sat.python import cp_model

from ...cost.layout import nvlink_domain
from ...cost.step import build_workload
from ...plan_defaults import fill_defaults
from ...schedules import get_schedule
from ...schedules.common import UNIT_OP_TIMES
from ...simulator.engine import OpGraph, op_graph
from ...spec import CrossBuilding, Instance, Plan
from ...validation.plan_checks import validate_plan
from ..coefficients import Coefficients
from .degrees import schedule_runs
from .variables import OneHot, PlanVars, Transport

EXACT_OPS = 1024  # pp·v·m up to which a fixed order's crossings are counted on its op graph (≤ ~3k ops, ~12 ms)
PERIODS_SEEN = 6  # spans of P micro-batches a count's growth is read over before it is extrapolated
# Crossings are bounded only where one costs at least this share of the cheapest layer's F+B+W: below it
# every crossing on a path comes with ops that take longer, which the op-based terms already count (campus
# links of 100–200 µs against ≥ 1.3 ms layers); leaving a bound out is sound, and the table costs about 1 s to build.
LATENCY_LAYER_SHARE = 0.25


def crossing_latencies_us(coeffs: Coefficients) -> dict[Transport, int]:
    """λ per cross transport (``Coefficients.cross_hop_us``) where crossings are worth bounding, else {}."""
    slowest = max(coeffs.cross_hop_us.values(), default=0)
    return dict(coeffs.cross_hop_us) if slowest >= LATENCY_LAYER_SHARE * min(coeffs.layer_us.values()) else {}


def boundary_crossings(graph: OpGraph) -> np.ndarray:
    """For each boundary j = 1 … pp−1 (between stages j−1 and j), the most times one path of ``graph`` crosses it.

    Longest path with unit weight on the data edges whose two stages lie on either side of j (stream edges and
    the other data edges weigh 0), for every j at once, in topological order."""
    boundaries = np.arange(1, graph.pp)
    crossings = np.zeros((graph.num_ops, boundaries.size), dtype=np.int64)
    stage, prev, dep = graph.stage.tolist(), graph.stream_prev.tolist(), graph.data_dep.tolist()
    crossed: dict[tuple[int, int], np.ndarray] = {}
    for op in graph.order.tolist():
        row = crossings[prev[op]].copy() if prev[op] >= 0 else np.zeros(boundaries.size, dtype=np.int64)
        source = dep[op]
        if source >= 0:
            key = (min(stage[source], stage[op]), max(stage[source], stage[op]))
            if key not in crossed:
                crossed[key] = ((boundaries > key[0]) & (boundaries <= key[1])).astype(np.int64)
            np.maximum(row, crossings[source] + crossed[key], out=row)
        crossings[op] = row
    return crossings.max(axis=0, initial=0)


@lru_cache(maxsize=512)
def least_crossings(schedule: str, pp: int, virtual_stages: int, num_microbatches: int,
                    times: tuple[int, int, int]) -> int:
    """min over boundary positions of ``boundary_crossings`` for one op order (cached)."""
    crossings = boundary_crossings(op_graph(schedule, pp, virtual_stages, num_microbatches, times))
    return int(crossings.min()) if crossings.size else 0


def fixed_order_crossings(schedule: str, pp: int, virtual_stages: int, num_microbatches: int,
                          exact_ops: int = EXACT_OPS) -> int:
    """A lower bound of ``least_crossings`` for a schedule with a fixed op order: the schedule's closed form
    (``PipelineSchedule.least_boundary_crossings``) where it has one; else exact while pp·v·m ≤ ``exact_ops``.
    Beyond, from a base m₁, the largest accepted m ≤ max(``exact_ops``/(pp·v), 7·pp + 8) below m (counted
    exactly: up to ~30k ops at pp·v = 64): past its warm-up a fixed order repeats, so over each of the last
    ``PERIODS_SEEN`` spans of P micro-batches before m₁ (the smallest P of 1–4 and pp–4pp whose span ends are all
    accepted) the count grew by ΔN or more, ΔN the least of those rises, and N(m) ≥ N(m₁) + ⌊(m − m₁)/P⌋·ΔN (each
    period adds ΔN or more, and the count never falls as m grows); N(m₁) where no P fits; 0 where no m below m
    is accepted."""
    closed_form = get_schedule(schedule).least_boundary_crossings(pp, virtual_stages, num_microbatches)
    if closed_form is not None:
        return closed_form
    check = get_schedule(schedule).check

    def exact(m: int) -> int:
        return least_crossings(schedule, pp, virtual_stages, m, UNIT_OP_TIMES)

    m = num_microbatches
    if pp * virtual_stages * m <= exact_ops:
        return exact(m)
    base = max(exact_ops // (pp * virtual_stages), (PERIODS_SEEN + 1) * pp + 8)
    m1 = next((k for k in range(min(base, m - 1), 0, -1) if check(pp, virtual_stages, k) is None), 0)
    if not m1:
        return 0
    for period in sorted({1, 2, 3, 4, pp, 2 * pp, 3 * pp, 4 * pp}):
        ends = [m1 - i * period for i in range(PERIODS_SEEN + 1)]
        if ends[-1] < 1 or any(check(pp, virtual_stages, k) is not None for k in ends):
            continue
        rise = min(exact(a) - exact(b) for a, b in pairwise(ends))
        return exact(m1) + (m - m1) // period * max(rise, 0)
    return exact(m1)


def ops_between_crossings(schedule: str, pp: int, virtual_stages: int, crossings: int) -> int:
    """The fewest F and B ops on a path that crosses one boundary ``crossings`` times: every crossing is a data
    edge from an op to an op (F of position k feeds F of k + 1, B of k feeds B of k − 1), so a path runs ≥ 1 op
    before its first crossing, after its last and between two. Between two it visits one side, entering by one
    op and leaving by one: two distinct ops, so 2N in all, unless one op can both receive and send across a
    boundary — a chunk position whose previous and next positions both sit on stages beyond one side of its own
    (interleaved 1F1B's wrap from stage pp − 1 back to stage 0) — where N + 1 (0 without a crossing)."""
    if crossings == 0:
        return 0
    return crossings + 1 if _turns_back(schedule, pp, virtual_stages) else 2 * crossings


@lru_cache(maxsize=512)
def _turns_back(schedule: str, pp: int, virtual_stages: int) -> bool:
    """Whether some chunk position's previous and next positions both sit on stages beyond one side of its own
    (cached: the crossing table asks once per micro-batch count)."""
    order = get_schedule(schedule)
    stage_at = {order.chunk_stage(pp, virtual_stages, c, s): s for c in range(virtual_stages) for s in range(pp)}
    positions = [stage_at[k] for k in range(pp * virtual_stages)]
    return any((a - s) * (b - s) > 0 for a, s, b in zip(positions, positions[1:], positions[2:], strict=False))


def crossing_table(pv: PlanVars, pp_mode: cp_model.IntVar | None
                   ) -> tuple[cp_model.IntVar, cp_model.IntVar] | None:
    """PP across buildings with a fixed-order schedule: (N, n_ops) of the plan's (schedule, v, pp, m) from a table
    over every combination that can run, N the boundary crossings (module docstring) and n_ops the F and B ops a
    path with N crossings runs (``ops_between_crossings``): pipeline ≥ N·λ + n_ops·(the least F or B op).
    None where no bound applies (no PP across, no slow cross route, or no fixed order crosses)."""
    if pp_mode is None or pv.cross_transport is None or not pv.cross_hop_us:
        return None
    rows = []
    for index, name, v, pp, m in schedule_runs(pv):
        count = fixed_order_crossings(name, pp, v, m) if pp > 1 and not get_schedule(name).orders_by_op_times else 0
        rows.append((index, pp, m, count, ops_between_crossings(name, pp, v, count)))
    most = max((row[3] for row in rows), default=0)
    if most == 0:
        return None
    crossings = pv.model.NewIntVar(0, most, "pipeline_boundary_crossings")
    ops = pv.model.NewIntVar(0, max(row[4] for row in rows), "pipeline_boundary_crossing_ops")
    pv.model.AddAllowedAssignments([pv.schedule_index, pv.pp_var, pv.microbatches, crossings, ops], rows)
    return crossings, ops


def _chosen_lit(choice: OneHot, assignment: dict[int, int]) -> cp_model.IntVar | None:
    """The literal of ``choice`` the assignment sets (None when the assignment does not fix it)."""
    return next((lit for lit in choice.lits if assignment.get(lit.Index()) == 1), None)


def _uniform_buildings(instance: Instance) -> bool:
    """Whether every building prices an op alike (GPU, node, fabric, a whole NVLink domain), so that a stage's op
    durations do not depend on where it runs."""
    kinds = {(b.gpu_spec.model_dump_json(), b.gpus_per_node, b.fabric_oversubscription, b.fabric_latency_us,
              nvlink_domain(b)) for b in instance.cluster.buildings}
    return len(kinds) == 1


class CrossingCuts:
    """The crossing cuts one search learns for schedules ordered by the op-duration ratio, one per plan family
    (module docstring)."""

    def __init__(self, pv: PlanVars):
        self.pv = pv
        self.uniform = _uniform_buildings(pv.instance)  # ratio-ordered families are learned only then
        self.families: set[tuple] = set()
        self.sibling_groups: set[tuple] = set()  # (pp, dp, micro-batch size, schedule, v) whose siblings were learned
        self.microbatch_lits: dict[int, cp_model.IntVar] = {}

    def learn(self, plan: Plan, assignment: dict[int, int], *, siblings: bool = False) -> bool:
        """Post ``pipeline ≥ N·λ`` for the family of ``plan`` (its model assignment ``assignment``) at each cross
        transport's λ, unless already posted; returns whether a new cut was posted (never for a plan that
        does not run PP across buildings). ``siblings``: also for every family of the same pp, m, schedule and
        micro-batch size (the other shard shapes of its tp·cp, ZeRO stages and intra networks) that the
        validator accepts: a round's candidates come in such groups (cross-region, seed 0: two rounds of 8
        proposed ZB-V pp32 plans that differ in shape, ZeRO stage or intra network, bounded at 0.91 s and
        screened at 2.56–4.75 s, and the search never reached the DP-across plan bounded at 0.9125 s), and a
        family costs one closed-form workload (~25 ms) plus its count where the ratio is new."""
        pv = self.pv
        if (plan.placement.cross_building is not CrossBuilding.PP or plan.pp < 2 or pv.cross_transport is None
                or not pv.cross_hop_us or CrossBuilding.PP not in pv.mode.values or not self.uniform
                or not get_schedule(plan.schedule).orders_by_op_times):  # fixed orders: ``crossing_table``
            return False
        fixed = [_chosen_lit(choice, assignment) for choice in (pv.shape, pv.zero, pv.intra_algorithm,
                                                                 pv.intra_transport)]
        posted = False
        if all(lit is not None for lit in fixed):
            posted = self._post(plan, fixed)
        group = (plan.pp, plan.dp, plan.micro_batch_size, plan.schedule, plan.virtual_stages)
        if siblings and group not in self.sibling_groups:
            self.sibling_groups.add(group)
            for sibling, lits in self._siblings(plan):
                posted = self._post(sibling, lits) or posted
        return posted

    def _siblings(self, plan: Plan) -> Iterator[tuple[Plan, list[cp_model.IntVar]]]:
        """Valid plans that differ from ``plan`` only in shard shape (same tp·cp and micro-batch size), ZeRO stage
        and intra network, with the literals of those choices."""
        pv = self.pv
        for shape, zero, algorithm, transport in product(pv.shape.values, pv.zero.values, pv.intra_algorithm.values,
                                                         pv.intra_transport.values):
            if shape.micro_batch_size != plan.micro_batch_size or shape.tp * shape.cp != plan.tp * plan.cp:
                continue
            network = plan.network.model_copy(update={"intra_building": transport.with_algorithm(algorithm)})
            sibling = plan.model_copy(update={"tp": shape.tp, "cp": shape.cp, "ep": shape.ep,
                                              "recompute": shape.recompute, "zero_stage": zero, "network": network})
            if not validate_plan(sibling, pv.instance):
                yield sibling, [pv.shape.lit(shape), pv.zero.lit(zero), pv.intra_algorithm.lit(algorithm),
                                pv.intra_transport.lit(transport)]

    def _post(self, plan: Plan, fixed: list[cp_model.IntVar]) -> bool:
        """The cut of ``plan``'s family, whose shape, ZeRO stage and intra network literals are ``fixed``."""
        pv, instance = self.pv, self.pv.instance
        m = instance.job.global_batch_size // (plan.dp * plan.micro_batch_size)
        conditions = [pv.mode.lit(CrossBuilding.PP), pv.schedule_chunks.lit((plan.schedule, plan.virtual_stages)),
                      pv.pp.lit(plan.pp), *fixed]
        family = (m, *(lit.Index() for lit in conditions))
        if family in self.families:
            return False
        self.families.add(family)
        workload = build_workload(instance, fill_defaults(instance, plan))
        crossings = min(least_crossings(plan.schedule, plan.pp, plan.virtual_stages, m, times)
                        for times in workload.candidate_op_times())
        if crossings == 0:
            return False
        if m not in self.microbatch_lits:  # true whenever the plan runs m micro-batches (free otherwise)
            lit = self.microbatch_lits[m] = pv.model.NewBoolVar(f"microbatches_are[{m}]")
            pv.model.Add(pv.microbatches != m).OnlyEnforceIf(lit.Not())
        conditions.append(self.microbatch_lits[m])
        pipeline, ops = pv.terms["pipeline"], ops_between_crossings(plan.schedule, plan.pp, plan.virtual_stages,
                                                                    crossings)
        least_op = pv.terms.get("least_crossing_op")  # the least F or B op (µs), where the model states one
        for transport, lit in zip(pv.cross_transport.values, pv.cross_transport.lits, strict=True):
            latency = crossings * pv.cross_hop_us[transport]
            pv.model.Add(pipeline >= latency + (0 if least_op is None else ops * least_op)
                         ).OnlyEnforceIf([*conditions, lit])
        return True
