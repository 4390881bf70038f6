"""The pipeline-schedule interface every schedule module implements.

A schedule turns (pp stages, v chunks per stage, m micro-batches) into the op order of each stage.
Ops are F (forward), B (backward; input-gradient only when the schedule splits backward) and W
(weight-gradient, split schedules only). The cost model uses the closed forms; the simulator
executes ``stage_ops``; both enumerate schedules through ``registry``.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar


class OpKind(IntEnum):
    """Kinds of pipeline compute ops."""

    F = 0  # forward of one chunk for one micro-batch
    B = 1  # backward (input-grad only if splits_backward, else full backward)
    W = 2  # weight-grad (only when splits_backward)


@dataclass(frozen=True, slots=True)
class Op:
    """One compute op of one stage: kind, micro-batch index, model-chunk index (0..v-1)."""

    kind: OpKind
    microbatch: int
    chunk: int


class PipelineSchedule(ABC):
    """A pipeline schedule. Subclasses register themselves with ``registry.register``."""

    name: ClassVar[str]
    description: ClassVar[str]
    splits_backward: ClassVar[bool] = False  # B is input-grad only and W ops exist
    orders_by_op_times: ClassVar[bool] = False  # timed_stage_ops depends on the F:B:W duration ratio
    # a forward chunk of one micro-batch runs overlapped with a backward chunk of another (DualPipe), so
    # each one's EP all-to-all hides behind the other's compute
    pairs_microbatches: ClassVar[bool] = False
    # V-shaped schedules: stage s holds at least min(worst, least + growth·s) micro-batches in flight
    # (worst and least: ``cost.memory.stage_in_flight``'s largest and smallest); the CP-SAT memory bound charges each
    # building's last regular stage that
    in_flight_growth_per_stage: ClassVar[float] = 0.0

    def check(self, pp: int, virtual_stages: int, num_microbatches: int) -> str | None:
        """Why this schedule cannot run (pp, v, m), or None when it can."""
        if virtual_stages != 1:
            return f"{self.name} supports virtual_stages=1 only, got {virtual_stages}"
        return None

    def chunk_stage(self, pp: int, virtual_stages: int, chunk: int, stage: int) -> int:
        """Position of (chunk, stage) in the model's layer order, 0..pp·v-1 (default: chunk-major)."""
        return chunk * pp + stage

    def head_stage(self, pp: int, virtual_stages: int) -> int:
        """The stage holding the model's last layers and the LM head (pp−1, or 0 for V-shaped schedules)."""
        last = pp * virtual_stages - 1
        return next(s for s in range(pp) for c in range(virtual_stages)
                    if self.chunk_stage(pp, virtual_stages, c, s) == last)

    @abstractmethod
    def stage_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> list[list[Op]]:
        """Op order of every stage (index = stage)."""

    def timed_stage_ops(self, pp: int, virtual_stages: int, num_microbatches: int,
                        op_times: tuple[int, int, int]) -> list[list[Op]]:
        """Op order for relative F, B, W durations ``op_times``; schedules with a fixed order (every one
        without ``orders_by_op_times``) return ``stage_ops``."""
        return self.stage_ops(pp, virtual_stages, num_microbatches)

    def stage_order(self, pp: int, virtual_stages: int, num_microbatches: int, stage: int) -> list[Op]:
        """The op order of one stage (``stage_ops``; schedules that can build one stage alone do)."""
        return self.stage_ops(pp, virtual_stages, num_microbatches)[stage]

    def trailing_weight_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> int:
        """W ops the LM-head stage runs after its last B (its pending weight gradients at the end)."""
        ops = self.stage_order(pp, virtual_stages, num_microbatches, self.head_stage(pp, virtual_stages))
        last_b = max(i for i, op in enumerate(ops) if op.kind is OpKind.B)
        return sum(op.kind is OpKind.W for op in ops[last_b + 1:])

    def tip_trailing_weight_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> int | None:
        """V-shaped schedules (two chunks per stage): the ops the tip stage (pp − 1) runs after the last W of
        its chunk 1, when they are all chunk-0 W ops — their count; None when other ops follow or the tip's
        chunk 0 finishes its W ops first. (Chunk 1 syncs its gradients in one bucket, released at that W's
        end; chunk 0's follow on the same DP stream.)"""
        if not self.splits_backward or virtual_stages != 2:
            return None
        ops = self.stage_order(pp, virtual_stages, num_microbatches, pp - 1)
        last_w1 = max(i for i, op in enumerate(ops) if op.kind is OpKind.W and op.chunk == 1)
        tail = ops[last_w1 + 1:]
        if not tail or any(op.kind is not OpKind.W or op.chunk != 0 for op in tail):
            return None
        return len(tail)

    def turn_forwards(self, pp: int, virtual_stages: int, num_microbatches: int) -> int | None:
        """Ops stage 0 runs between micro-batch 0's forward and its backward of stage 0's latest model chunk
        (whose output must cross every later position and come back before that backward), when they are
        all forwards — their count; None when other ops run between them. Read from the order at
        m ≤ 2·pp: the warm-up before that backward stops growing there (schedules whose count keeps
        growing with m override this)."""
        capped = min(num_microbatches, 2 * pp)
        if self.check(pp, virtual_stages, capped) is not None:
            capped = num_microbatches
        return _turn_forwards(self, pp, virtual_stages, capped)

    @abstractmethod
    def in_flight_microbatches(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """Peak activations held by the worst stage, in units of one micro-batch through all of that stage's layers."""

    def peak_live_chunks(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, ...]:
        """Each stage's peak of forwarded-but-not-backpropagated chunks in ``stage_ops``'s order (``cost.memory``),
        walked on the order; schedules override it with their closed form (equal to the walk: tests), since the
        CP-SAT schedule table asks for hundreds of (pp, m) and walking them took seconds at 100k GPUs."""
        peaks = []
        for ops in self.stage_ops(pp, virtual_stages, num_microbatches):
            live = peak = 0
            for op in ops:
                live += 1 if op.kind is OpKind.F else (-1 if op.kind is OpKind.B else 0)
                peak = max(peak, live)
            peaks.append(peak)
        return tuple(peaks)

    def least_boundary_crossings(self, pp: int, virtual_stages: int, num_microbatches: int) -> int | None:
        """Closed form of the fewest times, over the pp − 1 stage boundaries, that one path of the op graph
        crosses a boundary at most (``optimizer.cpsat.crossings``: each crossing of a building boundary costs a
        route latency); None where the schedule has none (the op graph is counted instead)."""
        return None

    def critical_path_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, int] | None:
        """(F, B) ops on one path of the op graph, W ops not counted: with every op at least F_min / B_min (any
        stage, any chunk) the pipeline lasts ≥ F·F_min + B·B_min (``optimizer.cpsat.critical_path``). Fixed
        orders: m·v + p − 1 of each — micro-batch 0's forward to the last stage, that stage's m·v F and B, the
        last backward back (tests: the op graph's longest path at F = B, W = 0, for every fixed order). Orders
        that follow the op durations (``orders_by_op_times``): m + v·p − 1 of each, whatever the order —
        micro-batch 0's forward through all v·p chunk positions, then on the stage of the last position (its
        stream runs that chunk's F and B of every micro-batch in turn) the other m − 1 F and the m B, then
        micro-batch m − 1's backward through the other v·p − 1 positions."""
        if self.orders_by_op_times:
            ops = num_microbatches + virtual_stages * pp - 1
        else:
            ops = num_microbatches * virtual_stages + pp - 1
        return ops, ops

    @abstractmethod
    def bubble_fraction(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """Idle time ÷ ideal compute time with uniform stages and free communication (closed form)."""


@functools.lru_cache(maxsize=4096)
def _turn_forwards(schedule: PipelineSchedule, pp: int, virtual_stages: int, num_microbatches: int) -> int | None:
    """``PipelineSchedule.turn_forwards`` read from the stage-0 order (cached: the CP-SAT model asks for every
    (pp, m) it allows)."""
    ops = schedule.stage_order(pp, virtual_stages, num_microbatches, 0)
    chunk = max(range(virtual_stages), key=lambda c: schedule.chunk_stage(pp, virtual_stages, c, 0))
    forward, backward = (ops.index(Op(kind, 0, chunk)) for kind in (OpKind.F, OpKind.B))
    between = ops[forward + 1:backward]
    return None if any(op.kind is not OpKind.F for op in between) else len(between)
