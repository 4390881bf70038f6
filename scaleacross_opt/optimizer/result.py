"""What ``solve`` returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..cost.report import StepReport
from ..spec import Plan


@dataclass
class SolveStats:
    """How the search went."""

    status: str  # optimal | within_bound_error | time_limit | exhausted | interrupted (Ctrl-C: best so far)
    wall_s: float = 0.0
    cpsat_wall_s: float = 0.0
    simulate_wall_s: float = 0.0
    screen_wall_s: float = 0.0  # in the closed form that decides which plans to simulate (``screened``)
    rounds: int = 0
    candidates_simulated: int = 0  # plans whose simulated step the search knows (reused ones included)
    simulations_reused: int = 0  # of those, plans whose workload was simulated before (``simulator.memo``)
    candidates_rejected: int = 0  # failed the independent validator (memory beyond the model's bound)
    screened: int = 0  # plans whose closed form was computed to decide whether to simulate them
    refused: int = 0  # plans left unsimulated: they could not be priced before the deadline (``simulator.paced``)
    estimate_overshoot: float = 0.0  # the largest closed form ÷ simulated − 1 the screen allowed for
    lower_bound_s: float = 0.0  # no unexplored plan simulates faster than this (up to the bound error)
    gap: float = 0.0  # (best simulated − lower bound) / best simulated, ≥ 0
    bound_error: float = 0.0  # max over simulated plans of CP-SAT bound ÷ simulated − 1 (> 0: bound not valid)
    bound_ratio_min: float = 0.0  # min over simulated plans of CP-SAT bound ÷ simulated (tightness)
    history: list[dict[str, float]] = field(default_factory=list)


@dataclass
class SolveResult:
    """The best plan found, its simulated and estimated step time, and search statistics."""

    plan: Plan
    report: StepReport  # simulated
    estimate_step_time_s: float  # closed-form estimate of the same plan
    cpsat_bound_s: float  # the CP-SAT objective of the plan (its linearised lower bound)
    stats: SolveStats

    @property
    def step_time_s(self) -> float:
        """Simulated step time of the plan."""
        return self.report.step_time_s

    @property
    def breakdown(self) -> dict[str, float]:
        """Simulated step-time breakdown."""
        return self.report.breakdown

    @property
    def status(self) -> str:
        """Search status (see SolveStats.status)."""
        return self.stats.status

    def to_json(self) -> dict[str, object]:
        """The `solve --json` document."""
        stats = asdict(self.stats)
        history = stats.pop("history")
        return {
            "plan": self.plan.model_dump(mode="json"),
            "step_time_s": self.report.step_time_s,
            "estimate_step_time_s": self.estimate_step_time_s,
            "cpsat_bound_s": self.cpsat_bound_s,
            "mfu": self.report.mfu,
            "tokens_per_s": self.report.tokens_per_s,
            "memory_gib_per_gpu": self.report.memory_gib_per_gpu,
            "breakdown": self.report.breakdown,
            "solver": {**stats, "history": history},
        }
