"""Discrete-event engine: latency on the critical path, link sharing, DP overlap, trace export.

All workloads are hand-built (``simulator.synthetic``), independent of the cost model.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from scaleacross_opt.cost.step import exposed_dp_s
from scaleacross_opt.simulator import report_from_result, simulate_workload, write_trace
from scaleacross_opt.simulator.engine import _Clock, _event_loop, _resources, op_graph
from scaleacross_opt.simulator.synthetic import uniform_workload


def _latency_slope(name: str, pp: int, m: int, cut: int, **kw: float) -> float:
    """d(makespan)/dL for latency L on the boundary before stage ``cut`` (exact: both are piecewise linear)."""
    def run(latency: float) -> float:
        wl = uniform_workload(name, pp, 1, m, fwd_s=1.0, bwd_input_s=1.0, bwd_weight_s=1.0, cuts=(cut,),
                              latency_s=latency, **kw)
        return simulate_workload(wl).pipeline_end_s
    return (run(0.25) - run(0.0)) / 0.25


@pytest.mark.parametrize("pp", [2, 4, 6, 8])
def test_1f1b_pays_boundary_latency_once_per_microbatch(pp: int) -> None:
    # The 1F1B critical path zig-zags over the boundary (F crosses, its B crosses back, the next F
    # leaves): with c stages before the boundary it crosses 2·max(1, ⌊(m + c − p)/2⌋ + 1) times.
    for cut in range(1, pp):
        for m in (1, 2, pp, pp + 1, 2 * pp + 3, 4 * pp):
            expected = 2 * max(1, (m + cut - pp) // 2 + 1)
            assert _latency_slope("1f1b", pp, m, cut) == pytest.approx(expected), (cut, m)


@pytest.mark.parametrize("pp", [2, 4, 8])
def test_gpipe_and_crosspipe_pay_latency_per_window(pp: int) -> None:
    for m in (pp, 2 * pp, 4 * pp):
        cut = pp // 2
        assert _latency_slope("gpipe", pp, m, cut) == pytest.approx(2.0)  # one crossing each way
        cross = _latency_slope("crosspipe-unidirectional", pp, m, cut)
        assert cross == pytest.approx(2 * m / pp)  # once per window of p micro-batches each way
        if pp >= 4 and m >= 2 * pp:
            assert cross <= 0.5 * _latency_slope("1f1b", pp, m, cut)


def test_transfer_costs_latency_plus_serialisation_per_hop() -> None:
    # pp = 2, m = 1: F0, transfer, F1, B1, transfer, B0 — two hops of L + S/BW.
    wl = uniform_workload("1f1b", 2, 1, 1, cuts=(1,), latency_s=0.5, p2p_bytes=3.0, bandwidth_bytes_per_s=2.0)
    assert simulate_workload(wl).pipeline_end_s == pytest.approx(2 + 2 * 2 + 2 * (0.5 + 1.5))


def test_uneven_stage_durations() -> None:
    wl = uniform_workload("gpipe", 3, 1, 1)
    group = replace(wl.groups[0], fwd_s=np.array([[1.0], [2.0], [4.0]]), bwd_input_s=np.array([[3.0], [5.0], [7.0]]),
                    bwd_weight_s=np.array([[0.5], [0.25], [0.125]]))
    result = simulate_workload(replace(wl, groups=(group,)))
    assert result.pipeline_end_s == pytest.approx(1 + 2 + 4 + 7.125 + 5.25 + 3.5)
    assert result.groups[0].busy_s.tolist() == pytest.approx([4.5, 7.25, 11.125])


def test_link_transfers_sent_together_are_served_in_order() -> None:
    # GPipe, zero-time forwards: F0 and F1 of stage 0 both end at t = 0 and send 1 s transfers at once;
    # one replica's sends to one peer run in order on its communicator: the second waits for the first.
    wl = uniform_workload("gpipe", 2, 1, 2, fwd_s=0.0, cuts=(1,), p2p_bytes=4.0, bandwidth_bytes_per_s=4.0)
    timeline = simulate_workload(wl).groups[0]
    f_stage1 = np.flatnonzero((op_graph("gpipe", 2, 1, 2).stage == 1) & (op_graph("gpipe", 2, 1, 2).kind == 0))
    assert timeline.contended
    assert timeline.send[f_stage1].tolist() == [0.0, 0.0]
    assert timeline.arrive[f_stage1].tolist() == pytest.approx([1.0, 2.0])


def test_link_transfers_staggered_first_come_first_served() -> None:
    # Second transfer is sent at 1.0 while the first (sent at 0.5) runs until 1.5: it starts then, ends 2.5.
    wl = uniform_workload("gpipe", 2, 1, 2, fwd_s=0.5, cuts=(1,), p2p_bytes=1.0, bandwidth_bytes_per_s=1.0)
    timeline = simulate_workload(wl).groups[0]
    graph = op_graph("gpipe", 2, 1, 2)
    f_stage1 = np.flatnonzero((graph.stage == 1) & (graph.kind == 0))
    assert timeline.send[f_stage1].tolist() == pytest.approx([0.5, 1.0])
    assert timeline.arrive[f_stage1].tolist() == pytest.approx([1.5, 2.5])


def test_event_loop_matches_list_schedule_without_contention() -> None:
    rng = np.random.default_rng(0)
    for name, pp, v, m in (("interleaved-1f1b", 4, 2, 8), ("zb-v", 4, 2, 8), ("dualpipe", 3, 2, 6), ("1f1b", 5, 1, 7)):
        wl = uniform_workload(name, pp, v, m, cuts=(2,), latency_s=0.3)
        group = replace(wl.groups[0], fwd_s=rng.uniform(0.5, 2, (pp, v)), bwd_input_s=rng.uniform(0.5, 2, (pp, v)),
                        bwd_weight_s=rng.uniform(0.5, 2, (pp, v)))
        wl = replace(wl, groups=(group,))
        result = simulate_workload(wl)
        timeline, graph = result.groups[0], result.graph
        assert not timeline.contended
        dur = timeline.end - timeline.start
        _, pair_resource, work, latency = _resources(graph, group, wl)
        res = np.full(dur.size, -1)
        res[graph.remote] = pair_resource[graph.pair_index[graph.remote]]
        end, _, arrive = _event_loop(graph, dur, res, work, latency, _Clock(None))
        np.testing.assert_allclose(end, timeline.end, rtol=1e-12)
        np.testing.assert_allclose(arrive, timeline.arrive, rtol=1e-12)


def test_dp_sync_overlaps_remaining_backward() -> None:
    d, n = 2.5, 4
    wl = uniform_workload("interleaved-1f1b", 4, 2, 8, dp_sync_s=d, optimizer_s=0.25, dp_buckets=n)
    result = simulate_workload(wl)
    # Chunk 1's sync of every stage hides behind chunk 0's remaining backwards. Chunk 0's buckets (d/n each)
    # are released at k/n of its last backward (B = 2 s here); the first starts at B/n and the stream never
    # idles after it (d/n ≥ B/n), so d + B/n − B of the sync is exposed.
    exposed = d + 2.0 / n - 2.0
    assert result.exposed_dp_s == pytest.approx(exposed)
    assert result.exposed_dp_s < wl.dp_sync_s.sum(axis=1).min()
    assert result.step_time_s == pytest.approx(result.pipeline_end_s + exposed + 0.25)
    assert np.all(result.dp_start_s[wl.dp_jobs.chunk == 1] < result.pipeline_end_s)
    assert result.exposed_dp_s == pytest.approx(max(exposed_dp_s(wl, group) for group in wl.groups))


def test_dp_sync_waits_for_every_group_and_serialises() -> None:
    wl = uniform_workload("1f1b", 2, 1, 2, dp_sync_s=10.0, num_groups=2, dp_buckets=2)
    slow = replace(wl.groups[1], fwd_s=wl.groups[1].fwd_s * 2)
    result = simulate_workload(replace(wl, groups=(wl.groups[0], slow)))
    last = op_graph("1f1b", 2, 1, 2).last_backward[0, 0]
    ready = max(g.end[last] - 0.5 * (g.end[last] - g.start[last]) for g in result.groups)  # half the backward ran
    first = result.dp_start_s[wl.dp_jobs.stage == 0]
    assert first.tolist() == pytest.approx([ready, ready + 5.0])  # the slow group's buckets gate the sync
    assert result.step_time_s == pytest.approx(ready + 10.0)


def test_report_breakdown_sums_to_step_time() -> None:
    wl = uniform_workload("1f1b", 4, 1, 8, cuts=(2,), latency_s=0.1, p2p_bytes=1.0, bandwidth_bytes_per_s=10.0,
                          dp_sync_s=0.3, optimizer_s=0.2)
    result = simulate_workload(wl)
    report = report_from_result(result, wl, model_flops=1e15, peak_flops=1e15, tokens=1000.0, memory_gib=10.0,
                                capacity_gib=80.0, fits=True)
    assert sum(report.breakdown.values()) == pytest.approx(report.step_time_s)
    assert report.breakdown["exposed_pp_s"] > 0 and report.breakdown["bubble_s"] > 0
    assert report.simulated and report.details["per_stage"][0]["peak_in_flight_microbatches"] == 4.0
    json.dumps(report.to_json())


def test_trace_export(tmp_path: Path) -> None:
    wl = uniform_workload("interleaved-1f1b", 2, 2, 4, cuts=(1,), latency_s=0.1, p2p_bytes=1.0,
                          bandwidth_bytes_per_s=1.0, dp_sync_s=0.2)
    result = simulate_workload(wl)
    path = tmp_path / "trace.json"
    write_trace(path, result, wl)
    events = json.loads(path.read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert {"compute", "dp-comm", "links"} <= names
    assert all(e["dur"] >= 0 and "ts" in e for e in spans)
    ops = [e for e in spans if e["tid"] == 0 and e["name"][0] in "FB" and e["pid"] < 2]
    assert len(ops) == result.num_ops
    assert sum(e["name"] == "dp-sync chunk 0 bucket 0" for e in spans) == 2
    assert any(e["pid"] == 2 for e in spans)  # link transfers


def test_zb_v_runs_the_faster_of_the_unit_and_the_timed_order() -> None:
    """ZB-V's greedy order computed for the plan's F:B:W ratio is tried beside the unit-time one and the
    faster is kept: never slower than the unit order, and clearly faster when W is cheap."""
    from scaleacross_opt.simulator.engine import _Clock, _simulate_order

    gains = []
    for f, b, w in ((1.0, 1.0, 1.0), (1.0, 1.6, 0.4), (1.0, 0.7, 1.5), (2.0, 1.0, 0.5)):
        wl = uniform_workload("zb-v", 8, 2, 16)
        shape = wl.groups[0].fwd_s.shape
        group = replace(wl.groups[0], fwd_s=np.full(shape, f), bwd_input_s=np.full(shape, b),
                        bwd_weight_s=np.full(shape, w))
        wl = replace(wl, groups=(group,))
        unit = _simulate_order(op_graph("zb-v", 8, 2, 16), wl, joint=False, clock=_Clock(None))[0].step_time_s
        chosen = simulate_workload(wl).step_time_s
        assert chosen <= unit * (1 + 1e-12)
        gains.append(1 - chosen / unit)
    assert gains[0] == 0.0 and max(gains) > 0.01
