"""The optimizer: CP-SAT vs brute force, the validator on every output, determinism, infeasibility,
and the bound the CP-SAT objective gives against the simulator."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import pytest

from scaleacross_opt.errors import InfeasibleError
from scaleacross_opt.io import check_loaded_instance, load_model
from scaleacross_opt.optimizer import solve
from scaleacross_opt.optimizer.coefficients import build_coefficients, prune_space
from scaleacross_opt.optimizer.cpsat.build import build_model
from scaleacross_opt.optimizer.cpsat.extract import plan_assignment
from scaleacross_opt.optimizer.enumerate import enumerate_plans
from scaleacross_opt.optimizer.placement import materialize_layers
from scaleacross_opt.optimizer.refine import plan_bound_us
from scaleacross_opt.optimizer.space import design_space
from scaleacross_opt.simulator import simulate
from scaleacross_opt.spec import Building, Cluster, Instance, Job, Link, SearchSpace
from scaleacross_opt.validation.plan_checks import validate_plan


def tiny_instance(models_dir, num_buildings: int = 2, **search) -> Instance:
    """2 (or 3) × 16 H100 on campus links, Llama 3 8B, a search space of a few hundred plans."""
    restrictions = dict(
        tp_degrees=[4, 8], cp_degrees=[1], pp_degrees=[1, 2], micro_batch_sizes=[1], virtual_stages=[1, 2],
        schedules=["1f1b", "interleaved-1f1b", "gpipe"], recompute=["none", "full"], zero_stages=[1],
        collective_algorithms=["ring"], load_balancing=["ecmp"], congestion_control=["dcqcn"],
        loss_recovery=["go_back_n", "selective_repeat"], qps_per_connection=[1], window_kib_per_qp=[4096],
    )
    restrictions.update(search)
    names = "abc"[:num_buildings]
    instance = Instance(
        name="tiny",
        cluster=Cluster(
            buildings=[Building(name=n, gpu="H100-SXM-80GB", num_gpus=16) for n in names],
            links=[Link(a=x, b=y, bandwidth_gbps=2000 * (i + 1), latency_us=500 * (i + 1), loss_rate=1e-5)
                   for i, (x, y) in enumerate(pairwise(names))],
        ),
        job=Job(model=load_model(models_dir / "llama3-8b.yaml"), seq_len=4096, global_batch_size=16 * num_buildings),
        search=SearchSpace(**restrictions),
    )
    return check_loaded_instance(instance, "<tiny>")


def brute_force(instance: Instance) -> tuple[float, int]:
    """Best simulated step over every valid plan, and how many plans were valid."""
    space = prune_space(instance, design_space(instance))
    times = [simulate(instance, plan).step_time_s for plan in enumerate_plans(instance, space)
             if not validate_plan(plan, instance)]
    return min(times), len(times)


def test_solve_matches_brute_force_and_simulates_far_fewer_plans(models_dir) -> None:
    instance = tiny_instance(models_dir)
    best, valid = brute_force(instance)
    result = solve(instance, time_limit_s=60, seed=0, top_k=4)
    assert valid > 50
    assert result.step_time_s == pytest.approx(best, rel=1e-9)
    assert result.stats.status in ("optimal", "within_bound_error", "exhausted")
    assert result.stats.candidates_simulated < valid / 2
    # the closed form screened neighbours out, and the optimum is still the brute force's
    assert result.stats.screened > 0 and result.stats.estimate_overshoot >= 0.05


def test_every_returned_plan_passes_the_independent_validator(load_shipped_instance) -> None:
    for name in ("small-two-buildings-llama3-8b", "single-building-llama3-70b"):
        instance = load_shipped_instance(name)
        result = solve(instance, time_limit_s=8, seed=0, top_k=4)
        assert validate_plan(result.plan, instance) == []
        assert result.step_time_s == pytest.approx(simulate(instance, result.plan).step_time_s)


def test_same_seed_same_plan(models_dir) -> None:
    instance = tiny_instance(models_dir)
    first = solve(instance, time_limit_s=60, seed=7, top_k=4)
    second = solve(instance, time_limit_s=60, seed=7, top_k=4)
    assert first.plan == second.plan
    assert first.step_time_s == second.step_time_s


def test_returned_plan_carries_its_own_bound_even_when_local_search_found_it(load_shipped_instance) -> None:
    """The best plan is cut off from the model once simulated; its bound is still computed (on the model
    before the cuts), not reported as 0."""
    result = solve(load_shipped_instance("small-two-buildings-llama3-8b"), time_limit_s=20, seed=0)
    assert result.stats.status == "optimal"
    assert 0 < result.cpsat_bound_s <= result.step_time_s * (1 + result.stats.bound_error) + 1e-6


def test_thread_count_does_not_change_a_converged_answer(models_dir) -> None:
    """CP-SAT's portfolio size (a sweep gives each point the CPUs it reserved) changes how the search runs, not
    the optimum it proves."""
    instance = tiny_instance(models_dir)
    single = solve(instance, time_limit_s=60, seed=0, top_k=4, threads=1)
    portfolio = solve(instance, time_limit_s=60, seed=0, top_k=4, threads=8)
    assert single.stats.status == portfolio.stats.status == "optimal"
    assert single.plan == portfolio.plan and single.step_time_s == portfolio.step_time_s


def test_infeasible_instance_says_memory_does_not_fit(load_shipped_instance) -> None:
    instance = load_shipped_instance("infeasible-memory-llama3-405b-a100")
    with pytest.raises(InfeasibleError, match="does not fit memory"):
        solve(instance, time_limit_s=20, seed=0)


def test_degrees_that_cannot_multiply_to_the_gpu_count_are_infeasible(models_dir) -> None:
    instance = tiny_instance(models_dir, tp_degrees=[8], pp_degrees=[3])  # 32 GPUs: 8·pp·dp never with pp = 3
    with pytest.raises(InfeasibleError):
        solve(instance, time_limit_s=10, seed=0)


def test_bound_is_below_simulation_on_every_plan_of_a_small_space(models_dir) -> None:
    """The CP-SAT objective of each plan (its decisions fixed) against the simulator: a lower bound up
    to the ~1 % of effects the linearisation rounds or approximates (reported by solve as bound_error)."""
    instance = tiny_instance(models_dir)
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    ratios, bounds = [], {}
    for plan in enumerate_plans(instance, space):  # each gradient bucket size too, an assignment of its own
        if validate_plan(plan, instance):
            continue
        assignment = plan_assignment(pv, plan)
        assert assignment is not None
        key = tuple(sorted(assignment.items()))
        if key not in bounds:
            bounds[key] = plan_bound_us(pv, assignment, seed=0)
        assert bounds[key] is not None, f"the CP-SAT model excludes a valid plan: {plan.model_dump_json()}"
        ratios.append(bounds[key] * 1e-6 / simulate(instance, plan).step_time_s)
    assert len(ratios) > 50 and len(bounds) == len(ratios)
    assert max(ratios) <= 1.01
    assert sorted(ratios)[len(ratios) // 2] > 0.6  # and not trivially loose


def test_search_restrictions_shape_the_design_space(models_dir) -> None:
    space = design_space(tiny_instance(models_dir))
    assert space.tp == (4, 8) and space.pp == (1, 2) and space.cp == (1,)
    assert {o.loss_recovery.value for o in space.intra_network} == {"go_back_n", "selective_repeat"}
    assert any(o.collective_algorithm.value == "hierarchical" for o in space.cross_network)


def test_layer_split_keeps_the_head_stage_and_trims_others_from_the_front() -> None:
    assert materialize_layers([2, 2], [9, 9], 32, 1, 5, head_stage=3) == [9, 9, 9, 5]
    assert materialize_layers([4], [9], 32, 1, 8, head_stage=3) == [8, 8, 8, 8]
    assert materialize_layers([4], [9], 32, 2, 6, head_stage=0) == [6, 8, 9, 9]


def test_model_admits_every_valid_plan_when_pp_crosses_buildings(models_dir) -> None:
    """With pp ≥ 2 everywhere, a building holding some stages of all dp replicas has more replicas than
    whole replicas would fit in it: the model must still admit those plans."""
    instance = tiny_instance(models_dir, pp_degrees=[2], virtual_stages=[1], recompute=["none"],
                             loss_recovery=["selective_repeat"])
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    crossing = [plan for plan in enumerate_plans(instance, space)
                if not validate_plan(plan, instance) and plan.placement.cross_building.value == "pp"]
    assert crossing
    for plan in crossing:
        assert plan_bound_us(pv, plan_assignment(pv, plan), seed=0) is not None, plan.model_dump_json()


def test_solve_matches_brute_force_with_pipeline_groups(models_dir) -> None:
    """Three buildings: the best plan may chain some buildings' stages and sync across groups (pp+dp)."""
    instance = tiny_instance(models_dir, num_buildings=3, dp_bucket_factors=[1, 64])
    assert "pp+dp" in {mode.value for mode in design_space(instance).cross_building}
    best, valid = brute_force(instance)
    result = solve(instance, time_limit_s=60, seed=0, top_k=4)
    assert result.step_time_s == pytest.approx(best, rel=1e-9)
    assert result.stats.candidates_simulated < valid / 2
    assert validate_plan(result.plan, instance) == []


def slow_link_dp_instance(models_dir, **search) -> Instance:
    """The tiny instance with DP across a 30 ms link, where larger gradient buckets pay fewer latencies."""
    instance = tiny_instance(models_dir, pp_degrees=[1, 2], virtual_stages=[1], schedules=["1f1b"], recompute=["none"],
                             loss_recovery=["selective_repeat"], cross_building=["dp"], **search)
    return instance.with_updates({"cluster.links[*].latency_us": 30_000})


def test_solve_matches_brute_force_over_bucket_sizes(models_dir) -> None:
    """Over a slow link the optimum needs a gradient bucket larger than the default; solve finds it and
    proves it."""
    instance = slow_link_dp_instance(models_dir, dp_bucket_factors=[1, 4, 16, 64])
    space = prune_space(instance, design_space(instance))
    timed = [(simulate(instance, plan).step_time_s, plan) for plan in enumerate_plans(instance, space)
             if not validate_plan(plan, instance)]
    best_s, best_plan = min(timed, key=lambda pair: pair[0])
    assert best_plan.dp_bucket_params is not None  # the test needs an optimum off the default
    result = solve(instance, time_limit_s=60, seed=0, top_k=4)
    assert result.step_time_s == pytest.approx(best_s, rel=1e-9)
    assert result.stats.status in ("optimal", "within_bound_error")


def test_bound_counts_the_latency_of_every_gradient_bucket(models_dir) -> None:
    """The model carries the bucket factor: over a 30 ms link each default-size bucket of the first chunk pays
    the ring's latency, so the default bucket's bound exceeds the largest bucket's (it was one bound for
    both), and each stays below its simulated step."""
    instance = slow_link_dp_instance(models_dir, dp_bucket_factors=[1, 64])
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    plan = next(p for p in enumerate_plans(instance, space) if not validate_plan(p, instance)
                and p.zero_stage == 1 and p.dp_bucket_params is None and p.pp == 1)
    ratios = {}
    for size in space.bucket_sizes(plan):
        sized = plan.model_copy(update={"dp_bucket_params": size})
        bound = plan_bound_us(pv, plan_assignment(pv, sized), seed=0)
        ratios[size] = (bound * 1e-6, simulate(instance, sized).step_time_s)
    (default_bound, default_s), (large_bound, large_s) = ratios[None], ratios[max(s for s in ratios if s)]
    assert default_bound - large_bound > 0.5 * (default_s - large_s)  # 17.6 of the 20.9 s the buckets' latency costs
    assert default_bound <= 1.01 * default_s and large_bound <= 1.01 * large_s


def test_model_admits_every_valid_pp_dp_plan_with_a_bound_below_simulation(models_dir) -> None:
    """Every pp+dp grouping the enumerator builds (partition, stage and replica splits) is a solution of
    the CP-SAT model, and its fixed-decision objective stays below the simulated step."""
    instance = tiny_instance(models_dir, num_buildings=3, recompute=["none"], loss_recovery=["selective_repeat"],
                             virtual_stages=[1], dp_bucket_factors=[1])  # one bucket size keeps it small
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    grouped = [plan for plan in enumerate_plans(instance, space)
               if not validate_plan(plan, instance) and plan.placement.cross_building.value == "pp+dp"]
    assert len({tuple(s.group for s in plan.placement.buildings) for plan in grouped}) >= 2
    for plan in grouped:
        assignment = plan_assignment(pv, plan)
        assert assignment is not None
        bound = plan_bound_us(pv, assignment, seed=0)
        assert bound is not None, plan.model_dump_json()
        assert bound * 1e-6 <= 1.01 * simulate(instance, plan).step_time_s


def test_tp_comm_overlap_follows_the_search_section(models_dir) -> None:
    """The planner overlaps TP collectives (never slower in the cost model) unless the search forbids it."""
    assert design_space(tiny_instance(models_dir)).tp_comm_overlap
    restricted = tiny_instance(models_dir, tp_comm_overlap=[False])
    space = prune_space(restricted, design_space(restricted))
    assert not space.tp_comm_overlap
    plan = next(plan for plan in enumerate_plans(restricted, space) if not validate_plan(plan, restricted))
    assert not plan.tp_comm_overlap
    problems = validate_plan(plan.model_copy(update={"tp_comm_overlap": True}), restricted)
    assert any(field == "tp_comm_overlap" for field, _ in problems)


def test_pp_dp_checks_name_the_group_and_the_odd_building(models_dir) -> None:
    from scaleacross_opt.spec import BuildingShare, Placement, Plan
    from scaleacross_opt.validation.plan_checks import check_plan

    instance = tiny_instance(models_dir, num_buildings=3)
    shares = [BuildingShare(building="a", group=0, dp_replicas=2, pp_stages=1),
              BuildingShare(building="b", group=0, dp_replicas=1, pp_stages=1),
              BuildingShare(building="c", group=1, dp_replicas=1, pp_stages=1)]
    plan = Plan(tp=8, pp=2, dp=3, micro_batch_size=1, schedule="1f1b",
                placement=Placement(cross_building="pp+dp", buildings=shares, layers_per_stage=[16, 16]))
    problems = dict(check_plan(plan, instance))
    assert "group 0's pipeline buildings hold different replica counts [1, 2]" in problems[
        "placement.buildings[1].dp_replicas"]
    assert "stages of group 1's pipeline add up to 1" in problems["placement.buildings[2].pp_stages"]


def test_search_simulates_once_plans_that_differ_only_in_settings_that_cannot_matter(models_dir) -> None:
    """With PP across buildings no collective crosses, so the cross-building collective algorithm is moot: the
    search simulates one of two such twins (their simulated steps are equal) and returns its result for both."""
    from scaleacross_opt.optimizer.refine import _Search
    from scaleacross_opt.spec import CollectiveAlgorithm

    instance = tiny_instance(models_dir, pp_degrees=[2], virtual_stages=[1], recompute=["none"],
                             collective_algorithms=["ring", "tree"], loss_recovery=["selective_repeat"])
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    plan = next(p for p in enumerate_plans(instance, space)
                if not validate_plan(p, instance) and p.placement.cross_building.value == "pp")
    cross = plan.network.cross_building
    ring, tree = CollectiveAlgorithm.RING, CollectiveAlgorithm.TREE
    other = tree if cross.collective_algorithm is ring else ring
    twin = plan.model_copy(update={"network": plan.network.model_copy(
        update={"cross_building": cross.model_copy(update={"collective_algorithm": other})})})
    assert not validate_plan(twin, instance)
    assert simulate(instance, twin).step_time_s == simulate(instance, plan).step_time_s
    calls = []

    def counting(inst, p, _deadline):
        calls.append(p)
        return simulate(inst, p)

    search = _Search(pv, counting, deadline=1e18, seed=0, threads=1, progress=None)
    first, second = search.evaluate(plan), search.evaluate(twin)
    assert second is first and len(calls) == 1


def test_a_screened_out_candidate_has_its_best_twin_in_each_other_dimension_simulated(models_dir) -> None:
    """Across a 30 ms link a PP-across plan of 128 micro-batches pays a latency per crossing (13.8 s; DP across
    10 s): its DP-across twin of least closed form (over the cross network options) is simulated, becomes the
    incumbent and waits to be polished; with an incumbent no twin can beat, nothing is simulated."""
    from scaleacross_opt.cost.step import estimate
    from scaleacross_opt.optimizer.local_search import Candidate
    from scaleacross_opt.optimizer.neighbourhood import other_dimensions
    from scaleacross_opt.optimizer.refine import _Search
    from scaleacross_opt.spec import CrossBuilding

    instance = tiny_instance(models_dir, pp_degrees=[2], virtual_stages=[1], recompute=["none"],
                             cross_building=["pp", "dp"], collective_algorithms=["ring", "tree"],
                             qps_per_connection=[1, 16], window_kib_per_qp=[4096, 65536],
                             ).with_updates({"cluster.links[0].latency_us": 30_000, "job.global_batch_size": 512})
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    plan = next(p for p in enumerate_plans(instance, space)
                if not validate_plan(p, instance) and p.placement.cross_building is CrossBuilding.PP)
    twins = [t for t in other_dimensions(instance, space, plan) if t.placement.cross_building is CrossBuilding.DP]
    assert len({t.network.cross_building for t in twins}) > 1
    calls = []

    def counting(inst, p, _deadline):
        calls.append(p)
        return simulate(inst, p)

    def search_from(incumbent: Candidate | None) -> _Search:
        search = _Search(pv, counting, deadline=1e18, seed=0, threads=1, progress=None,
                         screen=lambda inst, p, _deadline: estimate(inst, p))
        search.best = incumbent or search.evaluate(plan)
        search._other_dimensions(plan)
        return search

    search = search_from(None)
    simulated_twin = calls[-1]
    assert simulated_twin.placement.cross_building is CrossBuilding.DP and len(calls) == 2
    least = min(twins, key=lambda t: estimate(instance, t).step_time_s)
    assert simulated_twin.network.cross_building == least.network.cross_building
    assert search.best.plan == simulated_twin and search.unpolished == [search.best]
    assert search.best.report.step_time_s < search.evaluate(plan).report.step_time_s
    calls.clear()
    unbeatable = Candidate(plan, 0.0, replace(search.best.report, step_time_s=1e-6))
    assert search_from(unbeatable).unpolished == [] and calls == []


def test_the_first_polish_climbs_from_the_best_start_plan_only(models_dir, monkeypatch) -> None:
    """``polish(single_climb=True)`` (the polish before the first round) climbs once, from the fastest
    unpolished candidate, and leaves the others for later polishes; without it every candidate is climbed."""
    import importlib

    refine_module = importlib.import_module("scaleacross_opt.optimizer.refine")  # the package re-exports refine()
    instance = tiny_instance(models_dir)
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    plans = [p for p in enumerate_plans(instance, space) if not validate_plan(p, instance)][:4]
    origins = []
    monkeypatch.setattr(refine_module, "climb", lambda _i, _s, origin, *_a: origins.append(origin))

    def search_with_start_plans():
        search = refine_module._Search(pv, lambda inst, p, _deadline: simulate(inst, p), deadline=1e18, seed=0,
                                       threads=1, progress=None)
        search.unpolished = [c for c in map(search.evaluate, plans) if c is not None]
        return search

    search = search_with_start_plans()
    fastest = min(search.unpolished, key=lambda c: c.key())
    search.polish(1e18, single_climb=True)
    assert origins == [fastest] and len(search.unpolished) == len(plans) - 1
    origins.clear()
    search_with_start_plans().polish(1e18)
    assert len(origins) >= len(plans)


def test_a_climb_in_floor_order_ends_where_a_full_climb_ends_after_fewer_simulations(models_dir) -> None:
    """Given floors below every plan's step, ``climb`` simulates neighbours in floor order and ends a step at the
    first floor above the best step so far: it takes the same steps as simulating every neighbour, with fewer
    simulations."""
    from scaleacross_opt.optimizer.local_search import Candidate, climb

    instance = tiny_instance(models_dir)
    space = prune_space(instance, design_space(instance))
    reports = {}

    def step_s(plan):
        key = plan.model_dump_json()
        if key not in reports:
            reports[key] = simulate(instance, plan)
        return reports[key]

    def climb_counting(start, floor):
        simulated = set()

        def evaluate(plan):
            simulated.add(plan.model_dump_json())
            return Candidate(plan, 0.0, step_s(plan))

        return climb(instance, space, Candidate(start, 0.0, step_s(start)), evaluate, 1e18, floor), len(simulated)

    valid = [p for p in enumerate_plans(instance, space) if not validate_plan(p, instance)]
    slowest = max(valid, key=lambda p: step_s(p).step_time_s)
    full, full_count = climb_counting(slowest, None)
    ordered, ordered_count = climb_counting(slowest, lambda plan: 0.97 * step_s(plan).step_time_s)
    assert ordered.plan == full.plan and full.report.step_time_s < step_s(slowest).step_time_s
    assert ordered_count < full_count


def test_a_step_reads_floors_in_turn_when_reading_them_all_would_pass_the_deadline(monkeypatch) -> None:
    """``_floor_order`` sorts the neighbours by floor when reading every floor fits before the deadline at the pace
    of the first ones, returns None (read them in turn) when it does not, and [] once the deadline has passed.
    The clock is simulated: each floor takes one second."""
    from scaleacross_opt.optimizer import local_search

    clock = [0.0]
    monkeypatch.setattr(local_search.time, "perf_counter", lambda: clock[0])

    def floor(value):
        clock[0] += 1.0
        return -value

    options = list(range(10))
    assert local_search._floor_order(options, floor, deadline=100.0) == options[::-1]
    clock[0] = 0.0
    assert local_search._floor_order(options, floor, deadline=5.0) is None and clock[0] == 1.0
    assert local_search._floor_order(options, floor, deadline=0.5) == []


def test_only_the_last_round_of_a_long_enough_search_runs_to_its_proof() -> None:
    """``is_last_round``: in the final third of the time, with ≥ LAST_ROUND_S left and no room for another round
    and polish after it; never in a search shorter than 3 × LAST_ROUND_S."""
    from scaleacross_opt.optimizer.refine import LAST_ROUND_S, ROUND_MIN_S, ROUND_SHARE, is_last_round

    def share(remaining: float) -> float:
        return min(remaining, max(ROUND_MIN_S, remaining / ROUND_SHARE))

    assert is_last_round(22.0, 8.0, share(8.0))  # a 30 s search's second round, started at 22 s
    assert not is_last_round(14.0, 16.0, share(16.0))  # … started at 14 s: another round fits after it
    assert not is_last_round(8.0, 22.0, share(22.0))  # its first round
    assert not is_last_round(28.0, 2.0, share(2.0))  # too little left for a proof: stopped at its share
    budget = 3 * LAST_ROUND_S - 0.5
    for tenth in range(1, int(10 * budget)):
        elapsed = tenth / 10
        assert not is_last_round(elapsed, budget - elapsed, share(budget - elapsed))


def test_a_last_round_runs_to_its_proof_and_the_search_converges(models_dir, monkeypatch) -> None:
    """A search whose first round is already its last (started 100 s ago, 11 s left) gets two thirds of the time
    left instead of a third, runs on to its proof within them, leaving a share for its candidates and polish, and
    converges on the brute-force optimum. The proof takes 2–8 s of 2 workers here; on a machine too loaded to end
    it in time the round must at least have used its whole limit (not stopped at a share)."""
    import importlib
    import time

    refine = importlib.import_module("scaleacross_opt.optimizer.refine")  # the module (the package exports a function)
    limits: list[float] = []  # each round's CP-SAT time limit (plan bounds use one worker)
    solver_of = refine._solver

    def recording(seed: int, workers: int, time_s: float):
        if workers > 1:
            limits.append(time_s)
        return solver_of(seed, workers, time_s)

    monkeypatch.setattr(refine, "_solver", recording)
    instance = tiny_instance(models_dir)
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    search = refine._Search(pv, lambda inst, p, _deadline: simulate(inst, p), deadline=time.perf_counter() + 11.0,
                            seed=0, threads=2, progress=None)
    search.start -= 100.0
    search.rounds(top_k=8)
    assert 2 / 3 * 10.0 < limits[0] < 2 / 3 * 11.0  # the time left less one share, not the share alone
    if search.stats.status in ("optimal", "within_bound_error"):
        assert search.best.report.step_time_s == pytest.approx(brute_force(instance)[0])
    else:
        assert search.stats.status == "time_limit"
        assert search.stats.cpsat_wall_s >= limits[0] - refine.INTERRUPT_SLACK_S


def test_a_round_stops_at_its_share_only_half_a_share_after_its_first_solution_beyond_the_hints() -> None:
    """At its share a round stops if its first solution beyond the hint's neighbourhood (more than
    HINT_NEIGHBOURHOOD under the round's first) came at least half a share ago, and otherwise half a share
    after it; with only solutions near the first it runs on for half a share, as does a round whose first
    solution comes after its share."""
    from scaleacross_opt.optimizer.refine import HINT_NEIGHBOURHOOD, _Improving

    class Solver:
        stops = 0

        def stop_search(self) -> None:
            self.stops += 1

    share_s = 3600.0

    def at_share(objectives: list[int], beyond_age_s: float = share_s) -> tuple[int, list[float]]:
        """(stops, delays of the pending stop timers) when the share passes, the solution beyond the hint's
        neighbours (if any) having come ``beyond_age_s`` before."""
        solver = Solver()
        recorder = _Improving([], solver, share_s=share_s)
        for objective in objectives:
            recorder.record(objective, {})
        if recorder.beyond_hint_at is not None:
            recorder.beyond_hint_at -= beyond_age_s
        with recorder:
            recorder._share_passed()
            return solver.stops, [round(timer.interval / share_s, 2) for timer in recorder._timers[1:]]

    first = 6_478_472
    assert at_share([first, 5_299_055]) == (1, [])  # the dive's own solution, long ago: stop now
    assert at_share([first, 5_299_055], beyond_age_s=0.0) == (0, [0.5])  # just now: half a share more
    assert at_share([first, 5_299_055], beyond_age_s=share_s * 0.4) == (0, [0.1])
    near = int(first * (1 - HINT_NEIGHBOURHOOD)) + 1
    assert at_share([first, 6_463_356, near]) == (0, [0.5])  # the hint's neighbours only: run on
    assert at_share([]) == (0, [])  # none yet: wait for the first
