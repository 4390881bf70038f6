"""scaleacross-opt: plan LLM training across data-center buildings.

Python API::

    from scaleacross_opt import load_instance, solve
    result = solve(load_instance("instances/two-buildings-campus.yaml"), time_limit_s=30, seed=0)
    print(result.plan, result.step_time_s)
"""

__version__ = "0.1.0"

from typing import Any

from .errors import InfeasibleError, InputError, NoPlanInTimeError
from .io import load_instance, load_plan


def __getattr__(name: str) -> Any:
    """``solve`` is imported on first use (the optimizer loads OR-Tools, which the CLI's other commands
    do not need); ``help(scaleacross_opt.solve)`` shows ``scaleacross_opt.optimizer.solve`` itself."""
    if name == "solve":
        from .optimizer import solve

        return solve
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["InfeasibleError", "InputError", "NoPlanInTimeError", "__version__", "load_instance", "load_plan", "solve"]
