"""One point of a sweep: derive the instance, solve it (or compare methods on it), record the outcome."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import InfeasibleError, InputError, NoPlanInTimeError
from ..spec import Instance
from .store import MethodResult, SweepRecord


@dataclass(frozen=True)
class PointTask:
    """Everything a worker process needs to evaluate one point (picklable)."""

    base: Instance
    digest: str  # store.instance_digest(base)
    source: str  # the base instance's file, for error messages
    params: dict[str, Any]
    seed: int
    time_limit_s: float
    methods: tuple[str, ...] | None
    threads: int  # CP-SAT workers of each solve: the CPUs the executor reserves for the point

    def record(self, **outcome: Any) -> SweepRecord:
        """This point's record with ``outcome`` (status, reason, results)."""
        return SweepRecord(instance=self.digest, params=self.params, seed=self.seed, time_limit_s=self.time_limit_s,
                           methods=list(self.methods) if self.methods is not None else None, **outcome)


def _solve(instance: Instance, task: PointTask) -> list[MethodResult]:
    from ..optimizer import solve

    result = solve(instance, time_limit_s=task.time_limit_s, seed=task.seed, threads=task.threads)
    if result.status == "interrupted":  # Ctrl-C reached the worker: the point is not finished
        raise KeyboardInterrupt
    return [MethodResult(method="solve", step_time_s=result.step_time_s, mfu=result.report.mfu,
                         wall_s=result.stats.wall_s, simulator_calls=result.stats.candidates_simulated,
                         status=result.status, plan=result.plan.model_dump(mode="json"))]


def _compare(instance: Instance, task: PointTask) -> list[MethodResult]:
    from ..compare import compare

    rows = compare(instance, methods=list(task.methods or ()), time_limit_s=task.time_limit_s, seed=task.seed,
                   threads=task.threads)
    fields = set(MethodResult.model_fields)
    return [MethodResult.model_validate({k: v for k, v in row.to_json().items() if k in fields}) for row in rows]


def run_point(task: PointTask) -> SweepRecord:
    """Evaluate ``task``; a point without a plan is recorded with its status and reason, never raised."""
    try:
        instance = task.base.with_updates(task.params, source=task.source)
        results = _solve(instance, task) if task.methods is None else _compare(instance, task)
    except InputError as err:
        return task.record(status="input_error", reason="; ".join(str(issue) for issue in err.issues))
    except InfeasibleError as err:
        return task.record(status="infeasible", reason=err.reason)
    except NoPlanInTimeError as err:
        return task.record(status="no_plan_in_time", reason=err.reason)
    return task.record(status="ok", results=results)
