"""ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", §2.1 handcrafted schedule).

Backward is split into B (input gradient, on the critical path) and W (weight gradient, free to
move). Stage s runs the 1F1B order with every B followed by the W of an older micro-batch, keeping
the newest s W ops pending (stage 0 none, the last stage p−1); the pending W ops fill the cool-down.
Every stage then holds exactly min(p, m) micro-batches from F to W, like 1F1B's stage 0 (the
paper's "same peak memory as 1F1B"). Requires m ≥ p.

Bubble: each stage idles (p−1)(T_F + T_B − T_W) (paper), so with T_F = T_B = T_W the fraction of the
ideal 3·m·T is (p−1)/(3m), a third of 1F1B's.
"""

from __future__ import annotations

from typing import ClassVar

from .base import Op, PipelineSchedule
from .common import defer_weight_grads
from .one_f_one_b import one_f_one_b_stage_order
from .registry import register


@register
class ZeroBubbleH1(PipelineSchedule):
    """ZB-H1: 1F1B with split backward and delayed weight gradients."""

    name: ClassVar[str] = "zb-h1"
    description: ClassVar[str] = "Zero-bubble H1 (B/W split, W delayed); bubble (p-1)/(3m), 1F1B memory."
    splits_backward: ClassVar[bool] = True

    def check(self, pp: int, virtual_stages: int, num_microbatches: int) -> str | None:
        """v = 1 and m ≥ p."""
        if num_microbatches < pp:
            return f"{self.name} needs at least pp={pp} micro-batches, got {num_microbatches}"
        return super().check(pp, virtual_stages, num_microbatches)

    def stage_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> list[list[Op]]:
        """1F1B order per stage, B split, s weight-grad ops kept pending on stage s."""
        return [self.stage_order(pp, virtual_stages, num_microbatches, s) for s in range(pp)]

    def stage_order(self, pp: int, virtual_stages: int, num_microbatches: int, stage: int) -> list[Op]:
        """One stage's order alone."""
        return defer_weight_grads(one_f_one_b_stage_order(pp, num_microbatches, stage), stage)

    def trailing_weight_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> int:
        """The last stage keeps p−1 W ops pending: they and its last B's own W follow that B."""
        return min(pp, num_microbatches)

    def in_flight_microbatches(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """p on every stage (m ≥ p)."""
        return float(pp)

    def peak_live_chunks(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, ...]:
        """1F1B's min(p − s, m): a chunk is released at its B, and the deferred W ops hold no activations."""
        return tuple(min(pp - s, num_microbatches) for s in range(pp))

    def least_boundary_crossings(self, pp: int, virtual_stages: int, num_microbatches: int) -> int:
        """1F1B's, 2·max(1, ⌊(m + 1 − p)/2⌋ + 1): the W ops only fill its gaps; its F and B alternate as in 1F1B."""
        return 2 * max(1, (num_microbatches + 1 - pp) // 2 + 1)

    def bubble_fraction(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """(p−1)(T_F+T_B−T_W) / (m(T_F+T_B+T_W)) with T_F = T_B = T_W: (p−1)/(3m)."""
        return (pp - 1) / (3 * num_microbatches)
