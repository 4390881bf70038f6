"""α–β collective models over a group's span: pinned closed forms, levels and latency behaviour."""

from __future__ import annotations

import pytest

from scaleacross_opt.cost import step
from scaleacross_opt.cost.collectives import (
    Collective,
    Level,
    flat_collective_s,
    nvls_all_reduce_s,
    p2p_s,
    ring_half_s,
    span_collective_s,
)
from scaleacross_opt.cost.compute import layer_kinds
from scaleacross_opt.cost.layout import resolve
from scaleacross_opt.cost.memory import layer_params
from scaleacross_opt.io import load_instance
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.spec import BuildingShare, CrossBuilding, Placement, Plan
from scaleacross_opt.spec.network import CollectiveAlgorithm

RING, TREE, PAT, HIER = (CollectiveAlgorithm.RING, CollectiveAlgorithm.TREE, CollectiveAlgorithm.PAT,
                         CollectiveAlgorithm.HIERARCHICAL)
AR, RS, AG, A2A = Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER, Collective.ALL_TO_ALL


def test_flat_collectives_pinned() -> None:
    # ring all-reduce 2(n−1)α + 2(n−1)/n·S/B with n=8, S=1 GB, B=10 GB/s, α=10 µs
    assert flat_collective_s(AR, RING, 8, 1e9, 1e10, 1e-5) == pytest.approx(14e-5 + 0.175)
    assert ring_half_s(4, 4e6, 1e9, 1e-6) == pytest.approx(3e-6 + 3e-3)
    assert flat_collective_s(RS, PAT, 1024, 1024.0, 1e9, 1e-3) == pytest.approx(10e-3 + 1023 / 1024 * 1024 / 1e9)
    assert flat_collective_s(AR, TREE, 16, 1e6, 1e9, 1e-5) == pytest.approx(8e-5 + 2e-3)
    assert flat_collective_s(A2A, RING, 8, 8e6, 1e9, 0.0) == pytest.approx(7e-3)
    assert p2p_s(1e6, 1e9, 5e-6) == pytest.approx(1.005e-3)


def test_nvls_all_reduce_moves_less_than_a_ring() -> None:
    # each GPU's link carries (n+1)/n·S per direction (switch reduction + multicast), a ring 2(n−1)/n·S
    assert nvls_all_reduce_s(8, 1e9, 1e10, 25e-6) == pytest.approx(25e-6 + 9 / 8 * 0.1)
    assert nvls_all_reduce_s(8, 1e9, 1e10, 0.0) / flat_collective_s(AR, RING, 8, 1e9, 1e10, 0.0) == pytest.approx(
        (9 / 8) / (14 / 8))
    assert nvls_all_reduce_s(1, 1e9, 1e10, 25e-6) == 0.0


def test_single_rank_is_free() -> None:
    for algorithm in (RING, TREE, PAT, HIER):
        assert span_collective_s(AR, algorithm, [Level(1, 1e9, 1e-3)], 1e9) == 0.0


def test_pat_all_reduce_is_rs_plus_ag_with_log_latency() -> None:
    args = (64, 1e8, 1e10, 1e-4)
    total = flat_collective_s(AR, PAT, *args)
    assert total == pytest.approx(2 * flat_collective_s(RS, PAT, *args))
    assert total < flat_collective_s(AR, RING, *args)
    latency = 1e-3  # metro: latency dominates small messages
    ring = flat_collective_s(AR, RING, 64, 1e6, 5e9, latency)
    assert ring > 0.9 * 2 * 63 * latency
    assert flat_collective_s(AR, PAT, 64, 1e6, 5e9, latency) < ring / 5


def test_multi_node_ring_runs_at_the_domains_aggregate_nic_bandwidth() -> None:
    # 8 members per node (TP1) on 4 nodes: the ring's node crossings spread over the node's 8 NICs
    # (nccl-tests#119/#290: bus bandwidth ≈ the node's aggregate NIC bandwidth), capped by NVLink.
    nvlink, nic = 360e9, 47e9
    levels = [Level(8, nvlink, 3e-6), Level(4, 8 * nic, 1e-5)]
    expected = flat_collective_s(AR, RING, 32, 1e9, min(nvlink, 8 * nic), 1e-5)
    assert span_collective_s(AR, RING, levels, 1e9) == pytest.approx(expected)
    # TP8: one member per node, one NIC
    single = [Level(1, nvlink, 3e-6), Level(32, nic, 1e-5)]
    assert span_collective_s(AR, RING, single, 1e9) == pytest.approx(flat_collective_s(AR, RING, 32, 1e9, nic, 1e-5))


def test_a_group_spread_unevenly_over_buildings_steps_through_its_own_members() -> None:
    # 32 members in one building, 16 in the other: the levels hold the fuller building's 32 domains × 2
    # buildings (64), the ring has 48 members, so 47 steps at the slowest level's latency
    levels = [Level(1, 360e9, 3e-6), Level(32, 48e9, 1.1e-5), Level(2, 50e9, 1.5e-4)]
    got = span_collective_s(AG, RING, levels, 2e8, ranks=48)
    assert got == pytest.approx(flat_collective_s(AG, RING, 48, 2e8, 48e9, 1.5e-4))
    assert span_collective_s(AG, RING, levels, 2e8) == pytest.approx(flat_collective_s(AG, RING, 64, 2e8, 48e9, 1.5e-4))


def test_uneven_dp_groups_across_buildings_cost_their_real_ring(instances_dir) -> None:
    """pp+dp with groups of 2 and 1 buildings: stage 0's DP group holds 32 replicas in one building and 16 in
    another; its ZeRO-3 gather of a layer is a 48-member ring over the NICs and the cross-building route."""
    instance = load_instance(instances_dir / "three-buildings-campus-llama3-70b.yaml")
    shares = [BuildingShare(building="bldg-a", dp_replicas=32, pp_stages=16, group=0),
              BuildingShare(building="bldg-b", dp_replicas=32, pp_stages=16, group=0),
              BuildingShare(building="bldg-c", dp_replicas=16, pp_stages=32, group=1)]
    plan = fill_defaults(instance, Plan(
        tp=8, cp=1, pp=32, dp=48, micro_batch_size=1, zero_stage=3, schedule="1f1b",
        placement=Placement(cross_building=CrossBuilding.PP_DP, buildings=shares,
                            layers_per_stage=[2] * 16 + [3] * 15 + [3])))
    layout = resolve(instance, plan)
    span = layout.dp_span(0)
    assert span.size == 48 and span.members == (32, 16)
    collectives = step._dp_collectives(layout, 0)
    params = layer_params(instance.job.model_spec, layer_kinds(instance.job.model_spec)[0], 8, 1)
    bandwidth = min(level.bandwidth_bytes_per_s for level in collectives.dense if level.ranks > 1)
    latency = max(level.latency_s for level in collectives.dense if level.ranks > 1)
    expected = flat_collective_s(AG, collectives.algorithm, 48, params.dense * 2, bandwidth, latency)
    assert step._zero3_gather_s(layout, 0, params) == pytest.approx(expected)


def test_hierarchical_splits_off_the_buildings() -> None:
    inner, outer = Level(8, 5e10, 1e-5), Level(4, 8 * 5e9, 1e-3)  # outer: 8 members share 40 GB/s
    size = 1e9
    got = span_collective_s(AR, HIER, [inner, outer], size)
    expected = 2 * ring_half_s(8, size, 5e10, 1e-5) + 2 * ring_half_s(4, size / 8, 5e9, 1e-3)
    assert got == pytest.approx(expected)
    rs = span_collective_s(RS, HIER, [inner, outer], size)
    assert rs == pytest.approx(ring_half_s(8, size, 5e10, 1e-5) + ring_half_s(4, size / 8, 5e9, 1e-3))
    # a flat ring over all 32 ranks runs at the slow level's bandwidth and pays 62 slow latency steps
    assert got < span_collective_s(AR, RING, [inner, outer], size)
    # with only one level crossed, hierarchical is the ring
    assert span_collective_s(AR, HIER, [inner], size) == pytest.approx(span_collective_s(AR, RING, [inner], size))


def test_all_to_all_puts_the_node_local_share_on_nvlink() -> None:
    # EP 16 over 2 nodes of 8: 7/16 of the bytes stay on NVLink, 8/16 leave the node on the member's NIC
    nvlink, nic = 360e9, 47e9
    levels = [Level(8, nvlink, 3e-6), Level(2, 8 * nic, 1e-5)]
    size = 1e9
    expected = 1e-5 + max(7 / 16 * size / nvlink, 8 / 16 * size / nic)
    assert span_collective_s(A2A, RING, levels, size) == pytest.approx(expected)
    inside = [Level(8, nvlink, 3e-6), Level(1, 8 * nic, 1e-5)]
    assert span_collective_s(A2A, RING, inside, size) == pytest.approx(3e-6 + 7 / 8 * size / nvlink)
