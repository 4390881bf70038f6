"""ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", §6: the V-shape zero-bubble schedule).

Two chunks per stage in a V: chunk 0 is layer position s, chunk 1 is position 2p−1−s, so the
forward goes down the stages and back up (the turn-around at stage p−1 needs no transfer) and
the first and last layers share stage 0. Backward is split into B and W. The op order is a greedy
list schedule (free transfers) with priority B(chunk 0) > B(chunk 1) > F(chunk 1) > F(chunk 0) > W
and at most 2p chunk activations held per stage (F to W) — p micro-batches through the whole stage,
the same as 1F1B. With unit times (T_F = T_B = T_W) it reproduces the paper's handcrafted ZB-V shape at p ≤ 4;
the simulator also computes it for the plan's own F:B:W ratio (``timed_stage_ops``) and runs the
faster of the two, as the paper's schedule search picks from profiled times. Requires m ≥ p.

Bubble: the last stage cannot start before (p−1)·T_F, so with T_F = T_B = T_W per chunk the makespan is
at least (6m + p − 1)·T and the bubble fraction at least (p−1)/(6m) (the paper rounds this to "zero
bubble"); ``bubble_fraction`` returns that bound. The greedy order attains it for p ≤ 4; for larger p it
is longer, by an extra idle time that, once m ≥ 3p, stays within 2·T of 4·T at p = 16, 8·T at p = 32 and
18·T at p = 64 (i.e. ≤ p/(6m) extra; measured for every p ≤ 32 up to m = 10p, and at p = 64), a known
gap of this simplification versus the paper's handcrafted order. It is one reason ZB-V plans at p ≥ 16
idle more than DualPipe's V at the same degrees, whose order idles exactly (p − 1)·T with unit op times
(campus 405B, tp2 cp8 pp32 dp32 with DP across, simulated: bubble 0.62 s against 0.42 s, step 5.11 s
against 4.93 s).
"""

from __future__ import annotations

import functools
from typing import ClassVar

from .base import Op, OpKind, PipelineSchedule
from .common import UNIT_OP_TIMES, greedy_list_order, v_shape_check, v_shape_position
from .registry import register

# Orders of at most this many stage × micro-batch pairs are kept (``_v_order``): a search asks for one (p, m, F:B:W)
# many times, from the closed form and the simulator of each neighbour (cross-region at 10 s: 151 orders built,
# 44 distinct, 1.2 s); an entry holds 6·p·m ops, so larger ones are rebuilt rather than kept.
CACHED_ORDER_STAGE_MICROBATCHES = 2048


@functools.lru_cache(maxsize=64)
def _v_order(pp: int, num_microbatches: int, op_times: tuple[int, int, int]) -> tuple[tuple[Op, ...], ...]:
    """The greedy V order (``ZeroBubbleV.timed_stage_ops``), cached."""
    return tuple(map(tuple, _build_v_order(pp, num_microbatches, op_times)))


def _build_v_order(pp: int, num_microbatches: int, op_times: tuple[int, int, int]) -> list[list[Op]]:
    """Greedy list order under the 2p chunk-activation limit with priority B0 > B1 > F1 > F0 > W."""
    positions = [[v_shape_position(pp, c, s) for s in range(pp)] for c in range(2)]
    priority = [(OpKind.B, 0), (OpKind.B, 1), (OpKind.F, 1), (OpKind.F, 0), (OpKind.W, 0)]
    return greedy_list_order(pp, num_microbatches, positions, priority, 2 * pp, op_times)


@register
class ZeroBubbleV(PipelineSchedule):
    """ZB-V: V-shape placement, split backward, 1F1B memory."""

    name: ClassVar[str] = "zb-v"
    description: ClassVar[str] = "Zero-bubble V: 2 chunks/stage in a V, B/W split; bubble (p-1)/(6m), 1F1B memory."
    splits_backward: ClassVar[bool] = True
    orders_by_op_times: ClassVar[bool] = True
    in_flight_growth_per_stage: ClassVar[float] = 0.5  # stage s holds min(p, (m + 1 + s)/2)

    def check(self, pp: int, virtual_stages: int, num_microbatches: int) -> str | None:
        """v = 2 and m ≥ p."""
        return v_shape_check(self.name, pp, virtual_stages, num_microbatches, pp)

    def chunk_stage(self, pp: int, virtual_stages: int, chunk: int, stage: int) -> int:
        """V shape: chunk 0 → s, chunk 1 → 2p−1−s."""
        return v_shape_position(pp, chunk, stage)

    def stage_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> list[list[Op]]:
        """Greedy unit-time order under the 2p chunk-activation limit."""
        return self.timed_stage_ops(pp, virtual_stages, num_microbatches, UNIT_OP_TIMES)

    def timed_stage_ops(self, pp: int, virtual_stages: int, num_microbatches: int,
                        op_times: tuple[int, int, int]) -> list[list[Op]]:
        """Greedy order for F, B, W durations ``op_times`` under the 2p chunk-activation limit (fresh lists)."""
        if pp * num_microbatches > CACHED_ORDER_STAGE_MICROBATCHES:
            return _build_v_order(pp, num_microbatches, op_times)
        return [list(ops) for ops in _v_order(pp, num_microbatches, op_times)]

    def tip_trailing_weight_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> int | None:
        """1, for any op durations: the tip's last B ops are B1 and then B0 of the last micro-batch (chunk 0
        follows chunk 1 on the backward at the tip; B ops run in micro-batch order), every F precedes them,
        and W ops run oldest first, so W0 of the last micro-batch alone follows W1's."""
        return 1

    def critical_path_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, int]:
        """2m + p − 1 F and B ops, whatever the op durations (≥ the base class's m + 2p − 1 since m ≥ p): the
        tip stage p − 1 holds the adjacent positions p − 1 and p, so its stream runs all 2m F and 2m B ops
        (B ops in micro-batch order, B1 before B0 of a micro-batch) up to and including B0 of the last
        micro-batch; micro-batch 0's forward reaches it through p − 1 F ops, and that last B0 goes back
        through p − 1 B ops (tests: the op graph's longest path, ten F:B:W ratios, p ≤ 16)."""
        ops = 2 * num_microbatches + pp - 1
        return ops, ops

    def peak_live_chunks(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, ...]:
        """Stage s: min(2p, m + 1 + s) chunks in the unit-time order (the 2p cap binds from m ≥ 2p − 1 − s)."""
        return tuple(min(2 * pp, num_microbatches + 1 + s) for s in range(pp))

    def in_flight_microbatches(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """p (2p half-stage chunks), like 1F1B."""
        return float(pp)

    def bubble_fraction(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """(p−1)/(6m) with T_F = T_B = T_W (the lower bound; exact for p ≤ 4)."""
        return (pp - 1) / (6 * num_microbatches)
