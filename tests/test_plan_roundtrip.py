"""Plan ↔ CP-SAT assignment round trip: ``plan_assignment`` inverts ``extract_plan`` for every plan the
model can express — heterogeneous buildings whose layer splits differ, trimming that spills from one
building's stages into the next, V-shaped schedules (LM head on the first stage) — so the bound the
search records for a plan is that plan's own."""

from __future__ import annotations

import random

import pytest

from scaleacross_opt.io import check_loaded_instance, load_instance, load_model
from scaleacross_opt.optimizer.coefficients import build_coefficients, prune_space
from scaleacross_opt.optimizer.cpsat.build import build_model
from scaleacross_opt.optimizer.cpsat.extract import plan_assignment, plan_of, untrimmed_layers
from scaleacross_opt.optimizer.enumerate import enumerate_plans
from scaleacross_opt.optimizer.neighbourhood import neighbours, random_plan
from scaleacross_opt.optimizer.placement import materialize_layers
from scaleacross_opt.optimizer.refine import plan_bound_us
from scaleacross_opt.optimizer.space import design_space
from scaleacross_opt.spec import Building, Cluster, Instance, Job, Link, SearchSpace


def hetero_instance(models_dir, schedules: list[str]) -> Instance:
    """16 H100 + 8 B200 + 16 H100, Llama 3 8B (32 layers): pipelines cross buildings with uneven stage
    counts, so per-building layer counts differ and the trimming pass crosses building boundaries."""
    instance = Instance(
        name="hetero-roundtrip",
        cluster=Cluster(
            buildings=[Building(name="a", gpu="H100-SXM-80GB", num_gpus=16),
                       Building(name="b", gpu="B200", num_gpus=8),
                       Building(name="c", gpu="H100-SXM-80GB", num_gpus=16)],
            links=[Link(a="a", b="b", bandwidth_gbps=3200, latency_us=150),
                   Link(a="b", b="c", bandwidth_gbps=3200, latency_us=150)],
        ),
        job=Job(model=load_model(models_dir / "llama3-8b.yaml"), seq_len=4096, global_batch_size=8),
        search=SearchSpace(tp_degrees=[8], cp_degrees=[1], pp_degrees=[5], micro_batch_sizes=[1],
                           virtual_stages=[1, 2], schedules=schedules, recompute=["full"], zero_stages=[1],
                           cross_building=["pp"], collective_algorithms=["ring"], load_balancing=["ecmp"],
                           congestion_control=["dcqcn"], loss_recovery=["selective_repeat"],
                           qps_per_connection=[1], window_kib_per_qp=[4096]),
    )
    return check_loaded_instance(instance, "<hetero-roundtrip>")


@pytest.mark.parametrize("schedules", [["1f1b", "interleaved-1f1b"], ["zb-v"]])
def test_plan_assignment_inverts_extract_plan(models_dir, schedules) -> None:
    instance = hetero_instance(models_dir, schedules)
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    plans = list(enumerate_plans(instance, space))
    splits = {tuple(plan.placement.layers_per_stage) for plan in plans}
    spilled = [split for split in splits if len({split[0], split[1]}) == 1 and split[1] != split[2]]
    assert len(splits) > 20 and spilled, "the space must include layer splits that trim across buildings"
    for plan in plans:
        assignment = plan_assignment(pv, plan)
        assert assignment is not None, plan.model_dump_json()
        assert plan_of(pv, assignment) == plan, plan.model_dump_json()


def test_untrimmed_layers_recovers_counts_when_trimming_spills_into_the_next_building() -> None:
    # building 1 holds one stage of 5, building 2 three of 4, the head stage 4: excess 3 trims stage 0
    # (5 → 4) and spills into building 2's first two stages (4 → 3)
    layers = materialize_layers([1, 3, 1], [5, 4, 4], 18, 1, 4, head_stage=4)
    assert layers == [4, 3, 3, 4, 4]
    assert untrimmed_layers(layers, [1, 3, 1], head_stage=4) == [5, 4, 4]
    assert untrimmed_layers([3, 5, 4], [3], head_stage=2) is None  # no trimming explains it
    # the first building's stages are at the floor (v = 1), so two passes trim building 2's regular stage
    # twice; the head stage (16) may not hold more than its building's count
    layers = materialize_layers([2, 2], [1, 16], 32, 1, 16, head_stage=3)
    assert layers == [1, 1, 14, 16]
    assert untrimmed_layers(layers, [2, 2], head_stage=3) == [1, 16]
    # an inexplicable split (building 5's regular stages lost 0 and 2 layers: passes go first stage first)
    # behind four runs at the floor, whose ℓ could be anything: answered None without trying them all
    assert untrimmed_layers([1, 1, 1, 1, 1, 1, 1, 1, 5, 3, 4], [2, 2, 2, 2, 3], head_stage=10) is None
    assert untrimmed_layers([7], [1], head_stage=0) == [7]  # one stage: the head alone


def test_cpsat_model_of_every_shipped_instance_is_valid(instances_dir) -> None:
    """No coefficient × domain product overflows int64 (CP-SAT would answer MODEL_INVALID)."""
    for path in sorted(instances_dir.glob("*.yaml")):
        if "infeasible" in path.name:
            continue
        instance = load_instance(path)
        space = prune_space(instance, design_space(instance))
        pv = build_model(instance, space, build_coefficients(instance, space))
        assert pv.model.Validate() == "", (path.name, pv.model.Validate()[:300])


def test_an_assignment_is_returned_only_for_plans_the_model_admits(instances_dir) -> None:
    """Local search reaches layer splits the model cannot state (trimming more than pp − 2 layers: a stage
    below a later stage of its own building); ``plan_assignment`` answers None for them, and every
    assignment it does return is admitted by the model (a bound exists) and describes the plan's placement,
    so no plan is recorded with a bound the model never gave it."""
    instance = load_instance(instances_dir / "small-two-buildings-llama3-8b.yaml")
    space = prune_space(instance, design_space(instance))
    pv = build_model(instance, space, build_coefficients(instance, space))
    rng = random.Random(0)
    plans: dict[str, object] = {}
    while len(plans) < 120:
        plan = random_plan(instance, space, rng)
        if plan is not None:
            for p in (plan, *rng.sample(neighbours(instance, space, plan), k=2)):
                p = p.model_copy(update={"tp_comm_overlap": space.tp_comm_overlap})
                plans.setdefault(p.model_dump_json(), p)
    outside = 0
    for plan in plans.values():
        assignment = plan_assignment(pv, plan)
        if assignment is None:
            outside += 1
            continue
        assert plan_of(pv, assignment).placement == plan.placement, plan.model_dump_json()
        assert plan_bound_us(pv, assignment, 0) is not None, plan.model_dump_json()
    assert 0 < outside < len(plans) // 4, outside
