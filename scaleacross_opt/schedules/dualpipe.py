"""DualPipe (DeepSeek-V3 technical report, 2024), in its V-shape ("cut-in-half") form DualPipeV.

DualPipe feeds two micro-batch streams from both ends of a p-rank pipeline, each rank holding the
layers of position r for one direction and p−1−r for the other (two parameter copies). Folding the
pipeline in half at its middle rank maps both streams onto a V over half the ranks — the layout
of DeepSeek's DualPipeV — which the (pp, v) workload model expresses directly: v = 2, chunk 0 is
position s, chunk 1 is position 2p−1−s (as in ZB-V), one parameter copy.

Op order of rank r (DeepSeek's DualPipeV step structure; X&Y = an overlapped forward/backward
pair, run here as X then Y because compute-communication overlap inside ops is already in their
durations; a full backward is B immediately followed by its W; W ops run oldest first):
 1. 2(p−r−1) × F0;                2. (r+1) × [F0, F1];
 3. (p−r−1) × [B1 (W queued), W, F1];
 4. (m−2p+r+1) × [F0&B1, F1&B0] (the last rank's first pair is F0 then B1, not overlapped);
 5. (p−r−1) × [B1, F1&B0];
 6. (r+1) × [B1, B0], weight grads queued from the middle iteration on;
 7. (p−r−1) × [W, B0 (W queued)];  8. the remaining W ops.
Requires m ≥ 2p. Activations (F to W): 2p+1 chunk activations on every stage, i.e. p + 1/2
micro-batches through the whole stage (DeepSeek's table: PP+1 chunks).

Bubble with T_F = T_B = T_W per chunk and free transfers: the makespan is (6m + p − 1)·T (only the
unavoidable fill of the last stage remains), so the fraction is (p−1)/(6m) — verified by the
simulator for p ≤ 8. (DeepSeek's (PP/2−1)(F&B + B − 3W) counts overlapped F&B as one op.)
"""

from __future__ import annotations

from typing import ClassVar

from .base import Op, OpKind, PipelineSchedule
from .common import v_shape_check, v_shape_position
from .registry import register


def _dualpipev_order(pp: int, rank: int, num_microbatches: int) -> list[Op]:
    """DualPipeV step structure for one rank (see the module docstring)."""
    out: list[Op] = []
    nxt = {(k, c): 0 for k in (OpKind.F, OpKind.B) for c in (0, 1)}
    weights: list[Op] = []

    def run(kind: OpKind, chunk: int, queue_weight: bool = False) -> None:
        mb = nxt[kind, chunk]
        nxt[kind, chunk] += 1
        out.append(Op(kind, mb, chunk))
        if kind is OpKind.B:
            (weights if queue_weight else out).append(Op(OpKind.W, mb, chunk))

    def weight() -> None:
        out.append(weights.pop(0))

    before, after = pp - rank - 1, rank + 1
    for _ in range(2 * before):
        run(OpKind.F, 0)
    for _ in range(after):
        run(OpKind.F, 0)
        run(OpKind.F, 1)
    for _ in range(before):
        run(OpKind.B, 1, queue_weight=True)
        weight()
        run(OpKind.F, 1)
    for _ in range(num_microbatches - 2 * pp + rank + 1):
        run(OpKind.F, 0)
        run(OpKind.B, 1)
        run(OpKind.F, 1)
        run(OpKind.B, 0)
    for _ in range(before):
        run(OpKind.B, 1)
        run(OpKind.F, 1)
        run(OpKind.B, 0)
    split = False
    for i in range(after):
        split = split or (i == after // 2 and rank % 2 == 1)
        run(OpKind.B, 1, queue_weight=split)
        split = split or (i == after // 2 and rank % 2 == 0)
        run(OpKind.B, 0, queue_weight=split)
    for _ in range(before):
        weight()
        run(OpKind.B, 0, queue_weight=True)
    while weights:
        weight()
    return out


@register
class DualPipe(PipelineSchedule):
    """DualPipe as DualPipeV (V-shape, two chunks per stage)."""

    name: ClassVar[str] = "dualpipe"
    description: ClassVar[str] = "DeepSeek DualPipe in its V form (DualPipeV): 2 chunks/stage, B/W split; m >= 2p."
    splits_backward: ClassVar[bool] = True
    pairs_microbatches: ClassVar[bool] = True  # DeepSeek-V3 §3.2.1: forward and backward chunks overlapped

    def check(self, pp: int, virtual_stages: int, num_microbatches: int) -> str | None:
        """v = 2 and m ≥ 2p."""
        return v_shape_check(self.name, pp, virtual_stages, num_microbatches, 2 * pp)

    def chunk_stage(self, pp: int, virtual_stages: int, chunk: int, stage: int) -> int:
        """V shape: chunk 0 → s, chunk 1 → 2p−1−s."""
        return v_shape_position(pp, chunk, stage)

    def stage_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> list[list[Op]]:
        """DualPipeV order per rank."""
        return [_dualpipev_order(pp, r, num_microbatches) for r in range(pp)]

    def tip_trailing_weight_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> int | None:
        """1: the tip rank (pp − 1) ends with its pp B1/B0 pairs, the last pair's W ops queued (the split
        falls at pair pp // 2, before the last pair's B1 on odd ranks and after it on even ones, so pp ≥ 2
        queues both), and drains its queue oldest first: W0 of the last micro-batch alone follows W1's."""
        return 1

    def stage_order(self, pp: int, virtual_stages: int, num_microbatches: int, stage: int) -> list[Op]:
        """One rank's DualPipeV order."""
        return _dualpipev_order(pp, stage, num_microbatches)

    def peak_live_chunks(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, ...]:
        """2p + 1 chunks on every stage (m ≥ 2p)."""
        return (2 * pp + 1,) * pp

    def in_flight_microbatches(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """p + 1/2 (2p+1 half-stage chunks)."""
        return pp + 0.5

    def least_boundary_crossings(self, pp: int, virtual_stages: int, num_microbatches: int) -> int:
        """2·⌊(m + 1)/2⌋ + 2 at every boundary: its overlapped forward-backward pairs cross about once per
        micro-batch (the op graph's count at pp ≤ 8, m ≤ 40 in the tests; at pp ≤ 16, m < 100 once)."""
        return 2 * ((num_microbatches + 1) // 2) + 2

    def bubble_fraction(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """(p−1)/(6m) with T_F = T_B = T_W."""
        return (pp - 1) / (6 * num_microbatches)
