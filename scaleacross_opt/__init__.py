"""scaleacross-opt: plan LLM training across data-center buildings.

Python API::

    from scaleacross_opt import load_instance, solve
    result = solve(load_instance("instances/two-buildings-campus.yaml"), time_limit_s=30, seed=0)
    print(result.plan, result.step_time_s)
"""

__version__ = "0.1.0"

import importlib
import sys
import types
from typing import Any

from .errors import InfeasibleError, InputError, NoPlanInTimeError
from .io import load_instance, load_plan

# Imported on first use (the optimizer loads OR-Tools, which the CLI's other commands do not need); the
# attribute is the function itself, so ``help(scaleacross_opt.solve)`` shows its real signature.
_LAZY = {
    "solve": "scaleacross_opt.optimizer",
    "simulate": "scaleacross_opt.simulator",
    "sweep": "scaleacross_opt.capacity.run",
    "requirement": "scaleacross_opt.capacity.requirement",
}


def __getattr__(name: str) -> Any:
    """The functions of ``_LAZY``, imported from their modules on first use."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Package(types.ModuleType):
    """``compare`` names both a submodule and its function. Importing a submodule sets it as an attribute of its
    package, which would shadow a lazily exported function of the same name; this property keeps
    ``scaleacross_opt.compare`` the function (``from scaleacross_opt.compare import …`` still reads the module)."""

    @property
    def compare(self) -> Any:
        """``scaleacross_opt.compare.compare``, imported on first use."""
        return importlib.import_module("scaleacross_opt.compare").compare

    @compare.setter
    def compare(self, module: types.ModuleType) -> None:
        """The import system's setattr of the submodule: kept in ``sys.modules`` only."""


sys.modules[__name__].__class__ = _Package

__all__ = ["InfeasibleError", "InputError", "NoPlanInTimeError", "__version__", "compare", "load_instance", "load_plan",
           "requirement", "simulate", "solve", "sweep"]
