"""Pipeline schedules: op-order validity, closed-form bubbles and memory against the simulator."""

from __future__ import annotations

import itertools

import pytest

from scaleacross_opt.schedules import OpKind, get_schedule, schedule_names
from scaleacross_opt.schedules.base import PipelineSchedule
from scaleacross_opt.simulator import op_graph, simulate_workload
from scaleacross_opt.simulator.synthetic import uniform_workload

ALL = ("1f1b", "crosspipe-unidirectional", "dualpipe", "gpipe", "interleaved-1f1b", "zb-h1", "zb-v")


def _grid(name: str) -> list[tuple[int, int, int]]:
    """Supported (pp, v, m) over a small grid."""
    schedule = get_schedule(name)
    return [
        (pp, v, m) for pp in (1, 2, 3, 4, 6, 8) for v in (1, 2, 3) for m in (1, 2, 3, 4, 6, 8, 12, 16, 24)
        if schedule.check(pp, v, m) is None
    ]


def test_every_schedule_registered_with_description() -> None:
    assert set(ALL) <= set(schedule_names())
    for name in ALL:
        assert get_schedule(name).description


@pytest.mark.parametrize("name", ALL)
def test_ops_exactly_once_and_no_deadlock(name: str) -> None:
    schedule = get_schedule(name)
    grid = _grid(name)
    assert len(grid) >= 5
    kinds = (OpKind.F, OpKind.B, OpKind.W) if schedule.splits_backward else (OpKind.F, OpKind.B)
    for pp, v, m in grid:
        expected = sorted((k, mb, c) for k in kinds for mb in range(m) for c in range(v))
        for ops in schedule.stage_ops(pp, v, m):
            assert sorted((op.kind, op.microbatch, op.chunk) for op in ops) == expected
        op_graph(name, pp, v, m)  # raises on out-of-order same-stage dependencies or deadlock


def _simulated_bubble(name: str, pp: int, v: int, m: int) -> float:
    """Bubble fraction with T_F = T_B (= T_W when split) per chunk and free communication."""
    split = get_schedule(name).splits_backward
    result = simulate_workload(uniform_workload(name, pp, v, m, bwd_weight_s=1.0 if split else 0.0))
    ideal = m * v * (3.0 if split else 2.0)
    return (result.pipeline_end_s - ideal) / ideal


@pytest.mark.parametrize("name", ALL)
def test_bubble_matches_closed_form(name: str) -> None:
    schedule = get_schedule(name)
    for pp, v, m in _grid(name):
        expected = schedule.bubble_fraction(pp, v, m)
        if name == "zb-v" and pp > 4:  # closed form is a lower bound there (see the zb_v docstring)
            assert expected <= _simulated_bubble(name, pp, v, m) <= expected + pp / (6 * m), (pp, v, m)
            continue
        assert _simulated_bubble(name, pp, v, m) == pytest.approx(expected, rel=1e-9, abs=1e-12), (pp, v, m)


@pytest.mark.parametrize("name", ALL)
def test_in_flight_matches_simulated(name: str) -> None:
    schedule = get_schedule(name)
    for pp, v, m in _grid(name):
        peak = op_graph(name, pp, v, m).peak_in_flight.max()
        assert peak == pytest.approx(schedule.in_flight_microbatches(pp, v, m)), (pp, v, m)


def test_zb_h1_beats_1f1b() -> None:
    for pp, m in ((4, 8), (8, 16), (8, 64)):
        zb = simulate_workload(uniform_workload("zb-h1", pp, 1, m)).pipeline_end_s
        base = simulate_workload(uniform_workload("1f1b", pp, 1, m)).pipeline_end_s
        assert zb < base
        assert (base - 3 * m) / (zb - 3 * m) == pytest.approx(3.0)  # a third of 1F1B's bubble


def test_unsupported_configurations_have_reasons() -> None:
    assert get_schedule("interleaved-1f1b").check(4, 2, 6)
    assert get_schedule("interleaved-1f1b").check(4, 1, 8)
    assert get_schedule("zb-v").check(4, 1, 8)
    assert get_schedule("dualpipe").check(4, 2, 7)
    assert get_schedule("1f1b").check(4, 2, 8)
    with pytest.raises(ValueError, match="virtual_stages"):
        op_graph("1f1b", 4, 2, 8)


def test_zb_v_greedy_order_lifts_its_activation_cap_instead_of_deadlocking() -> None:
    """With a long B and a short W, stage 0 can fill its 2p activation slots with chunk-0 forwards while its
    chunk-1 forward (which its first backward needs) waits: the cap yields for one op."""
    import scaleacross_opt.schedules.zb_v  # noqa: F401  (registers zb-v)
    from scaleacross_opt.schedules import get_schedule

    orders = get_schedule("zb-v").timed_stage_ops(2, 2, 15, (8, 15, 1))
    assert [len(ops) for ops in orders] == [3 * 15 * 2] * 2


def test_zb_v_orders_are_cached_but_every_caller_gets_its_own_lists() -> None:
    """A kept order is returned as fresh lists (a caller that edits one does not change the next caller's), equal
    to the order built anew; orders beyond the kept size are built each time, the same way."""
    from scaleacross_opt.schedules import zb_v

    schedule = get_schedule("zb-v")
    for pp, m in ((4, 9), (8, zb_v.CACHED_ORDER_STAGE_MICROBATCHES // 8 + 1)):
        first = schedule.timed_stage_ops(pp, 2, m, (8, 11, 5))
        built = zb_v._build_v_order(pp, m, (8, 11, 5))
        first[0].clear()
        assert schedule.timed_stage_ops(pp, 2, m, (8, 11, 5)) == built and first[0] == []


def test_trailing_weight_ops_of_zb_h1_follow_its_op_order() -> None:
    """ZB-H1's closed form (the last stage's p − 1 pending W ops and its last B's own) equals the count read
    off the op order, which other schedules use; schedules without split backward trail none."""
    schedule = get_schedule("zb-h1")
    for pp in range(2, 7):
        for m in range(pp, 3 * pp):
            assert schedule.trailing_weight_ops(pp, 1, m) == PipelineSchedule.trailing_weight_ops(schedule, pp, 1, m)
    assert get_schedule("1f1b").trailing_weight_ops(4, 1, 8) == 0


@pytest.mark.parametrize("name", ["zb-v", "dualpipe"])
def test_v_tip_ends_with_its_last_micro_batchs_chunk_0_weight_gradient(name: str) -> None:
    """The V's tip stage runs only W0 of the last micro-batch after its chunk 1's last W (the claim the CP-SAT
    bound of the tip's gradient sync rests on): the schedules' constant equals the count read off the op
    order, for ZB-V also the orders it builds for other F:B:W durations, which the simulator may run."""
    schedule = get_schedule(name)
    for pp in range(2, 9):
        for m in range(2 * pp, 4 * pp + 3):
            if schedule.check(pp, 2, m) is not None:
                continue
            assert schedule.tip_trailing_weight_ops(pp, 2, m) == 1
            assert PipelineSchedule.tip_trailing_weight_ops(schedule, pp, 2, m) == 1
            for times in ((8, 15, 1), (8, 8, 8), (8, 9, 7), (8, 20, 16)) if schedule.orders_by_op_times else ():
                tip = schedule.timed_stage_ops(pp, 2, m, times)[pp - 1]
                last_w1 = max(i for i, op in enumerate(tip) if op.kind is OpKind.W and op.chunk == 1)
                assert [(op.kind, op.microbatch, op.chunk) for op in tip[last_w1 + 1:]] == [(OpKind.W, m - 1, 0)]
    assert get_schedule("interleaved-1f1b").tip_trailing_weight_ops(4, 2, 8) is None


def test_turn_forwards_count_what_stage_zero_runs_while_its_last_chunk_turns() -> None:
    """Between micro-batch 0's forward and backward of stage 0's latest chunk, 1F1B runs its other warm-up
    forwards (min(m, pp) − 1), GPipe every other forward (m − 1), interleaved 1F1B its warm-up's remainder and
    at most one steady-state forward (2(pp − 1) with enough micro-batches); V-shaped schedules turn on stage 0
    itself."""
    assert [get_schedule("1f1b").turn_forwards(4, 1, m) for m in (1, 2, 4, 16)] == [0, 1, 3, 3]
    assert [get_schedule("gpipe").turn_forwards(4, 1, m) for m in (1, 8)] == [0, 7]
    assert [get_schedule("interleaved-1f1b").turn_forwards(2, 4, m) for m in (2, 4, 16)] == [1, 2, 2]
    assert get_schedule("interleaved-1f1b").turn_forwards(4, 2, 16) == 6
    assert get_schedule("zb-h1").turn_forwards(4, 1, 8) == 3
    assert get_schedule("dualpipe").turn_forwards(4, 2, 8) == 0


@pytest.mark.parametrize("name", schedule_names())
def test_turn_forwards_stop_growing_where_they_are_read(name: str) -> None:
    """``turn_forwards`` reads the order at m ≤ 2·pp (GPipe counts m − 1): the count read from the full order
    is the same for every m of the grid, beyond the cap too."""
    from scaleacross_opt.schedules.base import _turn_forwards

    schedule = get_schedule(name)
    for pp, v in ((2, 1), (2, 2), (3, 2), (4, 1), (4, 2), (4, 4)):
        for m in (pp, 2 * pp, 3 * pp, 8 * pp * v, 8 * pp * v + pp):
            if schedule.check(pp, v, m) is None:
                assert schedule.turn_forwards(pp, v, m) == _turn_forwards(schedule, pp, v, m), (pp, v, m)


@pytest.mark.parametrize("name", schedule_names())
def test_no_stage_holds_less_than_the_memory_bound_charges_it(name: str) -> None:
    """The CP-SAT memory bound charges building b's first regular stage worst − decline·K micro-batches in
    flight, K the stages before it (pp across), and at least the least-loaded stage's (``in_flight_row``); both
    hold for ``stage_in_flight``, what the validator charges, on every stage of a schedule that is not V-shaped
    (V-shaped ones charge only the least). The decline is tight: some stage holds within one step of it."""
    from scaleacross_opt.cost.memory import stage_in_flight
    from scaleacross_opt.optimizer.cpsat.degrees import IN_FLIGHT_SCALE, in_flight_row

    schedule = get_schedule(name)
    for pp, v, m in itertools.product((2, 3, 4, 8), (1, 2, 4), (1, 2, 3, 4, 8, 32)):
        m *= pp
        if schedule.check(pp, v, m) is not None:
            continue
        held = [IN_FLIGHT_SCALE * x for x in stage_in_flight(name, pp, v, m)]
        worst, least, decline = in_flight_row(name, pp, v, m)
        assert worst == pytest.approx(IN_FLIGHT_SCALE * schedule.in_flight_microbatches(pp, v, m), abs=1)
        assert min(held) >= least - 1e-9, (pp, v, m, held)
        if schedule.head_stage(pp, v) != 0:
            assert all(x >= worst - decline * s - 1e-9 for s, x in enumerate(held)), (pp, v, m, held)
            assert decline == 0 or any(x < worst - (decline - 1) * s for s, x in enumerate(held) if s)


def test_interleaved_stages_hold_two_chunks_fewer_each() -> None:
    """Interleaved 1F1B's warm-up shrinks by 2 chunks (2/v micro-batches) per stage, far less than the worst
    stage's 1/pp share ((v + 1)/v): stage 2 of 4 at v = 4 holds 3.75 of 4.75, not 2.375."""
    from scaleacross_opt.optimizer.cpsat.degrees import in_flight_row

    assert in_flight_row("interleaved-1f1b", 4, 4, 16) == (475, 325, 50)
    assert in_flight_row("interleaved-1f1b", 8, 2, 32) == (1150, 450, 100)
    assert in_flight_row("1f1b", 8, 1, 32) == (800, 100, 100)


@pytest.mark.parametrize("name", [name for name in schedule_names() if get_schedule(name).head_stage(2, 2) == 0])
def test_v_shaped_schedules_claim_each_stages_activations_exactly(name: str) -> None:
    """V-shaped schedules' memory bound charges each building's last regular stage s the claim
    min(worst, least + growth·s), so a claim below ``stage_in_flight`` admits plans that do not fit (ZB-V's
    (p + 1)/2 on every stage let the hetero 405B model's optimum need 94 GiB of 80): the claim is every
    stage's exact share."""
    from scaleacross_opt.cost.memory import stage_in_flight

    schedule = get_schedule(name)
    for pp in (2, 3, 4, 5, 8, 10):
        for m in range(pp, 3 * pp + 2):
            if schedule.check(pp, 2, m) is None:
                held = stage_in_flight(name, pp, 2, m)
                claims = [min(max(held), min(held) + schedule.in_flight_growth_per_stage * s) for s in range(pp)]
                assert claims == pytest.approx(list(held)), (pp, m)


def _longest_paths(graph, weights: tuple[float, float]) -> tuple[dict[int, float], dict[int, tuple[int, int]]]:
    """Per op: the longest path ending there with F, B weighing ``weights`` and W nothing, and its (F, B) ops."""
    weight = {int(OpKind.F): weights[0], int(OpKind.B): weights[1], int(OpKind.W): 0.0}
    length, counts = {}, {}
    prev, dep, kind = graph.stream_prev.tolist(), graph.data_dep.tolist(), graph.kind.tolist()
    for op in graph.order_list:
        before = max((j for j in (prev[op], dep[op]) if j >= 0), key=lambda j: length[j], default=None)
        f, b = counts[before] if before is not None else (0, 0)
        length[op] = (length[before] if before is not None else 0.0) + weight[kind[op]]
        counts[op] = (f + (kind[op] == OpKind.F), b + (kind[op] == OpKind.B))
    return length, counts


def _longest_path(graph, weights: tuple[float, float]) -> float:
    return max(_longest_paths(graph, weights)[0].values())


def _path_op_counts(name: str, pp: int, v: int, m: int, weights: tuple[float, float]) -> tuple[int, int]:
    """(F, B) ops on a longest path of the op graph with F, B weighing ``weights`` and W nothing."""
    length, counts = _longest_paths(op_graph(name, pp, v, m), weights)
    return counts[max(length, key=length.get)]


@pytest.mark.parametrize("name", [name for name in ALL if not get_schedule(name).orders_by_op_times])
def test_critical_path_ops_lie_on_one_path(name: str) -> None:
    """``critical_path_ops``: some path of the op graph holds at least that many F and B ops (the longest path
    with F and B weighing alike, or B twice F, holds exactly that many)."""
    schedule = get_schedule(name)
    checked = 0
    deep = [(p, v, m) for p in (12, 16) for v in (1, 2) for m in (p, 2 * p, 4 * p) if schedule.check(p, v, m) is None]
    for pp, v, m in _grid(name) + deep:
        if pp < 2:
            continue
        expected = schedule.critical_path_ops(pp, v, m)
        found = [_path_op_counts(name, pp, v, m, weights) for weights in ((1.0, 1.0), (1.0, 2.0))]
        assert expected in found, (pp, v, m, expected, found)
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("times", [(1, 1, 1), (1, 2, 1), (2, 1, 1), (3, 4, 1), (1, 1, 3), (8, 5, 3), (8, 16, 1),
                                   (8, 3, 1), (8, 20, 20), (8, 1, 1)])
def test_critical_path_ops_of_orders_that_follow_the_durations(times: tuple[int, int, int]) -> None:
    """ZB-V orders its ops by their durations, so ``critical_path_ops`` counts a path every order holds, 2m + p − 1
    F and B ops (through the tip stage's whole stream): with F and B weighing (1, 1), (1, 2), (2, 1), (1, 0.2)
    and (0.2, 1) and W nothing, the op graph's longest path is at least that long."""
    schedule = get_schedule("zb-v")
    for pp, m in ((2, 2), (2, 5), (4, 4), (4, 9), (4, 16), (8, 8), (8, 24), (8, 64), (16, 16), (16, 32)):
        forward, backward = schedule.critical_path_ops(pp, 2, m)
        assert forward == backward == 2 * m + pp - 1
        graph = op_graph("zb-v", pp, 2, m, times)
        for weights in ((1.0, 1.0), (1.0, 2.0), (2.0, 1.0), (1.0, 0.2), (0.2, 1.0)):
            assert _longest_path(graph, weights) >= weights[0] * forward + weights[1] * backward, (pp, m, weights)


def test_critical_path_ops_of_the_window_schedule() -> None:
    assert get_schedule("crosspipe-unidirectional").critical_path_ops(8, 1, 32) == (39, 60)


@pytest.mark.parametrize("name", ALL)
def test_each_stage_runs_a_chunks_ops_of_one_kind_in_micro_batch_order(name: str) -> None:
    """The CP-SAT bound of when the first stage releases its first gradient bucket
    (``optimizer.cpsat.dp_sync.first_release_us``) counts the m forwards of each chunk and the m − 1 earlier
    backwards of the releasing chunk before its last backward: it rests on every stage running one chunk's F (B,
    W) ops in micro-batch order, in the fixed orders and in those built for other F:B:W durations."""
    schedule = get_schedule(name)
    durations = ((8, 15, 1), (8, 8, 8), (8, 20, 16)) if schedule.orders_by_op_times else ((1, 1, 1),)
    for (pp, v, m), times in itertools.product(_grid(name), durations):
        for ops in schedule.timed_stage_ops(pp, v, m, times):
            for kind, chunk in itertools.product(OpKind, range(v)):
                order = [op.microbatch for op in ops if op.kind is kind and op.chunk == chunk]
                assert order == sorted(order), (pp, v, m, times, kind, chunk)
