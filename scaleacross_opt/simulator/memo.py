"""Reuse of simulations whose inputs are identical.

Plans that differ only in settings a given plan's workload does not depend on — TP/GEMM overlap at tp = 1,
the cross-building network when nothing the setting governs crosses, a collective algorithm that prices
alike at a group's size, a gradient bucket that leaves the buckets as they were — build byte-identical
step workloads (``cost.workload.StepWorkload``), and the simulator is a pure function of its workload.
A search proposes many such twins (on the MoE instance about half of a 30 s search's simulations), so
``SimulationMemo`` keys each simulated step by a digest of the pickled workload and of the report's other
inputs (model FLOPs, peak FLOP/s, tokens), and returns a twin the stored report with its own memory
figures (the only report fields the workload does not determine). One memo per search: it holds a few
hundred reports, not their timelines.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..cost.memory import MemoryBreakdown
    from ..cost.report import StepReport
    from ..cost.workload import StepWorkload


def workload_key(workload: StepWorkload, *report_inputs: float) -> bytes:
    """Digest of everything a simulated report depends on apart from memory: the workload's content
    (pickled: arrays by value, in field order) and the report's scalar inputs."""
    payload = pickle.dumps((workload, report_inputs), protocol=pickle.HIGHEST_PROTOCOL)
    return hashlib.blake2b(payload, digest_size=20).digest()


class SimulationMemo:
    """Simulated reports by ``workload_key``; ``reused`` counts the simulations it saved."""

    def __init__(self) -> None:
        self._reports: dict[bytes, StepReport] = {}
        self.reused = 0

    def get(self, key: bytes, memory: MemoryBreakdown) -> StepReport | None:
        """The stored report for ``key`` with ``memory``'s figures, or None when none is stored."""
        report = self._reports.get(key)
        if report is None:
            return None
        self.reused += 1
        return replace(report, memory_gib_per_gpu=memory.total_gib, memory_capacity_gib=memory.capacity_gib,
                       fits_memory=memory.fits)

    def put(self, key: bytes, report: StepReport) -> None:
        """Store a report simulated for ``key``."""
        self._reports[key] = report
