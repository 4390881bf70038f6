"""The result of timing one step, shared by the closed-form estimate and the simulator."""

from __future__ import annotations

from dataclasses import dataclass, field

BREAKDOWN_KEYS = (
    "compute_s",  # slowest pipeline's busy compute time (incl. recompute)
    "bubble_s",  # pipeline idle time from the schedule's fill/drain and imbalance
    "exposed_tp_s",
    "exposed_cp_s",
    "exposed_ep_s",
    "exposed_pp_s",  # point-to-point activation transfers on the critical path
    "exposed_dp_s",  # gradient sync not hidden behind backward
    "optimizer_s",
)


@dataclass(frozen=True)
class StepReport:
    """Step time and its decomposition. ``breakdown`` has exactly ``BREAKDOWN_KEYS``."""

    step_time_s: float
    mfu: float
    tokens_per_s: float
    memory_gib_per_gpu: float
    memory_capacity_gib: float  # HBM of the GPU whose memory is tightest (the one memory_gib_per_gpu is for)
    fits_memory: bool
    breakdown: dict[str, float]
    simulated: bool
    details: dict[str, object] = field(default_factory=dict)  # simulator extras: per-stage busy/idle, in-flight

    @property
    def memory_text(self) -> str:
        """Memory of the tightest GPU against its HBM, e.g. '72.3 / 80.0 GiB' (+ DOES NOT FIT)."""
        return (f"{self.memory_gib_per_gpu:.1f} / {self.memory_capacity_gib:.1f} GiB"
                + ("" if self.fits_memory else "  DOES NOT FIT"))

    def to_json(self) -> dict[str, object]:
        """The machine-readable form printed by `estimate --json` / `simulate --json`."""
        out: dict[str, object] = {
            "step_time_s": self.step_time_s,
            "mfu": self.mfu,
            "tokens_per_s": self.tokens_per_s,
            "memory_gib_per_gpu": self.memory_gib_per_gpu,
            "memory_capacity_gib": self.memory_capacity_gib,
            "fits_memory": self.fits_memory,
            "breakdown": dict(self.breakdown),
        }
        if self.simulated:
            out["simulated"] = True
            out.update(self.details)
        return out
