"""Bucketed gradient sync: how many buckets a chunk syncs in, what each costs, and the overlap that comes
out of the timeline (closed form and simulator alike) instead of a constant."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_cost_step import plan, two_buildings

from scaleacross_opt.catalog import coefficients as co
from scaleacross_opt.cost.layout import resolve
from scaleacross_opt.cost.memory import stage_params
from scaleacross_opt.cost.step import (
    build_workload,
    default_dp_bucket_params,
    estimate,
    exposed_dp_s,
    exposed_gather_s,
    gather_windows,
)
from scaleacross_opt.optimizer.neighbourhood import Move, neighbours, place
from scaleacross_opt.optimizer.space import design_space
from scaleacross_opt.simulator import simulate, simulate_workload
from scaleacross_opt.simulator.synthetic import uniform_workload
from scaleacross_opt.spec import CrossBuilding
from scaleacross_opt.spec import bounds as B
from scaleacross_opt.spec.plan import DpSync


def test_bucket_counts_follow_megatron_defaults() -> None:
    """A stage's first chunk in ⌈params ÷ max(40M, 1M·dp·cp)⌉ buckets, its later chunks in one each, a layer
    per bucket under ZeRO-3, one bucket when the sync follows the backward."""
    inst = two_buildings()
    interleaved = plan(CrossBuilding.PP, v=2)
    layout = resolve(inst, interleaved)
    workload = build_workload(inst, interleaved)
    size = max(co.DP_BUCKET_MIN_PARAMS, co.DP_BUCKET_PARAMS_PER_RANK * interleaved.dp * interleaved.cp)
    for s in range(interleaved.pp):
        first = stage_params(layout, s)[0]
        assert workload.dp_buckets[s, 0] == math.ceil((first.dense + first.expert) / size) > 1
        assert workload.dp_buckets[s, 1] == 1
    zero3 = interleaved.model_copy(update={"zero_stage": 3})
    assert build_workload(inst, zero3).dp_buckets[:, 0].tolist() == [4, 4, 4, 4]  # 8 layers per stage, 2 chunks
    after = interleaved.model_copy(update={"dp_sync": DpSync.AFTER_BACKWARD})
    assert (build_workload(inst, after).dp_buckets == 1).all()


def test_each_bucket_pays_its_collective_latency() -> None:
    """The same gradients in n buckets take n latencies: longer alone than one collective, by less than the
    n − 1 extra latencies of the slowest level would allow beyond that."""
    inst = two_buildings()
    bucketed = plan(CrossBuilding.PP)
    one = build_workload(inst, bucketed.model_copy(update={"dp_sync": DpSync.AFTER_BACKWARD}))
    many = build_workload(inst, bucketed)
    assert (many.dp_buckets > 1).all()
    assert (many.dp_sync_s > one.dp_sync_s).all()
    assert (many.dp_sync_s < 1.5 * one.dp_sync_s).all()  # buckets of ≥ 40M parameters: bandwidth-bound


def test_jobs_split_every_chunk_without_losing_a_byte() -> None:
    inst = two_buildings()
    workload = build_workload(inst, plan(CrossBuilding.DP, v=2))
    jobs = workload.dp_jobs
    for (s, c), seconds in np.ndenumerate(workload.dp_sync_s):
        mine = (jobs.stage == s) & (jobs.chunk == c)
        assert mine.sum() == workload.dp_buckets[s, c]
        assert jobs.sync_s[mine].sum() == pytest.approx(seconds)
        assert jobs.part[mine].sum() == pytest.approx(1.0)
        assert jobs.needed_at[mine][0] == 0.0 and jobs.ready_at[mine][-1] == 1.0
        assert np.allclose(jobs.ready_at[mine] - jobs.needed_at[mine], jobs.part[mine])


@pytest.mark.parametrize("buckets", [1, 2, 4, 8])
def test_a_sync_shorter_than_the_backward_exposes_its_last_bucket(buckets: int) -> None:
    """One stage, B = 2 s, a 1 s sync in n buckets: each bucket is done before the next is ready, so only
    the last one (released as the backward ends) is exposed: 1/n s, in both models. A constant overlap
    fraction would have hidden all of it."""
    workload = uniform_workload("1f1b", 1, 1, 4, dp_sync_s=1.0, dp_buckets=buckets)
    exposed = 1.0 / buckets
    assert simulate_workload(workload).exposed_dp_s == pytest.approx(exposed)
    assert exposed_dp_s(workload, workload.groups[0]) == pytest.approx(exposed)


def test_zero1_gathers_follow_the_next_forward_bucket_by_bucket() -> None:
    """ZeRO-1/2 gathers after the optimizer: the first forward needs bucket k once k/n of its layers ran, so a
    2 s gather of stage 0 in 4 buckets against F = 1 s delays the next step by 2 − 3/4 s (its last bucket is
    needed at 3/4 of F), in both models."""
    workload = uniform_workload("1f1b", 1, 1, 4, dp_gather_s=2.0, dp_buckets=4)
    assert exposed_gather_s(workload) == pytest.approx(1.25)
    assert simulate_workload(workload).exposed_gather_s == pytest.approx(1.25)


def test_later_chunks_gather_behind_the_forwards_before_theirs() -> None:
    """Interleaved, 2 stages × 2 chunks, F = 1 s, a 3 s gather per chunk (one bucket): the next step needs
    positions 0…3 — (s0, c0), (s1, c0), (s0, c1), (s1, c1) — at 0, 1, 2, 3 s, and each stage gathers its
    chunks in order, so stage 0's second gather ends at 6 s against its 2 s need: 4 s exposed, in both
    models (a whole stage's gathers against its first forward would have exposed 6 s)."""
    workload = uniform_workload("interleaved-1f1b", 2, 2, 4, dp_gather_s=3.0)
    assert gather_windows(workload).tolist() == [0.0, 2.0, 1.0, 3.0]  # jobs in stage, then chunk order
    assert exposed_gather_s(workload) == pytest.approx(4.0)
    assert simulate_workload(workload).exposed_gather_s == pytest.approx(4.0)


def test_streams_timed_alone_match_the_shared_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """The DP streams' fast path (each stage's buckets at full speed when no resource is oversubscribed) gives
    the event loop's times exactly; with a route the stages' syncs share, the event loop runs and slows them."""
    from scaleacross_opt.simulator import engine

    for route_s in (0.0, 3.0):
        workload = uniform_workload("interleaved-1f1b", 4, 2, 8, dp_sync_s=2.5, dp_gather_s=1.5, dp_route_s=route_s,
                                    dp_buckets=3)
        fast = simulate_workload(workload)
        with monkeypatch.context() as patch:
            patch.setattr(engine, "_jobs_oversubscribe", lambda *args: True)
            slow = simulate_workload(workload)
        assert fast.dp_end_s.tolist() == pytest.approx(slow.dp_end_s.tolist())
        assert fast.gather_end_s.tolist() == pytest.approx(slow.gather_end_s.tolist())
        assert fast.step_time_s == pytest.approx(slow.step_time_s)
    assert engine._jobs_oversubscribe(workload, fast.dp_start_s, fast.dp_end_s, workload.dp_jobs.sync_s,
                                      engine.chunk_shares(workload.dp_sync_s, workload.dp_sync_uses))


def test_real_plan_overlap_comes_from_the_timeline() -> None:
    """On a real plan the closed form stays a lower bound of the simulator, and bucketing hides part of the
    sync that the after-backward plan exposes."""
    inst = two_buildings()
    bucketed = plan(CrossBuilding.DP)
    after = bucketed.model_copy(update={"dp_sync": DpSync.AFTER_BACKWARD})
    est, sim = estimate(inst, bucketed), simulate(inst, bucketed)
    assert est.step_time_s <= sim.step_time_s * (1 + 1e-9)
    assert sim.details["dp_buckets_per_chunk"] == build_workload(inst, bucketed).dp_buckets.tolist()
    assert sim.breakdown["exposed_dp_s"] < simulate(inst, after).breakdown["exposed_dp_s"]


def test_a_plan_sets_its_own_bucket_size() -> None:
    """``Plan.dp_bucket_params`` replaces the default: ⌈params ÷ size⌉ buckets of the first chunk."""
    inst = two_buildings()
    base = plan(CrossBuilding.DP)
    layout = resolve(inst, base)
    held = stage_params(layout, 0)[0]
    for size in (50_000_000, 200_000_000, 10**12):
        sized = base.model_copy(update={"dp_bucket_params": size})
        assert build_workload(inst, sized).dp_buckets[0, 0] == math.ceil((held.dense + held.expert) / size)
    assert build_workload(inst, base.model_copy(update={"dp_bucket_params": 10**12})).dp_buckets.max() == 1


def test_larger_buckets_pay_fewer_wan_latencies() -> None:
    """Across a 30 ms link each of the default buckets pays the latency: buckets 16× the default cut the
    simulated step, and the closed form stays below the simulator for each size."""
    inst = two_buildings(latency_us=30_000.0)
    base = plan(CrossBuilding.DP)
    large = base.model_copy(update={"dp_bucket_params": 16 * default_dp_bucket_params(base)})
    assert build_workload(inst, large).dp_buckets.max() < build_workload(inst, base).dp_buckets.max()
    for candidate in (base, large):
        assert estimate(inst, candidate).step_time_s <= simulate(inst, candidate).step_time_s * (1 + 1e-9)
    assert simulate(inst, large).step_time_s < simulate(inst, base).step_time_s


def test_the_search_moves_the_bucket_one_rung_and_keeps_it_on_the_ladder() -> None:
    """Neighbours: the bucket one size up or down the space's multiples of the default; none under ZeRO-3; a
    placement move that changes dp·cp moves the default, and the bucket goes to the nearest rung of the new
    ladder (never below the default)."""
    inst = two_buildings()
    space = design_space(inst)
    base = plan(CrossBuilding.DP)
    default = default_dp_bucket_params(base)
    sizes = {p.dp_bucket_params for p in neighbours(inst, space, base, (Move.SCHEDULE,))}
    assert sizes == {None, 4 * default}
    up = base.model_copy(update={"dp_bucket_params": 4 * default})
    moved = {p.dp_bucket_params for p in neighbours(inst, space, up, (Move.SCHEDULE,))
             if p.zero_stage == up.zero_stage and p.micro_batch_size == up.micro_batch_size}
    assert {None, 16 * default} <= moved
    zero3 = up.model_copy(update={"zero_stage": 3})
    assert {p.dp_bucket_params for p in neighbours(inst, space, zero3, (Move.SCHEDULE,)) if p.zero_stage == 3} == {None}
    # tp1 dp32: the 40M floor; moves to dp·cp = 64 and 128 raise the default to 64M and 128M
    wide = place(inst, base.model_copy(update={"tp": 1, "dp": 32}), CrossBuilding.DP)
    assert wide is not None and default_dp_bucket_params(wide) == default
    four = wide.model_copy(update={"dp_bucket_params": 4 * default})  # 160M
    placed = neighbours(inst, space, four, (Move.PLACEMENT,))
    by_group = {other.dp * other.cp: other.dp_bucket_params for other in placed}
    assert by_group[64] == 4 * 64_000_000  # 160M is nearer ×4 (256M) than the 64M default
    assert by_group[128] is None  # … and nearer the 128M default than ×4 (512M)
    for other in placed:
        assert other.dp_bucket_params in space.bucket_sizes(other)


def test_bucket_sizes_follow_the_search_section_and_stop_at_the_largest_a_plan_may_state() -> None:
    """Without factor 1 in ``search.dp_bucket_factors`` the default is off the ladder (a plan goes to its
    nearest rung); at a million-rank DP group the multiples are capped at ``MAX_BUCKET_PARAMS`` (a plan that
    states more would not load) and, once the default passes it, only the default is left."""
    inst = two_buildings().with_updates({"search.dp_bucket_factors": [4, 16]})
    space = design_space(inst)
    base = plan(CrossBuilding.DP)
    default = default_dp_bucket_params(base)
    assert space.bucket_sizes(base) == [4 * default, 16 * default]
    assert space.on_bucket_ladder(base).dp_bucket_params == 4 * default
    every = design_space(two_buildings())
    assert every.bucket_sizes(base.model_copy(update={"dp": 1 << 20})) == [None, B.MAX_BUCKET_PARAMS]
    assert every.bucket_sizes(base.model_copy(update={"dp": 1 << 22})) == [None]
