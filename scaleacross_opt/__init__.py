"""scaleacross-opt: plan LLM training across data-center buildings.

Python API::

    from scaleacross_opt import load_instance, solve
    result = solve(load_instance("instances/two-buildings-campus.yaml"), time_limit_s=30, seed=0)
    print(result.plan, result.step_time_s)
"""

__version__ = "0.1.0"

import importlib
from typing import Any

from .errors import InfeasibleError, InputError, NoPlanInTimeError
from .io import load_instance, load_plan

# Imported on first use (the optimizer loads OR-Tools, which the CLI's other commands do not need); the
# attribute is the function itself, so ``help(scaleacross_opt.solve)`` shows its real signature.
_LAZY = {
    "solve": "scaleacross_opt.optimizer",
    "compare": "scaleacross_opt.compare",
    "simulate": "scaleacross_opt.simulator",
    "sweep": "scaleacross_opt.capacity.run",
    "requirement": "scaleacross_opt.capacity.requirement",
}


def __getattr__(name: str) -> Any:
    """The functions of ``_LAZY``, imported from their modules on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["InfeasibleError", "InputError", "NoPlanInTimeError", "__version__", "compare", "load_instance", "load_plan",
           "requirement", "simulate", "solve", "sweep"]
