"""Cross-DC unidirectional window schedule, in the spirit of CrossPipe (Chen et al., ATC'25, arXiv 2507.00217).

In 1F1B every stage alternates one forward and one backward, so across a slow building boundary
the critical path zig-zags: a forward crosses, the matching backward crosses back, and only then
can the next forward go — the boundary latency L is paid about once per micro-batch (our engine:
2·max(1, ⌊(m + c − p)/2⌋ + 1) crossings with c stages before the boundary, T_F, T_B arbitrary).

``crosspipe-unidirectional`` makes the traffic over the boundary unidirectional in phases: after
1F1B's warm-up of p−s−1 forwards, stage s alternates a *window* of p forwards with a window of p
backwards (1F1B with blocks of p, ``common.one_f_one_b(block=p)``). The p forwards of a window
cross the boundary back to back, their backwards return back to back, so L is paid once per
window and direction: 2·m/p crossings on the critical path (m a multiple of p). Requires m to be a
positive multiple of p, v = 1.

Price: activations min(2p − 1, m) micro-batches on stage 0 (warm-up p−1 plus one window), and at
every window switch the stages wait (p−1)·T_B for the backwards to come back, so the bubble is
(p−1)/m · (1 + (m/p − 1)·T_B/(T_F + T_B)); with T_F = T_B: (p−1)(m + p)/(2·p·m). It wins over 1F1B
when the boundary latency exceeds roughly that extra bubble per saved crossing.
"""

from __future__ import annotations

from typing import ClassVar

from .base import Op, PipelineSchedule
from .common import backwards, forwards, one_f_one_b
from .registry import register


@register
class CrossPipeUnidirectional(PipelineSchedule):
    """1F1B in windows of p micro-batches: forwards cross the boundary in bursts."""

    name: ClassVar[str] = "crosspipe-unidirectional"
    description: ClassVar[str] = (
        "Cross-DC window schedule: p forwards then p backwards per stage; boundary latency paid once per "
        "window (2m/p crossings); needs m % p == 0."
    )

    def check(self, pp: int, virtual_stages: int, num_microbatches: int) -> str | None:
        """v = 1 and m a positive multiple of p."""
        if num_microbatches % pp:
            return f"{self.name} needs micro-batches ({num_microbatches}) divisible by pp ({pp})"
        return super().check(pp, virtual_stages, num_microbatches)

    def stage_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> list[list[Op]]:
        """Warm-up p−s−1 forwards, then windows of p forwards / p backwards, then the drain."""
        return [self.stage_order(pp, virtual_stages, num_microbatches, s) for s in range(pp)]

    def stage_order(self, pp: int, virtual_stages: int, num_microbatches: int, stage: int) -> list[Op]:
        """One stage's order alone."""
        mbs = range(num_microbatches)
        return one_f_one_b(forwards(mbs), backwards(mbs), pp - stage - 1, block=pp)

    def peak_live_chunks(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, ...]:
        """Stage s: min(m, 2p − 1 − s)."""
        return tuple(min(num_microbatches, 2 * pp - 1 - s) for s in range(pp))

    def in_flight_microbatches(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """min(2p − 1, m)."""
        return float(min(2 * pp - 1, num_microbatches))

    def least_boundary_crossings(self, pp: int, virtual_stages: int, num_microbatches: int) -> int:
        """2m/p at every boundary: once per window and direction."""
        return 2 * num_microbatches // pp

    def critical_path_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, int] | None:
        """1F1B's m + p − 1 of each, and (p − 1) more B ops at each of the m/p − 1 window switches."""
        ops = num_microbatches + pp - 1
        return ops, ops + (num_microbatches // pp - 1) * (pp - 1)

    def bubble_fraction(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """(p−1)(m + p)/(2·p·m), i.e. T_F = T_B in (p−1)/m·(1 + (m/p − 1)·T_B/(T_F+T_B))."""
        return (pp - 1) * (num_microbatches + pp) / (2 * pp * num_microbatches)
