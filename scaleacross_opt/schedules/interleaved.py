"""Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's virtual-pipeline schedule).

Each stage holds v model chunks; chunk c of stage s is layer position c·p + s (chunk-major, the
default ``chunk_stage``), so a micro-batch wraps from the last stage back to stage 0 between chunks.
Requires v ≥ 2 and m a multiple of p (Megatron's original constraint): stage s runs its k-th
forward on chunk (k // p) mod v, micro-batch (k // (p·v))·p + k mod p; backwards visit the
chunks in reverse. Warm-up = min(2(p−s−1) + (v−1)·p, m·v) forwards, then (F, B) pairs, then the
remaining backwards.

Bubble (p−1)/(v·m). Activations on stage 0: min((v+1)·p − 1, m·v) chunk-micro-batches of 1/v of the
stage's layers each, i.e. min(p + (p−1)/v, m) micro-batches.
"""

from __future__ import annotations

from typing import ClassVar

from .base import Op, OpKind, PipelineSchedule
from .common import one_f_one_b
from .registry import register


@register
class Interleaved1F1B(PipelineSchedule):
    """Megatron's interleaved (virtual-stage) 1F1B."""

    name: ClassVar[str] = "interleaved-1f1b"
    description: ClassVar[str] = (
        "Megatron interleaved 1F1B with v chunks per stage; bubble (p-1)/(v m); needs v>=2, m % p == 0."
    )

    def check(self, pp: int, virtual_stages: int, num_microbatches: int) -> str | None:
        """v ≥ 2 and m a positive multiple of p."""
        if virtual_stages < 2:
            return f"{self.name} needs virtual_stages >= 2, got {virtual_stages}"
        if num_microbatches % pp:
            return f"{self.name} needs micro-batches ({num_microbatches}) divisible by pp ({pp})"
        return None

    def stage_ops(self, pp: int, virtual_stages: int, num_microbatches: int) -> list[list[Op]]:
        """Megatron's chunk-interleaved forward/backward sequence with its warm-up per stage."""
        v, total = virtual_stages, num_microbatches * virtual_stages

        def op(kind: OpKind, k: int) -> Op:
            chunk = (k // pp) % v
            return Op(kind, (k // (pp * v)) * pp + k % pp, chunk if kind is OpKind.F else v - 1 - chunk)

        fwd = [op(OpKind.F, k) for k in range(total)]
        bwd = [op(OpKind.B, k) for k in range(total)]
        return [one_f_one_b(fwd, bwd, 2 * (pp - s - 1) + (v - 1) * pp) for s in range(pp)]

    def in_flight_microbatches(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """min((v+1)·p − 1, m·v) / v."""
        return min((virtual_stages + 1) * pp - 1, num_microbatches * virtual_stages) / virtual_stages

    def peak_live_chunks(self, pp: int, virtual_stages: int, num_microbatches: int) -> tuple[int, ...]:
        """Stage s: min(2(p − s − 1) + (v − 1)·p + 1, m·v), Megatron's warm-up forwards and the first steady one."""
        v = virtual_stages
        return tuple(min(2 * (pp - s - 1) + (v - 1) * pp + 1, num_microbatches * v) for s in range(pp))

    def bubble_fraction(self, pp: int, virtual_stages: int, num_microbatches: int) -> float:
        """(p−1)/(v·m)."""
        return (pp - 1) / (virtual_stages * num_microbatches)
