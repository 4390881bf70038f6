"""Closed-form estimate vs discrete-event simulation on shipped instances.

Both reports are composed from the same ``build_workload``, so every difference comes from how the
ops are composed. ``benchmarks/estimate_vs_simulate.py`` measures the differences over all shipped
instances; this file pins the ones that matter:

- Agreement where the closed form is exact. For 1F1B, GPipe and interleaved 1F1B the bubble
  fraction does not depend on the op times, so on one building (or with little p2p traffic) and with
  the slowest stage last (LM head) the pipeline makespan must match the simulator. (With a faster
  stage behind the bottleneck — mixed GPUs — the closed form is a few % high; not pinned here.)
  The benchmark measures max 0.002 % for these schedules on ``single-building-llama3-70b`` and
  ``small-two-buildings-llama3-8b`` (27 plans), hence ``PIPELINE_TOL`` = 0.1 %. The full step
  differs only by exposed DP sync (both release the same gradient buckets, ``StepWorkload.dp_jobs``;
  the closed form places the last backwards by the drain), hence ``STEP_TOL`` = 5.5 % and the bounds
  checked in ``test_dp_residual_is_the_bucketing_credit``.
- The direction of the known differences, where it follows from first principles (each test's
  docstring gives the argument and checks its precondition on the workload).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from test_physical_floor import with_links

from scaleacross_opt.catalog.network import DEFAULT_NETWORK
from scaleacross_opt.cost.report import StepReport
from scaleacross_opt.cost.step import (
    _link_bound_s,
    _stage_orders_s,
    build_workload,
    estimate,
    exposed_dp_s,
    exposed_gather_s,
)
from scaleacross_opt.cost.workload import StepWorkload
from scaleacross_opt.optimizer.neighbourhood import place
from scaleacross_opt.plan_defaults import fill_defaults
from scaleacross_opt.simulator import simulate, simulate_workload
from scaleacross_opt.spec import (
    BuildingShare,
    CongestionControl,
    CrossBuilding,
    Instance,
    LossRecovery,
    Placement,
    Plan,
)
from scaleacross_opt.validation.plan_checks import validate_plan

PIPELINE_TOL = 0.005  # relative: a GPU's NIC serves its forward and backward sends in turn (the closed form
# sees each path alone), 0.33 % on these plans; 0.002 % before the simulator shared NICs
STEP_TOL = 0.055  # relative; benchmark max 5.0 % for those schedules on the two instances below

SINGLE = "single-building-llama3-70b"
SMALL = "small-two-buildings-llama3-8b"
CAMPUS = "three-buildings-campus-llama3-70b"
REGION = "cross-region-gpt3-175b"


Compared = tuple[Plan, StepReport, StepReport, StepWorkload]


@pytest.fixture(scope="module")
def instances(load_shipped_instance: Callable[[str], Instance]) -> dict[str, Instance]:
    """The shipped instances used here, loaded once."""
    return {name: load_shipped_instance(name) for name in (SINGLE, SMALL, CAMPUS, REGION)}


@pytest.fixture(scope="module")
def compare(instances: dict[str, Instance]) -> Callable[..., Compared]:
    """compare(instance name, plan or plan fields) → (filled plan, estimate, simulation, workload); the
    filled plan must pass ``validate_plan``."""

    def run(name: str, plan: Plan | None = None, **fields: object) -> Compared:
        instance = instances[name]
        plan = fill_defaults(instance, plan if plan is not None else Plan(**fields))  # type: ignore[arg-type]
        assert validate_plan(plan, instance) == []
        return plan, estimate(instance, plan), simulate(instance, plan), build_workload(instance, plan)

    return run


def rel(a: float, b: float) -> float:
    return (a - b) / b


def pipeline_times(est: StepReport, sim: StepReport, workload: StepWorkload) -> tuple[float, float]:
    """(estimated, simulated) pipeline makespan: the step without exposed DP sync and the optimizer.

    The estimate counts exposed ZeRO-3 gathers in exposed_dp_s although they are inside the op durations."""
    zero3 = workload.exposed_comm_s.get("dp", 0.0)
    b = est.breakdown
    return est.step_time_s - (b["exposed_dp_s"] - zero3) - b["optimizer_s"], float(sim.details["pipeline_makespan_s"])


def dp_without_bucketing(workload: StepWorkload) -> float:
    """The closed form's exposed DP sync with every bucket released at its chunk's last backward's end (drain
    of earlier stages only), plus the ZeRO-1/2 gathers the next forward waits for (exact when no stage
    shares a route)."""
    return (max(exposed_dp_s(workload, group, bucketed=False) for group in workload.groups)
            + exposed_gather_s(workload))


def pp_across(instance: Instance, plan: Plan) -> Placement:
    """Half the stages of every replica in each of two buildings."""
    a, b = (x.name for x in instance.cluster.buildings)
    layers = instance.job.model_spec.layers
    split = [layers // plan.pp + (1 if s < layers % plan.pp else 0) for s in range(plan.pp)]
    shares = [BuildingShare(building=n, dp_replicas=plan.dp, pp_stages=plan.pp // 2) for n in (a, b)]
    return Placement(cross_building=CrossBuilding.PP, buildings=shares, layers_per_stage=split)


# ------------------------------------------------------------------------------------------------
# Agreement where the closed form is exact
# ------------------------------------------------------------------------------------------------

EXACT_CASES = [
    (SINGLE, {"schedule": "1f1b", "virtual_stages": 1, "recompute": "none"}),
    (SINGLE, {"schedule": "gpipe", "virtual_stages": 1, "recompute": "full"}),  # holds all 16 micro-batches
    (SINGLE, {"schedule": "interleaved-1f1b", "virtual_stages": 2, "recompute": "none"}),
    (SINGLE, {"schedule": "interleaved-1f1b", "virtual_stages": 4, "recompute": "none"}),
    (SMALL, {"schedule": "1f1b", "virtual_stages": 1, "recompute": "none"}),
    (SMALL, {"schedule": "interleaved-1f1b", "virtual_stages": 2, "recompute": "none"}),
]
DEGREES = {SINGLE: {"tp": 8, "pp": 4, "dp": 64}, SMALL: {"tp": 8, "pp": 4, "dp": 4}}


@pytest.mark.parametrize(("name", "fields"), EXACT_CASES, ids=lambda x: x if isinstance(x, str) else
                         f"{x['schedule']}-v{x['virtual_stages']}")
def test_exact_schedules_agree(compare: Callable[..., Compared], name: str, fields: dict) -> None:
    """1F1B / GPipe / interleaved with the DP sync after the backward (nothing shares a NIC with the
    pipeline's transfers): same pipeline makespan; the step differs only by exposed DP sync."""
    _, est, sim, workload = compare(name, micro_batch_size=1, dp_sync="after-backward", **DEGREES[name], **fields)
    est_pipe, sim_pipe = pipeline_times(est, sim, workload)
    assert abs(rel(est_pipe, sim_pipe)) <= PIPELINE_TOL
    for term in ("compute_s", "exposed_tp_s", "optimizer_s"):  # read from the same workload
        assert est.breakdown[term] == pytest.approx(sim.breakdown[term], rel=1e-9, abs=1e-12), term
    idle = [r.breakdown["bubble_s"] + r.breakdown["exposed_pp_s"] for r in (est, sim)]  # split differs slightly
    assert idle[0] == pytest.approx(idle[1], abs=PIPELINE_TOL * sim_pipe)
    assert abs(rel(est.step_time_s, sim.step_time_s)) <= STEP_TOL
    est_dp, sim_dp = est.breakdown["exposed_dp_s"], sim.breakdown["exposed_dp_s"]
    assert est_dp <= sim_dp + PIPELINE_TOL * sim_pipe  # the closed form stays a lower bound
    if fields["virtual_stages"] == 1 and not workload.dp_shared.any():  # sandwiched as argued below
        assert sim_dp <= dp_without_bucketing(workload) + PIPELINE_TOL * sim_pipe


@pytest.mark.parametrize("name", [SINGLE])
def test_dp_exposure_agrees_when_stage_0_dominates(compare: Callable[..., Compared],
                                                   instances: dict[str, Instance], name: str) -> None:
    """v = 1: both models release bucket k of a stage's n gradient buckets k/n into its last backward; in
    1F1B stage 0's last backward ends the pipeline, so when stage 0's sync dominates, both expose the same
    part of it (and less than without bucketing)."""
    degrees = {SINGLE: (8, 4, 64), SMALL: (8, 4, 4), CAMPUS: (8, 4, 384)}[name]
    tp, pp, dp = degrees
    _, est, sim, workload = compare(name, tp=tp, pp=pp, dp=dp, micro_batch_size=1, schedule="1f1b")
    for group in workload.groups:  # precondition: stage 0 dominates the exposure
        drain = np.concatenate([[0.0], np.cumsum(group.bwd_s.sum(axis=1))[:-1]])
        assert (workload.dp_sync_s.sum(axis=1) - drain).max() <= workload.dp_sync_s[0].sum() * (1 + 1e-9)
    est_dp, sim_dp = est.breakdown["exposed_dp_s"], sim.breakdown["exposed_dp_s"]
    assert sim_dp > 0
    assert est_dp == pytest.approx(sim_dp, rel=0.02, abs=1e-4)
    assert sim_dp < dp_without_bucketing(workload)


@pytest.mark.parametrize("name", [SMALL, CAMPUS])
def test_shared_route_dp_exposure_is_bounded_below(compare: Callable[..., Compared], name: str) -> None:
    """DP across buildings: the stages' syncs and gathers share the route (max-min fair in the simulator);
    the closed form charges their summed route seconds less the drain window, a lower bound."""
    tp, pp, dp = {SMALL: (8, 4, 4), CAMPUS: (8, 4, 384)}[name]
    _, est, sim, workload = compare(name, tp=tp, pp=pp, dp=dp, micro_batch_size=1, schedule="1f1b")
    assert workload.dp_shared.all()
    assert 0 < est.breakdown["exposed_dp_s"] <= sim.breakdown["exposed_dp_s"] * (1 + 1e-9)
    assert est.step_time_s <= sim.step_time_s * (1 + 1e-9) <= 1.15 * est.step_time_s


@pytest.mark.parametrize("name", [SINGLE])
def test_dp_sync_after_backward_exposes_the_unbucketed_sync(compare: Callable[..., Compared], name: str) -> None:
    """dp_sync = after-backward: no bucketing credit in either model, so both expose the sync less the
    drain of earlier stages, which is more than the overlapped plan exposes."""
    tp, pp, dp = {SINGLE: (8, 4, 64), CAMPUS: (8, 4, 384)}[name]
    fields = {"tp": tp, "pp": pp, "dp": dp, "micro_batch_size": 1, "schedule": "1f1b"}
    _, est, sim, workload = compare(name, dp_sync="after-backward", **fields)
    _, est_overlap, sim_overlap, _ = compare(name, **fields)
    assert (workload.dp_buckets == 1).all()
    assert est.breakdown["exposed_dp_s"] == pytest.approx(dp_without_bucketing(workload), rel=1e-9)
    assert sim.breakdown["exposed_dp_s"] == pytest.approx(dp_without_bucketing(workload), rel=0.02)
    assert est.breakdown["exposed_dp_s"] > est_overlap.breakdown["exposed_dp_s"]
    assert sim.breakdown["exposed_dp_s"] > sim_overlap.breakdown["exposed_dp_s"]


# ------------------------------------------------------------------------------------------------
# Direction of known differences
# ------------------------------------------------------------------------------------------------


def test_zb_h1_closed_form_reaches_fill_bound(compare: Callable[..., Compared]) -> None:
    """ZB-H1: the bubble (p−1)/(3m) (the paper's formula at T_F = T_B = T_W) is below what any schedule
    must pay; the closed form's relaxation at the pipeline's end stages, which runs the last stage's real
    op order, pays it and stays below the simulator.

    First principles: the last stage cannot start before the first micro-batch's forward has passed
    the p−1 stages in front of it, and then has busy_{p−1} of work: makespan ≥ Σ_{s<p−1} F_s +
    busy_{p−1}. When the last stage is the busiest (LM head) this exceeds the bubble formula's
    m·T_max + (Σ_s T_s − T_max)/3 + H as soon as F ≥ (F + B + W)/3 — checked on the workload below.
    """
    _, est, sim, w = compare(SINGLE, tp=8, pp=4, dp=64, micro_batch_size=1, schedule="zb-h1")
    g = w.groups[0]
    busy = (g.fwd_s + g.bwd_s).sum(axis=1) * w.num_microbatches
    last = w.pp - 1
    assert int(np.argmax(busy)) == last  # precondition: the LM-head stage is the busiest
    fill_bound = float(g.fwd_s[:last].sum()) + float(busy[last])
    per_stage = (g.fwd_s + g.bwd_s).sum(axis=1)
    formula = w.num_microbatches * per_stage.max() + (per_stage.sum() - per_stage.max()) / 3
    assert fill_bound > formula  # precondition of the argument (F ≥ mean op time on this model)
    est_pipe, sim_pipe = pipeline_times(est, sim, w)
    assert fill_bound * (1 - 1e-9) <= est_pipe <= sim_pipe * (1 + 1e-9)
    assert est.step_time_s <= sim.step_time_s * (1 + 1e-9)


def test_interleaved_shared_dp_sync_estimate_is_a_lower_bound(compare: Callable[..., Compared]) -> None:
    """Interleaved v = 4 with a cross-building DP sync: chunk syncs start as their chunks finish and share
    the route with the other stages' syncs; the closed form (whole stages, route seconds summed less the
    drain window) stays below the simulator and close to it."""
    plan, est, sim, w = compare(CAMPUS, tp=8, pp=4, dp=384, micro_batch_size=1, schedule="interleaved-1f1b",
                                virtual_stages=4)
    assert plan.placement is not None and plan.placement.cross_building is CrossBuilding.DP
    est_pipe, sim_pipe = pipeline_times(est, sim, w)
    assert est_pipe <= sim_pipe <= (1 + 0.02) * est_pipe  # the syncs' NIC traffic slows the last transfers
    assert est.step_time_s <= sim.step_time_s * (1 + 1e-9) <= 1.15 * est.step_time_s


def test_pp_across_long_latency_round_trips(compare: Callable[..., Compared], instances: dict[str, Instance]) -> None:
    """1F1B with the pipeline split over a 30 ms link (tuned network: transfers are short, latency dominates).

    First principles: on the last stage before the boundary (c−1), 1F1B runs B(i), then F(i+w+1)
    (w = p−c warm-up), whose activation must cross, go through the stages behind the boundary, and
    whose gradient must cross back before B(i+w+1): every w+1 micro-batches one dependency chain crosses
    the boundary twice, ≥ 2⌊m/(w+1)⌋ crossings over the step. With m = 6, p = 4, c = 2 that is ≥ 4
    crossings where one forward and one backward traversal count 2, and each crossing (30 ms) is a large
    fraction of the work between two crossings. The closed form's boundary round trips follow exactly
    that chain, so it sees every crossing and stays at (not above) the simulator.
    """
    instance = instances[REGION]
    cross = DEFAULT_NETWORK.cross_building.model_copy(update={
        "congestion_control": CongestionControl.RECEIVER_DRIVEN, "loss_recovery": LossRecovery.SELECTIVE_REPEAT,
        "qps_per_connection": 16, "window_kib_per_qp": 65536,
    })
    base = Plan(tp=8, pp=4, dp=256, micro_batch_size=1, schedule="1f1b", dp_sync="after-backward",
                network=DEFAULT_NETWORK.model_copy(update={"cross_building": cross}))
    _, est, sim, w = compare(REGION, base.model_copy(update={"placement": pp_across(instance, base)}))
    link = w.link(*(b.name for b in instance.cluster.buildings))
    transfer = w.p2p_bytes / link.bandwidth_bytes_per_s
    assert link.latency_s > 10 * transfer  # precondition: latency-dominated crossings
    assert w.num_microbatches >= 2 * (w.pp - w.pp // 2 + 1)  # ≥ 4 crossings on one chain
    # a stage's NIC serves its sends to both neighbours in turn: the only contention here
    one_traversal = 2 * link.transfer_s(w.p2p_bytes)
    assert sim.breakdown["exposed_pp_s"] > 1.5 * one_traversal  # the extra crossings show
    assert est.breakdown["exposed_pp_s"] <= sim.breakdown["exposed_pp_s"] <= 1.01 * est.breakdown["exposed_pp_s"]
    assert est.step_time_s <= sim.step_time_s * (1 + 1e-9)


SLOW_LINK_CASES = [("crosspipe-unidirectional", 1, 2), ("zb-v", 2, 1), ("dualpipe", 2, 2), ("interleaved-1f1b", 2, 2)]


@pytest.mark.parametrize(("schedule", "v", "cp"), SLOW_LINK_CASES, ids=[c[0] for c in SLOW_LINK_CASES])
def test_pp_across_slow_link_round_trips(instances: dict[str, Instance], schedule: str, v: int, cp: int) -> None:
    """PP across a 4 GB/s (32 Gb/s) link: one transfer takes far longer than an op, yet the simulated step
    is far longer than the link's busy time — a stage sends its next activation only after the backward
    its op order puts first, whose gradient must cross back, so few micro-batches are in flight per round
    trip (V-shaped and interleaved schedules also queue two boundaries' transfers between the same two
    stages on one path). The closed form follows those two stages' op orders, so it stays within 15 % of
    the simulator, and its pipeline is not above the simulated one."""
    instance = with_links(instances[REGION], 32.0)
    base = Plan(tp=8, cp=cp, pp=4, dp=256 // cp, micro_batch_size=1, schedule=schedule, virtual_stages=v)
    plan = fill_defaults(instance, base.model_copy(update={"placement": pp_across(instance, base)}))
    assert validate_plan(plan, instance) == []
    est, sim, w = estimate(instance, plan), simulate(instance, plan), build_workload(instance, plan)
    link = w.link(*(b.name for b in instance.cluster.buildings))
    transfer = w.p2p_bytes / link.bandwidth_bytes_per_s
    group = w.groups[0]
    assert transfer > 100 * float((group.fwd_s + group.bwd_s).max())  # precondition: transfers dominate
    boundaries = sum(a != b for a, b in zip(group.stage_building, group.stage_building[1:], strict=False)) * v
    assert w.num_microbatches * boundaries * transfer < 0.9 * sim.step_time_s  # not the link's busy time
    est_pipe, sim_pipe = pipeline_times(est, sim, w)
    assert est_pipe <= sim_pipe * (1 + 1e-9)
    assert abs(rel(est.step_time_s, sim.step_time_s)) <= 0.15


ALL_SCHEDULES = [("1f1b", 1, 1), ("gpipe", 1, 1), ("zb-h1", 1, 1), *SLOW_LINK_CASES]


@pytest.mark.parametrize("gbps", [32.0, 32_000.0])
def test_stage_relaxation_is_below_the_simulator(instances: dict[str, Instance], gbps: float) -> None:
    """The closed form's relaxation of the timeline (end and boundary stages on their real op orders) only
    drops constraints the simulator keeps — the other stages' orders and queues, different senders
    sharing one path — so for every schedule, on one building and across a slow or fast link, it is
    never above the simulated makespan of its pipeline group; nor is the per-path bound (``_link_bound_s``)."""
    for name, gbps_of in ((SINGLE, None), (REGION, gbps)):
        instance = instances[name] if gbps_of is None else with_links(instances[name], gbps_of)
        for schedule, v, cp in ALL_SCHEDULES:
            dp = 256 // cp if name == REGION else 64 // cp
            base = Plan(tp=8, cp=cp, pp=4, dp=dp, micro_batch_size=1, schedule=schedule, virtual_stages=v)
            if name == REGION:
                base = base.model_copy(update={"placement": pp_across(instance, base)})
            plan = fill_defaults(instance, base)
            if validate_plan(plan, instance):
                continue  # does not fit memory (GPipe on one building holds every micro-batch)
            w = build_workload(instance, plan)
            for group, timeline in zip(w.groups, simulate_workload(w).groups, strict=True):
                assert _stage_orders_s(w, group) <= timeline.makespan_s * (1 + 1e-9), (name, schedule)
                assert _link_bound_s(w, group) <= timeline.makespan_s * (1 + 1e-9), (name, schedule)


def test_link_bound_sees_the_hops_upstream_and_downstream(load_shipped_instance: Callable[[str], Instance]) -> None:
    """Interleaved 1F1B over a chain of four buildings at 4 GB/s: the middle link carries two boundaries and
    the wrap-around (which crosses every link) each way, and is busy ~77 % of the simulated step. Its first
    transfer cannot start before the micro-batch has crossed the link upstream of it, and its last leaves
    the downstream hops to go: the path bound adds those hops (at their time alone) to the link's busy time,
    stays below the simulated pipeline, and brings the closed form within 15 % of the simulator (it was 19 %
    with compute alone before and after the busy time)."""
    instance = with_links(load_shipped_instance("chain-four-buildings-mixtral-8x22b"), 32.0)
    base = Plan(tp=8, cp=1, pp=4, dp=256, ep=8, virtual_stages=2, micro_batch_size=1,
                schedule="interleaved-1f1b", zero_stage=1)
    plan = fill_defaults(instance, place(instance, base, CrossBuilding.PP))
    assert validate_plan(plan, instance) == []
    w = build_workload(instance, plan)
    (group,) = w.groups
    assert len(set(group.stage_building)) == 4
    sim = simulate(instance, plan)
    busiest = max(seconds for key, seconds in w.resource_busy_s.items() if key.startswith("link "))
    first_hop = w.link(*group.stage_building[:2]).transfer_s(w.p2p_bytes)
    bound = _link_bound_s(w, group)
    assert bound >= busiest + first_hop
    assert bound <= sim.details["pipeline_makespan_s"] * (1 + 1e-9)
    est = estimate(instance, plan)
    assert est.step_time_s <= sim.step_time_s * (1 + 1e-9)
    assert abs(rel(est.step_time_s, sim.step_time_s)) <= 0.15
