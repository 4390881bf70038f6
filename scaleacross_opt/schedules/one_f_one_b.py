"""1F1B (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's non-interleaved schedule).

Stage s runs min(p−s−1, m) warm-up forwards, then alternates one forward and one backward, then
drains the remaining backwards. Bubble (p−1)/m for any T_F, T_B (same as GPipe); stage 0 holds the
most activations, min(p, m) micro-batches.
"""

from __future__ import annotations

from typing import ClassVar

from .base import Op, PipelineSchedule
from .common import backwards, forwards, one_f_one_b
from .registry import register


def one_f_one_b_stage_order(pp: int, num_microbatches: int, stage: int) -> list[Op]:
    """Stage ``stage``'s 1F1B order with warm-up p−s−1 (shared with ZB-H1)."""
    mbs = range(num_microbatches)
    return one_f_one_b(forwards(mbs), backwards(mbs), pp - stage - 1)


@register
class OneFOneB(PipelineSchedule):
    """One-forward-one-backward."""

    name: ClassVar[str] = "1f1b"
    description: ClassVar[str] = "Megatron 1F1B; bubble (p-1)/m, holds min(p, m) micro-batches on stage 0."

    def stage_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> list[list[Op]]:
        """Warm-up p−s−1 forwards, steady (F, B) pairs, cool-down backwards."""
        return [one_f_one_b_stage_order(pp, num_microbatches, s) for s in range(pp)]

    def stage_order(self, pp: int, virtual_stages: int, num_microbatches: int, stage: int) -> list[Op]:
        """One stage's order alone."""
        return one_f_one_b_stage_order(pp, num_microbatches, stage)

    def in_flight_microbatches(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """min(p, m)."""
        return float(min(pp, num_microbatches))

    def peak_live_chunks(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, ...]:
        """Stage s: min(p − s, m), its warm-up forwards and the first steady one."""
        return tuple(min(pp - s, num_microbatches) for s in range(pp))

    def least_boundary_crossings(self, pp: int, virtual_stages: int, num_microbatches: int) -> int:
        """The boundary after c stages is crossed 2·max(1, ⌊(m + c − p)/2⌋ + 1) times (the warm-ups of its two
        stages differ by one, so a forward and a backward alternate across it about once per micro-batch):
        fewest at c = 1."""
        return 2 * max(1, (num_microbatches + 1 - pp) // 2 + 1)

    def bubble_fraction(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """(p−1)/m."""
        return (pp - 1) / num_microbatches
