"""Step model: workload contract, closed-form pipeline time, estimate report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

import scaleacross_opt.schedules.interleaved
import scaleacross_opt.schedules.one_f_one_b  # noqa: F401  (registers the schedules used below)
from scaleacross_opt.catalog.network import DEFAULT_NETWORK, DEFAULT_TRAFFIC_CLASS
from scaleacross_opt.cost.report import BREAKDOWN_KEYS
from scaleacross_opt.cost.step import build_workload, estimate, pipeline_time_closed_form
from scaleacross_opt.cost.workload import LinkShare, StepWorkload
from scaleacross_opt.simulator.synthetic import uniform_workload
from scaleacross_opt.spec import (
    Building,
    BuildingShare,
    Cluster,
    CollectiveAlgorithm,
    CrossBuilding,
    Instance,
    Job,
    Link,
    ModelSpec,
    NetworkConfig,
    Placement,
    Plan,
)

ROOT = Path(__file__).resolve().parent.parent
MODEL = ModelSpec(**yaml.safe_load((ROOT / "models" / "llama3-8b.yaml").read_text()))


def two_buildings(latency_us: float = 150.0, gpu_b: str = "H100-SXM-80GB") -> Instance:
    cluster = Cluster(
        buildings=[Building(name="a", gpu="H100-SXM-80GB", num_gpus=64), Building(name="b", gpu=gpu_b, num_gpus=64)],
        links=[Link(a="a", b="b", bandwidth_gbps=3200, latency_us=latency_us)],
    )
    return Instance(cluster=cluster, job=Job(model=MODEL, seq_len=4096, global_batch_size=128))


def plan(cross: CrossBuilding, *, v: int = 1, algorithm: CollectiveAlgorithm = CollectiveAlgorithm.RING) -> Plan:
    if cross is CrossBuilding.DP:
        shares = [BuildingShare(building=b, dp_replicas=4, pp_stages=4) for b in ("a", "b")]
    else:
        shares = [BuildingShare(building=b, dp_replicas=8, pp_stages=2) for b in ("a", "b")]
    network = NetworkConfig(
        intra_building=DEFAULT_TRAFFIC_CLASS,
        cross_building=DEFAULT_TRAFFIC_CLASS.model_copy(update={"collective_algorithm": algorithm}),
    )
    return Plan(
        tp=4, pp=4, dp=8, micro_batch_size=1, virtual_stages=v, schedule="interleaved-1f1b" if v > 1 else "1f1b",
        recompute="selective",
        placement=Placement(cross_building=cross, buildings=shares, layers_per_stage=[8, 8, 8, 8]),
        network=network,
    )


def test_dp_across_buildings_workload_contract() -> None:
    inst = two_buildings(gpu_b="H200-SXM-141GB")
    workload = build_workload(inst, plan(CrossBuilding.DP))
    assert [g.stage_building for g in workload.groups] == [("a",) * 4, ("b",) * 4]
    assert [g.num_replicas for g in workload.groups] == [4, 4]
    assert workload.num_microbatches == 16
    assert set(workload.links) == {("a", "a"), ("b", "b")}
    assert workload.dp_sync_s.shape == (4, 1) and (workload.dp_sync_s > 0).all()
    assert {"tp", "cp", "ep"} <= set(workload.exposed_comm_s)
    for group in workload.groups:
        assert group.fwd_s.shape == (4, 1) and (group.bwd_s > group.fwd_s).all()
    # the H200 building computes no slower (more HBM bandwidth, same peak)
    assert workload.groups[1].fwd_s.sum() <= workload.groups[0].fwd_s.sum()
    # embedding on the first stage, LM head (+ loss) on the last: stage 3 is the slowest
    assert workload.groups[0].fwd_s[3, 0] > workload.groups[0].fwd_s[1, 0]


def test_pp_across_buildings_links_and_wraparound() -> None:
    inst = two_buildings()
    workload = build_workload(inst, plan(CrossBuilding.PP))
    assert len(workload.groups) == 1 and workload.groups[0].stage_building == ("a", "a", "b", "b")
    assert {("a", "a"), ("a", "b"), ("b", "a"), ("b", "b")} == set(workload.links)
    cross = workload.link("a", "b")
    assert cross.latency_s == pytest.approx(150e-6)
    assert cross.bandwidth_bytes_per_s < workload.link("a", "a").bandwidth_bytes_per_s
    interleaved = build_workload(inst, plan(CrossBuilding.PP, v=2))
    assert interleaved.groups[0].fwd_s.shape == (4, 2)
    assert ("b", "a") in interleaved.links  # chunk wrap-around from the last stage to the first


def synthetic(pp: int, m: int, t_f: float, t_b: float) -> StepWorkload:
    return uniform_workload("1f1b", pp, 1, m, fwd_s=t_f, bwd_input_s=t_b, bwd_weight_s=0.0, p2p_bytes=1.0,
                            bandwidth_bytes_per_s=1e30)


def test_closed_form_1f1b_uniform() -> None:
    step, parts = pipeline_time_closed_form(synthetic(pp=4, m=8, t_f=1.0, t_b=2.0))
    assert step == pytest.approx((8 + 4 - 1) * 3.0)
    assert parts["compute_s"] == pytest.approx(24.0) and parts["bubble_s"] == pytest.approx(9.0)
    assert tuple(parts) == BREAKDOWN_KEYS


def test_closed_form_charges_hop_latency() -> None:
    workload = synthetic(pp=4, m=8, t_f=1.0, t_b=2.0)
    slow = LinkShare("b0", "b0", 1e30, 0.5)
    step, parts = pipeline_time_closed_form(replace(workload, links={("b0", "b0"): slow}))
    assert step > 33.0 and parts["exposed_pp_s"] > 0


def test_estimate_report_is_consistent() -> None:
    inst = two_buildings()
    report = estimate(inst, plan(CrossBuilding.PP))
    assert tuple(report.breakdown) == BREAKDOWN_KEYS
    assert sum(report.breakdown.values()) == pytest.approx(report.step_time_s)
    assert not report.simulated and report.fits_memory
    assert 0 < report.mfu < 1
    assert report.step_time_s > report.details["lower_bound_s"]
    assert report.tokens_per_s == pytest.approx(128 * 4096 / report.step_time_s)


def test_cross_building_latency_slows_pp_plans() -> None:
    near = estimate(two_buildings(150.0), plan(CrossBuilding.PP)).step_time_s
    far = estimate(two_buildings(20_000.0), plan(CrossBuilding.PP)).step_time_s
    assert far > near + 0.04  # at least one forward + backward traversal of the 20 ms hop


def test_hierarchical_dp_beats_flat_ring_at_long_latency() -> None:
    inst = two_buildings(5_000.0)
    ring = build_workload(inst, plan(CrossBuilding.DP, algorithm=CollectiveAlgorithm.RING)).dp_sync_s
    hier = build_workload(inst, plan(CrossBuilding.DP, algorithm=CollectiveAlgorithm.HIERARCHICAL)).dp_sync_s
    assert (hier < ring).all()


def test_requires_filled_plan() -> None:
    inst = two_buildings()
    with pytest.raises(ValueError):
        build_workload(inst, Plan(tp=4, pp=4, dp=8, micro_batch_size=1, schedule="1f1b", network=DEFAULT_NETWORK))
