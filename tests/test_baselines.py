"""Baselines registry (issue 10): every plan valid, determinism for a seed, none fits, exhaustive = the
enumerator's best, the plan neighbourhood."""

from __future__ import annotations

import random

import pytest

from scaleacross_opt.baselines import baseline_names, get_baseline, run_baseline, start_plans
from scaleacross_opt.baselines.production import production_plans
from scaleacross_opt.baselines.registry import planner_space
from scaleacross_opt.optimizer.enumerate import enumerate_plans
from scaleacross_opt.optimizer.neighbourhood import Move, neighbours, other_dimensions, random_plan
from scaleacross_opt.simulator import simulate
from scaleacross_opt.spec import CrossBuilding
from scaleacross_opt.validation.plan_checks import validate_plan

SMALL = "small-two-buildings-llama3-8b"
SINGLE = "single-building-llama3-70b"
INFEASIBLE = "infeasible-memory-llama3-405b-a100"
CALLS = 12  # simulator-call budget of the searches in these tests (a generous wall limit never binds)
TINY_SEARCH = {"search.tp_degrees": [4, 8], "search.pp_degrees": [1, 2], "search.micro_batch_sizes": [1],
               "search.virtual_stages": [1], "search.schedules": ["1f1b"], "search.recompute": ["none"],
               "search.collective_algorithms": ["ring"], "search.load_balancing": ["ecmp"],
               "search.loss_recovery": ["go_back_n"], "search.qps_per_connection": [1],
               "search.dp_bucket_factors": [1]}


def test_registry_names_and_kinds() -> None:
    names = baseline_names()
    assert set(names) == {"production", "crossdc-sota", "one-at-a-time", "random", "annealing", "exhaustive"}
    assert {n for n in names if get_baseline(n).cheap} == {"production", "crossdc-sota"}
    assert names[:2] == sorted(["production", "crossdc-sota"])  # cheap ones first
    with pytest.raises(KeyError, match="unknown baseline"):
        get_baseline("nope")


@pytest.mark.parametrize("name", [SMALL, SINGLE])
@pytest.mark.parametrize("method", ["production", "crossdc-sota", "one-at-a-time", "random", "annealing"])
def test_every_baseline_plan_is_valid(load_shipped_instance, name: str, method: str) -> None:
    instance = load_shipped_instance(name)
    result = run_baseline(method, instance, time_limit_s=60, seed=0, max_simulator_calls=CALLS)
    if method == "crossdc-sota":  # one building, or (small) no cross-DC schedule allowed by its search
        assert result.plan is None and result.reason and result.reason.startswith("none fits")
        return
    assert result.plan is not None and result.report is not None, result.reason
    assert validate_plan(result.plan, instance) == []
    assert result.report.step_time_s == pytest.approx(simulate(instance, result.plan).step_time_s)
    assert 1 <= result.simulator_calls <= (CALLS if not get_baseline(method).cheap else 10)


@pytest.mark.parametrize("method", ["random", "annealing", "one-at-a-time"])
def test_same_seed_same_plan(load_shipped_instance, method: str) -> None:
    instance = load_shipped_instance(SMALL)
    runs = [run_baseline(method, instance, time_limit_s=60, seed=7, max_simulator_calls=CALLS) for _ in range(2)]
    assert runs[0].plan == runs[1].plan
    assert runs[0].simulator_calls == runs[1].simulator_calls


def test_searches_never_worse_than_their_production_start(load_shipped_instance) -> None:
    instance = load_shipped_instance(SINGLE)
    production = run_baseline("production", instance, time_limit_s=10)
    for method in ("one-at-a-time", "annealing"):
        found = run_baseline(method, instance, time_limit_s=60, seed=0, max_simulator_calls=CALLS)
        assert found.report.step_time_s <= production.report.step_time_s


@pytest.mark.parametrize("method", ["production", "crossdc-sota", "one-at-a-time", "random", "annealing", "exhaustive"])
def test_none_fits_on_an_infeasible_instance(load_shipped_instance, method: str) -> None:
    result = run_baseline(method, load_shipped_instance(INFEASIBLE), time_limit_s=5, seed=0)
    assert result.plan is None and result.report is None
    assert result.reason.startswith("none fits") and "memory" in result.reason
    assert result.simulator_calls == 0


def test_exhaustive_is_the_best_enumerated_plan(load_shipped_instance) -> None:
    instance = load_shipped_instance(SMALL).with_updates(TINY_SEARCH)
    space = planner_space(instance)
    timed = sorted((simulate(instance, p).step_time_s, p.model_dump_json()) for p in enumerate_plans(instance, space)
                   if not validate_plan(p, instance))
    assert 2 <= len(timed) <= 200
    result = run_baseline("exhaustive", instance, time_limit_s=60)
    assert result.reason is None
    assert result.simulator_calls == len(timed)
    assert (result.report.step_time_s, result.plan.model_dump_json()) == timed[0]


def test_exhaustive_reports_a_large_space(load_shipped_instance) -> None:
    result = run_baseline("exhaustive", load_shipped_instance(SINGLE), time_limit_s=30)
    assert result.plan is None and result.reason.startswith("space too large")
    assert result.simulator_calls == 0


def test_exhaustive_budget_ending_early_is_marked(load_shipped_instance) -> None:
    instance = load_shipped_instance(SMALL).with_updates(TINY_SEARCH)
    result = run_baseline("exhaustive", instance, time_limit_s=60, max_simulator_calls=1)
    assert result.plan is not None and result.reason.startswith("incomplete")


def test_start_plans_hold_every_cheap_baselines_plans(load_shipped_instance) -> None:
    instance = load_shipped_instance("metro-two-buildings-llama3-70b")
    space = planner_space(instance)
    plans = start_plans(instance, space)
    keys = [p.model_dump_json() for p in plans]
    assert len(keys) == len(set(keys))
    assert {p.model_dump_json() for p in production_plans(instance, space)} <= set(keys)
    crossdc = [p for p in plans if p.placement.cross_building is CrossBuilding.PP]
    assert crossdc and {p.schedule for p in crossdc} <= {"crosspipe-unidirectional", "dualpipe", "zb-v"}
    assert all(validate_plan(p, instance) == [] for p in plans)


@pytest.mark.parametrize("name", [SMALL, SINGLE, "three-buildings-campus-llama3-70b"])
def test_neighbours_are_valid_distinct_sorted_and_deterministic(load_shipped_instance, name: str) -> None:
    instance = load_shipped_instance(name)
    space = planner_space(instance)
    plan = production_plans(instance, space)[0]
    found = neighbours(instance, space, plan)
    keys = [p.model_dump_json() for p in found]
    assert found and keys == sorted(set(keys)) and plan.model_dump_json() not in keys
    assert all(validate_plan(p, instance) == [] for p in found)
    assert [p.model_dump_json() for p in neighbours(instance, space, plan)] == keys
    by_kind = {kind: neighbours(instance, space, plan, (kind,)) for kind in Move}
    assert sum(len(v) for v in by_kind.values()) >= len(found)
    assert all(p.network == plan.network for p in by_kind[Move.SCHEDULE])
    assert all((p.tp, p.cp, p.pp, p.dp) == (plan.tp, plan.cp, plan.pp, plan.dp) for p in by_kind[Move.NETWORK])


def test_neighbours_move_the_cross_building_dimension_and_split(load_shipped_instance) -> None:
    # half of the GPUs: the job fits one building, so the dimension and the split can move
    instance = load_shipped_instance(SMALL).with_updates({"job.num_gpus": 64,
                                                          "search.cross_building": ["none", "pp", "dp"]})
    space = planner_space(instance)
    plan = production_plans(instance, space)[0]
    assert plan.placement.cross_building is CrossBuilding.NONE
    moved = neighbours(instance, space, plan, (Move.PLACEMENT,))
    dp_across = [p for p in moved if p.placement.cross_building is CrossBuilding.DP and p.pp == plan.pp]
    assert {tuple(s.dp_replicas for s in p.placement.buildings) for p in dp_across} == {(4, 4)}
    assert {p.network.cross_building for p in dp_across} == set(space.cross_network)  # each option
    split = {tuple(s.dp_replicas for s in p.placement.buildings)
             for p in neighbours(instance, space, dp_across[0], (Move.PLACEMENT,))
             if p.placement.cross_building is CrossBuilding.DP and (p.tp, p.pp) == (plan.tp, plan.pp)}
    assert split == {(3, 5), (5, 3)}  # one replica from one building to the other
    deeper = next(p for p in moved if p.pp == 2 and p.tp == plan.tp)
    stages = {tuple(s.pp_stages for s in p.placement.buildings)
              for p in neighbours(instance, space, deeper, (Move.PLACEMENT,))
              if p.placement.cross_building is CrossBuilding.PP}
    assert (1, 1) in stages  # pp = 2: one stage in each building


def test_other_dimensions_change_the_dimension_and_the_cross_network_only(load_shipped_instance) -> None:
    """A plan's twins in the other cross-building dimensions keep its degrees, schedule and intra network, and come
    with every cross-building network option (the one its own dimension used may not suit theirs)."""
    instance = load_shipped_instance(SMALL).with_updates({"job.num_gpus": 64,
                                                          "search.cross_building": ["none", "pp", "dp"]})
    space = planner_space(instance)
    deeper = next(p for p in neighbours(instance, space, production_plans(instance, space)[0], (Move.PLACEMENT,))
                  if p.pp == 2)
    plan = next(p for p in neighbours(instance, space, deeper, (Move.PLACEMENT,))
                if p.placement.cross_building is CrossBuilding.PP)
    twins = other_dimensions(instance, space, plan)
    assert twins and all(validate_plan(p, instance) == [] for p in twins)
    assert {p.placement.cross_building for p in twins} == {CrossBuilding.NONE, CrossBuilding.DP}
    kept = ("tp", "cp", "pp", "dp", "schedule", "virtual_stages", "micro_batch_size", "zero_stage", "recompute")
    assert all(getattr(p, name) == getattr(plan, name) for p in twins for name in kept)
    assert all(p.network.intra_building == plan.network.intra_building for p in twins)
    dp_across = [p for p in twins if p.placement.cross_building is CrossBuilding.DP]
    assert {p.network.cross_building for p in dp_across} == set(space.cross_network)
    assert [p.model_dump_json() for p in twins] == sorted({p.model_dump_json() for p in twins})


def test_neighbours_move_one_layer_between_the_buildings_of_a_pipeline(three_building_zb_v) -> None:
    """PP across: the layer split moves inside the CP-SAT model's family (per-building most layers per
    stage, the LM-head stage's own), so local search reaches the splits a CP-SAT round could propose."""
    from scaleacross_opt.optimizer.coefficients import build_coefficients
    from scaleacross_opt.optimizer.cpsat.build import build_model
    from scaleacross_opt.optimizer.cpsat.extract import plan_assignment, plan_of

    instance, space, plan = three_building_zb_v
    assert plan.placement.layers_per_stage == [27, 26, 27]  # the even split, its excess trimmed from stage 1
    moved = [p for p in neighbours(instance, space, plan, (Move.PLACEMENT,))
             if p.model_copy(update={"placement": plan.placement}) == plan]
    splits = sorted(p.placement.layers_per_stage for p in moved)
    assert splits == [[26, 26, 28], [26, 27, 27], [27, 25, 28], [27, 27, 26], [28, 25, 27], [28, 26, 26]]
    pv = build_model(instance, space, build_coefficients(instance, space))
    for p in moved:
        assignment = plan_assignment(pv, p)
        assert assignment is not None
        assert plan_of(pv, assignment).placement == p.placement
    flipped = plan.model_copy(update={"tp_comm_overlap": not plan.tp_comm_overlap})
    assert plan_assignment(pv, flipped) is None  # the model prices TP/GEMM overlap only as the space sets it


def test_layer_moves_between_buildings_of_unequal_stage_counts_keep_the_model_held(load_shipped_instance) -> None:
    """Hetero 405B, 8 H100 stages and 2 B200 stages: one layer less per H100 stage frees 8 layers (7 when
    one H100 stage is trimmed) that the B200 stages must take — 4 each (the excess trimmed), or 3 each and
    one on the LM-head stage (stage 0 in DualPipe). A move of one layer each way would drop the model's
    layers, so without this the balanced split (10 per H100 stage, 23 per B200) was reached only through
    a CP-SAT round; both moves stay in the CP-SAT model's family."""
    from scaleacross_opt.optimizer.coefficients import build_coefficients
    from scaleacross_opt.optimizer.cpsat.build import build_model
    from scaleacross_opt.optimizer.cpsat.extract import plan_assignment, plan_of
    from scaleacross_opt.plan_defaults import fill_defaults
    from scaleacross_opt.spec import NetworkConfig, Placement, Plan

    instance = load_shipped_instance("hetero-h100-b200-llama3-405b")
    space = planner_space(instance)
    network = NetworkConfig(intra_building=space.intra_network[0], cross_building=space.cross_network[0])
    shares = [{"building": "bldg-h100", "dp_replicas": 64, "pp_stages": 8},
              {"building": "bldg-b200", "dp_replicas": 64, "pp_stages": 2}]
    plan = fill_defaults(instance, Plan(
        tp=4, cp=4, pp=10, dp=64, virtual_stages=2, micro_batch_size=1, schedule="dualpipe", zero_stage=1,
        network=network, tp_comm_overlap=space.tp_comm_overlap,
        placement=Placement(cross_building="pp", buildings=shares, layers_per_stage=[9] + [11] * 7 + [20, 20])))
    assert validate_plan(plan, instance) == []
    splits = {tuple(p.placement.layers_per_stage): p for p in neighbours(instance, space, plan, (Move.PLACEMENT,))
              if p.model_copy(update={"placement": plan.placement}) == plan}
    assert (10,) * 8 + (23, 23) in splits and (9, 9) + (10,) * 6 + (24, 24) in splits
    assert all(sum(split) == instance.job.model_spec.layers for split in splits)
    pv = build_model(instance, space, build_coefficients(instance, space))
    for split in ((10,) * 8 + (23, 23), (9, 9) + (10,) * 6 + (24, 24)):
        assignment = plan_assignment(pv, splits[split])
        assert assignment is not None and plan_of(pv, assignment).placement == splits[split].placement


def test_schedule_moves_keep_a_tuned_layer_split(three_building_zb_v) -> None:
    """PP across: a schedule, micro-batch, recompute or ZeRO move keeps the plan's per-building layer
    split where the new plan can hold it (a mixed-GPU pipeline's tuned split is not thrown away), inside
    the CP-SAT model's family (the LM-head stage moves from the first stage to the last and back)."""
    from scaleacross_opt.optimizer.coefficients import build_coefficients
    from scaleacross_opt.optimizer.cpsat.build import build_model
    from scaleacross_opt.optimizer.cpsat.extract import plan_assignment

    instance, space, plan = three_building_zb_v
    tuned = next(p for p in neighbours(instance, space, plan, (Move.PLACEMENT,))
                 if p.placement.layers_per_stage == [28, 25, 27])
    moved = neighbours(instance, space, tuned, (Move.SCHEDULE,))
    assert {p.schedule for p in moved} >= {"1f1b", "interleaved-1f1b", "zb-h1", "zb-v"}
    assert {p.recompute for p in moved} == set(space.recompute)
    assert all(p.placement.layers_per_stage == [28, 25, 27] for p in moved)
    pv = build_model(instance, space, build_coefficients(instance, space))
    assert all(plan_assignment(pv, p) is not None for p in moved if p.tp_comm_overlap == tuned.tp_comm_overlap)


def test_random_plan_is_valid_and_seeded(load_shipped_instance) -> None:
    instance = load_shipped_instance(SMALL)
    space = planner_space(instance)
    first = [random_plan(instance, space, random.Random(3)) for _ in range(2)]
    assert first[0] == first[1] and first[0] is not None
    assert validate_plan(first[0], instance) == []
