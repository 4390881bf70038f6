"""GPipe (Huang et al. 2019): every stage runs all forwards, then all backwards.

Bubble (p−1)/m for any T_F, T_B: each stage idles (p−1)(T_F+T_B) of a makespan (m+p−1)(T_F+T_B).
Activations: all m micro-batches are held at the turn-around.
"""

from __future__ import annotations

from typing import ClassVar

from .base import Op, PipelineSchedule
from .common import backwards, forwards
from .registry import register


@register
class GPipe(PipelineSchedule):
    """All-forward-all-backward."""

    name: ClassVar[str] = "gpipe"
    description: ClassVar[str] = "All forwards then all backwards; bubble (p-1)/m, holds all m micro-batches."

    def stage_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> list[list[Op]]:
        """Same order on every stage: F0..F(m-1), B0..B(m-1)."""
        mbs = range(num_microbatches)
        return [forwards(mbs) + backwards(mbs) for _ in range(pp)]

    def turn_forwards(self, pp: int, virtual_stages: int, num_microbatches: int) -> int:
        """Every other forward runs between micro-batch 0's forward and backward: m − 1."""
        return num_microbatches - 1

    def in_flight_microbatches(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """m."""
        return float(num_microbatches)

    def peak_live_chunks(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, ...]:
        """m on every stage: all forwards run before the first backward."""
        return (num_microbatches,) * pp

    def least_boundary_crossings(self, pp: int, virtual_stages: int, num_microbatches: int) -> int:
        """2: every stage runs all its forwards before any backward, so a path crosses a boundary once forward
        and once back."""
        return 2

    def bubble_fraction(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """(p−1)/m."""
        return (pp - 1) / num_microbatches
