"""Shared resources in the simulator: max-min fair rates and traffic classes slowing each other."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scaleacross_opt.cost.flows import FlowNetwork, fair_rates, fair_speeds_small
from scaleacross_opt.cost.step import build_workload, estimate
from scaleacross_opt.cost.workload import OpFlow
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.simulator import simulate, simulate_workload
from scaleacross_opt.simulator.synthetic import uniform_workload
from scaleacross_opt.spec import Plan


def test_one_full_resource_slows_its_flows_by_one_factor() -> None:
    """Bandwidth in proportion to what each flow asks at full speed (its connections)."""
    assert fair_rates([[("r", 1.0)], [("r", 1.0)]]) == [0.5, 0.5]
    assert fair_rates([[("r", 1.0)], [("r", 0.3)]]) == pytest.approx([1 / 1.3, 1 / 1.3])
    assert fair_rates([[("r", 0.2)], [("r", 0.3)]]) == [1.0, 1.0]  # room for both
    assert fair_rates([[], [("r", 1.0)]]) == [1.0, 1.0]  # a flow on no shared resource runs alone


def test_a_flow_is_held_by_its_bottleneck_and_frees_the_rest() -> None:
    """Flow 0 crosses a and b; b also carries flow 1, so flow 0 runs at 1/2 and flow 2 gets the rest of a."""
    assert fair_rates([[("a", 1.0), ("b", 1.0)], [("b", 1.0)], [("a", 1.0)]]) == pytest.approx([0.5, 0.5, 0.5])
    assert fair_rates([[("a", 1.0), ("b", 1.0)], [("b", 1.0)], [("a", 0.4)]]) == pytest.approx([0.5, 0.5, 1.0])


flows_strategy = st.lists(
    st.dictionaries(st.sampled_from("abcd"), st.floats(0.01, 2.0), min_size=1, max_size=3), min_size=1, max_size=6)


@given(flows_strategy)
def test_fair_rates_are_feasible_and_max_min_fair(flows: list[dict[str, float]]) -> None:
    """No resource above capacity; every flow below full speed has a full resource on which no flow runs
    faster — the max-min fairness condition (a bottleneck for every slowed flow)."""
    speed = fair_rates([list(f.items()) for f in flows])
    load = {r: sum(x * f.get(r, 0.0) for x, f in zip(speed, flows, strict=True)) for r in "abcd"}
    assert all(value <= 1 + 1e-9 for value in load.values())
    for j, f in enumerate(flows):
        if speed[j] < 1 - 1e-9:
            assert any(load[r] >= 1 - 1e-9 and all(speed[k] <= speed[j] + 1e-9 for k, g in enumerate(flows) if r in g)
                       for r in f), (j, speed, load)


def test_flow_network_finishes_flows_at_their_shared_speeds() -> None:
    """Two 1 s flows on one resource, the second starting at 0.5 s: both at half speed from 0.5 s."""
    net = FlowNetwork()
    net.start("x", 1.0, [("r", 1.0)])
    assert net.next_finish() == 1.0
    assert net.advance(0.5) == []
    net.start("y", 1.0, [("r", 1.0)])
    assert net.next_finish() == pytest.approx(1.5)
    assert net.advance(1.5) == ["x"]
    assert net.next_finish() == pytest.approx(2.0)
    assert net.advance(2.0) == ["y"]
    assert not net


def test_dp_sync_slows_the_gradient_transfer_it_shares_a_route_with() -> None:
    """Two stages in two buildings, one micro-batch, F = 1 s, B = 1 s, a 1 s transfer each way; each stage's
    2 s DP sync needs both routes and runs in two 1 s buckets, released halfway into its backward and at its end.

    By hand: F on stage 0 [0, 1], activation [1, 2], F/B on stage 1 [2, 3] / [3, 4]; stage 1's first bucket
    starts at 3.5 alone (½ done at 4); from 4 the gradient transfer and the bucket share the route at ½ each:
    the bucket ends at 5, then the second bucket shares it with the transfer, which ends at 6; the bucket, alone
    again, at 6.5. B on stage 0 [6, 7]; its buckets run alone 6.5–7.5 and 7.5–8.5. Without sharing the
    transfer would end at 5 and the step at 7.5."""
    workload = uniform_workload("1f1b", 2, 1, 1, fwd_s=1.0, bwd_input_s=0.5, bwd_weight_s=0.5, cuts=[1],
                                p2p_bytes=1.0, bandwidth_bytes_per_s=1.0, dp_sync_s=2.0, dp_route_s=2.0, dp_buckets=2)
    result = simulate_workload(workload)
    timeline = result.groups[0]
    assert timeline.contended
    assert timeline.start.tolist() == pytest.approx([0.0, 6.0, 2.0, 3.0])  # F0@0, B0@0, F0@1, B0@1
    assert result.dp_start_s.tolist() == pytest.approx([6.5, 7.5, 3.5, 5.0])  # stage 0's buckets, stage 1's
    assert result.dp_end_s.tolist() == pytest.approx([7.5, 8.5, 5.0, 6.5])
    assert result.step_time_s == pytest.approx(8.5)


def test_zero3_gathers_of_all_stages_share_the_cross_building_route(load_shipped_instance) -> None:
    """ZeRO-3 with DP across two buildings on a slow (32 Gb/s) link: every stage gathers its weights over
    the same route during its forwards and backwards, so the gathers slow each other (the joint timeline
    runs) and the simulated step is at least the route's busy time; the closed form stays below it."""
    instance = load_shipped_instance("small-two-buildings-llama3-8b")
    data = instance.model_dump(mode="json", exclude_none=True)
    for link in data["cluster"]["links"]:
        link["bandwidth_gbps"] = 32.0
    slow = type(instance).model_validate(data)
    plan = fill_defaults(slow, Plan(tp=8, pp=2, dp=8, micro_batch_size=1, schedule="1f1b", zero_stage=3))
    sim, est = simulate(slow, plan), estimate(slow, plan)
    assert any(sim.details["link_contention"].values())
    busiest = max(sim.details["resource_busy_s"].values())
    assert sim.step_time_s >= busiest
    assert est.step_time_s <= sim.step_time_s * (1 + 1e-9)


def test_dp_sync_slows_the_all_to_all_its_compute_waits_for() -> None:
    """Two stages, one micro-batch, F = B = 1 s, of which the first 0.5 s is an all-to-all on resource X (full
    share) that the rest of the op waits for; each stage's 1 s DP sync also needs X and runs in two 0.5 s
    buckets, released halfway into the op (no earlier than its compute starts) and at its end.

    By hand: F0 [0, 1], F1 [1, 2], B1 [2, 3] (its compute from 2.5), so stage 1's first bucket runs 2.5–3
    alone; B0's all-to-all then shares X with the second bucket at ½ each: both end at 4; B0's compute runs
    4–4.5; stage 0's buckets, released at 4 and 4.5, end at 4.5 and 5. Timed apart: B0 ends at 4."""
    workload = uniform_workload("1f1b", 2, 1, 1, fwd_s=1.0, bwd_input_s=0.5, bwd_weight_s=0.5, dp_sync_s=1.0,
                                dp_buckets=2)
    x = {"X": 1.0}
    seconds = np.full((3, 2, 1), 0.5)
    seconds[2] = 0.0  # no W ops in 1F1B
    flow = OpFlow("ep", seconds, ((x,), (x,)), "inline")
    workload = replace(workload, groups=(replace(workload.groups[0], op_flows=(flow,)),),
                       dp_sync_uses=((x,), (x,)))
    result = simulate_workload(workload)
    assert result.groups[0].end.tolist() == pytest.approx([1.0, 4.5, 2.0, 3.0])  # F0, B0, F1, B1
    assert result.dp_start_s.tolist() == pytest.approx([4.0, 4.5, 2.5, 3.0])
    assert result.dp_end_s.tolist() == pytest.approx([4.5, 5.0, 3.0, 4.0])
    assert result.step_time_s == pytest.approx(5.0)
    assert result.apart_pipeline_end_s == pytest.approx(4.0) and result.sharing_s == pytest.approx(0.5)


@given(flows_strategy)
def test_small_and_vector_fillings_agree(flows: list[dict[str, float]]) -> None:
    """The plain-Python filling (one resource at a time, used for small parts) and the vectorised one (all
    resources that fill independently at once) give the same speeds."""
    names = {r: i for i, r in enumerate("abcd")}
    small = fair_speeds_small([[(names[r], u) for r, u in f.items()] for f in flows])
    assert small == pytest.approx(fair_rates([list(f.items()) for f in flows]), rel=1e-9, abs=1e-12)


def _ends_recomputed_at_every_event(starts: list[tuple[float, float, dict[str, float]]]) -> dict[int, float]:
    """End of each flow (start s, seconds alone, demands), with every flow's speed recomputed over all flows
    in progress (``fair_rates``) at every start and end: the reference the incremental network must match."""
    work = {}  # flow → seconds alone left
    ends: dict[int, float] = {}
    pending = sorted((s, j) for j, (s, _, _) in enumerate(starts))
    now = 0.0
    while pending or work:
        running = sorted(work)
        speeds = dict(zip(running, fair_rates([list(starts[j][2].items()) for j in running]), strict=True))
        finish = min((now + work[j] / speeds[j] for j in running), default=math.inf)
        t = min(pending[0][0] if pending else math.inf, finish)
        for j in running:
            work[j] -= (t - now) * speeds[j]
            if work[j] <= 1e-12 * starts[j][1]:
                ends[j] = t
                del work[j]
        now = t
        while pending and pending[0][0] <= now:
            _, j = pending.pop(0)
            work[j] = starts[j][1]
    return ends


@given(st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(0.1, 2.0),
                          st.dictionaries(st.sampled_from("abcd"), st.floats(0.05, 1.5), max_size=3)),
                min_size=1, max_size=8))
def test_incremental_flow_network_matches_a_full_recomputation(
        starts: list[tuple[float, float, dict[str, float]]]) -> None:
    """The network recomputes speeds only in the parts a start or end touched (and skips resources that are
    not overfull before or after): every flow ends when a recomputation of all speeds at every event says."""
    net = FlowNetwork()
    pending = sorted((s, j) for j, (s, _, _) in enumerate(starts))
    ends: dict[int, float] = {}
    while pending or net:
        t = min(pending[0][0] if pending else math.inf, net.next_finish())
        for j in net.advance(t):
            ends[j] = t
        while pending and pending[0][0] <= t:
            _, j = pending.pop(0)
            net.start(j, starts[j][1], list(starts[j][2].items()))
    expected = _ends_recomputed_at_every_event(starts)
    assert sorted(ends) == sorted(expected)
    for j, end in expected.items():
        assert ends[j] == pytest.approx(end, rel=1e-6, abs=1e-9), (j, ends, expected)


def test_cp_ring_across_nodes_is_a_flow_on_the_nics(load_shipped_instance) -> None:
    """CP 16 at TP 1 spans two nodes: each forward and backward runs its ring's K/V exchange beside the
    compute as a flow on the stage's NICs (with the network to itself no longer than the op), which counts
    in the NICs' busy time; the closed form stays below the simulator."""
    instance = load_shipped_instance("single-building-llama3-70b")
    plan = fill_defaults(instance, Plan(tp=1, cp=16, pp=4, dp=16, micro_batch_size=1, schedule="1f1b",
                                        zero_stage=1, recompute="full"))
    workload = build_workload(instance, plan)
    group = workload.groups[0]
    (cp,) = [flow for flow in group.op_flows if flow.name == "cp"]
    assert cp.phase == "compute" and cp.demand[0][0] and all(0 < u <= 1 for u in cp.demand[0][0].values())
    assert (cp.seconds[0] <= group.fwd_s * (1 + 1e-9)).all() and (cp.seconds[1] <= group.bwd_input_s * (1 + 1e-9)).all()
    assert estimate(instance, plan).step_time_s <= simulate(instance, plan).step_time_s * (1 + 1e-9)


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_all_to_all_hidden_by_dualpipe_still_crosses_the_nic(load_shipped_instance, recompute: str) -> None:
    """DualPipe hides most of an MoE layer's all-to-all behind the paired micro-batch, but not its bytes:
    the exposed (inline) and hidden (beside the compute) EP flows of every op together carry each MoE
    layer's dispatch + combine once per forward and once per backward (twice with full recompute) on the
    stage's NICs; a hidden flow never outlasts the compute of the op it runs in (F, B and W alike); and
    the closed form stays below the simulator."""
    from scaleacross_opt.cost.compute import LayerKind
    from scaleacross_opt.cost.layout import chunk_layer_kinds
    from scaleacross_opt.cost.step import ep_all_to_all
    from scaleacross_opt.optimizer.neighbourhood import place
    from scaleacross_opt.spec.plan import CrossBuilding

    instance = load_shipped_instance("moe-deepseek-v3-h800")
    plan = Plan(tp=1, cp=1, pp=16, dp=128, ep=64, virtual_stages=2, micro_batch_size=1, schedule="dualpipe",
                zero_stage=1, recompute=recompute)
    plan = fill_defaults(instance, place(instance, plan, CrossBuilding.DP))
    workload = build_workload(instance, plan)
    group = workload.groups[0]
    flows = {flow.name: flow for flow in group.op_flows}
    assert flows["ep-hidden"].phase == "compute" and flows["ep"].phase == "inline"
    nic_s = ep_all_to_all(instance, plan, instance.cluster.buildings[0]).nic_s
    passes = 3 if recompute == "full" else 2
    moe_layers = [[kinds.count(LayerKind.MOE) for kinds in stage] for stage in chunk_layer_kinds(instance, plan)]
    for s in range(plan.pp):
        for c in range(plan.virtual_stages):
            carried = sum(float(f.seconds[:, s, c].sum()) * next(iter(f.demand[s][c].values()), 0.0)
                          for f in (flows["ep"], flows["ep-hidden"]))
            assert carried == pytest.approx(passes * moe_layers[s][c] * nic_s, rel=1e-9)
    hidden, inline = flows["ep-hidden"].seconds, flows["ep"].seconds
    assert hidden[0].sum() > 0 and hidden[1].sum() > 0
    for row, duration in enumerate((group.fwd_s, group.bwd_input_s, group.bwd_weight_s)):
        assert (hidden[row] <= (duration - inline[row]) * (1 + 1e-9)).all(), row
    assert estimate(instance, plan).step_time_s <= simulate(instance, plan).step_time_s * (1 + 1e-9)


def test_nvlink_carries_tp_and_bounds_the_step(load_shipped_instance) -> None:
    """Each GPU's NVLink is a resource: with TP 8 inside a node and one DP rank per node (the DP ring never
    stays on NVLink), its seconds per step are TP's alone — 4 ring collectives of the tokens·h·2-byte
    activation per layer and pass, (t−1)/t of it sent by every rank, forward and backward, m micro-batches —
    at NVLink × protocol efficiency. With an NVLink 500× slower than an H100's the step is NVLink-bound:
    estimate and simulation are at least that busy time, and the breakdown charges the excess to TP."""
    from scaleacross_opt.catalog import coefficients as co
    from scaleacross_opt.spec import Instance

    base = load_shipped_instance("single-building-llama3-70b")
    plan = Plan(tp=8, cp=1, pp=1, dp=256, micro_batch_size=1, schedule="1f1b", zero_stage=1, recompute="none")
    data = base.model_dump(mode="json", exclude_none=True)
    for slow in (False, True):
        gpu = base.cluster.buildings[0].gpu_spec.model_dump(mode="json")
        if slow:
            gpu.update(name="H100-slow-nvlink", nvlink_bandwidth_gb_per_s=0.9)
        data["cluster"]["buildings"][0]["gpu"] = gpu
        instance = Instance.model_validate(data)
        filled = fill_defaults(instance, plan)
        workload = build_workload(instance, filled)
        model, job = instance.job.model_spec, instance.job
        m = job.global_batch_size // plan.dp
        act = job.seq_len * model.hidden_size * 2
        expected = m * model.layers * 2 * 4 * 7 / 8 * act / (gpu["nvlink_bandwidth_gb_per_s"] * 1e9
                                                             * co.NVLINK_PROTOCOL_EFFICIENCY)
        nvlink = {k: v for k, v in workload.resource_busy_s.items() if k.startswith("NVLink ")}
        assert len(nvlink) == 2 and list(nvlink.values()) == pytest.approx([expected, expected], rel=1e-9)
    assert workload.busiest_resource[0].startswith("NVLink ")
    sim, est = simulate(instance, filled), estimate(instance, filled)
    assert est.step_time_s >= expected * (1 - 1e-9) and sim.step_time_s >= expected * (1 - 1e-9)
    assert sim.breakdown["exposed_tp_s"] >= expected - sim.details["pipeline_makespan_s"] - 1e-6


def test_tp_and_the_dp_ring_share_nvlink(load_shipped_instance) -> None:
    """TP 2 puts four DP ring members in each 8-GPU NVLink domain: 3/4 of each member's ring hops stay on
    NVLink. The TP collectives (spread over each forward and backward) and the DP sync's NVLink hops are
    flows on the same per-GPU NVLink resource, so with an NVLink 30× slower than an H100's they slow each
    other: the simulated step exceeds both the classes timed apart and the NVLink's busy time, and the
    busy time is the TP bytes plus the sync's (reduce-scatter and ZeRO-1 gather) NVLink hops."""
    from scaleacross_opt.catalog import coefficients as co
    from scaleacross_opt.spec import Instance

    base = load_shipped_instance("single-building-llama3-70b")
    plan = Plan(tp=2, cp=1, pp=1, dp=1024, micro_batch_size=1, schedule="1f1b", zero_stage=1, recompute="none")
    data = base.model_dump(mode="json", exclude_none=True)
    gpu = base.cluster.buildings[0].gpu_spec.model_dump(mode="json")
    gpu.update(name="H100-slow-nvlink", nvlink_bandwidth_gb_per_s=15.0)
    data["cluster"]["buildings"][0]["gpu"] = gpu
    instance = Instance.model_validate(data)
    filled = fill_defaults(instance, plan)
    workload = build_workload(instance, filled)
    nvlink = {"NVLink bldg-a stage 0 tx", "NVLink bldg-a stage 0 rx"}
    tp_flows = [flow for flow in workload.groups[0].op_flows if flow.name.startswith("tp-")]
    assert {flow.name for flow in tp_flows} == {"tp-forward", "tp-backward"}
    assert all(set(flow.demand[0][0]) == nvlink and 0 < min(flow.demand[0][0].values()) <= 1 for flow in tp_flows)
    assert nvlink <= set(workload.dp_sync_uses[0][0]) and nvlink <= set(workload.dp_gather_uses[0][0])
    model, job = instance.job.model_spec, instance.job
    m = job.global_batch_size // plan.dp
    bandwidth = 15.0e9 * co.NVLINK_PROTOCOL_EFFICIENCY
    tp_bytes = m * model.layers * 2 * 4 * 1 / 2 * job.seq_len * model.hidden_size * 2
    key = "NVLink bldg-a stage 0 tx"
    sync, gather = workload.dp_sync_uses[0][0][key], workload.dp_gather_uses[0][0][key]
    values = 70.6e9 / plan.tp  # the TP shard of Llama 3 70B's parameters, ± norms
    assert sync * bandwidth == pytest.approx(values * co.GRAD_REDUCE_BYTES * 1023 / 1024 * 3 / 4, rel=0.01)
    busy = workload.resource_busy_s[key]
    assert busy == pytest.approx(tp_bytes / bandwidth + sync + gather, rel=1e-6)
    shared, apart = simulate_workload(workload), simulate_workload(workload, share=False)
    assert shared.sharing_s > 0 and shared.step_time_s > apart.step_time_s
    assert shared.step_time_s > busy
