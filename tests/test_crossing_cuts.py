"""Learned crossing cuts (``optimizer.cpsat.crossings``): across a slow building boundary the pipeline pays
one one-way latency per crossing on its critical path, and the CP-SAT model learns that count per plan family."""

from __future__ import annotations

import random
import statistics
from itertools import product

import pytest

from scaleacross_opt.cost.step import build_workload
from scaleacross_opt.optimizer.coefficients import build_coefficients, prune_space
from scaleacross_opt.optimizer.cpsat.build import build_model
from scaleacross_opt.optimizer.cpsat.crossings import (
    CrossingCuts,
    boundary_crossings,
    fixed_order_crossings,
    least_crossings,
    ops_between_crossings,
)
from scaleacross_opt.optimizer.cpsat.extract import plan_assignment
from scaleacross_opt.optimizer.neighbourhood import place, random_plan
from scaleacross_opt.optimizer.refine import plan_bound_us
from scaleacross_opt.optimizer.space import design_space
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.schedules import get_schedule
from scaleacross_opt.schedules.common import UNIT_OP_TIMES
from scaleacross_opt.schedules.registry import schedule_names
from scaleacross_opt.simulator import simulate
from scaleacross_opt.simulator.engine import op_graph
from scaleacross_opt.spec import CrossBuilding, Plan

WAN_LATENCY_US = 20_000  # a cross-region link: the crossings dominate the step


@pytest.fixture(scope="module")
def wan_small(load_shipped_instance):
    """The small two-building instance over a 20 ms link, with ZB-V among its schedules."""
    return load_shipped_instance("small-two-buildings-llama3-8b").with_updates(
        {"cluster.links[0].latency_us": WAN_LATENCY_US,
         "search.schedules": ["gpipe", "1f1b", "interleaved-1f1b", "zb-v", "crosspipe-unidirectional"]})


def _latency_us(pv, plan: Plan) -> int:
    """The model's one-way latency of the cross transport ``plan`` uses."""
    wanted = plan.network.cross_building.model_dump(exclude={"collective_algorithm"})
    transport = next(t for t in pv.cross_transport.values
                     if t.config.model_dump(exclude={"collective_algorithm"}) == wanted)
    return pv.cross_hop_us[transport]


def _model_and_plan(instance, **degrees) -> tuple:
    """(the CP-SAT model of ``instance``'s pruned space, the plan of ``degrees`` with ZeRO-1 and the space's first
    network options, that plan placed PP across at the default counts)."""
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    network = {"intra_building": space.intra_network[0], "cross_building": space.cross_network[0]}
    base = Plan(zero_stage=1, network=network, tp_comm_overlap=space.tp_comm_overlap, **degrees)
    return pv, base, place(instance, fill_defaults(instance, base), CrossBuilding.PP)


def test_closed_forms_count_the_op_graphs_crossings() -> None:
    """1F1B, ZB-H1, GPipe, the window schedule and DualPipe state their least boundary crossings in closed form;
    each equals the count on the op graph, boundary by boundary (1F1B: 2·max(1, ⌊(m + c − p)/2⌋ + 1) after c
    stages)."""
    for pp in (2, 3, 4, 8):
        for m in (1, 2, 5, 8, 13, 24):
            expected = [2 * max(1, (m + c - pp) // 2 + 1) for c in range(1, pp)]
            assert boundary_crossings(op_graph("1f1b", pp, 1, m)).tolist() == expected, (pp, m)
    checked = 0
    for name in schedule_names():
        schedule = get_schedule(name)
        for pp, v, m in product((2, 3, 4, 6, 8), (1, 2), range(1, 41)):
            closed = schedule.least_boundary_crossings(pp, v, m)
            if closed is None or schedule.check(pp, v, m) is not None:
                continue
            assert closed == least_crossings(name, pp, v, m, UNIT_OP_TIMES), (name, pp, v, m)
            checked += 1
    assert checked > 500


def _fewest_ops_less(graph, boundary: int, per_crossing: int) -> int:
    """min over the op graph's paths of (F and B ops − ``per_crossing`` · crossings of ``boundary``), by dynamic
    programming in topological order (a path may start at any op)."""
    import numpy as np

    from scaleacross_opt.schedules.base import OpKind

    best = np.zeros(graph.num_ops, dtype=np.int64)
    counted = (graph.kind != OpKind.W.value).astype(np.int64)
    for op in graph.order.tolist():
        before = 0
        if graph.stream_prev[op] >= 0:
            before = min(before, best[graph.stream_prev[op]])
        source = graph.data_dep[op]
        if source >= 0:
            low, high = sorted((graph.stage[source], graph.stage[op]))
            before = min(before, best[source] - per_crossing * int(low < boundary <= high))
        best[op] = counted[op] + before
    return int(best.min())


def test_a_path_runs_its_ops_between_crossings() -> None:
    """Every path of every schedule's op graph that crosses a boundary c times runs at least
    ``ops_between_crossings`` F and B ops (2c, or c + 1 where a chunk position's neighbours both sit beyond one
    boundary from it: interleaved 1F1B's wrap), at every boundary."""
    checked = 0
    for name in schedule_names():
        schedule = get_schedule(name)
        for pp, v, m in product((2, 3, 4, 6), (1, 2, 3), (4, 8, 12)):
            if schedule.check(pp, v, m) is not None:
                continue
            graph = op_graph(name, pp, v, m)
            per_crossing = 2 if ops_between_crossings(name, pp, v, 2) == 4 else 1
            for boundary in range(1, pp):
                # 2c ops: min(ops − 2c) ≥ 0; c + 1 ops: min(ops − c) ≥ 1 (a path without a crossing runs ≥ 1 op)
                assert _fewest_ops_less(graph, boundary, per_crossing) >= 2 - per_crossing, (name, pp, v, m)
            checked += 1
    assert checked > 60
    assert ops_between_crossings("interleaved-1f1b", 4, 2, 5) == 6 and ops_between_crossings("dualpipe", 4, 2, 5) == 10


def test_cross_region_pipelines_pay_the_ops_between_their_crossings(load_shipped_instance) -> None:
    """DualPipe pp16 with PP across the 30 ms WAN: 98 crossings, 2.94 s of latency, bounded the step at 3.01 s
    against a simulated 4.57 s; the 196 ops the crossings need in between lift it, and it stays below the step."""
    instance = load_shipped_instance("cross-region-gpt3-175b")
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    network = {"intra_building": space.intra_network[0], "cross_building": space.cross_network[0]}
    plan = place(instance, fill_defaults(instance, Plan(
        tp=8, cp=4, pp=16, dp=16, virtual_stages=2, micro_batch_size=1, schedule="dualpipe", recompute="full",
        zero_stage=1, network=network, tp_comm_overlap=space.tp_comm_overlap)), CrossBuilding.PP)
    bound_s = plan_bound_us(pv, plan_assignment(pv, plan), 0) * 1e-6
    assert 3.3 <= bound_s <= simulate(instance, plan).step_time_s


def test_counted_crossings_extrapolate_below_the_exact_count() -> None:
    """Interleaved 1F1B has no closed form: counted on its op graph up to a size, extrapolated by whole periods
    beyond: never above the count (which never falls as m grows), and close to it far past the counted base."""
    name = "interleaved-1f1b"
    schedule = get_schedule(name)
    far = []  # bound / count where m is well past the base (7·pp + 8 micro-batches at most)
    for pp, v in product((2, 3, 4, 8), (2, 3)):
        accepted = [m for m in range(pp, 12 * pp + 1, pp) if schedule.check(pp, v, m) is None]
        counts = [least_crossings(name, pp, v, m, UNIT_OP_TIMES) for m in accepted]
        assert counts == sorted(counts)
        for m, exact in zip(accepted, counts, strict=True):
            bound = fixed_order_crossings(name, pp, v, m, exact_ops=pp * v * 4)
            assert bound <= exact, (pp, v, m)
            if m >= 10 * pp:
                far.append(bound / exact)
    assert len(far) >= 16 and statistics.median(far) >= 0.85  # the count at the base alone would give ~0.6


def test_no_pp_across_plan_is_faster_than_its_crossings_times_the_route_latency(wan_small) -> None:
    space = prune_space(wan_small, design_space(wan_small))
    pv = build_model(wan_small, space, build_coefficients(wan_small, space))
    rng = random.Random(7)
    per_schedule: dict[str, int] = {}
    for _ in range(400):
        drawn = random_plan(wan_small, space, rng)
        plan = drawn and drawn.pp > 1 and place(wan_small, drawn, CrossBuilding.PP)
        if not plan or per_schedule.get(plan.schedule, 0) >= 2:
            continue
        workload = build_workload(wan_small, fill_defaults(wan_small, plan))
        crossings = min(least_crossings(plan.schedule, plan.pp, plan.virtual_stages, workload.num_microbatches,
                                        times) for times in workload.candidate_op_times())
        assert crossings >= 2  # at least micro-batch 0's forward out and backward back
        assert simulate(wan_small, plan).step_time_s >= crossings * _latency_us(pv, plan) * 1e-6, plan
        per_schedule[plan.schedule] = per_schedule.get(plan.schedule, 0) + 1
    seen = set(per_schedule)
    assert seen == {"gpipe", "1f1b", "interleaved-1f1b", "zb-v", "crosspipe-unidirectional"}


def test_pp_across_plans_are_bounded_by_their_crossings(wan_small) -> None:
    """Fixed orders: the model's table gives each (schedule, v, pp, m) its crossings, and under PP across the
    pipeline lasts at least that many route latencies; with a fast link (a crossing cheaper than a quarter
    layer) the table is not built."""
    from ortools.sat.python import cp_model

    pv, _, plan = _model_and_plan(wan_small, tp=2, cp=1, pp=4, dp=16, virtual_stages=1, micro_batch_size=1,
                                  schedule="1f1b")
    for index, value in plan_assignment(pv, plan).items():
        pv.model.Add(pv.model.get_int_var_from_proto_index(index) == value)
    solver = cp_model.CpSolver()
    assert solver.Solve(pv.model) == cp_model.OPTIMAL
    crossings = next(var for var in pv.model.Proto().variables if var.name == "pipeline_boundary_crossings")
    count = solver.Value(pv.model.get_int_var_from_proto_index(list(pv.model.Proto().variables).index(crossings)))
    assert count == 2 * max(1, (8 + 1 - 4) // 2 + 1)  # 1F1B, m = 128 / (16 · 1), the first boundary
    assert solver.Value(pv.terms["pipeline"]) >= count * _latency_us(pv, plan)
    assert solver.ObjectiveValue() * 1e-6 <= simulate(wan_small, plan).step_time_s
    campus = wan_small.with_updates({"cluster.links[0].latency_us": 150})
    campus_space = prune_space(campus, design_space(campus))
    assert not build_model(campus, campus_space, build_coefficients(campus, campus_space)).cross_hop_us


def test_a_zb_v_plan_teaches_the_model_its_familys_crossings(load_shipped_instance) -> None:
    """ZB-V across the cross-region WAN (30 ms): the closed-form terms bound its pp32 plan at 0.91 s, but its
    order crosses the boundary 60 times (2.74 s simulated); once examined, its family is bounded by that."""
    instance = load_shipped_instance("cross-region-gpt3-175b")
    zb_v = {"tp": 2, "cp": 4, "pp": 32, "dp": 32, "virtual_stages": 2, "micro_batch_size": 1, "schedule": "zb-v"}
    pv, base, plan = _model_and_plan(instance, **zb_v)
    other_m = place(instance, fill_defaults(instance, base.model_copy(update={"micro_batch_size": 2})),
                    CrossBuilding.PP)
    assignments = {"plan": plan_assignment(pv, plan), "other_m": plan_assignment(pv, other_m)}
    before = {name: plan_bound_us(pv, a, seed=0) for name, a in assignments.items()}
    cuts = CrossingCuts(pv)
    assert cuts.learn(plan, assignments["plan"])
    assert not cuts.learn(plan, assignments["plan"])  # one cut per family
    after = {name: plan_bound_us(pv, a, seed=0) for name, a in assignments.items()}
    crossings = min(least_crossings("zb-v", 32, 2, 48, times)
                    for times in build_workload(instance, plan).candidate_op_times())
    assert after["plan"] >= crossings * _latency_us(pv, plan) > 1.5 * before["plan"]
    assert after["plan"] * 1e-6 <= simulate(instance, plan).step_time_s
    assert after["other_m"] == before["other_m"]  # another m: another family
    # where buildings price ops differently, a stage's durations depend on where it runs: nothing is learned
    uneven = instance.with_updates({"cluster.buildings[1].fabric_oversubscription": 4})
    uneven_pv, _, uneven_plan = _model_and_plan(uneven, **zb_v)
    assert not CrossingCuts(uneven_pv).learn(uneven_plan, plan_assignment(uneven_pv, uneven_plan))


def test_a_zb_v_candidate_teaches_its_siblings_families(load_shipped_instance) -> None:
    """With ``siblings``, a round's ZB-V candidate also bounds every valid plan that differs from it only in shard
    shape (same tp·cp), ZeRO stage or intra network: each by its own family's crossings, below its simulated step."""
    instance = load_shipped_instance("cross-region-gpt3-175b")
    zb_v = {"tp": 2, "cp": 4, "pp": 32, "dp": 32, "virtual_stages": 2, "micro_batch_size": 1, "schedule": "zb-v"}
    pv, base, plan = _model_and_plan(instance, **zb_v)
    sibling = place(instance, fill_defaults(instance, base.model_copy(update={"tp": 8, "cp": 1})), CrossBuilding.PP)
    assignment = plan_assignment(pv, sibling)
    before = plan_bound_us(pv, assignment, seed=0)
    cuts = CrossingCuts(pv)
    assert cuts.learn(plan, plan_assignment(pv, plan), siblings=True)
    assert not cuts.learn(sibling, assignment, siblings=True)  # its family and group are known
    after = plan_bound_us(pv, assignment, seed=0)
    crossings = min(least_crossings("zb-v", 32, 2, 48, times)
                    for times in build_workload(instance, sibling).candidate_op_times())
    assert after >= crossings * _latency_us(pv, sibling) > 1.5 * before
    assert after * 1e-6 <= simulate(instance, sibling).step_time_s


def test_a_zb_v_family_runs_one_op_order(wan_small) -> None:
    """ZB-V orders its ops by the F:B:W ratio: the plans its cut covers (same shape, ZeRO stage and intra
    network on buildings that price ops alike) must run the same candidate orders whatever their layer split or
    cross network."""
    pv, _, placed = _model_and_plan(wan_small, tp=2, cp=1, pp=4, dp=16, virtual_stages=2, micro_batch_size=1,
                                    schedule="zb-v")
    assert placed.placement.layers_per_stage == [8, 8, 8, 8]
    variants = [placed,
                placed.model_copy(update={"placement": placed.placement.model_copy(
                    update={"layers_per_stage": [10, 8, 8, 6]})}),
                placed.model_copy(update={"network": placed.network.model_copy(
                    update={"cross_building": pv.space.cross_network[-1]})})]
    orders = {tuple(build_workload(wan_small, p).candidate_op_times()) for p in variants}
    assert len(orders) == 1 and len(next(iter(orders))) == 2  # the unit order and the plan's own ratio's
