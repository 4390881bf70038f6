"""The resolved plan: rank order, group spans over NVLink domains, nodes and buildings."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaleacross_opt.cost.layout import group_span, local_span, resolve
from scaleacross_opt.io import load_instance
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.spec import Plan

INSTANCES = Path(__file__).resolve().parent.parent / "instances"


@pytest.fixture(scope="module")
def campus():
    return load_instance(INSTANCES / "two-buildings-campus-llama3-405b.yaml")


def test_dp_members_share_a_node_when_tp_leaves_room(campus) -> None:
    building = campus.cluster.buildings[0]
    tp1 = local_span(64, 1, building)  # 64 DP ranks at stride tp = 1: 8 per node on 8 nodes
    assert (tp1.per_domain, tp1.domains, tp1.crosses_domains) == (8, 8, True)
    tp8 = local_span(64, 8, building)  # stride 8 fills a node: one member per node (one NIC rail each)
    assert (tp8.per_domain, tp8.domains) == (1, 64)
    tp2 = local_span(4, 2, building)  # 4 members at stride 2 fit one node
    assert (tp2.per_domain, tp2.domains, tp2.crosses_domains) == (4, 1, False)


def test_dp_span_follows_the_placement_across_buildings(campus) -> None:
    dp_across = resolve(campus, fill_defaults(campus, Plan(tp=8, pp=16, dp=128, micro_batch_size=1,
                                                           schedule="1f1b")))
    span = dp_across.dp_span(0)
    assert span.crosses_buildings and span.buildings == ("bldg-a", "bldg-b")
    assert span.members == (64, 64) and span.size == 128 and span.inner_size == 64
    assert dp_across.stage_replicas[5] == {"bldg-a": 64, "bldg-b": 64}


def test_cp_folds_into_the_dp_group(campus) -> None:
    layout = resolve(campus, fill_defaults(campus, Plan(tp=4, cp=2, pp=16, dp=128, micro_batch_size=1,
                                                        schedule="1f1b")))
    span = layout.dp_span(3)
    assert span.size == 256  # dp·cp ranks share the weights
    assert span.per_domain == 2  # stride tp = 4 in an 8-GPU node


def test_expert_dp_group_is_dp_cp_over_ep() -> None:
    instance = load_instance(INSTANCES / "moe-deepseek-v3-h800.yaml")
    buildings = {b.name: b for b in instance.cluster.buildings}
    name = instance.cluster.buildings[0].name
    span = group_span(16, 8, {name: 16}, buildings)  # expert DP at stride tp·ep = 8
    assert (span.per_domain, span.domains) == (1, 16)


def test_resolve_rejects_an_unfilled_plan(campus) -> None:
    with pytest.raises(ValueError, match="must be filled"):
        resolve(campus, Plan(tp=8, pp=16, dp=128, micro_batch_size=1, schedule="1f1b"))
